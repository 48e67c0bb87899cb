//! The replica set fields of `hello` / `isMaster`, as MongoDB 7.0's
//! `TopologyCoordinator::fillHelloForReplSet` and `HelloResponse::addToBSON`
//! write them, in their order. Drivers (SDAM) act on every one of these:
//! `setName` filters servers, `hosts`/`passives`/`arbiters` seed discovery,
//! `(electionId, setVersion)` detects stale primaries, `lastWrite` feeds
//! `maxStalenessSeconds`.
//!
//! Three shapes:
//! - a member with a configuration: the full set of fields;
//! - no configuration yet, or REMOVED: `isWritablePrimary: false,
//!   secondary: false, info: "Does not have a valid replica set config",
//!   isreplicaset: true` (a REMOVED member still names its set);
//! - shutting down: neither primary nor secondary.

use bson::oid::ObjectId;
use bson::{doc, Bson, Document};
use slipstream_consensus::MemberState;

use super::op_time_document;
use super::snapshot::{ReplSnapshot, SetView};
use super::timestamp_date;

/// `info` of a member without a usable configuration (drivers and tools
/// match this text to detect a set that needs `replSetInitiate`).
pub const NO_CONFIG_INFO: &str = "Does not have a valid replica set config";

/// The timestamp bytes of an `electionId`: MongoDB's `OID::fromTerm` puts
/// the largest positive int there, so that ids built from terms compare
/// above any generated ObjectId of the old protocol and among themselves
/// by term.
const ELECTION_ID_TIMESTAMP: [u8; 4] = [0x7f, 0xff, 0xff, 0xff];

/// The `electionId` of the primary of `term`: ObjectId bytes
/// `7fffffff` followed by the term as 8 big-endian bytes, so that a later
/// term gives a greater id.
pub fn election_id(term: i64) -> ObjectId {
    assert!(term >= 0, "a primary's term is never negative");
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&ELECTION_ID_TIMESTAMP);
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

/// The topology fields of a `hello` reply (`ismaster` instead of
/// `isWritablePrimary` when `legacy`), `topologyVersion` first.
pub fn hello_fields(snapshot: &ReplSnapshot, legacy: bool) -> Document {
    let mut reply = Document::new();
    reply.insert("topologyVersion", topology_version(snapshot));
    let Some(set) = snapshot.set.as_ref() else {
        insert_no_config(&mut reply, legacy);
        return reply;
    };
    if set.state == MemberState::Removed {
        reply.insert("setName", set.config.set_name.clone());
        insert_no_config(&mut reply, legacy);
        return reply;
    }
    insert_members(&mut reply, set);
    reply.insert("setName", set.config.set_name.clone());
    reply.insert("setVersion", set.config.version as i32);
    let (writable_primary, secondary) = roles(snapshot, set);
    reply.insert(primary_field(legacy), writable_primary);
    reply.insert("secondary", secondary);
    if let Some(primary) = set.primary.and_then(|id| snapshot.host_of(id)) {
        reply.insert("primary", primary);
    }
    insert_self_flags(&mut reply, snapshot);
    // `me` as the configuration spells this member, as MongoDB answers it.
    let me = snapshot
        .self_config()
        .map_or(snapshot.extras.me_host.as_str(), |m| m.host.as_str());
    reply.insert("me", me);
    if set.state == MemberState::Primary {
        reply.insert("electionId", election_id(set.term));
    }
    reply.insert("lastWrite", last_write(snapshot));
    reply
}

/// `topologyVersion: {processId, counter: long}`.
pub fn topology_version(snapshot: &ReplSnapshot) -> Document {
    doc! {
        "processId": snapshot.extras.process_id,
        "counter": Bson::Int64(snapshot.extras.topology_version_counter),
    }
}

fn primary_field(legacy: bool) -> &'static str {
    if legacy {
        "ismaster"
    } else {
        "isWritablePrimary"
    }
}

fn insert_no_config(reply: &mut Document, legacy: bool) {
    reply.insert(primary_field(legacy), false);
    reply.insert("secondary", false);
    reply.insert("info", NO_CONFIG_INFO);
    reply.insert("isreplicaset", true);
}

