//! The applier: `Action::AppendBatch` -> `Engine::apply_batch` of the
//! fetcher's held batch (a small batch on the thread that stepped the
//! node, a large one on a blocking-pool thread), reports `Appended`, then
//! writes and fsyncs the journal on the same thread
//! (`Engine::sync_journal_through`) and reports `Durable` itself (the
//! durable watch of `position_watcher` would too, a hop later). Applied and
//! durable positions are reported separately: the applied one moves the
//! node's sync-source view, the durable one the commit point (when both
//! are stepped before the position reporter's task runs, it sends one
//! report).
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

/// A batch of at most this many entries and bytes is applied, and the
/// journal synced, on the thread that stepped the node (usually the
/// fetcher's task, or the coordinator thread) instead of a blocking-pool
/// thread. On this 2-vCPU VM each of the two hand-offs it saves (to the
/// blocking thread, and from it back to a runtime worker for the durable
/// report) took 150-200 us of a 1.3 ms majority write; the runtime worker
/// is held for one small batch's apply and fsync instead. A catch-up's
/// large batches still go to a blocking thread.
pub const INLINE_APPLY_ENTRIES_MAX: usize = 64;
pub const INLINE_APPLY_BYTES_MAX: usize = 1 << 20;

pub struct Applier {
    shared: Arc<Shared>,
}

impl Applier {
    pub fn new(shared: Arc<Shared>) -> Applier {
        Applier { shared }
    }

    pub fn apply(&self, held: HeldBatch) {
        self.shared.applier_busy.send_replace(true);
        if is_small(&held) {
            apply_held(&self.shared, held);
            return;
        }
        let shared = self.shared.clone();
        self.shared.runtime.spawn_blocking(move || apply_held(&shared, held));
    }
}

/// Whether a batch is applied on the thread that stepped the node.
fn is_small(held: &HeldBatch) -> bool {
    held.entries.len() <= INLINE_APPLY_ENTRIES_MAX && held.bytes <= INLINE_APPLY_BYTES_MAX
}

fn apply_held(shared: &Shared, mut held: HeldBatch) {
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
    shared.step_input(Input::Event(Event::Appended {
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
    // one hop later). On a blocking thread the append above reaches the
    // node first, so its report leaves while the fsync runs; stepped
    // inline, both are stepped after the fsync and leave as one report.
    if let Some(ts) = durable_target {
        match engine.sync_journal_through(ts) {
            Ok(()) => {
                let (durable, wall_ms) = engine.last_durable_wall();
                shared.step_input(Input::Event(Event::Durable {
                    last_durable: durable,
                    wall_ms,
                }));
            }
            Err(err) => tracing::warn!(target: "repl", error = %err, "journal sync failed"),
        }
    }
}

