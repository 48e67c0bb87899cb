//! The applier: `Action::AppendBatch` -> `Engine::apply_batch` of the
//! fetcher's held batch (off the coordinator's thread), reports
//! `Appended`, then writes and fsyncs the journal on its own thread
//! (`Engine::sync_journal_through`) and reports `Durable` itself (the
//! durable watch of `position_watcher` would too, a hop later). Applied and durable positions
//! are reported separately: the applied one moves the node's sync-source
//! view, the durable one the commit point.
//!
//! ```text
//!   Idle --AppendBatch--> Applying --Appended--> Idle
//! ```
//! Busy/idle is published (`Shared::applier_busy`) so that a fetcher
//! starting a query reads the oplog's end only once no batch is in flight.

use std::sync::Arc;

use slipstream_consensus::Event;
use slipstream_storage::{from_bson_timestamp, StorageError};

use crate::coordinator::{fatal, Input};
use crate::oplog_fetcher::HeldBatch;
use crate::replica_set::Shared;

pub struct Applier {
    shared: Arc<Shared>,
}

impl Applier {
    pub fn new(shared: Arc<Shared>) -> Applier {
        Applier { shared }
    }

    pub fn apply(&self, mut held: HeldBatch) {
        self.shared.applier_busy.send_replace(true);
        let shared = self.shared.clone();
        self.shared.runtime.spawn_blocking(move || {
            let engine = &shared.engine;
            // Once a resync began, the batch changes nothing (the wipe
            // waits for a batch that holds the guard).
            let data = shared.resync.data_guard();
            if data.is_none() {
                held.entries.clear();
            }
            let last = engine.last_applied().ts;
            // The overlap entry (and anything a restarted query repeats) is
            // already ours. The entries are moved out, not copied: the batch
            // is only needed afterwards to say it was appended.
            let entries: Vec<_> = std::mem::take(&mut held.entries)
                .into_iter()
                .filter(|entry| entry.get_timestamp("ts").is_ok_and(|ts| from_bson_timestamp(ts) > last))
                .collect();
            let count = entries.len();
            let mut durable_target = None;
            if !entries.is_empty() {
                let started = std::time::Instant::now();
                match engine.apply_batch(&entries) {
                    Ok(op) => {
                        shared.metrics.record_apply_batch(count as u64, started.elapsed());
                        shared.metrics.set_buffer(0, 0);
                        durable_target = Some(op.ts);
                    }
                    Err(StorageError::InvalidOplogEntry(why)) => {
                        fatal(&format!("cannot apply an oplog entry from the sync source: {why}"))
                    }
                    Err(err) => tracing::warn!(target: "repl", error = %err, "batch not applied"),
                }
            }
            drop(data);
            let (applied, wall_ms) = engine.last_applied_wall();
            shared.input(Input::Event(Event::Appended {
                last_applied: applied,
                wall_ms,
            }));
            shared.applier_busy.send_replace(false);
            held.appended();
            // The journal syncs now rather than at its interval, written
            // and fsynced on this thread when the group commit is idle (no
            // hand-off to its threads and back: this durable position is what
            // majority writes wait for), and the durable position goes to
            // the node straight from here (the durable watch would report it
            // one hop later). The append above went to the node first, so
            // its report leaves while the fsync runs.
            if let Some(ts) = durable_target {
                match engine.sync_journal_through(ts) {
                    Ok(()) => {
                        let (durable, wall_ms) = engine.last_durable_wall();
                        shared.input(Input::Event(Event::Durable {
                            last_durable: durable,
                            wall_ms,
                        }));
                    }
                    Err(err) => tracing::warn!(target: "repl", error = %err, "journal sync failed"),
                }
            }
        });
    }
}
