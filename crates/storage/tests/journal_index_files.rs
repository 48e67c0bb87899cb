//! Index files of sealed segments (`journal/index_file.rs`): a reopened
//! journal reads only its last segment whole, finds the same entries as a
//! full scan would, and never trusts an index file that does not describe
//! its segment.

mod journal_common;

use journal_common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use slipstream_storage::journal::{segment_file_name, Journal};
use slipstream_storage::{StorageError, Timestamp};

const ENTRY_BYTES: usize = 300;

fn index_file(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_file_name(seq).replace(".seg", ".idx"))
}

fn segment_count(dir: &Path) -> u64 {
    let names = std::fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned());
    names.filter(|name| name.ends_with(".seg")).count() as u64
}

/// Appends entries `from..to`, durably.
fn append(journal: &Journal, from: u32, to: u32) -> Vec<Timestamp> {
    let appended: Vec<Timestamp> = (from..to).map(ts).collect();
    for &t in &appended {
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
    }
    journal.sync_now().unwrap();
    appended
}

/// A closed journal of several sealed segments; the timestamps written.
fn sealed_journal(dir: &Path) -> Vec<Timestamp> {
    let journal = open(dir, small_options());
    let appended = append(&journal, 0, 80);
    drop(journal);
    assert!(segment_count(dir) >= 5, "the test wants several sealed segments");
    appended
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn sealed_segments_open_from_their_index_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut appended = sealed_journal(dir.path());
    let segments = segment_count(dir.path());
    for seq in 1..segments {
        assert!(index_file(dir.path(), seq).exists(), "segment {seq} has no index file after close");
    }
    assert!(!index_file(dir.path(), segments).exists(), "the last segment takes appends: no index file");

    let journal = open(dir.path(), small_options());
    let stats = journal.stats();
    assert_eq!((stats.segments_indexed_at_open, stats.segments_scanned_at_open), (segments - 1, 1));
    assert_eq!(all_timestamps(&journal), appended);
    // It goes on as before: appends, and a reopen keeps them.
    appended.extend(append(&journal, 80, 120));
    drop(journal);
    let journal = open(dir.path(), small_options());
    assert_eq!(journal.stats().segments_scanned_at_open, 1);
    assert_eq!(all_timestamps(&journal), appended);
}

#[test]
fn an_index_file_that_fails_its_checks_is_scanned_around_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let appended = sealed_journal(dir.path());
    let segments = segment_count(dir.path());
    // Segment 2's file damaged, segment 3's replaced by segment 4's.
    let mut damaged = std::fs::read(index_file(dir.path(), 2)).unwrap();
    damaged[60] ^= 0x01;
    std::fs::write(index_file(dir.path(), 2), damaged).unwrap();
    std::fs::copy(index_file(dir.path(), 4), index_file(dir.path(), 3)).unwrap();

    let journal = open(dir.path(), small_options());
    let stats = journal.stats();
    assert_eq!((stats.segments_indexed_at_open, stats.segments_scanned_at_open), (segments - 3, 3));
    assert_eq!(all_timestamps(&journal), appended);
    wait_for("the indexer to replace both files", || journal.stats().index_files_written == 2);
    drop(journal);
    let journal = open(dir.path(), small_options());
    assert_eq!(journal.stats().segments_indexed_at_open, segments - 1);
    assert_eq!(all_timestamps(&journal), appended);
}

#[test]
fn bit_rot_inside_an_indexed_segment_is_found_when_the_entry_is_read() {
    let dir = tempfile::tempdir().unwrap();
    sealed_journal(dir.path());
    // A byte in the middle of segment 2, neither its first nor last frame.
    let path = dir.path().join(segment_file_name(2));
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = 32 + 2 * (16 + ENTRY_BYTES) + 40;
    bytes[middle] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();

    // The index file spares the scan: open succeeds, the read refuses.
    let journal = open(dir.path(), small_options());
    let read = journal.read(std::ops::Bound::Unbounded, usize::MAX, usize::MAX);
    assert!(matches!(read, Err(StorageError::Corruption(_))), "{read:?}");
    drop(journal);
    // Without it, the scan refuses at open, as before.
    std::fs::remove_file(index_file(dir.path(), 2)).unwrap();
    let opened = Journal::open(dir.path(), std_io(), small_options());
    assert!(matches!(opened, Err(StorageError::Corruption(_))));
}

#[test]
fn a_truncation_removes_the_index_files_of_what_it_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let journal = open(dir.path(), small_options());
    let appended = append(&journal, 0, 80);
    let segments = segment_count(dir.path());
    wait_for("every sealed segment's index file", || (1..segments).all(|seq| index_file(dir.path(), seq).exists()));
    // Cut inside segment 2: its index file and every later one go.
    let keep = appended.iter().position(|t| *t == appended[14]).unwrap() + 1;
    let cut_at = appended[keep - 1];
    journal.truncate_after(cut_at).unwrap();
    assert!(index_file(dir.path(), 1).exists());
    for seq in 2..=segments {
        assert!(!index_file(dir.path(), seq).exists(), "segment {seq}'s index file survived the cut");
    }
    // Newer entries of another size fill the same segment numbers again.
    let mut expected = appended[..keep].to_vec();
    for i in 200..280 {
        let t = ts(i);
        journal.append(t, &entry(t, ENTRY_BYTES + 37)).unwrap();
        expected.push(t);
    }
    journal.sync_now().unwrap();
    drop(journal);
    let journal = open(dir.path(), small_options());
    let found: Vec<Timestamp> = read_all(&journal).into_iter().map(|(t, _)| t).collect();
    assert_eq!(found, expected);
    assert_eq!(journal.stats().segments_scanned_at_open, 1);
}

#[test]
fn index_files_of_no_sealed_segment_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let appended = sealed_journal(dir.path());
    let segments = segment_count(dir.path());
    std::fs::copy(index_file(dir.path(), 1), index_file(dir.path(), segments)).unwrap();
    std::fs::copy(index_file(dir.path(), 1), index_file(dir.path(), segments + 7)).unwrap();
    let journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal), appended);
    assert!(!index_file(dir.path(), segments).exists());
    assert!(!index_file(dir.path(), segments + 7).exists());
    assert!(index_file(dir.path(), 1).exists());
}
