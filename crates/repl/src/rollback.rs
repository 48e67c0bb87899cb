//! Rollback: `Action::FindCommonPoint` reads the source's oplog backwards
//! (`find` on `local.oplog.rs`, `sort: {$natural: -1}`) against ours
//! (`Engine::oplog_read_newest_at_or_before`) and reports the last entry
//! both share, with the source's last entry and commit point read in the
//! same query (`CommonPointFound`, or `RollbackFailed`).
//! `Action::Rollback` truncates to it (`Engine::rollback_to`; the gate is
//! closed on a secondary), bumps the rollback id and reports
//! `RollbackComplete`.
//!
//! Rollback files are issue 8; until then nothing is lost silently: every
//! undone entry's operation, namespace and `_id` is logged before the
//! truncation.
//!
//! The steps, and what a crash between two of them leaves:
//!
//! 1. Search: read-only on both sides. A crash leaves nothing to undo; the
//!    restarted member searches again.
//! 2. Log every entry after the common point. A crash repeats the lines.
//! 3. Bump and persist the rollback id (first, as MongoDB does). A crash
//!    after it only makes others look again at an oplog that did not change.
//! 4. `Engine::rollback_to(common point)`: storage truncates the journal and
//!    drops the versions above it as one step (the gate is closed on a
//!    secondary). A crash before it changes nothing; after it the member
//!    restarts at the common point.
//! 5. Report `RollbackComplete`; the node chooses a sync source again.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_clock::OpTime;
use slipstream_consensus::config::MemberId;
use slipstream_consensus::Event;
use slipstream_storage::{bson_timestamp, from_bson_timestamp};

use crate::coordinator::{fatal, Input};
use crate::protocol::parse_optime;
use crate::replica_set::Shared;

/// Most entries the common point search reads from each oplog: a rollback
/// undoes uncommitted entries only, a few seconds of writes at most.
pub const ROLLBACK_SEARCH_ENTRIES_MAX: usize = 10_000;
/// Entries logged per read while listing what a rollback undoes.
const UNDONE_READ_ENTRIES: usize = 1_000;
const UNDONE_READ_BYTES: usize = 16 * 1024 * 1024;
/// Longest one query of the search waits.
const SEARCH_TIMEOUT_MS: u64 = 30_000;

pub struct Rollback {
    shared: Arc<Shared>,
}

impl Rollback {
    pub fn new(shared: Arc<Shared>) -> Rollback {
        Rollback { shared }
    }

    pub fn find_common_point(&self, source: MemberId, host: String) {
        let shared = self.shared.clone();
        self.shared.runtime.spawn(async move {
            let event = match search(&shared, &host).await {
                Ok((common_point, source_last, source_commit_point)) => {
                    tracing::info!(target: "repl", source = %host, common_point = %common_point_text(common_point),
                        source_last = %common_point_text(source_last), "rollback common point found");
                    Event::CommonPointFound {
                        source,
                        common_point,
                        source_last,
                        source_commit_point,
                    }
                }
                Err(why) => {
                    tracing::warn!(target: "repl", source = %host, why = %why, "rollback common point not found");
                    Event::RollbackFailed { source }
                }
            };
            shared.input(Input::Event(event));
        });
    }

    pub fn roll_back(&self, common_point: OpTime) {
        let shared = self.shared.clone();
        self.shared.runtime.spawn_blocking(move || {
            let engine = &shared.engine;
            let undone = log_undone(&shared, common_point);
            // The id moves first, as MongoDB's does: whoever compares it
            // before and after reading this oplog sees the change even if
            // this member crashes in the middle.
            let rbid = shared.bump_rbid();
            if let Err(err) = engine.rollback_to(common_point.ts) {
                fatal(&format!(
                    "rollback to {} failed: {err}",
                    common_point_text(common_point)
                ));
            }
            let (_, wall_ms) = engine.last_applied_wall();
            tracing::warn!(target: "repl", common_point = %common_point_text(common_point), entries_undone = undone,
                rbid, "rollback complete");
            shared.input(Input::Event(Event::RollbackComplete { common_point, wall_ms }));
        });
    }
}

fn common_point_text(op: OpTime) -> String {
    format!("{{ts: {}, t: {}}}", op.ts, op.term)
}

/// Logs each entry after `common_point`; returns how many.
fn log_undone(shared: &Shared, common_point: OpTime) -> usize {
    let mut from = Bound::Excluded(common_point.ts);
    let mut count = 0;
    loop {
        let entries = match shared.engine.oplog_read(from, UNDONE_READ_ENTRIES, UNDONE_READ_BYTES) {
            Ok(entries) => entries,
            Err(err) => fatal(&format!("cannot read the entries a rollback undoes: {err}")),
        };
        let Some(last) = entries.last() else {
            return count;
        };
        let Ok(last_ts) = last.get_timestamp("ts") else {
            return count;
        };
        for entry in &entries {
            let (op, ns, id) = describe(entry);
            tracing::warn!(target: "repl", op = %op, ns = %ns, id = %id, "rollback undoes an entry");
            count += 1;
        }
        from = Bound::Excluded(from_bson_timestamp(last_ts));
    }
}

