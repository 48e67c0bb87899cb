//! The member-to-member commands: `consensus::Message` <-> the BSON of
//! `replSetHeartbeat`, `replSetRequestVotes`, `replSetUpdatePosition` and
//! `replSetStepUp`, in MongoDB's shapes (docs/replication.md, "Internal
//! command shapes").
//!
//! Decoding is strict about the fields the node acts on and refuses a
//! malformed message with a clear error (never a panic): another member's
//! message is untrusted input.

use bson::{doc, Bson, DateTime, Document};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{Heartbeat, MemberPosition, MemberState, UpdatePosition, VoteRequest, VoteResponse};
use slipstream_storage::{bson_timestamp, from_bson_timestamp};

use crate::config_document::{config_document, parse_config};
use crate::error::ReplError;

/// Most positions one `replSetUpdatePosition` may carry: one per member.
pub const UPDATE_POSITION_ENTRIES_MAX: usize = slipstream_consensus::config::MEMBERS_MAX;

/// The configuration version a member without a configuration reports
/// (MongoDB's `-2`, "uninitialized").
pub const UNINITIALIZED_CONFIG_VERSION: i64 = -2;

/// A decoded `replSetHeartbeat` request.
#[derive(Clone, Debug, PartialEq)]
pub struct HeartbeatRequest {
    pub set_name: String,
    /// The sender's `host:port` (`from`).
    pub from_host: String,
    /// The sender's `_id` (`fromId`; absent from a member without a config).
    pub from_id: Option<MemberId>,
    pub heartbeat: Heartbeat,
}

/// A decoded `replSetHeartbeat` response.
#[derive(Clone, Debug, PartialEq)]
pub struct HeartbeatReply {
    pub set_name: String,
    pub heartbeat: Heartbeat,
    /// The responder's configuration when ours (as the request showed it)
    /// is older.
    pub config: Option<ReplSetConfig>,
    /// `electionTime` of a primary.
    pub election_time: Option<Timestamp>,
}

pub fn optime_document(op: OpTime) -> Document {
    doc! {"ts": bson_timestamp(op.ts), "t": op.term}
}

/// The largest term a message may carry: beyond any set's elections (one
/// a nanosecond for over a century) and far enough below `i64::MAX` that a
/// candidate's next term never wraps. A larger one is refused (BadValue)
/// rather than adopted: adopted and made durable, a term of `i64::MAX` left
/// a set that could never elect again, restarts included (every
/// candidate's next term wrapped to a negative one).
pub const TERM_MAX: i64 = 1 << 62;

/// `term` refused above `TERM_MAX`.
pub fn check_term(term: i64, name: &str) -> Result<i64, ReplError> {
    if term > TERM_MAX {
        return Err(ReplError::coded(2, format!("{name} {term} is out of range (at most {TERM_MAX})")));
    }
    Ok(term)
}

fn required_term(body: &Document, name: &str) -> Result<i64, ReplError> {
    check_term(required_integral(body, name)?, name)
}

pub fn parse_optime(value: Option<&Bson>, name: &str) -> Result<OpTime, ReplError> {
    let Some(Bson::Document(op)) = value else {
        return Err(malformed(format!("{name} must be an object {{ts, t}}")));
    };
    let ts = match op.get("ts") {
        Some(Bson::Timestamp(ts)) => from_bson_timestamp(*ts),
        _ => return Err(malformed(format!("{name}.ts must be a timestamp"))),
    };
    let term = op
        .get("t")
        .and_then(integral)
        .ok_or_else(|| malformed(format!("{name}.t must be a number")))?;
    let term = check_term(term, &format!("{name}.t"))?;
    Ok(OpTime::new(ts, term))
}

fn date(ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(ms))
}

fn parse_date(body: &Document, name: &str) -> Result<i64, ReplError> {
    match body.get(name) {
        Some(Bson::DateTime(at)) => Ok(at.timestamp_millis()),
        None => Ok(0),
        Some(_) => Err(malformed(format!("{name} must be a date"))),
    }
}

