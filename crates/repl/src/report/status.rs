//! `replSetGetStatus` in MongoDB 7.0's shape (what mongosh's `rs.status()`
//! prints): field names, order and BSON types as `TopologyCoordinator::
//! prepareStatusResponse` writes them.
//!
//! Types worth knowing: `term` and `heartbeatIntervalMillis` are longs, the
//! counts and `myState` ints, `health` a double (-1 before the first
//! heartbeat answer, 0 down, 1 up), `pingMs` a long, `configVersion` /
//! `configTerm` "appendNumber" ints, `optimeDate`/`electionDate` the
//! timestamp's whole seconds while `lastAppliedWallTime` and friends are
//! the entries' own wall dates.

use bson::{doc, Bson, Document};
use slipstream_consensus::{ElectionCandidateMetrics, MemberState, MemberView};

use super::snapshot::{ReplSnapshot, SetView};
use super::{append_number, date, op_time_document, timestamp_date};
use crate::error::ReplError;

/// What MongoDB prints as the state of a member it cannot reach.
const UNREACHABLE_STATE_STR: &str = "(not reachable/healthy)";

/// The `replSetGetStatus` reply (without `ok`). A member without a
/// configuration answers NotYetInitialized (94); a REMOVED member
/// InvalidReplicaSetConfig (93), as MongoDB does.
pub fn status_document(snapshot: &ReplSnapshot) -> Result<Document, ReplError> {
    let Some(set) = snapshot.set.as_ref() else {
        return Err(ReplError::NotYetInitialized);
    };
    if set.state == MemberState::Removed {
        return Err(ReplError::InvalidReplicaSetConfig(
            "Our replica set config is invalid or we are not a member of it".to_string(),
        ));
    }
    let mut reply = Document::new();
    reply.insert("set", set.config.set_name.clone());
    reply.insert("date", date(snapshot.extras.now_wall_ms));
    reply.insert("myState", i32::from(set.state.code()));
    reply.insert("term", set.term);
    let (source_host, source_id) = own_sync_source(snapshot, set);
    reply.insert("syncSourceHost", source_host);
    reply.insert("syncSourceId", source_id);
    reply.insert(
        "heartbeatIntervalMillis",
        set.config.settings.heartbeat_interval_ms as i64,
    );
    insert_counts(&mut reply, set);
    reply.insert("optimes", optimes_document(snapshot, set));
    if let Some(ts) = snapshot.extras.last_stable_recovery_timestamp {
        reply.insert("lastStableRecoveryTimestamp", slipstream_storage::bson_timestamp(ts));
    }
    if let Some(metrics) = &set.election_metrics {
        reply.insert(
            "electionCandidateMetrics",
            election_candidate_metrics(snapshot, metrics),
        );
    }
    reply.insert("members", members_array(snapshot, set));
    Ok(reply)
}

/// This member's sync source as `(syncSourceHost, syncSourceId)`: the host
/// the fetcher pulls from (else the core's choice), `("", -1)` on a primary
/// or without one.
fn own_sync_source(snapshot: &ReplSnapshot, set: &SetView) -> (String, i32) {
    if set.state == MemberState::Primary {
        return (String::new(), -1);
    }
    let host = snapshot
        .extras
        .sync_source_host
        .clone()
        .or_else(|| set.sync_source.and_then(|id| snapshot.host_of(id)).map(str::to_string));
    match host {
        Some(host) => {
            let id = set
                .config
                .members
                .iter()
                .find(|m| m.host == host)
                .map_or(-1, |m| m.id as i32);
            (host, id)
        }
        None => (String::new(), -1),
    }
}

/// `majorityVoteCount`, `writeMajorityCount`, `votingMembersCount`,
/// `writableVotingMembersCount` (data-bearing voters).
fn insert_counts(reply: &mut Document, set: &SetView) {
    let config = &set.config;
    let writable_voters = config
        .members
        .iter()
        .filter(|m| m.is_voter() && m.is_data_bearing())
        .count();
    reply.insert("majorityVoteCount", config.majority() as i32);
    reply.insert("writeMajorityCount", config.write_majority() as i32);
    reply.insert("votingMembersCount", config.voter_count() as i32);
    reply.insert("writableVotingMembersCount", writable_voters as i32);
}

