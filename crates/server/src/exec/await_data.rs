//! The wait of a tailable `awaitData` cursor, shared by the oplog's and
//! the capped collections' tailing: fill a batch; when it is empty and the
//! cursor waits, sleep until the next oplog entry (every write makes one,
//! on a primary and on a member) or until `wait` has passed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::Document;
use slipstream_storage::Engine;

use super::batch::{Batch, BatchLimits};
use crate::error::CommandError;

/// One batch from `fill` (which answers whether the cursor is finished),
/// waiting up to `wait` for a non-empty one when `await_data`. Returns the
/// documents and whether the cursor is finished.
pub async fn fill_or_wait(
    engine: &Arc<Engine>,
    limits: BatchLimits,
    wait: Duration,
    await_data: bool,
    mut fill: impl FnMut(&mut Batch) -> Result<bool, CommandError>,
) -> Result<(Vec<Document>, bool), CommandError> {
    let deadline = Instant::now() + wait;
    // Subscribed before reading, so a write between the read and the wait
    // still wakes the cursor.
    let mut watch = engine.oplog_watch();
    loop {
        watch.borrow_and_update();
        let mut batch = Batch::new(limits);
        let finished = fill(&mut batch)?;
        if !batch.is_empty() || finished || !await_data {
            return Ok((batch.into_documents(), finished));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Ok((Vec::new(), false));
        }
        match tokio::time::timeout(remaining, watch.changed()).await {
            Ok(Ok(())) => continue,
            // The engine dropped its sender: it is shutting down.
            Ok(Err(_)) => {
                return Err(CommandError::new(
                    91,
                    "The server is in quiesce mode and will shut down",
                ))
            }
            Err(_elapsed) => return Ok((Vec::new(), false)),
        }
    }
}
