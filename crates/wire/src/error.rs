//! `WireError`: everything that can be wrong with bytes from the network.

use std::fmt;

/// Why a frame or message could not be parsed. `Incomplete` is not an
/// error of the peer: it asks the caller to read more bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the frame needs are buffered yet.
    Incomplete,
    /// The header declares a length below the header's own size.
    MessageTooSmall(i64),
    /// The header declares a length above `MAX_MESSAGE_SIZE_BYTES`.
    MessageTooLarge(i64),
    /// A document declares a size above the BSON limit.
    DocumentTooLarge(usize),
    /// An operation code this node does not handle.
    UnsupportedOpCode(i32),
    /// OP_COMPRESSED reached the message parser: compressed messages are
    /// opened first (`decompress_message`), so this one was nested.
    CompressionNotSupported,
    /// OP_COMPRESSED names a compressor id this node does not know.
    UnknownCompressor(u8),
    /// OP_COMPRESSED declares an uncompressed size below zero or above
    /// what a message may hold.
    UncompressedSizeOutOfRange(i64),
    /// The payload expanded to another size than declared.
    DecompressedSizeMismatch { declared: usize, actual: usize },
    /// The compressor refused the payload (corrupt input), or failed.
    Compression(String),
    /// An OP_MSG required flag bit this node does not know.
    UnknownRequiredFlags(u32),
    /// The OP_MSG checksum does not match its bytes.
    ChecksumMismatch { expected: u32, actual: u32 },
    /// Structurally invalid message (bad section, missing body, ...).
    Malformed(String),
    /// A document that is not valid BSON.
    InvalidBson(String),
    /// A document nested deeper than `MAX_BSON_DEPTH`; the dotted path of
    /// the element that went past it.
    NestingTooDeep(String),
}

impl WireError {
    /// The MongoDB error code a reply to this error carries, for errors that
    /// still let the node answer.
    pub fn code(&self) -> i32 {
        match self {
            WireError::DocumentTooLarge(_) => 10334,
            WireError::InvalidBson(_) => 22,
            // MongoDB's validateBSON answers ErrorCodes::Overflow.
            WireError::NestingTooDeep(_) => 15,
            // MongoDB answers an unusable opcode or compressor with a
            // plain BadValue-class error; the message names the cause.
            WireError::UnsupportedOpCode(_)
            | WireError::CompressionNotSupported
            | WireError::UncompressedSizeOutOfRange(_)
            | WireError::DecompressedSizeMismatch { .. }
            | WireError::Compression(_) => 2,
            // MongoDB: "Compression algorithm specified in message is not
            // available" is an InternalError.
            WireError::UnknownCompressor(_) => 1,
            _ => 40_413,
        }
    }

    pub fn code_name(&self) -> &'static str {
        match self.code() {
            10334 => "BSONObjectTooLarge",
            22 => "InvalidBSON",
            15 => "Overflow",
            2 => "BadValue",
            1 => "InternalError",
            _ => "Location40413",
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Incomplete => write!(f, "incomplete message"),
            WireError::MessageTooSmall(len) => {
                write!(f, "message length {len} is smaller than the 16-byte header")
            }
            WireError::MessageTooLarge(len) => {
                write!(
                    f,
                    "message length {len} exceeds maxMessageSizeBytes {}",
                    crate::MAX_MESSAGE_SIZE_BYTES
                )
            }
            WireError::DocumentTooLarge(len) => write!(
                f,
                "BSON document size {len} exceeds the maximum of {}",
                crate::MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES
            ),
            WireError::UnsupportedOpCode(op) => write!(f, "unsupported wire operation code {op}"),
            WireError::CompressionNotSupported => write!(f, "OP_COMPRESSED inside a compressed message"),
            WireError::UnknownCompressor(id) => {
                write!(
                    f,
                    "Compression algorithm specified in message is not available (compressor id {id})"
                )
            }
            WireError::UncompressedSizeOutOfRange(size) => write!(
                f,
                "Decompressed message size {size} is out of range [0, {}]",
                crate::compression::MAX_UNCOMPRESSED_SIZE_BYTES
            ),
            WireError::DecompressedSizeMismatch { declared, actual } => {
                write!(
                    f,
                    "Decompressing message returned {actual} bytes, but the message declares {declared}"
                )
            }
            WireError::Compression(msg) => write!(f, "Decompressing message failed: {msg}"),
            WireError::UnknownRequiredFlags(bits) => {
                write!(f, "unrecognized required OP_MSG flag bits {bits:#x}")
            }
            WireError::ChecksumMismatch { expected, actual } => {
                write!(
                    f,
                    "OP_MSG checksum mismatch: message says {expected:#010x}, bytes give {actual:#010x}"
                )
            }
            WireError::Malformed(msg) => write!(f, "malformed message: {msg}"),
            WireError::InvalidBson(msg) => write!(f, "invalid BSON: {msg}"),
            WireError::NestingTooDeep(path) => {
                write!(
                    f,
                    "BSONObj exceeds maximum nested object depth in element with field name '{path}'"
                )
            }
        }
    }
}

impl std::error::Error for WireError {}
