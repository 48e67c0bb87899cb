//! OP_COMPRESSED: the compressors a node offers in the handshake and the
//! framing of a compressed message.
//!
//! ```text
//! MsgHeader          16 bytes, opCode 2012
//! originalOpcode     int32: the opcode of the message inside
//! uncompressedSize   int32: the inside message's length without its header
//! compressorId       uint8: 0 noop, 1 snappy, 2 zlib, 3 zstd
//! compressedMessage  the rest of the frame
//! ```
//!
//! The declared size is checked before anything is allocated for it: it
//! must be non-negative and, with a header, within
//! `MAX_MESSAGE_SIZE_BYTES`. Every decompressor is bounded by that size
//! (a stream that would expand past it is refused, not buffered), and
//! the output must have exactly the declared length, as MongoDB requires.

use std::io::Read;

use crate::frame::{read_i32, MsgHeader, HEADER_LEN_BYTES};
use crate::{opcode, WireError, MAX_MESSAGE_SIZE_BYTES};

/// The bytes between the message header and the compressed payload.
pub const COMPRESSION_HEADER_LEN_BYTES: usize = 9;

/// The largest inside message (without its header) a compressed message
/// may declare.
pub const MAX_UNCOMPRESSED_SIZE_BYTES: usize = MAX_MESSAGE_SIZE_BYTES - HEADER_LEN_BYTES;

/// zlib level used for replies: MongoDB's default (`zlibCompressionLevel`
/// is 6; the level is the sender's choice and the reader needs none).
const ZLIB_LEVEL: u32 = 6;
/// zstd level used for replies: the library's default.
const ZSTD_LEVEL: i32 = 3;

/// A compressor of the wire protocol, with MongoDB's ids and names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compressor {
    Noop,
    Snappy,
    Zlib,
    Zstd,
}

/// The compressors a node offers in `hello`, in its order of preference
/// (MongoDB's default `net.compression.compressors` is snappy, zstd,
/// zlib; `noop` is never negotiated).
pub const OFFERED_COMPRESSORS: [Compressor; 3] = [Compressor::Snappy, Compressor::Zstd, Compressor::Zlib];

impl Compressor {
    pub fn id(self) -> u8 {
        match self {
            Compressor::Noop => 0,
            Compressor::Snappy => 1,
            Compressor::Zlib => 2,
            Compressor::Zstd => 3,
        }
    }

