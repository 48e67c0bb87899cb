//! Writers, readers and background checkpoints at once: every reader's
//! view stays the state at its timestamp while checkpoints swap the base
//! and prune memory underneath it.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use bson::{doc, Bson};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, Reader, StorageError};

fn ids(reader: &Reader) -> BTreeSet<i64> {
    reader
        .scan("db.c", Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, d)| d.get_i64("_id").unwrap())
        .collect()
}

fn index_ids(reader: &Reader) -> BTreeSet<i64> {
    reader
        .scan_index("db.c", "g_1", Bound::Unbounded, Bound::Unbounded, false, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.document.get_i64("_id").unwrap())
        .collect()
}

#[test]
fn readers_stay_consistent_while_writers_and_checkpoints_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = EngineOptions::new(dir.path());
    options.checkpoint_interval_ms = 3;
    options.journal_commit_interval_ms = 1;
    let engine = Engine::open(options).unwrap();
    engine.create_indexes("db.c", vec![IndexSpec { name: "g_1".into(), key: doc! {"g": 1}, unique: false, sparse: false, ..Default::default() }]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicI64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (engine, stop, next_id) = (engine.clone(), stop.clone(), next_id.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let mut writer = engine.writer();
                    writer.insert("db.c", doc! {"_id": id, "g": id % 5}).unwrap();
                    // Delete some older documents so that tombstones and
                    // index removals go through checkpoints too.
                    if id % 4 == 3 {
                        let _ = writer.delete("db.c", &Bson::Int64(id - 2));
                    }
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (engine, stop) = (engine.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checked = 0;
                while !stop.load(Ordering::Relaxed) {
                    let reader = engine.reader(ReadAt::Latest).unwrap();
                    let first = ids(&reader);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    // Checkpoints ran meanwhile: the same reader sees the same state.
                    assert_eq!(ids(&reader), first);
                    assert_eq!(index_ids(&reader), first);
                    assert_eq!(reader.count("db.c").unwrap(), first.len() as u64);
                    // A reader at the same timestamp agrees, unless a
                    // checkpoint has passed that timestamp.
                    match engine.reader(ReadAt::At(reader.read_timestamp())) {
                        Ok(again) => assert_eq!(ids(&again), first),
                        Err(StorageError::SnapshotTooOld(_)) => {}
                        Err(other) => panic!("{other}"),
                    }
                    checked += 1;
                }
                checked
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    let checked: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(checked > 10, "readers made too few checks: {checked}");
    let checkpoints = engine.stats().checkpoints;
    assert!(checkpoints >= 3, "too few checkpoints: {checkpoints}");
    assert!(engine.validate("db.c").unwrap().valid);
    let before = ids(&engine.reader(ReadAt::Latest).unwrap());
    engine.shutdown().unwrap();
    drop(engine);
    let mut options = EngineOptions::new(dir.path());
    options.checkpoint_interval_ms = 60_000;
    let engine = Engine::open(options).unwrap();
    assert_eq!(ids(&engine.reader(ReadAt::Latest).unwrap()), before);
    assert_eq!(engine.stats().versions_in_memory, 0, "a clean shutdown checkpoints everything");
    engine.shutdown().unwrap();
}
