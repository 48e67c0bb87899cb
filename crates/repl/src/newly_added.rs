//! The primary gives a `newlyAdded` member its vote (MongoDB 4.4+): a
//! reconfig marks each member it adds with a vote as `newlyAdded`
//! (`config_document::mark_newly_added`), which counts as a non-voter, so
//! that an empty member copying its data cannot leave a majority out of
//! reach. Once the primary sees such a member SECONDARY (its initial sync
//! is over), it reconfigures the mark away: one member per configuration,
//! each once the configuration before it is committed, as safe reconfig
//! requires of any change of voters.

use std::sync::Arc;
use std::time::Duration;

use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{Event, MemberState};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::coordinator::Input;
use crate::replica_set::Shared;
use crate::snapshot::Snapshot;

/// How often the primary looks, at most (the heartbeat interval when it is
/// shorter): a member's state is learned by heartbeat anyway.
const CHECK_INTERVAL_MAX_MS: u64 = 1_000;
const CHECK_INTERVAL_MIN_MS: u64 = 50;

pub struct NewlyAddedRemover {
    task: Option<JoinHandle<()>>,
}

impl NewlyAddedRemover {
    pub fn start(shared: Arc<Shared>) -> NewlyAddedRemover {
        let runtime = shared.runtime.clone();
        let task = runtime.spawn(async move {
            loop {
                let snapshot = shared.snapshot();
                let interval_ms = snapshot.config.as_ref().map_or(CHECK_INTERVAL_MAX_MS, |config| {
                    config.settings.heartbeat_interval_ms.clamp(CHECK_INTERVAL_MIN_MS, CHECK_INTERVAL_MAX_MS)
                });
                tokio::time::sleep(Duration::from_millis(interval_ms)).await;
                let snapshot = shared.snapshot();
                let Some((config, member)) = next_config(&snapshot) else { continue };
                let version = config.version;
                let (reply, answer) = oneshot::channel();
                let event = Event::Reconfig { config, force: None, answered: Vec::new() };
                shared.input(Input::Command { event, reply });
                match answer.await {
                    Ok(Ok(_)) => {
                        tracing::info!(target: "repl", member, version, "newlyAdded removed: the member now votes");
                    }
                    Ok(Err(err)) => {
                        tracing::debug!(target: "repl", error = %err, "newlyAdded not removed yet");
                    }
                    Err(_) => return,
                }
            }
        });
        NewlyAddedRemover { task: Some(task) }
    }

    pub fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The configuration that gives the first `newlyAdded` member seen
/// SECONDARY its vote, and that member, when this member is a writable
/// primary whose configuration is committed; `None` otherwise.
pub fn next_config(snapshot: &Snapshot) -> Option<(ReplSetConfig, MemberId)> {
    if !snapshot.writable_primary || !snapshot.config_committed {
        return None;
    }
    let config = snapshot.config.as_deref()?;
    let ready = config.members.iter().find(|member| {
        member.newly_added
            && snapshot
                .members
                .iter()
                .any(|view| view.id == member.id && view.health && view.state == MemberState::Secondary)
    })?;
    let mut next = config.clone();
    next.version += 1;
    next.members.iter_mut().filter(|m| m.id == ready.id).for_each(|m| m.newly_added = false);
    Some((next, ready.id))
}
