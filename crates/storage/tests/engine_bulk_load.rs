//! Bulk loads (an initial sync's copy): documents and indexes written
//! straight into the checkpoint survive a restart, a document copied again
//! replaces the stored one and its index keys, oplog entries then apply
//! over the copy idempotently, loads are refused once an entry is applied,
//! and a reset drops everything copied.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError};

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.replicated = true;
    options.journal_commit_interval_ms = 2;
    Engine::open(options).unwrap()
}

fn raw(document: Document) -> RawDocumentBuf {
    RawDocumentBuf::try_from(&document).unwrap()
}

fn ids(engine: &Arc<Engine>, ns: &str) -> Vec<Bson> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let docs = reader
        .scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap();
    docs.into_iter().map(|(_, d)| d.get("_id").unwrap().clone()).collect()
}

fn by_email(engine: &Arc<Engine>, ns: &str, email: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let mut key = Vec::new();
    slipstream_query::index_key::encode_value(&mut key, &Bson::String(email.into()), false);
    let end = slipstream_query::index_key::prefix_end(&key).unwrap();
    let entries = reader
        .scan_index(
            ns,
            "email_1",
            Bound::Included(key),
            Bound::Excluded(end),
            false,
            None,
            usize::MAX,
        )
        .unwrap();
    entries.into_iter().map(|e| e.document).collect()
}

fn email_index() -> IndexSpec {
    IndexSpec {
        name: "email_1".into(),
        key: doc! {"email": 1},
        unique: true,
        ..IndexSpec::default()
    }
}

#[test]
fn a_copy_survives_a_restart_and_a_copied_again_document_replaces_its_index_keys() {
    let dir = tempfile::tempdir().unwrap();
    let uuid = bson::Uuid::new();
    {
        let engine = open(dir.path());
        engine
            .bulk_create_collection("app.users", doc! {}, uuid, vec![email_index()])
            .unwrap();
        let batch: Vec<_> = (0..1000)
            .map(|i| raw(doc! {"_id": i, "email": format!("u{i}")}))
            .collect();
        let started = std::time::Instant::now();
        let bytes = engine.bulk_insert("app.users", &batch).unwrap();
        eprintln!("bulk_insert of 1000 documents: {:?}", started.elapsed());
        assert_eq!(bytes, batch.iter().map(|d| d.as_bytes().len() as u64).sum::<u64>());
        // Copied again after a resume, changed meanwhile on the source.
        engine
            .bulk_insert("app.users", &[raw(doc! {"_id": 7, "email": "changed"})])
            .unwrap();
        engine.shutdown().unwrap();
    }
    let engine = open(dir.path());
    let info = engine.collection_info("app.users").unwrap();
    assert_eq!(info.uuid, uuid);
    assert_eq!(
        info.indexes.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
        ["_id_", "email_1"]
    );
    assert_eq!(ids(&engine, "app.users").len(), 1000);
    assert!(
        by_email(&engine, "app.users", "u7").is_empty(),
        "the old index key of _id 7 is gone"
    );
    assert_eq!(
        by_email(&engine, "app.users", "changed"),
        [doc! {"_id": 7, "email": "changed"}]
    );
}

#[test]
fn oplog_entries_apply_over_the_copy_and_end_bulk_loads() {
    let dir = tempfile::tempdir().unwrap();
    let source_dir = tempfile::tempdir().unwrap();
    // A source whose entries the copy partly reflects already.
    let source = {
        let mut options = EngineOptions::new(source_dir.path());
        options.journal_commit_interval_ms = 2;
        Engine::open(options).unwrap()
    };
    source.create_collection("app.c", doc! {}).unwrap();
    let begin = source.last_applied();
    let uuid = source.collection_info("app.c").unwrap().uuid;
    let mut writer = source.writer();
    writer.insert("app.c", doc! {"_id": 1, "v": 1}).unwrap();
    writer
        .update(
            "app.c",
            &Bson::Int32(1),
            doc! {"_id": 1, "v": 2},
            doc! {"$set": {"v": 2}},
        )
        .unwrap();
    writer.insert("app.c", doc! {"_id": 2}).unwrap();
    writer.delete("app.c", &Bson::Int32(2)).unwrap();
    drop(writer);
    let entries = source
        .oplog_read(Bound::Included(begin.ts), usize::MAX, usize::MAX)
        .unwrap();

    let engine = open(dir.path());
    engine.bulk_create_collection("app.c", doc! {}, uuid, vec![]).unwrap();
    // The copy saw _id 1 after its update and _id 2 before its delete.
    engine
        .bulk_insert("app.c", &[raw(doc! {"_id": 1, "v": 2}), raw(doc! {"_id": 2})])
        .unwrap();
    engine.apply_batch(&entries).unwrap();
    assert_eq!(ids(&engine, "app.c"), [Bson::Int32(1)]);
    assert_eq!(engine.last_applied(), source.last_applied());
    match engine.bulk_insert("app.c", &[raw(doc! {"_id": 3})]) {
        Err(StorageError::IllegalOperation(_)) => {}
        other => panic!("a bulk load after entries: {other:?}"),
    }
    match engine.bulk_reset() {
        Err(StorageError::IllegalOperation(_)) => {}
        other => panic!("a reset after entries: {other:?}"),
    }
}

