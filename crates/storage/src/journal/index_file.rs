//! The index file of a sealed segment: every entry's timestamp and length,
//! so that opening the journal need not read and check the whole segment.
//!
//! Without it, `Journal::open` read every byte of every segment (the
//! in-memory index needs each entry's position): with a full 1 GiB oplog
//! that took 0.7 s with the files in the page cache and 1.1 s without
//! (`examples/journal_open.rs`), on every restart, however little the
//! member missed. A segment that no longer takes appends (sealed: a newer
//! one exists) and whose frames are all fsynced gets `oplog-<seq>.idx`
//! beside it, written by the indexer thread (`indexer.rs`). At open, a
//! sealed segment whose index file passes the checks below is not scanned;
//! the last segment always is (it may end in a torn tail).
//!
//! ```text
//! offset   size  field (integers little-endian)
//! 0        8     magic "SLIPJIDX"
//! 8        4     format version, u32 (1)
//! 12       4     reserved, zero
//! 16       8     segment sequence number, u64
//! 24       8     the segment file's length in bytes, u64
//! 32       8     where the segment's frames end, u64
//! 40       8     entry count N, u64 (at least 1)
//! 48       12*N  per entry: timestamp u64, payload length u32
//! 48+12N   4     CRC-32C of every byte before it
//! ```
//!
//! Offsets are not stored: the first frame starts after the segment header
//! and each next one where the one before ends, so the file cannot name a
//! position that is not a frame boundary of the lengths it lists.
//!
//! The file is written without fsync (losing it costs one scan, not data)
//! and is trusted only when all of this holds; otherwise the segment is
//! scanned as before and the file rewritten:
//! - its CRC, magic, version and sequence number; timestamps strictly
//!   increase, lengths are in range, and the lengths add up to the stored
//!   end, which is within the stored file length;
//! - the segment file has exactly the stored length and a valid header;
//! - its first and last frames, read from the file, are valid (CRC) and
//!   carry the listed timestamps and lengths;
//! - the bytes after the last frame are zeros (or the file ends there): a
//!   segment that took more frames after the index was written fails here;
//! - its first timestamp follows the previous segment's last one.
//!
//! A segment's content changes only when `truncate_after` cuts it (a
//! rollback) or deletes it; both remove its index file durably first
//! (`Journal::truncate_after`), so that a segment number that comes back
//! never meets an index of the old one. The frames between the first and
//! the last are not read at open: damage there is found when an entry is
//! read (every read checks its frame's CRC) rather than at open.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::{IoBackend, IoFile};
use crate::journal::frame::{check_frame, FrameCheck, ENTRY_BYTES_MAX, ENTRY_BYTES_MIN, FRAME_HEADER_BYTES};
use crate::journal::segment::{
    check_header, numbered_file_name, parse_numbered_file_name, SEGMENT_FILE_BYTES_MAX, SEGMENT_HEADER_BYTES,
};
use crate::Timestamp;

pub const INDEX_MAGIC: [u8; 8] = *b"SLIPJIDX";
pub const INDEX_FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 48;
const ENTRY_BYTES: usize = 12;
const CRC_BYTES: usize = 4;
/// The most entries a segment can hold (each frame is at least
/// `FRAME_HEADER_BYTES + ENTRY_BYTES_MIN` bytes): a larger index file is
/// refused before it is read.
const ENTRIES_MAX: u64 = SEGMENT_FILE_BYTES_MAX / (FRAME_HEADER_BYTES + ENTRY_BYTES_MIN) as u64;
pub const INDEX_FILE_BYTES_MAX: u64 = (HEADER_BYTES + CRC_BYTES) as u64 + ENTRIES_MAX * ENTRY_BYTES as u64;

const INDEX_SUFFIX: &str = ".idx";

pub fn index_file_name(seq: u64) -> String {
    numbered_file_name(seq, INDEX_SUFFIX)
}

pub fn index_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(index_file_name(seq))
}

/// The sequence number in an index file name, or None for other files.
pub fn parse_index_file_name(name: &str) -> Option<u64> {
    parse_numbered_file_name(name, INDEX_SUFFIX)
}

/// What an index file says about its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    pub seq: u64,
    pub file_bytes: u64,
    pub end: u64,
    /// Every entry's timestamp and payload length, in order.
    pub entries: Vec<(Timestamp, u32)>,
}

