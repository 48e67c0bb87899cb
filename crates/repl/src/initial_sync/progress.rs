//! Initial sync progress, in two forms:
//!
//! - `Progress`, the durable record in `local` (`local.replset.initialSync`):
//!   which source and rollback id the copy is valid against, the begin
//!   point, the collections done, the last `_id` copied of the current one,
//!   and the phase. It is written after each batch is durable, so that a
//!   restarted member continues where its copy is still valid.
//! - `Status`, the live counters behind `replSetGetStatus.initialSyncStatus`
//!   (MongoDB's shape) and the periodic progress log line.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use slipstream_clock::OpTime;
use slipstream_storage::{bson_timestamp, from_bson_timestamp, Engine, Timestamp};

use crate::error::ReplError;
use crate::protocol::{integral, optime_document};

/// The local document's name (`local.replset.initialSync`).
pub const PROGRESS_DOCUMENT: &str = "replset.initialSync";
/// MongoDB's default `numInitialSyncAttempts`.
pub const INITIAL_SYNC_ATTEMPTS_DEFAULT: u32 = 10;
/// The most `numInitialSyncAttempts` may be set to (MongoDB's own bound is
/// `i32::MAX`; a named limit keeps the status field an i32).
pub const INITIAL_SYNC_ATTEMPTS_LIMIT: u32 = 1_000_000;

/// `numInitialSyncAttempts`: failed attempts after which the process stops.
/// A server parameter, so process-wide as MongoDB's (one member a process).
static INITIAL_SYNC_ATTEMPTS_MAX: std::sync::atomic::AtomicU32 =
    std::sync::atomic::AtomicU32::new(INITIAL_SYNC_ATTEMPTS_DEFAULT);

/// The current `numInitialSyncAttempts`.
pub fn attempts_max() -> u32 {
    INITIAL_SYNC_ATTEMPTS_MAX.load(std::sync::atomic::Ordering::Acquire)
}

/// Sets `numInitialSyncAttempts` (1 to `INITIAL_SYNC_ATTEMPTS_LIMIT`);
/// returns the previous value, or `None` when out of range.
pub fn set_attempts_max(attempts: i64) -> Option<u32> {
    let attempts = u32::try_from(attempts)
        .ok()
        .filter(|n| (1..=INITIAL_SYNC_ATTEMPTS_LIMIT).contains(n))?;
    Some(INITIAL_SYNC_ATTEMPTS_MAX.swap(attempts, std::sync::atomic::Ordering::AcqRel))
}
/// How often the progress line is logged while copying.
pub const PROGRESS_LOG_INTERVAL: Duration = Duration::from_secs(3);
/// Attempts kept in `initialSyncAttempts` (the newest).
pub const ATTEMPTS_KEPT_MAX: usize = 10;

/// Where an initial sync is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A too-stale member decided to resync: its data is (being) wiped,
    /// and the sync starts over from nothing (`crate::resync`).
    Resync,
    /// Copying the source's checkpoint file (`checkpoint_copy.rs`).
    CopyingFile,
    /// Copying collections.
    Cloning,
    /// Copy done: applying the source's oplog up to `min_valid`.
    Applying,
    /// Finished: the member is consistent.
    Done,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Resync => "resync",
            Phase::CopyingFile => "copyingFile",
            Phase::Cloning => "cloning",
            Phase::Applying => "applying",
            Phase::Done => "done",
        }
    }

    fn parse(name: &str) -> Option<Phase> {
        match name {
            "resync" => Some(Phase::Resync),
            "copyingFile" => Some(Phase::CopyingFile),
            "cloning" => Some(Phase::Cloning),
            "applying" => Some(Phase::Applying),
            "done" => Some(Phase::Done),
            _ => None,
        }
    }
}

