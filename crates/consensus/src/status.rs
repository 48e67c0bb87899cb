//! Read-only views of a `Node`, for `replSetGetStatus`, `hello`,
//! `serverStatus.repl` and the simulator. Nothing here changes the node.

use crate::config::{MemberId, ReplSetConfig};
use crate::election_metrics::ElectionCandidateMetrics;
use crate::millis::Millis;
use crate::node::{Node, Role};
use crate::state::MemberState;
use slipstream_clock::OpTime;

/// One entry of `replSetGetStatus.members` as this node sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberView {
    /// `_id`.
    pub id: MemberId,
    /// `name`.
    pub host: String,
    /// True for this node's own entry (`self: true`).
    pub is_self: bool,
    /// `state` / `stateStr`: as last reported; UNKNOWN before the first
    /// heartbeat, DOWN when not heard from within an election timeout.
    pub state: MemberState,
    /// `health`: heard from within the silence limit (the heartbeat or the
    /// election timeout, whichever is shorter; always for self).
    pub health: bool,
    /// `lastHeartbeat`: when its last heartbeat response arrived.
    pub last_heartbeat_at: Option<Millis>,
    /// `lastHeartbeatRecv`: when its last heartbeat request arrived.
    pub last_heartbeat_recv_at: Option<Millis>,
    /// `pingMs`: the last heartbeat round trip.
    pub ping_ms: Option<u64>,
    /// `optime`: its last applied entry as best known.
    pub applied: OpTime,
    /// `optimeDate`/`lastAppliedWallTime`.
    pub applied_wall_ms: i64,
    /// `optimeDurable`.
    pub durable: OpTime,
    /// `optimeDurableDate`/`lastDurableWallTime`.
    pub durable_wall_ms: i64,
    /// `syncSourceId` (-1 in MongoDB when `None`).
    pub sync_source: Option<MemberId>,
    /// `configVersion` it last reported (`None`: never heard).
    pub config_version: Option<i64>,
    /// `configTerm` it last reported.
    pub config_term: Option<i64>,
}

impl Node {
    /// This member's `_id`.
    pub fn id(&self) -> MemberId {
        self.me
    }
    /// The configuration in force.
    pub fn config(&self) -> &ReplSetConfig {
        &self.config
    }
    /// Current term.
    pub fn term(&self) -> i64 {
        self.term
    }
    /// Vote cast in the current term.
    pub fn voted_for(&self) -> Option<MemberId> {
        self.voted_for
    }
    /// The member's state as others see it.
    pub fn state(&self) -> MemberState {
        if self.role == Role::Removed {
            return MemberState::Removed;
        }
        if self.rolling_back {
            return MemberState::Rollback;
        }
        if let Some(state) = self.io_state {
            return state;
        }
        match self.role {
            Role::Primary => MemberState::Primary,
            Role::Secondary | Role::Candidate | Role::Removed => MemberState::Secondary,
            Role::Arbiter => MemberState::Arbiter,
        }
    }
    /// True while a real (not dry-run) election of ours is in progress.
    pub fn is_candidate(&self) -> bool {
        self.role == Role::Candidate
    }
    /// True if client writes are accepted now (catch-up over, no stepdown
    /// in progress): the storage write gate is open with `term()`.
    pub fn is_writable_primary(&self) -> bool {
        self.role == Role::Primary && self.writable
    }
    /// Last applied OpTime.
    pub fn last_applied(&self) -> OpTime {
        self.last_applied
    }
    /// Wall-clock date of the last applied entry.
    pub fn last_applied_wall_ms(&self) -> i64 {
        self.last_applied_wall_ms
    }
    /// Last durable OpTime.
    pub fn last_durable(&self) -> OpTime {
        self.last_durable
    }
    /// Wall-clock date of the last durable entry.
    pub fn last_durable_wall_ms(&self) -> i64 {
        self.last_durable_wall_ms
    }
    /// The commit point (`lastCommitted`).
    pub fn commit_point(&self) -> OpTime {
        self.commit_point
    }
    /// The current sync source.
    pub fn sync_source(&self) -> Option<MemberId> {
        self.sync_source
    }
    /// The primary this member believes in, itself included.
    pub fn primary(&self) -> Option<MemberId> {
        if self.role == Role::Primary {
            return Some(self.me);
        }
        self.known_primary_index().map(|i| self.config.members[i].id)
    }
    /// `electionTime`: the first entry of this primary's term, once
    /// appended (`None` before, and on a member that is not primary).
    pub fn election_time(&self) -> Option<OpTime> {
        self.term_start.map(|(optime, _)| optime)
    }
    /// `electionCandidateMetrics`, from the start of a real election until
    /// this member loses it or leaves PRIMARY.
    pub fn election_candidate_metrics(&self) -> Option<&ElectionCandidateMetrics> {
        self.election_metrics.as_ref()
    }
    /// Until when this member will not stand (`replSetFreeze`, stepdown);
    /// `None` once that has passed.
    pub fn frozen_until(&self) -> Option<Millis> {
        (self.no_election_until > self.now).then_some(self.no_election_until)
    }
    /// True in maintenance mode (RECOVERING reported by the I/O layer).
    pub fn in_maintenance(&self) -> bool {
        self.io_state == Some(MemberState::Recovering)
    }
    /// `replSetGetStatus.members`, in configuration order.
    pub fn members(&self) -> Vec<MemberView> {
        (0..self.config.members.len()).map(|i| self.member_view(i)).collect()
    }

    fn member_view(&self, index: usize) -> MemberView {
        let config = &self.config.members[index];
        if Some(index) == self.my_index {
            return MemberView {
                id: config.id,
                host: config.host.clone(),
                is_self: true,
                state: self.state(),
                health: true,
                last_heartbeat_at: None,
                last_heartbeat_recv_at: None,
                ping_ms: None,
                applied: self.last_applied,
                applied_wall_ms: self.last_applied_wall_ms,
                durable: self.last_durable,
                durable_wall_ms: self.last_durable_wall_ms,
                sync_source: self.sync_source,
                config_version: Some(self.config.version),
                config_term: Some(self.config.term),
            };
        }
        let data = &self.members[index];
        let health = self.is_up(index);
        let state = match data.state {
            None => MemberState::Unknown,
            Some(_) if !health => MemberState::Down,
            Some(state) => state,
        };
        let (applied, applied_wall_ms) = if data.applied >= data.seen_applied {
            (data.applied, data.applied_wall_ms)
        } else {
            (data.seen_applied, data.seen_applied_wall_ms)
        };
        MemberView {
            id: config.id,
            host: config.host.clone(),
            is_self: false,
            state,
            health,
            last_heartbeat_at: data.heartbeat_response_at,
            last_heartbeat_recv_at: data.heartbeat_request_at,
            ping_ms: data.rtt_ms,
            applied,
            applied_wall_ms,
            durable: data.durable,
            durable_wall_ms: data.durable_wall_ms,
            sync_source: data.sync_source,
            config_version: data.config.map(|c| c.version),
            config_term: data.config.map(|c| c.term),
        }
    }
}
