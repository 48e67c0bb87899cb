//! The MongoDB wire protocol: message framing, OP_COMPRESSED (snappy,
//! zlib, zstd), OP_MSG (body and
//! document-sequence sections, the checksumPresent, moreToCome and
//! exhaustAllowed flags), and the legacy OP_QUERY / OP_REPLY pair that
//! mongosh and the Java driver still open a connection with.
//!
//! This crate is pure parsing and encoding: no sockets, no clock, no
//! storage. It must stay that way so that it can be fuzzed in isolation
//! (`fuzz/`) and reused by the node, its internal replication client and
//! `slipstream bench`.
//!
//! Every size the peer declares is checked against the named limits
//! (`MAX_MESSAGE_SIZE_BYTES`, `MAX_BSON_OBJECT_SIZE_BYTES`) and against the
//! bytes actually present before anything is allocated for it, every
//! document's nesting against `MAX_BSON_DEPTH` before it is decoded, and
//! no input can make a parser panic: malformed input is a `WireError`.

pub mod compression;
mod decoder;
mod error;
mod frame;
mod message;
mod nesting;

pub use compression::{compress_message, decompress_message, Compressor, Decompressed};
pub use decoder::DUPLICATE_ID_MARKER;
pub use error::WireError;
pub use frame::{check_frame, MsgHeader, HEADER_LEN_BYTES};
pub use message::{
    encode_op_msg, encode_op_query, encode_op_reply, parse_message, DocumentSequence, Message, OpMsg, OpQuery, OpReply,
};
pub use nesting::check_nesting_depth;

/// The largest message a node accepts or sends (MongoDB's
/// `maxMessageSizeBytes`, advertised in `hello`).
pub const MAX_MESSAGE_SIZE_BYTES: usize = 48_000_000;

/// The largest BSON document a user may store (MongoDB's
/// `maxBsonObjectSize`, advertised in `hello`).
pub const MAX_BSON_OBJECT_SIZE_BYTES: usize = 16 * 1024 * 1024;

/// Command bodies may exceed `MAX_BSON_OBJECT_SIZE_BYTES` by this much so
/// that a command carrying one maximum-size document still fits (MongoDB's
/// `BSONObjMaxInternalSize`).
pub const BSON_OBJECT_INTERNAL_SLACK_BYTES: usize = 16 * 1024;

/// The largest BSON document the parser accepts anywhere in a message.
pub const MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES: usize = MAX_BSON_OBJECT_SIZE_BYTES + BSON_OBJECT_INTERNAL_SLACK_BYTES;

/// How deeply a document in a message may nest: the top-level document is
/// depth 0 and each embedded document or array adds one (MongoDB's
/// `maxBSONDepth`, default 200). Every document of every message is
/// checked against it on its raw bytes before it is decoded, so that no
/// recursive code (the decoder included) ever sees deeper input.
pub const MAX_BSON_DEPTH: usize = 200;

/// Operation codes of the message header.
pub mod opcode {
    pub const OP_REPLY: i32 = 1;
    pub const OP_UPDATE: i32 = 2001;
    pub const OP_INSERT: i32 = 2002;
    pub const OP_QUERY: i32 = 2004;
    pub const OP_GET_MORE: i32 = 2005;
    pub const OP_DELETE: i32 = 2006;
    pub const OP_KILL_CURSORS: i32 = 2007;
    pub const OP_COMPRESSED: i32 = 2012;
    pub const OP_MSG: i32 = 2013;
}

/// OP_MSG flag bits.
pub mod msg_flags {
    /// The message ends with a CRC-32C of everything before it.
    pub const CHECKSUM_PRESENT: u32 = 1 << 0;
    /// The sender will not wait for a reply (requests) or will send more
    /// replies without a new request (exhaust replies).
    pub const MORE_TO_COME: u32 = 1 << 1;
    /// The client accepts an exhaust stream of replies.
    pub const EXHAUST_ALLOWED: u32 = 1 << 16;
    /// Bits 0-15 are "required": a receiver must reject unknown ones.
    pub const REQUIRED_MASK: u32 = 0xffff;
    /// The required bits this implementation understands.
    pub const KNOWN_REQUIRED: u32 = CHECKSUM_PRESENT | MORE_TO_COME;
}

/// OP_REPLY `responseFlags` bits.
/// OP_QUERY flag bits.
pub mod query_flags {
    /// The client lets a secondary answer (the legacy "slaveOk" bit).
    pub const SECONDARY_OK: i32 = 1 << 2;
}

pub mod reply_flags {
    pub const CURSOR_NOT_FOUND: i32 = 1 << 0;
    pub const QUERY_FAILURE: i32 = 1 << 1;
    pub const AWAIT_CAPABLE: i32 = 1 << 3;
}
