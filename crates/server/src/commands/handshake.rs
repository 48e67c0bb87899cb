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

use std::sync::atomic::Ordering;
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
/// MongoDB's bounds on the client metadata document and its application name.
pub const CLIENT_METADATA_BYTES_MAX: usize = 512;
pub const APP_NAME_BYTES_MAX: usize = 128;

pub async fn hello(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let state = &ctx.state;
    let topology = &state.topology;
    let seen_before = ctx.hello_seen.swap(true, Ordering::SeqCst);
    if let Some(client) = req.body.get("client") {
        if seen_before {
            return Err(CommandError::new(
                186,
                "The client metadata document may only be sent in the first hello",
            ));
        }
        check_client_metadata(client)?;
    }
    if let Some(wait) = awaitable_wait(ctx, &req.body)? {
        // Answered when the topology changes, the wait ends, or the node
        // shuts down, whichever is first; maxTimeMS ends it with an error,
        // as MongoDB's wait runs under the operation's deadline.
        let deadline = async {
            match crate::operation::max_time_deadline(&req.body) {
                Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait.wait_ms)) => {}
            _ = topology.topology_changed(wait.seen_counter) => {}
            _ = state.shutdown.wait() => {}
            () = deadline => return Err(crate::exec::query::max_time_expired()),
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

/// MongoDB's `ClientMetadata::parse`: a document of at most 512 bytes with
/// `driver.name`, `driver.version` and `os.type` strings (183
/// ClientMetadataMissingField), and an `application.name` of at most 128
/// bytes (184 ClientMetadataAppNameTooLarge).
fn check_client_metadata(client: &Bson) -> Result<(), CommandError> {
    let Bson::Document(client) = client else {
        return Err(CommandError::type_mismatch("The client metadata document must be a document"));
    };
    let bytes = crate::exec::size::document_size(client);
    if bytes > CLIENT_METADATA_BYTES_MAX {
        return Err(CommandError::new(
            185,
            format!("The client metadata document must be less then or equal to {CLIENT_METADATA_BYTES_MAX} bytes"),
        ));
    }
    if let Some(application) = client.get("application") {
        let Bson::Document(application) = application else {
            return Err(CommandError::type_mismatch("The 'application' field must be a document"));
        };
        match application.get("name") {
            None => {}
            Some(Bson::String(name)) if name.len() <= APP_NAME_BYTES_MAX => {}
            Some(Bson::String(_)) => {
                return Err(CommandError::new(
                    184,
                    format!("The 'name' field must be less then or equal to {APP_NAME_BYTES_MAX} bytes in length"),
                ))
            }
            Some(_) => return Err(CommandError::type_mismatch("The 'application.name' field must be a string")),
        }
    }
    for (section, fields) in [("driver", &["name", "version"][..]), ("os", &["type"][..])] {
        let Some(Bson::Document(part)) = client.get(section) else {
            return Err(CommandError::new(
                183,
                format!("Missing required sub-document '{section}' in the client metadata document"),
            ));
        };
        for field in fields {
            if !matches!(part.get(*field), Some(Bson::String(_))) {
                return Err(CommandError::new(
                    183,
                    format!("Missing required field '{section}.{field}' in the client metadata document"),
                ));
            }
        }
    }
    Ok(())
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
    // MongoDB's checks and codes (replication_info.cpp).
    let (max_await, topology) = match (max_await, topology) {
        (None, None) => return Ok(None),
        (Some(max_await), Some(Bson::Document(topology))) => (max_await, topology),
        (Some(_), None) => {
            return Err(CommandError::new(31368, "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'"))
        }
        (None, Some(_)) => {
            return Err(CommandError::new(31368, "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"))
        }
        (Some(_), Some(_)) => return Err(CommandError::type_mismatch("topologyVersion must be a document")),
    };
    let seen_counter = match topology.get("counter") {
        Some(Bson::Int64(counter)) => *counter,
        Some(Bson::Int32(counter)) => i64::from(*counter),
        _ => return Err(CommandError::type_mismatch("topologyVersion.counter must be an integer")),
    };
    if seen_counter < 0 {
        return Err(CommandError::new(31372, "topologyVersion must have a non-negative counter"));
    }
    let wait_ms = match max_await {
        Bson::Int32(ms) => i64::from(*ms),
        Bson::Int64(ms) => *ms,
        Bson::Double(ms) if ms.fract() == 0.0 && ms.abs() < 9.0e15 => *ms as i64,
        Bson::Double(_) => return Err(CommandError::bad_value("maxAwaitTimeMS must be an integer")),
        _ => return Err(CommandError::type_mismatch("maxAwaitTimeMS must be a number")),
    };
    if wait_ms < 0 {
        return Err(CommandError::new(31373, "maxAwaitTimeMS must be a non-negative integer"));
    }
    let wait_ms = wait_ms as u64;
    let same_process = topology.get_object_id("processId").ok() == Some(ctx.state.process_id);
    let server_counter = ctx.state.topology.topology_counter();
    if !same_process || seen_counter < server_counter {
        return Ok(None);
    }
    if seen_counter > server_counter {
        return Err(CommandError::new(
            31382,
            format!(
                "Received a topology version with counter: {seen_counter} which is greater than the server topology \
                 version counter: {server_counter}"
            ),
        ));
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
