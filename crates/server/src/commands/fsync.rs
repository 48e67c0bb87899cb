//! `fsync` and `fsyncUnlock`.
//!
//! `{fsync: 1}` makes every write so far durable now (the journal is
//! synced: a `w: 1` write without `j` is acknowledged before that), then
//! writes the checkpoint the background thread would write now
//! (`Engine::flush`): not past the snapshot window's start, which a
//! checkpoint at the newest write would give up (snapshot reads would then
//! fail below it), and none while another member copies the checkpoint
//! file for its initial sync (that copy would start over). What is not in
//! the checkpoint file is in the journal, from which a restart recovers
//! it. MongoDB answers `numFiles: 1` for WiredTiger; so does this.
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
    let checkpoint = crate::operations::spawn_blocking(move || engine.flush())
        .await
        .map_err(|err| CommandError::new(1, format!("fsync did not finish: {err}")))??;
    tracing::info!(
        target: "storage",
        checkpoint = %checkpoint,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "fsync: journal synced; checkpoint as the background thread would write it"
    );
    Ok(doc! {"numFiles": 1})
}

pub async fn fsync_unlock(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    admin_only(req)?;
    Err(CommandError::new(20, "fsyncUnlock called when not locked"))
}

fn admin_only(req: &CommandRequest) -> Result<(), CommandError> {
    if req.db != "admin" {
        return Err(CommandError::new(13, format!("{} may only be run against the admin database.", req.name)));
    }
    Ok(())
}
