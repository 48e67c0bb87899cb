//! The positions a member reports (applied and durable, each with its
//! entry's term and `wall` date), the oplog read backwards and by
//! timestamp, and the cluster time.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document, RawDocumentBuf};
use slipstream_clock::MAX_ACCEPTABLE_CLOCK_DRIFT_SECS;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::io::FaultyIo;
use slipstream_storage::journal::segment_file_name;
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::recovery::JOURNAL_DIR_NAME;
use slipstream_storage::{Engine, OpTime, Timestamp, TimestampBson, WriteGate};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 60_000;
    options.poison_policy = PoisonPolicy::RefuseLaterCalls;
    options.replicated = true;
    options
}

/// (optime, wall ms) of an oplog entry, read from the entry itself.
fn position_of(entry: &RawDocumentBuf) -> (OpTime, i64) {
    let document = Document::try_from(entry.as_ref()).unwrap();
    let ts = Timestamp::from_bson(document.get_timestamp("ts").unwrap());
    let optime = OpTime::new(ts, document.get_i64("t").unwrap());
    (optime, document.get_datetime("wall").unwrap().timestamp_millis())
}

fn newest(engine: &Arc<Engine>) -> (OpTime, i64) {
    position_of(&engine.oplog_read_newest(1).unwrap()[0])
}

fn wall_clock_secs() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as u32
}

#[test]
fn positions_carry_their_entries_wall_dates_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.last_applied_wall(), (OpTime::new(Timestamp::ZERO, -1), 0));
    engine.set_write_gate(WriteGate::Open { term: 2 });
    for i in 0..5 {
        engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
        std::thread::sleep(Duration::from_millis(3));
    }
    assert_eq!(engine.last_applied_wall(), newest(&engine));
    engine.wait_durable(engine.last_applied().ts).unwrap();
    assert_eq!(engine.last_durable_wall(), newest(&engine));
    let before = newest(&engine);
    // The wall date is the entry's own (milliseconds), not its second.
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.last_applied_wall(), before);
    assert_eq!(engine.last_durable_wall(), before);
    engine.shutdown().unwrap();
}

/// While an fsync is outstanding the durable position is the previous
/// entry's, with that entry's own term and date.
#[test]
fn the_durable_position_lags_with_its_own_term_and_date() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let first = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.wait_durable(first.ts).unwrap();
    let durable = engine.last_applied_wall();
    std::thread::sleep(Duration::from_millis(5));
    engine.set_write_gate(WriteGate::Open { term: 2 });
    let segment = dir.path().join(JOURNAL_DIR_NAME).join(segment_file_name(1));
    faulty.hold_next_sync(&segment);
    let second = engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    let waiter = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.wait_durable(second.ts))
    };
    assert!(faulty.wait_until_sync_held(Duration::from_secs(30)));
    assert_eq!(engine.last_applied_wall(), newest(&engine));
    assert_eq!(engine.last_applied().term, 2);
    assert_eq!(engine.last_durable_wall(), durable);
    assert_eq!(engine.last_durable(), first);
    faulty.release_held_sync();
    waiter.join().unwrap().unwrap();
    assert_eq!(engine.last_durable_wall(), engine.last_applied_wall());
    engine.shutdown().unwrap();
}

#[test]
fn the_oplog_reads_backwards_and_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    for i in 0..50 {
        engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    let all = engine.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    let ts_of = |entry: &RawDocumentBuf| position_of(entry).0.ts;
    // Backwards from an entry: it and the ones before it, newest first.
    let back = engine.oplog_read_newest_at_or_before(ts_of(&all[30]), 5).unwrap();
    let expected: Vec<RawDocumentBuf> = all[26..=30].iter().rev().cloned().collect();
    assert_eq!(back, expected);
    let before_first = engine.oplog_read_newest_at_or_before(Timestamp::new(0, 1), 5).unwrap();
    assert!(before_first.is_empty());
    assert_eq!(
        engine.oplog_read_newest_at_or_before(Timestamp::MAX, 2).unwrap(),
        vec![all[50].clone(), all[49].clone()]
    );
    assert_eq!(engine.oplog_read_newest_at_or_before(ts_of(&all[2]), 100).unwrap().len(), 3);
    // By timestamp: the entry, or nothing between entries and past the end.
    for entry in [&all[0], &all[17], &all[50]] {
        assert_eq!(engine.oplog_entry(ts_of(entry)).unwrap().as_ref(), Some(entry));
    }
    let missing = Timestamp::new(ts_of(&all[50]).secs, ts_of(&all[50]).inc + 1);
    assert_eq!(engine.oplog_entry(missing).unwrap(), None);
    assert_eq!(engine.oplog_entry(Timestamp::new(1, 1)).unwrap(), None);
    // The same after a restart, when the entries come from the files.
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.oplog_entry(ts_of(&all[17])).unwrap().as_ref(), Some(&all[17]));
    assert_eq!(engine.oplog_read_newest_at_or_before(ts_of(&all[30]), 5).unwrap(), expected);
    engine.shutdown().unwrap();
}

