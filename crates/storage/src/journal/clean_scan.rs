//! The common case of a segment scan, read piece by piece: a valid header,
//! valid frames with increasing timestamps, then only zeros (a preallocated
//! segment's unused rest) or the end of the file.
//!
//! Reading a segment whole cost a fresh buffer of its size (64 MiB: a page
//! fault and a cleared page per 4 KiB) and a byte-by-byte search for its
//! last nonzero byte: about 70 ms for a member's last segment, at every
//! open, most of its recovery. This scan reads `PIECE_BYTES` at a time into
//! one buffer and checks the zero tail a word at a time. On anything else
//! (a bad header or frame with bytes other than zeros after it, a torn or
//! out-of-order frame) it answers None without a side effect, and the
//! segment is read whole and judged by `recovery.rs`, which cuts a torn
//! tail or reports the corruption.

use crate::io::IoFile;
use crate::journal::frame::{check_frame, FrameCheck, ENTRY_BYTES_MAX, ENTRY_BYTES_MIN, FRAME_HEADER_BYTES};
use crate::journal::index::Location;
use crate::journal::segment::{check_header, SEGMENT_HEADER_BYTES};
use crate::Timestamp;

/// Bytes read at a time (more when one frame is larger).
const PIECE_BYTES: usize = 1024 * 1024;

/// A segment that passed.
pub struct CleanSegment {
    pub entries: Vec<(Timestamp, Location)>,
    /// Where its frames end (zeros or the end of the file follow).
    pub end: u64,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
}

/// The file's bytes `[start, start + filled)`, read forward into one
/// buffer that is allocated (and zeroed) once and then reused: a refill
/// moves the bytes still wanted to its front and reads over the rest.
struct Window<'a> {
    file: &'a dyn IoFile,
    len: u64,
    start: u64,
    buffer: Vec<u8>,
    filled: usize,
}

impl Window<'_> {
    /// The bytes `[offset, offset + need)`, which must lie inside the file,
    /// reading more (at least a piece) when the window ends before them.
    /// `offset` never goes back: bytes before it are dropped.
    fn get(&mut self, offset: u64, need: usize) -> std::io::Result<&[u8]> {
        assert!(offset >= self.start && offset + need as u64 <= self.len);
        let window_end = self.start + self.filled as u64;
        if offset + need as u64 > window_end {
            let kept = if offset >= window_end {
                0
            } else {
                let from = (offset - self.start) as usize;
                self.buffer.copy_within(from..self.filled, 0);
                self.filled - from
            };
            self.start = offset;
            let want = (need.max(PIECE_BYTES) as u64).min(self.len - self.start) as usize;
            if self.buffer.len() < want {
                self.buffer.resize(want, 0);
            }
            let read_at = self.start + kept as u64;
            self.file.read_exact_at(&mut self.buffer[kept..want], read_at)?;
            self.filled = want;
        }
        let from = (offset - self.start) as usize;
        Ok(&self.buffer[from..from + need])
    }

    /// Whether every byte from `offset` to the end of the file is zero.
    fn zeros_to_end(&mut self, mut offset: u64) -> std::io::Result<bool> {
        while offset < self.len {
            let piece = ((self.len - offset) as usize).min(PIECE_BYTES);
            if !all_zero(self.get(offset, piece)?) {
                return Ok(false);
            }
            offset += piece as u64;
        }
        Ok(true)
    }
}

/// Whether `bytes` are all zero: whole words or-ed together (which the
/// compiler vectorizes), then the rest.
pub fn all_zero(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    let ored = words.fold(0u64, |acc, word| acc | u64::from_ne_bytes(word.try_into().unwrap()));
    ored == 0 && rest.iter().all(|&byte| byte == 0)
}

