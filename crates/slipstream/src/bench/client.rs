//! A small async MongoDB client over `slipstream-wire`: one TCP connection,
//! one OP_MSG request at a time. Enough for load generation; drivers are
//! the real clients.

use std::io;

use bson::{Bson, Document};
use slipstream_wire::{check_frame, encode_op_msg, parse_message, DocumentSequence, Message, WireError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
        let stream = TcpStream::connect(address).await?;
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

/// True when a reply is a full success: `ok: 1` and no write errors.
pub fn reply_ok(reply: &Document) -> bool {
    let ok = match reply.get("ok") {
        Some(Bson::Double(ok)) => *ok == 1.0,
        Some(Bson::Int32(ok)) => *ok == 1,
        Some(Bson::Int64(ok)) => *ok == 1,
        _ => false,
    };
    ok && !reply.contains_key("writeErrors") && !reply.contains_key("writeConcernError")
}
