//! The journal's API: append, read, reopen, segments, truncation, the size
//! cap, watches and shutdown.

mod journal_common;

use std::ops::Bound;

use journal_common::*;
use slipstream_storage::journal::{Journal, JournalOptions};
use slipstream_storage::{StorageError, Timestamp};

#[test]
fn appended_entries_are_readable_at_once_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    assert_eq!(journal.last_ts(), None);
    assert_eq!(journal.first_ts(), None);
    for i in 0..50 {
        journal.append(ts(i), &entry(ts(i), 100 + i as usize * 3)).unwrap();
        assert_eq!(journal.last_ts(), Some(ts(i)));
    }
    assert_eq!(all_timestamps(&journal), (0..50).map(ts).collect::<Vec<_>>());
    let durable = journal.sync_now().unwrap();
    assert_eq!(durable, ts(49));
    assert_eq!(journal.durable_ts(), ts(49));
    journal.close().unwrap();
    drop(journal);

    let journal = open(dir.path(), small_options());
    assert_eq!(journal.first_ts(), Some(ts(0)));
    assert_eq!(journal.last_ts(), Some(ts(49)));
    assert_eq!(journal.durable_ts(), ts(49));
    assert_eq!(all_timestamps(&journal), (0..50).map(ts).collect::<Vec<_>>());
    let stats = journal.stats();
    assert!(stats.segments > 1, "4 KiB segments must have rolled over: {stats:?}");
    assert_eq!(stats.entries, 50);
}

#[test]
fn reads_honour_bounds_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    for i in 0..20 {
        journal.append(ts(i), &entry(ts(i), 200)).unwrap();
    }
    let from_5 = journal.read(Bound::Included(ts(5)), 3, usize::MAX).unwrap();
    assert_eq!(from_5.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![ts(5), ts(6), ts(7)]);
    let after_5 = journal.read(Bound::Excluded(ts(5)), 1, usize::MAX).unwrap();
    assert_eq!(after_5[0].0, ts(6));
    // max_bytes stops the batch once reached, but always returns one entry.
    let one = journal.read(Bound::Unbounded, 100, 1).unwrap();
    assert_eq!(one.len(), 1);
    let some = journal.read(Bound::Unbounded, 100, 1000).unwrap();
    assert!(some.len() >= 4 && some.len() <= 6, "{} entries for 1000 bytes of 200-byte entries", some.len());
    assert!(journal.read(Bound::Excluded(ts(19)), 10, usize::MAX).unwrap().is_empty());
    assert!(journal.read(Bound::Unbounded, 0, usize::MAX).unwrap().is_empty());
    let newest = journal.read_newest(3).unwrap();
    assert_eq!(newest.iter().map(|(t, _)| *t).collect::<Vec<_>>(), vec![ts(19), ts(18), ts(17)]);
    for (t, bytes) in newest {
        assert_entry(t, &bytes);
    }
}

#[test]
fn old_entries_are_read_back_from_the_files() {
    // More data than the recent-entry cache holds, so that early entries
    // come from positional reads of the segment files.
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        commit_interval_ms: 1,
        segment_size_bytes: 1 << 20,
        size_cap_bytes: u64::MAX,
        ..JournalOptions::default()
    };
    let journal = open(dir.path(), options);
    let size = 64 * 1024;
    let count = (slipstream_storage::journal::RECENT_CACHE_BYTES_MAX / size) as u32 + 200;
    for i in 0..count {
        journal.append(ts(i), &entry(ts(i), size)).unwrap();
        if i % 100 == 99 {
            journal.sync_now().unwrap();
        }
    }
    journal.sync_now().unwrap();
    let stats = journal.stats();
    assert!(stats.cache_entries < u64::from(count), "the cache must have evicted: {stats:?}");
    let first = journal.read(Bound::Unbounded, 50, usize::MAX).unwrap();
    assert_eq!(first.len(), 50);
    for (i, (t, bytes)) in first.iter().enumerate() {
        assert_eq!(*t, ts(i as u32));
        assert_entry(*t, bytes);
    }
    assert_eq!(all_timestamps(&journal).len(), count as usize);
}

#[test]
fn the_recent_cache_keeps_to_its_configured_size() {
    // The node sizes the cache from --cache-size-mb: a small setting must
    // hold, not the largest default.
    let dir = tempfile::tempdir().unwrap();
    let cache_max = 1 << 20;
    let options = JournalOptions {
        commit_interval_ms: 1,
        segment_size_bytes: 1 << 20,
        size_cap_bytes: u64::MAX,
        recent_cache_bytes_max: cache_max,
        ..JournalOptions::default()
    };
    let journal = open(dir.path(), options);
    let size = 64 * 1024;
    for i in 0..64 {
        journal.append(ts(i), &entry(ts(i), size)).unwrap();
    }
    journal.sync_now().unwrap();
    let stats = journal.stats();
    assert!(stats.cache_bytes <= cache_max as u64, "{stats:?}");
    assert!(stats.cache_bytes >= (cache_max / 2) as u64, "the cache still holds recent entries: {stats:?}");
    assert_eq!(all_timestamps(&journal).len(), 64);
}