/// `hosts` (electable: data-bearing with priority > 0), `passives`
/// (priority 0), `arbiters`; hidden members in none; each list only when
/// non-empty, in configuration order.
fn insert_members(reply: &mut Document, set: &SetView) {
    let (mut hosts, mut passives, mut arbiters) = (Vec::new(), Vec::new(), Vec::new());
    for member in set.config.members.iter().filter(|m| !m.hidden) {
        let host = Bson::String(member.host.clone());
        if member.arbiter_only {
            arbiters.push(host);
        } else if member.priority > 0.0 {
            hosts.push(host);
        } else {
            passives.push(host);
        }
    }
    for (name, list) in [("hosts", hosts), ("passives", passives), ("arbiters", arbiters)] {
        if !list.is_empty() {
            reply.insert(name, list);
        }
    }
}

/// `(isWritablePrimary, secondary)`. A primary that does not accept writes
/// yet (catch-up, draining) or any more (stepping down) answers as a
/// secondary, as MongoDB's `_makeHelloResponse` does; shutdown answers
/// neither.
fn roles(snapshot: &ReplSnapshot, set: &SetView) -> (bool, bool) {
    if snapshot.extras.in_shutdown {
        return (false, false);
    }
    // MongoDB's `isSecondary` is the member state: a primary still catching
    // up, or pausing writes for a stepdown, is neither (drivers see
    // RSOther and send it no secondary reads).
    match set.state {
        MemberState::Primary => (set.writable_primary, false),
        MemberState::Secondary => (false, true),
        _ => (false, false),
    }
}

/// `arbiterOnly`, `passive`, `hidden`, `tags` of this member, each only
/// when it applies.
fn insert_self_flags(reply: &mut Document, snapshot: &ReplSnapshot) {
    let Some(me) = snapshot.self_config() else {
        return;
    };
    if me.arbiter_only {
        reply.insert("arbiterOnly", true);
    } else if me.priority == 0.0 {
        reply.insert("passive", true);
    }
    if me.hidden {
        reply.insert("hidden", true);
    }
    // MongoDB keeps internal tags (keys starting with '$') out of hello.
    let tags: Document = me
        .tags
        .iter()
        .filter(|(key, _)| !key.starts_with('$'))
        .map(|(key, value)| (key.clone(), Bson::String(value.clone())))
        .collect();
    if !tags.is_empty() {
        reply.insert("tags", tags);
    }
}

