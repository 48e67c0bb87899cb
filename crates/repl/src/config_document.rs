//! The replica set configuration document (`replSetInitiate`,
//! `replSetReconfig`, `replSetGetConfig`, `local.system.replset`, a
//! heartbeat response's `config`) <-> `consensus::ReplSetConfig`.
//!
//! Parsing refuses what MongoDB refuses with InvalidReplicaSetConfig (93)
//! and never panics on a malformed document: a member's message is input
//! like any other.

use bson::{doc, Bson, Document};
use slipstream_consensus::config::{ConfigError, MemberConfig, ReplSetConfig, Settings, MEMBERS_MAX};

use crate::error::ReplError;

/// Most tags one member may carry (no MongoDB limit; ours keeps a
/// configuration small).
pub const MEMBER_TAGS_MAX: usize = 32;

/// Reads a configuration document and checks it as a whole
/// (`ReplSetConfig::validate`): every failure is 93, as `replSetInitiate`
/// answers. `version` defaults to 1 and `term` to 0.
pub fn parse_config(document: &Document) -> Result<ReplSetConfig, ReplError> {
    let config = parse_config_fields(document)?;
    config.validate().map_err(|err| invalid(err.to_string()))?;
    Ok(config)
}

/// `replSetReconfig`'s reading: what fails to parse is 93, as for
/// `parse_config`, but the checks of the configuration as a whole (two
/// members with one `_id` or host, too many voters, none) are 103
/// NewReplicaSetConfigurationIncompatible, as MongoDB's reconfig wraps
/// its `validate()`; deployment scripts match 103 to see that a member is
/// already in the set.
pub fn parse_reconfig(document: &Document) -> Result<ReplSetConfig, ReplError> {
    let config = parse_config_fields(document)?;
    config.validate().map_err(|err| match err {
        ConfigError::NoMembers
        | ConfigError::TooManyVoters(_)
        | ConfigError::NoVoters
        | ConfigError::DuplicateId(_)
        | ConfigError::DuplicateHost(_) => ReplError::NewReplicaSetConfigurationIncompatible(err.to_string()),
        _ => invalid(err.to_string()),
    })?;
    Ok(config)
}

