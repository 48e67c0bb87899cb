//! `Snapshot`: what the coordinator published after its last step, read by
//! `hello`, the access checks, read concerns and the status commands
//! without touching the coordinator's thread. The coordinator is its only
//! writer; everything here is a copy.

use std::sync::Arc;

use slipstream_clock::OpTime;
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{ElectionCandidateMetrics, MemberState, MemberView, Millis};

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

    /// What drivers see change: state, primary, configuration.
    pub fn topology_key(&self) -> (MemberState, Option<MemberId>, i64, i64, i64) {
        let (version, config_term) = self.config.as_ref().map_or((0, 0), |c| (c.version, c.term));
        (self.state, self.primary, version, config_term, self.term)
    }
}