fn optimes_document(snapshot: &ReplSnapshot, set: &SetView) -> Document {
    let extras = &snapshot.extras;
    let commit_wall = if set.commit_point.is_null() {
        0
    } else {
        snapshot.commit_point_wall_ms()
    };
    let mut optimes = doc! {
        "lastCommittedOpTime": op_time_document(set.commit_point),
        "lastCommittedWallTime": date(commit_wall),
    };
    if !extras.read_concern_majority.is_null() {
        optimes.insert(
            "readConcernMajorityOpTime",
            op_time_document(extras.read_concern_majority),
        );
    }
    optimes.insert("appliedOpTime", op_time_document(extras.applied.0));
    optimes.insert("durableOpTime", op_time_document(extras.durable.0));
    optimes.insert("lastAppliedWallTime", date(extras.applied.1));
    optimes.insert("lastDurableWallTime", date(extras.durable.1));
    optimes
}

/// `electionCandidateMetrics` (MongoDB's `ElectionCandidateMetrics` IDL);
/// optional fields only once known.
fn election_candidate_metrics(snapshot: &ReplSnapshot, metrics: &ElectionCandidateMetrics) -> Document {
    let mut out = doc! {
        "lastElectionReason": metrics.reason.name(),
        "lastElectionDate": date(snapshot.wall_ms_at(metrics.started_at)),
        "electionTerm": metrics.term,
        "lastCommittedOpTimeAtElection": op_time_document(metrics.last_committed_at_election),
        "lastSeenOpTimeAtElection": op_time_document(metrics.last_applied_at_election),
        "numVotesNeeded": metrics.votes_needed as i32,
        "priorityAtElection": metrics.priority_at_election,
        "electionTimeoutMillis": metrics.election_timeout_ms as i64,
    };
    if let Some(prior) = metrics.prior_primary {
        out.insert("priorPrimaryMemberId", prior as i32);
    }
    if let Some(target) = metrics.target_catch_up {
        out.insert("targetCatchupOpTime", op_time_document(target));
    }
    if let Some((_, wall_ms)) = metrics.new_term_start {
        out.insert("newTermStartDate", date(wall_ms));
    }
    if let Some(at) = metrics.w_majority_available_at {
        out.insert("wMajorityWriteAvailabilityDate", date(snapshot.wall_ms_at(at)));
    }
    out
}

/// `members[]`, sorted as MongoDB sorts them (by `_id`, their first field).
fn members_array(snapshot: &ReplSnapshot, set: &SetView) -> Vec<Bson> {
    let mut members: Vec<&MemberView> = set.members.iter().collect();
    members.sort_by_key(|m| m.id);
    members
        .into_iter()
        .map(|m| {
            let entry = if m.is_self {
                self_entry(snapshot, set, m)
            } else {
                other_entry(snapshot, set, m)
            };
            Bson::Document(entry)
        })
        .collect()
}

fn is_arbiter(set: &SetView, view: &MemberView) -> bool {
    set.config.member(view.id).is_some_and(|m| m.arbiter_only)
}

fn self_entry(snapshot: &ReplSnapshot, set: &SetView, view: &MemberView) -> Document {
    let extras = &snapshot.extras;
    let uptime_secs = (extras.now_wall_ms - extras.started_at_wall_ms).max(0) / 1000;
    let mut entry = doc! {
        "_id": view.id as i32,
        "name": view.host.clone(),
        "health": 1.0,
        "state": i32::from(set.state.code()),
        "stateStr": set.state.name(),
        "uptime": uptime_secs as i32,
    };
    if !is_arbiter(set, view) {
        entry.insert("optime", op_time_document(extras.applied.0));
        entry.insert("optimeDate", timestamp_date(extras.applied.0.ts));
        entry.insert("lastAppliedWallTime", date(extras.applied.1));
        entry.insert("lastDurableWallTime", date(extras.durable.1));
    }
    let (source_host, source_id) = own_sync_source(snapshot, set);
    entry.insert("syncSourceHost", source_host);
    entry.insert("syncSourceId", source_id);
    if set.in_maintenance {
        entry.insert("maintenanceMode", 1);
    }
    entry.insert("infoMessage", extras.info_message.clone());
    if set.state == MemberState::Primary {
        if let Some(election) = set.election_time {
            entry.insert("electionTime", slipstream_storage::bson_timestamp(election.ts));
            entry.insert("electionDate", timestamp_date(election.ts));
        }
    }
    entry.insert("configVersion", append_number(set.config.version));
    entry.insert("configTerm", append_number(set.config.term));
    entry.insert("self", true);
    entry.insert("lastHeartbeatMessage", "");
    entry
}

