//! The age of the oldest write that is acknowledged but not yet fsynced
//! (`EngineStats::oldest_unsynced_write_age_ms`, serverStatus
//! `slipstream.journal.oldestUnsyncedWriteAgeMillis`), and that a
//! checkpoint's fsync does not hold the journal's hostage (issue 6,
//! item 5). No wall-clock bound tighter than seconds is asserted: these
//! run on a loaded two-core machine.

use std::ops::Bound;
use std::time::{Duration, Instant};

use bson::doc;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::io::FaultyIo;
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::recovery::CHECKPOINT_FILE_NAME;
use slipstream_storage::redb_engine::CHECKPOINT_WRITE_BACK_BYTES;
use slipstream_storage::{Engine, ReadAt};

/// How long a step may take before the test calls it stuck.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

fn options(dir: &std::path::Path, commit_interval_ms: u64) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.poison_policy = PoisonPolicy::RefuseLaterCalls;
    options.checkpoint_interval_ms = 3_600_000;
    options.journal_commit_interval_ms = commit_interval_ms;
    options
}

fn age_ms(engine: &Engine) -> u64 {
    engine.stats().oldest_unsynced_write_age_ms
}

#[test]
fn the_age_grows_while_a_write_waits_for_its_fsync_and_is_zero_after_it() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing is fsynced unless a waiter asks.
    let engine = Engine::open(options(dir.path(), 60_000)).unwrap();
    assert_eq!(age_ms(&engine), 0);
    let first = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let before = age_ms(&engine);
    assert!(before >= 30, "a write acknowledged 30 ms ago is {before} ms old");
    engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    std::thread::sleep(Duration::from_millis(10));
    // The oldest write sets the age, not the newest.
    assert!(age_ms(&engine) >= before + 10);
    engine.wait_durable(first.ts).unwrap();
    // One fsync covered both.
    assert_eq!(age_ms(&engine), 0);
    engine.shutdown().unwrap();
}

#[test]
fn a_slow_checkpoint_fsync_does_not_delay_journal_durability() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path(), 20), faulty.as_backend()).unwrap();
    // Enough data that the checkpoint must write it back in pieces.
    let pad = "x".repeat(1000);
    let documents = 3 * CHECKPOINT_WRITE_BACK_BYTES / 1000;
    for id in 0..documents as i64 {
        engine.writer().insert("db.big", doc! {"_id": id, "pad": pad.as_str()}).unwrap();
    }
    let write_backs_before = faulty.counters().write_backs;

    // The checkpoint's fsync stalls, as behind a slow disk.
    faulty.hold_next_sync_after_writes(&dir.path().join(CHECKPOINT_FILE_NAME), 2 * CHECKPOINT_WRITE_BACK_BYTES);
    let checkpoint = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.checkpoint_now())
    };
    assert!(faulty.wait_until_sync_held(STEP_TIMEOUT), "the checkpoint never reached its fsync");
    // It wrote its pages back as it went, so that its fsync has little
    // left to do (and the journal's fsyncs little to wait for).
    let write_backs = faulty.counters().write_backs - write_backs_before;
    let mib = (3 * CHECKPOINT_WRITE_BACK_BYTES) >> 20;
    assert!(write_backs >= 2, "{write_backs} write-backs for a checkpoint of {mib} MiB");

    // Meanwhile a j:true write becomes durable, and w:1 writes are fsynced
    // at the commit interval: the age returns to zero.
    let durable = engine.writer().insert("db.c", doc! {"_id": "j"}).unwrap();
    engine.wait_durable(durable.ts).unwrap();
    engine.writer().insert("db.c", doc! {"_id": "w1"}).unwrap();
    let deadline = Instant::now() + STEP_TIMEOUT;
    while age_ms(&engine) > 0 {
        assert!(Instant::now() < deadline, "a w:1 write stayed unsynced behind the checkpoint's fsync");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!checkpoint.is_finished(), "the checkpoint's fsync was not held");

    faulty.release_held_sync();
    // The checkpoint picked its timestamp before the j:true write.
    assert!(checkpoint.join().unwrap().unwrap() < durable.ts);
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let found = reader.scan("db.big", Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap().len() as u64;
    assert_eq!(found, documents);
    drop(reader);
    engine.shutdown().unwrap();
}
