//! `ReplSnapshot`: everything the reporting surface shows, captured from the
//! consensus node and the I/O layer in one go, as plain owned data.
//!
//! The coordinator thread owns the `consensus::Node`; readers (hello,
//! replSetGetStatus, serverStatus, the metrics endpoint) must not wait for
//! it. So the coordinator captures a snapshot after each step and
//! publishes it; every document below is a pure function of one snapshot,
//! which also keeps the fields of one reply consistent with each other.

use bson::oid::ObjectId;
use slipstream_clock::{OpTime, Timestamp};
use slipstream_consensus::{ElectionCandidateMetrics, MemberId, MemberState, MemberView, Millis, Node, ReplSetConfig};

/// What the I/O layer knows about one other member that the core does not
/// keep (heartbeat details).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberExtras {
    /// The member's `_id`.
    pub id: MemberId,
    /// When its heartbeats started succeeding again after it was last down
    /// (`uptime` counts from there); `None` while it has never been up.
    pub up_since: Option<Millis>,
    /// `lastHeartbeatMessage`: the error of its last failed heartbeat, or
    /// empty.
    pub last_heartbeat_message: String,
    /// `electionTime` from its last heartbeat response, when it says it is
    /// primary.
    pub election_time: Option<Timestamp>,
}

/// The parts of a snapshot that come from the I/O layer rather than the
/// consensus core: identity of the process, clocks, storage positions.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotExtras {
    /// This member's `host:port` as its configuration names it (`me`).
    pub me_host: String,
    /// The rollback id (`replSetGetRBID`), raised by every rollback.
    pub rbid: i32,
    /// `topologyVersion.counter`: moves on every state change drivers care about.
    pub topology_version_counter: i64,
    /// `topologyVersion.processId`: fixed for the life of the process.
    pub process_id: ObjectId,
    /// When the process started, in wall-clock ms since the epoch (`uptime`).
    pub started_at_wall_ms: i64,
    /// The wall clock now, ms since the epoch (`date`).
    pub now_wall_ms: i64,
    /// The monotonic clock now, the same instant as `now_wall_ms`: turns
    /// the core's `Millis` into dates.
    pub now: Millis,
    /// `host:port` of the member the fetcher pulls from, as the fetcher
    /// sees it (`None` when not fetching).
    pub sync_source_host: Option<String>,
    /// This member's own `infoMessage` (e.g. why it has no sync source).
    pub info_message: String,
    /// Heartbeat details of the other members, any order.
    pub members: Vec<MemberExtras>,
    /// The storage engine's last applied entry and its wall date.
    pub applied: (OpTime, i64),
    /// The storage engine's last durable entry and its wall date.
    pub durable: (OpTime, i64),
    /// Where majority reads read now (the committed snapshot): the commit
    /// point once applied here; `OpTime::NULL` before there is one.
    pub read_concern_majority: OpTime,
    /// The wall date of the commit point's entry, when the I/O layer knows
    /// it; otherwise it is taken from a member position equal to the
    /// commit point, else from its timestamp's seconds.
    pub commit_point_wall_ms: Option<i64>,
    /// `lastStableRecoveryTimestamp`: the checkpoint recovery would start from.
    pub last_stable_recovery_timestamp: Option<Timestamp>,
    /// True once shutdown has begun (hello then reports neither primary
    /// nor secondary, as MongoDB does).
    pub in_shutdown: bool,
}

/// What the consensus core says, for a member that holds a configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SetView {
    /// The configuration in force.
    pub config: ReplSetConfig,
    /// This member's `_id` (absent from `config` when REMOVED).
    pub me: MemberId,
    /// This member's state.
    pub state: MemberState,
    /// The current term.
    pub term: i64,
    /// True when client writes are accepted (catch-up and drain over).
    pub writable_primary: bool,
    /// The primary this member believes in, itself included.
    pub primary: Option<MemberId>,
    /// The commit point.
    pub commit_point: OpTime,
    /// The sync source the core chose.
    pub sync_source: Option<MemberId>,
    /// The first entry of this primary's term.
    pub election_time: Option<OpTime>,
    /// `electionCandidateMetrics` of this member's last election, while it
    /// stands or is primary.
    pub election_metrics: Option<ElectionCandidateMetrics>,
    /// True in maintenance mode.
    pub in_maintenance: bool,
    /// Every member in configuration order, this one included.
    pub members: Vec<MemberView>,
}