impl SegmentIndex {
    /// Each entry with the offset of its frame.
    pub fn with_offsets(&self) -> impl Iterator<Item = (Timestamp, u64, u32)> + '_ {
        let mut offset = SEGMENT_HEADER_BYTES;
        self.entries.iter().map(move |&(ts, len)| {
            let at = offset;
            offset += (FRAME_HEADER_BYTES + len as usize) as u64;
            (ts, at, len)
        })
    }

    fn last_offset(&self) -> u64 {
        let (_, len) = *self.entries.last().expect("an index lists at least one entry");
        self.end - (FRAME_HEADER_BYTES + len as usize) as u64
    }

    pub fn first_ts(&self) -> Timestamp {
        self.entries[0].0
    }

    pub fn last_ts(&self) -> Timestamp {
        self.entries.last().expect("an index lists at least one entry").0
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(!self.entries.is_empty(), "a sealed segment holds entries");
        let mut out = Vec::with_capacity(HEADER_BYTES + self.entries.len() * ENTRY_BYTES + CRC_BYTES);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&INDEX_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.file_bytes.to_le_bytes());
        out.extend_from_slice(&self.end.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (ts, len) in &self.entries {
            out.extend_from_slice(&ts.as_u64().to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and checks an index file's bytes on their own (not yet
    /// against the segment).
    pub fn decode(bytes: &[u8], seq: u64) -> Result<SegmentIndex, String> {
        if bytes.len() < HEADER_BYTES + ENTRY_BYTES + CRC_BYTES {
            return Err(format!("the file is {} bytes, too short", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - CRC_BYTES);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("CRC mismatch".to_string());
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().unwrap());
        if body[0..8] != INDEX_MAGIC {
            return Err("wrong magic".to_string());
        }
        let version = u32::from_le_bytes(body[8..12].try_into().unwrap());
        if version != INDEX_FORMAT_VERSION {
            return Err(format!("unsupported format version {version}"));
        }
        let (stored_seq, file_bytes, end, count) = (u64_at(16), u64_at(24), u64_at(32), u64_at(40));
        if stored_seq != seq {
            return Err(format!("it names segment {stored_seq}"));
        }
        let listed = (body.len() - HEADER_BYTES) / ENTRY_BYTES;
        if count == 0 || count != listed as u64 || !(body.len() - HEADER_BYTES).is_multiple_of(ENTRY_BYTES) {
            return Err(format!("it declares {count} entries and holds {listed}"));
        }
        if file_bytes > SEGMENT_FILE_BYTES_MAX || end > file_bytes {
            return Err(format!("frames end at {end} in a file of {file_bytes} bytes"));
        }
        let mut entries = Vec::with_capacity(listed);
        let mut offset = SEGMENT_HEADER_BYTES;
        for raw in body[HEADER_BYTES..].chunks_exact(ENTRY_BYTES) {
            let ts = Timestamp::from_u64(u64::from_le_bytes(raw[0..8].try_into().unwrap()));
            let len = u32::from_le_bytes(raw[8..12].try_into().unwrap());
            if !(ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(&(len as usize)) {
                return Err(format!("entry {ts} has length {len}, out of range"));
            }
            if entries.last().is_some_and(|&(previous, _)| ts <= previous) {
                return Err(format!("timestamp {ts} does not increase"));
            }
            entries.push((ts, len));
            offset += (FRAME_HEADER_BYTES + len as usize) as u64;
        }
        if offset != end {
            return Err(format!("the lengths end at {offset}, the file says {end}"));
        }
        Ok(SegmentIndex { seq, file_bytes, end, entries })
    }

    /// Checks the index against its segment file (see the module comment);
    /// `previous_ts` is the previous segment's last timestamp.
    pub fn check_against(&self, file: &dyn IoFile, previous_ts: Option<Timestamp>) -> Result<(), String> {
        let read = |offset: u64, len: usize| -> Result<Vec<u8>, String> {
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, offset).map_err(|err| format!("reading the segment at {offset}: {err}"))?;
            Ok(buf)
        };
        let len = file.size_bytes().map_err(|err| format!("reading the segment's length: {err}"))?;
        if len != self.file_bytes {
            return Err(format!("the segment is {len} bytes, the index says {}", self.file_bytes));
        }
        check_header(&read(0, SEGMENT_HEADER_BYTES as usize)?, self.seq)?;
        let first = (self.first_ts(), SEGMENT_HEADER_BYTES, self.entries[0].1);
        let last = (self.last_ts(), self.last_offset(), self.entries.last().unwrap().1);
        for (ts, offset, payload_len) in [first, last] {
            let frame = read(offset, FRAME_HEADER_BYTES + payload_len as usize)?;
            match check_frame(&frame) {
                FrameCheck::Valid { ts: found, payload_len: found_len }
                    if found == ts && found_len == payload_len as usize => {}
                FrameCheck::Valid { ts: found, .. } => {
                    return Err(format!("the frame at {offset} holds {found}, the index says {ts}"));
                }
                FrameCheck::Incomplete => return Err(format!("the frame at {offset} is incomplete")),
                FrameCheck::Bad(reason) => return Err(format!("the frame at {offset}: {reason}")),
            }
        }
        let after = (self.file_bytes - self.end).min(FRAME_HEADER_BYTES as u64) as usize;
        if after > 0 && read(self.end, after)?.iter().any(|&byte| byte != 0) {
            return Err(format!("bytes follow the last frame at {}", self.end));
        }
        if let Some(previous) = previous_ts.filter(|previous| self.first_ts() <= *previous) {
            return Err(format!("its first timestamp {} does not follow {previous}", self.first_ts()));
        }
        Ok(())
    }
}

/// Reads and decodes `oplog-<seq>.idx` in `dir`: None when there is none,
/// Err with the reason when it cannot be used.
pub fn read_index_file(io: &Arc<dyn IoBackend>, dir: &Path, seq: u64) -> Result<Option<SegmentIndex>, String> {
    let path = index_path(dir, seq);
    if !io.exists(&path).map_err(|err| format!("looking for it: {err}"))? {
        return Ok(None);
    }
    let file = io.open(&path).map_err(|err| format!("opening it: {err}"))?;
    let len = file.size_bytes().map_err(|err| format!("reading its length: {err}"))?;
    if len > INDEX_FILE_BYTES_MAX {
        return Err(format!("the file is {len} bytes, larger than any index the journal writes"));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0).map_err(|err| format!("reading it: {err}"))?;
    SegmentIndex::decode(&bytes, seq).map(Some)
}

/// Writes the index file of a sealed segment, replacing any older one.
/// Not fsynced: a lost or torn file fails its CRC and costs one scan.
pub fn write_index_file(io: &Arc<dyn IoBackend>, dir: &Path, index: &SegmentIndex) -> std::io::Result<()> {
    let path = index_path(dir, index.seq);
    remove_index_file(io, dir, index.seq)?;
    io.write_unsynced_file(&path, &index.encode())
}

/// Removes a segment's index file if there is one (not durably: the caller
/// fsyncs the directory when it must be).
pub fn remove_index_file(io: &Arc<dyn IoBackend>, dir: &Path, seq: u64) -> std::io::Result<()> {
    match io.remove_file(&index_path(dir, seq)) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SegmentIndex {
        let entries = vec![(Timestamp::new(5, 1), 40u32), (Timestamp::new(5, 2), 7), (Timestamp::new(6, 1), 100)];
        let frames: u64 = entries.iter().map(|(_, len)| FRAME_HEADER_BYTES as u64 + u64::from(*len)).sum();
        let end = SEGMENT_HEADER_BYTES + frames;
        SegmentIndex { seq: 9, file_bytes: 4096, end, entries }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(index_file_name(12), "oplog-00000000000000000012.idx");
        assert_eq!(parse_index_file_name(&index_file_name(12)), Some(12));
        assert_eq!(parse_index_file_name("oplog-00000000000000000012.seg"), None);
    }

    #[test]
    fn an_index_round_trips_with_its_offsets() {
        let index = sample();
        assert_eq!(SegmentIndex::decode(&index.encode(), 9), Ok(index.clone()));
        let offsets: Vec<u64> = index.with_offsets().map(|(_, offset, _)| offset).collect();
        assert_eq!(offsets, vec![32, 32 + 16 + 40, 32 + 16 + 40 + 16 + 7]);
        assert_eq!(index.last_offset(), offsets[2]);
    }

    #[test]
    fn every_damaged_byte_and_every_cut_is_refused() {
        let bytes = sample().encode();
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x04;
            assert!(SegmentIndex::decode(&damaged, 9).is_err(), "byte {at}");
        }
        for cut in 0..bytes.len() {
            assert!(SegmentIndex::decode(&bytes[..cut], 9).is_err(), "cut at {cut}");
        }
        assert!(SegmentIndex::decode(&bytes, 10).unwrap_err().contains("names segment 9"));
    }

    #[test]
    fn contradictions_inside_a_well_sealed_file_are_refused() {
        let reseal = |index: &SegmentIndex| SegmentIndex::decode(&index.encode(), index.seq);
        let mut wrong_end = sample();
        wrong_end.end += 1;
        assert!(reseal(&wrong_end).unwrap_err().contains("lengths end"));
        let mut out_of_order = sample();
        out_of_order.entries[1].0 = Timestamp::new(5, 1);
        assert!(reseal(&out_of_order).unwrap_err().contains("does not increase"));
        let mut too_short = sample();
        too_short.entries[1].1 = 4;
        too_short.end -= 3;
        assert!(reseal(&too_short).unwrap_err().contains("out of range"));
        let mut past_the_file = sample();
        past_the_file.file_bytes = past_the_file.end - 1;
        assert!(reseal(&past_the_file).unwrap_err().contains("in a file of"));
    }
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use crate::io::StdIo;
    use crate::journal::frame::encode_frame;
    use crate::journal::segment::encode_header;

    fn payload(n: i32) -> Vec<u8> {
        bson::doc! {"n": n, "pad": "x".repeat(n as usize * 10)}.to_vec().unwrap()
    }

    /// A segment file of three frames and `zeros` zero bytes after them,
    /// and the index that describes it.
    fn segment(dir: &Path, zeros: usize) -> (Arc<dyn IoFile>, SegmentIndex) {
        let mut bytes = encode_header(4).to_vec();
        let mut entries = Vec::new();
        for n in 1..=3 {
            let ts = Timestamp::new(10, n as u32);
            encode_frame(&mut bytes, ts, &payload(n));
            entries.push((ts, payload(n).len() as u32));
        }
        let end = bytes.len() as u64;
        bytes.resize(bytes.len() + zeros, 0);
        let path = dir.join("segment");
        std::fs::write(&path, &bytes).unwrap();
        let file = StdIo::new().open(&path).unwrap();
        (file, SegmentIndex { seq: 4, file_bytes: bytes.len() as u64, end, entries })
    }

    #[test]
    fn an_index_that_describes_its_segment_passes() {
        let dir = tempfile::tempdir().unwrap();
        for zeros in [0, 5, 100] {
            let (file, index) = segment(dir.path(), zeros);
            assert_eq!(index.check_against(&*file, Some(Timestamp::new(9, 1))), Ok(()), "zeros {zeros}");
        }
    }

    #[test]
    fn an_index_that_does_not_describe_its_segment_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (file, index) = segment(dir.path(), 100);
        // Written before the segment took its last frame.
        let mut stale = index.clone();
        let (_, last_len) = stale.entries.pop().unwrap();
        stale.end -= (FRAME_HEADER_BYTES as u64) + u64::from(last_len);
        assert!(stale.check_against(&*file, None).unwrap_err().contains("bytes follow"));
        let mut other_length = index.clone();
        other_length.file_bytes += 1;
        assert!(other_length.check_against(&*file, None).unwrap_err().contains("the index says"));
        let mut other_first = index.clone();
        other_first.entries[0].0 = Timestamp::new(9, 9);
        assert!(other_first.check_against(&*file, None).unwrap_err().contains("holds"));
        let mut other_seq = index.clone();
        other_seq.seq = 5;
        assert!(other_seq.check_against(&*file, None).is_err());
        assert!(index.check_against(&*file, Some(Timestamp::new(10, 1))).unwrap_err().contains("does not follow"));
        // A damaged last frame.
        let (file, index) = segment(dir.path(), 100);
        file.write_all_at(&[0xff], index.end - 3).unwrap();
        assert!(index.check_against(&*file, None).unwrap_err().contains("CRC"));
    }
}