#[test]
fn appends_past_the_configured_pending_bytes_start_a_write() {
    // With an hour's commit interval nothing is written on its own: only
    // the pending limit makes the appends past it wait for a group commit.
    let dir = tempfile::tempdir().unwrap();
    let size = 64 * 1024;
    let options = JournalOptions {
        commit_interval_ms: 3_600_000,
        segment_size_bytes: 1 << 20,
        size_cap_bytes: u64::MAX,
        pending_bytes_max: 4 * size,
        ..JournalOptions::default()
    };
    let journal = open(dir.path(), options);
    for i in 0..16 {
        journal.append(ts(i), &entry(ts(i), size)).unwrap();
    }
    // The batches taken for the limit are written and fsynced without
    // anyone asking; generous deadline for a loaded machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while journal.durable_ts() < ts(8) {
        assert!(std::time::Instant::now() < deadline, "appends past the pending limit must start writes: {:?}", journal.stats());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(journal.stats().bytes_written >= 8 * size as u64);
}

#[test]
fn truncate_after_removes_newer_entries_durably() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    for i in 0..60 {
        journal.append(ts(i), &entry(ts(i), 150)).unwrap();
    }
    let segments_before = journal.stats().segments;
    journal.truncate_after(ts(9)).unwrap();
    assert_eq!(journal.last_ts(), Some(ts(9)));
    assert_eq!(journal.durable_ts(), ts(9));
    assert!(journal.stats().segments < segments_before);
    assert_eq!(*journal.appended_watch().borrow(), ts(9));
    // A rolled-back timestamp may be written again (a new primary's entry).
    for i in 10..15 {
        journal.append(ts(i), &entry(ts(i), 150)).unwrap();
    }
    journal.sync_now().unwrap();
    assert_eq!(all_timestamps(&journal), (0..15).map(ts).collect::<Vec<_>>());
    // Truncating after the last entry changes nothing.
    journal.truncate_after(ts(100)).unwrap();
    drop(journal);
    let journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal), (0..15).map(ts).collect::<Vec<_>>());
    // Truncating before the first entry empties the journal.
    journal.truncate_after(Timestamp::new(1, 0)).unwrap();
    assert_eq!(journal.last_ts(), None);
    journal.append(ts(3), &entry(ts(3), 150)).unwrap();
    journal.sync_now().unwrap();
    drop(journal);
    let journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal), vec![ts(3)]);
}

#[test]
fn the_size_cap_deletes_old_segments_but_never_past_the_retain_point() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        commit_interval_ms: 1,
        segment_size_bytes: 4096,
        size_cap_bytes: 16 * 1024,
        ..JournalOptions::default()
    };
    let journal = open(dir.path(), options.clone());
    for i in 0..200 {
        journal.append(ts(i), &entry(ts(i), 500)).unwrap();
    }
    journal.sync_now().unwrap();
    // No retain point yet: nothing may go.
    assert_eq!(journal.first_ts(), Some(ts(0)));
    journal.set_retain_from(ts(100));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while journal.first_ts() == Some(ts(0)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let first = journal.first_ts().unwrap();
    assert!(first > ts(0), "old segments should have been deleted");
    assert!(first <= ts(100), "a segment holding the retain point was deleted: first is {first}");
    // The cap stops before the retain point: the journal still starts at or
    // below it, and at most one segment's worth below it is kept.
    let kept_below = all_timestamps(&journal).iter().filter(|t| **t < ts(100)).count();
    assert!(kept_below < 4096 / 500 + 1, "{kept_below} entries below the retain point kept");
    let stats = journal.stats();
    assert!(stats.segments_deleted > 0);
    // Deleted segments are whole: everything from `first` on is there.
    let remaining = all_timestamps(&journal);
    assert_eq!(remaining.first(), Some(&first));
    assert_eq!(remaining.last(), Some(&ts(199)));
    drop(journal);
    let journal = open(dir.path(), options);
    assert_eq!(journal.first_ts(), Some(first));
    assert_eq!(all_timestamps(&journal).len(), remaining.len());
}

#[test]
fn watches_follow_appends_and_durability() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), JournalOptions { commit_interval_ms: 10_000, ..small_options() });
    let mut appended = journal.appended_watch();
    let mut durable = journal.durable_watch();
    journal.append(ts(1), &entry(ts(1), 100)).unwrap();
    assert!(appended.has_changed().unwrap());
    assert_eq!(*appended.borrow_and_update(), ts(1));
    assert!(!durable.has_changed().unwrap(), "durable moved without a sync");
    journal.wait_durable(ts(1)).unwrap();
    assert!(durable.has_changed().unwrap());
    assert_eq!(*durable.borrow_and_update(), ts(1));
}