/// Scans segment `seq` (`len` bytes) if it is clean; `previous_ts` is the
/// newest timestamp of the segments before it.
pub fn scan(
    file: &dyn IoFile,
    len: u64,
    seq: u64,
    previous_ts: Option<Timestamp>,
) -> std::io::Result<Option<CleanSegment>> {
    if len < SEGMENT_HEADER_BYTES {
        return Ok(None);
    }
    let mut window = Window { file, len, start: 0, buffer: Vec::new(), filled: 0 };
    if check_header(window.get(0, SEGMENT_HEADER_BYTES as usize)?, seq).is_err() {
        return Ok(None);
    }
    let mut clean = CleanSegment { entries: Vec::new(), end: len, first_ts: None, last_ts: None };
    let mut offset = SEGMENT_HEADER_BYTES;
    let mut newest = previous_ts;
    while offset < len {
        let header_bytes = ((len - offset) as usize).min(FRAME_HEADER_BYTES);
        let header = window.get(offset, header_bytes)?;
        // A length is checked against its range before anything is read
        // for it (`recovery.rs`: no length from a file is trusted first).
        let declared = header.get(0..4).map(|bytes| u32::from_le_bytes(bytes.try_into().unwrap()) as usize);
        let declared = declared.filter(|len| (ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(len));
        let frame_bytes = declared.map(|payload| FRAME_HEADER_BYTES + payload);
        let valid = match frame_bytes.filter(|&bytes| offset + bytes as u64 <= len) {
            Some(bytes) => match check_frame(window.get(offset, bytes)?) {
                FrameCheck::Valid { ts, payload_len } => Some((ts, payload_len)),
                FrameCheck::Incomplete | FrameCheck::Bad(_) => None,
            },
            None => None,
        };
        let Some((ts, payload_len)) = valid else {
            // Not a frame: the end of the frames if only zeros follow.
            if !window.zeros_to_end(offset)? {
                return Ok(None);
            }
            clean.end = offset;
            break;
        };
        if newest.is_some_and(|newest| ts <= newest) {
            return Ok(None);
        }
        newest = Some(ts);
        clean.first_ts.get_or_insert(ts);
        clean.last_ts = Some(ts);
        clean.entries.push((ts, Location { seq, offset, len: payload_len as u32 }));
        offset += (FRAME_HEADER_BYTES + payload_len) as u64;
    }
    Ok(Some(clean))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::StdIo;
    use crate::journal::frame::encode_frame;
    use crate::journal::segment::encode_header;

    fn entry(n: u32, bytes: usize) -> Vec<u8> {
        bson::doc! {"n": n, "pad": "y".repeat(bytes)}.to_vec().unwrap()
    }

    /// A segment of `frames` frames of about `bytes` bytes and `zeros` zero
    /// bytes after them.
    fn segment(frames: u32, bytes: usize, zeros: usize) -> (Vec<u8>, u64) {
        let mut data = encode_header(3).to_vec();
        for n in 1..=frames {
            encode_frame(&mut data, Timestamp::new(100, n), &entry(n, bytes));
        }
        let end = data.len() as u64;
        data.resize(data.len() + zeros, 0);
        (data, end)
    }

    fn scanned(data: &[u8], previous_ts: Option<Timestamp>) -> Option<CleanSegment> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        std::fs::write(&path, data).unwrap();
        let file = StdIo::new().open(&path).unwrap();
        scan(&*file, data.len() as u64, 3, previous_ts).unwrap()
    }

    #[test]
    fn frames_then_zeros_or_the_end_of_the_file_are_clean() {
        // Frames across piece boundaries, one frame larger than a piece,
        // zero tails of every kind of length.
        let cases = [(0, 0, 0), (0, 0, 5000), (3, 100, 0), (3, 100, 7), (300, 9000, 3 * PIECE_BYTES + 3)];
        for (frames, bytes, zeros) in cases {
            let (data, end) = segment(frames, bytes, zeros);
            let clean = scanned(&data, Some(Timestamp::new(99, 1))).expect("clean");
            assert_eq!((clean.entries.len() as u32, clean.end), (frames, end), "{frames} {bytes} {zeros}");
        }
        let (data, end) = segment(2, 2 * PIECE_BYTES, 100);
        assert_eq!(scanned(&data, None).expect("clean").end, end);
    }

    #[test]
    fn anything_else_is_left_to_the_whole_file_scan() {
        let (data, end) = segment(20, 300, 4096);
        let end = end as usize;
        // A nonzero byte anywhere in the zero tail (a torn write's bytes).
        for at in [end, end + 1, end + 4000, data.len() - 1] {
            let mut torn = data.clone();
            torn[at] = 1;
            assert!(scanned(&torn, None).is_none(), "byte {at}");
        }
        // A damaged frame, a cut frame, a damaged header.
        let mut damaged = data.clone();
        damaged[200] ^= 0x10;
        assert!(scanned(&damaged, None).is_none());
        assert!(scanned(&data[..end - 5], None).is_none());
        let mut header = data.clone();
        header[3] ^= 1;
        assert!(scanned(&header, None).is_none());
        // Timestamps that do not follow the previous segment's.
        assert!(scanned(&data, Some(Timestamp::new(100, 1))).is_none());
    }

    #[test]
    fn all_zero_looks_at_every_byte() {
        let zeros = vec![0u8; 1003];
        assert!(all_zero(&zeros));
        for at in 0..zeros.len() {
            let mut one = zeros.clone();
            one[at] = 0x80;
            assert!(!all_zero(&one), "byte {at}");
        }
    }
}
