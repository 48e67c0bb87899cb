//! One journal frame: a 16-byte header and the oplog entry's BSON bytes.
//!
//! ```text
//! offset  size  field
//! 0       4     payload length in bytes, u32 little-endian
//! 4       4     CRC-32C (Castagnoli) of bytes 0..4, 8..16 and the payload, u32 little-endian
//! 8       8     timestamp, u64 little-endian (seconds << 32 | increment)
//! 16      len   payload: the oplog entry as one BSON document
//! ```
//!
//! The CRC covers the length and the timestamp as well as the payload, so a
//! flipped bit anywhere in a frame is caught. The payload must be a BSON
//! document whose own leading length equals the frame's length: that second
//! copy of the length lets recovery tell a frame boundary from noise
//! cheaply (see `recovery.rs`).

use crate::{StorageError, Timestamp};

/// Bytes of a frame header.
pub const FRAME_HEADER_BYTES: usize = 16;
/// The smallest payload: an empty BSON document.
pub const ENTRY_BYTES_MIN: usize = 5;
/// The largest payload: MongoDB's 16 MB document limit plus the 16 KB it
/// allows oplog entries on top of it.
pub const ENTRY_BYTES_MAX: usize = 16 * 1024 * 1024 + 16 * 1024;

/// The CRC-32C of a frame: its length and timestamp fields, then its payload.
pub fn frame_crc(len: u32, ts: Timestamp, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &ts.as_u64().to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

/// Checks that `entry` looks like one BSON document of an allowed size.
/// The journal checks only the framing a recovery scan relies on; the
/// entry's fields are the engine's business.
pub fn check_entry_shape(entry: &[u8]) -> Result<(), StorageError> {
    if entry.len() > ENTRY_BYTES_MAX {
        return Err(StorageError::DocumentTooLarge(format!(
            "oplog entry too large: {} bytes, max size: {ENTRY_BYTES_MAX}",
            entry.len()
        )));
    }
    check_entry_framing(entry).map_err(StorageError::InvalidDocument)
}

fn check_entry_framing(entry: &[u8]) -> Result<(), String> {
    if entry.len() < ENTRY_BYTES_MIN {
        return Err(format!("oplog entry of {} bytes is below {ENTRY_BYTES_MIN}", entry.len()));
    }
    let declared = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
    if declared != entry.len() {
        return Err(format!("oplog entry declares {declared} bytes but holds {}", entry.len()));
    }
    if entry[entry.len() - 1] != 0 {
        return Err("oplog entry does not end with the BSON terminator".to_string());
    }
    Ok(())
}

/// Appends the frame for `(ts, entry)` to `out`.
pub fn encode_frame(out: &mut Vec<u8>, ts: Timestamp, entry: &[u8]) {
    assert!(entry.len() >= ENTRY_BYTES_MIN);
    assert!(entry.len() <= ENTRY_BYTES_MAX);
    let len = entry.len() as u32;
    let crc = frame_crc(len, ts, entry);
    out.reserve(FRAME_HEADER_BYTES + entry.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&ts.as_u64().to_le_bytes());
    out.extend_from_slice(entry);
}

/// What a frame at some offset turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole frame with a good CRC.
    Valid { ts: Timestamp, payload_len: usize },
    /// The header or the payload runs past the end of the data.
    Incomplete,
    /// A whole frame that is wrong, with the reason.
    Bad(String),
}

/// Parses the frame that starts at `data[0]`; `data` runs to the end of the
/// file.
pub fn check_frame(data: &[u8]) -> FrameCheck {
    if data.len() < FRAME_HEADER_BYTES {
        return FrameCheck::Incomplete;
    }
    let len = u32::from_le_bytes(data[0..4].try_into().unwrap());
    let stored_crc = u32::from_le_bytes(data[4..8].try_into().unwrap());
    let ts = Timestamp::from_u64(u64::from_le_bytes(data[8..16].try_into().unwrap()));
    let payload_len = len as usize;
    if !(ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(&payload_len) {
        return FrameCheck::Bad(format!("frame length {payload_len} is out of range"));
    }
    if data.len() < FRAME_HEADER_BYTES + payload_len {
        return FrameCheck::Incomplete;
    }
    let payload = &data[FRAME_HEADER_BYTES..FRAME_HEADER_BYTES + payload_len];
    let crc = frame_crc(len, ts, payload);
    if crc != stored_crc {
        return FrameCheck::Bad(format!("CRC mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"));
    }
    if let Err(reason) = check_entry_framing(payload) {
        return FrameCheck::Bad(reason);
    }
    FrameCheck::Valid { ts, payload_len }
}

/// Whether a plausible, CRC-valid frame starts at `data[0]`: used to decide
/// whether damage is a torn tail (nothing valid after it) or corruption.
/// The BSON length check runs first, so noise rarely costs a CRC.
pub fn is_valid_frame_start(data: &[u8]) -> bool {
    if data.len() < FRAME_HEADER_BYTES + ENTRY_BYTES_MIN {
        return false;
    }
    let len = u32::from_le_bytes(data[0..4].try_into().unwrap()) as usize;
    if !(ENTRY_BYTES_MIN..=ENTRY_BYTES_MAX).contains(&len) || data.len() < FRAME_HEADER_BYTES + len {
        return false;
    }
    let bson_len = u32::from_le_bytes(data[16..20].try_into().unwrap()) as usize;
    if bson_len != len {
        return false;
    }
    matches!(check_frame(data), FrameCheck::Valid { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: i32) -> Vec<u8> {
        bson::doc! {"n": n}.to_vec().unwrap()
    }

    #[test]
    fn a_frame_round_trips() {
        let mut out = Vec::new();
        encode_frame(&mut out, Timestamp::new(7, 3), &entry(1));
        assert_eq!(check_frame(&out), FrameCheck::Valid { ts: Timestamp::new(7, 3), payload_len: entry(1).len() });
        assert!(is_valid_frame_start(&out));
    }

    #[test]
    fn a_flipped_bit_anywhere_is_caught() {
        let mut out = Vec::new();
        encode_frame(&mut out, Timestamp::new(7, 3), &entry(1));
        for byte in 0..out.len() {
            let mut damaged = out.clone();
            damaged[byte] ^= 0x10;
            assert!(!matches!(check_frame(&damaged), FrameCheck::Valid { .. }), "byte {byte}");
        }
    }

    #[test]
    fn a_cut_frame_is_incomplete() {
        let mut out = Vec::new();
        encode_frame(&mut out, Timestamp::new(7, 3), &entry(1));
        for cut in 0..out.len() {
            assert_eq!(check_frame(&out[..cut]), FrameCheck::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn an_absurd_length_is_refused_before_anything_is_read() {
        let mut header = vec![0u8; FRAME_HEADER_BYTES];
        header[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(check_frame(&header), FrameCheck::Bad(_)));
        assert!(!is_valid_frame_start(&header));
        // A plausible length with too few bytes present is incomplete, not
        // a reason to read further.
        header[0..4].copy_from_slice(&(ENTRY_BYTES_MAX as u32).to_le_bytes());
        assert_eq!(check_frame(&header), FrameCheck::Incomplete);
        assert!(!is_valid_frame_start(&header));
    }

    #[test]
    fn entries_that_are_not_bson_shaped_are_refused() {
        assert!(check_entry_shape(&[1, 2, 3]).is_err());
        assert!(check_entry_shape(&[7, 0, 0, 0, 0, 0]).is_err());
        assert!(check_entry_shape(&[5, 0, 0, 0, 1]).is_err());
        assert!(check_entry_shape(&entry(5)).is_ok());
    }
}
