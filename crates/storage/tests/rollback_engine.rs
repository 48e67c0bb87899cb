//! `rollback_to(ts)`: versions above `ts` vanish from reads, indexes, the
//! catalog and the oplog (seed 000, 4.1: the node reverts to the stable
//! timestamp and truncates the oplog after the common point).

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError, Timestamp, WriteGate};
use slipstream_storage::TimestampBson;

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options
}

fn docs(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap().into_iter().map(|(_, d)| d).collect()
}

fn index_ids(engine: &Arc<Engine>, ns: &str, index: &str) -> Vec<Bson> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan_index(ns, index, Bound::Unbounded, Bound::Unbounded, false, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.document.get("_id").unwrap().clone())
        .collect()
}

fn spec(name: &str, key: Document) -> IndexSpec {
    IndexSpec { name: name.to_string(), key, unique: false, sparse: false, ..Default::default() }
}

/// A standalone's rollback: the gate is closed around it, as replication
/// has it closed on a secondary.
fn roll_back(engine: &Arc<Engine>, ts: Timestamp) -> Result<(), StorageError> {
    engine.set_write_gate(WriteGate::Closed);
    let result = engine.rollback_to(ts);
    engine.set_write_gate(WriteGate::Open { term: -1 });
    result
}

fn oplog_last(engine: &Arc<Engine>) -> Timestamp {
    let newest = engine.oplog_read_newest(1).unwrap();
    Timestamp::from_bson(newest[0].get_timestamp("ts").unwrap())
}

#[test]
fn rollback_discards_documents_index_entries_catalog_changes_and_oplog() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    engine.create_indexes("db.c", vec![spec("x_1", doc! {"x": 1})]).unwrap();
    for i in 0..5 {
        engine.writer().insert("db.c", doc! {"_id": i, "x": 10 - i}).unwrap();
    }
    let common = engine.last_applied().ts;
    let before_docs = docs(&engine, "db.c");
    let before_index = index_ids(&engine, "db.c", "x_1");

    // Everything after the common point: data, index, catalog changes.
    engine.writer().insert("db.c", doc! {"_id": 5, "x": 0}).unwrap();
    engine.writer().update("db.c", &Bson::Int32(0), doc! {"_id": 0, "x": 100}, doc! {"$set": {"x": 100}}).unwrap();
    engine.writer().delete("db.c", &Bson::Int32(1)).unwrap();
    engine.create_indexes("db.c", vec![spec("y_1", doc! {"y": 1})]).unwrap();
    engine.writer().insert("db.other", doc! {"_id": 1}).unwrap();
    engine.drop_indexes("db.c", &["x_1".to_string()]).unwrap();
    engine.rename_collection("db.other", "db.renamed", false).unwrap();
    assert!(oplog_last(&engine) > common);

    roll_back(&engine, common).unwrap();
    assert_eq!(engine.last_applied().ts, common);
    assert_eq!(oplog_last(&engine), common);
    assert_eq!(docs(&engine, "db.c"), before_docs);
    assert_eq!(index_ids(&engine, "db.c", "x_1"), before_index);
    let names: Vec<String> = engine.collection_info("db.c").unwrap().indexes.into_iter().map(|i| i.name).collect();
    assert_eq!(names, vec!["_id_".to_string(), "x_1".to_string()]);
    assert!(engine.collection_info("db.other").is_none());
    assert!(engine.collection_info("db.renamed").is_none());
    assert!(engine.validate("db.c").unwrap().valid);

    // New writes continue above every discarded timestamp, and both a
    // crash and a clean restart keep the rolled-back state.
    let next = engine.writer().insert("db.c", doc! {"_id": 9, "x": 9}).unwrap();
    assert!(next.ts > common);
    let expected = docs(&engine, "db.c");
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(docs(&engine, "db.c"), expected);
    assert!(engine.collection_info("db.renamed").is_none());
    engine.checkpoint_now().unwrap();
    engine.shutdown().unwrap();
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(docs(&engine, "db.c"), expected);
    assert_eq!(index_ids(&engine, "db.c", "x_1").len(), expected.len());
    engine.shutdown().unwrap();
}

#[test]
fn rollback_of_a_drop_brings_the_collection_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    for i in 0..20 {
        engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    engine.checkpoint_now().unwrap();
    engine.set_stable_timestamp(engine.last_applied().ts);
    let common = engine.last_applied().ts;
    engine.drop_database("db").unwrap().unwrap();
    assert!(engine.list_databases().is_empty());
    // The drop is above the stable timestamp: a checkpoint may not cover it.
    assert_eq!(engine.checkpoint_now().unwrap(), common);
    roll_back(&engine, common).unwrap();
    assert_eq!(docs(&engine, "db.c").len(), 20);
    engine.shutdown().unwrap();
}

#[test]
fn rollback_below_the_checkpoint_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let first = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    let checkpoint = engine.checkpoint_now().unwrap();
    assert!(checkpoint > first.ts);
    assert!(matches!(roll_back(&engine, first.ts), Err(StorageError::SnapshotTooOld(_))));
    assert_eq!(docs(&engine, "db.c").len(), 2);
    engine.shutdown().unwrap();
}

#[test]
fn stable_timestamp_bounds_checkpoints_so_rollback_stays_possible() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let stable = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap().ts;
    engine.set_stable_timestamp(stable);
    for i in 2..10 {
        engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    engine.wait_durable(engine.last_applied().ts).unwrap();
    assert_eq!(engine.checkpoint_now().unwrap(), stable);
    roll_back(&engine, stable).unwrap();
    assert_eq!(docs(&engine, "db.c"), vec![doc! {"_id": 1}]);
    engine.shutdown().unwrap();
}

#[test]
fn rollback_requires_the_write_gate_closed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let common = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap().ts;
    engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    assert!(matches!(engine.rollback_to(common), Err(StorageError::IllegalOperation(_))));
    assert_eq!(docs(&engine, "db.c").len(), 2, "a refused rollback changes nothing");
    roll_back(&engine, common).unwrap();
    assert_eq!(docs(&engine, "db.c"), vec![doc! {"_id": 1}]);
    engine.shutdown().unwrap();
}