/// One consistent view of the member, for every report.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplSnapshot {
    /// The I/O layer's part.
    pub extras: SnapshotExtras,
    /// The core's part; `None` before the member has a configuration
    /// (started with `--replSet`, not yet initiated).
    pub set: Option<SetView>,
}

impl ReplSnapshot {
    /// Captures the node's view. Costs a copy of the configuration and one
    /// `MemberView` per member: no locks, no I/O.
    pub fn capture(node: &Node, extras: SnapshotExtras) -> ReplSnapshot {
        let set = SetView {
            config: node.config().clone(),
            me: node.id(),
            state: node.state(),
            term: node.term(),
            writable_primary: node.is_writable_primary(),
            primary: node.primary(),
            commit_point: node.commit_point(),
            sync_source: node.sync_source(),
            election_time: node.election_time(),
            election_metrics: node.election_candidate_metrics().cloned(),
            in_maintenance: node.in_maintenance(),
            members: node.members(),
        };
        ReplSnapshot { extras, set: Some(set) }
    }

    /// A member started with `--replSet` that holds no configuration yet.
    pub fn uninitialized(extras: SnapshotExtras) -> ReplSnapshot {
        ReplSnapshot { extras, set: None }
    }

    /// The wall-clock date (ms since the epoch) of an instant of the
    /// core's monotonic clock, through the snapshot's (`now`, `now_wall_ms`) pair.
    pub fn wall_ms_at(&self, at: Millis) -> i64 {
        let ago_ms = self.extras.now.0 as i64 - at.0 as i64;
        self.extras.now_wall_ms - ago_ms
    }

    /// The configuration's entry for this member; `None` when REMOVED or
    /// uninitialized.
    pub fn self_config(&self) -> Option<&slipstream_consensus::MemberConfig> {
        let set = self.set.as_ref()?;
        set.config.member(set.me).filter(|_| set.state != MemberState::Removed)
    }

    /// The host of the member with `_id` `id` in the configuration.
    pub fn host_of(&self, id: MemberId) -> Option<&str> {
        let set = self.set.as_ref()?;
        set.config.member(id).map(|m| m.host.as_str())
    }

    /// Heartbeat details the I/O layer gave for `id`.
    pub fn member_extras(&self, id: MemberId) -> Option<&MemberExtras> {
        self.extras.members.iter().find(|m| m.id == id)
    }

