//! Logical sessions and retryable writes.
//!
//! - `lsid`: a session id as the server keys it (`{id, uid}`);
//! - `session_catalog`: the sessions this node knows, each checked out by
//!   at most one command at a time, expiring after
//!   `logicalSessionTimeoutMinutes`;
//! - `retryable`: a retryable write's statements, those already executed
//!   (found in `config.transactions` and the oplog's `prevOpTime` chain)
//!   and how their first outcome is answered again;
//! - `commands`: `startSession`, `refreshSessions`, `endSessions`,
//!   `killSessions`, and the `$listLocalSessions` stage.
//!
//! `begin` is the hook `operation::execute` runs before a handler.

pub mod commands;
pub mod kill_all;
pub mod lsid;
pub mod retryable;
pub mod session_catalog;

use std::sync::Arc;
use std::time::Instant;

use bson::Document;

use crate::commands::{CommandContext, CommandSpec};
use crate::error::CommandError;
use crate::session::SessionArguments;
pub use retryable::RetryableWrite;
pub use session_catalog::{CheckedOutSession, SessionCatalog, LOGICAL_SESSION_TIMEOUT_MINUTES};

/// What a handler knows of its command's session.
#[derive(Clone, Debug)]
pub struct CommandSession {
    /// `{id, uid}`.
    pub lsid: Document,
    /// Set for a retryable write (`txnNumber` on a retryable write command).
    pub retryable_write: Option<Arc<RetryableWrite>>,
}

/// Records the command's session and, for a command with a `txnNumber`,
/// checks it out (waiting, up to the command's deadline, while another
/// such command of the session runs) and, for a retryable write, loads
/// what the session's transaction number has already executed and hands
/// it to the handler through `ctx`. As MongoDB 7.0's
/// `shouldCheckOutSession`: a command without `txnNumber` only keeps its
/// session alive and runs beside the session's others. `None` when
/// nothing was checked out; the session stays checked out until the
/// returned guard is dropped, which `operation` does before the write
/// concern wait, as MongoDB's session checkout ends with the command's
/// own run, so a driver's retry of a write waiting for its concern is
/// answered from history at once.
pub async fn begin<'a>(
    ctx: &'a CommandContext,
    spec: &CommandSpec,
    body: &Document,
    arguments: &SessionArguments,
    deadline: Option<Instant>,
) -> Result<Option<CheckedOutSession<'a>>, CommandError> {
    *ctx.session.lock() = None;
    let Some(value) = body.get("lsid") else {
        return Ok(None);
    };
    let lsid = lsid::parse(value)?;
    if arguments.txn_number.is_none() {
        ctx.state.sessions.refresh(std::slice::from_ref(&lsid))?;
        *ctx.session.lock() = Some(CommandSession { lsid, retryable_write: None });
        return Ok(None);
    }
    let session = ctx.state.sessions.check_out(lsid, deadline).await?;
    let mut command_session = CommandSession {
        lsid: session.lsid().clone(),
        retryable_write: None,
    };
    if let (Some(txn_number), true) = (
        arguments.txn_number,
        spec.retryable_write && arguments.is_retryable_write(),
    ) {
        session.begin_transaction(txn_number)?;
        let mut write = RetryableWrite::begin(&ctx.state.engine, session.lsid().clone(), txn_number, body)?;
        if ctx.state.options.enable_test_commands {
            write = write.with_fail_point(Arc::clone(&ctx.state.fail_points.transactional_write));
        }
        command_session.retryable_write = Some(Arc::new(write));
    }
    *ctx.session.lock() = Some(command_session);
    Ok(Some(session))
}
