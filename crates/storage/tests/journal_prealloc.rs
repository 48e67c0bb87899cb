//! Preallocated segments (`journal/spare.rs`): the journal rolls over into a
//! zero-filled spare, appends never change a segment file's size, recovery
//! reads a zero tail as the end of the frames and still tells a torn tail
//! from corruption, and a crash while a spare is prepared or renamed into
//! place leaves a journal that opens with exactly what was written.

mod journal_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use journal_common::*;
use slipstream_storage::io::FaultyIo;
use slipstream_storage::journal::{
    segment_file_name, segment_header, Journal, JournalOptions, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES,
    SPARE_FILE_NAME,
};
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::{StorageError, Timestamp};

const SEGMENT_BYTES: u64 = 4096;
const ENTRY_BYTES: usize = 300;
/// How long a test waits for the spare thread.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

fn prealloc_options() -> JournalOptions {
    JournalOptions {
        commit_interval_ms: 3_600_000,
        segment_size_bytes: SEGMENT_BYTES,
        size_cap_bytes: u64::MAX,
        poison_policy: PoisonPolicy::RefuseLaterCalls,
        preallocate_segments: true,
        ..JournalOptions::default()
    }
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_file_name(seq))
}

/// The segment files in `dir`, oldest first, with their lengths. A file
/// gone between the listing and its metadata (the open journal's spare
/// segment being renamed into place) is left out: the test read it
/// `unwrap`ped and failed about once in a few hundred runs.
fn segment_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter_map(|entry| {
            let len = entry.metadata().ok()?.len();
            Some((entry.file_name().to_string_lossy().into_owned(), len))
        })
        .filter(|(name, _)| name.ends_with(".seg"))
        .collect();
    files.sort();
    files
}

/// Appends and syncs one entry at a time until the journal writes into a
/// segment that was preallocated (some, not all, of it zeros ahead, and no
/// spare ready yet); returns the timestamps appended.
fn append_until_in_a_spare(journal: &Journal, next: &mut u32) -> Vec<Timestamp> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut appended = Vec::new();
    loop {
        let t = ts(*next);
        *next += 1;
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
        journal.sync_now().unwrap();
        appended.push(t);
        let stats = journal.stats();
        if stats.spares_prepared >= 1 && stats.preallocated_bytes > 0 && stats.preallocated_bytes < SEGMENT_BYTES {
            return appended;
        }
        assert!(
            Instant::now() < deadline,
            "the journal never rolled over into a spare: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn frame_bytes() -> u64 {
    (FRAME_HEADER_BYTES + entry(ts(0), ENTRY_BYTES).len()) as u64
}

#[test]
fn appends_into_a_spare_never_change_the_file_size() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    let mut next = 0;
    let mut appended = append_until_in_a_spare(&journal, &mut next);
    let (active, len) = segment_files(dir.path()).pop().unwrap();
    assert_eq!(len, SEGMENT_BYTES, "{active} is not preallocated");
    // Two more entries fit into the zeros: the file keeps its size.
    for _ in 0..2 {
        let t = ts(next);
        next += 1;
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
        appended.push(t);
    }
    journal.sync_now().unwrap();
    assert_eq!(
        std::fs::metadata(dir.path().join(&active)).unwrap().len(),
        SEGMENT_BYTES
    );
    drop(journal);

    // Every segment but the spare ones ends in zeros; recovery reads them
    // as the end of the frames, cuts nothing and loses nothing.
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal), appended);
    let stats = journal.stats();
    assert_eq!(stats.torn_bytes_cut_at_open, 0);
    assert!(
        stats.preallocated_bytes > 0,
        "the reopened segment's zeros are not counted: {stats:?}"
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(&active)).unwrap().len(),
        SEGMENT_BYTES
    );
    // And it goes on appending after the recovered entries, across segments.
    let more: Vec<Timestamp> = (0..20).map(|i| ts(next + i)).collect();
    for &t in &more {
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
    }
    journal.sync_now().unwrap();
    drop(journal);
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    appended.extend(more);
    assert_eq!(all_timestamps(&journal), appended);
}

