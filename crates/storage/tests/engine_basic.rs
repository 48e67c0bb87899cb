//! The engine facade end to end: writes, reads, indexes, restart.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 5;
    options
}

fn all_docs(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap().into_iter().map(|(_, d)| d).collect()
}

fn spec(name: &str, key: Document, unique: bool, sparse: bool) -> IndexSpec {
    IndexSpec { name: name.to_string(), key, unique, sparse, ..Default::default() }
}

#[test]
fn insert_get_scan_update_delete() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    {
        let mut writer = engine.writer();
        for i in 0..10 {
            writer.insert("db.c", doc! {"_id": i, "x": i * 10}).unwrap();
        }
        writer.update("db.c", &Bson::Int32(3), doc! {"_id": 3, "x": 31}, doc! {"$set": {"x": 31}}).unwrap();
        writer.delete("db.c", &Bson::Int32(4)).unwrap();
    }
    let reader = engine.reader(ReadAt::Latest).unwrap();
    assert_eq!(reader.get("db.c", &Bson::Int32(3)).unwrap(), Some(doc! {"_id": 3, "x": 31}));
    assert_eq!(reader.get("db.c", &Bson::Int32(4)).unwrap(), None);
    assert_eq!(reader.count("db.c").unwrap(), 9);
    let ids: Vec<Bson> = all_docs(&engine, "db.c").iter().map(|d| d.get("_id").unwrap().clone()).collect();
    assert_eq!(ids, vec![0, 1, 2, 3, 5, 6, 7, 8, 9].into_iter().map(Bson::Int32).collect::<Vec<_>>());
    assert_eq!(engine.list_databases(), vec!["db".to_string()]);
    assert_eq!(engine.list_collections("db").len(), 1);
    let mut writer = engine.writer();
    assert!(matches!(writer.insert("db.c", doc! {"_id": 1}), Err(StorageError::DuplicateKey { .. })));
    drop(writer);
    engine.shutdown().unwrap();
}

#[test]
fn unique_index_reports_key_pattern_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    engine.create_indexes("db.u", vec![spec("email_1", doc! {"email": 1}, true, false)]).unwrap();
    let mut writer = engine.writer();
    writer.insert("db.u", doc! {"_id": 1, "email": "a@x"}).unwrap();
    match writer.insert("db.u", doc! {"_id": 2, "email": "a@x"}) {
        Err(StorageError::DuplicateKey { index_name, key_pattern, key_value, .. }) => {
            assert_eq!(index_name, "email_1");
            assert_eq!(key_pattern, doc! {"email": 1});
            assert_eq!(key_value, doc! {"email": "a@x"});
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    // Re-inserting the same key for the same document (an update that keeps it) is fine.
    writer.update("db.u", &Bson::Int32(1), doc! {"_id": 1, "email": "a@x", "n": 1}, doc! {"$set": {"n": 1}}).unwrap();
    drop(writer);
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let entries = reader.scan_index("db.u", "email_1", Bound::Unbounded, Bound::Unbounded, false, None, 10).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].document, doc! {"_id": 1, "email": "a@x", "n": 1});
    engine.shutdown().unwrap();
}

#[test]
fn data_survives_clean_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = Engine::open(options(dir.path())).unwrap();
        engine.create_indexes("db.c", vec![spec("x_1", doc! {"x": 1}, false, false)]).unwrap();
        let mut writer = engine.writer();
        for i in 0..100 {
            writer.insert("db.c", doc! {"_id": i, "x": i % 7}).unwrap();
        }
        drop(writer);
        engine.checkpoint_now().unwrap();
        engine.shutdown().unwrap();
    }
    {
        let engine = Engine::open(options(dir.path())).unwrap();
        assert_eq!(all_docs(&engine, "db.c").len(), 100);
        let mut writer = engine.writer();
        for i in 100..150 {
            writer.insert("db.c", doc! {"_id": i, "x": i % 7}).unwrap();
        }
        let last = writer.delete("db.c", &Bson::Int32(0)).unwrap();
        drop(writer);
        engine.wait_durable(last.ts).unwrap();
        // No shutdown: a crash. Dropping releases the files.
    }
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(all_docs(&engine, "db.c").len(), 149);
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let sixes = reader
        .scan_index("db.c", "x_1", Bound::Included(key_of(6)), Bound::Included(key_of(6)), false, None, usize::MAX)
        .unwrap();
    assert_eq!(sixes.len(), (0..150).filter(|i| i % 7 == 6).count());
    assert!(engine.validate("db.c").unwrap().valid);
    engine.shutdown().unwrap();
}

fn key_of(value: i32) -> Vec<u8> {
    let mut out = Vec::new();
    slipstream_query::index_key::encode_value(&mut out, &Bson::Int32(value), false);
    out
}

#[test]
fn second_engine_on_same_dbpath_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    match Engine::open(options(dir.path())) {
        Err(StorageError::DataDirectoryLocked(message)) => assert!(message.contains("Unable to lock the lock file")),
        Err(other) => panic!("expected DataDirectoryLocked, got {other:?}"),
        Ok(_) => panic!("expected DataDirectoryLocked, got an engine"),
    }
    engine.shutdown().unwrap();
    drop(engine);
    Engine::open(options(dir.path())).unwrap().shutdown().unwrap();
}

#[test]
fn an_insert_filling_empty_timestamps_stores_and_logs_its_own_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let empty = Bson::Timestamp(bson::Timestamp { time: 0, increment: 0 });
    let document = doc! {"_id": empty.clone(), "a": empty.clone(), "n": {"t": empty.clone()}};
    let optime = engine.writer().insert_filling_empty_timestamps("db.c", document.clone()).unwrap();
    let own = Bson::Timestamp(bson::Timestamp { time: optime.ts.secs, increment: optime.ts.inc });
    let stored = engine.reader(ReadAt::Latest).unwrap().get("db.c", &empty).unwrap().unwrap();
    assert_eq!(stored, doc! {"_id": empty.clone(), "a": own.clone(), "n": {"t": empty.clone()}});
    // The entry carries the filled document: members store the same one.
    let entry = engine.oplog_entry(optime.ts).unwrap().unwrap();
    let logged: Document = entry.get_document("o").unwrap().try_into().unwrap();
    assert_eq!(logged, stored);
    // A plain insert (an applied entry, bypassEmptyTsReplacement) keeps it.
    engine.writer().insert("db.c", doc! {"_id": 2, "a": empty.clone()}).unwrap();
    let kept = engine.reader(ReadAt::Latest).unwrap().get("db.c", &Bson::Int32(2)).unwrap();
    assert_eq!(kept, Some(doc! {"_id": 2, "a": empty}));
}