/// `lastWrite`: the last applied entry and, once there is one, the
/// majority-committed snapshot, each with the date MongoDB gives it (its
/// timestamp's seconds).
fn last_write(snapshot: &ReplSnapshot) -> Document {
    let applied = snapshot.extras.applied.0;
    let mut last_write = doc! {
        "opTime": op_time_document(applied),
        "lastWriteDate": timestamp_date(applied.ts),
    };
    let majority = snapshot.extras.read_concern_majority;
    if !majority.is_null() {
        last_write.insert("majorityOpTime", op_time_document(majority));
        last_write.insert("majorityWriteDate", timestamp_date(majority.ts));
    }
    last_write
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::tests::{extras, node, three_members};
    use super::*;
    use bson::DateTime;
    use slipstream_clock::OpTime;
    use slipstream_consensus::{MemberConfig, ReplSetConfig};

    fn keys(document: &Document) -> Vec<&str> {
        document.keys().map(String::as_str).collect()
    }

    fn strings(document: &Document, key: &str) -> Vec<String> {
        document
            .get_array(key)
            .expect("array")
            .iter()
            .map(|b| b.as_str().expect("string").to_string())
            .collect()
    }

    /// Five members: two electable, a passive, a hidden one and an arbiter.
    fn mixed_config() -> ReplSetConfig {
        let mut config = ReplSetConfig::new(
            "rs",
            vec![
                MemberConfig::new(0, "a:1"),
                MemberConfig {
                    tags: vec![("dc".into(), "east".into()), ("$internal".into(), "x".into())],
                    ..MemberConfig::new(1, "b:1")
                },
                MemberConfig {
                    priority: 0.0,
                    ..MemberConfig::new(2, "p:1")
                },
                MemberConfig {
                    priority: 0.0,
                    hidden: true,
                    votes: 0,
                    ..MemberConfig::new(3, "h:1")
                },
                MemberConfig {
                    priority: 0.0,
                    arbiter_only: true,
                    ..MemberConfig::new(4, "arb:1")
                },
            ],
        );
        config.version = 6;
        config
    }

    fn primary_snapshot(term: i64) -> ReplSnapshot {
        let mut snapshot = ReplSnapshot::capture(&node(mixed_config(), 0), extras("a:1"));
        let set = snapshot.set.as_mut().expect("configured");
        set.state = MemberState::Primary;
        set.writable_primary = true;
        set.primary = Some(0);
        set.term = term;
        snapshot
    }

    #[test]
    fn election_id_grows_with_the_term() {
        assert_eq!(election_id(1).to_hex(), "7fffffff0000000000000001");
        assert_eq!(election_id(0x0102_0304_0506).to_hex(), "7fffffff0000010203040506");
        assert!(election_id(2) > election_id(1));
        assert!(election_id(256) > election_id(255), "byte order is big-endian");
    }

    #[test]
    fn writable_primary_fields_in_mongodb_order() {
        let reply = hello_fields(&primary_snapshot(7), false);
        assert_eq!(
            keys(&reply),
            [
                "topologyVersion",
                "hosts",
                "passives",
                "arbiters",
                "setName",
                "setVersion",
                "isWritablePrimary",
                "secondary",
                "primary",
                "me",
                "electionId",
                "lastWrite"
            ]
        );
        assert_eq!(strings(&reply, "hosts"), ["a:1", "b:1"]);
        assert_eq!(strings(&reply, "passives"), ["p:1"]);
        assert_eq!(strings(&reply, "arbiters"), ["arb:1"]);
        assert_eq!(reply.get("setVersion"), Some(&Bson::Int32(6)));
        assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(true)));
        assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get_str("primary").ok(), Some("a:1"));
        assert_eq!(reply.get_str("me").ok(), Some("a:1"));
        assert_eq!(reply.get("electionId"), Some(&Bson::ObjectId(election_id(7))));
        let version = reply.get_document("topologyVersion").expect("topologyVersion");
        assert_eq!(version.get("counter"), Some(&Bson::Int64(3)));
        assert_eq!(
            version.get("processId"),
            Some(&Bson::ObjectId(ObjectId::from_bytes([1; 12])))
        );
    }

    #[test]
    fn last_write_dates_are_the_timestamps_seconds() {
        let reply = hello_fields(&primary_snapshot(1), false);
        let last_write = reply.get_document("lastWrite").expect("lastWrite");
        assert_eq!(
            keys(last_write),
            ["opTime", "lastWriteDate", "majorityOpTime", "majorityWriteDate"]
        );
        let op = last_write.get_document("opTime").expect("opTime");
        assert_eq!(op.get("t"), Some(&Bson::Int64(1)));
        assert_eq!(op.get_timestamp("ts").ok().map(|t| t.increment), Some(5));
        assert_eq!(
            last_write.get_datetime("lastWriteDate").ok(),
            Some(&DateTime::from_millis(1_705_985_113_000))
        );
        let majority = last_write.get_document("majorityOpTime").expect("majority");
        assert_eq!(majority.get_timestamp("ts").ok().map(|t| t.increment), Some(2));
    }

    #[test]
    fn no_majority_fields_before_a_commit_point() {
        let mut snapshot = primary_snapshot(1);
        snapshot.extras.read_concern_majority = OpTime::NULL;
        let reply = hello_fields(&snapshot, false);
        assert_eq!(
            keys(reply.get_document("lastWrite").expect("lastWrite")),
            ["opTime", "lastWriteDate"]
        );
    }

    #[test]
    fn primary_still_catching_up_answers_as_neither_with_election_id() {
        let mut snapshot = primary_snapshot(3);
        snapshot.set.as_mut().expect("configured").writable_primary = false;
        let reply = hello_fields(&snapshot, true);
        assert_eq!(reply.get("ismaster"), Some(&Bson::Boolean(false)));
        assert!(
            reply.get("isWritablePrimary").is_none(),
            "legacy callers get ismaster only"
        );
        assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get("electionId"), Some(&Bson::ObjectId(election_id(3))));
    }

    #[test]
    fn secondary_names_the_primary_and_its_tags() {
        let mut snapshot = ReplSnapshot::capture(&node(mixed_config(), 1), extras("B:1"));
        snapshot.set.as_mut().expect("configured").primary = Some(0);
        let reply = hello_fields(&snapshot, false);
        assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(true)));
        assert_eq!(reply.get_str("primary").ok(), Some("a:1"));
        assert!(reply.get("electionId").is_none(), "only the primary sends electionId");
        assert_eq!(reply.get_document("tags").ok(), Some(&doc! {"dc": "east"}));
        assert_eq!(
            reply.get_str("me").ok(),
            Some("b:1"),
            "the configuration's spelling wins"
        );
        assert!(reply.get("passive").is_none());
    }

    #[test]
    fn passive_hidden_and_arbiter_members_say_so() {
        let passive = hello_fields(&ReplSnapshot::capture(&node(mixed_config(), 2), extras("p:1")), false);
        assert_eq!(passive.get("passive"), Some(&Bson::Boolean(true)));
        assert!(passive.get("hidden").is_none());
        let hidden = hello_fields(&ReplSnapshot::capture(&node(mixed_config(), 3), extras("h:1")), false);
        assert_eq!(hidden.get("passive"), Some(&Bson::Boolean(true)));
        assert_eq!(hidden.get("hidden"), Some(&Bson::Boolean(true)));
        assert!(
            !strings(&hidden, "passives").contains(&"h:1".to_string()),
            "hidden members are not listed"
        );
        let mut arbiter_snapshot = ReplSnapshot::capture(&node(mixed_config(), 4), extras("arb:1"));
        arbiter_snapshot.set.as_mut().expect("configured").state = MemberState::Arbiter;
        let arbiter = hello_fields(&arbiter_snapshot, false);
        assert_eq!(arbiter.get("arbiterOnly"), Some(&Bson::Boolean(true)));
        assert!(arbiter.get("passive").is_none());
        assert_eq!(arbiter.get("secondary"), Some(&Bson::Boolean(false)));
        assert_eq!(arbiter.get("isWritablePrimary"), Some(&Bson::Boolean(false)));
    }

    #[test]
    fn uninitialized_member_has_no_set_name() {
        let reply = hello_fields(&ReplSnapshot::uninitialized(extras("a:1")), false);
        assert_eq!(
            keys(&reply),
            [
                "topologyVersion",
                "isWritablePrimary",
                "secondary",
                "info",
                "isreplicaset"
            ]
        );
        assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get_str("info").ok(), Some(NO_CONFIG_INFO));
        assert_eq!(reply.get("isreplicaset"), Some(&Bson::Boolean(true)));
    }

    #[test]
    fn removed_member_names_its_set_but_nothing_else() {
        let reply = hello_fields(&ReplSnapshot::capture(&node(three_members(), 9), extras("z:1")), true);
        assert_eq!(
            keys(&reply),
            [
                "topologyVersion",
                "setName",
                "ismaster",
                "secondary",
                "info",
                "isreplicaset"
            ]
        );
        assert_eq!(reply.get_str("setName").ok(), Some("rs1"));
        assert_eq!(reply.get("ismaster"), Some(&Bson::Boolean(false)));
    }

    #[test]
    fn shutting_down_primary_is_neither_primary_nor_secondary() {
        let mut snapshot = primary_snapshot(2);
        snapshot.extras.in_shutdown = true;
        let reply = hello_fields(&snapshot, false);
        assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(false)));
        assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(false)));
    }

    #[test]
    fn recovering_and_rollback_members_are_neither() {
        for state in [MemberState::Recovering, MemberState::Rollback, MemberState::Startup2] {
            let mut snapshot = ReplSnapshot::capture(&node(three_members(), 1), extras("b:27017"));
            snapshot.set.as_mut().expect("configured").state = state;
            let reply = hello_fields(&snapshot, false);
            assert_eq!(reply.get("secondary"), Some(&Bson::Boolean(false)), "{state}");
            assert_eq!(reply.get("isWritablePrimary"), Some(&Bson::Boolean(false)), "{state}");
            assert_eq!(reply.get_str("setName").ok(), Some("rs1"));
        }
    }

    #[test]
    fn a_single_member_set_lists_only_hosts() {
        let config = ReplSetConfig::new("only", vec![MemberConfig::new(0, "a:1")]);
        let reply = hello_fields(&ReplSnapshot::capture(&node(config, 0), extras("a:1")), false);
        assert!(reply.get("passives").is_none() && reply.get("arbiters").is_none());
        assert_eq!(strings(&reply, "hosts"), ["a:1"]);
    }
}