/// A journal of `count` entries in segments that grow (no spare), each
/// segment file then padded with zeros to `SEGMENT_BYTES`, as preallocated
/// segments are.
fn zero_padded_journal(dir: &Path, count: u32) -> Vec<Timestamp> {
    let options = JournalOptions {
        preallocate_segments: false,
        ..prealloc_options()
    };
    let journal = Journal::open(dir, std_io(), options).unwrap();
    let appended: Vec<Timestamp> = (0..count).map(ts).collect();
    for &t in &appended {
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
    }
    journal.close().unwrap();
    for (name, len) in segment_files(dir) {
        let mut bytes = std::fs::read(dir.join(&name)).unwrap();
        assert!(len <= SEGMENT_BYTES);
        bytes.resize(SEGMENT_BYTES as usize, 0);
        std::fs::write(dir.join(&name), bytes).unwrap();
    }
    appended
}

#[test]
fn a_zeroed_tail_ends_every_segment_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let appended = zero_padded_journal(dir.path(), 30);
    assert!(
        segment_files(dir.path()).len() >= 2,
        "the test needs an earlier segment with a zero tail"
    );
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal), appended);
    assert_eq!(journal.stats().torn_bytes_cut_at_open, 0);
    for (name, len) in segment_files(dir.path()) {
        assert_eq!(len, SEGMENT_BYTES, "{name} was cut");
    }
}

/// The offset where the frames of `bytes` (a segment) end.
fn frames_end(bytes: &[u8]) -> usize {
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    while offset + 4 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        offset += FRAME_HEADER_BYTES + len;
    }
    offset
}

#[test]
fn a_torn_record_followed_by_zeros_is_zeroed_and_the_file_keeps_its_size() {
    for torn_bytes in [3usize, 16, 40, 150] {
        let dir = tempfile::tempdir().unwrap();
        let appended = zero_padded_journal(dir.path(), 30);
        let (last, _) = segment_files(dir.path()).pop().unwrap();
        let path = dir.path().join(&last);
        let mut bytes = std::fs::read(&path).unwrap();
        let end = frames_end(&bytes);
        // The start of the next frame reached the disk, the rest did not
        // (zeros, as the preallocated file held).
        let mut frame = Vec::new();
        let t = ts(1000);
        frame.extend_from_slice(&(entry(t, ENTRY_BYTES).len() as u32).to_le_bytes());
        frame.extend_from_slice(&[0xAB; 12]);
        frame.extend_from_slice(&entry(t, ENTRY_BYTES));
        bytes[end..end + torn_bytes].copy_from_slice(&frame[..torn_bytes]);
        std::fs::write(&path, &bytes).unwrap();

        let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
        assert_eq!(all_timestamps(&journal), appended, "torn {torn_bytes}");
        assert!(journal.stats().torn_bytes_cut_at_open > 0, "torn {torn_bytes}");
        let after = std::fs::read(&path).unwrap();
        assert_eq!(
            after.len() as u64,
            SEGMENT_BYTES,
            "torn {torn_bytes}: the file lost its preallocation"
        );
        assert!(
            after[end..].iter().all(|&byte| byte == 0),
            "torn {torn_bytes}: torn bytes left"
        );
        // The next append lands where the torn frame was, and survives.
        let next = ts(2000);
        journal.append(next, &entry(next, ENTRY_BYTES)).unwrap();
        journal.sync_now().unwrap();
        drop(journal);
        let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
        let mut expected = appended.clone();
        expected.push(next);
        assert_eq!(all_timestamps(&journal), expected, "torn {torn_bytes}");
    }
}

