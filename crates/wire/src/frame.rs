//! The 16-byte message header and the "is a whole frame buffered yet?"
//! check, done before any parsing so that a reader never allocates for a
//! length it has not validated.

use crate::{WireError, MAX_MESSAGE_SIZE_BYTES};

pub const HEADER_LEN_BYTES: usize = 16;

/// The standard message header (all fields little-endian int32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgHeader {
    pub message_length: i32,
    pub request_id: i32,
    pub response_to: i32,
    pub op_code: i32,
}

impl MsgHeader {
    /// Reads a header from the first 16 bytes of `buf`.
    pub fn parse(buf: &[u8]) -> Result<MsgHeader, WireError> {
        if buf.len() < HEADER_LEN_BYTES {
            return Err(WireError::Incomplete);
        }
        Ok(MsgHeader {
            message_length: read_i32(buf, 0),
            request_id: read_i32(buf, 4),
            response_to: read_i32(buf, 8),
            op_code: read_i32(buf, 12),
        })
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.message_length.to_le_bytes());
        out.extend_from_slice(&self.request_id.to_le_bytes());
        out.extend_from_slice(&self.response_to.to_le_bytes());
        out.extend_from_slice(&self.op_code.to_le_bytes());
    }
}

/// Checks whether `buf` starts with a complete message. Returns its total
/// length when it does, `Incomplete` when more bytes are needed, and an
/// error when the declared length is out of bounds (the connection should
/// then be closed: the stream can no longer be framed).
pub fn check_frame(buf: &[u8]) -> Result<usize, WireError> {
    if buf.len() < 4 {
        return Err(WireError::Incomplete);
    }
    let declared = i64::from(read_i32(buf, 0));
    if declared < HEADER_LEN_BYTES as i64 {
        return Err(WireError::MessageTooSmall(declared));
    }
    if declared > MAX_MESSAGE_SIZE_BYTES as i64 {
        return Err(WireError::MessageTooLarge(declared));
    }
    let length = declared as usize;
    if buf.len() < length {
        return Err(WireError::Incomplete);
    }
    Ok(length)
}

/// Reads a little-endian i32 at `at`; the caller has checked the bounds.
pub(crate) fn read_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

pub(crate) fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

pub(crate) fn read_i64(buf: &[u8], at: usize) -> i64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    i64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_are_incomplete() {
        assert_eq!(check_frame(&[]), Err(WireError::Incomplete));
        assert_eq!(check_frame(&[20, 0, 0]), Err(WireError::Incomplete));
        let mut buf = 20i32.to_le_bytes().to_vec();
        buf.extend_from_slice(&[0; 10]);
        assert_eq!(check_frame(&buf), Err(WireError::Incomplete));
        buf.extend_from_slice(&[0; 6]);
        assert_eq!(check_frame(&buf), Ok(20));
    }

    #[test]
    fn declared_lengths_are_bounded_before_reading_the_body() {
        assert_eq!(check_frame(&15i32.to_le_bytes()), Err(WireError::MessageTooSmall(15)));
        assert_eq!(check_frame(&(-1i32).to_le_bytes()), Err(WireError::MessageTooSmall(-1)));
        // Only four bytes are present: the limit is enforced before any
        // attempt to read (or allocate for) the 48,000,001 declared bytes.
        let too_large = (MAX_MESSAGE_SIZE_BYTES as i32 + 1).to_le_bytes();
        assert_eq!(check_frame(&too_large), Err(WireError::MessageTooLarge(48_000_001)));
        assert_eq!(check_frame(&i32::MAX.to_le_bytes()), Err(WireError::MessageTooLarge(i32::MAX as i64)));
    }
}
