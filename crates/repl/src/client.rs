//! The internal client: one TCP connection to another member, speaking
//! OP_MSG on the `wire` crate's framing. It opens with the internal
//! handshake (`hello` with `internalClient` and `slipstreamMember`, so that
//! the other side knows which member it talks to and can apply the
//! `blockMembers` fault hook), then runs one command at a time, or sends
//! one without waiting for an answer (`send_one_way`).

use bson::{doc, Bson, Document, RawBsonRef, RawDocumentBuf};
use slipstream_wire::{check_frame, encode_op_msg, msg_flags, parse_message, Message, WireError, HEADER_LEN_BYTES};
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
        let reply = match raw_body_range(&frame) {
            Some(range) => raw_body_owned(frame, range)?,
            None => {
                RawDocumentBuf::try_from(&reply_document(&frame)?).map_err(|err| NetError::Protocol(err.to_string()))?
            }
        };
        command_result_raw(reply)
    }

    /// Sends one command with OP_MSG's moreToCome flag: the other side
    /// runs it and answers nothing, so the caller learns only that the
    /// bytes left. For reports whose answer nobody acts on (the position
    /// reporter): no reply to write on the other side, none to wait for
    /// and read here.
    pub async fn send_one_way(&mut self, db: &str, mut body: Document) -> Result<(), NetError> {
        body.insert("$db", db);
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        let bytes = encode_op_msg(request_id, 0, msg_flags::MORE_TO_COME, &body, &[]).map_err(wire)?;
        self.stream.write_all(&bytes).await.map_err(io)
    }

    /// Whether an idle connection still looks usable: nothing to read on
    /// it, not closed. A one-way send on a connection the other side has
    /// closed would "succeed" into the socket buffer and be lost, where a
    /// command would see the close when reading its reply.
    pub fn idle_and_open(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.stream.try_read(&mut probe), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
    }

    async fn read_reply(&mut self) -> Result<Document, NetError> {
        let frame = self.read_frame().await?;
        reply_document(&frame)
    }

    /// One whole frame, as its own buffer. Once the header gives the
    /// frame's length, room for all of it is reserved at once and the
    /// socket reads straight into it (no zeroing, no regrowing); a frame
    /// that fills the buffer exactly is handed over without a copy.
    async fn read_frame(&mut self) -> Result<Vec<u8>, NetError> {
        loop {
            match check_frame(&self.buffer) {
                Ok(length) => return Ok(self.take_frame(length)),
                Err(WireError::Incomplete) => {}
                Err(err) => return Err(wire(err)),
            }
            // check_frame bounded the declared length when it could read it.
            let declared = self
                .buffer
                .get(..4)
                .map(|prefix| i32::from_le_bytes(prefix.try_into().expect("4 bytes")) as usize);
            let wanted = declared.unwrap_or(0).max(self.buffer.len() + READ_CHUNK_BYTES);
            self.buffer.reserve(wanted - self.buffer.len());
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) => return Err(NetError::Unreachable("connection closed".into())),
                Ok(_) => {}
                Err(err) => return Err(io(err)),
            }
        }
    }

    /// The first `length` bytes of the buffer; the buffer keeps the rest.
    fn take_frame(&mut self, length: usize) -> Vec<u8> {
        if length == self.buffer.len() {
            return std::mem::replace(&mut self.buffer, Vec::with_capacity(READ_CHUNK_BYTES));
        }
        let rest = self.buffer[length..].to_vec();
        let mut frame = std::mem::replace(&mut self.buffer, rest);
        frame.truncate(length);
        frame
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
#[cfg(test)]
fn raw_body(frame: &[u8]) -> Option<RawDocumentBuf> {
    let range = raw_body_range(frame)?;
    RawDocumentBuf::from_bytes(frame[range].to_vec()).ok()
}

/// Where `raw_body`'s document lies in the frame.
fn raw_body_range(frame: &[u8]) -> Option<std::ops::Range<usize>> {
    const BODY_AT: usize = HEADER_LEN_BYTES + 4;
    let op_code = i32::from_le_bytes(frame.get(12..16)?.try_into().ok()?);
    if op_code != slipstream_wire::opcode::OP_MSG || *frame.get(BODY_AT)? != 0 {
        return None;
    }
    let start = BODY_AT + 1;
    let length = i32::from_le_bytes(frame.get(start..start + 4)?.try_into().ok()?);
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    frame.get(start..end)?;
    Some(start..end)
}

/// The frame's body as its own document, moved to the front of the
/// frame's buffer instead of copied into a new one (replies are up to
/// 16 MB: a fresh buffer a reply costs the kernel's zeroing of its pages).
fn raw_body_owned(mut frame: Vec<u8>, range: std::ops::Range<usize>) -> Result<RawDocumentBuf, NetError> {
    frame.truncate(range.end);
    frame.drain(..range.start);
    RawDocumentBuf::from_bytes(frame).map_err(|err| NetError::Protocol(err.to_string()))
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

    /// Frames split across reads and sharing reads come out whole and in
    /// order, the big one read into one buffer.
    #[tokio::test]
    async fn frames_are_read_whole_whatever_the_reads_split() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let big = doc! {"cursor": {"id": 0_i64, "nextBatch": [{"pad": "x".repeat(3_000_000)}]}, "ok": 1.0};
        let frames = [
            encode_op_msg(1, 1, 0, &big, &[]).unwrap(),
            encode_op_msg(2, 2, 0, &doc! {"ok": 1.0, "n": 2}, &[]).unwrap(),
            encode_op_msg(3, 3, 0, &doc! {"ok": 1.0, "n": 3}, &[]).unwrap(),
        ];
        let bytes: Vec<u8> = frames.concat();
        let first_len = frames[0].len();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            // Cuts inside a header, inside a body, and across frames.
            let cuts = [2, 70_000, first_len + 5, bytes.len()];
            let mut from = 0;
            for cut in cuts {
                socket.write_all(&bytes[from..cut]).await.unwrap();
                socket.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                from = cut;
            }
        });
        let mut connection = Connection {
            me: "test".into(),
            stream: TcpStream::connect(address).await.unwrap(),
            buffer: Vec::new(),
            next_request_id: 1,
        };
        for expected in &frames {
            assert_eq!(&connection.read_frame().await.unwrap(), expected);
        }
        server.await.unwrap();
        assert!(matches!(connection.read_frame().await, Err(NetError::Unreachable(_))));
        let frame = encode_op_msg(4, 4, 0, &big, &[]).unwrap();
        let range = raw_body_range(&frame).unwrap();
        let owned = raw_body_owned(frame, range).unwrap();
        assert_eq!(Document::try_from(owned.as_ref()).unwrap(), big);
    }

    /// A one-way command leaves with moreToCome set and waits for no
    /// reply; an idle connection reads as open until the other side
    /// closes it.
    #[tokio::test]
    async fn a_one_way_command_waits_for_nothing_and_a_closed_idle_connection_is_noticed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buffer = Vec::new();
            let length = loop {
                if let Ok(length) = check_frame(&buffer) {
                    break length;
                }
                assert!(socket.read_buf(&mut buffer).await.unwrap() > 0, "closed before a whole frame");
            };
            let frame = buffer[..length].to_vec();
            // Nothing is answered; the socket closes when told to.
            closed.await.unwrap();
            frame
        });
        let mut connection = Connection {
            me: "test".into(),
            stream: TcpStream::connect(address).await.unwrap(),
            buffer: Vec::new(),
            next_request_id: 1,
        };
        connection
            .send_one_way("admin", doc! {"replSetUpdatePosition": 1, "optimes": []})
            .await
            .unwrap();
        assert!(connection.idle_and_open());
        close.send(()).unwrap();
        let frame = server.await.unwrap();
        let Message::Msg(msg) = parse_message(&frame).unwrap() else { panic!("not OP_MSG") };
        assert!(msg.more_to_come());
        assert_eq!(msg.body.get_str("$db").unwrap(), "admin");
        assert!(msg.body.contains_key("replSetUpdatePosition"));
        // The close reaches this side a moment later.
        let mut open = true;
        for _ in 0..100 {
            open = connection.idle_and_open();
            if !open {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(!open, "a connection the other side closed still reads as open");
    }

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