#[test]
fn damage_in_the_middle_of_a_preallocated_segment_is_still_corruption() {
    // A frame zeroed (a lost page) or bit-flipped with valid frames after
    // it, and zeros after those: not a torn tail, though zeros follow.
    for zeroed in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        zero_padded_journal(dir.path(), 30);
        let (last, _) = segment_files(dir.path()).pop().unwrap();
        let path = dir.path().join(&last);
        let mut bytes = std::fs::read(&path).unwrap();
        let second = SEGMENT_HEADER_BYTES + frame_bytes();
        assert!(
            frames_end(&bytes) as u64 > second + frame_bytes(),
            "the segment needs frames after the damage"
        );
        let damaged = second as usize..(second + frame_bytes()) as usize;
        if zeroed {
            bytes[damaged].fill(0);
        } else {
            bytes[damaged.start + 50] ^= 0x04;
        }
        std::fs::write(&path, &bytes).unwrap();
        match Journal::open(dir.path(), std_io(), prealloc_options()) {
            Err(StorageError::Corruption(message)) => {
                assert!(message.contains(&last), "{message}");
                assert!(message.contains(&format!("offset {second}")), "{message}");
            }
            Err(other) => panic!("zeroed {zeroed}: expected Corruption, got {other:?}"),
            Ok(_) => panic!("zeroed {zeroed}: a journal damaged in the middle opened"),
        }
        // Nothing was modified: the operator decides.
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}

#[test]
fn a_crash_while_a_spare_was_prepared_or_renamed_leaves_a_journal_that_opens() {
    // (a) The spare half zero-filled when the process died; (b) the spare
    // renamed into place as the next segment, its header not yet written.
    for renamed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let appended = zero_padded_journal(dir.path(), 30);
        let segments = segment_files(dir.path());
        let last_seq = segments.len() as u64;
        if renamed {
            std::fs::write(
                segment_path(dir.path(), last_seq + 1),
                vec![0u8; SEGMENT_BYTES as usize],
            )
            .unwrap();
        } else {
            std::fs::write(dir.path().join(SPARE_FILE_NAME), vec![0u8; SEGMENT_BYTES as usize / 3]).unwrap();
        }
        let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
        assert_eq!(all_timestamps(&journal), appended, "renamed {renamed}");
        assert!(
            !segment_path(dir.path(), last_seq + 1).exists(),
            "renamed {renamed}: the empty segment stayed"
        );
        // The spare thread prepares a new spare (none may be ready yet, so
        // the file may be absent), and the journal rolls over into it.
        let mut next = 100;
        let mut expected = appended.clone();
        expected.extend(append_until_in_a_spare(&journal, &mut next));
        drop(journal);
        let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
        assert_eq!(all_timestamps(&journal), expected, "renamed {renamed}");
    }
}

#[test]
fn a_spare_with_a_header_but_no_frame_is_an_empty_last_segment() {
    // The crash came after the spare's header was durable and before any
    // frame: the segment stays, empty, and takes the next appends.
    let dir = tempfile::tempdir().unwrap();
    let appended = zero_padded_journal(dir.path(), 30);
    let next_seq = segment_files(dir.path()).len() as u64 + 1;
    let mut bytes = vec![0u8; SEGMENT_BYTES as usize];
    bytes[..SEGMENT_HEADER_BYTES as usize].copy_from_slice(&segment_header(next_seq));
    std::fs::write(segment_path(dir.path(), next_seq), bytes).unwrap();
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal), appended);
    let t = ts(500);
    journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
    journal.sync_now().unwrap();
    drop(journal);
    assert_eq!(
        std::fs::metadata(segment_path(dir.path(), next_seq)).unwrap().len(),
        SEGMENT_BYTES
    );
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal).last(), Some(&t));
}