/// Reads a configuration document's fields, each checked on its own.
fn parse_config_fields(document: &Document) -> Result<ReplSetConfig, ReplError> {
    let set_name = match document.get("_id") {
        Some(Bson::String(name)) if !name.is_empty() => name.clone(),
        Some(Bson::String(_)) => return Err(invalid("_id of a replica set configuration must not be empty")),
        Some(_) => return Err(invalid("_id of a replica set configuration must be a string")),
        None => return Err(invalid("replica set configuration needs an _id (the set name)")),
    };
    let version = match document.get("version") {
        None => 1,
        Some(value) => integral(value).ok_or_else(|| invalid("version must be a number"))?,
    };
    // MongoDB's bounds (an int, above 0): a larger one would wrap where
    // it is shown as an int (`hello.setVersion`).
    if version > i64::from(i32::MAX) {
        return Err(invalid(format!("version field value of {version} is out of range")));
    }
    let term = match document.get("term") {
        None => 0,
        Some(value) => integral(value).ok_or_else(|| invalid("term must be a number"))?,
    };
    let members = match document.get("members") {
        Some(Bson::Array(members)) => members,
        Some(_) => return Err(invalid("members must be an array")),
        None => return Err(invalid("replica set configuration needs members")),
    };
    if members.len() > MEMBERS_MAX {
        return Err(invalid(format!(
            "{} members, at most {MEMBERS_MAX} allowed",
            members.len()
        )));
    }
    let members = members
        .iter()
        .map(|member| match member {
            Bson::Document(member) => parse_member(member),
            _ => Err(invalid("each member must be an object")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    check_top_level_fields(document)?;
    let settings = match document.get("settings") {
        None => Settings::default(),
        Some(Bson::Document(settings)) => parse_settings(settings)?,
        Some(_) => return Err(invalid("settings must be an object")),
    };
    Ok(ReplSetConfig {
        set_name,
        version,
        term,
        members,
        settings,
    })
}

/// The fields of a configuration document (MongoDB 7.0's
/// `ReplSetConfigBase`, which is strict); `recipientConfig` (a shard
/// split's) MongoDB ignores too.
const CONFIG_FIELDS: &[&str] = &[
    "_id",
    "version",
    "term",
    "members",
    "configsvr",
    "protocolVersion",
    "writeConcernMajorityJournalDefault",
    "settings",
    "repaired",
    "recipientConfig",
];

/// Unknown fields, and the values of the known ones that would change
/// behaviour this set does not have: a config server set, protocol
/// version 0, majority writes acknowledged before they are journaled,
/// a configuration marked repaired. The values `replSetGetConfig` shows
/// are taken.
fn check_top_level_fields(document: &Document) -> Result<(), ReplError> {
    if let Some(key) = document.keys().find(|key| !CONFIG_FIELDS.contains(&key.as_str())) {
        return Err(invalid(format!("unexpected field '{key}' in the replica set configuration")));
    }
    if let Some(protocol) = document.get("protocolVersion") {
        if integral(protocol) != Some(1) {
            return Err(invalid("protocolVersion must be 1: protocol version 0 is no longer supported"));
        }
    }
    if flag(document, "configsvr")? == Some(true) {
        return Err(ReplError::CommandNotSupported(
            "configsvr: true (a sharded cluster's config server set) is not supported".into(),
        ));
    }
    if flag(document, "writeConcernMajorityJournalDefault")? == Some(false) {
        return Err(ReplError::CommandNotSupported(
            "writeConcernMajorityJournalDefault: false is not supported: majority writes are always journaled".into(),
        ));
    }
    if flag(document, "repaired")? == Some(true) {
        return Err(invalid("a configuration marked repaired cannot be used until the field is removed"));
    }
    Ok(())
}

fn parse_member(member: &Document) -> Result<MemberConfig, ReplError> {
    let id = match member.get("_id").and_then(integral) {
        Some(id) if (0..=255).contains(&id) => id as u32,
        Some(id) => return Err(invalid(format!("member _id {id} out of range [0, 255]"))),
        None => return Err(invalid("each member needs a numeric _id")),
    };
    let host = match member.get("host") {
        Some(Bson::String(host)) if !host.is_empty() => normalize_host(host),
        _ => return Err(invalid(format!("member {id} needs a host string"))),
    };
    check_host(&host).map_err(|why| invalid(format!("member {id}: host \"{host}\" {why}")))?;
    let mut config = MemberConfig::new(id, host);
    config.arbiter_only = flag(member, "arbiterOnly")?.unwrap_or(false);
    config.hidden = flag(member, "hidden")?.unwrap_or(false);
    config.newly_added = flag(member, "newlyAdded")?.unwrap_or(false);
    if let Some(votes) = member.get("votes") {
        match integral(votes) {
            Some(votes @ 0..=1) => config.votes = votes as u8,
            _ => return Err(invalid(format!("member {id}: votes must be 0 or 1"))),
        }
    }
    config.priority = match member.get("priority") {
        None if config.arbiter_only || config.votes == 0 => 0.0,
        None => 1.0,
        Some(value) => number(value).ok_or_else(|| invalid(format!("member {id}: priority must be a number")))?,
    };
    if config.arbiter_only && member.get("priority").is_none() {
        config.priority = 0.0;
    }
    if let Some(tags) = member.get("tags") {
        let Bson::Document(tags) = tags else {
            return Err(invalid(format!("member {id}: tags must be an object")));
        };
        if tags.len() > MEMBER_TAGS_MAX {
            return Err(invalid(format!("member {id}: at most {MEMBER_TAGS_MAX} tags")));
        }
        for (key, value) in tags {
            let Bson::String(value) = value else {
                return Err(invalid(format!("member {id}: tag {key} must be a string")));
            };
            config.tags.push((key.clone(), value.clone()));
        }
    }
    for key in member.keys() {
        if !MEMBER_FIELDS.contains(&key.as_str()) {
            return Err(invalid(format!("unexpected field '{key}' in member {id}")));
        }
    }
    check_unsupported_member_fields(member, id)?;
    Ok(config)
}

/// `buildIndexes` and `secondaryDelaySecs` are taken only at the values
/// every member has here (what `replSetGetConfig` shows, so `rs.conf()`
/// edited and sent back parses): a member without indexes or a delayed
/// member is not implemented, and accepting one would leave a member that
/// builds indexes and applies at once while the configuration says
/// otherwise.
fn check_unsupported_member_fields(member: &Document, id: u32) -> Result<(), ReplError> {
    if flag(member, "buildIndexes")? == Some(false) {
        return Err(ReplError::CommandNotSupported(format!(
            "member {id}: buildIndexes: false (a member without secondary indexes) is not supported"
        )));
    }
    match member.get("secondaryDelaySecs") {
        None | Some(Bson::Null) => Ok(()),
        Some(value) => match integral(value) {
            Some(0) => Ok(()),
            Some(secs) if secs > 0 => Err(ReplError::CommandNotSupported(format!(
                "member {id}: secondaryDelaySecs: {secs} (a delayed member) is not supported"
            ))),
            Some(_) => Err(invalid(format!("member {id}: secondaryDelaySecs must not be negative"))),
            None => Err(invalid(format!("member {id}: secondaryDelaySecs must be a number"))),
        },
    }
}

/// The fields a member document may carry: MongoDB's, the ones not
/// implemented included so that their values can be checked
/// (`check_unsupported_member_fields`).
const MEMBER_FIELDS: &[&str] = &[
    "_id",
    "host",
    "arbiterOnly",
    "buildIndexes",
    "hidden",
    "priority",
    "tags",
    "secondaryDelaySecs",
    "votes",
    "newlyAdded",
];

/// Refuses a `newlyAdded` field in a configuration a client sent
/// (`replSetInitiate`, `replSetReconfig`): only the server sets it, as in
/// MongoDB, and a client's copy would hide a new voter from the majority.
pub fn refuse_newly_added(document: &Document) -> Result<(), ReplError> {
    let Ok(members) = document.get_array("members") else { return Ok(()) };
    for member in members.iter().filter_map(Bson::as_document) {
        if member.contains_key("newlyAdded") {
            return Err(invalid("newlyAdded is set by the server; a configuration sent by a client cannot carry it"));
        }
    }
    Ok(())
}

fn parse_settings(settings: &Document) -> Result<Settings, ReplError> {
    let mut parsed = Settings::default();
    if let Some(chaining) = flag(settings, "chainingAllowed")? {
        parsed.chaining_allowed = chaining;
    }
    // Each is shown (`replSetGetConfig`, the stored configuration, the
    // one a heartbeat carries) as an int, as MongoDB shows them: a larger
    // value would come back negative, be refused by the members it is sent
    // to, and leave a configuration that never commits.
    let millis = |name: &str| -> Result<Option<i64>, ReplError> {
        match settings.get(name) {
            None => Ok(None),
            Some(value) => match integral(value) {
                Some(n) if n > i64::from(i32::MAX) => {
                    Err(invalid(format!("settings.{name} must be at most {}", i32::MAX)))
                }
                Some(n) => Ok(Some(n)),
                None => Err(invalid(format!("settings.{name} must be a number"))),
            },
        }
    };
    if let Some(ms) = millis("heartbeatIntervalMillis")? {
        parsed.heartbeat_interval_ms = positive(ms, "heartbeatIntervalMillis")?;
    }
    if let Some(ms) = millis("electionTimeoutMillis")? {
        parsed.election_timeout_ms = positive(ms, "electionTimeoutMillis")?;
    }
    if let Some(secs) = millis("heartbeatTimeoutSecs")? {
        parsed.heartbeat_timeout_ms = positive(secs, "heartbeatTimeoutSecs")?.saturating_mul(1_000);
    }
    if let Some(ms) = millis("catchUpTimeoutMillis")? {
        parsed.catch_up_timeout_ms = at_least_minus_one(ms, "catchUpTimeoutMillis")?;
    }
    if let Some(ms) = millis("catchUpTakeoverDelayMillis")? {
        parsed.catch_up_takeover_delay_ms = at_least_minus_one(ms, "catchUpTakeoverDelayMillis")?;
    }
    match settings.get("replicaSetId") {
        None => {}
        Some(Bson::ObjectId(id)) => parsed.replica_set_id = Some(id.bytes()),
        Some(_) => return Err(invalid("settings.replicaSetId must be an ObjectId")),
    }
    check_write_concern_settings(settings)?;
    Ok(parsed)
}

/// The write concern settings a configuration may carry: the ones
/// `replSetGetConfig` shows (so that `rs.conf()` edited and sent back is
/// taken), and nothing that would change how writes are acknowledged,
/// which was accepted and then ignored.
/// - `getLastErrorDefaults`: only `{w: 1, wtimeout: 0}`; MongoDB 5.0+ refuses
///   any other (the default write concern is `setDefaultRWConcern`'s).
/// - `getLastErrorModes`: only empty; custom write concern modes (`w:
///   "<mode>"` over member tags) are not implemented, and a write naming one
///   would fail with UnknownReplWriteConcern after the set accepted it.
fn check_write_concern_settings(settings: &Document) -> Result<(), ReplError> {
    match settings.get("getLastErrorDefaults") {
        None | Some(Bson::Null) => {}
        Some(Bson::Document(defaults)) => {
            let customized = defaults.iter().any(|(key, value)| match key.as_str() {
                "w" => integral(value) != Some(1),
                "wtimeout" => integral(value) != Some(0),
                _ => true,
            });
            if customized {
                return Err(invalid(
                    "the configuration contains a customized settings.getLastErrorDefaults, which MongoDB 5.0+ \
                     refuses: set the default write concern with setDefaultRWConcern instead",
                ));
            }
        }
        Some(_) => return Err(invalid("settings.getLastErrorDefaults must be an object")),
    }
    match settings.get("getLastErrorModes") {
        None | Some(Bson::Null) => Ok(()),
        Some(Bson::Document(modes)) if modes.is_empty() => Ok(()),
        Some(Bson::Document(_)) => Err(ReplError::CommandNotSupported(
            "custom write concern modes (settings.getLastErrorModes) are not supported".into(),
        )),
        Some(_) => Err(invalid("settings.getLastErrorModes must be an object")),
    }
}

/// A delay where -1 means none (catch-up without limit, no catch-up
/// takeover); MongoDB refuses anything lower.
fn at_least_minus_one(ms: i64, name: &str) -> Result<Option<u64>, ReplError> {
    match ms {
        -1 => Ok(None),
        ms if ms >= 0 => Ok(Some(ms as u64)),
        _ => Err(invalid(format!("settings.{name} must be -1 or more"))),
    }
}

fn positive(ms: i64, name: &str) -> Result<u64, ReplError> {
    if ms <= 0 {
        return Err(invalid(format!("settings.{name} must be positive")));
    }
    Ok(ms as u64)
}

/// The configuration as `replSetGetConfig` shows it: without `newlyAdded`,
/// which MongoDB keeps out of it (it stays in `local.system.replset` and
/// member-to-member messages), so that `rs.conf()` edited and sent back is
/// taken.
pub fn client_config_document(config: &ReplSetConfig) -> Document {
    let mut shown = config.clone();
    for member in &mut shown.members {
        member.newly_added = false;
    }
    config_document(&shown)
}

/// Marks the members a client's (non-force) reconfig adds with a vote as
/// `newlyAdded`, and keeps the mark on members that still carry it in
/// `current`, as MongoDB's reconfig does. Arbiters copy nothing and are
/// never marked.
pub fn mark_newly_added(current: &ReplSetConfig, config: &mut ReplSetConfig) {
    for member in &mut config.members {
        if member.votes == 0 || member.arbiter_only {
            continue;
        }
        member.newly_added = match current.member(member.id) {
            None => true,
            Some(known) => known.newly_added,
        };
    }
}

/// The configuration as MongoDB stores it and sends it between members.
pub fn config_document(config: &ReplSetConfig) -> Document {
    let members: Vec<Bson> = config
        .members
        .iter()
        .map(|m| {
            let mut tags = Document::new();
            for (key, value) in &m.tags {
                tags.insert(key.clone(), value.clone());
            }
            let mut member = doc! {
                "_id": m.id as i32,
                "host": m.host.clone(),
                "arbiterOnly": m.arbiter_only,
                "buildIndexes": true,
                "hidden": m.hidden,
                "priority": m.priority,
                "tags": tags,
                "secondaryDelaySecs": 0_i64,
                "votes": i32::from(m.votes),
            };
            if m.newly_added {
                member.insert("newlyAdded", true);
            }
            Bson::Document(member)
        })
        .collect();
    let s = &config.settings;
    let mut settings = doc! {
        "chainingAllowed": s.chaining_allowed,
        "heartbeatIntervalMillis": s.heartbeat_interval_ms as i64 as i32,
        "heartbeatTimeoutSecs": (s.heartbeat_timeout_ms / 1000).min(i32::MAX as u64) as i32,
        "electionTimeoutMillis": s.election_timeout_ms as i64 as i32,
        "catchUpTimeoutMillis": s.catch_up_timeout_ms.map_or(-1, |ms| ms as i64) as i32,
        "catchUpTakeoverDelayMillis": s.catch_up_takeover_delay_ms.map_or(-1, |ms| ms as i64) as i32,
        "getLastErrorModes": {},
        "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
    };
    if let Some(id) = s.replica_set_id {
        settings.insert("replicaSetId", bson::oid::ObjectId::from_bytes(id));
    }
    doc! {
        "_id": config.set_name.clone(),
        "version": config.version as i32,
        "term": config.term,
        "members": members,
        "protocolVersion": 1_i64,
        "writeConcernMajorityJournalDefault": true,
        "settings": settings,
    }
}

/// `settings.replicaSetId` across a reconfig, as MongoDB keeps it: one
/// left out is the current one; another one than the current is refused
/// (103), since it names another set.
pub fn keep_replica_set_id(current: &ReplSetConfig, config: &mut ReplSetConfig) -> Result<(), ReplError> {
    let (old, new) = (current.settings.replica_set_id, config.settings.replica_set_id);
    match (old, new) {
        (Some(old), Some(new)) if old != new => Err(ReplError::NewReplicaSetConfigurationIncompatible(format!(
            "New and old configurations differ in replica set ID; old was {}, and new is {}",
            bson::oid::ObjectId::from_bytes(old),
            bson::oid::ObjectId::from_bytes(new)
        ))),
        (Some(old), None) => {
            config.settings.replica_set_id = Some(old);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `localhost` and `127.0.0.1` name the same machine; hosts compare as
/// written otherwise. A host without a port gets MongoDB's default.
pub fn normalize_host(host: &str) -> String {
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:27017")
    }
}

/// A member's `name:port` (`[address]:port` for IPv6) as its name (without
/// brackets) and its port text.
pub fn split_host(host: &str) -> Result<(&str, &str), &'static str> {
    if let Some(rest) = host.strip_prefix('[') {
        let (address, after) = rest.split_once(']').ok_or("has no closing ']'")?;
        Ok((address, after.strip_prefix(':').ok_or("has no port after ']'")?))
    } else {
        host.rsplit_once(':').ok_or("has no port")
    }
}

/// `name:port` (`[address]:port` for IPv6), as drivers parse a member's
/// host from `hello.hosts`: a name without blanks and a port from 1 to
/// 65535 (a driver that cannot parse one stops monitoring the member).
fn check_host(host: &str) -> Result<(), &'static str> {
    let (name, port) = split_host(host)?;
    if name.is_empty() {
        return Err("has no host name");
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/' || c == ',') {
        return Err("is not a host name");
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err("has a port that is not a number");
    }
    match port.parse::<u32>() {
        Ok(1..=65535) => Ok(()),
        _ => Err("has a port out of range [1, 65535]"),
    }
}

fn invalid(message: impl Into<String>) -> ReplError {
    ReplError::InvalidReplicaSetConfig(message.into())
}

fn integral(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.is_finite() && f.abs() < 9.0e15 => Some(*f as i64),
        _ => None,
    }
}

fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(f) if f.is_finite() => Some(*f),
        _ => None,
    }
}

