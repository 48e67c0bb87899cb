//! `compact`: gives the checkpoint file's free space back to the file
//! system.
//!
//! MongoDB compacts one collection's WiredTiger files; every collection
//! here lives in the one checkpoint file, so compacting any collection
//! rewrites that whole file (`Engine::compact`). The command is checked as
//! MongoDB 7.0 checks it: a replica set primary refuses it without
//! `force` (IllegalOperation), a view answers 166, a missing collection 26;
//! secondaries run it.

use bson::{doc, Bson, Document};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{self, namespace};
use crate::exec::views;
use crate::state::ServerState;

/// `bytesFreed` goes out as an Int32 below this magnitude and as an Int64
/// above it, as MongoDB's `appendNumber` does.
const INT32_REPLY_LIMIT: i64 = 1 << 30;

pub async fn compact(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let collection = match req.body.get("compact") {
        Some(Bson::String(collection)) => collection.clone(),
        Some(other) => {
            return Err(CommandError::new(
                73,
                format!("collection name has invalid type {}", args::type_name(other)),
            ))
        }
        None => return Err(CommandError::new(73, "collection name has invalid type missing")),
    };
    args::check_collection_name(&collection)?;
    let ns = namespace(&req.db, &collection);
    let force = args::get_bool(&req.body, "compact", "force")?.unwrap_or(false);
    if is_set_primary(&ctx.state) && !force {
        return Err(CommandError::new(
            20,
            "will not run compact on an active replica set primary as this will slow down other running \
             operations. use force:true to force",
        ));
    }
    let engine = ctx.state.engine.clone();
    if engine.collection_info(&ns).is_none() {
        return Err(CommandError::new(26, "collection does not exist"));
    }
    views::refuse_view(&engine, &ns, "compact").map_err(|_| CommandError::new(166, "can't compact a view"))?;
    tracing::info!(target: "storage", namespace = %ns, "compact begin: rewriting the checkpoint file");
    let started = std::time::Instant::now();
    let compaction = crate::operations::spawn_blocking(move || engine.compact())
        .await
        .map_err(|err| CommandError::new(1, format!("compact did not finish: {err}")))??;
    // Writes made meanwhile may leave the new file larger than the old one.
    let freed = compaction.bytes_before.saturating_sub(compaction.bytes_after);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    ctx.state.metrics.count_compaction(freed, elapsed_ms);
    tracing::info!(
        target: "storage",
        namespace = %ns,
        bytes_before = compaction.bytes_before,
        bytes_after = compaction.bytes_after,
        bytes_freed = freed,
        elapsed_ms,
        "compact end"
    );
    Ok(reply(freed))
}

fn reply(freed: u64) -> Document {
    let freed = i64::try_from(freed).unwrap_or(i64::MAX);
    if freed < INT32_REPLY_LIMIT {
        doc! {"bytesFreed": freed as i32}
    } else {
        doc! {"bytesFreed": freed}
    }
}

/// Whether this node is a replica set's writable primary.
fn is_set_primary(state: &ServerState) -> bool {
    if !state.topology.is_replica_set() {
        return false;
    }
    let mut fields = Document::new();
    state.topology.hello_fields(false, &mut fields);
    fields.get_bool("isWritablePrimary").unwrap_or(false)
}