#[test]
fn a_power_loss_drops_unsynced_frames_written_over_zeros() {
    // The file's size does not move when frames overwrite preallocated
    // zeros, so only a model of overwrites (not of lengths) can lose them:
    // recovery must then find exactly the synced entries.
    for keep_unsynced_bytes in [0u64, 1, 100, 5000] {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::over_std();
        let journal = Journal::open(dir.path(), io.as_backend(), prealloc_options()).unwrap();
        let mut next = 0;
        let synced = append_until_in_a_spare(&journal, &mut next);
        let unsynced: Vec<Timestamp> = (0..3).map(|i| ts(next + i)).collect();
        for &t in &unsynced {
            journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
        }
        // Written (the group commit runs when asked), not synced: hold the
        // batch's fsync, then cut the power under it.
        let (active, _) = segment_files(dir.path()).pop().unwrap();
        io.hold_next_sync_after_writes(&dir.path().join(&active), 1);
        let waiter = {
            let journal = std::sync::Arc::new(journal);
            let for_wait = journal.clone();
            let last = *unsynced.last().unwrap();
            (journal, std::thread::spawn(move || for_wait.wait_durable(last)))
        };
        assert!(
            io.wait_until_sync_held(STEP_TIMEOUT),
            "the batch never reached its fsync"
        );
        io.power_off();
        io.release_held_sync();
        let (journal, handle) = waiter;
        assert!(matches!(handle.join().unwrap(), Err(StorageError::Poisoned(_))));
        drop(journal);
        io.crash(keep_unsynced_bytes).unwrap();

        let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
        let recovered = all_timestamps(&journal);
        let mut appended = synced.clone();
        appended.extend(&unsynced);
        assert_eq!(
            &recovered[..synced.len()],
            synced.as_slice(),
            "keep {keep_unsynced_bytes}: lost synced entries"
        );
        assert_eq!(
            &recovered[..],
            &appended[..recovered.len()],
            "keep {keep_unsynced_bytes}: not a prefix"
        );
        if keep_unsynced_bytes < frame_bytes() {
            assert_eq!(
                recovered, synced,
                "keep {keep_unsynced_bytes}: unsynced frames survived the power loss"
            );
        }
    }
}

#[test]
fn truncation_of_a_preallocated_segment_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    let mut next = 0;
    let mut appended = append_until_in_a_spare(&journal, &mut next);
    for _ in 0..3 {
        let t = ts(next);
        next += 1;
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
        appended.push(t);
    }
    journal.sync_now().unwrap();
    // Cut inside the preallocated segment: its last two entries go.
    let keep = appended.len() - 2;
    journal.truncate_after(appended[keep - 1]).unwrap();
    appended.truncate(keep);
    assert_eq!(all_timestamps(&journal), appended);
    // New entries after the cut, across at least one more rollover.
    for _ in 0..15 {
        let t = ts(next);
        next += 1;
        journal.append(t, &entry(t, ENTRY_BYTES)).unwrap();
        appended.push(t);
    }
    journal.sync_now().unwrap();
    drop(journal);
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal), appended);
    assert_eq!(journal.stats().torn_bytes_cut_at_open, 0);
    // And a truncation back to before all of it.
    journal.truncate_after(appended[0]).unwrap();
    drop(journal);
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    assert_eq!(all_timestamps(&journal), vec![appended[0]]);
}

#[test]
fn frames_whose_first_byte_is_zero_are_not_taken_for_the_zero_tail() {
    // A 256-byte entry's frame starts 00 01 00 00: only the whole length
    // field is never zero, and that is all recovery relies on.
    let size = (80..400)
        .find(|&size| entry(ts(0), size).len() == 256)
        .expect("an entry size of 256 bytes");
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    let mut next = 0;
    let mut appended = append_until_in_a_spare(&journal, &mut next);
    for _ in 0..5 {
        let t = ts(next);
        next += 1;
        let bytes = entry(t, size);
        assert_eq!(bytes.len(), 256);
        journal.append(t, &bytes).unwrap();
        appended.push(t);
    }
    journal.sync_now().unwrap();
    drop(journal);
    let (active, _) = segment_files(dir.path()).pop().unwrap();
    let bytes = std::fs::read(dir.path().join(&active)).unwrap();
    let end = frames_end(&bytes);
    assert_eq!(
        &bytes[end - (FRAME_HEADER_BYTES + 256)..][..4],
        &[0, 1, 0, 0],
        "the last frame is not a 256-byte one"
    );
    let journal = Journal::open(dir.path(), std_io(), prealloc_options()).unwrap();
    let recovered: Vec<Timestamp> = read_all(&journal).into_iter().map(|(t, _)| t).collect();
    assert_eq!(recovered, appended);
    assert_eq!(journal.stats().torn_bytes_cut_at_open, 0);
}
