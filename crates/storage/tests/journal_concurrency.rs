//! Many writers appending through one mutex (the engine's write lock) and
//! waiting for durability, with tailing readers and truncations racing them.

mod journal_common;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use journal_common::*;
use parking_lot::Mutex;
use slipstream_storage::journal::{Journal, JournalOptions};
use slipstream_storage::Timestamp;

const WRITERS: u32 = 16;
const APPENDS_PER_WRITER: u32 = 150;

fn concurrency_options() -> JournalOptions {
    JournalOptions {
        commit_interval_ms: 50,
        segment_size_bytes: 64 * 1024,
        size_cap_bytes: u64::MAX,
        ..JournalOptions::default()
    }
}

/// Follows the journal with `appended_watch`, as a tailable cursor does,
/// until it has seen `total` entries; checks order and content.
fn tail(journal: Arc<Journal>, total: usize) -> Vec<Timestamp> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async move {
        let mut watch = journal.appended_watch();
        let mut seen: Vec<Timestamp> = Vec::new();
        while seen.len() < total {
            let from = seen.last().map_or(Bound::Unbounded, |last| Bound::Excluded(*last));
            let batch = journal.read(from, 64, 256 * 1024).unwrap();
            if batch.is_empty() {
                tokio::time::timeout(std::time::Duration::from_secs(20), watch.changed())
                    .await
                    .expect("the appended watch never woke the tailer")
                    .unwrap();
                continue;
            }
            for (t, bytes) in batch {
                if let Some(last) = seen.last() {
                    assert!(t > *last, "tailer saw {t} after {last}");
                }
                assert_entry(t, &bytes);
                seen.push(t);
            }
        }
        seen
    })
}

#[test]
fn concurrent_writers_share_fsyncs_and_lose_nothing() {
    writers_lose_nothing(false);
}

/// Half the writers write and fsync their batch themselves
/// (`sync_through`) while the group-commit thread and its sync workers
/// serve the others: batches still become durable in order, and nothing
/// is lost.
#[test]
fn writers_that_sync_on_their_own_thread_beside_the_group_commit_lose_nothing() {
    writers_lose_nothing(true);
}

fn writers_lose_nothing(half_sync_through: bool) {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(open(dir.path(), concurrency_options()));
    let write_lock = Arc::new(Mutex::new(0u32));
    let total = (WRITERS * APPENDS_PER_WRITER) as usize;
    let tailer = {
        let journal = journal.clone();
        std::thread::spawn(move || tail(journal, total))
    };
    let barrier = Arc::new(Barrier::new(WRITERS as usize));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let journal = journal.clone();
            let write_lock = write_lock.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..APPENDS_PER_WRITER {
                    let t = {
                        let mut next = write_lock.lock();
                        let t = ts(*next);
                        *next += 1;
                        journal.append(t, &entry(t, 1024)).unwrap();
                        t
                    };
                    if half_sync_through && writer % 2 == 0 {
                        journal.sync_through(t).unwrap();
                    } else {
                        journal.wait_durable(t).unwrap();
                    }
                    assert!(journal.durable_ts() >= t);
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let seen = tailer.join().unwrap();
    let expected: Vec<Timestamp> = (0..total as u32).map(ts).collect();
    assert_eq!(seen, expected);
    let stats = journal.stats();
    assert_eq!(stats.entries_appended, total as u64);
    assert_eq!(stats.durable_ts, ts(total as u32 - 1));
    assert!(
        stats.commits < total as u64 / 2,
        "group commit should share fsyncs between writers: {} commits for {total} entries",
        stats.commits
    );
    if half_sync_through {
        assert!(stats.commits_on_caller > 0, "no writer wrote and fsynced its own batch");
    } else {
        assert_eq!(stats.commits_on_caller, 0);
    }
    journal.close().unwrap();
    drop(journal);
    let journal = open(dir.path(), concurrency_options());
    assert_eq!(all_timestamps(&journal), expected);
}

#[test]
fn readers_racing_truncations_see_consistent_entries() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        commit_interval_ms: 2,
        segment_size_bytes: 8 * 1024,
        size_cap_bytes: u64::MAX,
        ..JournalOptions::default()
    };
    let journal = Arc::new(open(dir.path(), options));
    let write_lock = Arc::new(Mutex::new(0u32));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|reader| {
            let journal = journal.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let batch = if reader == 2 {
                        journal.read_newest(20).unwrap()
                    } else {
                        journal.read(Bound::Unbounded, 500, 1 << 20).unwrap()
                    };
                    for window in batch.windows(2) {
                        if reader == 2 {
                            assert!(window[0].0 > window[1].0);
                        } else {
                            assert!(window[0].0 < window[1].0);
                        }
                    }
                    for (t, bytes) in &batch {
                        assert_entry(*t, bytes);
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let journal = journal.clone();
            let write_lock = write_lock.clone();
            std::thread::spawn(move || {
                for round in 0..150u32 {
                    let mut next = write_lock.lock();
                    if writer == 0 && round % 10 == 9 {
                        // A rollback: drop the newest few entries.
                        let keep = next.saturating_sub(7);
                        let last_kept = if keep == 0 { Timestamp::new(1, 0) } else { ts(keep - 1) };
                        journal.truncate_after(last_kept).unwrap();
                        assert!(journal.last_ts().is_none_or(|last| last <= last_kept));
                        continue;
                    }
                    let t = ts(*next);
                    *next += 1;
                    journal.append(t, &entry(t, 200 + (round as usize % 5) * 300)).unwrap();
                    drop(next);
                    if round % 3 == 0 {
                        journal.wait_durable(t).unwrap();
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 0);
    }
    let before: Vec<Timestamp> = all_timestamps(&journal);
    for window in before.windows(2) {
        assert!(window[0] < window[1]);
    }
    journal.close().unwrap();
    drop(journal);
    let journal = open(dir.path(), concurrency_options());
    assert_eq!(all_timestamps(&journal), before);
}
