//! `hello` / `isMaster` / `ismaster`: the handshake every driver opens a
//! connection with, and the command its monitor repeats.
//!
//! A monitor that sends `{hello, topologyVersion, maxAwaitTimeMS}` is
//! answered after the wait, unless the topology changed or the node shuts
//! down first. With the exhaustAllowed flag the connection layer turns
//! this into a stream: it re-runs the command after each reply and flags
//! every reply moreToCome (`connection::stream_exhaust`).

use std::time::Duration;

use bson::{doc, Bson, DateTime, Document};
use slipstream_storage::OpTime;
use slipstream_storage::TimestampBson;
use slipstream_wire::{MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;

pub const MIN_WIRE_VERSION: i32 = 0;
/// MongoDB 7.0.
pub const MAX_WIRE_VERSION: i32 = 21;
pub const MAX_WRITE_BATCH_SIZE: i32 = 100_000;
pub const LOGICAL_SESSION_TIMEOUT_MINUTES: i32 = 30;
/// The longest a streaming `hello` waits, whatever the client asks.
pub const MAX_AWAIT_TIME_MS_LIMIT: u64 = 60_000;

pub async fn hello(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let await_ms = awaitable_wait_ms(ctx, &req.body)?;
    if let Some(wait_ms) = await_ms {
        // The topology of a standalone never changes, so the wait only ends
        // early when the node shuts down.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            _ = ctx.state.shutdown.wait() => {}
        }
    }
    let state = &ctx.state;
    let legacy = req.name != "hello";
    let mut reply = Document::new();
    if legacy {
        reply.insert("ismaster", true);
    } else {
        reply.insert("isWritablePrimary", true);
    }
    if req.body.contains_key("helloOk") {
        reply.insert("helloOk", true);
    }
    reply.insert(
        "topologyVersion",
        doc! {"processId": state.process_id, "counter": Bson::Int64(state.topology_counter)},
    );
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE_BYTES as i32);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES as i32);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE);
    reply.insert("localTime", DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", LOGICAL_SESSION_TIMEOUT_MINUTES);
    reply.insert("connectionId", ctx.connection_id);
    reply.insert("minWireVersion", MIN_WIRE_VERSION);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    reply.insert("lastWrite", last_write(state.engine.last_applied(), state.engine.last_durable()));
    Ok(reply)
}

/// `lastWrite`: on a standalone every durable write is majority-committed,
/// so the majority fields follow the durable position.
fn last_write(applied: OpTime, durable: OpTime) -> Document {
    let op_time = |op: OpTime| doc! {"ts": op.ts.to_bson(), "t": op.term};
    let date = |op: OpTime| DateTime::from_millis(i64::from(op.ts.secs) * 1000);
    doc! {
        "opTime": op_time(applied),
        "lastWriteDate": date(applied),
        "majorityOpTime": op_time(durable),
        "majorityWriteDate": date(durable),
    }
}

/// How long to wait before answering a monitoring `hello`: `Some` only when
/// the client's `topologyVersion` is this process's current one (a
/// different processId or an older counter is answered at once).
fn awaitable_wait_ms(ctx: &CommandContext, body: &Document) -> Result<Option<u64>, CommandError> {
    let max_await = body.get("maxAwaitTimeMS");
    let topology = body.get("topologyVersion");
    let (max_await, topology) = match (max_await, topology) {
        (None, None) => return Ok(None),
        (Some(max_await), Some(Bson::Document(topology))) => (max_await, topology),
        (Some(_), None) | (None, Some(_)) => {
            return Err(CommandError::bad_value("topologyVersion must be sent together with maxAwaitTimeMS"))
        }
        (Some(_), Some(_)) => return Err(CommandError::type_mismatch("topologyVersion must be a document")),
    };
    let wait_ms = match max_await {
        Bson::Int32(ms) if *ms >= 0 => *ms as u64,
        Bson::Int64(ms) if *ms >= 0 => *ms as u64,
        Bson::Double(ms) if *ms >= 0.0 && ms.fract() == 0.0 => *ms as u64,
        _ => return Err(CommandError::bad_value("maxAwaitTimeMS must be a non-negative integer")),
    };
    let same_process = topology.get_object_id("processId").ok() == Some(ctx.state.process_id);
    let counter = match topology.get("counter") {
        Some(Bson::Int64(counter)) => *counter,
        Some(Bson::Int32(counter)) => i64::from(*counter),
        _ => return Err(CommandError::type_mismatch("topologyVersion.counter must be an integer")),
    };
    if !same_process || counter < ctx.state.topology_counter {
        return Ok(None);
    }
    Ok(Some(wait_ms.min(MAX_AWAIT_TIME_MS_LIMIT)))
}