/// The durable record of one initial sync.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    pub phase: Phase,
    /// The source the copy was started or continued from (`host:port`).
    pub source: String,
    /// That source's rollback id when it was chosen.
    pub source_rbid: i32,
    /// The source's last entry when the copy began: its oplog is applied
    /// from here.
    pub begin: OpTime,
    /// Namespaces copied in full.
    pub collections_done: Vec<String>,
    /// The collection being copied and the last `_id` copied of it.
    pub current: Option<(String, Bson)>,
    /// The collection whose documents are all copied and whose secondary
    /// indexes are being built (`current` names its last `_id`): a resume
    /// builds them again without reading more documents.
    pub indexes_building: Option<String>,
    /// The newest `operationTime` of any source's read: the copy may
    /// reflect writes up to here, so the oplog is applied at least to it.
    pub max_seen: Timestamp,
    /// Set when the copy is done: the oplog is applied up to here.
    pub min_valid: Timestamp,
    /// The checkpoint copy in progress (phase `CopyingFile`).
    pub file_copy: Option<FileCopyRecord>,
}

/// How far a checkpoint copy got: the source's copy id (its file's
/// state), the file's length and the bytes copied and synced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileCopyRecord {
    pub id: String,
    pub file_bytes: u64,
    pub copied: u64,
}

impl Progress {
    pub fn new(source: String, source_rbid: i32, begin: OpTime) -> Progress {
        Progress {
            phase: Phase::Cloning,
            source,
            source_rbid,
            begin,
            collections_done: Vec::new(),
            current: None,
            indexes_building: None,
            max_seen: begin.ts,
            min_valid: Timestamp::ZERO,
            file_copy: None,
        }
    }

    /// The record of a checkpoint copy begun: `begin` is the checkpoint's
    /// entry, from which the oplog is applied once the file is installed.
    pub fn file_copy(source: String, source_rbid: i32, begin: OpTime, copy: FileCopyRecord) -> Progress {
        Progress {
            phase: Phase::CopyingFile,
            file_copy: Some(copy),
            ..Progress::new(source, source_rbid, begin)
        }
    }

    /// The record of a resync decided, before any source is chosen.
    pub fn resync() -> Progress {
        Progress {
            phase: Phase::Resync,
            ..Progress::new(String::new(), 0, OpTime::NULL)
        }
    }

    pub fn load(engine: &Engine) -> Result<Option<Progress>, ReplError> {
        let Some(document) = engine.local().read(PROGRESS_DOCUMENT)? else {
            return Ok(None);
        };
        Progress::from_document(&document)
            .map(Some)
            .ok_or_else(|| ReplError::coded(113, format!("unreadable initial sync progress: {document}")))
    }

    pub fn save(&self, engine: &Engine) -> Result<(), ReplError> {
        Ok(engine.local().write(PROGRESS_DOCUMENT, &self.to_document())?)
    }

    fn to_document(&self) -> Document {
        let current = match &self.current {
            Some((ns, id)) => doc! {"ns": ns, "lastId": id.clone()},
            None => Document::new(),
        };
        let mut document = doc! {
            "_id": "initialSync",
            "phase": self.phase.name(),
            "source": &self.source,
            "sourceRbid": self.source_rbid,
            "begin": optime_document(self.begin),
            "collectionsDone": self.collections_done.clone(),
            "current": current,
            "maxSeen": bson_timestamp(self.max_seen),
            "minValid": bson_timestamp(self.min_valid),
        };
        if let Some(ns) = &self.indexes_building {
            document.insert("indexesBuilding", ns);
        }
        if let Some(copy) = &self.file_copy {
            document.insert(
                "fileCopy",
                doc! {"id": &copy.id, "fileBytes": copy.file_bytes as i64, "copied": copy.copied as i64},
            );
        }
        document
    }

