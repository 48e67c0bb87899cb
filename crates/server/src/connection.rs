//! One client connection: read whole frames (never parsing a partial one),
//! turn each into a `CommandRequest`, dispatch it, and write the reply in
//! the encoding the request came in (OP_MSG, or OP_REPLY for a legacy
//! OP_QUERY). A malformed but delimited message gets an error reply; a
//! stream that can no longer be framed is closed. A panic in a command is
//! caught and answered with InternalError, so one bad request never
//! affects another connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use bson::{doc, Bson, Document};
use serde_json::json;
use slipstream_wire::{
    check_frame, compress_message, decompress_message, encode_op_msg, encode_op_reply, opcode, parse_message,
    query_flags, reply_flags, Compressor, Message, MsgHeader, OpMsg, OpQuery, WireError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admission::Admitted;
use crate::commands::{CommandContext, CommandRequest};
use crate::error::CommandError;
use crate::operation::execute;
use crate::state::ServerState;

/// Bytes reserved for reading when the buffer is full and no frame length
/// is known yet.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Request ids of this node's replies (unique per process).
static NEXT_REQUEST_ID: AtomicI32 = AtomicI32::new(1);

fn next_request_id() -> i32 {
    NEXT_REQUEST_ID.fetch_add(1, Ordering::Relaxed)
}

pub async fn run(state: Arc<ServerState>, mut stream: TcpStream, peer: SocketAddr, connection_id: i64) {
    let log_ctx = format!("conn{connection_id}");
    state.metrics.connection_opened();
    state.log.info(
        "NETWORK",
        22943,
        &log_ctx,
        "Connection accepted",
        json!({"remote": peer.to_string(), "connectionId": connection_id, "connectionCount": state.metrics.connections_current()}),
    );
    let _ = stream.set_nodelay(true);
    let ctx = CommandContext::new(state.clone(), connection_id, peer.to_string());
    let end = serve_connection(&ctx, &mut stream).await;
    state.metrics.connection_closed();
    state.log.info(
        "NETWORK",
        22944,
        &log_ctx,
        "Connection ended",
        json!({"remote": peer.to_string(), "connectionId": connection_id, "reason": end, "connectionCount": state.metrics.connections_current()}),
    );
}

/// Serves requests until the peer closes, the stream cannot be framed, or
/// the node shuts down; returns why it ended.
async fn serve_connection(ctx: &CommandContext, stream: &mut TcpStream) -> String {
    let state = &ctx.state;
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_CHUNK_BYTES);
    // The request budget held for the frame at the buffer's start, from
    // when its length is known until its reply is written.
    let mut admitted: Option<Option<Admitted>> = None;
    loop {
        if is_member_blocked(ctx) {
            return MEMBER_BLOCKED.into();
        }
        match check_frame(&buffer) {
            Ok(length) => {
                if let Err(end) = admit_frame(ctx, &mut admitted, length).await {
                    return end;
                }
                state.metrics.count_request(length as u64);
                let outcome = tokio::select! {
                    outcome = handle_frame(ctx, &buffer[..length]) => outcome,
                    _ = member_blocked(ctx) => return MEMBER_BLOCKED.into(),
                };
                buffer.drain(..length);
                if is_member_blocked(ctx) {
                    // The handshake that named the member, or a command
                    // that ran while it was blocked: no reply leaves.
                    return MEMBER_BLOCKED.into();
                }
                let written = match outcome {
                    Outcome::NoReply => Ok(()),
                    Outcome::Reply(bytes) => write_reply(ctx, stream, &bytes).await,
                    Outcome::Exhaust { request, response_to, compressor } => {
                        stream_exhaust(ctx, stream, &request, response_to, compressor).await
                    }
                    Outcome::Close(reason) => return reason.into(),
                };
                if let Err(err) = written {
                    return format!("write failed: {err}");
                }
                admitted = None;
            }
            Err(WireError::Incomplete) => {
                // Admitted before the buffer grows for the frame's body.
                if let Some(declared) = declared_frame_length(&buffer) {
                    if let Err(end) = admit_frame(ctx, &mut admitted, declared).await {
                        return end;
                    }
                }
                reserve_for_frame(&mut buffer);
                let charged = matches!(admitted, Some(Some(_)));
                let read = tokio::select! {
                    read = stream.read_buf(&mut buffer) => read,
                    _ = stalled_while_charged(charged) => {
                        return format!("closed: no byte of a charged message for {ADMITTED_FRAME_IDLE_MS} ms");
                    }
                    _ = state.shutdown.wait() => return "shutting down".into(),
                    _ = member_blocked(ctx) => return MEMBER_BLOCKED.into(),
                };
                match read {
                    Ok(0) => return "end of stream".into(),
                    Ok(_) => {}
                    Err(err) => return format!("read failed: {err}"),
                }
            }
            Err(err) => {
                // The length prefix is out of bounds: the stream cannot be
                // re-synchronised, so the connection is closed.
                return format!("unframeable input: {err}");
            }
        }
    }
}