fn describe(entry: &RawDocumentBuf) -> (String, String, String) {
    let document: Document = Document::try_from(entry.as_ref()).unwrap_or_default();
    let op = document.get_str("op").unwrap_or("?").to_owned();
    let ns = document.get_str("ns").unwrap_or("").to_owned();
    let id = document
        .get_document("o2")
        .ok()
        .and_then(|o2| o2.get("_id"))
        .or_else(|| document.get_document("o").ok().and_then(|o| o.get("_id")))
        .map_or_else(|| "-".to_owned(), |id| id.to_string());
    (op, ns, id)
}

/// (common point, source's last entry, source's commit point).
async fn search(shared: &Shared, host: &str) -> Result<(OpTime, OpTime, OpTime), String> {
    let ours_last = shared.engine.last_applied();
    let find = doc! {
        "find": "oplog.rs",
        "filter": {"ts": {"$lte": bson_timestamp(ours_last.ts)}},
        "sort": {"$natural": -1},
        "batchSize": ROLLBACK_SEARCH_ENTRIES_MAX as i64,
        "limit": ROLLBACK_SEARCH_ENTRIES_MAX as i64,
        "singleBatch": true,
        "$readPreference": {"mode": "secondaryPreferred"},
        "$replData": 1,
        "$oplogQueryData": 1,
    };
    let timeout = Duration::from_millis(SEARCH_TIMEOUT_MS);
    let reply = shared
        .network
        .run(host, "local", find, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let query_data = reply
        .get_document("$oplogQueryData")
        .map_err(|_| "reply without $oplogQueryData")?;
    let source_last = parse_optime(query_data.get("lastOpApplied"), "lastOpApplied").map_err(|e| e.to_string())?;
    let source_commit_point =
        parse_optime(query_data.get("lastOpCommitted"), "lastOpCommitted").map_err(|e| e.to_string())?;
    let theirs = reply
        .get_document("cursor")
        .and_then(|cursor| cursor.get_array("firstBatch"))
        .map_err(|_| "reply without a batch")?;
    let theirs: Vec<OpTime> = theirs.iter().filter_map(entry_optime).collect();
    let ours = shared
        .engine
        .oplog_read_newest_at_or_before(ours_last.ts, ROLLBACK_SEARCH_ENTRIES_MAX)
        .map_err(|e| e.to_string())?;
    let ours: Vec<OpTime> = ours
        .iter()
        .filter_map(|entry| Document::try_from(entry.as_ref()).ok())
        .filter_map(|entry| entry_optime(&Bson::Document(entry)))
        .collect();
    let common = newest_common(&ours, &theirs).ok_or("no common entry within the search window")?;
    Ok((
        common,
        source_last.max(common),
        source_commit_point.min(source_last.max(common)),
    ))
}

/// The newest OpTime in both lists (each newest first).
fn newest_common(ours: &[OpTime], theirs: &[OpTime]) -> Option<OpTime> {
    let (mut i, mut j) = (0, 0);
    while i < ours.len() && j < theirs.len() {
        match ours[i].ts.cmp(&theirs[j].ts) {
            std::cmp::Ordering::Equal if ours[i].term == theirs[j].term => return Some(ours[i]),
            std::cmp::Ordering::Equal => {
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Greater => i += 1,
            std::cmp::Ordering::Less => j += 1,
        }
    }
    None
}

fn entry_optime(entry: &Bson) -> Option<OpTime> {
    let Bson::Document(entry) = entry else {
        return None;
    };
    let ts = match entry.get("ts") {
        Some(Bson::Timestamp(ts)) => from_bson_timestamp(*ts),
        _ => return None,
    };
    let term = match entry.get("t") {
        Some(Bson::Int64(t)) => *t,
        Some(Bson::Int32(t)) => i64::from(*t),
        _ => -1,
    };
    Some(OpTime::new(ts, term))
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_clock::Timestamp;

    #[test]
    fn the_newest_shared_entry_is_the_common_point() {
        let op = |secs, term| OpTime::new(Timestamp::new(secs, 1), term);
        let ours = [op(9, 2), op(7, 2), op(5, 1), op(3, 1)];
        let theirs = [op(10, 3), op(8, 3), op(7, 3), op(5, 1), op(3, 1)];
        // (7, t2) and (7, t3) share a timestamp but not a term.
        assert_eq!(newest_common(&ours, &theirs), Some(op(5, 1)));
        assert_eq!(newest_common(&ours[..2], &theirs), None);
    }
}