    fn from_document(document: &Document) -> Option<Progress> {
        let begin = crate::protocol::parse_optime(document.get("begin"), "begin").ok()?;
        let current = document.get_document("current").ok()?;
        let current = match (current.get_str("ns"), current.get("lastId")) {
            (Ok(ns), Some(id)) => Some((ns.to_owned(), id.clone())),
            _ => None,
        };
        let done = document.get_array("collectionsDone").ok()?;
        Some(Progress {
            phase: Phase::parse(document.get_str("phase").ok()?)?,
            source: document.get_str("source").ok()?.to_owned(),
            source_rbid: document.get("sourceRbid").and_then(integral)? as i32,
            begin,
            collections_done: done.iter().filter_map(|ns| ns.as_str().map(str::to_owned)).collect(),
            current,
            // Absent in records written before indexes were built apart.
            indexes_building: document.get_str("indexesBuilding").ok().map(str::to_owned),
            max_seen: from_bson_timestamp(document.get_timestamp("maxSeen").ok()?),
            min_valid: from_bson_timestamp(document.get_timestamp("minValid").ok()?),
            file_copy: match document.get_document("fileCopy") {
                Ok(copy) => Some(FileCopyRecord {
                    id: copy.get_str("id").ok()?.to_owned(),
                    file_bytes: u64::try_from(copy.get("fileBytes").and_then(integral)?).ok()?,
                    copied: u64::try_from(copy.get("copied").and_then(integral)?).ok()?,
                }),
                Err(_) => None,
            },
        })
    }
}

/// One collection's counters.
#[derive(Clone, Debug, Default)]
struct CollectionStatus {
    documents_to_copy: u64,
    documents_copied: u64,
    indexes: u64,
    fetched_batches: u64,
    started_wall_ms: Option<i64>,
    elapsed_ms: u64,
    done: bool,
}

#[derive(Default)]
struct Counters {
    active: bool,
    /// `initialSyncMethod` of the current attempt ("logical" or
    /// "fileCopyBased").
    method: &'static str,
    failed_attempts: u32,
    started: Option<Instant>,
    started_wall_ms: i64,
    /// Once the sync succeeded: its whole time and when it ended.
    ended: Option<(Duration, bson::DateTime)>,
    attempts: Vec<Document>,
    approx_total_bytes: u64,
    bytes_copied: u64,
    documents_copied: u64,
    applied_ops: u64,
    oplog_start: OpTime,
    oplog_end: OpTime,
    source: String,
    /// db -> ns -> counters, in name order.
    databases: BTreeMap<String, BTreeMap<String, CollectionStatus>>,
    last_log: Option<Instant>,
    /// Bytes copied when this process started copying (a resumed sync
    /// copied the rest before): the rate counts only this process's.
    bytes_at_start: u64,
}

/// The live counters, shared with `replSetGetStatus`.
#[derive(Default)]
pub struct Status {
    counters: Mutex<Counters>,
}

impl Status {
    pub fn begin_attempt(&self, source: &str, begin: OpTime) {
        let mut c = self.counters.lock();
        if c.started.is_none() {
            c.started = Some(Instant::now());
            c.started_wall_ms = bson::DateTime::now().timestamp_millis();
        }
        c.active = true;
        c.source = source.to_owned();
        c.oplog_start = begin;
        c.bytes_copied = 0;
        c.documents_copied = 0;
        c.bytes_at_start = 0;
        c.applied_ops = 0;
        c.databases.clear();
    }

    /// Forgets an earlier sync's counters (a resync after the member once
    /// synced in this process): the status describes the new one.
    pub fn start_new(&self) {
        *self.counters.lock() = Counters::default();
    }

    /// The source of the current (or last) attempt.
    pub fn set_source(&self, host: &str) {
        self.counters.lock().source = host.to_owned();
    }

    pub fn source(&self) -> Option<String> {
        Some(self.counters.lock().source.clone()).filter(|host| !host.is_empty())
    }

