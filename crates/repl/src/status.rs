//! `replSetGetStatus` and `serverStatus.repl` until the surface helper's
//! `report` module lands (its functions replace these).

use bson::{doc, Bson, DateTime, Document};
use slipstream_consensus::MemberState;

use crate::hello::election_id;
use crate::protocol::optime_document;
use crate::replica_set::{commit_wall_ms, Shared};
use crate::snapshot::Snapshot;

fn date(ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(ms))
}

pub fn status_document(shared: &Shared, snapshot: &Snapshot) -> Document {
    let config = snapshot.config.as_ref().expect("status of an initialized member");
    let now = snapshot.now;
    let now_wall = DateTime::now().timestamp_millis();
    let commit_wall = commit_wall_ms(shared, snapshot.commit_point);
    let members: Vec<Bson> = snapshot
        .members
        .iter()
        .map(|m| {
            let mut member = doc! {
                "_id": m.id as i32,
                "name": m.host.clone(),
                "health": if m.health { 1.0 } else { 0.0 },
                "state": i32::from(m.state.code()),
                "stateStr": m.state.name(),
                "uptime": if m.is_self { (now_wall - shared.started_wall_ms) / 1000 } else { 0 },
                "optime": optime_document(m.applied),
                "optimeDurable": optime_document(m.durable),
                "optimeDate": date(m.applied_wall_ms),
                "optimeDurableDate": date(m.durable_wall_ms),
                "syncSourceHost": m.sync_source.and_then(|s| snapshot.host_of(s)).unwrap_or(""),
                "syncSourceId": m.sync_source.map_or(-1, |s| s as i32),
                "infoMessage": "",
                "configVersion": m.config_version.unwrap_or(config.version) as i32,
                "configTerm": m.config_term.unwrap_or(config.term),
            };
            if m.is_self {
                member.insert("self", true);
                if m.state == MemberState::Primary {
                    if let Some(election) = snapshot.election_time {
                        member.insert("electionTime", shared_ts(election.ts));
                        member.insert("electionDate", date(i64::from(election.ts.secs) * 1000));
                    }
                }
            } else {
                let ago = |at: Option<slipstream_consensus::Millis>| at.map_or(0, |at| now_wall - now.since(at) as i64);
                member.insert("lastHeartbeat", date(ago(m.last_heartbeat_at)));
                member.insert("lastHeartbeatRecv", date(ago(m.last_heartbeat_recv_at)));
                member.insert("pingMs", m.ping_ms.unwrap_or(0) as i64);
            }
            Bson::Document(member)
        })
        .collect();
    let voters = config.voter_count() as i32;
    doc! {
        "set": config.set_name.clone(),
        "date": date(now_wall),
        "myState": i32::from(snapshot.state.code()),
        "term": snapshot.term,
        "syncSourceHost": snapshot.sync_source.and_then(|s| snapshot.host_of(s)).unwrap_or(""),
        "syncSourceId": snapshot.sync_source.map_or(-1, |s| s as i32),
        "heartbeatIntervalMillis": config.settings.heartbeat_interval_ms as i64,
        "majorityVoteCount": config.majority() as i32,
        "writeMajorityCount": config.write_majority() as i32,
        "votingMembersCount": voters,
        "writableVotingMembersCount": config.members.iter().filter(|m| m.is_voter() && m.is_data_bearing()).count() as i32,
        "optimes": {
            "lastCommittedOpTime": optime_document(snapshot.commit_point),
            "lastCommittedWallTime": date(commit_wall),
            "readConcernMajorityOpTime": optime_document(snapshot.commit_point),
            "appliedOpTime": optime_document(snapshot.last_applied),
            "durableOpTime": optime_document(snapshot.last_durable),
            "lastAppliedWallTime": date(snapshot.last_applied_wall_ms),
            "lastDurableWallTime": date(snapshot.last_durable_wall_ms),
        },
        "members": members,
    }
}

fn shared_ts(ts: slipstream_clock::Timestamp) -> bson::Timestamp {
    slipstream_storage::bson_timestamp(ts)
}

pub fn server_status(shared: &Shared, snapshot: &Snapshot) -> Document {
    let mut repl = Document::new();
    let Some(config) = &snapshot.config else {
        repl.insert("isWritablePrimary", false);
        repl.insert("secondary", false);
        repl.insert("info", "Does not have a valid replica set config");
        repl.insert("isreplicaset", true);
        return repl;
    };
    repl.insert("setName", config.set_name.clone());
    repl.insert("setVersion", config.version as i32);
    repl.insert("isWritablePrimary", snapshot.writable_primary);
    repl.insert("secondary", snapshot.state == MemberState::Secondary);
    let hosts: Vec<Bson> = config.members.iter().map(|m| Bson::String(m.host.clone())).collect();
    repl.insert("hosts", hosts);
    if let Some(primary) = snapshot.primary_host() {
        repl.insert("primary", primary);
    }
    if let Some(me) = snapshot.my_host() {
        repl.insert("me", me);
    }
    if snapshot.writable_primary {
        repl.insert("electionId", election_id(snapshot.term));
    }
    repl.insert("rbid", shared.rbid());
    repl
}
