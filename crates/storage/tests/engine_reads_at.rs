//! Reads at a timestamp: a reader sees the state as of its timestamp,
//! whatever is written or checkpointed after it is made.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, ReadAt, Reader, StorageError};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options
}

fn docs(reader: &Reader, ns: &str) -> Vec<Document> {
    reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap().into_iter().map(|(_, d)| d).collect()
}

fn write_version(engine: &Arc<Engine>, version: i32) -> slipstream_storage::Timestamp {
    let mut writer = engine.writer();
    let mut last = None;
    for id in 0..50 {
        let document = doc! {"_id": id, "v": version};
        let optime = if version == 0 {
            writer.insert("db.c", document).unwrap()
        } else {
            writer.update("db.c", &Bson::Int32(id), document, doc! {"$set": {"v": version}}).unwrap()
        };
        last = Some(optime.ts);
    }
    last.unwrap()
}

#[test]
fn readers_keep_their_timestamp_across_writes_and_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let t0 = write_version(&engine, 0);
    let old_reader = engine.reader(ReadAt::Latest).unwrap();
    assert_eq!(old_reader.read_timestamp(), t0);
    let t1 = write_version(&engine, 1);
    engine.writer().delete("db.c", &Bson::Int32(7)).unwrap();
    engine.wait_durable(engine.last_applied().ts).unwrap();
    // The checkpoint covers t1 and the delete, but the old reader's base is
    // older: its versions must stay in memory.
    let checkpoint = engine.checkpoint_now().unwrap();
    assert!(checkpoint > t1);
    let old_docs = docs(&old_reader, "db.c");
    assert_eq!(old_docs.len(), 50);
    assert!(old_docs.iter().all(|d| d.get_i32("v").unwrap() == 0));
    assert_eq!(old_reader.get("db.c", &Bson::Int32(7)).unwrap(), Some(doc! {"_id": 7, "v": 0}));
    assert_eq!(old_reader.count("db.c").unwrap(), 50);

    // A read at a timestamp below the new checkpoint is now too old.
    assert!(matches!(engine.reader(ReadAt::At(t0)), Err(StorageError::SnapshotTooOld(_))));
    let latest = engine.reader(ReadAt::Latest).unwrap();
    assert_eq!(docs(&latest, "db.c").len(), 49);
    drop(old_reader);
    // Once the old reader is gone a checkpoint prunes what it kept.
    engine.checkpoint_now().unwrap();
    assert_eq!(engine.stats().versions_in_memory, 0);
    assert_eq!(docs(&latest, "db.c").len(), 49);
    engine.shutdown().unwrap();
}

#[test]
fn reads_at_each_past_timestamp_see_that_version() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let mut stamps = Vec::new();
    for version in 0..4 {
        stamps.push(write_version(&engine, version));
    }
    for (version, ts) in stamps.iter().enumerate() {
        let reader = engine.reader(ReadAt::At(*ts)).unwrap();
        let all = docs(&reader, "db.c");
        assert_eq!(all.len(), 50);
        assert!(all.iter().all(|d| d.get_i32("v").unwrap() == version as i32), "version {version}");
    }
    // Reads at a timestamp between two writes see the earlier one.
    let mid = engine.reader(ReadAt::At(stamps[1])).unwrap();
    assert_eq!(mid.get("db.c", &Bson::Int32(0)).unwrap(), Some(doc! {"_id": 0, "v": 1}));
    // After a restart (replay of the journal) the same reads still work.
    drop(mid);
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    let reader = engine.reader(ReadAt::At(stamps[2])).unwrap();
    assert!(docs(&reader, "db.c").iter().all(|d| d.get_i32("v").unwrap() == 2));
    engine.shutdown().unwrap();
}
