//! A journal that ends before the checkpoint has lost entries (at least
//! the one at the checkpoint's timestamp, and any after it): the engine
//! refuses to open, and keeps refusing, until the loss is accepted on
//! purpose (`EngineOptions::accept_journal_loss`, `--accept-journal-loss`).
//! Accepting starts from the checkpoint and leaves a journal that reaches
//! it again, so later opens need no flag.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use bson::doc;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::recovery::JOURNAL_DIR_NAME;
use slipstream_storage::{Engine, ReadAt, StorageError};

fn options(dir: &Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options
}

fn accepting(dir: &Path) -> EngineOptions {
    EngineOptions { accept_journal_loss: true, ..options(dir) }
}

fn ids(engine: &Arc<Engine>) -> Vec<i32> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let documents = reader.scan("db.c", Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap();
    documents.into_iter().map(|(_, d)| d.get_i32("_id").unwrap()).collect()
}

/// Writes `0..n`, durably, and shuts down cleanly (a final checkpoint).
fn write_and_shut_down(dir: &Path, n: i32) {
    let engine = Engine::open(options(dir)).unwrap();
    for id in 0..n {
        let optime = engine.writer().insert("db.c", doc! {"_id": id}).unwrap();
        engine.wait_durable(optime.ts).unwrap();
    }
    engine.shutdown().unwrap();
    assert!(engine.checkpoint_timestamp() > slipstream_storage::Timestamp::ZERO);
}

fn expect_journal_lost(dir: &Path, what: &str) {
    match Engine::open(options(dir)) {
        Err(StorageError::JournalLost(message)) => assert!(message.contains(what), "{message}"),
        Err(other) => panic!("expected JournalLost, got {other:?}"),
        Ok(_) => panic!("an engine whose journal was lost opened"),
    }
}

#[test]
fn a_deleted_journal_directory_stops_the_open_until_the_loss_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    write_and_shut_down(dir.path(), 10);
    let journal = dir.path().join(JOURNAL_DIR_NAME);
    std::fs::remove_dir_all(&journal).unwrap();

    expect_journal_lost(dir.path(), "journal directory");
    // The refusal changed nothing, so it holds on every start.
    assert!(!journal.exists());
    expect_journal_lost(dir.path(), "journal directory");

    let engine = Engine::open(accepting(dir.path())).unwrap();
    assert_eq!(ids(&engine), (0..10).collect::<Vec<_>>());
    let optime = engine.writer().insert("db.c", doc! {"_id": 10}).unwrap();
    engine.wait_durable(optime.ts).unwrap();
    // A crash (no final checkpoint): the journal must reach the checkpoint
    // by itself for the next open, which has no flag.
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(ids(&engine), (0..11).collect::<Vec<_>>());
    engine.shutdown().unwrap();
}

#[test]
fn a_journal_that_ends_before_the_checkpoint_stops_the_open_until_the_loss_is_accepted() {
    let dir = tempfile::tempdir().unwrap();
    write_and_shut_down(dir.path(), 10);
    // The journal directory is there, its segments are not.
    let journal = dir.path().join(JOURNAL_DIR_NAME);
    for file in std::fs::read_dir(&journal).unwrap() {
        std::fs::remove_file(file.unwrap().path()).unwrap();
    }

    expect_journal_lost(dir.path(), "before the checkpoint");
    expect_journal_lost(dir.path(), "before the checkpoint");

    let engine = Engine::open(accepting(dir.path())).unwrap();
    assert_eq!(ids(&engine), (0..10).collect::<Vec<_>>());
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(ids(&engine), (0..10).collect::<Vec<_>>());
    engine.shutdown().unwrap();
}