    /// The wall date of the commit point's entry: given by the I/O layer,
    /// else a member position at exactly the commit point, else its
    /// timestamp's seconds (oplog timestamps are wall seconds).
    pub fn commit_point_wall_ms(&self) -> i64 {
        if let Some(wall) = self.extras.commit_point_wall_ms {
            return wall;
        }
        let Some(set) = self.set.as_ref() else {
            return 0;
        };
        let commit = set.commit_point;
        let known = [self.extras.applied, self.extras.durable].into_iter().chain(
            set.members
                .iter()
                .flat_map(|m| [(m.applied, m.applied_wall_ms), (m.durable, m.durable_wall_ms)]),
        );
        for (op, wall) in known {
            if op == commit && !op.is_null() {
                return wall;
            }
        }
        i64::from(commit.ts.secs) * 1000
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use slipstream_consensus::{MemberConfig, OplogPositions, Persisted};

    /// A wall clock reading used by every test: 2024-01-23T04:45:19.803Z.
    pub const NOW_WALL_MS: i64 = 1_705_985_119_803;

    pub fn extras(me: &str) -> SnapshotExtras {
        SnapshotExtras {
            me_host: me.to_string(),
            rbid: 7,
            topology_version_counter: 3,
            process_id: ObjectId::from_bytes([1; 12]),
            started_at_wall_ms: NOW_WALL_MS - 663_000,
            now_wall_ms: NOW_WALL_MS,
            now: Millis(50_000),
            sync_source_host: None,
            info_message: String::new(),
            members: Vec::new(),
            applied: (OpTime::new(Timestamp::new(1_705_985_113, 5), 1), 1_705_985_113_319),
            durable: (OpTime::new(Timestamp::new(1_705_985_113, 4), 1), 1_705_985_113_300),
            read_concern_majority: OpTime::new(Timestamp::new(1_705_985_113, 2), 1),
            commit_point_wall_ms: None,
            last_stable_recovery_timestamp: None,
            in_shutdown: false,
        }
    }

    pub fn three_members() -> ReplSetConfig {
        ReplSetConfig::new(
            "rs1",
            vec![
                MemberConfig::new(0, "a:27017"),
                MemberConfig::new(1, "b:27017"),
                MemberConfig::new(2, "c:27017"),
            ],
        )
    }

    pub fn node(config: ReplSetConfig, me: MemberId) -> Node {
        let positions = OplogPositions::at(OpTime::new(Timestamp::new(1_705_985_000, 1), -1), 1_705_985_000_000);
        Node::new(
            config,
            me,
            Persisted {
                term: 0,
                voted_for: None,
            },
            positions,
            0,
            Millis(0),
        )
        .expect("valid config")
    }

    #[test]
    fn capture_copies_the_node_view() {
        let node = node(three_members(), 1);
        let snapshot = ReplSnapshot::capture(&node, extras("b:27017"));
        let set = snapshot.set.as_ref().expect("configured");
        assert_eq!(set.me, 1);
        assert_eq!(set.state, MemberState::Secondary);
        assert_eq!(set.term, 0);
        assert_eq!(set.members.len(), 3);
        assert!(set.members[1].is_self);
        assert_eq!(snapshot.self_config().map(|m| m.host.as_str()), Some("b:27017"));
        assert_eq!(snapshot.host_of(2), Some("c:27017"));
    }

    #[test]
    fn removed_member_has_no_self_config() {
        let node = node(three_members(), 9);
        let snapshot = ReplSnapshot::capture(&node, extras("z:27017"));
        assert_eq!(snapshot.set.as_ref().map(|s| s.state), Some(MemberState::Removed));
        assert!(snapshot.self_config().is_none());
    }

    #[test]
    fn monotonic_instants_become_wall_dates() {
        let snapshot = ReplSnapshot::uninitialized(extras("a:1"));
        assert_eq!(snapshot.wall_ms_at(Millis(50_000)), NOW_WALL_MS);
        assert_eq!(snapshot.wall_ms_at(Millis(48_500)), NOW_WALL_MS - 1_500);
        assert_eq!(snapshot.wall_ms_at(Millis(51_000)), NOW_WALL_MS + 1_000);
    }

    #[test]
    fn commit_point_wall_date_falls_back_to_positions_then_seconds() {
        let node = node(three_members(), 0);
        let mut snapshot = ReplSnapshot::capture(&node, extras("a:27017"));
        let set = snapshot.set.as_mut().expect("configured");
        set.commit_point = snapshot.extras.durable.0;
        assert_eq!(snapshot.commit_point_wall_ms(), 1_705_985_113_300);
        snapshot.set.as_mut().expect("configured").commit_point = OpTime::new(Timestamp::new(1_705_985_100, 9), 1);
        assert_eq!(snapshot.commit_point_wall_ms(), 1_705_985_100_000);
        snapshot.extras.commit_point_wall_ms = Some(42);
        assert_eq!(snapshot.commit_point_wall_ms(), 42);
    }
}
