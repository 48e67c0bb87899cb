//! The oplog fetcher: pulls the sync source's oplog with a tailable
//! `awaitData` cursor (`find` on `local.oplog.rs` from our last entry, then
//! `getMore`s that wait on the source's oplog) and hands each batch to the
//! coordinator as `Pulled`, the entries riding along for the applier.
//!
//! ```text
//!            start(source)
//!   Stopped ---------------> Querying --first batch--> Tailing <--+
//!      ^                        ^  |                     |        | getMore
//!      |  stop / source fails   |  | empty: source behind|        | (awaitData)
//!      +------------------------+--+---------------------+--------+
//!                               |   restart: batch not appended,
//!                               +-- cursor ended
//! ```
//!
//! It holds at most one batch while the applier works on the previous one:
//! the next batch is fetched meanwhile but delivered only once the
//! previous one's outcome is known, so that every delivered batch starts at
//! the node's last entry (`PullBatch.first`: the overlap on the first
//! batch, the previous batch's last entry after it).

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document, RawBsonRef, RawDocumentBuf};
use slipstream_clock::OpTime;
use slipstream_consensus::config::MemberId;
use slipstream_consensus::{Event, PullBatch};
use slipstream_storage::{bson_timestamp, from_bson_timestamp};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::coordinator::Input;
use crate::fail_points::STOP_REPL_PRODUCER;
use crate::network::NetError;
use crate::protocol::parse_optime;
use crate::replica_set::Shared;

/// Most entries one batch asks for (storage applies at most 5000 at once).
pub const FETCH_BATCH_ENTRIES: i64 = 5_000;
/// How long a `getMore` waits on the source's oplog for new entries.
pub const FETCH_AWAIT_MS: i64 = 1_000;
/// Network margin on top of a command's own wait.
pub const FETCH_NETWORK_SLACK_MS: u64 = 10_000;
/// Most bytes of fetched entries held (`serverStatus` `metrics.repl.buffer.
/// maxSizeBytes`): the fetcher asks for the next batch while the node
/// applies the previous one and hands it over only once that one is
/// applied, so at most two `getMore` replies of the source's 16 MB batch
/// cap. Was 100 MB, a figure nothing held to.
pub const FETCH_BUFFER_BYTES_MAX: u64 = 2 * 16 * 1024 * 1024;
/// Pause before querying again after the node passed on a batch.
pub const FETCH_RESTART_PAUSE_MS: u64 = 50;

/// A pulled batch waiting for the applier (or the node's refusal).
pub struct HeldBatch {
    pub source: MemberId,
    pub entries: Vec<RawDocumentBuf>,
    /// The entries' bytes, summed once on arrival.
    pub bytes: usize,
    outcome: oneshot::Sender<bool>,
}

impl HeldBatch {
    /// The node passed on it (ignored, or found it does not overlap).
    pub fn not_appended(self) {
        let _ = self.outcome.send(false);
    }

    /// The applier appended it.
    pub fn appended(self) {
        let _ = self.outcome.send(true);
    }
}

pub struct OplogFetcher {
    shared: Arc<Shared>,
    running: Option<(MemberId, JoinHandle<()>)>,
}

impl OplogFetcher {
    pub fn new(shared: Arc<Shared>) -> OplogFetcher {
        OplogFetcher { shared, running: None }
    }

    pub fn start(&mut self, source: MemberId, host: String, term: i64) {
        self.stop();
        let shared = self.shared.clone();
        let task = self.shared.runtime.spawn(async move {
            let error = fetch(&shared, source, &host, term).await;
            tracing::info!(target: "repl", source = %host, error = %error, "oplog fetcher stopped");
            shared.input(Input::Event(Event::PullFailed { source }));
        });
        self.running = Some((source, task));
    }

    pub fn stop(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }
}

struct Reply {
    cursor_id: i64,
    entries: Vec<RawDocumentBuf>,
    commit_point: OpTime,
    term: i64,
    /// The source's last entry (`$oplogQueryData.lastOpApplied`).
    source_last: OpTime,
    /// The source's rollback id (`$oplogQueryData.rbid`), read after the
    /// batch: a source that rolled back bumps it before its oplog changes.
    rbid: i64,
}

