//! The initial sync source: which member to copy from, and what it says
//! about itself (rollback id, oplog positions).
//!
//! A candidate is another data-bearing member of the configuration, up,
//! PRIMARY or SECONDARY, whose oplog holds entries. Secondaries come first
//! (MongoDB's preference: the copy does not load the primary), then the
//! primary; the source an interrupted sync used comes first of all when it
//! is still a candidate, so that its copy stays valid.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document, RawBsonRef, RawDocumentBuf};
use slipstream_clock::OpTime;
use slipstream_consensus::MemberState;
use slipstream_storage::{bson_timestamp, from_bson_timestamp, Timestamp};

use crate::network::NetError;
use crate::protocol::integral;
use crate::replica_set::Shared;

/// How long one command to the source may take (a find batch of 16 MB on
/// a loaded machine included).
pub const SOURCE_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The candidates, best first.
pub fn candidates(shared: &Shared, preferred: Option<&str>) -> Vec<String> {
    let snapshot = shared.snapshot();
    let Some(config) = snapshot.config.as_ref() else {
        return Vec::new();
    };
    let mut found: Vec<(u8, String)> = Vec::new();
    for member in &snapshot.members {
        let data_bearing = config.member(member.id).is_some_and(|m| m.is_data_bearing());
        if member.is_self || !member.health || !data_bearing || member.applied.is_null() {
            continue;
        }
        let rank = match member.state {
            _ if Some(member.host.as_str()) == preferred => 0,
            MemberState::Secondary => 1,
            MemberState::Primary => 2,
            _ => continue,
        };
        found.push((rank, member.host.clone()));
    }
    found.sort();
    found.into_iter().map(|(_, host)| host).collect()
}

/// A command to the source slower than this is logged.
pub const SLOW_COMMAND: Duration = Duration::from_secs(1);

/// Runs a command on the source (reads allowed on a secondary).
pub async fn command(shared: &Arc<Shared>, host: &str, db: &str, mut body: Document) -> Result<Document, NetError> {
    let name = body.keys().next().cloned().unwrap_or_default();
    body.insert("$readPreference", doc! {"mode": "secondaryPreferred"});
    let started = std::time::Instant::now();
    let reply = shared.network.run(host, db, body, SOURCE_COMMAND_TIMEOUT).await;
    note_slow(&name, host, started);
    reply
}

fn note_slow(name: &str, host: &str, started: std::time::Instant) {
    let elapsed = started.elapsed();
    if elapsed >= SLOW_COMMAND {
        tracing::info!(target: "repl", command = name, source = host, elapsed_ms = elapsed.as_millis() as u64,
            "slow initial sync command");
    }
}

/// `command` whose reply stays raw (documents copied as they arrived).
pub async fn command_raw(
    shared: &Arc<Shared>,
    host: &str,
    db: &str,
    mut body: Document,
) -> Result<RawDocumentBuf, NetError> {
    let name = body.keys().next().cloned().unwrap_or_default();
    body.insert("$readPreference", doc! {"mode": "secondaryPreferred"});
    let started = std::time::Instant::now();
    let reply = shared.network.run_raw(host, db, body, SOURCE_COMMAND_TIMEOUT).await;
    note_slow(&name, host, started);
    reply
}

/// `replSetGetRBID`.
pub async fn rbid(shared: &Arc<Shared>, host: &str) -> Result<i32, NetError> {
    let reply = command(shared, host, "admin", doc! {"replSetGetRBID": 1}).await?;
    reply
        .get("rbid")
        .and_then(integral)
        .map(|rbid| rbid as i32)
        .ok_or_else(|| NetError::Protocol("replSetGetRBID without an rbid".into()))
}

/// The source's newest oplog entry.
pub async fn last_entry(shared: &Arc<Shared>, host: &str) -> Result<OpTime, NetError> {
    let find = doc! {"find": "oplog.rs", "filter": {}, "sort": {"$natural": -1}, "limit": 1, "singleBatch": true};
    let reply = command_raw(shared, host, "local", find).await?;
    match first_batch(&reply)?.first() {
        Some(entry) => entry_optime(entry),
        None => Err(NetError::Protocol("the sync source's oplog is empty".into())),
    }
}

