//! Capped collections in the engine: natural order is insertion order, the
//! writer trims with ordinary delete entries, a second engine applying the
//! oplog (a member) ends with the same order and documents without trimming
//! on its own, and a rollback brings trimmed documents back in their place.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, ReadAt, Timestamp, TimestampBson, WriteGate};

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    Engine::open(options).unwrap()
}

fn natural_ids(engine: &Arc<Engine>, ns: &str, reverse: bool) -> Vec<Bson> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let docs = reader
        .scan_natural(ns, Bound::Unbounded, Bound::Unbounded, reverse, usize::MAX)
        .unwrap();
    docs.into_iter().map(|(_, d)| d.get("_id").unwrap().clone()).collect()
}

fn ints(values: &[i32]) -> Vec<Bson> {
    values.iter().map(|v| Bson::Int32(*v)).collect()
}

fn deletes(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let entries = engine.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    entries
        .into_iter()
        .map(|raw| Document::try_from(raw.as_ref()).unwrap())
        .filter(|entry| entry.get_str("op").ok() == Some("d") && entry.get_str("ns").ok() == Some(ns))
        .map(|entry| entry.get_document("o").unwrap().clone())
        .collect()
}

#[test]
fn inserts_keep_their_order_and_trims_are_logged_deletes_that_a_member_applies() {
    let primary_dir = tempfile::tempdir().unwrap();
    let member_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let member = open(member_dir.path());
    primary
        .create_collection("db.c", doc! {"capped": true, "size": 1 << 20, "max": 3})
        .unwrap();
    for id in [8, 2, 5, 1, 9] {
        primary.writer().insert("db.c", doc! {"_id": id}).unwrap();
    }
    assert_eq!(natural_ids(&primary, "db.c", false), ints(&[5, 1, 9]));
    assert_eq!(natural_ids(&primary, "db.c", true), ints(&[9, 1, 5]));
    assert_eq!(deletes(&primary, "db.c"), vec![doc! {"_id": 8}, doc! {"_id": 2}]);
    let totals = primary
        .reader(ReadAt::Latest)
        .unwrap()
        .capped_totals("db.c")
        .unwrap()
        .unwrap();
    assert_eq!(totals.count, 3);

    let entries = primary.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    for chunk in entries.chunks(2) {
        member.apply_batch(chunk).unwrap();
    }
    assert_eq!(natural_ids(&member, "db.c", false), ints(&[5, 1, 9]));
    assert_eq!(
        member.db_hash("db", None).unwrap(),
        primary.db_hash("db", None).unwrap()
    );
    // The member logged no deletes of its own.
    assert_eq!(deletes(&member, "db.c"), deletes(&primary, "db.c"));
}

#[test]
fn a_rollback_restores_trimmed_documents_in_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine
        .create_collection("db.c", doc! {"capped": true, "size": 1 << 20, "max": 2})
        .unwrap();
    engine.writer().insert("db.c", doc! {"_id": "b"}).unwrap();
    let before = engine.writer().insert("db.c", doc! {"_id": "a"}).unwrap();
    engine.writer().insert("db.c", doc! {"_id": "c"}).unwrap();
    assert_eq!(
        natural_ids(&engine, "db.c", false),
        vec![Bson::from("a"), Bson::from("c")]
    );
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(before.ts).unwrap();
    engine.set_write_gate(WriteGate::Open { term: -1 });
    assert_eq!(
        natural_ids(&engine, "db.c", false),
        vec![Bson::from("b"), Bson::from("a")]
    );
    let newest = engine.oplog_read_newest(1).unwrap();
    assert_eq!(Timestamp::from_bson(newest[0].get_timestamp("ts").unwrap()), before.ts);
}

#[test]
fn a_document_larger_than_the_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine
        .create_collection("db.c", doc! {"capped": true, "size": 256})
        .unwrap();
    let error = engine
        .writer()
        .insert("db.c", doc! {"_id": 1, "p": "x".repeat(300)})
        .unwrap_err();
    assert!(error.to_string().contains("exceeds cappedMaxSize"), "{error}");
    assert!(natural_ids(&engine, "db.c", false).is_empty());
}
