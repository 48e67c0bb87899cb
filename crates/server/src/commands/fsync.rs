//! `fsync` and `fsyncUnlock`.
//!
//! `{fsync: 1}` makes everything written so far durable in the checkpoint
//! file, not only in the journal: the journal is synced, then a checkpoint
//! is written at the stable timestamp (`Engine::checkpoint_unless_copying`;
//! on a replica set member that is the commit point, so writes above it
//! stay in the journal, from which a restart recovers them). While another
//! member copies the checkpoint file for its initial sync, only the
//! journal is synced: a new checkpoint would make that copy start over.
//! MongoDB answers `numFiles: 1` for WiredTiger; so does this.
//!
//! `lock: true` (`db.fsyncLock()`, writes blocked until `fsyncUnlock`) is
//! not implemented and answers CommandNotSupported rather than flushing
//! without the lock the caller relies on for a file-level backup. Since
//! nothing ever holds that lock, `fsyncUnlock` answers as MongoDB does when
//! the node is not locked.

use bson::doc;

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args;

pub async fn fsync(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    admin_only(req)?;
    if args::get_bool(&req.body, "fsync", "lock")?.unwrap_or(false) {
        return Err(CommandError::new(
            115,
            "fsync with lock: true (db.fsyncLock()) is not supported: take a file-level backup from a stopped \
             member, or copy a member with an initial sync",
        ));
    }
    if args::get_bool(&req.body, "fsync", "async")?.unwrap_or(false) {
        return Err(CommandError::new(115, "fsync with async: true is not supported"));
    }
    let engine = ctx.state.engine.clone();
    let started = std::time::Instant::now();
    let checkpoint = crate::operations::spawn_blocking(move || engine.checkpoint_unless_copying())
        .await
        .map_err(|err| CommandError::new(1, format!("fsync did not finish: {err}")))??;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match checkpoint {
        Some(checkpoint) => tracing::info!(
            target: "storage",
            checkpoint = %checkpoint,
            elapsed_ms,
            "fsync: journal synced and checkpoint written"
        ),
        None => tracing::info!(
            target: "storage",
            elapsed_ms,
            "fsync: journal synced; no checkpoint while a member copies the checkpoint file"
        ),
    }
    Ok(doc! {"numFiles": 1})
}

pub async fn fsync_unlock(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    admin_only(req)?;
    Err(CommandError::new(125, "fsyncUnlock called when not locked"))
}

fn admin_only(req: &CommandRequest) -> Result<(), CommandError> {
    if req.db != "admin" {
        return Err(CommandError::new(13, format!("{} may only be run against the admin database.", req.name)));
    }
    Ok(())
}
