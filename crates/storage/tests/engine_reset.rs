//! Reset to empty (a too-stale member resyncing): a member that applied
//! entries, with data in its checkpoint and above it, becomes an empty
//! member that takes bulk loads and a source's entries again, keeping its
//! local documents; a crash after any step of the reset (the engine dropped
//! without shutdown) reopens into that same empty state, never into a
//! half-wiped one.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Document, RawDocumentBuf};
use slipstream_storage::engine::{EngineOptions, ResetStep, RESET_MARKER_FILE_NAME};
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError, WriteGate};

const LOCAL_NAME: &str = "replset.election";

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.replicated = true;
    options.journal_commit_interval_ms = 2;
    options.checkpoint_interval_ms = 60_000;
    Engine::open(options).unwrap()
}

/// Data in the checkpoint and above it, in two databases, with an index
/// and a local document; returns with the write gate closed.
fn populate(engine: &Arc<Engine>) {
    engine
        .local()
        .write(LOCAL_NAME, &doc! {"_id": "election", "term": 7i64})
        .unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    engine
        .create_indexes(
            "app.users",
            vec![IndexSpec {
                name: "email_1".into(),
                key: doc! {"email": 1},
                ..Default::default()
            }],
        )
        .unwrap();
    let mut writer = engine.writer();
    for i in 0..50 {
        writer
            .insert("app.users", doc! {"_id": i, "email": format!("u{i}")})
            .unwrap();
    }
    drop(writer);
    let last = engine.last_applied();
    engine.set_stable_timestamp(last.ts);
    engine.wait_durable(last.ts).unwrap();
    engine.checkpoint_now().unwrap();
    assert_eq!(engine.checkpoint_timestamp(), last.ts);
    let mut writer = engine.writer();
    for i in 0..20 {
        writer.insert("other.c", doc! {"_id": i}).unwrap();
    }
    drop(writer);
    engine.wait_durable(engine.last_applied().ts).unwrap();
    engine.set_write_gate(WriteGate::Closed);
}

fn assert_empty(engine: &Arc<Engine>, dir: &std::path::Path) {
    assert_eq!(engine.list_databases(), vec!["local".to_string()]);
    assert!(engine.last_applied().is_null(), "{:?}", engine.last_applied());
    assert!(engine.oplog_read(Bound::Unbounded, 10, 1 << 20).unwrap().is_empty());
    assert_eq!(engine.reader(ReadAt::Latest).unwrap().count("app.users").unwrap(), 0);
    assert_eq!(engine.checkpoint_timestamp(), slipstream_storage::Timestamp::ZERO);
    assert_eq!(
        engine.local().read(LOCAL_NAME).unwrap(),
        Some(doc! {"_id": "election", "term": 7i64})
    );
    assert!(!dir.join(RESET_MARKER_FILE_NAME).exists());
}

/// What an initial sync does next: a bulk load, then a source's entries.
fn sync_again(engine: &Arc<Engine>) {
    let uuid = bson::Uuid::new();
    engine
        .bulk_create_collection("app.users", doc! {}, uuid, vec![])
        .unwrap();
    let copied = RawDocumentBuf::try_from(&doc! {"_id": "copied"}).unwrap();
    engine.bulk_insert("app.users", &[copied]).unwrap();
    let source_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    source.set_write_gate(WriteGate::Open { term: 2 });
    source.writer().insert("app.users", doc! {"_id": "applied"}).unwrap();
    let entries = source.oplog_read(Bound::Unbounded, 100, 1 << 20).unwrap();
    let last = engine.apply_batch(&entries).unwrap();
    assert_eq!(last, source.last_applied());
    assert_eq!(engine.reader(ReadAt::Latest).unwrap().count("app.users").unwrap(), 2);
    source.shutdown().unwrap();
}

fn ids(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, document)| document)
        .collect()
}

#[test]
fn a_reset_empties_a_member_that_applied_entries_and_keeps_its_local_documents() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    populate(&engine);
    let before = engine.last_applied();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    assert!(matches!(
        engine.reset_to_empty(),
        Err(StorageError::IllegalOperation(_))
    ));
    engine.set_write_gate(WriteGate::Closed);
    engine.reset_to_empty().unwrap();
    assert_empty(&engine, dir.path());
    sync_again(&engine);
    assert!(
        engine.last_applied() > before,
        "the source's entry is newer than the member's old ones"
    );
    engine.shutdown().unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(
        ids(&engine, "app.users"),
        vec![doc! {"_id": "applied"}, doc! {"_id": "copied"}]
    );
    assert_eq!(engine.list_databases(), vec!["app".to_string(), "local".to_string()]);
    engine.shutdown().unwrap();
}

#[test]
fn a_crash_after_any_step_of_a_reset_reopens_empty() {
    for step in [
        ResetStep::Marker,
        ResetStep::EmptyCheckpoint,
        ResetStep::JournalTruncated,
        ResetStep::InMemory,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        populate(&engine);
        engine.reset_to_empty_stopping_after(step).unwrap();
        assert!(dir.path().join(RESET_MARKER_FILE_NAME).exists(), "{step:?}");
        // A crash: no shutdown, no final checkpoint.
        drop(engine);
        let engine = open(dir.path());
        assert_empty(&engine, dir.path());
        sync_again(&engine);
        engine.shutdown().unwrap();
    }
}

#[test]
fn a_crash_before_the_marker_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    populate(&engine);
    let before = engine.last_applied();
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.last_applied(), before);
    assert_eq!(ids(&engine, "app.users").len(), 50);
    assert_eq!(ids(&engine, "other.c").len(), 20);
    engine.shutdown().unwrap();
}
