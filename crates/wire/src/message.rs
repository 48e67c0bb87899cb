//! Parsing and encoding of the message kinds a node sees: OP_MSG, the
//! legacy OP_QUERY (handshake only) and OP_REPLY (its answer, also parsed
//! for clients and tests).

use bson::{Bson, Document, RawDocument};

use crate::frame::{read_i32, read_i64, read_u32, MsgHeader, HEADER_LEN_BYTES};
use crate::decoder::decode_document;
use crate::nesting::check_nesting_depth;
use crate::{msg_flags, opcode, WireError, MAX_BSON_DEPTH, MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES, MAX_MESSAGE_SIZE_BYTES};

/// The most document-sequence sections one OP_MSG may carry; real drivers
/// send at most one, so a larger number is treated as malformed input.
pub const MAX_SEQUENCES_PER_MESSAGE: usize = 16;

/// An OP_MSG document-sequence section (kind 1).
#[derive(Clone, Debug, PartialEq)]
pub struct DocumentSequence {
    pub identifier: String,
    pub documents: Vec<Document>,
}

/// A parsed OP_MSG.
#[derive(Clone, Debug, PartialEq)]
pub struct OpMsg {
    pub header: MsgHeader,
    pub flags: u32,
    pub body: Document,
    pub sequences: Vec<DocumentSequence>,
}

impl OpMsg {
    pub fn more_to_come(&self) -> bool {
        self.flags & msg_flags::MORE_TO_COME != 0
    }

    pub fn exhaust_allowed(&self) -> bool {
        self.flags & msg_flags::EXHAUST_ALLOWED != 0
    }

    /// The command body with every document sequence merged in as an array
    /// under its identifier (how a command handler sees `insert`'s
    /// `documents`). A sequence whose identifier is also a body field is an
    /// error, as in MongoDB.
    pub fn into_command_body(self) -> Result<Document, WireError> {
        let mut body = self.body;
        for sequence in self.sequences {
            if body.contains_key(&sequence.identifier) {
                return Err(WireError::Malformed(format!(
                    "duplicate field '{}' in the body and a document sequence",
                    sequence.identifier
                )));
            }
            let array = sequence.documents.into_iter().map(Bson::Document).collect();
            body.insert(sequence.identifier, Bson::Array(array));
        }
        Ok(body)
    }
}

/// A parsed legacy OP_QUERY.
#[derive(Clone, Debug, PartialEq)]
pub struct OpQuery {
    pub header: MsgHeader,
    pub flags: i32,
    pub full_collection_name: String,
    pub number_to_skip: i32,
    pub number_to_return: i32,
    pub query: Document,
    pub return_fields_selector: Option<Document>,
}

/// A parsed legacy OP_REPLY.
#[derive(Clone, Debug, PartialEq)]
pub struct OpReply {
    pub header: MsgHeader,
    pub response_flags: i32,
    pub cursor_id: i64,
    pub starting_from: i32,
    pub documents: Vec<Document>,
}

/// Any message this crate parses.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    Msg(OpMsg),
    Query(OpQuery),
    Reply(OpReply),
}

impl Message {
    pub fn header(&self) -> &MsgHeader {
        match self {
            Message::Msg(m) => &m.header,
            Message::Query(q) => &q.header,
            Message::Reply(r) => &r.header,
        }
    }
}

/// Parses one whole message. `frame` must be exactly the bytes
/// `check_frame` measured: the header's length must equal its length.
pub fn parse_message(frame: &[u8]) -> Result<Message, WireError> {
    let header = MsgHeader::parse(frame)?;
    if header.message_length < 0 || header.message_length as usize != frame.len() {
        return Err(WireError::Malformed(format!(
            "header length {} does not match the frame's {} bytes",
            header.message_length,
            frame.len()
        )));
    }
    if frame.len() > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::MessageTooLarge(frame.len() as i64));
    }
    match header.op_code {
        opcode::OP_MSG => parse_op_msg(header, frame).map(Message::Msg),
        opcode::OP_QUERY => parse_op_query(header, frame).map(Message::Query),
        opcode::OP_REPLY => parse_op_reply(header, frame).map(Message::Reply),
        opcode::OP_COMPRESSED => Err(WireError::CompressionNotSupported),
        other => Err(WireError::UnsupportedOpCode(other)),
    }
}

