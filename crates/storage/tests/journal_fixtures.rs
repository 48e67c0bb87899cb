//! Checked-in journal images (see `tests/fixtures/README.md`): torn tails
//! recover cleanly and drop only the torn frame; damage anywhere else stops
//! the open with `Corruption` naming the file and the offset.
//!
//! `cargo test -p slipstream-storage --test journal_fixtures -- --ignored`
//! regenerates the images (they are deterministic).

mod journal_common;

use std::path::{Path, PathBuf};

use journal_common::*;
use slipstream_storage::journal::{
    segment_file_name, Journal, FRAME_HEADER_BYTES, SEGMENT_FILE_BYTES_MAX, SEGMENT_HEADER_BYTES,
};
use slipstream_storage::StorageError;
use slipstream_storage::TimestampBson;

/// Entries in each fixture image.
const FIXTURE_ENTRIES: u32 = 10;
/// Payload size of each fixture entry.
const FIXTURE_ENTRY_BYTES: usize = 120;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Copies a fixture into a temporary directory (opening cuts torn tails,
/// and the checked-in images must stay as they are).
fn copy_fixture(name: &str) -> tempfile::TempDir {
    let source = fixtures_dir().join(name);
    let target = tempfile::tempdir().unwrap();
    let mut copied = 0;
    for file in std::fs::read_dir(&source).unwrap_or_else(|err| panic!("fixture {name}: {err}")) {
        let file = file.unwrap();
        std::fs::copy(file.path(), target.path().join(file.file_name())).unwrap();
        copied += 1;
    }
    assert!(copied > 0, "fixture {name} is empty");
    target
}

fn open_fixture(name: &str) -> (tempfile::TempDir, Result<Journal, StorageError>) {
    let dir = copy_fixture(name);
    let result = Journal::open(dir.path(), std_io(), small_options());
    (dir, result)
}

fn expect_corruption(name: &str, file: &str, offset: u64) {
    let (_dir, result) = open_fixture(name);
    match result {
        Err(StorageError::Corruption(message)) => {
            assert!(message.contains(file), "{name}: message {message:?} does not name {file}");
            assert!(message.contains(&format!("offset {offset}")), "{name}: message {message:?} does not name offset {offset}");
        }
        Err(other) => panic!("{name}: expected Corruption, got {other:?}"),
        Ok(_) => panic!("{name}: a corrupt journal opened"),
    }
}

/// The offset of frame `n` (0-based) in a fixture segment.
fn frame_offset(n: u32) -> u64 {
    let frame = (FRAME_HEADER_BYTES + entry(ts(0), FIXTURE_ENTRY_BYTES).len()) as u64;
    SEGMENT_HEADER_BYTES + u64::from(n) * frame
}

#[test]
fn a_torn_tail_is_cut_and_only_the_torn_frame_is_lost() {
    for name in [
        "journal_torn_tail",
        "journal_torn_zeroed_tail",
        "journal_torn_header_of_frame",
        "journal_torn_frame_holding_a_frame",
        "journal_torn_zeroed_frame_holding_a_frame",
    ] {
        let (dir, result) = open_fixture(name);
        let journal = result.unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(all_timestamps(&journal), (0..FIXTURE_ENTRIES - 1).map(ts).collect::<Vec<_>>(), "{name}");
        assert!(journal.stats().torn_bytes_cut_at_open > 0, "{name}");
        // The cut is on disk: the segment's frames end where the torn frame
        // began. A file cut there ends there; one with zeros after the torn
        // bytes (as a preallocated segment has) keeps its size, the torn
        // bytes zeroed.
        let bytes = std::fs::read(dir.path().join(segment_file_name(1))).unwrap();
        let cut = frame_offset(FIXTURE_ENTRIES - 1) as usize;
        assert!(bytes.len() >= cut, "{name}: the file was cut before the torn frame");
        assert!(bytes[cut..].iter().all(|&byte| byte == 0), "{name}: torn bytes left after the cut");
        // New entries follow the recovered ones and survive a reopen.
        let next = ts(FIXTURE_ENTRIES + 5);
        journal.append(next, &entry(next, 200)).unwrap();
        journal.sync_now().unwrap();
        drop(journal);
        let journal = open(dir.path(), small_options());
        assert_eq!(journal.last_ts(), Some(next), "{name}");
        assert_eq!(all_timestamps(&journal).len(), FIXTURE_ENTRIES as usize, "{name}");
    }
}

#[test]
fn a_segment_whose_creation_was_interrupted_is_removed() {
    let (dir, result) = open_fixture("journal_torn_segment_header");
    let journal = result.unwrap();
    assert_eq!(all_timestamps(&journal), (0..FIXTURE_ENTRIES).map(ts).collect::<Vec<_>>());
    assert!(!dir.path().join(segment_file_name(2)).exists());
}

#[test]
fn a_bad_crc_in_the_middle_is_corruption() {
    expect_corruption("journal_corrupt_crc", &segment_file_name(1), frame_offset(4));
}

#[test]
fn a_torn_frame_in_an_earlier_segment_is_corruption() {
    expect_corruption("journal_corrupt_earlier_segment", &segment_file_name(1), frame_offset(FIXTURE_ENTRIES - 1));
}

#[test]
fn timestamps_that_go_back_are_corruption() {
    expect_corruption("journal_corrupt_timestamp_order", &segment_file_name(1), frame_offset(FIXTURE_ENTRIES));
}

#[test]
fn a_missing_segment_is_corruption() {
    let (_dir, result) = open_fixture("journal_corrupt_missing_segment");
    match result {
        Err(StorageError::Corruption(message)) => assert!(message.contains("segment 2 is missing"), "{message}"),
        other => panic!("expected Corruption, got {:?}", other.err()),
    }
}

#[test]
fn a_damaged_segment_header_is_corruption() {
    expect_corruption("journal_corrupt_segment_header", &segment_file_name(1), 0);
}

#[test]
fn a_length_field_that_disagrees_with_its_payload_is_corruption() {
    // Frame 5's length now runs past the end of the file, which alone would
    // look like a torn tail; its payload's own length shows where it really
    // ends, and a valid frame starts there.
    expect_corruption("journal_corrupt_frame_length", &segment_file_name(1), frame_offset(4));
}

#[test]
fn a_segment_larger_than_any_the_journal_writes_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    write_clean(dir.path(), 1 << 20);
    // A sparse file: nothing is written, but a reader that trusted the
    // length would allocate and read all of it.
    let file = std::fs::OpenOptions::new().write(true).open(segment(dir.path(), 1)).unwrap();
    file.set_len(SEGMENT_FILE_BYTES_MAX + 1).unwrap();
    drop(file);
    let started = std::time::Instant::now();
    match Journal::open(dir.path(), std_io(), small_options()) {
        Err(StorageError::Corruption(message)) => {
            assert!(message.contains(&segment_file_name(1)), "{message}");
            assert!(message.contains("larger than"), "{message}");
        }
        Err(other) => panic!("expected Corruption, got {other:?}"),
        Ok(_) => panic!("a segment of {} bytes opened", SEGMENT_FILE_BYTES_MAX + 1),
    }
    // Nothing was cut: the operator decides what to do with the file.
    assert_eq!(std::fs::metadata(segment(dir.path(), 1)).unwrap().len(), SEGMENT_FILE_BYTES_MAX + 1);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the open read the whole file");
}

