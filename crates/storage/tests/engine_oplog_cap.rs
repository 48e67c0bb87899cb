//! The oplog is capped (`--oplog-size-mb`) but never truncated past what
//! the checkpoint still needs: old segments go once a checkpoint covers
//! them, and a restart still finds every document.

use std::ops::Bound;

use bson::doc;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::TimestampBson;
use slipstream_storage::{Engine, ReadAt, Timestamp};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.oplog_size_bytes = 8 * 1024 * 1024;
    options
}

#[test]
fn capped_oplog_drops_old_segments_only_below_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let payload = "p".repeat(4000);
    let mut writer_count = 0;
    // Without a checkpoint nothing may be deleted, whatever the cap.
    for _ in 0..3000 {
        engine.writer().insert("db.c", doc! {"_id": writer_count, "p": payload.clone()}).unwrap();
        writer_count += 1;
    }
    engine.wait_durable(engine.last_applied().ts).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let stats = engine.stats();
    assert!(stats.oplog_size_bytes > 8 * 1024 * 1024, "nothing may go before a checkpoint covers it");
    let first_before = stats.oplog_first;

    // After checkpoints the journal shrinks back towards its cap.
    for round in 0..3 {
        for _ in 0..1000 {
            engine.writer().insert("db.c", doc! {"_id": writer_count, "p": payload.clone(), "round": round}).unwrap();
            writer_count += 1;
        }
        engine.checkpoint_now().unwrap();
    }
    let mut stats = engine.stats();
    for _ in 0..100 {
        if stats.oplog_size_bytes <= 10 * 1024 * 1024 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        stats = engine.stats();
    }
    assert!(stats.oplog_size_bytes <= 10 * 1024 * 1024, "journal at {} bytes", stats.oplog_size_bytes);
    assert!(stats.oplog_first > first_before);
    assert!(stats.oplog_first <= stats.checkpoint_timestamp, "the entry at the checkpoint must stay");
    let first_entry = engine.oplog_read(Bound::Unbounded, 1, usize::MAX).unwrap();
    assert_eq!(Timestamp::from_bson(first_entry[0].get_timestamp("ts").unwrap()), stats.oplog_first);

    // Writes after the last checkpoint, then a crash: recovery needs the
    // journal from the checkpoint on, and finds it.
    for _ in 0..100 {
        engine.writer().insert("db.c", doc! {"_id": writer_count, "p": "tail"}).unwrap();
        writer_count += 1;
    }
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.reader(ReadAt::Latest).unwrap().count("db.c").unwrap(), writer_count as u64);
    engine.shutdown().unwrap();
}
