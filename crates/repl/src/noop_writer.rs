//! The periodic no-op writer: an idle primary writes a no-op every
//! `PERIODIC_NOOP_INTERVAL_MS`, so that `lastWrite.lastWriteDate` keeps
//! moving (drivers' `maxStalenessSeconds`) and secondaries' lag stays
//! measurable. The "new primary" no-op is the coordinator's (it must be the
//! term's first entry); `appendOplogNote` writes through `write_note`.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use slipstream_clock::OpTime;
use tokio::task::JoinHandle;

use crate::error::ReplError;
use crate::replica_set::Shared;

/// MongoDB's `periodicNoopIntervalSecs` default.
pub const PERIODIC_NOOP_INTERVAL_MS: u64 = 10_000;

pub struct NoopWriter {
    task: Option<JoinHandle<()>>,
}

impl NoopWriter {
    pub fn start(shared: Arc<Shared>) -> NoopWriter {
        let runtime = shared.runtime.clone();
        let task = runtime.spawn(async move {
            let interval = Duration::from_millis(PERIODIC_NOOP_INTERVAL_MS);
            loop {
                tokio::time::sleep(interval).await;
                let snapshot = shared.snapshot();
                if !snapshot.writable_primary {
                    continue;
                }
                let now_ms = bson::DateTime::now().timestamp_millis();
                let (_, wall_ms) = shared.engine.last_applied_wall();
                if now_ms - wall_ms < PERIODIC_NOOP_INTERVAL_MS as i64 {
                    continue;
                }
                let engine = shared.engine.clone();
                let written =
                    tokio::task::spawn_blocking(move || engine.writer().noop("periodic noop").map_err(Box::new)).await;
                if let Ok(Err(err)) = written {
                    tracing::debug!(target: "repl", error = %err, "periodic no-op not written");
                }
            }
        });
        NoopWriter { task: Some(task) }
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// `appendOplogNote {data}` and the linearizable read's barrier: one no-op
/// through the write gate (NotWritablePrimary when closed).
pub async fn write_note(shared: &Arc<Shared>, data: Document) -> Result<OpTime, ReplError> {
    let engine = shared.engine.clone();
    let written = tokio::task::spawn_blocking(move || engine.writer().noop_object(&data).map_err(Box::new)).await;
    match written {
        Ok(Ok(op)) => Ok(op),
        // Not primary (or no longer): NotWritablePrimary, as MongoDB's
        // `appendOplogNote` answers on a secondary.
        Ok(Err(err)) if matches!(*err, slipstream_storage::StorageError::NotWritablePrimary) => {
            Err(ReplError::NotWritablePrimary)
        }
        Ok(Err(err)) => Err(ReplError::Storage(err)),
        Err(_) => Err(ReplError::ShutdownInProgress),
    }
}