// ---------------------------------------------------------------------
// Generating the images.

/// Writes a clean journal of `FIXTURE_ENTRIES` entries into `dir` with one
/// segment (or several, if `segment_size_bytes` is small).
fn write_clean(dir: &Path, segment_size_bytes: u64) {
    write_entries(dir, segment_size_bytes, None);
}

/// `write_clean`, with `last` as the payload of the last entry when given.
fn write_entries(dir: &Path, segment_size_bytes: u64, last: Option<&[u8]>) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let options = slipstream_storage::journal::JournalOptions { segment_size_bytes, ..small_options() };
    let journal = Journal::open(dir, std_io(), options).unwrap();
    for i in 0..FIXTURE_ENTRIES {
        let normal = entry(ts(i), FIXTURE_ENTRY_BYTES);
        let payload = match last {
            Some(last) if i + 1 == FIXTURE_ENTRIES => last,
            _ => &normal,
        };
        journal.append(ts(i), payload).unwrap();
    }
    journal.close().unwrap();
}

/// A user's document whose binary field holds a complete, valid frame (of a
/// timestamp after every fixture entry), followed by more data: what a
/// client can put in an oplog entry. Returns the entry and the frame.
fn entry_holding_a_frame(t: slipstream_storage::Timestamp) -> (Vec<u8>, Vec<u8>) {
    let inner_ts = ts(FIXTURE_ENTRIES + 50);
    let frame = raw_frame(inner_ts, &entry(inner_ts, 60));
    let document = bson::doc! {
        "ts": t.to_bson(),
        "t": -1i64,
        "op": "i",
        "ns": "test.journal",
        "o": {
            "_id": t.as_u64() as i64,
            "bin": bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: frame.clone() },
            "pad": "z".repeat(100),
        },
    };
    (document.to_vec().unwrap(), frame)
}

