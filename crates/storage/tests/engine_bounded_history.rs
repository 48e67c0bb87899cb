//! A member whose commit point stalls: once the versions above the
//! checkpoint cost more than `history_bytes_max`, checkpoints go past the
//! stable timestamp and keep the history on disk. Memory empties, reads at
//! the stable timestamp still see it, and `rollback_to` it still works,
//! before and after a crash, including across a collection dropped above it.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, ReadAt, StorageError, Timestamp, WriteGate};

/// Small enough that a few documents pass it.
const HISTORY_BYTES_MAX: u64 = 4096;

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.replicated = true;
    options.history_bytes_max = HISTORY_BYTES_MAX;
    options
}

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let engine = Engine::open(options(dir)).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    engine
}

fn documents(engine: &Arc<Engine>, at: ReadAt, ns: &str) -> Vec<Document> {
    let reader = engine.reader(at).unwrap();
    let docs = reader
        .scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap();
    docs.into_iter().map(|(_, d)| d).collect()
}

fn roll_back(engine: &Arc<Engine>, ts: Timestamp) {
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(ts).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
}

/// Writes past a commit point at `stable`: many inserts into `db.c`, a hot
/// document rewritten, `db.gone` dropped. Returns the state at `stable`.
fn write_past(engine: &Arc<Engine>) -> (Timestamp, Vec<Document>, Vec<Document>) {
    engine.writer().insert("db.c", doc! {"_id": 0, "v": 0}).unwrap();
    engine.writer().insert("db.gone", doc! {"_id": 1}).unwrap();
    let stable = engine.last_applied().ts;
    engine.set_stable_timestamp(stable);
    let at_stable = (
        documents(engine, ReadAt::Latest, "db.c"),
        documents(engine, ReadAt::Latest, "db.gone"),
    );
    for i in 1..200 {
        engine
            .writer()
            .insert("db.c", doc! {"_id": i, "pad": "x".repeat(100)})
            .unwrap();
        if i % 10 == 0 {
            let v = i;
            engine
                .writer()
                .update(
                    "db.c",
                    &bson::Bson::Int32(0),
                    doc! {"_id": 0, "v": v},
                    doc! {"$set": {"v": v}},
                )
                .unwrap();
        }
    }
    engine.drop_collection("db.gone").unwrap();
    (stable, at_stable.0, at_stable.1)
}

#[test]
fn checkpoints_past_a_stalled_commit_point_keep_rollback_and_reads_at_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (stable, c_at_stable, gone_at_stable) = write_past(&engine);
    // The checkpoint thread (it looks every 100 ms) or this explicit
    // checkpoint goes past the stable timestamp: memory stays within the bound.
    let at = engine.checkpoint_now().unwrap();
    assert!(at > stable, "the checkpoint at {at} is not past the stable timestamp {stable}");
    let stats = engine.stats();
    assert!(stats.history_bytes_in_memory <= HISTORY_BYTES_MAX, "{stats:?}");
    assert!(stats.checkpoints_past_stable >= 1);
    assert!(stats.oldest_timestamp <= stable && stats.history_floor == Some(stats.oldest_timestamp));
    // Reads at the stable timestamp come from the history on disk.
    assert_eq!(documents(&engine, ReadAt::At(stable), "db.c"), c_at_stable);
    assert_eq!(documents(&engine, ReadAt::At(stable), "db.gone"), gone_at_stable);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c").len(), 200);
    assert!(engine.collection_info("db.gone").is_none());
    let below = Timestamp::from_u64(stats.oldest_timestamp.as_u64() - 1);
    assert!(matches!(
        engine.reader(ReadAt::At(below)),
        Err(StorageError::SnapshotTooOld(_))
    ));

    roll_back(&engine, stable);
    assert_eq!(engine.checkpoint_timestamp(), stable);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c"), c_at_stable);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.gone"), gone_at_stable);
    assert_eq!(engine.last_applied().ts, stable);
    // The member goes on: new writes, and after a clean restart the same state.
    engine.writer().insert("db.c", doc! {"_id": 1000}).unwrap();
    engine.shutdown().unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c").len(), 2);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.gone"), gone_at_stable);
    engine.shutdown().unwrap();
}

#[test]
fn a_crash_with_the_checkpoint_past_the_commit_point_recovers_and_still_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (stable, c_at_stable, gone_at_stable) = write_past(&engine);
    engine.checkpoint_now().unwrap();
    let floor = engine.stats().history_floor.expect("history kept");
    // More writes after the checkpoint, in the journal only; then a crash.
    engine.writer().insert("db.c", doc! {"_id": 500}).unwrap();
    engine.wait_durable(engine.last_applied().ts).unwrap();
    let newest = engine.last_applied().ts;
    drop(engine);

    let engine = open(dir.path());
    assert_eq!(
        engine.last_applied().ts,
        newest,
        "recovery replays the journal above the checkpoint"
    );
    assert_eq!(
        engine.stable_timestamp(),
        Some(floor),
        "the stable timestamp starts at the history floor"
    );
    assert_eq!(engine.oldest_timestamp(), floor);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c").len(), 201);
    assert_eq!(documents(&engine, ReadAt::At(stable), "db.c"), c_at_stable);
    roll_back(&engine, stable);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c"), c_at_stable);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.gone"), gone_at_stable);
    let newest_entry = engine.oplog_read_newest(1).unwrap();
    let entry_ts = newest_entry[0].get_timestamp("ts").unwrap();
    assert!(Timestamp::new(entry_ts.time, entry_ts.increment) <= stable);
    // Once the commit point passes the checkpoint, an ordinary checkpoint
    // drops the history.
    engine.writer().insert("db.c", doc! {"_id": 2000}).unwrap();
    engine.set_stable_timestamp(engine.last_applied().ts);
    engine.checkpoint_now().unwrap();
    assert_eq!(engine.stats().history_floor, None);
    assert_eq!(engine.oldest_timestamp(), engine.checkpoint_timestamp());
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c").len(), 2);
    engine.shutdown().unwrap();
}

#[test]
fn a_commit_point_that_reaches_the_checkpoint_exactly_drops_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (stable, _, _) = write_past(&engine);
    let at = engine.checkpoint_now().unwrap();
    assert!(at > stable && engine.stats().history_floor.is_some());
    // The commit point catches up with the checkpoint and nothing more is
    // written: the history, and the journal it holds, must still go.
    assert_eq!(engine.last_applied().ts, at);
    engine.set_stable_timestamp(at);
    engine.checkpoint_now().unwrap();
    let stats = engine.stats();
    assert_eq!(stats.history_floor, None, "{stats:?}");
    assert_eq!(stats.checkpoint_timestamp, at);
    assert_eq!(engine.oldest_timestamp(), at);
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.stats().history_floor, None);
    assert_eq!(documents(&engine, ReadAt::Latest, "db.c").len(), 200);
    engine.shutdown().unwrap();
}