/// The source's oldest oplog entry (a too-stale member compares its last
/// entry with it).
pub async fn first_entry(shared: &Arc<Shared>, host: &str) -> Result<OpTime, NetError> {
    let find = doc! {"find": "oplog.rs", "filter": {}, "sort": {"$natural": 1}, "limit": 1, "singleBatch": true};
    let reply = command_raw(shared, host, "local", find).await?;
    match first_batch(&reply)?.first() {
        Some(entry) => entry_optime(entry),
        None => Err(NetError::Protocol("the sync source's oplog is empty".into())),
    }
}

/// Whether the source's oplog still holds the entry at `at` (same term).
pub async fn holds_entry(shared: &Arc<Shared>, host: &str, at: OpTime) -> Result<bool, NetError> {
    let find = doc! {"find": "oplog.rs", "filter": {"ts": bson_timestamp(at.ts)}, "limit": 1, "singleBatch": true};
    let reply = command_raw(shared, host, "local", find).await?;
    match first_batch(&reply)?.first() {
        Some(entry) => Ok(entry_optime(entry)? == at),
        None => Ok(false),
    }
}

/// The documents of a cursor reply's batch (`firstBatch` or `nextBatch`)
/// and the cursor id.
pub fn cursor_batch(reply: &RawDocumentBuf) -> Result<(i64, Vec<RawDocumentBuf>), NetError> {
    let cursor = reply
        .get_document("cursor")
        .map_err(|_| NetError::Protocol("reply without a cursor".into()))?;
    let id = match cursor.get("id") {
        Ok(Some(RawBsonRef::Int64(id))) => id,
        Ok(Some(RawBsonRef::Int32(id))) => i64::from(id),
        _ => return Err(NetError::Protocol("cursor without an id".into())),
    };
    let batch = cursor
        .get_array("firstBatch")
        .or_else(|_| cursor.get_array("nextBatch"))
        .map_err(|_| NetError::Protocol("cursor without a batch".into()))?;
    let mut documents = Vec::new();
    for item in batch {
        match item.map_err(|err| NetError::Protocol(err.to_string()))? {
            RawBsonRef::Document(document) => documents.push(document.to_owned()),
            _ => return Err(NetError::Protocol("a cursor batch item that is not a document".into())),
        }
    }
    Ok((id, documents))
}

fn first_batch(reply: &RawDocumentBuf) -> Result<Vec<RawDocumentBuf>, NetError> {
    cursor_batch(reply).map(|(_, documents)| documents)
}

/// A reply's `operationTime` (the source's applied position when it read).
pub fn operation_time(reply: &RawDocumentBuf) -> Option<Timestamp> {
    reply.get_timestamp("operationTime").ok().map(from_bson_timestamp)
}

pub fn entry_optime(entry: &RawDocumentBuf) -> Result<OpTime, NetError> {
    let ts = entry
        .get_timestamp("ts")
        .map_err(|_| NetError::Protocol("an oplog entry without ts".into()))?;
    let term = match entry.get("t") {
        Ok(Some(RawBsonRef::Int64(t))) => t,
        Ok(Some(RawBsonRef::Int32(t))) => i64::from(t),
        Ok(None) => -1,
        _ => return Err(NetError::Protocol("an oplog entry whose t is not a number".into())),
    };
    Ok(OpTime::new(from_bson_timestamp(ts), term))
}

/// A value of a reply as a count (0 when absent).
pub fn count_of(document: &Document, field: &str) -> u64 {
    match document.get(field) {
        Some(Bson::Double(f)) if *f >= 0.0 => *f as u64,
        Some(value) => integral(value).map_or(0, |n| n.max(0) as u64),
        None => 0,
    }
}
