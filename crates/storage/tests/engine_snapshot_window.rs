//! The snapshot window under a steady load larger than memory allows it:
//! each checkpoint slides the window up just far enough to keep its share
//! of the memory bound (`checkpoint::WINDOW_SHARE_DIVISOR`), so memory
//! stays near that share and snapshot reads keep reaching back into it.
//!
//! What this caught: the window held every checkpoint back until memory
//! passed its bound, then checkpointed at the commit point, writing
//! everything it held at once and leaving nothing in memory. Under a steady
//! 1 KB insert load each member of a set did that once a minute, for about
//! 10 s, and the set ran at a tenth of its speed meanwhile.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Document};
use slipstream_storage::checkpoint::WINDOW_SHARE_DIVISOR;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, ReadAt, Timestamp, WriteGate};

/// MongoDB's default `minSnapshotHistoryWindowInSeconds`: far longer than
/// the test, so only memory moves the window.
const WINDOW_SECS: u32 = 300;
const HISTORY_BYTES_MAX: u64 = 2 * 1024 * 1024;
const ROUNDS: usize = 40;
/// Each round writes about an eighth of the bound, then lets the
/// checkpoint thread (which samples memory every 100 ms) take a sample.
const DOCUMENTS_PER_ROUND: i32 = 200;
const PAD_BYTES: usize = 1_000;
const PAUSE: Duration = Duration::from_millis(150);

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 200;
    options.journal_commit_interval_ms = 2;
    options.replicated = true;
    options.history_bytes_max = HISTORY_BYTES_MAX;
    options.snapshot_history_window_secs = WINDOW_SECS;
    let engine = Engine::open(options).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    engine
}

fn count_at(engine: &Arc<Engine>, ts: Timestamp) -> usize {
    let reader = engine.reader(ReadAt::At(ts)).unwrap();
    let docs: Vec<(_, Document)> = reader
        .scan("db.c", Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap();
    docs.len()
}

#[test]
fn a_steady_load_slides_the_window_instead_of_emptying_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let share = HISTORY_BYTES_MAX / WINDOW_SHARE_DIVISOR;
    // (round, memory after it, checkpoint timestamp, newest timestamp)
    let mut seen = Vec::new();
    // Timestamps after each round, and how many documents there were then.
    let mut rounds: Vec<(Timestamp, usize)> = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..DOCUMENTS_PER_ROUND {
            let id = round as i32 * DOCUMENTS_PER_ROUND + i;
            engine
                .writer()
                .insert("db.c", doc! {"_id": id, "pad": "x".repeat(PAD_BYTES)})
                .unwrap();
        }
        let newest = engine.last_applied().ts;
        engine.wait_durable(newest).unwrap();
        engine.set_stable_timestamp(newest);
        rounds.push((newest, (round + 1) * DOCUMENTS_PER_ROUND as usize));
        std::thread::sleep(PAUSE);
        let stats = engine.stats();
        seen.push((round, stats.history_bytes_in_memory, stats.checkpoint_timestamp, newest));
    }
    let stats = engine.stats();
    assert_eq!(stats.checkpoints_past_stable, 0, "{stats:?}");
    assert!(
        stats.checkpoint_timestamp > Timestamp::ZERO,
        "no checkpoint under the load: {seen:?}"
    );
    // The whole load is four times the bound: the first half of it fills
    // the window's share; from then on memory stays near the share, never
    // at the bound, and never near empty.
    for &(round, bytes, _, _) in &seen[ROUNDS / 2..] {
        assert!(bytes <= HISTORY_BYTES_MAX, "round {round}: over the bound: {seen:?}");
        assert!(bytes >= share / 2, "round {round}: the window was emptied: {seen:?}");
    }
    // The window reaches below the newest write: the checkpoint lags it,
    // and a snapshot read between the two sees the documents of its time;
    // so too once the load has stopped and more checkpoints have come (the
    // last round may still slide it a little).
    let (_, _, _, newest) = *seen.last().unwrap();
    for pause in [Duration::ZERO, Duration::from_secs(1)] {
        std::thread::sleep(pause);
        let checkpoint = engine.stats().checkpoint_timestamp;
        assert!(checkpoint < newest, "{seen:?}");
        let readable: Vec<_> = rounds.iter().filter(|(ts, _)| *ts >= checkpoint).collect();
        assert!(readable.len() >= 2, "the window holds under two rounds: {seen:?}");
        for &&(ts, documents) in &readable {
            assert_eq!(count_at(&engine, ts), documents, "a snapshot read at {ts}");
        }
    }
    engine.shutdown().unwrap();
}

#[test]
fn flush_makes_every_write_durable_and_keeps_the_snapshot_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = EngineOptions::new(dir.path());
    // Nothing is synced or checkpointed but by the flush.
    options.checkpoint_interval_ms = 600_000;
    options.journal_commit_interval_ms = 600_000;
    options.replicated = true;
    options.snapshot_history_window_secs = WINDOW_SECS;
    let engine = Engine::open(options).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let mut first = None;
    for i in 0..50 {
        let optime = engine.writer().insert("db.c", doc! {"_id": i}).unwrap();
        first.get_or_insert(optime.ts);
        engine.set_stable_timestamp(optime.ts);
    }
    let first = first.unwrap();
    assert!(engine.last_durable() < engine.last_applied());
    let checkpoint = engine.flush().unwrap();
    assert_eq!(engine.last_durable(), engine.last_applied());
    // A checkpoint at the newest write would give up the window: the
    // first write is still readable at its own timestamp.
    assert!(checkpoint < first, "flush checkpointed at {checkpoint}, past the window's first write {first}");
    assert_eq!(count_at(&engine, first), 1);
    engine.shutdown().unwrap();
}