/// Fetches until an error; returns it.
async fn fetch(shared: &Arc<Shared>, source: MemberId, host: &str, term: i64) -> NetError {
    loop {
        shared.wait_applier_idle().await;
        shared.fail_points.wait_while_on(STOP_REPL_PRODUCER).await;
        let last = shared.engine.last_applied();
        let filter = if last.is_null() {
            doc! {}
        } else {
            doc! {"ts": {"$gte": bson_timestamp(last.ts)}}
        };
        let find = doc! {
            "find": "oplog.rs",
            "filter": filter,
            "tailable": true,
            "awaitData": true,
            "batchSize": FETCH_BATCH_ENTRIES,
            "term": term,
            "$readPreference": {"mode": "secondaryPreferred"},
            "$replData": 1,
            "$oplogQueryData": 1,
        };
        tracing::debug!(target: "repl", source = %host, from = %last.ts, "oplog fetcher queries");
        let reply = match run(shared, host, find, 0).await {
            Ok(reply) => reply,
            Err(err) => return err,
        };
        shared.fail_points.wait_while_on(STOP_REPL_PRODUCER).await;
        if reply.entries.is_empty() {
            // Nothing at or after our last entry: the source is behind.
            deliver(shared, source, None, None, &reply, Vec::new()).await;
            return NetError::Protocol("the sync source has no entry at or after ours".into());
        }
        let first = match entry_optime(&reply.entries[0]) {
            Ok(op) => op,
            Err(err) => return err,
        };
        let mut prev_last = match entry_optime(reply.entries.last().expect("not empty")) {
            Ok(op) => op,
            Err(err) => return err,
        };
        let mut has_new = prev_last > first || last.is_null();
        let meta = reply_meta(&reply);
        // The source's commit point as it last told us: its `getMore`
        // answers at once, empty if need be, when its own moves past it
        // (MongoDB's `lastKnownCommittedOpTime`), so that a majority write
        // is majority-readable here within a round trip, not at the next
        // write or wait. The source's word, not our own commit point: ours
        // may stop short of it, and the source would then answer at once
        // for ever.
        let mut known_commit = meta.commit_point;
        // The source's oplog as this cursor reads it continues the entries
        // checked above only while the source does not roll back: its
        // tailable cursor outlives a rollback and then returns entries, and
        // a commit point, of another branch as if they followed ours (an
        // outside probe saw a member count its own uncommitted entries as
        // committed, and keep them for good). MongoDB's fetcher checks the
        // rollback id of every batch the same way.
        let rbid = reply.rbid;
        let entries = reply.entries;
        let mut cursor_id = reply.cursor_id;
        let mut outcome = deliver(shared, source, Some(first), Some(prev_last), &meta, entries).await;
        loop {
            if cursor_id == 0 {
                break;
            }
            // MongoDB's stopReplProducer: no new batch while it is on (the
            // source's cursor waits; MongoDB's is kept alive 10 minutes).
            shared.fail_points.wait_while_on(STOP_REPL_PRODUCER).await;
            // A batch applied on this task spawned its durable report:
            // let it leave before the next `getMore` (a majority write on
            // the source waits for the report; the `getMore` only waits
            // for entries that are not written yet).
            tokio::task::yield_now().await;
            let get_more = doc! {
                "getMore": cursor_id,
                "collection": "oplog.rs",
                "batchSize": FETCH_BATCH_ENTRIES,
                "maxTimeMS": FETCH_AWAIT_MS,
                "term": term,
                "lastKnownCommittedOpTime": {"ts": bson_timestamp(known_commit.ts), "t": known_commit.term},
                "$replData": 1,
                "$oplogQueryData": 1,
            };
            let next = run(shared, host, get_more, FETCH_AWAIT_MS as u64).await;
            // A batch that arrived after the fail point went on is held too.
            shared.fail_points.wait_while_on(STOP_REPL_PRODUCER).await;
            let appended = outcome.await.unwrap_or(false);
            let next = match next {
                Ok(next) => next,
                Err(err) => return err,
            };
            if next.rbid != rbid {
                tracing::info!(target: "repl", source = %host, rbid, now = next.rbid,
                    "the sync source rolled back: query again");
                break;
            }
            known_commit = next.commit_point;
            if has_new && !appended {
                tracing::debug!(target: "repl", source = %host, "the node passed on a batch: query again");
                break;
            }
            cursor_id = next.cursor_id;
            let Some(last_entry) = next.entries.last() else {
                has_new = false;
                outcome = deliver(shared, source, Some(prev_last), Some(prev_last), &next, Vec::new()).await;
                continue;
            };
            let last = match entry_optime(last_entry) {
                Ok(op) => op,
                Err(err) => return err,
            };
            let first = prev_last;
            prev_last = last;
            has_new = true;
            let meta = reply_meta(&next);
            let entries = next.entries;
            outcome = deliver(shared, source, Some(first), Some(last), &meta, entries).await;
        }
        tokio::time::sleep(Duration::from_millis(FETCH_RESTART_PAUSE_MS)).await;
    }
}