#[test]
fn the_commit_interval_syncs_without_being_asked() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), JournalOptions { commit_interval_ms: 20, ..small_options() });
    journal.append(ts(1), &entry(ts(1), 100)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while journal.durable_ts() < ts(1) {
        assert!(std::time::Instant::now() < deadline, "the interval never synced");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn close_syncs_and_refuses_later_appends() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), JournalOptions { commit_interval_ms: 10_000, ..small_options() });
    journal.append(ts(1), &entry(ts(1), 100)).unwrap();
    journal.close().unwrap();
    assert_eq!(journal.durable_ts(), ts(1));
    assert!(matches!(journal.append(ts(2), &entry(ts(2), 100)), Err(StorageError::ShuttingDown)));
    assert_eq!(all_timestamps(&journal), vec![ts(1)]);
    journal.close().unwrap();
}

#[test]
fn entries_that_are_not_bson_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    assert!(matches!(journal.append(ts(1), b"not bson"), Err(StorageError::InvalidDocument(_))));
    assert_eq!(journal.last_ts(), None);
}

#[test]
#[should_panic(expected = "out of order")]
fn an_out_of_order_append_is_a_bug() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    journal.append(ts(2), &entry(ts(2), 100)).unwrap();
    let _ = journal.append(ts(1), &entry(ts(1), 100));
}

#[test]
fn an_entry_larger_than_a_segment_gets_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    journal.append(ts(0), &entry(ts(0), 100)).unwrap();
    journal.append(ts(1), &entry(ts(1), 10_000)).unwrap();
    journal.append(ts(2), &entry(ts(2), 100)).unwrap();
    journal.sync_now().unwrap();
    assert_eq!(journal.stats().segments, 3);
    drop(journal);
    let journal: Journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal), vec![ts(0), ts(1), ts(2)]);
}

#[test]
fn the_size_cap_keeps_the_journal_starting_at_or_before_a_retain_point_between_entries() {
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions {
        commit_interval_ms: 1,
        segment_size_bytes: 4096,
        size_cap_bytes: 8 * 1024,
        ..JournalOptions::default()
    };
    let journal = open(dir.path(), options);
    // Even counters only, so that an odd retain point falls between entries.
    for i in 0..200 {
        journal.append(ts(2 * i), &entry(ts(2 * i), 500)).unwrap();
    }
    journal.sync_now().unwrap();
    for retain in [21, 101, 251, 399] {
        journal.set_retain_from(ts(retain));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut previous = journal.stats().segments_deleted;
        // Wait until the cap has had its look (deletions stop changing).
        loop {
            std::thread::sleep(std::time::Duration::from_millis(20));
            let now = journal.stats().segments_deleted;
            if now == previous || std::time::Instant::now() > deadline {
                break;
            }
            previous = now;
        }
        let first = journal.first_ts().unwrap();
        assert!(first <= ts(retain), "retain point {retain}: the journal starts after it, at {first}");
        assert_eq!(journal.last_ts(), Some(ts(398)));
    }
    assert!(journal.stats().segments_deleted > 0);
}

fn appends(entries: &[(Timestamp, Vec<u8>)]) -> Vec<slipstream_storage::journal::JournalAppend<'_>> {
    entries
        .iter()
        .map(|(t, bytes)| slipstream_storage::journal::JournalAppend {
            ts: *t,
            meta: slipstream_storage::journal::EntryMeta::of_entry(bytes),
            entry: bytes,
        })
        .collect()
}

#[test]
fn a_batch_synced_through_at_once_is_written_and_fsynced_by_the_syncing_caller() {
    // An hour's interval: only the caller's sync can make it durable now.
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions { commit_interval_ms: 3_600_000, ..small_options() };
    let journal = open(dir.path(), options);
    let batch: Vec<_> = (0..5).map(|i| (ts(i), entry(ts(i), 300))).collect();
    journal.append_batch(&appends(&batch)).unwrap();
    assert_eq!(journal.last_ts(), Some(ts(4)), "readable at once");
    assert!(journal.durable_ts() < ts(4));
    journal.sync_through(ts(4)).unwrap();
    assert_eq!(journal.durable_ts(), ts(4));
    assert_eq!(journal.stats().commits_on_caller, 1, "the caller wrote the batch: {:?}", journal.stats());
    journal.close().unwrap();
    drop(journal);
    let journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal), (0..5).map(ts).collect::<Vec<_>>());
}

#[test]
fn an_append_to_an_idle_journal_is_fsynced_within_the_interval_without_a_wake() {
    // An append does not wake the group-commit thread: its bounded idle
    // wait must still find the entry (an unbounded wait would leave it
    // unsynced until some other write asked for a sync).
    let dir = tempfile::tempdir().unwrap();
    let options = JournalOptions { commit_interval_ms: 50, ..small_options() };
    let journal = open(dir.path(), options);
    // Let the thread settle into its idle wait first.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let batch = vec![(ts(1), entry(ts(1), 300))];
    journal.append_batch(&appends(&batch)).unwrap();
    let started = std::time::Instant::now();
    while journal.durable_ts() < ts(1) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the entry was not fsynced 10 s after its append (interval 50 ms)"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(journal.stats().commits_on_caller, 0, "nobody synced on the caller");
}