/// Waits for the request budget of the frame at the buffer's start
/// (`admission.rs`) unless it already has it; `Err` says why the
/// connection ends instead (shutdown, a blocked member).
async fn admit_frame(
    ctx: &CommandContext,
    admitted: &mut Option<Option<Admitted>>,
    frame_bytes: usize,
) -> Result<(), String> {
    if admitted.is_some() {
        return Ok(());
    }
    let admission = ctx.state.admission.clone();
    let held = tokio::select! {
        held = admission.admit(frame_bytes as u64) => held,
        _ = ctx.state.shutdown.wait() => return Err("shutting down".into()),
        _ = member_blocked(ctx) => return Err(MEMBER_BLOCKED.into()),
    };
    *admitted = Some(held);
    Ok(())
}

/// How long a connection whose unfinished message holds request budget may
/// send nothing before it is closed. Without it a client that declares a
/// large message and stops sending holds that budget for as long as it
/// keeps the connection open, and every other large request waits behind
/// it (a few such clients hold all of it). A driver writes a message
/// whole; ten seconds without one byte of it is a dead or hostile peer.
const ADMITTED_FRAME_IDLE_MS: u64 = 10_000;

/// Resolves after `ADMITTED_FRAME_IDLE_MS` when the frame being read holds
/// request budget; never otherwise (an idle connection between messages
/// holds none and may wait as long as it likes).
async fn stalled_while_charged(charged: bool) {
    if charged {
        tokio::time::sleep(std::time::Duration::from_millis(ADMITTED_FRAME_IDLE_MS)).await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// The length the frame at the buffer's start declares, once its prefix is
/// in (`check_frame` has bounded it).
fn declared_frame_length(buffer: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buffer.get(..4)?.try_into().ok()?;
    Some(i32::from_le_bytes(prefix).max(0) as usize)
}

/// Why a connection from a blocked member ends.
const MEMBER_BLOCKED: &str = "closed: its member is blocked by the blockMembers fail point";

/// Whether this connection comes from a member the `blockMembers` fault
/// hook blocks (never true for a driver's connection).
fn is_member_blocked(ctx: &CommandContext) -> bool {
    let member = ctx.member.lock();
    member.as_deref().is_some_and(|host| ctx.state.member_blocklist.is_blocked(host))
}

/// Resolves once this connection's member is blocked; never for a
/// connection that named no member. The command it races is dropped then:
/// commands run by members (replication commands, oplog reads) must be
/// cancel-safe.
async fn member_blocked(ctx: &CommandContext) {
    let member = ctx.member.lock().clone();
    match member {
        Some(host) => ctx.state.member_blocklist.wait_until_blocked(&host).await,
        None => std::future::pending().await,
    }
}

/// Buffers above this capacity are shrunk back once drained, so that one
/// large message does not pin memory for the connection's lifetime.
const READ_BUFFER_KEEP_BYTES: usize = 1024 * 1024;

/// Makes room for the rest of the frame whose length is known (already
/// bounded by `check_frame`), and for at least one more chunk.
fn reserve_for_frame(buffer: &mut Vec<u8>) {
    if buffer.is_empty() && buffer.capacity() > READ_BUFFER_KEEP_BYTES {
        buffer.shrink_to(READ_CHUNK_BYTES);
    }
    let remaining = declared_frame_length(buffer).map_or(0, |declared| declared.saturating_sub(buffer.len()));
    buffer.reserve(remaining.max(READ_CHUNK_BYTES));
}

/// What to send back for one request.
enum Outcome {
    /// moreToCome on the request: the client expects nothing.
    NoReply,
    Reply(Vec<u8>),
    /// An exhaust stream: the request is run again after each reply until
    /// it says there is no more (see `stream_exhaust`).
    Exhaust {
        request: CommandRequest,
        response_to: i32,
        /// The request came compressed: so does every reply of the stream.
        compressor: Option<Compressor>,
    },
    /// Close the connection without a reply, for this reason (a fail
    /// point asked for it; a `w: 0` write reached a member not primary).
    Close(&'static str),
}

async fn write_reply(ctx: &CommandContext, stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes).await?;
    ctx.state.metrics.count_bytes_out(bytes.len() as u64);
    Ok(())
}

/// Whether a request may be answered with an exhaust stream: `getMore`
/// (an exhaust cursor) and the monitoring `hello` (topologyVersion plus
/// maxAwaitTimeMS), when the client set exhaustAllowed.
fn is_exhaustible(request: &CommandRequest) -> bool {
    match request.name.as_str() {
        "getMore" => true,
        "hello" | "isMaster" | "ismaster" => {
            request.body.contains_key("topologyVersion") && request.body.contains_key("maxAwaitTimeMS")
        }
        _ => false,
    }
}

/// Whether a successful exhaust reply lets the stream go on: a cursor with
/// more to read, or a monitoring `hello` (each round waits maxAwaitTimeMS
/// in the handler).
fn stream_continues(request: &CommandRequest, reply: &Document) -> bool {
    if reply.get_f64("ok").ok() != Some(1.0) {
        return false;
    }
    if request.name == "getMore" {
        return reply.get_document("cursor").ok().and_then(|cursor| cursor.get_i64("id").ok()).is_some_and(|id| id != 0);
    }
    true
}

/// Streams replies with the moreToCome flag, each answering the previous
/// one (its responseTo is the previous reply's requestId), until a reply
/// ends the stream, the node shuts down, or the client goes away.
async fn stream_exhaust(
    ctx: &CommandContext,
    stream: &mut TcpStream,
    request: &CommandRequest,
    first_request_id: i32,
    compressor: Option<Compressor>,
) -> std::io::Result<()> {
    let mut response_to = first_request_id;
    let mut request = request.clone();
    loop {
        let executed = tokio::select! {
            executed = execute(ctx, &request) => executed,
            _ = member_blocked(ctx) => None,
        };
        let Some(reply) = executed.filter(|_| !is_member_blocked(ctx)) else {
            return Err(std::io::Error::other("closed by a fail point"));
        };
        let more = stream_continues(&request, &reply) && !ctx.state.shutdown.is_triggered();
        let request_id = next_request_id();
        let flags = if more { slipstream_wire::msg_flags::MORE_TO_COME } else { 0 };
        let Ok(bytes) = encode_op_msg(request_id, response_to, flags, &reply, &[]) else {
            // Too large to encode: end the stream with the error.
            let error = compressed(ctx, encode_msg_reply(response_to, &reply), compressor);
            return write_reply(ctx, stream, &error).await;
        };
        write_reply(ctx, stream, &compressed(ctx, bytes, compressor)).await?;
        if !more {
            return Ok(());
        }
        response_to = request_id;
        next_monitoring_round(&mut request, &reply);
    }
}

/// The next round of a monitoring `hello` stream waits for a change past
/// the `topologyVersion` just sent, as MongoDB's exhaust `hello` does.
/// Against the client's first one every round after the first change would
/// answer at once: a busy loop that filled the socket with replies the
/// driver read seconds late, so it kept a deposed primary as primary and
/// missed members added meanwhile (the Jepsen soak's long stretches of
/// NotWritablePrimary after a stepdown).
fn next_monitoring_round(request: &mut CommandRequest, reply: &Document) {
    if request.name == "getMore" {
        return;
    }
    if let Ok(version) = reply.get_document("topologyVersion") {
        request.body.insert("topologyVersion", version.clone());
    }
}

/// Answers one whole frame, opening it first if it is compressed; the
/// reply to a compressed request is compressed with the same compressor,
/// as MongoDB does.
async fn handle_frame(ctx: &CommandContext, frame: &[u8]) -> Outcome {
    let Ok(header) = MsgHeader::parse(frame) else { return Outcome::NoReply };
    if header.op_code != opcode::OP_COMPRESSED {
        return handle_message(ctx, header, frame, None).await;
    }
    match decompress_message(frame) {
        Ok(opened) => {
            let restored = opened.message.len() as u64;
            ctx.state.metrics.count_decompressed(opened.compressor.id(), frame.len() as u64, restored);
            let compressor = Some(opened.compressor);
            // The inner header: its opcode decides how an error is answered.
            let Ok(inner) = MsgHeader::parse(&opened.message) else { return Outcome::NoReply };
            match handle_message(ctx, inner, &opened.message, compressor).await {
                Outcome::Reply(bytes) => Outcome::Reply(compressed(ctx, bytes, compressor)),
                other => other,
            }
        }
        Err(err) => handle_malformed(ctx, header, err),
    }
}

/// `reply` wrapped in OP_COMPRESSED when the request came compressed. A
/// reply the compressor cannot wrap (only one near the size limit) goes
/// out uncompressed, which every driver reads.
fn compressed(ctx: &CommandContext, reply: Vec<u8>, compressor: Option<Compressor>) -> Vec<u8> {
    let Some(compressor) = compressor else { return reply };
    match compress_message(&reply, compressor) {
        Ok(bytes) => {
            ctx.state.metrics.count_compressed(compressor.id(), reply.len() as u64, bytes.len() as u64);
            bytes
        }
        Err(_) => reply,
    }
}

/// Answers one uncompressed message (`compressor`: how it came).
async fn handle_message(ctx: &CommandContext, header: MsgHeader, frame: &[u8], compressor: Option<Compressor>) -> Outcome {
    match parse_message(frame) {
        Ok(Message::Msg(msg)) => handle_op_msg(ctx, msg, compressor).await,
        Ok(Message::Query(query)) => match handle_op_query(ctx, query).await {
            Some(bytes) => Outcome::Reply(bytes),
            None => Outcome::Close(CLOSED_BY_FAIL_POINT),
        },
        Ok(Message::Reply(_)) => {
            let error = CommandError::new(40413, "OP_REPLY is a server-to-client message");
            Outcome::Reply(encode_msg_reply(header.request_id, &error.to_reply()))
        }
        Err(err) => handle_malformed(ctx, header, err),
    }
}

/// The error reply to a message that could not be opened or parsed.
fn handle_malformed(ctx: &CommandContext, header: MsgHeader, err: WireError) -> Outcome {
    ctx.state.log.warning(
        "NETWORK",
        4915701,
        &format!("conn{}", ctx.connection_id),
        "malformed message",
        json!({"error": err.to_string(), "opCode": header.op_code}),
    );
    let reply = CommandError::from(err).to_reply();
    if header.op_code == opcode::OP_QUERY {
        Outcome::Reply(encode_legacy_reply(header.request_id, reply_flags::QUERY_FAILURE, &legacy_failure(&reply)))
    } else {
        Outcome::Reply(encode_msg_reply(header.request_id, &reply))
    }
}

async fn handle_op_msg(ctx: &CommandContext, msg: OpMsg, compressor: Option<Compressor>) -> Outcome {
    let request_id = msg.header.request_id;
    let more_to_come = msg.more_to_come();
    let exhaust_allowed = msg.exhaust_allowed();
    let reply = match msg.into_command_body().map_err(CommandError::from).and_then(request_from_op_msg) {
        Ok(request) if exhaust_allowed && !more_to_come && is_exhaustible(&request) => {
            return Outcome::Exhaust { request, response_to: request_id, compressor };
        }
        Ok(request) => match execute(ctx, &request).await {
            Some(mut reply) => {
                negotiate_compression(&request, &mut reply);
                reply
            }
            None => return Outcome::Close(CLOSED_BY_FAIL_POINT),
        },
        Err(error) => error.to_reply(),
    };
    if more_to_come {
        // The client asked for no reply (e.g. `endSessions` with w: 0). A
        // write refused for not being primary closes the connection, as
        // MongoDB does: the only way to tell a `w: 0` client to look for
        // the primary, instead of losing its writes in silence.
        if reply.get_i32("code").is_ok_and(crate::error::is_not_primary_error) {
            ctx.state.metrics.not_primary_unacknowledged_write();
            return Outcome::Close("closed: an unacknowledged write reached a member that is not primary");
        }
        return Outcome::NoReply;
    }
    Outcome::Reply(encode_msg_reply(request_id, &reply))
}

const CLOSED_BY_FAIL_POINT: &str = "closed by the failCommand fail point";

/// The OP_REPLY bytes, or `None` to close the connection.
async fn handle_op_query(ctx: &CommandContext, query: OpQuery) -> Option<Vec<u8>> {
    let request_id = query.header.request_id;
    match request_from_op_query(query) {
        Ok(request) => {
            let mut reply = execute(ctx, &request).await?;
            negotiate_compression(&request, &mut reply);
            Some(encode_legacy_reply(request_id, 0, &reply))
        }
        Err(error) => Some(encode_legacy_reply(request_id, reply_flags::QUERY_FAILURE, &legacy_failure(&error.to_reply()))),
    }
}

/// Answers a handshake's `compression` list with the compressors of it
/// this node offers, in the client's order (the client uses the first);
/// an empty list when none is shared. Only a successful handshake
/// negotiates.
fn negotiate_compression(request: &CommandRequest, reply: &mut Document) {
    if !matches!(request.name.as_str(), "hello" | "isMaster" | "ismaster") || reply.get_f64("ok").ok() != Some(1.0) {
        return;
    }
    let Ok(asked) = request.body.get_array("compression") else { return };
    let mut chosen: Vec<Bson> = Vec::new();
    for compressor in asked.iter().filter_map(|name| name.as_str()).filter_map(Compressor::offered) {
        let name = Bson::String(compressor.name().into());
        if !chosen.contains(&name) {
            chosen.push(name);
        }
    }
    reply.insert("compression", chosen);
}

/// A legacy query failure document: `$err` plus the usual error fields.
fn legacy_failure(reply: &Document) -> Document {
    let mut failure = doc! { "$err": reply.get_str("errmsg").unwrap_or("query failure") };
    for (key, value) in reply {
        failure.insert(key.clone(), value.clone());
    }
    failure
}

/// Builds the command of an OP_MSG body (document sequences already merged).
pub fn request_from_op_msg(body: Document) -> Result<CommandRequest, CommandError> {
    let name = command_name(&body)?;
    let db = match body.get("$db") {
        Some(Bson::String(db)) if !db.is_empty() => db.clone(),
        Some(Bson::String(_)) => return Err(CommandError::new(73, "Invalid database name: ''")),
        Some(_) => return Err(CommandError::type_mismatch("$db must be a string")),
        None => return Err(CommandError::new(40571, "OP_MSG requests require a $db argument")),
    };
    let secondary_ok = read_preference_allows_secondary(body.get("$readPreference"))?;
    Ok(CommandRequest { db, name, body, secondary_ok })
}

/// Whether a `$readPreference` lets a secondary answer: any mode but
/// `primary`. The document is checked as MongoDB 7.0's
/// `ReadPreferenceSetting::fromInnerBSON` checks it on every request
/// (drivers check it too, raw clients and tools do not).
fn read_preference_allows_secondary(preference: Option<&Bson>) -> Result<bool, CommandError> {
    let Some(preference) = preference else {
        return Ok(false);
    };
    let Bson::Document(preference) = preference else {
        return Err(CommandError::type_mismatch(format!(
            "$readPreference has incorrect type: expected object but got {}",
            crate::exec::args::type_name(preference)
        )));
    };
    let mode = match preference.get("mode") {
        Some(Bson::String(mode)) => mode.as_str(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "\"mode\" had the wrong type. Expected string, found {}",
                crate::exec::args::type_name(other)
            )))
        }
        None => return Err(CommandError::new(4, "Missing expected field \"mode\"")),
    };
    let primary = match mode {
        "primary" => true,
        "primaryPreferred" | "secondary" | "secondaryPreferred" | "nearest" => false,
        other => {
            return Err(CommandError::bad_value(format!(
                "Could not parse $readPreference mode '{other}'. Only the modes 'primary', 'primaryPreferred', \
                 'secondary', 'secondaryPreferred', and 'nearest' are supported."
            )))
        }
    };
    match preference.get("hedge") {
        None => {}
        Some(Bson::Document(hedge)) => {
            let enabled = match hedge.get("enabled") {
                None => true,
                Some(Bson::Boolean(enabled)) => *enabled,
                Some(_) => return Err(CommandError::type_mismatch("hedge.enabled must be a boolean")),
            };
            if enabled && primary {
                return Err(CommandError::new(72, "cannot enable hedging for $readPreference mode \"primaryOnly\""));
            }
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "hedge field must be of type object if provided; found {other}"
            )))
        }
    }
    match preference.get("tags") {
        None => {}
        Some(Bson::Array(tags)) => {
            let wildcard = tags.is_empty() || (tags.len() == 1 && matches!(&tags[0], Bson::Document(d) if d.is_empty()));
            if primary && !wildcard {
                return Err(CommandError::bad_value("Only empty tags are allowed with primary read preference"));
            }
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "\"tags\" had the wrong type. Expected array, found {}",
                crate::exec::args::type_name(other)
            )))
        }
    }
    let staleness = match preference.get("maxStalenessSeconds") {
        None => 0,
        Some(value @ (Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_))) => {
            match crate::exec::args::exact_integer(value) {
                Some(seconds) => seconds,
                None => {
                    return Err(CommandError::bad_value(format!(
                        "Expected field \"maxStalenessSeconds\" to have a value exactly representable as a 64-bit \
                         integer, but found {value}"
                    )))
                }
            }
        }
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "\"maxStalenessSeconds\" had the wrong type. Expected number, found {}",
                crate::exec::args::type_name(other)
            )))
        }
    };
    if staleness < 0 {
        return Err(CommandError::bad_value("maxStalenessSeconds must be a non-negative integer"));
    }
    if staleness != 0 && staleness < MAX_STALENESS_SECONDS_MIN {
        return Err(CommandError::new(
            160,
            format!("maxStalenessSeconds value can not be less than {MAX_STALENESS_SECONDS_MIN}"),
        ));
    }
    if staleness != 0 && primary {
        return Err(CommandError::bad_value("maxStalenessSeconds can not be set for the primary mode"));
    }
    Ok(!primary)
}