#[test]
fn the_oplog_clock_never_ticks_at_or_below_the_cluster_time() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let first = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    assert_eq!(engine.cluster_time(), first.ts, "the last timestamp handed out");
    // A cluster time a day ahead of the wall clock (a client that talked
    // to a node with a faster clock): the next write comes after it.
    let ahead = Timestamp::new(wall_clock_secs() + 24 * 3600, 7);
    engine.advance_cluster_time(ahead).unwrap();
    assert_eq!(engine.cluster_time(), ahead);
    let next = engine.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    assert!(next.ts > ahead, "{} is not after the cluster time {ahead}", next.ts);
    assert_eq!(engine.cluster_time(), next.ts);
    // Older values change nothing.
    engine.advance_cluster_time(first.ts).unwrap();
    assert_eq!(engine.cluster_time(), next.ts);
    // More than the drift limit ahead is refused, and nothing moves.
    let too_far = Timestamp::new(wall_clock_secs() + MAX_ACCEPTABLE_CLOCK_DRIFT_SECS + 3600, 1);
    let refused = engine.advance_cluster_time(too_far).unwrap_err();
    assert_eq!(refused.received, too_far);
    assert_eq!(engine.cluster_time(), next.ts);
    // A rollback takes the data back, not the clock.
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(first.ts).unwrap();
    assert_eq!(engine.cluster_time(), next.ts);
    engine.set_write_gate(WriteGate::Open { term: 2 });
    assert!(engine.writer().insert("db.c", doc! {"_id": 3}).unwrap().ts > next.ts);
    engine.shutdown().unwrap();
}

/// After a rollback the positions are the new last entry's, with its own
/// term and date: at once, while the next write's fsync is outstanding,
/// and after a restart.
#[test]
fn rollback_restores_the_positions_of_the_common_point() {
    let dir = tempfile::tempdir().unwrap();
    let faulty = FaultyIo::over_std();
    let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.wait_durable(engine.last_applied().ts).unwrap();
    let common = newest(&engine);
    std::thread::sleep(Duration::from_millis(5));
    engine.set_write_gate(WriteGate::Open { term: 2 });
    for i in 2..5 {
        engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    engine.wait_durable(engine.last_applied().ts).unwrap();
    assert_eq!(engine.last_applied().term, 2);
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(common.0.ts).unwrap();
    assert_eq!(engine.last_applied_wall(), common);
    assert_eq!(engine.last_durable_wall(), common);
    // The next entry is not durable yet: the durable position is still the
    // common point's, not the rolled-back entries'.
    engine.set_write_gate(WriteGate::Open { term: 3 });
    faulty.hold_next_sync(&dir.path().join(JOURNAL_DIR_NAME).join(segment_file_name(1)));
    let next = engine.writer().insert("db.c", doc! {"_id": 9}).unwrap();
    let waiter = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.wait_durable(next.ts))
    };
    assert!(faulty.wait_until_sync_held(Duration::from_secs(30)));
    assert_eq!(engine.last_durable_wall(), common);
    faulty.release_held_sync();
    waiter.join().unwrap().unwrap();
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(common.0.ts).unwrap();
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.last_applied_wall(), common);
    assert_eq!(engine.last_durable_wall(), common);
    engine.shutdown().unwrap();
}
