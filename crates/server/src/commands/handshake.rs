//! `hello` / `isMaster` / `ismaster`: the handshake every driver opens a
//! connection with, and the command its monitor repeats.
//!
//! The topology's fields (`isWritablePrimary`, `setName`, `hosts`,
//! `lastWrite`, ...) and `topologyVersion.counter` come from the topology
//! handle. A monitor that sends `{hello, topologyVersion, maxAwaitTimeMS}`
//! is answered after the wait, unless the topology changes or the node
//! shuts down first. With the exhaustAllowed flag the connection layer turns
//! this into a stream: it re-runs the command after each reply and flags
//! every reply moreToCome (`connection::stream_exhaust`).

use std::time::Duration;

use bson::{doc, Bson, DateTime, Document};
use slipstream_wire::{MAX_BSON_OBJECT_SIZE_BYTES, MAX_MESSAGE_SIZE_BYTES};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::state::ServerState;

pub const MIN_WIRE_VERSION: i32 = 0;
/// MongoDB 7.0.
pub const MAX_WIRE_VERSION: i32 = 21;
pub const MAX_WRITE_BATCH_SIZE: i32 = 100_000;
pub const LOGICAL_SESSION_TIMEOUT_MINUTES: i32 = 30;
/// The longest a streaming `hello` waits, whatever the client asks.
pub const MAX_AWAIT_TIME_MS_LIMIT: u64 = 60_000;

pub async fn hello(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let state = &ctx.state;
    let topology = &state.topology;
    if let Some(wait) = awaitable_wait(ctx, &req.body)? {
        // Answered when the topology changes, the wait ends, or the node
        // shuts down, whichever is first.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait.wait_ms)) => {}
            _ = topology.topology_changed(wait.seen_counter) => {}
            _ = state.shutdown.wait() => {}
        }
    }
    let legacy = req.name != "hello";
    let mut reply = Document::new();
    let counter = topology.hello_fields(legacy, &mut reply);
    if req.body.contains_key("helloOk") {
        reply.insert("helloOk", true);
    }
    reply.insert("topologyVersion", topology_version(state, counter));
    reply.insert("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE_BYTES as i32);
    reply.insert("maxMessageSizeBytes", MAX_MESSAGE_SIZE_BYTES as i32);
    reply.insert("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE);
    reply.insert("localTime", DateTime::now());
    reply.insert("logicalSessionTimeoutMinutes", LOGICAL_SESSION_TIMEOUT_MINUTES);
    reply.insert("connectionId", connection_id(ctx.connection_id));
    reply.insert("minWireVersion", MIN_WIRE_VERSION);
    reply.insert("maxWireVersion", MAX_WIRE_VERSION);
    reply.insert("readOnly", false);
    Ok(reply)
}

/// This process's `topologyVersion` with `counter`.
pub fn topology_version(state: &ServerState, counter: i64) -> Document {
    doc! {"processId": state.process_id, "counter": Bson::Int64(counter)}
}

/// `connectionId` as MongoDB appends it (`appendNumber`): an Int32 while it
/// is below 2^30, an Int64 beyond.
fn connection_id(id: i64) -> Bson {
    const INT32_BELOW: i64 = 1 << 30;
    if id.abs() < INT32_BELOW {
        Bson::Int32(id as i32)
    } else {
        Bson::Int64(id)
    }
}

/// The wait of a monitoring `hello`.
struct AwaitableWait {
    wait_ms: u64,
    /// The client's `topologyVersion.counter`: a change past it ends the wait.
    seen_counter: i64,
}

/// How long to wait before answering a monitoring `hello`: `Some` only when
/// the client's `topologyVersion` is this process's current one (a
/// different processId or an older counter is answered at once).
fn awaitable_wait(ctx: &CommandContext, body: &Document) -> Result<Option<AwaitableWait>, CommandError> {
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
    let seen_counter = match topology.get("counter") {
        Some(Bson::Int64(counter)) => *counter,
        Some(Bson::Int32(counter)) => i64::from(*counter),
        _ => return Err(CommandError::type_mismatch("topologyVersion.counter must be an integer")),
    };
    if !same_process || seen_counter < ctx.state.topology.topology_counter() {
        return Ok(None);
    }
    Ok(Some(AwaitableWait {
        wait_ms: wait_ms.min(MAX_AWAIT_TIME_MS_LIMIT),
        seen_counter,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_id_is_int32_as_mongodb_appends_it() {
        assert_eq!(connection_id(7), Bson::Int32(7));
        assert_eq!(connection_id((1 << 30) - 1), Bson::Int32((1 << 30) - 1));
        assert_eq!(connection_id(1 << 30), Bson::Int64(1 << 30));
    }
}