fn heartbeat_fields(hb: &Heartbeat, out: &mut Document) {
    out.insert("term", hb.term);
    out.insert("state", i32::from(hb.state.code()));
    out.insert("configVersion", hb.config_version);
    out.insert("configTerm", hb.config_term);
    out.insert("opTime", optime_document(hb.last_applied));
    out.insert("wallTime", date(hb.last_applied_wall_ms));
    out.insert("durableOpTime", optime_document(hb.last_durable));
    out.insert("durableWallTime", date(hb.last_durable_wall_ms));
    out.insert("lastCommittedOpTime", optime_document(hb.commit_point));
    out.insert("syncSourceId", hb.sync_source.map_or(-1, |id| id as i32));
}

fn parse_heartbeat_fields(body: &Document) -> Result<Heartbeat, ReplError> {
    let state_code = required_integral(body, "state")?;
    let state = state_from_code(state_code).ok_or_else(|| malformed(format!("unknown member state {state_code}")))?;
    let sync_source = match body.get("syncSourceId").and_then(integral) {
        None | Some(-1) => None,
        Some(id @ 0..=255) => Some(id as MemberId),
        Some(id) => return Err(malformed(format!("syncSourceId {id} out of range"))),
    };
    Ok(Heartbeat {
        term: required_term(body, "term")?,
        config_version: required_integral(body, "configVersion")?,
        config_term: check_term(body.get("configTerm").and_then(integral).unwrap_or(-1), "configTerm")?,
        state,
        last_applied: parse_optime(body.get("opTime"), "opTime")?,
        last_applied_wall_ms: parse_date(body, "wallTime")?,
        last_durable: parse_optime(body.get("durableOpTime"), "durableOpTime")?,
        last_durable_wall_ms: parse_date(body, "durableWallTime")?,
        commit_point: parse_optime(body.get("lastCommittedOpTime"), "lastCommittedOpTime")?,
        sync_source,
    })
}

/// `{replSetHeartbeat: <set>, hbv: 1, from, fromId, ...}`.
pub fn encode_heartbeat_request(
    set_name: &str,
    from_host: &str,
    from_id: Option<MemberId>,
    hb: &Heartbeat,
) -> Document {
    let mut body = doc! {"replSetHeartbeat": set_name, "hbv": 1, "from": from_host};
    if let Some(id) = from_id {
        body.insert("fromId", id as i32);
    }
    heartbeat_fields(hb, &mut body);
    body
}

pub fn decode_heartbeat_request(body: &Document) -> Result<HeartbeatRequest, ReplError> {
    let set_name = match body.get("replSetHeartbeat") {
        Some(Bson::String(name)) => name.clone(),
        _ => return Err(malformed("replSetHeartbeat must name the set")),
    };
    let from_host = match body.get("from") {
        Some(Bson::String(host)) => host.clone(),
        _ => return Err(malformed("replSetHeartbeat needs from: <host:port>")),
    };
    let from_id = match body.get("fromId").and_then(integral) {
        None => None,
        Some(id @ 0..=255) => Some(id as MemberId),
        Some(id) => return Err(malformed(format!("fromId {id} out of range"))),
    };
    Ok(HeartbeatRequest {
        set_name,
        from_host,
        from_id,
        heartbeat: parse_heartbeat_fields(body)?,
    })
}

pub fn encode_heartbeat_reply(reply: &HeartbeatReply, syncing_to: &str) -> Document {
    let mut body = doc! {"set": reply.set_name.clone()};
    heartbeat_fields(&reply.heartbeat, &mut body);
    body.insert("syncingTo", syncing_to);
    if let Some(ts) = reply.election_time {
        body.insert("electionTime", bson_timestamp(ts));
    }
    if let Some(config) = &reply.config {
        body.insert("config", config_document(config));
    }
    body
}

