//! `Snapshot`: what the coordinator published after its last step, read by
//! `hello`, the access checks, read concerns and the status commands
//! without touching the coordinator's thread. The coordinator is its only
//! writer; everything here is a copy.

use std::sync::Arc;

use slipstream_clock::OpTime;
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{ElectionCandidateMetrics, MemberState, MemberView, Millis};

/// What `topologyVersion.counter` moves with: state, whether writable
/// (a primary catching up or stepping down answers `hello` as a
/// secondary), primary, configuration version and term, and term.
pub type TopologyKey = (MemberState, bool, Option<MemberId>, i64, i64, i64);

#[derive(Clone, Debug)]
pub struct Snapshot {
    /// `None` until `replSetInitiate` or a configuration learned by heartbeat.
    /// Shared between snapshots until the configuration changes.
    pub config: Option<Arc<ReplSetConfig>>,
    /// This member's `_id` in `config` (`None` when not in it: REMOVED).
    pub me: Option<MemberId>,
    pub state: MemberState,
    pub term: i64,
    pub writable_primary: bool,
    pub primary: Option<MemberId>,
    /// `topologyVersion.counter` of this state (`Shared::topology` moves
    /// to it right after the snapshot is published).
    pub topology_counter: i64,
    pub commit_point: OpTime,
    pub last_applied: OpTime,
    pub last_applied_wall_ms: i64,
    pub last_durable: OpTime,
    pub last_durable_wall_ms: i64,
    pub sync_source: Option<MemberId>,
    pub members: Vec<MemberView>,
    pub election_time: Option<OpTime>,
    pub election_metrics: Option<ElectionCandidateMetrics>,
    pub frozen_until: Option<Millis>,
    pub in_maintenance: bool,
    pub config_committed: bool,
    /// The coordinator's clock when this was taken.
    pub now: Millis,
}

impl Snapshot {
    /// A member that has no configuration yet (STARTUP).
    pub fn uninitialized() -> Snapshot {
        Snapshot {
            config: None,
            me: None,
            state: MemberState::Startup,
            term: 0,
            writable_primary: false,
            primary: None,
            topology_counter: 1,
            commit_point: OpTime::NULL,
            last_applied: OpTime::NULL,
            last_applied_wall_ms: 0,
            last_durable: OpTime::NULL,
            last_durable_wall_ms: 0,
            sync_source: None,
            members: Vec::new(),
            election_time: None,
            election_metrics: None,
            frozen_until: None,
            in_maintenance: false,
            config_committed: false,
            now: Millis(0),
        }
    }

    pub fn host_of(&self, id: MemberId) -> Option<&str> {
        self.config.as_ref()?.member(id).map(|m| m.host.as_str())
    }

    pub fn my_host(&self) -> Option<&str> {
        self.host_of(self.me?)
    }

    pub fn primary_host(&self) -> Option<&str> {
        self.host_of(self.primary?)
    }

    /// What drivers see change (`TopologyKey`).
    pub fn topology_key(&self) -> TopologyKey {
        let (version, config_term) = self.config.as_ref().map_or((0, 0), |c| (c.version, c.term));
        (self.state, self.writable_primary, self.primary, version, config_term, self.term)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A primary that stops accepting writes (a stepdown waiting for a
    /// secondary to catch up) answers `hello` as a secondary: drivers must
    /// see a new counter, or they take its NotWritablePrimary errors, which
    /// carry the counter, for stale news and retry on it.
    #[test]
    fn the_counter_moves_when_a_primary_stops_accepting_writes() {
        let mut writable = Snapshot::uninitialized();
        writable.state = MemberState::Primary;
        writable.writable_primary = true;
        let mut stepping_down = writable.clone();
        stepping_down.writable_primary = false;
        assert_ne!(writable.topology_key(), stepping_down.topology_key());
    }
}