    pub fn from_id(id: u8) -> Option<Compressor> {
        match id {
            0 => Some(Compressor::Noop),
            1 => Some(Compressor::Snappy),
            2 => Some(Compressor::Zlib),
            3 => Some(Compressor::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compressor::Noop => "noop",
            Compressor::Snappy => "snappy",
            Compressor::Zlib => "zlib",
            Compressor::Zstd => "zstd",
        }
    }

    /// An offered compressor by its handshake name.
    pub fn offered(name: &str) -> Option<Compressor> {
        OFFERED_COMPRESSORS
            .into_iter()
            .find(|compressor| compressor.name() == name)
    }

    fn compress(self, input: &[u8]) -> Result<Vec<u8>, WireError> {
        let failed = |error: &dyn std::fmt::Display| WireError::Compression(format!("{}: {error}", self.name()));
        match self {
            Compressor::Noop => Ok(input.to_vec()),
            Compressor::Snappy => snap::raw::Encoder::new().compress_vec(input).map_err(|e| failed(&e)),
            Compressor::Zlib => {
                let mut encoder = flate2::read::ZlibEncoder::new(input, flate2::Compression::new(ZLIB_LEVEL));
                let mut output = Vec::with_capacity(input.len() / 2 + 64);
                encoder.read_to_end(&mut output).map_err(|e| failed(&e))?;
                Ok(output)
            }
            Compressor::Zstd => zstd::bulk::compress(input, ZSTD_LEVEL).map_err(|e| failed(&e)),
        }
    }

    /// Decompresses `input`, which must expand to exactly `expected` bytes;
    /// nothing beyond `expected` bytes is ever produced.
    fn decompress(self, input: &[u8], expected: usize) -> Result<Vec<u8>, WireError> {
        let failed = |error: &dyn std::fmt::Display| WireError::Compression(format!("{}: {error}", self.name()));
        let output = match self {
            Compressor::Noop => input.to_vec(),
            Compressor::Snappy => {
                // The snappy preamble states the length: checked before
                // the buffer is allocated.
                let declared = snap::raw::decompress_len(input).map_err(|e| failed(&e))?;
                if declared != expected {
                    return Err(WireError::DecompressedSizeMismatch {
                        declared: expected,
                        actual: declared,
                    });
                }
                snap::raw::Decoder::new()
                    .decompress_vec(input)
                    .map_err(|e| failed(&e))?
            }
            Compressor::Zlib => {
                // One byte more than expected is read, to tell "exactly"
                // from "more"; the rest of a longer stream is never inflated.
                let mut output = Vec::with_capacity(expected);
                flate2::read::ZlibDecoder::new(input)
                    .take(expected as u64 + 1)
                    .read_to_end(&mut output)
                    .map_err(|e| failed(&e))?;
                output
            }
            // `bulk::decompress` refuses a frame larger than the capacity.
            Compressor::Zstd => zstd::bulk::decompress(input, expected).map_err(|e| failed(&e))?,
        };
        if output.len() != expected {
            return Err(WireError::DecompressedSizeMismatch {
                declared: expected,
                actual: output.len(),
            });
        }
        Ok(output)
    }
}

/// A compressed message opened: the message inside (header included, with
/// the outer request id and responseTo) and the compressor it came in.
#[derive(Debug, PartialEq, Eq)]
pub struct Decompressed {
    pub compressor: Compressor,
    pub message: Vec<u8>,
}

/// Opens one whole OP_COMPRESSED frame (`check_frame` has bounded it).
pub fn decompress_message(frame: &[u8]) -> Result<Decompressed, WireError> {
    let header = MsgHeader::parse(frame)?;
    assert_eq!(header.op_code, opcode::OP_COMPRESSED, "the caller checked the opcode");
    if frame.len() < HEADER_LEN_BYTES + COMPRESSION_HEADER_LEN_BYTES {
        return Err(WireError::Malformed(
            "OP_COMPRESSED shorter than its compression header".into(),
        ));
    }
    let original_op_code = read_i32(frame, HEADER_LEN_BYTES);
    let declared = read_i32(frame, HEADER_LEN_BYTES + 4);
    let compressor_id = frame[HEADER_LEN_BYTES + 8];
    let compressor = Compressor::from_id(compressor_id).ok_or(WireError::UnknownCompressor(compressor_id))?;
    if original_op_code == opcode::OP_COMPRESSED {
        return Err(WireError::Malformed("OP_COMPRESSED inside OP_COMPRESSED".into()));
    }
    let expected = usize::try_from(declared)
        .ok()
        .filter(|size| *size <= MAX_UNCOMPRESSED_SIZE_BYTES)
        .ok_or(WireError::UncompressedSizeOutOfRange(i64::from(declared)))?;
    let payload = &frame[HEADER_LEN_BYTES + COMPRESSION_HEADER_LEN_BYTES..];
    let body = compressor.decompress(payload, expected)?;
    let inner = MsgHeader {
        message_length: (HEADER_LEN_BYTES + expected) as i32,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: original_op_code,
    };
    let mut message = Vec::with_capacity(HEADER_LEN_BYTES + expected);
    inner.write(&mut message);
    message.extend_from_slice(&body);
    assert_eq!(message.len(), inner.message_length as usize);
    Ok(Decompressed { compressor, message })
}

/// Wraps a whole message (header included) in an OP_COMPRESSED with the
/// same request id and responseTo.
pub fn compress_message(message: &[u8], compressor: Compressor) -> Result<Vec<u8>, WireError> {
    let header = MsgHeader::parse(message)?;
    assert_eq!(header.message_length as usize, message.len(), "a whole message");
    let body = &message[HEADER_LEN_BYTES..];
    let compressed = compressor.compress(body)?;
    let length = HEADER_LEN_BYTES + COMPRESSION_HEADER_LEN_BYTES + compressed.len();
    if length > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::MessageTooLarge(length as i64));
    }
    let outer = MsgHeader {
        message_length: length as i32,
        request_id: header.request_id,
        response_to: header.response_to,
        op_code: opcode::OP_COMPRESSED,
    };
    let mut out = Vec::with_capacity(length);
    outer.write(&mut out);
    out.extend_from_slice(&header.op_code.to_le_bytes());
    out.extend_from_slice(&(body.len() as i32).to_le_bytes());
    out.push(compressor.id());
    out.extend_from_slice(&compressed);
    assert_eq!(out.len(), length);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode_op_msg, parse_message, Message};
    use bson::doc;

    const ALL: [Compressor; 4] = [Compressor::Noop, Compressor::Snappy, Compressor::Zlib, Compressor::Zstd];

    fn message() -> Vec<u8> {
        let body = doc! {"insert": "c", "documents": [{"s": "x".repeat(10_000)}], "$db": "d"};
        encode_op_msg(7, 3, 0, &body, &[]).unwrap()
    }

    #[test]
    fn every_compressor_round_trips_a_message() {
        let original = message();
        for compressor in ALL {
            let compressed = compress_message(&original, compressor).unwrap();
            assert_eq!(MsgHeader::parse(&compressed).unwrap().op_code, opcode::OP_COMPRESSED);
            if compressor != Compressor::Noop {
                assert!(compressed.len() < original.len() / 4, "{compressor:?} compresses");
            }
            let opened = decompress_message(&compressed).unwrap();
            assert_eq!(opened.compressor, compressor);
            assert_eq!(opened.message, original);
            assert!(matches!(parse_message(&opened.message), Ok(Message::Msg(_))));
        }
    }

    fn with_declared_size(compressor: Compressor, declared: i32) -> Vec<u8> {
        let mut compressed = compress_message(&message(), compressor).unwrap();
        compressed[HEADER_LEN_BYTES + 4..HEADER_LEN_BYTES + 8].copy_from_slice(&declared.to_le_bytes());
        compressed
    }

    #[test]
    fn declared_sizes_are_bounded_and_exact() {
        let actual = message().len() - HEADER_LEN_BYTES;
        for compressor in ALL {
            for declared in [-1, i32::MAX, (MAX_UNCOMPRESSED_SIZE_BYTES + 1) as i32] {
                let error = decompress_message(&with_declared_size(compressor, declared)).unwrap_err();
                assert_eq!(error, WireError::UncompressedSizeOutOfRange(i64::from(declared)));
            }
            // A size that is wrong but in range: more, or fewer, bytes than
            // the stream holds.
            for declared in [actual - 1, actual + 1, 0] {
                let error = decompress_message(&with_declared_size(compressor, declared as i32)).unwrap_err();
                assert!(
                    matches!(
                        error,
                        WireError::DecompressedSizeMismatch { .. } | WireError::Compression(_)
                    ),
                    "{compressor:?} {declared}: {error:?}"
                );
            }
        }
    }

    #[test]
    fn a_small_stream_cannot_expand_past_its_declared_size() {
        // 10 MB of zeros compress to a few KB; declared as 1 KB, the
        // decompressor stops at 1 KB + 1 instead of inflating it all.
        let zeros = vec![0u8; 10_000_000];
        for compressor in [Compressor::Snappy, Compressor::Zlib, Compressor::Zstd] {
            let payload = compressor.compress(&zeros).unwrap();
            let error = compressor.decompress(&payload, 1024).unwrap_err();
            assert!(
                matches!(
                    error,
                    WireError::DecompressedSizeMismatch { .. } | WireError::Compression(_)
                ),
                "{compressor:?}: {error:?}"
            );
        }
    }

    #[test]
    fn unknown_and_nested_compression_are_refused() {
        let mut unknown = compress_message(&message(), Compressor::Zlib).unwrap();
        unknown[HEADER_LEN_BYTES + 8] = 9;
        assert_eq!(
            decompress_message(&unknown).unwrap_err(),
            WireError::UnknownCompressor(9)
        );
        let mut nested = compress_message(&message(), Compressor::Noop).unwrap();
        nested[HEADER_LEN_BYTES..HEADER_LEN_BYTES + 4].copy_from_slice(&opcode::OP_COMPRESSED.to_le_bytes());
        assert!(matches!(decompress_message(&nested), Err(WireError::Malformed(_))));
        let short = compress_message(&message(), Compressor::Noop).unwrap()[..HEADER_LEN_BYTES + 5].to_vec();
        assert!(matches!(decompress_message(&short), Err(WireError::Malformed(_))));
    }

    #[test]
    fn garbage_payloads_are_errors_not_panics() {
        for compressor in ALL {
            for garbage in [vec![], vec![0xff; 7], (0..=255u8).collect::<Vec<_>>()] {
                let _ = compressor.decompress(&garbage, 100);
            }
        }
    }

    #[test]
    fn offered_names_are_mongodbs() {
        assert_eq!(Compressor::offered("snappy"), Some(Compressor::Snappy));
        assert_eq!(Compressor::offered("zstd"), Some(Compressor::Zstd));
        assert_eq!(Compressor::offered("zlib"), Some(Compressor::Zlib));
        assert_eq!(Compressor::offered("noop"), None);
        assert_eq!(Compressor::offered("lz4"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any bytes after an OP_COMPRESSED header open to an error or to a
        /// message of exactly the declared size; nothing panics.
        #[test]
        fn arbitrary_payloads_never_panic(
            compressor_id in 0u8..5,
            declared in -2i32..70_000,
            payload in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        ) {
            let mut frame = Vec::new();
            let length = (HEADER_LEN_BYTES + COMPRESSION_HEADER_LEN_BYTES + payload.len()) as i32;
            MsgHeader { message_length: length, request_id: 1, response_to: 0, op_code: opcode::OP_COMPRESSED }
                .write(&mut frame);
            frame.extend_from_slice(&opcode::OP_MSG.to_le_bytes());
            frame.extend_from_slice(&declared.to_le_bytes());
            frame.push(compressor_id);
            frame.extend_from_slice(&payload);
            if let Ok(opened) = decompress_message(&frame) {
                proptest::prop_assert_eq!(opened.message.len(), HEADER_LEN_BYTES + declared as usize);
            }
        }

        /// Whatever a compressor makes of a body opens to the same body.
        #[test]
        fn compressed_bodies_round_trip(
            compressor_id in 0u8..4,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        ) {
            let compressor = Compressor::from_id(compressor_id).unwrap();
            let mut message = Vec::new();
            MsgHeader { message_length: (HEADER_LEN_BYTES + body.len()) as i32, request_id: 9, response_to: 4, op_code: opcode::OP_MSG }
                .write(&mut message);
            message.extend_from_slice(&body);
            let compressed = compress_message(&message, compressor).unwrap();
            proptest::prop_assert_eq!(decompress_message(&compressed).unwrap().message, message);
        }
    }
}
