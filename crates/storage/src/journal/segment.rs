//! Segment files: names, the 32-byte header, and the in-memory record of
//! each segment.
//!
//! A segment is `oplog-<seq>.seg`, `<seq>` being its sequence number as 20
//! decimal digits (so names sort in sequence order). It opens with this
//! header, then holds frames back to back (see `frame.rs`), then, when it
//! was preallocated, zeros to the end of the file:
//!
//! ```text
//! offset  size  field
//! 0       8     magic "SLIPJRNL"
//! 8       4     format version, u32 little-endian (1)
//! 12      4     header length, u32 little-endian (32)
//! 16      8     segment sequence number, u64 little-endian (equals the name's)
//! 24      4     reserved, zero
//! 28      4     CRC-32C of bytes 0..28, u32 little-endian
//! ```
//!
//! A segment is normally preallocated: its file was written with zeros to
//! `segment_size_bytes` and fsynced under the spare name `SPARE_FILE_NAME`
//! ahead of use (`spare.rs`), then renamed into place when the journal
//! rolled over to it, so that appends overwrite zeros and never change the
//! file's size. The end of its frames is the first offset from which the
//! rest of the file is zero: a frame's first four bytes (its length, at
//! least `ENTRY_BYTES_MIN`) are never all zero, so no frame lies inside a
//! zero tail and zeros cannot be mistaken for a frame (see `recovery.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::io::IoFile;
use crate::journal::frame::{ENTRY_BYTES_MAX, FRAME_HEADER_BYTES};
use crate::Timestamp;

pub const SEGMENT_HEADER_BYTES: u64 = 32;
/// The largest `segment_size_bytes` a journal accepts.
pub const SEGMENT_BYTES_MAX: u64 = 256 * 1024 * 1024;
/// The largest segment file the journal ever writes: a segment rolls over
/// before a frame would take it past `segment_size_bytes`, unless it holds
/// that one frame alone. Recovery refuses a larger file before reading it.
pub const SEGMENT_FILE_BYTES_MAX: u64 = {
    let single_frame = SEGMENT_HEADER_BYTES + (FRAME_HEADER_BYTES + ENTRY_BYTES_MAX) as u64;
    if single_frame > SEGMENT_BYTES_MAX {
        single_frame
    } else {
        SEGMENT_BYTES_MAX
    }
};
pub const SEGMENT_MAGIC: [u8; 8] = *b"SLIPJRNL";
pub const FORMAT_VERSION: u32 = 1;

const NAME_PREFIX: &str = "oplog-";
const SEGMENT_SUFFIX: &str = ".seg";
/// The next segment's file while it is prepared and until the journal
/// rolls over to it. Not a segment name (`parse_segment_file_name` skips
/// it): recovery removes a leftover one, whole or half written.
pub const SPARE_FILE_NAME: &str = "oplog-spare.tmp";

/// `oplog-<seq><suffix>`, the sequence number as 20 decimal digits (so
/// that names sort in sequence order): a segment's name, or the name of a
/// file that belongs to one (its index file, `index_file.rs`).
pub fn numbered_file_name(seq: u64, suffix: &str) -> String {
    format!("{NAME_PREFIX}{seq:020}{suffix}")
}

/// The sequence number in a `numbered_file_name` with `suffix`, or None
/// for other files.
pub fn parse_numbered_file_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(NAME_PREFIX)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

pub fn segment_file_name(seq: u64) -> String {
    numbered_file_name(seq, SEGMENT_SUFFIX)
}

pub fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(segment_file_name(seq))
}

/// The sequence number in a segment file name, or None for other files.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    parse_numbered_file_name(name, SEGMENT_SUFFIX)
}

pub fn encode_header(seq: u64) -> [u8; SEGMENT_HEADER_BYTES as usize] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES as usize];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
    header[16..24].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Checks a header read from the segment named with `seq`.