pub fn decode_heartbeat_reply(body: &Document) -> Result<HeartbeatReply, ReplError> {
    let set_name = match body.get("set") {
        Some(Bson::String(name)) => name.clone(),
        _ => return Err(malformed("heartbeat response needs set")),
    };
    let config = match body.get("config") {
        None => None,
        Some(Bson::Document(config)) => Some(parse_config(config)?),
        Some(_) => return Err(malformed("heartbeat response config must be an object")),
    };
    let election_time = match body.get("electionTime") {
        Some(Bson::Timestamp(ts)) => Some(from_bson_timestamp(*ts)),
        _ => None,
    };
    Ok(HeartbeatReply {
        set_name,
        heartbeat: parse_heartbeat_fields(body)?,
        config,
        election_time,
    })
}

/// `{replSetRequestVotes: 1, setName, dryRun, term, candidateIndex,
/// configVersion, configTerm, lastAppliedOpTime}`. `candidateIndex` is the
/// candidate's place in its configuration, as MongoDB sends it; `fromId`
/// (ours) names it directly, since the two configurations may differ.
pub fn encode_vote_request(set_name: &str, candidate_index: usize, request: &VoteRequest) -> Document {
    doc! {
        "replSetRequestVotes": 1,
        "setName": set_name,
        "dryRun": request.dry_run,
        "term": request.term,
        "candidateIndex": candidate_index as i64,
        "fromId": request.candidate as i32,
        "configVersion": request.config_version,
        "configTerm": request.config_term,
        "lastAppliedOpTime": optime_document(request.last_applied),
    }
}

/// Decodes a vote request; the candidate comes from `fromId`, else from
/// `candidateIndex` in the receiver's configuration.
pub fn decode_vote_request(body: &Document, config: &ReplSetConfig) -> Result<(String, VoteRequest), ReplError> {
    let set_name = match body.get("setName") {
        Some(Bson::String(name)) => name.clone(),
        _ => return Err(malformed("replSetRequestVotes needs setName")),
    };
    let candidate = match body.get("fromId").and_then(integral) {
        Some(id @ 0..=255) => id as MemberId,
        Some(id) => return Err(malformed(format!("fromId {id} out of range"))),
        None => {
            let index = required_integral(body, "candidateIndex")?;
            let member = usize::try_from(index).ok().and_then(|i| config.members.get(i));
            member
                .ok_or_else(|| malformed(format!("candidateIndex {index} is not in the configuration")))?
                .id
        }
    };
    let dry_run = match body.get("dryRun") {
        Some(Bson::Boolean(b)) => *b,
        _ => return Err(malformed("replSetRequestVotes needs dryRun")),
    };
    let request = VoteRequest {
        term: required_term(body, "term")?,
        candidate,
        last_applied: parse_optime(body.get("lastAppliedOpTime"), "lastAppliedOpTime")?,
        config_version: required_integral(body, "configVersion")?,
        config_term: check_term(body.get("configTerm").and_then(integral).unwrap_or(-1), "configTerm")?,
        dry_run,
    };
    Ok((set_name, request))
}

pub fn encode_vote_response(response: &VoteResponse) -> Document {
    doc! {"term": response.term, "voteGranted": response.granted, "reason": response.reason}
}

/// The answer to `request` (the response itself carries neither the
/// request's term nor its dry-run flag: the caller knows them).
pub fn decode_vote_response(body: &Document, request: &VoteRequest) -> Result<VoteResponse, ReplError> {
    let granted = match body.get("voteGranted") {
        Some(Bson::Boolean(b)) => *b,
        _ => return Err(malformed("vote response needs voteGranted")),
    };
    let reason = match body.get("reason") {
        Some(Bson::String(reason)) => static_reason(reason),
        _ => "",
    };
    Ok(VoteResponse {
        term: required_term(body, "term")?,
        request_term: request.term,
        dry_run: request.dry_run,
        granted,
        reason,
    })
}

/// The consensus core's refusal reasons are `&'static str`; one from the
/// network maps back to the same text (an unknown one is kept out).
fn static_reason(reason: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "not a voter",
        "candidate's config is older than mine",
        "candidate not electable",
        "term not newer",
        "stale term",
        "already voted",
        "candidate oplog behind",
    ];
    KNOWN
        .iter()
        .find(|known| **known == reason)
        .copied()
        .unwrap_or("refused")
}

