//! The engine's fast paths for the server's hot requests: waiting for
//! durability from an async task (`wait_durable_async`), taking the write
//! lock only when it is free (`try_writer`), and a one-key scan answered
//! by a lookup. Each must give exactly what the slow path gives.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson};
use slipstream_query::index_key::record_key;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::io::{Fault, FaultyIo};
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::{Engine, ReadAt, StorageError};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    // FaultyIo fails I/O on purpose: refuse later calls instead of aborting.
    options.poison_policy = PoisonPolicy::RefuseLaterCalls;
    options.checkpoint_interval_ms = 60_000;
    // Far longer than any test waits: a write becomes durable only because
    // its waiter asked for a sync.
    options.journal_commit_interval_ms = 60_000;
    options
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Concurrent async waiters each get their own write synced (well before
/// the commit interval), and after a power loss every acknowledged write
/// is there.
#[test]
fn async_waiters_are_acknowledged_only_after_their_fsync() {
    const TASKS: i32 = 16;
    const WRITES_PER_TASK: i32 = 20;
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
    let started = Instant::now();
    let acknowledged = runtime().block_on(async {
        let mut tasks = Vec::new();
        for task in 0..TASKS {
            let engine = engine.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                for n in 0..WRITES_PER_TASK {
                    let id = task * 1000 + n;
                    let optime = engine.writer().insert("db.c", doc! {"_id": id}).unwrap();
                    engine.wait_durable_async(optime.ts).await.unwrap();
                    assert!(engine.last_durable().ts >= optime.ts, "acknowledged before its fsync");
                    done.push(id);
                }
                done
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    assert!(started.elapsed() < Duration::from_secs(30), "waiters waited for the commit interval");
    assert_eq!(acknowledged.len(), (TASKS * WRITES_PER_TASK) as usize);
    drop(engine);
    faulty.crash(0).unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let reader = engine.reader(ReadAt::Latest).unwrap();
    for id in acknowledged {
        assert!(reader.get("db.c", &Bson::Int32(id)).unwrap().is_some(), "lost acknowledged write {id}");
    }
    engine.shutdown().unwrap();
}

/// A failed fsync reaches an async waiter as an error, not a hang.
#[test]
fn async_waiter_sees_a_poisoned_journal() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
    let first = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.wait_durable(first.ts).unwrap();
    faulty.arm(Fault::Sync { nth: 1 });
    let second = engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    let result = runtime().block_on(async {
        tokio::time::timeout(Duration::from_secs(20), engine.wait_durable_async(second.ts)).await
    });
    assert!(matches!(result, Ok(Err(StorageError::Poisoned(_)))), "got {result:?}");
}

/// A write already durable returns at once; one beyond the last appended
/// entry waits only for what exists.
#[test]
fn async_wait_for_durable_or_future_timestamps_returns() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let optime = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.wait_durable(optime.ts).unwrap();
    runtime().block_on(async {
        engine.wait_durable_async(optime.ts).await.unwrap();
        let later = engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
        engine.wait_durable_async(slipstream_storage::Timestamp::MAX).await.unwrap();
        assert!(engine.last_durable().ts >= later.ts);
    });
    engine.shutdown().unwrap();
}

#[test]
fn try_writer_fails_only_while_the_lock_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    {
        let _held = engine.writer();
        assert!(engine.try_writer().is_none());
    }
    let mut writer = engine.try_writer().expect("the write lock is free");
    writer.insert("db.c", doc! {"_id": 1}).unwrap();
    drop(writer);
    assert!(engine.reader(ReadAt::Latest).unwrap().get("db.c", &Bson::Int32(1)).unwrap().is_some());
    engine.shutdown().unwrap();
}

/// A scan whose bounds are one included key agrees with `get` and with a
/// wider scan, for versions in memory, in the checkpoint, deleted, and at
/// an older read timestamp.
#[test]
fn one_key_scan_matches_get() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let point = |reader: &slipstream_storage::Reader, id: i32, limit: usize| {
        let key = record_key(&Bson::Int32(id));
        reader.scan("db.c", Bound::Included(key.clone()), Bound::Included(key), false, limit).unwrap()
    };
    let check = |engine: &Arc<Engine>, at: ReadAt| {
        let reader = engine.reader(at).unwrap();
        for id in 0..12 {
            let got = point(&reader, id, 10);
            let expected = reader.get("db.c", &Bson::Int32(id)).unwrap();
            assert_eq!(got.len(), usize::from(expected.is_some()), "id {id}");
            if let Some(document) = expected {
                assert_eq!(got[0], (record_key(&Bson::Int32(id)), document));
            }
            assert!(point(&reader, id, 0).is_empty());
            for reverse in [false, true] {
                let key = record_key(&Bson::Int32(id));
                let got_reverse = reader.scan("db.c", Bound::Included(key.clone()), Bound::Included(key), reverse, 10).unwrap();
                assert_eq!(got_reverse, got);
            }
        }
    };
    let mut writer = engine.writer();
    for id in 0..10 {
        writer.insert("db.c", doc! {"_id": id, "v": 0}).unwrap();
    }
    drop(writer);
    let before = engine.last_applied().ts;
    check(&engine, ReadAt::Latest);
    engine.checkpoint_now().unwrap();
    let mut writer = engine.writer();
    writer.update("db.c", &Bson::Int32(3), doc! {"_id": 3, "v": 1}, doc! {"$set": {"v": 1}}).unwrap();
    writer.delete("db.c", &Bson::Int32(4)).unwrap();
    writer.insert("db.c", doc! {"_id": 10, "v": 2}).unwrap();
    drop(writer);
    check(&engine, ReadAt::Latest);
    check(&engine, ReadAt::At(before));
    let reader = engine.reader(ReadAt::At(before)).unwrap();
    assert_eq!(point(&reader, 3, 1)[0].1, doc! {"_id": 3, "v": 0});
    assert!(point(&reader, 10, 1).is_empty());
    engine.shutdown().unwrap();
}