#[test]
fn a_reset_drops_everything_copied() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        engine
            .bulk_create_collection("a.x", doc! {}, bson::Uuid::new(), vec![email_index()])
            .unwrap();
        engine
            .bulk_insert("a.x", &[raw(doc! {"_id": 1, "email": "e"})])
            .unwrap();
        engine.bulk_reset().unwrap();
        assert!(engine.list_databases().iter().all(|db| db != "a"));
        engine.shutdown().unwrap();
    }
    let engine = open(dir.path());
    assert!(engine.collection_info("a.x").is_none());
    // Tables reused after the reset hold nothing of the old copy.
    engine
        .bulk_create_collection("b.y", doc! {}, bson::Uuid::new(), vec![email_index()])
        .unwrap();
    assert!(ids(&engine, "b.y").is_empty());
    assert!(by_email(&engine, "b.y", "e").is_empty());
}

#[test]
fn a_copied_capped_collection_keeps_the_copys_order_and_totals_across_batches() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let ns = "app.log";
    engine
        .bulk_create_collection(ns, doc! {"capped": true, "size": 1 << 20}, bson::Uuid::new(), vec![])
        .unwrap();
    // Copied in the source's natural order, over two batches; the second
    // repeats the last document (a resumed copy), which keeps its place.
    engine
        .bulk_insert(ns, &[raw(doc! {"_id": 5}), raw(doc! {"_id": 2}), raw(doc! {"_id": 9})])
        .unwrap();
    engine.bulk_insert(ns, &[raw(doc! {"_id": 9}), raw(doc! {"_id": 1})]).unwrap();
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let natural: Vec<Bson> = reader
        .scan_natural(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, d)| d.get("_id").unwrap().clone())
        .collect();
    assert_eq!(natural, vec![Bson::Int32(5), Bson::Int32(2), Bson::Int32(9), Bson::Int32(1)]);
    let totals = reader.capped_totals(ns).unwrap().expect("a capped collection");
    assert_eq!(totals.count, 4);
}

fn all_entries(engine: &Arc<Engine>, ns: &str, index: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let entries = reader
        .scan_index(ns, index, Bound::Unbounded, Bound::Unbounded, false, None, usize::MAX)
        .unwrap();
    entries.into_iter().map(|e| (e.index_key, e.record_key)).collect()
}

#[test]
fn indexes_built_after_the_copy_from_spilled_sorted_runs_equal_indexes_maintained_during_it() {
    let tags = IndexSpec {
        name: "tags_1".into(),
        key: doc! {"tags": 1},
        ..IndexSpec::default()
    };
    let documents: Vec<_> = (0..3000)
        .map(|i| raw(doc! {"_id": i, "email": format!("u{}", i * 7919 % 3000), "tags": [i % 17, i % 5]}))
        .collect();
    let (maintained_dir, built_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let maintained = open(maintained_dir.path());
    maintained
        .bulk_create_collection("app.c", doc! {}, bson::Uuid::new(), vec![email_index(), tags.clone()])
        .unwrap();
    maintained.bulk_insert("app.c", &documents).unwrap();
    let built = open(built_dir.path());
    built
        .bulk_create_collection("app.c", doc! {}, bson::Uuid::new(), vec![email_index(), tags])
        .unwrap();
    // A document whose keys a crashed build (or a maintained load) left
    // behind, then copied again changed: the build drops the stale key.
    built
        .bulk_insert("app.c", &[raw(doc! {"_id": 5, "email": "stale", "tags": [99]})])
        .unwrap();
    for chunk in documents.chunks(1000) {
        built.bulk_insert_records("app.c", chunk).unwrap();
    }
    assert!(all_entries(&built, "app.c", "tags_1").len() < 10, "the copy left the indexes alone");
    // Small bounds: several runs spilled and merged, several commits.
    let report = built.bulk_build_indexes_with("app.c", 64 * 1024, 16 * 1024).unwrap();
    assert!(report.runs_spilled > 2, "{report:?}");
    assert!(report.commits > 2, "{report:?}");
    let tag_keys = (0..3000).map(|i| if i % 17 == i % 5 { 1 } else { 2 }).sum::<u64>();
    assert_eq!(report.keys, 3000 + tag_keys, "{report:?}");
    for index in ["email_1", "tags_1"] {
        assert_eq!(all_entries(&built, "app.c", index), all_entries(&maintained, "app.c", index), "{index}");
    }
    assert!(by_email(&built, "app.c", "stale").is_empty());
    assert!(built.validate("app.c").unwrap().valid);
    assert_eq!(built.collection_info("app.c").unwrap().multikey_indexes, ["tags_1"]);
    assert!(!built_dir.path().join(slipstream_storage::engine::SORT_DIRECTORY).exists());
    built.shutdown().unwrap();
    drop(built);
    // Durable: reopened, the index is whole.
    let built = open(built_dir.path());
    assert_eq!(all_entries(&built, "app.c", "email_1"), all_entries(&maintained, "app.c", "email_1"));
    assert!(built.validate("app.c").unwrap().valid);
}