fn reply_meta(reply: &Reply) -> Reply {
    Reply {
        cursor_id: reply.cursor_id,
        entries: Vec::new(),
        commit_point: reply.commit_point,
        term: reply.term,
        source_last: reply.source_last,
        rbid: reply.rbid,
    }
}

/// Hands a batch to the coordinator; resolves once the node appended it
/// (true) or passed on it (false).
async fn deliver(
    shared: &Arc<Shared>,
    source: MemberId,
    first: Option<OpTime>,
    last: Option<OpTime>,
    meta: &Reply,
    entries: Vec<RawDocumentBuf>,
) -> oneshot::Receiver<bool> {
    let (outcome, receiver) = oneshot::channel();
    let batch = PullBatch {
        source,
        first,
        last,
        source_last: meta.source_last,
        source_commit_point: meta.commit_point,
        source_term: meta.term,
    };
    let bytes: usize = entries.iter().map(|e| e.as_bytes().len()).sum();
    shared.metrics.set_buffer(entries.len() as u64, bytes as u64);
    shared.step_input(Input::Pulled {
        batch,
        held: HeldBatch {
            source,
            entries,
            bytes,
            outcome,
        },
    });
    receiver
}

async fn run(shared: &Arc<Shared>, host: &str, body: Document, wait_ms: u64) -> Result<Reply, NetError> {
    let timeout = Duration::from_millis(wait_ms + FETCH_NETWORK_SLACK_MS);
    let started = std::time::Instant::now();
    let reply = shared.network.run_raw(host, "local", body, timeout).await?;
    let parsed = parse_reply(&reply).map_err(NetError::Protocol)?;
    let bytes: usize = parsed.entries.iter().map(|e| e.as_bytes().len()).sum();
    shared
        .metrics
        .record_getmore(parsed.entries.len() as u64, bytes as u64, started.elapsed());
    Ok(parsed)
}

fn parse_reply(reply: &RawDocumentBuf) -> Result<Reply, String> {
    let cursor = reply
        .get_document("cursor")
        .map_err(|_| "reply without a cursor".to_owned())?;
    let cursor_id = match cursor.get("id") {
        Ok(Some(RawBsonRef::Int64(id))) => id,
        Ok(Some(RawBsonRef::Int32(id))) => i64::from(id),
        _ => return Err("cursor without an id".into()),
    };
    let batch = cursor
        .get_array("firstBatch")
        .or_else(|_| cursor.get_array("nextBatch"))
        .map_err(|_| "cursor without a batch".to_owned())?;
    let mut entries = Vec::new();
    for entry in batch {
        match entry.map_err(|err| err.to_string())? {
            RawBsonRef::Document(entry) => entries.push(entry.to_owned()),
            _ => return Err("an oplog entry that is not a document".into()),
        }
    }
    let repl_data = reply
        .get_document("$replData")
        .map_err(|_| "reply without $replData".to_owned())?;
    let repl_data = Document::try_from(repl_data).map_err(|err| err.to_string())?;
    let commit_point = parse_optime(repl_data.get("lastOpCommitted"), "lastOpCommitted").map_err(|e| e.to_string())?;
    let term = match repl_data.get("term") {
        Some(Bson::Int64(term)) => *term,
        Some(Bson::Int32(term)) => i64::from(*term),
        _ => return Err("$replData without a term".into()),
    };
    let term = crate::protocol::check_term(term, "$replData.term").map_err(|err| err.to_string())?;
    let query_data = reply
        .get_document("$oplogQueryData")
        .map_err(|_| "reply without $oplogQueryData".to_owned())?;
    let query_data = Document::try_from(query_data).map_err(|err| err.to_string())?;
    let source_last = parse_optime(query_data.get("lastOpApplied"), "lastOpApplied").map_err(|e| e.to_string())?;
    let rbid = query_data.get("rbid").and_then(crate::protocol::integral).ok_or("$oplogQueryData without an rbid")?;
    Ok(Reply {
        cursor_id,
        entries,
        commit_point,
        term,
        source_last,
        rbid,
    })
}

fn entry_optime(entry: &RawDocumentBuf) -> Result<OpTime, NetError> {
    let ts = entry
        .get_timestamp("ts")
        .map_err(|_| NetError::Protocol("an oplog entry without ts".into()))?;
    let term = match entry.get("t") {
        Ok(Some(bson::RawBsonRef::Int64(t))) => t,
        Ok(Some(bson::RawBsonRef::Int32(t))) => i64::from(t),
        Ok(None) => -1,
        _ => return Err(NetError::Protocol("an oplog entry whose t is not a number".into())),
    };
    Ok(OpTime::new(from_bson_timestamp(ts), term))
}