fn flag(document: &Document, name: &str) -> Result<Option<bool>, ReplError> {
    match document.get(name) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(value) => match integral(value) {
            Some(n) => Ok(Some(n != 0)),
            None => Err(invalid(format!("{name} must be a boolean"))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newly_added_is_kept_between_members_hidden_from_clients_and_refused_from_them() {
        let current = parse_config(&doc! {
            "_id": "rs0", "version": 2,
            "members": [{"_id": 0, "host": "a:1"}, {"_id": 1, "host": "b:2"}],
        })
        .unwrap();
        let sent = doc! {
            "_id": "rs0", "version": 3,
            "members": [
                {"_id": 0, "host": "a:1"},
                {"_id": 1, "host": "b:2"},
                {"_id": 2, "host": "c:3"},
                {"_id": 3, "host": "d:4", "votes": 0, "priority": 0},
                {"_id": 4, "host": "e:5", "arbiterOnly": true},
            ],
        };
        let mut config = parse_reconfig(&sent).unwrap();
        mark_newly_added(&current, &mut config);
        let marked: Vec<bool> = config.members.iter().map(|m| m.newly_added).collect();
        assert_eq!(marked, [false, false, true, false, false]);
        // Between members (storage, heartbeats) the mark travels ...
        let stored = config_document(&config);
        assert_eq!(parse_config(&stored).unwrap(), config);
        // ... and a later client reconfig without it keeps it.
        let mut again = parse_reconfig(&client_config_document(&config)).unwrap();
        assert!(again.members.iter().all(|m| !m.newly_added));
        mark_newly_added(&config, &mut again);
        assert!(again.members[2].newly_added);
        let shown = client_config_document(&config);
        let members = shown.get_array("members").unwrap();
        assert!(members.iter().all(|m| !m.as_document().unwrap().contains_key("newlyAdded")));
        let mut forged = sent.clone();
        forged.insert("members", vec![Bson::Document(doc! {"_id": 0, "host": "a:1", "newlyAdded": true})]);
        assert!(matches!(refuse_newly_added(&forged), Err(ReplError::InvalidReplicaSetConfig(_))));
        assert!(refuse_newly_added(&sent).is_ok());
    }

    #[test]
    fn a_configuration_round_trips() {
        let document = doc! {
            "_id": "rs0",
            "version": 3,
            "term": 2_i64,
            "members": [
                {"_id": 0, "host": "a:1", "priority": 2.0, "tags": {"dc": "east"}},
                {"_id": 1, "host": "b:2", "votes": 0, "priority": 0},
                {"_id": 2, "host": "c:3", "arbiterOnly": true},
                {"_id": 3, "host": "d:4", "hidden": true, "priority": 0},
            ],
            "settings": {"heartbeatIntervalMillis": 500, "electionTimeoutMillis": 2000, "chainingAllowed": false,
                         "catchUpTimeoutMillis": -1, "heartbeatTimeoutSecs": 4},
        };
        let config = parse_config(&document).unwrap();
        assert_eq!((config.version, config.term), (3, 2));
        assert_eq!(config.members[0].tags, vec![("dc".to_owned(), "east".to_owned())]);
        assert_eq!(config.members[1].votes, 0);
        assert!(config.members[2].arbiter_only && config.members[2].priority == 0.0);
        assert!(config.members[3].hidden);
        assert!(!config.settings.chaining_allowed);
        assert_eq!(config.settings.catch_up_timeout_ms, None);
        assert_eq!(config.settings.heartbeat_timeout_ms, 4_000);
        let shown = config_document(&config);
        assert_eq!(shown.get_document("settings").unwrap().get_i32("heartbeatTimeoutSecs").unwrap(), 4);
        let again = parse_config(&shown).unwrap();
        assert_eq!(again, config);
        // The largest values taken come back as they went in.
        let max = i32::MAX;
        let extreme = doc! {
            "_id": "rs0", "version": max, "members": [{"_id": 0, "host": "a:1"}],
            "settings": {"heartbeatIntervalMillis": max, "electionTimeoutMillis": max, "heartbeatTimeoutSecs": max,
                         "catchUpTimeoutMillis": max, "catchUpTakeoverDelayMillis": max},
        };
        let config = parse_config(&extreme).unwrap();
        assert_eq!(parse_config(&config_document(&config)).unwrap(), config);
    }

    #[test]
    fn the_heartbeat_timeout_defaults_to_ten_seconds_and_must_be_a_positive_number() {
        let config =
            |settings: Document| doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": settings};
        let parsed = parse_config(&config(doc! {"electionTimeoutMillis": 1000})).unwrap();
        assert_eq!(parsed.settings.heartbeat_timeout_ms, 10_000);
        let shown = config_document(&parsed);
        assert_eq!(shown.get_document("settings").unwrap().get_i32("heartbeatTimeoutSecs").unwrap(), 10);
        for bad in [Bson::Int32(0), Bson::Int32(-3), Bson::String("10".into()), Bson::Double(1.5)] {
            match parse_config(&config(doc! {"heartbeatTimeoutSecs": bad.clone()})) {
                Err(ReplError::InvalidReplicaSetConfig(message)) => {
                    assert!(message.contains("heartbeatTimeoutSecs"), "{bad}: {message}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn members_without_indexes_or_with_a_delay_are_refused_as_not_supported() {
        let config = |member: Document| doc! {"_id": "rs", "members": [member]};
        for member in [
            doc! {"_id": 0, "host": "a:1", "priority": 0, "buildIndexes": false},
            doc! {"_id": 0, "host": "a:1", "priority": 0, "hidden": true, "secondaryDelaySecs": 3600},
            doc! {"_id": 0, "host": "a:1", "secondaryDelaySecs": 1_i64},
        ] {
            match parse_config(&config(member.clone())) {
                Err(ReplError::CommandNotSupported(message)) => assert!(message.contains("member 0"), "{message}"),
                other => panic!("{member}: {other:?}"),
            }
        }
        for member in [
            doc! {"_id": 0, "host": "a:1", "secondaryDelaySecs": -1},
            doc! {"_id": 0, "host": "a:1", "secondaryDelaySecs": "1"},
            doc! {"_id": 0, "host": "a:1", "buildIndexes": "no"},
        ] {
            match parse_config(&config(member.clone())) {
                Err(ReplError::InvalidReplicaSetConfig(_)) => {}
                other => panic!("{member}: {other:?}"),
            }
        }
        // The values replSetGetConfig shows are taken.
        parse_config(&config(doc! {"_id": 0, "host": "a:1", "buildIndexes": true, "secondaryDelaySecs": 0_i64}))
            .unwrap();
    }

    #[test]
    fn custom_write_concern_modes_are_refused_as_not_supported() {
        let config = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "tags": {"dc": "east"}}],
                            "settings": {"getLastErrorModes": {"twoDCs": {"dc": 2}}}};
        match parse_config(&config) {
            Err(ReplError::CommandNotSupported(message)) => assert!(message.contains("getLastErrorModes")),
            other => panic!("{other:?}"),
        }
        // What replSetGetConfig shows is taken back.
        let shown = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}],
                          "settings": {"getLastErrorModes": {}, "getLastErrorDefaults": {"w": 1, "wtimeout": 0}}};
        parse_config(&shown).unwrap();
    }

    #[test]
    fn a_config_server_set_and_unjournaled_majority_writes_are_refused_as_not_supported() {
        for extra in [doc! {"configsvr": true}, doc! {"writeConcernMajorityJournalDefault": false}] {
            let mut config = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}]};
            config.extend(extra.clone());
            match parse_config(&config) {
                Err(ReplError::CommandNotSupported(_)) => {}
                other => panic!("{extra}: {other:?}"),
            }
        }
        // The values replSetGetConfig shows, and what MongoDB ignores.
        let shown = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "configsvr": false,
                          "protocolVersion": 1_i64, "writeConcernMajorityJournalDefault": true,
                          "recipientConfig": {}, "settings": {"replicaSetId": bson::oid::ObjectId::new(),
                                                              "catchUpTimeoutMillis": -1, "somethingNew": 1}};
        parse_config(&shown).unwrap();
    }

    #[test]
    fn malformed_configurations_are_refused_with_93() {
        let cases = [
            doc! {},
            doc! {"_id": 1, "members": []},
            doc! {"_id": "rs", "members": "x"},
            doc! {"_id": "rs", "members": []},
            doc! {"_id": "rs", "members": [{"host": "a:1"}]},
            doc! {"_id": "rs", "members": [{"_id": 0}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "votes": 2}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "bogus": 2}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}, {"_id": 0, "host": "b:1"}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "tags": {"x": 1}}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"electionTimeoutMillis": 0}},
            doc! {"_id": "rs", "members": [{"_id": 300, "host": "a:1"}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}],
                  "settings": {"getLastErrorDefaults": {"w": "majority", "wtimeout": 0}}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}],
                  "settings": {"getLastErrorDefaults": {"w": 1, "wtimeout": 500}}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"getLastErrorModes": 1}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "foo": 1},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "protocolVersion": 0},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "repaired": true},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"catchUpTimeoutMillis": -2}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"catchUpTakeoverDelayMillis": -5}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"replicaSetId": "x"}},
            doc! {"_id": "rs", "version": 2_147_483_648_i64, "members": [{"_id": 0, "host": "a:1"}]},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}], "settings": {"electionTimeoutMillis": i64::MAX}},
            doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}],
                  "settings": {"heartbeatIntervalMillis": 2_147_483_648_i64}},
        ];
        let hosts = [
            "a:b", "a:", ":1", "a:0", "a:65536", "a:99999", "a b:1", "a:1 ", "[::1", "[::1]", "[::1]x", "a:-1",
        ];
        let with_host = |host: &&str| doc! {"_id": "rs", "members": [{"_id": 0, "host": *host}]};
        let cases = cases.into_iter().chain(hosts.iter().map(with_host));
        for case in cases {
            match parse_config(&case) {
                Err(ReplError::InvalidReplicaSetConfig(_)) => {}
                other => panic!("{case}: {other:?}"),
            }
        }
        for host in ["a:1", "a.b-c:65535", "[::1]:27017", "10.0.0.1:5", "a"] {
            parse_config(&doc! {"_id": "rs", "version": i64::from(i32::MAX), "members": [{"_id": 0, "host": host}]})
                .unwrap_or_else(|err| panic!("{host}: {err}"));
        }
    }

    #[test]
    fn a_reconfig_answers_103_for_checks_of_the_whole_configuration() {
        let duplicate_id = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}, {"_id": 0, "host": "b:1"}]};
        let duplicate_host = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1"}, {"_id": 1, "host": "a:1"}]};
        for case in [duplicate_id, duplicate_host] {
            match parse_reconfig(&case) {
                Err(ReplError::NewReplicaSetConfigurationIncompatible(_)) => {}
                other => panic!("{case}: {other:?}"),
            }
        }
        let bad_votes = doc! {"_id": "rs", "members": [{"_id": 0, "host": "a:1", "votes": 2}]};
        assert!(matches!(parse_reconfig(&bad_votes), Err(ReplError::InvalidReplicaSetConfig(_))));
    }
}
