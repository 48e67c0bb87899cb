//! The replica set fields of `hello` / `isMaster` that drivers need to
//! discover the set and its primary (MongoDB's shape).

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document};
use slipstream_consensus::MemberState;

use crate::replica_set::{commit_wall_ms, Shared};
use crate::snapshot::Snapshot;
use crate::standalone::last_write_document;

/// MongoDB's `electionId`: an ObjectId whose timestamp part is 0x7fffffff
/// and whose last eight bytes are the term, so that it grows with the term.
pub fn election_id(term: i64) -> ObjectId {
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    bytes[4..].copy_from_slice(&term.to_be_bytes());
    ObjectId::from_bytes(bytes)
}

pub fn hello_fields(shared: &Shared, snapshot: &Snapshot, legacy: bool, reply: &mut Document) {
    reply.insert(
        if legacy { "ismaster" } else { "isWritablePrimary" },
        snapshot.writable_primary,
    );
    let Some(config) = &snapshot.config else {
        reply.insert("secondary", false);
        reply.insert("info", "Does not have a valid replica set config");
        reply.insert("isreplicaset", true);
        return;
    };
    let mut hosts = Vec::new();
    let mut passives = Vec::new();
    let mut arbiters = Vec::new();
    for member in config.members.iter().filter(|m| !m.hidden) {
        let host = Bson::String(member.host.clone());
        if member.arbiter_only {
            arbiters.push(host);
        } else if member.priority == 0.0 {
            passives.push(host);
        } else {
            hosts.push(host);
        }
    }
    reply.insert("secondary", snapshot.state == MemberState::Secondary);
    reply.insert("setName", config.set_name.clone());
    reply.insert("setVersion", config.version as i32);
    reply.insert("hosts", hosts);
    if !passives.is_empty() {
        reply.insert("passives", passives);
    }
    if !arbiters.is_empty() {
        reply.insert("arbiters", arbiters);
    }
    if let Some(primary) = snapshot.primary_host() {
        reply.insert("primary", primary);
    }
    let me = snapshot.me.and_then(|me| config.member(me));
    if let Some(me) = me {
        reply.insert("me", me.host.clone());
        if me.arbiter_only {
            reply.insert("arbiterOnly", true);
        }
        if me.hidden {
            reply.insert("hidden", true);
        }
        if me.priority == 0.0 && !me.arbiter_only {
            reply.insert("passive", true);
        }
        let mut tags = Document::new();
        for (key, value) in &me.tags {
            tags.insert(key.clone(), value.clone());
        }
        if !tags.is_empty() {
            reply.insert("tags", tags);
        }
    }
    if snapshot.writable_primary {
        reply.insert("electionId", election_id(snapshot.term));
    }
    let applied = shared.engine.last_applied_wall();
    let majority = (snapshot.commit_point, commit_wall_ms(shared, snapshot.commit_point));
    let mut last_write = last_write_document(applied, majority);
    if last_write.get("lastWriteDate").is_none() {
        last_write.insert("lastWriteDate", DateTime::from_millis(applied.1));
    }
    reply.insert("lastWrite", last_write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn election_ids_grow_with_the_term() {
        assert!(election_id(2) > election_id(1));
        assert_eq!(election_id(1).bytes()[..4], [0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(election_id(258).bytes()[10..], [1, 2]);
    }
}