/// `health`: -1 before any heartbeat answer, then 1 up / 0 down.
fn health(view: &MemberView) -> f64 {
    match (view.state, view.health) {
        (MemberState::Unknown, _) => -1.0,
        (_, true) => 1.0,
        (_, false) => 0.0,
    }
}

fn other_entry(snapshot: &ReplSnapshot, set: &SetView, view: &MemberView) -> Document {
    let extras = snapshot.member_extras(view.id);
    let health = health(view);
    let state_str = if health == 0.0 {
        UNREACHABLE_STATE_STR
    } else {
        view.state.name()
    };
    let uptime_secs = match extras.and_then(|e| e.up_since) {
        Some(since) if view.health => snapshot.extras.now.since(since) / 1000,
        _ => 0,
    };
    let mut entry = doc! {
        "_id": view.id as i32,
        "name": view.host.clone(),
        "health": health,
        "state": i32::from(view.state.code()),
        "stateStr": state_str,
        "uptime": uptime_secs as i32,
    };
    if !is_arbiter(set, view) {
        entry.insert("optime", op_time_document(view.applied));
        entry.insert("optimeDurable", op_time_document(view.durable));
        entry.insert("optimeDate", timestamp_date(view.applied.ts));
        entry.insert("optimeDurableDate", timestamp_date(view.durable.ts));
        entry.insert("lastAppliedWallTime", date(view.applied_wall_ms));
        entry.insert("lastDurableWallTime", date(view.durable_wall_ms));
    }
    let heard = |at: Option<_>| date(at.map_or(0, |at| snapshot.wall_ms_at(at)));
    entry.insert("lastHeartbeat", heard(view.last_heartbeat_at));
    entry.insert("lastHeartbeatRecv", heard(view.last_heartbeat_recv_at));
    entry.insert("pingMs", view.ping_ms.unwrap_or(0) as i64);
    entry.insert(
        "lastHeartbeatMessage",
        extras.map_or(String::new(), |e| e.last_heartbeat_message.clone()),
    );
    let source = view.sync_source.filter(|_| view.state != MemberState::Primary);
    match source.and_then(|id| snapshot.host_of(id)) {
        Some(host) => {
            entry.insert("syncSourceHost", host);
            entry.insert("syncSourceId", source.map_or(-1, |id| id as i32));
        }
        None => {
            entry.insert("syncSourceHost", "");
            entry.insert("syncSourceId", -1);
        }
    }
    entry.insert("infoMessage", "");
    if view.state == MemberState::Primary {
        if let Some(election) = extras.and_then(|e| e.election_time) {
            entry.insert("electionTime", slipstream_storage::bson_timestamp(election));
            entry.insert("electionDate", timestamp_date(election));
        }
    }
    entry.insert("configVersion", append_number(view.config_version.unwrap_or(-1)));
    entry.insert("configTerm", append_number(view.config_term.unwrap_or(-1)));
    entry
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::tests::{extras, node, three_members, NOW_WALL_MS};
    use super::super::snapshot::MemberExtras;
    use super::*;
    use bson::{DateTime, Timestamp as BsonTimestamp};
    use slipstream_clock::{OpTime, Timestamp};
    use slipstream_consensus::{
        ElectionReason, Event, MemberConfig, Millis, Node, OplogPositions, Persisted, ReplSetConfig,
    };

    fn dt(ms: i64) -> DateTime {
        DateTime::from_millis(ms)
    }

    fn keys(document: &Document) -> Vec<&str> {
        document.keys().map(String::as_str).collect()
    }

    /// A secondary of three whose view of the others is set by hand.
    fn secondary_snapshot() -> ReplSnapshot {
        let node = node(three_members(), 1);
        let mut snapshot = ReplSnapshot::capture(&node, extras("b:27017"));
        let set = snapshot.set.as_mut().expect("configured");
        set.term = 4;
        set.primary = Some(0);
        set.sync_source = Some(0);
        set.commit_point = OpTime::new(Timestamp::new(1_705_985_113, 2), 4);
        let primary = &mut set.members[0];
        primary.state = MemberState::Primary;
        primary.health = true;
        primary.applied = OpTime::new(Timestamp::new(1_705_985_113, 5), 4);
        primary.applied_wall_ms = 1_705_985_113_319;
        primary.durable = OpTime::new(Timestamp::new(1_705_985_113, 2), 4);
        primary.durable_wall_ms = 1_705_985_113_100;
        primary.last_heartbeat_at = Some(Millis(49_000));
        primary.last_heartbeat_recv_at = Some(Millis(49_500));
        primary.ping_ms = Some(3);
        primary.config_version = Some(1);
        primary.config_term = Some(4);
        let down = &mut set.members[2];
        down.state = MemberState::Down;
        down.health = false;
        snapshot.extras.sync_source_host = Some("a:27017".to_string());
        snapshot.extras.members = vec![MemberExtras {
            id: 0,
            up_since: Some(Millis(20_000)),
            last_heartbeat_message: String::new(),
            election_time: Some(Timestamp::new(1_705_985_000, 1)),
        }];
        snapshot
    }

    #[test]
    fn top_level_fields_in_mongodb_order_and_types() {
        let reply = status_document(&secondary_snapshot()).expect("status");
        assert_eq!(
            keys(&reply),
            [
                "set",
                "date",
                "myState",
                "term",
                "syncSourceHost",
                "syncSourceId",
                "heartbeatIntervalMillis",
                "majorityVoteCount",
                "writeMajorityCount",
                "votingMembersCount",
                "writableVotingMembersCount",
                "optimes",
                "members"
            ]
        );
        assert_eq!(reply.get_str("set").ok(), Some("rs1"));
        assert_eq!(reply.get("date"), Some(&Bson::DateTime(dt(NOW_WALL_MS))));
        assert_eq!(reply.get("myState"), Some(&Bson::Int32(2)));
        assert_eq!(reply.get("term"), Some(&Bson::Int64(4)));
        assert_eq!(reply.get_str("syncSourceHost").ok(), Some("a:27017"));
        assert_eq!(reply.get("syncSourceId"), Some(&Bson::Int32(0)));
        assert_eq!(reply.get("heartbeatIntervalMillis"), Some(&Bson::Int64(2000)));
        assert_eq!(reply.get("majorityVoteCount"), Some(&Bson::Int32(2)));
        assert_eq!(reply.get("writeMajorityCount"), Some(&Bson::Int32(2)));
        assert_eq!(reply.get("votingMembersCount"), Some(&Bson::Int32(3)));
        assert_eq!(reply.get("writableVotingMembersCount"), Some(&Bson::Int32(3)));
    }

    #[test]
    fn optimes_carry_commit_point_storage_positions_and_wall_dates() {
        let reply = status_document(&secondary_snapshot()).expect("status");
        let optimes = reply.get_document("optimes").expect("optimes");
        assert_eq!(
            keys(optimes),
            [
                "lastCommittedOpTime",
                "lastCommittedWallTime",
                "readConcernMajorityOpTime",
                "appliedOpTime",
                "durableOpTime",
                "lastAppliedWallTime",
                "lastDurableWallTime"
            ]
        );
        let committed = optimes.get_document("lastCommittedOpTime").expect("committed");
        assert_eq!(committed.get("t"), Some(&Bson::Int64(4)));
        assert_eq!(
            committed.get_timestamp("ts").ok(),
            Some(BsonTimestamp {
                time: 1_705_985_113,
                increment: 2
            })
        );
        // The commit point equals the primary's durable position: its date.
        assert_eq!(
            optimes.get_datetime("lastCommittedWallTime").ok(),
            Some(&dt(1_705_985_113_100))
        );
        let applied = optimes.get_document("appliedOpTime").expect("applied");
        assert_eq!(
            applied.get_timestamp("ts").ok(),
            Some(BsonTimestamp {
                time: 1_705_985_113,
                increment: 5
            })
        );
        assert_eq!(
            optimes.get_datetime("lastAppliedWallTime").ok(),
            Some(&dt(1_705_985_113_319))
        );
        assert_eq!(
            optimes.get_datetime("lastDurableWallTime").ok(),
            Some(&dt(1_705_985_113_300))
        );
    }

    #[test]
    fn self_member_entry_has_no_heartbeat_fields() {
        let reply = status_document(&secondary_snapshot()).expect("status");
        let members = reply.get_array("members").expect("members");
        let me = members[1].as_document().expect("doc");
        assert_eq!(
            keys(me),
            [
                "_id",
                "name",
                "health",
                "state",
                "stateStr",
                "uptime",
                "optime",
                "optimeDate",
                "lastAppliedWallTime",
                "lastDurableWallTime",
                "syncSourceHost",
                "syncSourceId",
                "infoMessage",
                "configVersion",
                "configTerm",
                "self",
                "lastHeartbeatMessage"
            ]
        );
        assert_eq!(me.get("_id"), Some(&Bson::Int32(1)));
        assert_eq!(me.get("health"), Some(&Bson::Double(1.0)));
        assert_eq!(me.get_str("stateStr").ok(), Some("SECONDARY"));
        assert_eq!(me.get("uptime"), Some(&Bson::Int32(663)));
        assert_eq!(me.get_datetime("optimeDate").ok(), Some(&dt(1_705_985_113_000)));
        assert_eq!(me.get("configVersion"), Some(&Bson::Int32(1)));
        assert_eq!(me.get("configTerm"), Some(&Bson::Int32(0)));
        assert_eq!(me.get_bool("self").ok(), Some(true));
    }

    #[test]
    fn other_members_show_heartbeats_dates_and_health() {
        let reply = status_document(&secondary_snapshot()).expect("status");
        let members = reply.get_array("members").expect("members");
        let primary = members[0].as_document().expect("doc");
        assert_eq!(primary.get("health"), Some(&Bson::Double(1.0)));
        assert_eq!(primary.get("state"), Some(&Bson::Int32(1)));
        assert_eq!(primary.get_str("stateStr").ok(), Some("PRIMARY"));
        assert_eq!(primary.get("uptime"), Some(&Bson::Int32(30)));
        assert_eq!(
            primary.get_datetime("optimeDurableDate").ok(),
            Some(&dt(1_705_985_113_000))
        );
        assert_eq!(
            primary.get_datetime("lastDurableWallTime").ok(),
            Some(&dt(1_705_985_113_100))
        );
        assert_eq!(
            primary.get_datetime("lastHeartbeat").ok(),
            Some(&dt(NOW_WALL_MS - 1_000))
        );
        assert_eq!(
            primary.get_datetime("lastHeartbeatRecv").ok(),
            Some(&dt(NOW_WALL_MS - 500))
        );
        assert_eq!(primary.get("pingMs"), Some(&Bson::Int64(3)));
        // A primary has no sync source; its election shows up from its heartbeat.
        assert_eq!(primary.get_str("syncSourceHost").ok(), Some(""));
        assert_eq!(primary.get("syncSourceId"), Some(&Bson::Int32(-1)));
        assert_eq!(
            primary.get_timestamp("electionTime").ok(),
            Some(BsonTimestamp {
                time: 1_705_985_000,
                increment: 1
            })
        );
        assert_eq!(primary.get_datetime("electionDate").ok(), Some(&dt(1_705_985_000_000)));
        assert_eq!(primary.get("configTerm"), Some(&Bson::Int32(4)));
        assert!(primary.get("self").is_none());

        let down = members[2].as_document().expect("doc");
        assert_eq!(down.get("health"), Some(&Bson::Double(0.0)));
        assert_eq!(down.get("state"), Some(&Bson::Int32(8)));
        assert_eq!(down.get_str("stateStr").ok(), Some("(not reachable/healthy)"));
        assert_eq!(down.get("uptime"), Some(&Bson::Int32(0)));
        assert_eq!(down.get_datetime("lastHeartbeat").ok(), Some(&dt(0)));
        assert_eq!(down.get("configVersion"), Some(&Bson::Int32(-1)));
    }

    #[test]
    fn never_heard_member_has_health_minus_one() {
        let node = node(three_members(), 0);
        let reply = status_document(&ReplSnapshot::capture(&node, extras("a:27017"))).expect("status");
        let members = reply.get_array("members").expect("members");
        let unknown = members[1].as_document().expect("doc");
        assert_eq!(unknown.get("health"), Some(&Bson::Double(-1.0)));
        assert_eq!(unknown.get_str("stateStr").ok(), Some("UNKNOWN"));
        assert_eq!(unknown.get("state"), Some(&Bson::Int32(6)));
    }

    #[test]
    fn members_are_sorted_by_id_and_arbiters_have_no_optimes() {
        let mut config = ReplSetConfig::new(
            "rs",
            vec![
                MemberConfig::new(5, "e:1"),
                MemberConfig::new(2, "b:1"),
                MemberConfig {
                    arbiter_only: true,
                    priority: 0.0,
                    ..MemberConfig::new(3, "arb:1")
                },
            ],
        );
        config.version = 3;
        let node = node(config, 5);
        let reply = status_document(&ReplSnapshot::capture(&node, extras("e:1"))).expect("status");
        let ids: Vec<i32> = reply
            .get_array("members")
            .expect("members")
            .iter()
            .map(|m| m.as_document().and_then(|d| d.get_i32("_id").ok()).expect("_id"))
            .collect();
        assert_eq!(ids, [2, 3, 5]);
        let arbiter = reply.get_array("members").expect("members")[1]
            .as_document()
            .expect("doc")
            .clone();
        assert!(arbiter.get("optime").is_none());
        assert!(arbiter.get("lastHeartbeat").is_some());
        assert_eq!(reply.get("writableVotingMembersCount"), Some(&Bson::Int32(2)));
        assert_eq!(reply.get("votingMembersCount"), Some(&Bson::Int32(3)));
        assert_eq!(reply.get("writeMajorityCount"), Some(&Bson::Int32(2)));
    }

    #[test]
    fn a_primary_shows_its_election_and_candidate_metrics() {
        let config = ReplSetConfig::new("solo", vec![MemberConfig::new(0, "a:1")]);
        let positions = OplogPositions::at(OpTime::new(Timestamp::new(1_705_985_000, 1), -1), 1_705_985_000_000);
        let mut node = Node::new(
            config,
            0,
            Persisted {
                term: 0,
                voted_for: None,
            },
            positions,
            0,
            Millis(0),
        )
        .expect("valid config");
        node.step(Event::Tick { election_jitter_ms: 0 }, Millis(10));
        let noop = OpTime::new(Timestamp::new(1_705_985_112, 1), 1);
        node.step(
            Event::Appended {
                last_applied: noop,
                wall_ms: 1_705_985_112_343,
            },
            Millis(20),
        );
        node.step(
            Event::Durable {
                last_durable: noop,
                wall_ms: 1_705_985_112_343,
            },
            Millis(30),
        );
        assert_eq!(node.state(), MemberState::Primary);
        let mut extras = extras("a:1");
        extras.now = Millis(1_000);
        extras.applied = (noop, 1_705_985_112_343);
        extras.durable = (noop, 1_705_985_112_343);
        extras.sync_source_host = Some("stale:1".to_string());
        let reply = status_document(&ReplSnapshot::capture(&node, extras)).expect("status");
        assert_eq!(reply.get("myState"), Some(&Bson::Int32(1)));
        assert_eq!(
            reply.get_str("syncSourceHost").ok(),
            Some(""),
            "a primary has no sync source"
        );
        let metrics = reply.get_document("electionCandidateMetrics").expect("metrics");
        assert_eq!(
            metrics.get_str("lastElectionReason").ok(),
            Some(ElectionReason::SingleNode.name())
        );
        assert_eq!(metrics.get("electionTerm"), Some(&Bson::Int64(1)));
        assert_eq!(metrics.get("numVotesNeeded"), Some(&Bson::Int32(1)));
        assert_eq!(metrics.get("priorityAtElection"), Some(&Bson::Double(1.0)));
        assert_eq!(metrics.get("electionTimeoutMillis"), Some(&Bson::Int64(10_000)));
        // Started at Millis(10), 990 ms before the snapshot's now.
        assert_eq!(
            metrics.get_datetime("lastElectionDate").ok(),
            Some(&dt(NOW_WALL_MS - 990))
        );
        assert_eq!(
            metrics.get_datetime("newTermStartDate").ok(),
            Some(&dt(1_705_985_112_343))
        );
        assert_eq!(
            metrics.get_datetime("wMajorityWriteAvailabilityDate").ok(),
            Some(&dt(NOW_WALL_MS - 970))
        );
        let me = reply.get_array("members").expect("members")[0]
            .as_document()
            .expect("doc")
            .clone();
        assert_eq!(
            me.get_timestamp("electionTime").ok(),
            Some(BsonTimestamp {
                time: 1_705_985_112,
                increment: 1
            })
        );
        assert_eq!(me.get_datetime("electionDate").ok(), Some(&dt(1_705_985_112_000)));
        assert_eq!(
            me.get("configTerm"),
            Some(&Bson::Int32(1)),
            "step-up raised the config term"
        );
    }

    #[test]
    fn uninitialized_and_removed_members_answer_mongodb_errors() {
        let uninitialized = ReplSnapshot::uninitialized(extras("a:1"));
        assert!(matches!(
            status_document(&uninitialized),
            Err(ReplError::NotYetInitialized)
        ));
        let removed = ReplSnapshot::capture(&node(three_members(), 9), extras("z:1"));
        assert!(matches!(
            status_document(&removed),
            Err(ReplError::InvalidReplicaSetConfig(_))
        ));
    }
}