    pub fn attempt_failed(&self, why: &str, elapsed: Duration) {
        let mut c = self.counters.lock();
        c.failed_attempts += 1;
        let source = c.source.clone();
        c.attempts.push(doc! {
            "durationMillis": elapsed.as_millis() as i64,
            "status": why,
            "syncSource": source,
        });
        if c.attempts.len() > ATTEMPTS_KEPT_MAX {
            c.attempts.remove(0);
        }
    }

    /// The sync succeeded, its last attempt taking `elapsed`: the status
    /// then shows when it ended, its total time stops, and the attempt is
    /// listed with status OK, as MongoDB's does.
    pub fn finished(&self, elapsed: Duration) {
        let mut c = self.counters.lock();
        if !c.active {
            return;
        }
        c.active = false;
        c.ended = c.started.map(|started| (started.elapsed(), bson::DateTime::now()));
        let source = c.source.clone();
        c.attempts.push(doc! {
            "durationMillis": elapsed.as_millis() as i64,
            "status": "OK",
            "syncSource": source,
        });
        if c.attempts.len() > ATTEMPTS_KEPT_MAX {
            c.attempts.remove(0);
        }
    }

    pub fn failed_attempts(&self) -> u32 {
        self.counters.lock().failed_attempts
    }

    pub fn set_total_bytes(&self, bytes: u64) {
        self.counters.lock().approx_total_bytes = bytes;
    }

    pub fn plan_collection(&self, ns: &str, documents: u64, indexes: u64, done: bool) {
        let mut c = self.counters.lock();
        let db = ns.split('.').next().unwrap_or("").to_owned();
        let status = c.databases.entry(db).or_default().entry(ns.to_owned()).or_default();
        status.documents_to_copy = documents;
        status.indexes = indexes;
        status.done = done;
    }

    pub fn collection_started(&self, ns: &str) {
        let now = bson::DateTime::now().timestamp_millis();
        self.with_collection(ns, |s| {
            s.started_wall_ms.get_or_insert(now);
        });
    }

    /// A batch of `documents` / `bytes` was copied into `ns`.
    /// `batches` replies' `documents` are durable (one bulk load).
    pub fn batch_copied(&self, ns: &str, batches: u64, documents: u64, bytes: u64) {
        self.with_collection(ns, |s| {
            s.documents_copied += documents;
            s.fetched_batches += batches;
        });
        self.copied(documents, bytes);
    }

    /// The current attempt copies by this method (`initialSyncMethod`).
    pub fn set_method(&self, method: &'static str) {
        self.counters.lock().method = method;
    }

    /// `bytes` more of a checkpoint copy are written.
    pub fn file_bytes_copied(&self, bytes: u64) {
        self.copied(0, bytes);
    }

    /// Counts what either copy stored, and logs the progress line when due.
    fn copied(&self, documents: u64, bytes: u64) {
        let mut c = self.counters.lock();
        c.documents_copied += documents;
        c.bytes_copied += bytes;
        let due = c.last_log.is_none_or(|at| at.elapsed() >= PROGRESS_LOG_INTERVAL);
        if due {
            c.last_log = Some(Instant::now());
            log_progress(&c);
        }
    }

    /// Bytes a previous process already copied (a resumed sync).
    pub fn resumed_with(&self, documents: u64, bytes: u64) {
        let mut c = self.counters.lock();
        c.documents_copied += documents;
        c.bytes_copied += bytes;
        c.bytes_at_start = c.bytes_copied;
    }

    pub fn collection_done(&self, ns: &str) {
        let now = bson::DateTime::now().timestamp_millis();
        self.with_collection(ns, |s| {
            s.done = true;
            s.elapsed_ms = s.started_wall_ms.map_or(0, |at| (now - at).max(0) as u64);
        });
    }

    pub fn set_oplog_start(&self, start: OpTime) {
        self.counters.lock().oplog_start = start;
    }

    pub fn set_oplog_end(&self, end: OpTime) {
        self.counters.lock().oplog_end = end;
    }

    pub fn ops_applied(&self, count: u64) {
        self.counters.lock().applied_ops += count;
    }

