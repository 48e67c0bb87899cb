//! The position watcher: turns the storage engine's `oplog_watch` and
//! `durable_watch` into the node's `Appended` and `Durable` events, one per
//! change seen (a burst of writes coalesces into one event), never one per
//! write. The primary's own writes reach the node this way; on a
//! secondary the applier reports appends and durability itself.

use std::sync::Arc;

use slipstream_clock::OpTime;
use slipstream_consensus::Event;
use tokio::task::JoinHandle;

use crate::coordinator::Input;
use crate::replica_set::Shared;

pub struct PositionWatcher {
    task: Option<JoinHandle<()>>,
}

impl PositionWatcher {
    pub fn start(shared: Arc<Shared>) -> PositionWatcher {
        let runtime = shared.runtime.clone();
        let task = runtime.spawn(async move {
            let mut oplog = shared.engine.oplog_watch();
            let mut durable = shared.engine.durable_watch();
            let mut sent_applied = OpTime::NULL;
            let mut sent_durable = OpTime::NULL;
            loop {
                // Only a primary's own writes need reporting from here: a
                // secondary's applier, rollback and the coordinator's own
                // no-ops report theirs directly.
                let (applied, applied_wall) = shared.engine.last_applied_wall();
                if applied != sent_applied && shared.snapshot().writable_primary {
                    sent_applied = applied;
                    shared.step_input(Input::Event(Event::Appended {
                        last_applied: applied,
                        wall_ms: applied_wall,
                    }));
                }
                let (durable_at, durable_wall) = shared.engine.last_durable_wall();
                if durable_at != sent_durable {
                    sent_durable = durable_at;
                    shared.step_input(Input::Event(Event::Durable {
                        last_durable: durable_at,
                        wall_ms: durable_wall,
                    }));
                }
                tokio::select! {
                    changed = oplog.changed() => if changed.is_err() { return },
                    changed = durable.changed() => if changed.is_err() { return },
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