/// The smallest `maxStalenessSeconds` (MongoDB's `kMinimalMaxStalenessValue`).
const MAX_STALENESS_SECONDS_MIN: i64 = 90;

/// Builds the command of a legacy OP_QUERY on `<db>.$cmd`, unwrapping the
/// `{$query: ...}` / `{query: ...}` form old drivers use with a read
/// preference. Any other namespace is refused: legacy queries on
/// collections were removed from MongoDB (5.1).
pub fn request_from_op_query(query: OpQuery) -> Result<CommandRequest, CommandError> {
    let secondary_ok_flag = query.flags & query_flags::SECONDARY_OK != 0;
    let Some(db) = query.full_collection_name.strip_suffix(".$cmd") else {
        return Err(CommandError::new(
            352,
            format!("Unsupported OP_QUERY on '{}': legacy queries are only accepted on <db>.$cmd", query.full_collection_name),
        ));
    };
    if db.is_empty() || db.contains('.') {
        return Err(CommandError::new(73, format!("Invalid database name: '{db}'")));
    }
    let mut body = query.query;
    let wrapped = match body.iter().next() {
        Some((key, Bson::Document(inner))) if key == "$query" || key == "query" => Some(inner.clone()),
        _ => None,
    };
    // The wrapped form carries the read preference beside the command.
    let secondary_ok = secondary_ok_flag || read_preference_allows_secondary(body.get("$readPreference"))?;
    if let Some(inner) = wrapped {
        body = inner;
    }
    let name = command_name(&body)?;
    // MongoDB 6.0+ answers only the handshake (and a few commands old
    // drivers still send) over OP_QUERY.
    if !OP_QUERY_COMMANDS.contains(&name.as_str()) {
        return Err(CommandError::new(
            352,
            format!(
                "Unsupported OP_QUERY command: {name}. The client driver may require an upgrade. For more details see \
                 https://dochub.mongodb.org/core/legacy-opcode-removal"
            ),
        ));
    }
    body.insert("$db", db);
    Ok(CommandRequest { db: db.to_owned(), name, body, secondary_ok })
}