/// `{replSetUpdatePosition: 1, optimes: [...], $replData: {term}}`.
pub fn encode_update_position(update: &UpdatePosition, config_version: i64) -> Document {
    let optimes: Vec<Bson> = update
        .positions
        .iter()
        .map(|p| {
            Bson::Document(doc! {
                "memberId": p.member as i32,
                "cfgver": config_version,
                "appliedOpTime": optime_document(p.applied),
                "appliedWallTime": date(p.applied_wall_ms),
                "durableOpTime": optime_document(p.durable),
                "durableWallTime": date(p.durable_wall_ms),
            })
        })
        .collect();
    doc! {"replSetUpdatePosition": 1, "optimes": optimes, "$replData": {"term": update.term}}
}

pub fn decode_update_position(body: &Document) -> Result<UpdatePosition, ReplError> {
    let Some(Bson::Array(optimes)) = body.get("optimes") else {
        return Err(malformed("replSetUpdatePosition needs optimes"));
    };
    if optimes.len() > UPDATE_POSITION_ENTRIES_MAX {
        return Err(malformed(format!(
            "{} positions, at most {UPDATE_POSITION_ENTRIES_MAX}",
            optimes.len()
        )));
    }
    let term = match body.get("$replData") {
        Some(Bson::Document(data)) => required_term(data, "term")?,
        _ => return Err(malformed("replSetUpdatePosition needs $replData.term")),
    };
    let mut positions = Vec::with_capacity(optimes.len());
    for entry in optimes {
        let Bson::Document(entry) = entry else {
            return Err(malformed("each of optimes must be an object"));
        };
        let member = match required_integral(entry, "memberId")? {
            id @ 0..=255 => id as MemberId,
            id => return Err(malformed(format!("memberId {id} out of range"))),
        };
        positions.push(MemberPosition {
            member,
            applied: parse_optime(entry.get("appliedOpTime"), "appliedOpTime")?,
            applied_wall_ms: parse_date(entry, "appliedWallTime")?,
            durable: parse_optime(entry.get("durableOpTime"), "durableOpTime")?,
            durable_wall_ms: parse_date(entry, "durableWallTime")?,
        });
    }
    Ok(UpdatePosition { term, positions })
}

/// `{replSetStepUp: 1, skipDryRun: true}` with the sender's term.
pub fn encode_step_up(term: i64) -> Document {
    doc! {"replSetStepUp": 1, "skipDryRun": true, "term": term}
}

pub fn state_from_code(code: i64) -> Option<MemberState> {
    Some(match code {
        0 => MemberState::Startup,
        1 => MemberState::Primary,
        2 => MemberState::Secondary,
        3 => MemberState::Recovering,
        5 => MemberState::Startup2,
        6 => MemberState::Unknown,
        7 => MemberState::Arbiter,
        8 => MemberState::Down,
        9 => MemberState::Rollback,
        10 => MemberState::Removed,
        _ => return None,
    })
}

fn required_integral(body: &Document, name: &str) -> Result<i64, ReplError> {
    body.get(name)
        .and_then(integral)
        .ok_or_else(|| malformed(format!("{name} must be a number")))
}

pub(crate) fn integral(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.fract() == 0.0 && f.is_finite() && f.abs() < 9.0e15 => Some(*f as i64),
        _ => None,
    }
}