    fn with_collection(&self, ns: &str, change: impl FnOnce(&mut CollectionStatus)) {
        let mut c = self.counters.lock();
        let db = ns.split('.').next().unwrap_or("").to_owned();
        change(c.databases.entry(db).or_default().entry(ns.to_owned()).or_default());
    }

    /// `replSetGetStatus.initialSyncStatus`; `None` before any sync, and
    /// after one finished unless asked for (`initialSync: 1`).
    pub fn document(&self, even_if_finished: bool) -> Option<Document> {
        let c = self.counters.lock();
        let started = c.started?;
        if !c.active && !even_if_finished {
            return None;
        }
        let elapsed_ms = c.ended.map_or(started.elapsed(), |(total, _)| total).as_millis() as i64;
        let mut databases =
            doc! {"databasesCloned": c.databases.values().filter(|d| d.values().all(|s| s.done)).count() as i32};
        for (db, collections) in &c.databases {
            let mut entry = doc! {
                "collections": collections.len() as i32,
                "clonedCollections": collections.values().filter(|s| s.done).count() as i32,
            };
            for (ns, s) in collections {
                let mut collection = doc! {
                    "documentsToCopy": s.documents_to_copy as i64,
                    "documentsCopied": s.documents_copied as i64,
                    "indexes": s.indexes as i64,
                    "fetchedBatches": s.fetched_batches as i64,
                };
                if let Some(at) = s.started_wall_ms {
                    collection.insert("start", bson::DateTime::from_millis(at));
                }
                if s.done {
                    collection.insert("elapsedMillis", s.elapsed_ms as i64);
                }
                entry.insert(ns.clone(), collection);
            }
            databases.insert(db.clone(), entry);
        }
        let mut document = doc! {
            "method": if c.method.is_empty() { "logical" } else { c.method },
            "failedInitialSyncAttempts": c.failed_attempts as i32,
            "maxFailedInitialSyncAttempts": attempts_max() as i32,
            "initialSyncStart": bson::DateTime::from_millis(c.started_wall_ms),
            "totalInitialSyncElapsedMillis": elapsed_ms,
            "initialSyncAttempts": c.attempts.clone(),
            "approxTotalDataSize": c.approx_total_bytes as i64,
            "approxTotalBytesCopied": c.bytes_copied as i64,
            "remainingInitialSyncEstimatedMillis": remaining_ms(&c) as i64,
            "appliedOps": c.applied_ops as i64,
            "initialSyncOplogStart": bson_timestamp(c.oplog_start.ts),
            "syncSourceHost": c.source.clone(),
            "databases": databases,
        };
        if !c.oplog_end.is_null() {
            document.insert("initialSyncOplogEnd", bson_timestamp(c.oplog_end.ts));
        }
        if let Some((_, ended_at)) = c.ended {
            document.insert("initialSyncEnd", ended_at);
        }
        Some(document)
    }
}

/// Bytes per second copied by this process so far.
fn rate(c: &Counters) -> f64 {
    let secs = c.started.map_or(0.0, |at| at.elapsed().as_secs_f64());
    if secs <= 0.0 {
        return 0.0;
    }
    c.bytes_copied.saturating_sub(c.bytes_at_start) as f64 / secs
}

fn remaining_ms(c: &Counters) -> u64 {
    let rate = rate(c);
    let left = c.approx_total_bytes.saturating_sub(c.bytes_copied);
    if rate <= 0.0 {
        return 0;
    }
    (left as f64 / rate * 1000.0) as u64
}

fn log_progress(c: &Counters) {
    let rate = rate(c);
    tracing::info!(target: "repl", id = 21_192, bytes_copied = c.bytes_copied, documents_copied = c.documents_copied,
        approx_total_bytes = c.approx_total_bytes, rate_mb_per_s = format!("{:.1}", rate / 1_048_576.0),
        remaining_ms = remaining_ms(c), source = %c.source, "initial sync progress");
}