/// Where `needle` ends in `haystack` (it must occur exactly once).
fn end_of_only(haystack: &[u8], needle: &[u8]) -> usize {
    let starts: Vec<usize> =
        haystack.windows(needle.len()).enumerate().filter(|(_, w)| *w == needle).map(|(i, _)| i).collect();
    assert_eq!(starts.len(), 1, "the needle occurs {} times", starts.len());
    starts[0] + needle.len()
}

fn segment(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_file_name(seq))
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    change(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// A frame written by hand (length, CRC-32C of length, timestamp and
/// payload, timestamp, payload), to build images the journal never writes.
fn raw_frame(t: slipstream_storage::Timestamp, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut crc = crc32c::crc32c(&len.to_le_bytes());
    crc = crc32c::crc32c_append(crc, &t.as_u64().to_le_bytes());
    crc = crc32c::crc32c_append(crc, payload);
    let mut frame = Vec::new();
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&crc.to_le_bytes());
    frame.extend_from_slice(&t.as_u64().to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[test]
#[ignore = "regenerates the checked-in fixtures"]
fn regenerate_fixtures() {
    let root = fixtures_dir();
    let last = frame_offset(FIXTURE_ENTRIES - 1) as usize;
    let frame_len = (frame_offset(1) - frame_offset(0)) as usize;
    let one_segment = 1 << 20;

    // The last frame cut in the middle of its payload (the append died).
    let dir = root.join("journal_torn_tail");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes.truncate(last + frame_len / 2));

    // The last frame whole in length, its second half zeros (a page of
    // the write never reached the disk).
    let dir = root.join("journal_torn_zeroed_tail");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes[last + frame_len / 2..].fill(0));

    // Only 10 bytes of the last frame's header.
    let dir = root.join("journal_torn_header_of_frame");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes.truncate(last + 10));

    // A second segment with only part of its header (creation died).
    let dir = root.join("journal_torn_segment_header");
    write_clean(&dir, one_segment);
    std::fs::write(segment(&dir, 2), &b"SLIPJRNL\x01\x00"[..]).unwrap();

    // The last entry is a document whose binary field holds a valid frame;
    // the file is cut after that inner frame but inside the outer one.
    let (holding, inner) = entry_holding_a_frame(ts(FIXTURE_ENTRIES - 1));
    let dir = root.join("journal_torn_frame_holding_a_frame");
    write_entries(&dir, one_segment, Some(&holding));
    edit(&segment(&dir, 1), |bytes| {
        let cut = end_of_only(bytes, &inner) + 40;
        assert!(cut < bytes.len());
        bytes.truncate(cut);
    });

    // The same entry whole in length, its bytes after the inner frame
    // zeroed (a page of the write never reached the disk).
    let dir = root.join("journal_torn_zeroed_frame_holding_a_frame");
    write_entries(&dir, one_segment, Some(&holding));
    edit(&segment(&dir, 1), |bytes| {
        let from = end_of_only(bytes, &inner) + 40;
        bytes[from..].fill(0);
    });

    // The length field of the fifth frame of ten claims more than the
    // file holds; its payload (and the frames after it) are intact.
    let dir = root.join("journal_corrupt_frame_length");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| {
        let at = frame_offset(4) as usize;
        bytes[at..at + 4].copy_from_slice(&100_000u32.to_le_bytes());
    });

    // One flipped bit inside the payload of the fifth frame of ten.
    let dir = root.join("journal_corrupt_crc");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes[frame_offset(4) as usize + FRAME_HEADER_BYTES + 40] ^= 0x04);

    // Ten frames in segment 1, one in segment 2, and the last frame of
    // segment 1 cut short: a tail, but not of the last segment.
    let dir = root.join("journal_corrupt_earlier_segment");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes.truncate(last + frame_len / 2));
    let mut second = slipstream_storage::journal::segment_header(2).to_vec();
    second.extend(raw_frame(ts(FIXTURE_ENTRIES), &entry(ts(FIXTURE_ENTRIES), FIXTURE_ENTRY_BYTES)));
    std::fs::write(segment(&dir, 2), second).unwrap();

    // A valid frame whose timestamp is older than the one before it.
    let dir = root.join("journal_corrupt_timestamp_order");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes.extend(raw_frame(ts(3), &entry(ts(3), FIXTURE_ENTRY_BYTES))));

    // Segments 1 and 3 without 2.
    let dir = root.join("journal_corrupt_missing_segment");
    write_clean(&dir, 600);
    assert!(segment(&dir, 3).exists());
    std::fs::remove_file(segment(&dir, 2)).unwrap();
    for seq in 4..100 {
        let _ = std::fs::remove_file(segment(&dir, seq));
    }

    // The magic of segment 1 damaged.
    let dir = root.join("journal_corrupt_segment_header");
    write_clean(&dir, one_segment);
    edit(&segment(&dir, 1), |bytes| bytes[2] = b'X');
}
