//! A small async MongoDB client over `slipstream-wire`: one TCP connection,
//! one OP_MSG request at a time. Enough for load generation; drivers are
//! the real clients.

use std::io;
use std::time::Duration;

use bson::{Bson, Document};
use slipstream_wire::{check_frame, encode_op_msg, parse_message, DocumentSequence, Message, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a TCP connect may take (a paused or partitioned member never
/// answers).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1000);

pub struct Client {
    stream: TcpStream,
    buffer: Vec<u8>,
    next_request_id: i32,
}

fn wire_error(err: WireError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err.to_string())
}

impl Client {
    pub async fn connect(address: &str) -> io::Result<Client> {
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(stream) => stream?,
            Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, format!("connect to {address} timed out"))),
        };
        stream.set_nodelay(true)?;
        Ok(Client { stream, buffer: Vec::with_capacity(64 * 1024), next_request_id: 1 })
    }

    /// Sends one command and returns the reply body (whatever its `ok`).
    pub async fn command(&mut self, body: &Document, sequences: &[DocumentSequence]) -> io::Result<Document> {
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        let bytes = encode_op_msg(request_id, 0, 0, body, sequences).map_err(wire_error)?;
        self.stream.write_all(&bytes).await?;
        loop {
            match check_frame(&self.buffer) {
                Ok(length) => {
                    let message = parse_message(&self.buffer[..length]).map_err(wire_error);
                    self.buffer.drain(..length);
                    return match message? {
                        Message::Msg(reply) if reply.header.response_to == request_id => Ok(reply.body),
                        other => Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("unexpected reply {:?}", other.header()),
                        )),
                    };
                }
                Err(WireError::Incomplete) => {
                    self.buffer.reserve(64 * 1024);
                    if self.stream.read_buf(&mut self.buffer).await? == 0 {
                        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection"));
                    }
                }
                Err(err) => return Err(wire_error(err)),
            }
        }
    }
}

/// Codes that mean "this node is not (or no longer) the primary, ask the
/// set again": NotWritablePrimary, NotPrimaryNoSecondaryOk,
/// NotPrimaryOrSecondary, PrimarySteppedDown, InterruptedDueToReplStateChange,
/// InterruptedAtShutdown, ShutdownInProgress.
pub const NOT_PRIMARY_CODES: [i32; 7] = [10107, 13435, 13436, 189, 11602, 11600, 91];

/// True when a reply (its top-level error, a write error or its write
/// concern error) says the node it came from cannot take writes now.
pub fn says_not_primary(reply: &Document) -> bool {
    let is_not_primary = |document: &Document| match document.get("code") {
        Some(Bson::Int32(code)) => NOT_PRIMARY_CODES.contains(code),
        Some(Bson::Int64(code)) => NOT_PRIMARY_CODES.iter().any(|known| i64::from(*known) == *code),
        _ => false,
    };
    if is_not_primary(reply) {
        return true;
    }
    if let Ok(concern_error) = reply.get_document("writeConcernError") {
        if is_not_primary(concern_error) {
            return true;
        }
    }
    reply
        .get_array("writeErrors")
        .map(|errors| errors.iter().any(|error| error.as_document().is_some_and(is_not_primary)))
        .unwrap_or(false)
}

/// True when a reply is a full success: `ok: 1`, no write errors and no
/// write concern error.
pub fn reply_ok(reply: &Document) -> bool {
    let ok = match reply.get("ok") {
        Some(Bson::Double(ok)) => *ok == 1.0,
        Some(Bson::Int32(ok)) => *ok == 1,
        Some(Bson::Int64(ok)) => *ok == 1,
        _ => false,
    };
    ok && !reply.contains_key("writeErrors") && !reply.contains_key("writeConcernError")
}
