//! Configurations in the simulated cluster: persisting them (with the
//! checks ConfigUnique and ConfigCommittedBeforeReconfig), members that
//! have no configuration yet (a spare added by a reconfig learns its first
//! configuration from the member that heartbeats it, as MongoDB's does
//! after answering NotYetInitialized), and convergence of configurations
//! before a phase that assumes one.

use crate::config::{MemberId, ReplSetConfig};
use crate::message::Message;
use crate::simulation::cluster::{Cluster, Payload};
use crate::state::MemberState;

impl Cluster {
    /// Adds a member process outside the configuration, running but never
    /// initiated: a reconfig may add it later.
    pub fn add_spare(&mut self, id: MemberId, host: String) -> usize {
        let i = self.add_process(id, host, None);
        self.start(i);
        i
    }

    /// `Action::PersistConfig` at member `i`.
    pub(crate) fn persist_config(&mut self, i: usize, config: ReplSetConfig) {
        let id = self.members[i].id;
        if let Some(old) = self.members[i].persisted_config.clone() {
            if self.writes_new_version(i, &old, &config) {
                self.check_committed_before_reconfig(id, &old);
            }
        }
        self.checker.on_config_persisted(id, &config);
        if config.version_and_term().is_newer_than(self.config.version_and_term()) {
            self.config = config.clone();
        }
        self.members[i].persisted_config = Some(config);
    }

    /// True if member `i`, primary, writes a new version of its own
    /// configuration (a safe reconfig; not a step-up, which keeps the
    /// version, nor a force reconfig, whose term is -1).
    fn writes_new_version(&self, i: usize, old: &ReplSetConfig, new: &ReplSetConfig) -> bool {
        let node = self.members[i].node.as_ref().expect("running");
        node.state() == MemberState::Primary && new.term == node.term() && new.version > old.version && old.term != -1
    }

    /// ConfigCommittedBeforeReconfig: `old` is durable (or superseded) on a
    /// majority of its voters, by their persisted configurations.
    fn check_committed_before_reconfig(&mut self, author: MemberId, old: &ReplSetConfig) {
        let old_vt = old.version_and_term();
        let holds = |id: MemberId| {
            self.members
                .iter()
                .find(|m| m.id == id)
                .and_then(|m| m.persisted_config.as_ref())
                .is_some_and(|c| {
                    let vt = c.version_and_term();
                    vt == old_vt || vt.is_newer_than(old_vt)
                })
        };
        let holders = old.members.iter().filter(|m| m.is_voter() && holds(m.id)).count();
        if holders < old.majority() {
            self.checker.violation(format!(
                "ConfigCommittedBeforeReconfig: member {author} replaced configuration {old_vt} held by {holders} voters, {} needed",
                old.majority()
            ));
        }
    }

    /// A message to a running member that has no configuration: a
    /// heartbeat makes it ask the sender for its configuration, which it
    /// adopts if it is in it; anything else goes unanswered.
    pub(crate) fn deliver_to_uninitiated(&mut self, from: usize, to: usize, payload: Payload) {
        match payload {
            Payload::Consensus(Message::HeartbeatRequest(_)) => self.send(to, from, Payload::ConfigRequest),
            Payload::ConfigResponse(config) => {
                let id = self.members[to].id;
                if config.member(id).is_none() || config.validate().is_err() {
                    return;
                }
                self.checker.on_config_persisted(id, &config);
                self.members[to].persisted_config = Some(config);
                let jitter = self.election_jitter();
                self.start_node(to, jitter);
                self.note(format!("{id} initiated from {}", self.members[from].id));
            }
            _ => {}
        }
    }

    /// The newest configuration any member holds durably.
    pub fn newest_config(&self) -> ReplSetConfig {
        let mut newest = self.config.clone();
        for config in self.members.iter().filter_map(|m| m.persisted_config.as_ref()) {
            if config.version_and_term().is_newer_than(newest.version_and_term()) {
                newest = config.clone();
            }
        }
        newest
    }

    /// Members of `config` that run without holding it.
    pub fn members_missing_config(&self, config: &ReplSetConfig) -> Vec<MemberId> {
        let vt = config.version_and_term();
        config
            .members
            .iter()
            .map(|c| self.index(c.id))
            .filter(|&i| self.members[i].running)
            .filter(|&i| {
                self.members[i]
                    .node
                    .as_ref()
                    .is_none_or(|n| n.config().version_and_term() != vt)
            })
            .map(|i| self.members[i].id)
            .collect()
    }
}