/// The commands MongoDB 7.0 still runs from an OP_QUERY
/// (`checkAllowedOpQueryCommand`): the handshake, and what old drivers
/// send around it.
const OP_QUERY_COMMANDS: &[&str] = &[
    "hello", "isMaster", "ismaster", "_isSelf", "authenticate", "buildinfo", "buildInfo", "saslContinue", "saslStart",
];

fn command_name(body: &Document) -> Result<String, CommandError> {
    match body.keys().next() {
        Some(name) => Ok(name.clone()),
        None => Err(CommandError::new(9, "the command document is empty")),
    }
}

fn encode_msg_reply(response_to: i32, reply: &Document) -> Vec<u8> {
    encode_op_msg(next_request_id(), response_to, 0, reply, &[]).unwrap_or_else(|err| {
        // The reply itself broke a limit (e.g. over 48 MB): answer that.
        let error = CommandError::new(10334, format!("reply could not be encoded: {err}")).to_reply();
        encode_op_msg(next_request_id(), response_to, 0, &error, &[]).expect("a small error reply encodes")
    })
}

fn encode_legacy_reply(response_to: i32, flags: i32, reply: &Document) -> Vec<u8> {
    let flags = flags | reply_flags::AWAIT_CAPABLE;
    encode_op_reply(next_request_id(), response_to, flags, 0, std::slice::from_ref(reply)).unwrap_or_else(|err| {
        let error = legacy_failure(&CommandError::new(10334, format!("reply could not be encoded: {err}")).to_reply());
        encode_op_reply(next_request_id(), response_to, reply_flags::QUERY_FAILURE, 0, &[error])
            .expect("a small error reply encodes")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_msg_requires_db_and_a_command() {
        assert_eq!(request_from_op_msg(doc! {"ping": 1}).unwrap_err().code, 40571);
        assert_eq!(request_from_op_msg(Document::new()).unwrap_err().code, 9);
        let request = request_from_op_msg(doc! {"ping": 1, "$db": "admin"}).unwrap();
        assert_eq!((request.db.as_str(), request.name.as_str()), ("admin", "ping"));
    }

    #[test]
    fn legacy_queries_only_on_cmd_namespaces() {
        let header = MsgHeader { message_length: 0, request_id: 1, response_to: 0, op_code: opcode::OP_QUERY };
        let query = |ns: &str, body: Document| OpQuery {
            header,
            flags: 0,
            full_collection_name: ns.into(),
            number_to_skip: 0,
            number_to_return: -1,
            query: body,
            return_fields_selector: None,
        };
        let request = request_from_op_query(query("admin.$cmd", doc! {"isMaster": 1})).unwrap();
        assert_eq!(request.name, "isMaster");
        assert_eq!(request.body.get_str("$db").unwrap(), "admin");
        let wrapped = request_from_op_query(query(
            "test.$cmd",
            doc! {"$query": {"isMaster": 1}, "$readPreference": {"mode": "primary"}},
        ))
        .unwrap();
        assert_eq!((wrapped.db.as_str(), wrapped.name.as_str()), ("test", "isMaster"));
        assert_eq!(request_from_op_query(query("test.coll", doc! {"a": 1})).unwrap_err().code, 352);
        assert!(!wrapped.secondary_ok);
        let preferring_secondaries =
            doc! {"$query": {"hello": 1}, "$readPreference": {"mode": "secondaryPreferred"}};
        assert!(request_from_op_query(query("test.$cmd", preferring_secondaries)).unwrap().secondary_ok);
        let mut flagged = query("test.$cmd", doc! {"buildInfo": 1});
        flagged.flags = query_flags::SECONDARY_OK;
        assert!(request_from_op_query(flagged).unwrap().secondary_ok);
        // Every other command is MongoDB 6.0+'s 352 over OP_QUERY.
        for command in [doc! {"ping": 1}, doc! {"insert": "c", "documents": [{}]}, doc! {"find": "c"}] {
            assert_eq!(request_from_op_query(query("test.$cmd", command)).unwrap_err().code, 352);
        }
    }

    #[test]
    fn secondary_ok_follows_the_read_preference_mode() {
        let with = |preference: Bson| request_from_op_msg(doc! {"find": "c", "$db": "d", "$readPreference": preference});
        assert!(!request_from_op_msg(doc! {"find": "c", "$db": "d"}).unwrap().secondary_ok);
        assert!(!with(Bson::Document(doc! {"mode": "primary"})).unwrap().secondary_ok);
        for mode in ["primaryPreferred", "secondary", "secondaryPreferred", "nearest"] {
            assert!(with(Bson::Document(doc! {"mode": mode})).unwrap().secondary_ok, "{mode}");
        }
        assert_eq!(with(Bson::Document(doc! {"mode": "sideways"})).unwrap_err().code, 2);
        assert_eq!(with(Bson::Int32(1)).unwrap_err().code, 14);
    }

    #[test]
    fn read_preferences_are_checked_as_mongodb_checks_them() {
        let code = |preference: Document| {
            request_from_op_msg(doc! {"find": "c", "$db": "d", "$readPreference": preference}).err().map(|e| e.code)
        };
        assert_eq!(code(doc! {}), Some(4));
        assert_eq!(code(doc! {"mode": 1}), Some(14));
        assert_eq!(code(doc! {"mode": "secondary", "maxStalenessSeconds": 10}), Some(160));
        assert_eq!(code(doc! {"mode": "secondary", "maxStalenessSeconds": -1}), Some(2));
        assert_eq!(code(doc! {"mode": "secondary", "maxStalenessSeconds": "x"}), Some(14));
        assert_eq!(code(doc! {"mode": "secondary", "maxStalenessSeconds": 90.5}), Some(2));
        assert_eq!(code(doc! {"mode": "secondary", "maxStalenessSeconds": 90}), None);
        assert_eq!(code(doc! {"mode": "nearest", "maxStalenessSeconds": -1_i64, "tags": [{"dc": "a"}]}), Some(2));
        assert_eq!(code(doc! {"mode": "primary", "maxStalenessSeconds": 120}), Some(2));
        assert_eq!(code(doc! {"mode": "primary", "tags": [{"dc": "a"}]}), Some(2));
        assert_eq!(code(doc! {"mode": "primary", "tags": [{}]}), None);
        assert_eq!(code(doc! {"mode": "secondary", "tags": {"dc": "a"}}), Some(14));
        assert_eq!(code(doc! {"mode": "primary", "hedge": {"enabled": true}}), Some(72));
        assert_eq!(code(doc! {"mode": "primary", "hedge": {"enabled": false}}), None);
        assert_eq!(code(doc! {"mode": "nearest", "hedge": 1}), Some(14));
    }
}