fn parse_op_msg(header: MsgHeader, frame: &[u8]) -> Result<OpMsg, WireError> {
    let mut at = HEADER_LEN_BYTES;
    need(frame.len(), at, 4)?;
    let flags = read_u32(frame, at);
    at += 4;
    let unknown_required = flags & msg_flags::REQUIRED_MASK & !msg_flags::KNOWN_REQUIRED;
    if unknown_required != 0 {
        return Err(WireError::UnknownRequiredFlags(unknown_required));
    }
    let mut end = frame.len();
    if flags & msg_flags::CHECKSUM_PRESENT != 0 {
        need(end, at, 4)?;
        end -= 4;
        let expected = read_u32(frame, end);
        let actual = crc32c::crc32c(&frame[..end]);
        if expected != actual {
            return Err(WireError::ChecksumMismatch { expected, actual });
        }
    }
    let mut body = None;
    let mut sequences = Vec::new();
    while at < end {
        let kind = frame[at];
        at += 1;
        match kind {
            0 => {
                if body.is_some() {
                    return Err(WireError::Malformed("more than one body section".into()));
                }
                let (document, next) = read_document(frame, at, end)?;
                body = Some(document);
                at = next;
            }
            1 => {
                if sequences.len() == MAX_SEQUENCES_PER_MESSAGE {
                    return Err(WireError::Malformed("too many document sequences".into()));
                }
                let (sequence, next) = read_sequence(frame, at, end)?;
                sequences.push(sequence);
                at = next;
            }
            other => return Err(WireError::Malformed(format!("unknown OP_MSG section kind {other}"))),
        }
    }
    let body = body.ok_or_else(|| WireError::Malformed("OP_MSG without a body section".into()))?;
    Ok(OpMsg { header, flags, body, sequences })
}

fn read_sequence(frame: &[u8], at: usize, end: usize) -> Result<(DocumentSequence, usize), WireError> {
    need(end, at, 4)?;
    let size = read_i32(frame, at);
    if size < 4 || (size as usize) > end - at {
        return Err(WireError::Malformed(format!("document sequence size {size} out of bounds")));
    }
    let section_end = at + size as usize;
    let (identifier, mut cursor) = read_cstring(frame, at + 4, section_end)?;
    let mut documents = Vec::new();
    while cursor < section_end {
        let (document, next) = read_document(frame, cursor, section_end)?;
        documents.push(document);
        cursor = next;
    }
    Ok((DocumentSequence { identifier, documents }, section_end))
}

fn parse_op_query(header: MsgHeader, frame: &[u8]) -> Result<OpQuery, WireError> {
    let end = frame.len();
    let mut at = HEADER_LEN_BYTES;
    need(end, at, 4)?;
    let flags = read_i32(frame, at);
    at += 4;
    let (full_collection_name, next) = read_cstring(frame, at, end)?;
    at = next;
    need(end, at, 8)?;
    let number_to_skip = read_i32(frame, at);
    let number_to_return = read_i32(frame, at + 4);
    at += 8;
    let (query, next) = read_document(frame, at, end)?;
    at = next;
    let return_fields_selector = if at < end {
        let (selector, next) = read_document(frame, at, end)?;
        at = next;
        Some(selector)
    } else {
        None
    };
    if at != end {
        return Err(WireError::Malformed("trailing bytes after OP_QUERY".into()));
    }
    Ok(OpQuery { header, flags, full_collection_name, number_to_skip, number_to_return, query, return_fields_selector })
}

fn parse_op_reply(header: MsgHeader, frame: &[u8]) -> Result<OpReply, WireError> {
    let end = frame.len();
    let mut at = HEADER_LEN_BYTES;
    need(end, at, 20)?;
    let response_flags = read_i32(frame, at);
    let cursor_id = read_i64(frame, at + 4);
    let starting_from = read_i32(frame, at + 12);
    let number_returned = read_i32(frame, at + 16);
    at += 20;
    if number_returned < 0 {
        return Err(WireError::Malformed(format!("numberReturned {number_returned} is negative")));
    }
    // Documents are read one by one from the bytes present, so a huge
    // declared count allocates nothing.
    let mut documents = Vec::new();
    while at < end {
        let (document, next) = read_document(frame, at, end)?;
        documents.push(document);
        at = next;
    }
    if documents.len() != number_returned as usize {
        return Err(WireError::Malformed(format!(
            "numberReturned {number_returned} but {} documents present",
            documents.len()
        )));
    }
    Ok(OpReply { header, response_flags, cursor_id, starting_from, documents })
}

/// Fails unless `count` bytes starting at `at` lie before `end`.
fn need(end: usize, at: usize, count: usize) -> Result<(), WireError> {
    if at.checked_add(count).is_some_and(|stop| stop <= end) {
        Ok(())
    } else {
        Err(WireError::Malformed(format!("truncated message: {count} bytes needed at offset {at}")))
    }
}

/// Reads one BSON document at `at` that must end at or before `end`; the
/// declared size is checked against the limit and the bytes present, and
/// the nesting against `MAX_BSON_DEPTH`, before the document is decoded.
fn read_document(frame: &[u8], at: usize, end: usize) -> Result<(Document, usize), WireError> {
    need(end, at, 4)?;
    let declared = read_i32(frame, at);
    if declared < 5 {
        return Err(WireError::InvalidBson(format!("document length {declared} is below 5")));
    }
    let length = declared as usize;
    if length > MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES {
        return Err(WireError::DocumentTooLarge(length));
    }
    need(end, at, length)?;
    let bytes = &frame[at..at + length];
    check_nesting_depth(bytes, MAX_BSON_DEPTH)?;
    let raw = RawDocument::from_bytes(bytes).map_err(|err| WireError::InvalidBson(err.to_string()))?;
    let document = decode_document(raw)?;
    Ok((document, at + length))
}