fn malformed(message: impl Into<String>) -> ReplError {
    ReplError::failed_to_parse(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_consensus::config::MemberConfig;

    fn heartbeat() -> Heartbeat {
        Heartbeat {
            term: 4,
            config_version: 2,
            config_term: 3,
            state: MemberState::Secondary,
            last_applied: OpTime::new(Timestamp::new(100, 2), 4),
            last_applied_wall_ms: 1_700_000_000_123,
            last_durable: OpTime::new(Timestamp::new(100, 1), 4),
            last_durable_wall_ms: 1_700_000_000_100,
            commit_point: OpTime::new(Timestamp::new(99, 7), 3),
            sync_source: Some(2),
        }
    }

    fn config() -> ReplSetConfig {
        ReplSetConfig::new("rs", vec![MemberConfig::new(0, "a:1"), MemberConfig::new(5, "b:2")])
    }

    #[test]
    fn heartbeats_round_trip() {
        let request = encode_heartbeat_request("rs", "a:1", Some(0), &heartbeat());
        let decoded = decode_heartbeat_request(&request).unwrap();
        assert_eq!(
            decoded,
            HeartbeatRequest {
                set_name: "rs".into(),
                from_host: "a:1".into(),
                from_id: Some(0),
                heartbeat: heartbeat()
            }
        );
        let mut no_source = heartbeat();
        no_source.sync_source = None;
        let reply = HeartbeatReply {
            set_name: "rs".into(),
            heartbeat: no_source,
            config: Some(config()),
            election_time: Some(Timestamp::new(5, 1)),
        };
        assert_eq!(
            decode_heartbeat_reply(&encode_heartbeat_reply(&reply, "")).unwrap(),
            reply
        );
    }

    #[test]
    fn votes_round_trip() {
        let request = VoteRequest {
            term: 9,
            candidate: 5,
            last_applied: OpTime::new(Timestamp::new(3, 4), 8),
            config_version: 2,
            config_term: 8,
            dry_run: true,
        };
        let (set, decoded) = decode_vote_request(&encode_vote_request("rs", 1, &request), &config()).unwrap();
        assert_eq!((set.as_str(), &decoded), ("rs", &request));
        // Without fromId the index names the candidate.
        let mut body = encode_vote_request("rs", 1, &request);
        body.remove("fromId");
        assert_eq!(decode_vote_request(&body, &config()).unwrap().1.candidate, 5);
        let response = VoteResponse {
            term: 9,
            request_term: 9,
            dry_run: true,
            granted: false,
            reason: "already voted",
        };
        assert_eq!(
            decode_vote_response(&encode_vote_response(&response), &request).unwrap(),
            response
        );
    }

    #[test]
    fn update_position_round_trips() {
        let update = UpdatePosition {
            term: 3,
            positions: vec![MemberPosition {
                member: 2,
                applied: OpTime::new(Timestamp::new(7, 1), 3),
                applied_wall_ms: 7001,
                durable: OpTime::new(Timestamp::new(6, 1), 3),
                durable_wall_ms: 6001,
            }],
        };
        assert_eq!(
            decode_update_position(&encode_update_position(&update, 1)).unwrap(),
            update
        );
    }

    #[test]
    fn malformed_member_messages_are_refused() {
        let good = encode_heartbeat_request("rs", "a:1", Some(0), &heartbeat());
        for field in ["term", "state", "opTime", "configVersion", "wallTime"] {
            let mut body = good.clone();
            body.insert(field, "garbage");
            assert!(decode_heartbeat_request(&body).is_err(), "{field}");
        }
        for field in ["replSetHeartbeat", "from"] {
            let mut body = good.clone();
            body.insert(field, 5);
            assert!(decode_heartbeat_request(&body).is_err(), "{field}");
        }
        let mut body = good.clone();
        body.insert("state", 4);
        assert!(decode_heartbeat_request(&body).is_err());
        let mut body = good;
        body.insert("fromId", 1000);
        assert!(decode_heartbeat_request(&body).is_err());
        assert!(decode_update_position(&doc! {"optimes": [1], "$replData": {"term": 1}}).is_err());
        assert!(decode_update_position(&doc! {"optimes": []}).is_err());
        let many: Vec<Bson> = (0..60).map(|_| Bson::Document(doc! {})).collect();
        assert!(decode_update_position(&doc! {"optimes": many, "$replData": {"term": 1}}).is_err());
        assert!(decode_vote_request(&doc! {"setName": "rs", "candidateIndex": 9, "dryRun": true}, &config()).is_err());
        let request = VoteRequest {
            term: 1,
            candidate: 0,
            last_applied: OpTime::NULL,
            config_version: 1,
            config_term: 0,
            dry_run: false,
        };
        assert!(decode_vote_response(&doc! {"term": 1}, &request).is_err());
    }

    /// Every field of every member message replaced by values of every
    /// other type, one at a time (nested ones too): decoding answers an
    /// error or a value, and never panics.
    #[test]
    fn no_field_of_any_type_makes_decoding_panic() {
        let bad_values = [
            Bson::Null,
            Bson::Int32(-1),
            Bson::Int64(i64::MAX),
            Bson::Double(f64::NAN),
            Bson::Double(1e300),
            Bson::String(String::new()),
            Bson::Boolean(true),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::Document(doc! {"ts": 1, "t": "x"}),
            Bson::Timestamp(bson::Timestamp { time: 0, increment: 0 }),
            Bson::DateTime(DateTime::from_millis(i64::MIN)),
        ];
        let mut reply = encode_heartbeat_reply(
            &HeartbeatReply {
                set_name: "rs".into(),
                heartbeat: heartbeat(),
                config: Some(config()),
                election_time: None,
            },
            "",
        );
        reply.insert("electionTime", bson::Timestamp { time: 1, increment: 1 });
        let request = VoteRequest {
            term: 1,
            candidate: 0,
            last_applied: OpTime::NULL,
            config_version: 1,
            config_term: 0,
            dry_run: false,
        };
        let update = UpdatePosition {
            term: 1,
            positions: vec![MemberPosition {
                member: 0,
                applied: OpTime::NULL,
                applied_wall_ms: 0,
                durable: OpTime::NULL,
                durable_wall_ms: 0,
            }],
        };
        let messages = [
            encode_heartbeat_request("rs", "a:1", Some(0), &heartbeat()),
            reply,
            encode_vote_request("rs", 0, &request),
            encode_vote_response(&VoteResponse {
                term: 1,
                request_term: 1,
                dry_run: false,
                granted: true,
                reason: "",
            }),
            encode_update_position(&update, 1),
        ];
        for message in &messages {
            for variant in variants(message, &bad_values) {
                let _ = decode_heartbeat_request(&variant);
                let _ = decode_heartbeat_reply(&variant);
                let _ = decode_vote_request(&variant, &config());
                let _ = decode_vote_response(&variant, &request);
                let _ = decode_update_position(&variant);
            }
        }
    }

    /// `document` with each field (at any depth) replaced by each bad value.
    fn variants(document: &Document, bad_values: &[Bson]) -> Vec<Document> {
        let mut out = Vec::new();
        for (key, value) in document {
            for bad in bad_values {
                let mut changed = document.clone();
                changed.insert(key.clone(), bad.clone());
                out.push(changed);
            }
            let nested: Vec<Bson> = match value {
                Bson::Document(inner) => variants(inner, bad_values).into_iter().map(Bson::Document).collect(),
                Bson::Array(items) => items
                    .iter()
                    .filter_map(|item| item.as_document())
                    .flat_map(|inner| variants(inner, bad_values))
                    .map(|inner| Bson::Array(vec![Bson::Document(inner)]))
                    .collect(),
                _ => Vec::new(),
            };
            for inner in nested {
                let mut changed = document.clone();
                changed.insert(key.clone(), inner);
                out.push(changed);
            }
        }
        out
    }

    /// A term past `TERM_MAX` in any member message is refused (BadValue)
    /// rather than adopted: `i64::MAX`, adopted and made durable, left a set
    /// whose every candidate's next term wrapped.
    #[test]
    fn terms_past_the_bound_are_refused() {
        let too_big = TERM_MAX + 1;
        let update = doc! {"optimes": [], "$replData": {"term": too_big}};
        assert!(matches!(decode_update_position(&update), Err(ReplError::BadArgument { code: 2, .. })), "update");
        let optime = doc! {"ts": bson::Timestamp {time: 1, increment: 1}, "t": i64::MAX};
        assert!(parse_optime(Some(&Bson::Document(optime)), "opTime").is_err());
        let fine = doc! {"optimes": [], "$replData": {"term": TERM_MAX}};
        assert!(decode_update_position(&fine).is_ok());
    }
}
