//! Failing I/O under the engine: the journal's fault-injecting backend
//! fails the Nth write or fsync, then a simulated power loss drops what was
//! never fsynced. Every write acknowledged as durable must survive, the
//! engine must refuse work after the failure (never retry an fsync), and
//! the recovered state must be a prefix of the writes made.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::io::{Fault, FaultyIo};
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::recovery::JOURNAL_DIR_NAME;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    // FaultyIo fails I/O on purpose: refuse later calls instead of aborting.
    options.poison_policy = PoisonPolicy::RefuseLaterCalls;
    options.checkpoint_interval_ms = 60_000;
    // Long enough that nothing is synced unless a writer waits for it.
    options.journal_commit_interval_ms = 10_000;
    options
}

fn ids(engine: &Arc<Engine>) -> Vec<i32> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan("db.c", Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, d)| d.get_i32("_id").unwrap())
        .collect()
}

/// Inserts `from..to`, waiting for durability after each when `durable`.
fn insert_range(engine: &Arc<Engine>, from: i32, to: i32, durable: bool) -> Result<(), StorageError> {
    for id in from..to {
        let optime = engine.writer().insert("db.c", doc! {"_id": id, "k": id % 3})?;
        if durable {
            engine.wait_durable(optime.ts)?;
        }
    }
    Ok(())
}

/// After a crash: the documents are exactly `0..n` for some n at least
/// `durable`, and every index agrees with them.
fn check_prefix(dir: &std::path::Path, durable: i32, written: i32) {
    let engine = Engine::open(options(dir)).unwrap();
    let found = ids(&engine);
    let n = found.len() as i32;
    assert!(n >= durable, "lost acknowledged writes: {n} documents, {durable} were durable");
    assert!(n <= written, "more documents than written");
    assert_eq!(found, (0..n).collect::<Vec<_>>());
    assert!(engine.validate("db.c").unwrap().valid);
    engine.shutdown().unwrap();
}

fn faulty_engine(dir: &std::path::Path, faulty: &FaultyIo) -> Arc<Engine> {
    let engine = Engine::open_with_io(options(dir), faulty.as_backend()).unwrap();
    engine.create_indexes("db.c", vec![IndexSpec { name: "k_1".into(), key: doc! {"k": 1}, unique: false, sparse: false, ..Default::default() }]).unwrap();
    engine
}

#[test]
fn failed_fsync_poisons_and_keeps_every_durable_write() {
    for checkpoint_first in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyIo::over_std();
        let engine = faulty_engine(dir.path(), &faulty);
        insert_range(&engine, 0, 20, true).unwrap();
        if checkpoint_first {
            engine.checkpoint_now().unwrap();
        }
        insert_range(&engine, 20, 30, false).unwrap();
        faulty.arm(Fault::Sync { nth: 1 });
        let last = engine.writer().insert("db.c", doc! {"_id": 30, "k": 0}).unwrap();
        assert!(matches!(engine.wait_durable(last.ts), Err(StorageError::Poisoned(_))));
        assert!(matches!(engine.writer().insert("db.c", doc! {"_id": 31}), Err(StorageError::Poisoned(_))));
        drop(engine);
        // The checkpoint file may still be closed by redb; the journal must
        // not have touched the disk again.
        let journal = dir.path().join(JOURNAL_DIR_NAME);
        assert_eq!(faulty.ops_after_fault_under(&journal), 0, "the journal retried I/O after a failed fsync");
        faulty.crash(0).unwrap();
        check_prefix(dir.path(), 20, 31);
    }
}

#[test]
fn failed_write_with_torn_bytes_recovers_a_prefix() {
    for partial in [None, Some(7), Some(300)] {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyIo::over_std();
        let engine = faulty_engine(dir.path(), &faulty);
        insert_range(&engine, 0, 10, true).unwrap();
        insert_range(&engine, 10, 25, false).unwrap();
        faulty.arm(Fault::Write { nth: 1, partial_bytes: partial });
        let result = engine.wait_durable(engine.last_applied().ts);
        assert!(matches!(result, Err(StorageError::Poisoned(_))), "{result:?}");
        drop(engine);
        faulty.crash(u64::MAX).unwrap();
        check_prefix(dir.path(), 10, 25);
    }
}

#[test]
fn power_loss_keeps_durable_writes_and_drops_the_rest() {
    for keep_unsynced in [0u64, 100, 5_000] {
        let dir = tempfile::tempdir().unwrap();
        let faulty = FaultyIo::over_std();
        let engine = faulty_engine(dir.path(), &faulty);
        insert_range(&engine, 0, 15, true).unwrap();
        engine.checkpoint_now().unwrap();
        insert_range(&engine, 15, 30, true).unwrap();
        insert_range(&engine, 30, 60, false).unwrap();
        // The process dies before the group commit: its final fsync fails.
        faulty.arm(Fault::Sync { nth: 1 });
        drop(engine);
        faulty.crash(keep_unsynced).unwrap();
        check_prefix(dir.path(), 30, 60);
    }
}

#[test]
fn updates_and_deletes_replay_idempotently_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = faulty_engine(dir.path(), &faulty);
    insert_range(&engine, 0, 10, true).unwrap();
    engine.checkpoint_now().unwrap();
    let mut writer = engine.writer();
    for id in 0..10 {
        let new = doc! {"_id": id, "k": id % 3, "n": id * 2};
        writer.update("db.c", &Bson::Int32(id), new, doc! {"$set": {"n": id * 2}}).unwrap();
    }
    writer.delete("db.c", &Bson::Int32(3)).unwrap();
    let last = writer.insert("db.c", doc! {"_id": 3, "k": 1, "again": true}).unwrap();
    drop(writer);
    engine.wait_durable(last.ts).unwrap();
    faulty.arm(Fault::Sync { nth: 1 });
    drop(engine);
    faulty.crash(0).unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let reader = engine.reader(ReadAt::Latest).unwrap();
    assert_eq!(reader.get("db.c", &Bson::Int32(3)).unwrap(), Some(doc! {"_id": 3, "k": 1, "again": true}));
    assert_eq!(reader.get("db.c", &Bson::Int32(4)).unwrap(), Some(doc! {"_id": 4, "k": 1, "n": 8}));
    assert!(engine.validate("db.c").unwrap().valid);
    engine.shutdown().unwrap();
}

#[test]
fn a_new_data_directory_keeps_its_journal_and_checkpoint_after_a_power_loss() {
    // `journal/` and `checkpoint.redb` are created by the first open; their
    // names are durable only once the data directory itself is fsynced,
    // which must happen before any write is acknowledged.
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
    insert_range(&engine, 0, 20, true).unwrap();
    engine.checkpoint_now().unwrap();
    insert_range(&engine, 20, 30, true).unwrap();
    faulty.power_off();
    drop(engine);
    faulty.crash(0).unwrap();
    check_prefix(dir.path(), 30, 30);
}

#[test]
fn a_data_directory_the_engine_creates_survives_a_power_loss() {
    // The engine creates the data directory and its missing parent; each
    // one's name must be durable before writes in it are acknowledged.
    let root = tempfile::tempdir().unwrap();
    let dbpath = root.path().join("new").join("db");
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(&dbpath), faulty.as_backend()).unwrap();
    insert_range(&engine, 0, 10, true).unwrap();
    faulty.power_off();
    drop(engine);
    faulty.crash(0).unwrap();
    assert!(dbpath.exists(), "the data directory itself was lost");
    check_prefix(&dbpath, 10, 10);
}