/// Reads a NUL-terminated UTF-8 string that must end before `end`.
fn read_cstring(frame: &[u8], at: usize, end: usize) -> Result<(String, usize), WireError> {
    if at >= end {
        return Err(WireError::Malformed("truncated string".into()));
    }
    let nul = frame[at..end]
        .iter()
        .position(|&byte| byte == 0)
        .ok_or_else(|| WireError::Malformed("unterminated string".into()))?;
    let text = std::str::from_utf8(&frame[at..at + nul])
        .map_err(|_| WireError::Malformed("string is not valid UTF-8".into()))?;
    Ok((text.to_owned(), at + nul + 1))
}

fn append_document(out: &mut Vec<u8>, document: &Document) -> Result<(), WireError> {
    let start = out.len();
    document.to_writer(&mut *out).map_err(|err| WireError::InvalidBson(err.to_string()))?;
    let written = out.len() - start;
    if written > MAX_BSON_DOCUMENT_IN_MESSAGE_BYTES {
        return Err(WireError::DocumentTooLarge(written));
    }
    Ok(())
}

/// Patches the header's length once the message is complete and enforces
/// the message size limit on what this node sends.
fn finish(mut out: Vec<u8>) -> Result<Vec<u8>, WireError> {
    if out.len() > MAX_MESSAGE_SIZE_BYTES {
        return Err(WireError::MessageTooLarge(out.len() as i64));
    }
    let length = (out.len() as i32).to_le_bytes();
    out[..4].copy_from_slice(&length);
    Ok(out)
}

fn start(request_id: i32, response_to: i32, op_code: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    MsgHeader { message_length: 0, request_id, response_to, op_code }.write(&mut out);
    out
}

/// Encodes an OP_MSG. With `CHECKSUM_PRESENT` in `flags` a CRC-32C of the
/// message is appended.
pub fn encode_op_msg(
    request_id: i32,
    response_to: i32,
    flags: u32,
    body: &Document,
    sequences: &[DocumentSequence],
) -> Result<Vec<u8>, WireError> {
    let mut out = start(request_id, response_to, opcode::OP_MSG);
    out.extend_from_slice(&flags.to_le_bytes());
    out.push(0);
    append_document(&mut out, body)?;
    for sequence in sequences {
        out.push(1);
        let size_at = out.len();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(sequence.identifier.as_bytes());
        out.push(0);
        for document in &sequence.documents {
            append_document(&mut out, document)?;
        }
        let size = ((out.len() - size_at) as i32).to_le_bytes();
        out[size_at..size_at + 4].copy_from_slice(&size);
    }
    if flags & msg_flags::CHECKSUM_PRESENT != 0 {
        let length = ((out.len() + 4) as i32).to_le_bytes();
        out[..4].copy_from_slice(&length);
        let checksum = crc32c::crc32c(&out);
        out.extend_from_slice(&checksum.to_le_bytes());
    }
    finish(out)
}

/// Encodes an OP_REPLY (the answer to a legacy OP_QUERY).
pub fn encode_op_reply(
    request_id: i32,
    response_to: i32,
    response_flags: i32,
    cursor_id: i64,
    documents: &[Document],
) -> Result<Vec<u8>, WireError> {
    let mut out = start(request_id, response_to, opcode::OP_REPLY);
    out.extend_from_slice(&response_flags.to_le_bytes());
    out.extend_from_slice(&cursor_id.to_le_bytes());
    out.extend_from_slice(&0i32.to_le_bytes());
    out.extend_from_slice(&(documents.len() as i32).to_le_bytes());
    for document in documents {
        append_document(&mut out, document)?;
    }
    finish(out)
}

/// Encodes a legacy OP_QUERY (clients and tests use it for the handshake).
pub fn encode_op_query(
    request_id: i32,
    flags: i32,
    full_collection_name: &str,
    number_to_skip: i32,
    number_to_return: i32,
    query: &Document,
) -> Result<Vec<u8>, WireError> {
    if full_collection_name.as_bytes().contains(&0) {
        return Err(WireError::Malformed("collection name holds a NUL byte".into()));
    }
    let mut out = start(request_id, 0, opcode::OP_QUERY);
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(full_collection_name.as_bytes());
    out.push(0);
    out.extend_from_slice(&number_to_skip.to_le_bytes());
    out.extend_from_slice(&number_to_return.to_le_bytes());
    append_document(&mut out, query)?;
    finish(out)
}