pub fn check_header(header: &[u8], seq: u64) -> Result<(), String> {
    if header.len() < SEGMENT_HEADER_BYTES as usize {
        return Err(format!("segment header is {} bytes, expected {SEGMENT_HEADER_BYTES}", header.len()));
    }
    let header = &header[..SEGMENT_HEADER_BYTES as usize];
    let stored_crc = u32::from_le_bytes(header[28..32].try_into().unwrap());
    if crc32c::crc32c(&header[0..28]) != stored_crc {
        return Err("segment header CRC mismatch".to_string());
    }
    if header[0..8] != SEGMENT_MAGIC {
        return Err("segment header has the wrong magic".to_string());
    }
    let version = u32::from_le_bytes(header[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(format!("unsupported journal format version {version}"));
    }
    let header_len = u32::from_le_bytes(header[12..16].try_into().unwrap());
    if u64::from(header_len) != SEGMENT_HEADER_BYTES {
        return Err(format!("unexpected segment header length {header_len}"));
    }
    let stored_seq = u64::from_le_bytes(header[16..24].try_into().unwrap());
    if stored_seq != seq {
        return Err(format!("segment header names sequence {stored_seq}, the file name {seq}"));
    }
    Ok(())
}

/// One segment as the journal tracks it. Guarded by the journal's state
/// lock; the file handle itself is positional and may be used outside it.
pub struct SegmentState {
    pub seq: u64,
    pub path: PathBuf,
    /// None until the group-commit thread creates the file (a segment that
    /// so far exists only as pending appends).
    pub file: Option<Arc<dyn IoFile>>,
    /// One more handle per sync worker, opened before any frame is written
    /// to the segment (see `group_commit.rs` on why fsyncs that may run at
    /// the same time each use their own open file).
    pub sync_files: Vec<Arc<dyn IoFile>>,
    /// The end of the segment including appends not yet written.
    pub end: u64,
    /// The end of what has been written and fsynced.
    pub durable_end: u64,
    /// The file's size as created, recovered or cut: frames written below
    /// it overwrite preallocated zeros; a segment whose `end` passes it
    /// grows with every batch, and every fsync of it then commits the file
    /// system's metadata too. 0 while the file does not exist.
    pub file_bytes: u64,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
    /// Its index file was written for its present content (`indexer.rs`),
    /// or writing it failed, which is not retried: the next open scans it.
    pub indexed: bool,
}

impl SegmentState {
    /// A segment that does not exist on disk yet.
    pub fn planned(dir: &Path, seq: u64) -> SegmentState {
        SegmentState {
            seq,
            path: segment_path(dir, seq),
            file: None,
            sync_files: Vec::new(),
            end: SEGMENT_HEADER_BYTES,
            durable_end: 0,
            file_bytes: 0,
            first_ts: None,
            last_ts: None,
            indexed: false,
        }
    }

    pub fn has_entries(&self) -> bool {
        self.last_ts.is_some()
    }

    /// Whether writing up to `end` makes the existing file grow.
    pub fn grows_past(&self, end: u64) -> bool {
        self.file.is_some() && end > self.file_bytes
    }

    /// Preallocated bytes not yet written.
    pub fn zeroed_bytes_ahead(&self) -> u64 {
        self.file_bytes.saturating_sub(self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_in_sequence_order() {
        assert_eq!(segment_file_name(12), "oplog-00000000000000000012.seg");
        assert_eq!(parse_segment_file_name(&segment_file_name(12)), Some(12));
        assert_eq!(parse_segment_file_name("oplog-12.seg"), None);
        assert_eq!(parse_segment_file_name("LOCK"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    #[test]
    fn headers_are_checked() {
        let header = encode_header(3);
        assert!(check_header(&header, 3).is_ok());
        assert!(check_header(&header, 4).is_err());
        assert!(check_header(&header[..10], 3).is_err());
        let mut damaged = header;
        damaged[5] ^= 1;
        assert!(check_header(&damaged, 3).is_err());
    }
}
