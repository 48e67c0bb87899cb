//! The oplog catch-up: after the copy, apply the source's oplog from the
//! begin point (or, resumed, from our last applied entry) until our last
//! applied entry reaches `min_valid`, the point past which the copy
//! reflects nothing the oplog has not repaired. Entries go through the
//! secondary's own path (`Engine::apply_batch`: idempotent replay, one
//! journal append, visible whole), so our oplog starts at the begin point
//! and the ordinary fetcher continues from our last entry afterwards.
//!
//! The first entry the source returns must be the one we start from: if
//! the source's oplog no longer holds it, the copy cannot be repaired from
//! this source (`SyncError::BeginPointGone`).

use bson::{doc, RawDocumentBuf};
use slipstream_clock::OpTime;
use slipstream_storage::{bson_timestamp, from_bson_timestamp};

use super::cloner::blocking;
use super::source::{self, cursor_batch, entry_optime};
use super::{Attempt, SyncError};

/// Entries one batch asks for (storage applies at most 5,000 at once).
pub const CATCH_UP_BATCH_ENTRIES: i64 = 5_000;

/// Applies the source's entries until our last applied reaches `min_valid`.
pub async fn catch_up(attempt: &mut Attempt) -> Result<(), SyncError> {
    let min_valid = attempt.progress.min_valid;
    let ours = attempt.shared.engine.last_applied();
    // Resumed after entries were applied: continue from the last one.
    let from = if ours.is_null() { attempt.progress.begin } else { ours };
    if !ours.is_null() && ours.ts >= min_valid {
        return Ok(());
    }
    let find = doc! {
        "find": "oplog.rs",
        "filter": {"ts": {"$gte": bson_timestamp(from.ts)}},
        "batchSize": CATCH_UP_BATCH_ENTRIES,
    };
    let mut reply = source::command_raw(&attempt.shared, &attempt.host, "local", find).await?;
    let mut first = true;
    loop {
        let (cursor_id, entries) = cursor_batch(&reply)?;
        if first {
            first = false;
            match entries.first().map(entry_optime).transpose()? {
                Some(op) if op == from => {}
                found => return Err(SyncError::BeginPointGone { wanted: from, found }),
            }
        }
        let last = apply(attempt, entries).await?;
        if last.ts >= min_valid {
            kill_cursor(attempt, cursor_id).await;
            return Ok(());
        }
        if cursor_id == 0 {
            return Err(SyncError::Source(crate::network::NetError::Protocol(format!(
                "the sync source's oplog ended at {} before minValid {min_valid}",
                last.ts
            ))));
        }
        let get_more = doc! {"getMore": cursor_id, "collection": "oplog.rs", "batchSize": CATCH_UP_BATCH_ENTRIES};
        reply = source::command_raw(&attempt.shared, &attempt.host, "local", get_more).await?;
    }
}

/// Applies the entries after our last applied one; returns our new last.
async fn apply(attempt: &Attempt, entries: Vec<RawDocumentBuf>) -> Result<OpTime, SyncError> {
    let engine = attempt.shared.engine.clone();
    let last = engine.last_applied();
    let fresh: Vec<RawDocumentBuf> = entries
        .into_iter()
        .filter(|entry| {
            last.is_null()
                || entry
                    .get_timestamp("ts")
                    .is_ok_and(|ts| from_bson_timestamp(ts) > last.ts)
        })
        .collect();
    if fresh.is_empty() {
        return Ok(last);
    }
    let count = fresh.len() as u64;
    let applied = blocking(move || engine.apply_batch(&fresh)).await?;
    attempt.status.ops_applied(count);
    Ok(applied)
}

async fn kill_cursor(attempt: &Attempt, cursor_id: i64) {
    if cursor_id == 0 {
        return;
    }
    let body = doc! {"killCursors": "oplog.rs", "cursors": [cursor_id]};
    if let Err(err) = source::command(&attempt.shared, &attempt.host, "local", body).await {
        tracing::debug!(target: "repl", error = %err, "initial sync could not kill its oplog cursor");
    }
}
