//! The position watcher: turns the storage engine's `oplog_watch` and
//! `durable_watch` into the node's `Appended` and `Durable` events, one per
//! change seen (a burst of writes coalesces into one event), never one per
//! write. The primary's own writes reach the node this way; on a
//! secondary the applier reports appends and durability itself.
//!
//! ```text
//!   Watching (writable primary: every oplog and durable change)
//!      ^  | the member stops accepting writes
//!      |  v
//!   Polling (every other state: a look each POSITION_POLL_MS)
//! ```
//!
//! Why a secondary only polls: its applier already reports each batch's
//! append and durability, so a wake-up per change here was a context
//! switch of an async worker and a duplicate `Durable` for the coordinator
//! (one more of its own) for every write the set took. The poll catches
//! what moves a non-primary's positions without the applier (a stepped-down
//! primary's last fsync, initial sync's end), a poll period late at most.

use std::sync::Arc;
use std::time::Duration;

use slipstream_clock::OpTime;
use slipstream_consensus::Event;
use tokio::task::JoinHandle;

use crate::coordinator::Input;
use crate::replica_set::Shared;

/// How often a member that is not a writable primary looks at its
/// positions (the applier reports its own at once).
pub const POSITION_POLL_MS: u64 = 100;

pub struct PositionWatcher {
    task: Option<JoinHandle<()>>,
}

impl PositionWatcher {
    pub fn start(shared: Arc<Shared>) -> PositionWatcher {
        let runtime = shared.runtime.clone();
        let task = runtime.spawn(async move {
            let mut oplog = shared.engine.oplog_watch();
            let mut durable = shared.engine.durable_watch();
            let mut writable = shared.writable_primary.subscribe();
            let mut sent_applied = OpTime::NULL;
            let mut sent_durable = OpTime::NULL;
            loop {
                // Marked seen before the look, so that a change during it
                // wakes the wait below.
                let primary = *writable.borrow_and_update();
                if primary {
                    oplog.borrow_and_update();
                    durable.borrow_and_update();
                }
                // Only a primary's own writes need reporting from here: a
                // secondary's applier, rollback and the coordinator's own
                // no-ops report theirs directly.
                let (applied, applied_wall) = shared.engine.last_applied_wall();
                if applied != sent_applied && shared.snapshot().writable_primary {
                    sent_applied = applied;
                    shared.input(Input::Event(Event::Appended {
                        last_applied: applied,
                        wall_ms: applied_wall,
                    }));
                }
                let (durable_at, durable_wall) = shared.engine.last_durable_wall();
                if durable_at != sent_durable {
                    sent_durable = durable_at;
                    shared.input(Input::Event(Event::Durable {
                        last_durable: durable_at,
                        wall_ms: durable_wall,
                    }));
                }
                if primary {
                    tokio::select! {
                        changed = oplog.changed() => if changed.is_err() { return },
                        changed = durable.changed() => if changed.is_err() { return },
                        changed = writable.changed() => if changed.is_err() { return },
                    }
                } else {
                    tokio::select! {
                        changed = writable.changed() => if changed.is_err() { return },
                        _ = tokio::time::sleep(Duration::from_millis(POSITION_POLL_MS)) => {}
                    }
                }
            }
        });
        PositionWatcher { task: Some(task) }
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
