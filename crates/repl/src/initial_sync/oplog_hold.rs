//! The begin point's lease (issue 8, item 5): while a member copies from
//! a source, the source must keep every oplog entry from the copy's begin
//! point on, or the oplog catch-up that repairs the copy cannot run and
//! the sync starts over (on a busy set with a small oplog, for ever).
//!
//! The syncing member sends `replSetInitialSyncHold {holder, from,
//! leaseMillis}` to its source when an attempt has its begin point, and
//! again every `LEASE / RENEWALS` while the attempt runs (from its own
//! task, so that a sync parked at a fail point or in a long batch still
//! renews); dropping the `Lease` releases it (`leaseMillis: 0`). The
//! source passes it to `Engine::hold_oplog`, which its checkpoints honour.
//! A member that dies holds nothing after `LEASE`.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::OPLOG_HOLD_LEASE_MAX;
use slipstream_storage::{bson_timestamp, from_bson_timestamp, Timestamp};
use tokio::task::JoinHandle;

use super::source;
use crate::error::ReplError;
use crate::protocol::integral;
use crate::replica_set::Shared;

/// How long one hold lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(60);
/// Renewals per lease: one lost or slow renewal does not let it lapse.
pub const RENEWALS: u32 = 4;

/// The source's side: `replSetInitialSyncHold`.
pub fn serve(shared: &Shared, body: &Document) -> Result<Document, ReplError> {
    if shared.snapshot().config.is_none() {
        return Err(ReplError::NotYetInitialized);
    }
    let holder = holder_of(body, "replSetInitialSyncHold")?;
    let from = match body.get("from") {
        Some(Bson::Timestamp(ts)) => from_bson_timestamp(*ts),
        _ => {
            return Err(ReplError::type_mismatch(
                "replSetInitialSyncHold needs a timestamp 'from'",
            ))
        }
    };
    let lease_ms = body
        .get("leaseMillis")
        .and_then(integral)
        .filter(|ms| (0..=OPLOG_HOLD_LEASE_MAX.as_millis() as i64).contains(ms))
        .ok_or_else(|| {
            ReplError::bad_value(format!(
                "replSetInitialSyncHold needs 'leaseMillis' from 0 to {}",
                OPLOG_HOLD_LEASE_MAX.as_millis()
            ))
        })?;
    shared
        .engine
        .hold_oplog(holder, from, Duration::from_millis(lease_ms as u64))
        .map_err(|err| ReplError::bad_value(err.to_string()))?;
    let first = shared.engine.stats().oplog_first;
    Ok(doc! {"from": bson_timestamp(from), "earliestOptime": bson_timestamp(first)})
}

/// The longest `holder` (a `host:port`: a DNS name of at most 253 bytes,
/// a colon, a port); the holds and pins are maps a remote fills, keyed by it.
pub const HOLDER_BYTES_MAX: usize = 260;

/// The `holder` of a request to `command` (this one and
/// `replSetCheckpointCopy`): a string of at most `HOLDER_BYTES_MAX` bytes.
pub(crate) fn holder_of<'a>(body: &'a Document, command: &str) -> Result<&'a str, ReplError> {
    let holder = body
        .get_str("holder")
        .map_err(|_| ReplError::type_mismatch(format!("{command} needs a string 'holder'")))?;
    if holder.is_empty() || holder.len() > HOLDER_BYTES_MAX {
        return Err(ReplError::bad_value(format!(
            "{command}'s 'holder' must be 1 to {HOLDER_BYTES_MAX} bytes (a host:port)"
        )));
    }
    Ok(holder)
}

/// The syncing member's side: holds `from` on `host` until dropped.
pub struct Lease {
    renewer: JoinHandle<()>,
    shared: Arc<Shared>,
    host: String,
    from: Timestamp,
}

impl Lease {
    /// Takes the hold (once, before returning, so that the copy starts
    /// protected) and renews it in the background.
    pub async fn start(shared: &Arc<Shared>, host: &str, from: Timestamp) -> Lease {
        hold(shared, host, from, LEASE).await;
        let renewer = {
            let (shared, host) = (shared.clone(), host.to_owned());
            shared.runtime.clone().spawn(async move {
                loop {
                    tokio::time::sleep(LEASE / RENEWALS).await;
                    hold(&shared, &host, from, LEASE).await;
                }
            })
        };
        Lease {
            renewer,
            shared: shared.clone(),
            host: host.to_owned(),
            from,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
        let (shared, host, from) = (self.shared.clone(), self.host.clone(), self.from);
        self.shared
            .runtime
            .spawn(async move { hold(&shared, &host, from, Duration::ZERO).await });
    }
}

/// One request; a failure is logged, not fatal: without the hold the sync
/// still works unless the source's oplog rolls over (then it starts over).
async fn hold(shared: &Arc<Shared>, host: &str, from: Timestamp, lease: Duration) {
    let body = doc! {
        "replSetInitialSyncHold": 1,
        "holder": shared.me_host(),
        "from": bson_timestamp(from),
        "leaseMillis": lease.as_millis() as i64,
    };
    match source::command(shared, host, "admin", body).await {
        Ok(reply) => tracing::debug!(target: "repl", source = host, from = %from, lease_ms = lease.as_millis() as u64,
            earliest = ?reply.get("earliestOptime"), "initial sync oplog hold"),
        Err(err) => tracing::warn!(target: "repl", source = host, from = %from, error = %err,
            "initial sync could not hold its begin point on the source's oplog"),
    }
}
