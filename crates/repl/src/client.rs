//! The internal client: one TCP connection to another member, speaking
//! OP_MSG on the `wire` crate's framing. It opens with the internal
//! handshake (`hello` with `internalClient` and `slipstreamMember`, so that
//! the other side knows which member it talks to and can apply the
//! `blockMembers` fault hook), then runs one command at a time.

use bson::{doc, Bson, Document, RawBsonRef, RawDocumentBuf};
use slipstream_wire::{check_frame, encode_op_msg, parse_message, Message, WireError, HEADER_LEN_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::network::NetError;

/// Most bytes read from the socket at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// The wire versions this client speaks (MongoDB 7.0's range).
const MIN_WIRE_VERSION: i32 = 0;
const MAX_WIRE_VERSION: i32 = 21;

pub struct Connection {
    /// The member name its handshake gave (the fault hook matches it).
    pub me: String,
    stream: TcpStream,
    /// Bytes read but not yet framed.
    buffer: Vec<u8>,
    next_request_id: i32,
}

impl Connection {
    /// Connects to `host` and performs the internal handshake as `me`.
    pub async fn open(host: &str, me: &str) -> Result<Connection, NetError> {
        let stream = TcpStream::connect(host)
            .await
            .map_err(|err| NetError::Unreachable(format!("{host}: {err}")))?;
        // Small messages (heartbeats, positions) must not wait for Nagle.
        let _ = stream.set_nodelay(true);
        let mut connection = Connection {
            me: me.to_owned(),
            stream,
            buffer: Vec::with_capacity(READ_CHUNK_BYTES),
            next_request_id: 1,
        };
        let hello = doc! {
            "hello": 1,
            "internalClient": {"minWireVersion": MIN_WIRE_VERSION, "maxWireVersion": MAX_WIRE_VERSION},
            "slipstreamMember": me,
        };
        connection.run("admin", hello).await?;
        Ok(connection)
    }

    /// Runs one command and returns its reply; `ok: 0` replies are
    /// `NetError::Command`.
    pub async fn run(&mut self, db: &str, mut body: Document) -> Result<Document, NetError> {
        body.insert("$db", db);
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        let bytes = encode_op_msg(request_id, 0, 0, &body, &[]).map_err(wire)?;
        self.stream.write_all(&bytes).await.map_err(io)?;
        let reply = self.read_reply().await?;
        command_result(reply)
    }

    /// `run` whose reply stays raw BSON: the oplog fetcher hands the
    /// entries to storage as they arrived, without building documents.
    pub async fn run_raw(&mut self, db: &str, mut body: Document) -> Result<RawDocumentBuf, NetError> {
        body.insert("$db", db);
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        let bytes = encode_op_msg(request_id, 0, 0, &body, &[]).map_err(wire)?;
        self.stream.write_all(&bytes).await.map_err(io)?;
        let frame = self.read_frame().await?;
        let reply = match raw_body(&frame) {
            Some(body) => body,
            None => {
                RawDocumentBuf::try_from(&reply_document(&frame)?).map_err(|err| NetError::Protocol(err.to_string()))?
            }
        };
        command_result_raw(reply)
    }

    async fn read_reply(&mut self) -> Result<Document, NetError> {
        let frame = self.read_frame().await?;
        reply_document(&frame)
    }

    async fn read_frame(&mut self) -> Result<Vec<u8>, NetError> {
        loop {
            match check_frame(&self.buffer) {
                Ok(length) => return Ok(self.buffer.drain(..length).collect()),
                Err(WireError::Incomplete) => {}
                Err(err) => return Err(wire(err)),
            }
            let start = self.buffer.len();
            self.buffer.resize(start + READ_CHUNK_BYTES, 0);
            let read = self.stream.read(&mut self.buffer[start..]).await;
            let read = match read {
                Ok(0) => {
                    self.buffer.truncate(start);
                    return Err(NetError::Unreachable("connection closed".into()));
                }
                Ok(n) => n,
                Err(err) => {
                    self.buffer.truncate(start);
                    return Err(io(err));
                }
            };
            self.buffer.truncate(start + read);
        }
    }
}

fn reply_document(frame: &[u8]) -> Result<Document, NetError> {
    match parse_message(frame).map_err(wire)? {
        Message::Msg(msg) => Ok(msg.body),
        Message::Reply(reply) => reply
            .documents
            .into_iter()
            .next()
            .ok_or_else(|| NetError::Protocol("empty OP_REPLY".into())),
        Message::Query(_) => Err(NetError::Protocol("a member answered with OP_QUERY".into())),
    }
}

/// The body section of an OP_MSG whose first section is the body (as
/// every reply of a member is), as raw BSON; `None` for any other shape
/// (the caller parses it the long way).
fn raw_body(frame: &[u8]) -> Option<RawDocumentBuf> {
    const BODY_AT: usize = HEADER_LEN_BYTES + 4;
    let op_code = i32::from_le_bytes(frame.get(12..16)?.try_into().ok()?);
    if op_code != slipstream_wire::opcode::OP_MSG || *frame.get(BODY_AT)? != 0 {
        return None;
    }
    let start = BODY_AT + 1;
    let length = i32::from_le_bytes(frame.get(start..start + 4)?.try_into().ok()?);
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    RawDocumentBuf::from_bytes(frame.get(start..end)?.to_vec()).ok()
}

fn command_result_raw(reply: RawDocumentBuf) -> Result<RawDocumentBuf, NetError> {
    let ok = match reply.get("ok") {
        Ok(Some(RawBsonRef::Double(ok))) => ok == 1.0,
        Ok(Some(RawBsonRef::Int32(ok))) => ok == 1,
        Ok(Some(RawBsonRef::Int64(ok))) => ok == 1,
        Ok(Some(RawBsonRef::Boolean(ok))) => ok,
        _ => false,
    };
    if ok {
        return Ok(reply);
    }
    let document = Document::try_from(reply.as_ref()).unwrap_or_default();
    command_result(document).map(|_| reply)
}

/// `ok: 1` -> the reply; anything else -> the command's error.
pub fn command_result(reply: Document) -> Result<Document, NetError> {
    let ok = match reply.get("ok") {
        Some(Bson::Double(ok)) => *ok == 1.0,
        Some(Bson::Int32(ok)) => *ok == 1,
        Some(Bson::Int64(ok)) => *ok == 1,
        Some(Bson::Boolean(ok)) => *ok,
        _ => false,
    };
    if ok {
        return Ok(reply);
    }
    let code = reply.get_i32("code").unwrap_or(0);
    let message = reply.get_str("errmsg").unwrap_or("").to_owned();
    Err(NetError::Command { code, message, reply })
}

fn wire(err: WireError) -> NetError {
    NetError::Protocol(err.to_string())
}

fn io(err: std::io::Error) -> NetError {
    NetError::Unreachable(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_body_is_taken_raw_as_the_frame_holds_it() {
        let body = doc! {"cursor": {"id": 7_i64, "nextBatch": [{"ts": 1}]}, "ok": 1.0};
        let frame = encode_op_msg(3, 1, 0, &body, &[]).unwrap();
        let raw = raw_body(&frame).unwrap();
        assert_eq!(Document::try_from(raw.as_ref()).unwrap(), body);
        assert!(command_result_raw(raw).is_ok());
        // A frame cut short or of another kind is left to the full parser.
        assert!(raw_body(&frame[..frame.len() - 3]).is_none());
        assert!(raw_body(&frame[..10]).is_none());
        let reply = slipstream_wire::encode_op_reply(1, 1, 0, 0, &[body]).unwrap();
        assert!(raw_body(&reply).is_none());
        let failed = doc! {"ok": 0.0, "code": 13436, "errmsg": "no"};
        let frame = encode_op_msg(4, 1, 0, &failed, &[]).unwrap();
        match command_result_raw(raw_body(&frame).unwrap()) {
            Err(NetError::Command { code: 13436, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
}
