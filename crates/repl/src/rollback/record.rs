//! What a member knows of its rollbacks: the last one (shown by
//! `replSetGetStatus.lastRollback` and `serverStatus.repl.rollback`, and
//! kept across restarts in the local document `replset.rollback`, which is
//! also the "rollback in progress" marker), the counters of
//! `serverStatus.metrics.repl.rollback`, why the last search failed (the
//! member's `infoMessage`), and the test-only fail point
//! `rollbackHangBeforeStep`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use slipstream_clock::OpTime;
use slipstream_storage::{bson_timestamp, from_bson_timestamp, Engine, StorageError};

use crate::error::ReplError;

/// The local document that records the last rollback.
pub const MARKER_NAME: &str = "replset.rollback";
/// Longest list of files kept in the record (a rollback touching more
/// namespaces still writes them all; the log names each).
pub const RECORDED_FILES_MAX: usize = 100;
/// How often a hanging rollback looks at its fail point again.
const HANG_POLL_MS: u64 = 50;

/// The last rollback, as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct RollbackRecord {
    /// True from before the rollback id moves until the truncation is done:
    /// a restart that finds it true finishes the truncation.
    pub in_progress: bool,
    pub common_point: OpTime,
    pub sync_source: String,
    /// Wall date the rollback began, ms since the epoch.
    pub started_wall_ms: i64,
    pub finished_wall_ms: Option<i64>,
    pub undone_entries: u64,
    pub documents_saved: u64,
    /// `(namespace, path)` of each rollback file.
    pub files: Vec<(String, String)>,
}

impl RollbackRecord {
    pub fn to_document(&self) -> Document {
        let files: Vec<Bson> = self
            .files
            .iter()
            .take(RECORDED_FILES_MAX)
            .map(|(ns, path)| Bson::Document(doc! {"ns": ns, "path": path}))
            .collect();
        let mut document = doc! {
            "_id": "rollback",
            "inProgress": self.in_progress,
            "date": bson::DateTime::from_millis(self.started_wall_ms),
            "commonPoint": {"ts": bson_timestamp(self.common_point.ts), "t": self.common_point.term},
            "syncSource": self.sync_source.clone(),
            "undoneEntries": self.undone_entries as i64,
            "documentsSaved": self.documents_saved as i64,
            "files": files,
        };
        if let Some(finished) = self.finished_wall_ms {
            document.insert("finished", bson::DateTime::from_millis(finished));
            document.insert("durationMillis", finished - self.started_wall_ms);
        }
        document
    }

    pub fn from_document(document: &Document) -> Option<RollbackRecord> {
        let common = document.get_document("commonPoint").ok()?;
        let files = document
            .get_array("files")
            .ok()?
            .iter()
            .filter_map(|file| {
                let file = file.as_document()?;
                Some((
                    file.get_str("ns").ok()?.to_owned(),
                    file.get_str("path").ok()?.to_owned(),
                ))
            })
            .collect();
        Some(RollbackRecord {
            in_progress: document.get_bool("inProgress").ok()?,
            common_point: OpTime::new(
                from_bson_timestamp(common.get_timestamp("ts").ok()?),
                common.get_i64("t").ok()?,
            ),
            sync_source: document.get_str("syncSource").unwrap_or_default().to_owned(),
            started_wall_ms: document.get_datetime("date").ok()?.timestamp_millis(),
            finished_wall_ms: document.get_datetime("finished").ok().map(|d| d.timestamp_millis()),
            undone_entries: document.get_i64("undoneEntries").unwrap_or(0) as u64,
            documents_saved: document.get_i64("documentsSaved").unwrap_or(0) as u64,
            files,
        })
    }
}

/// Reads the stored record (`None` when this member never rolled back).
pub fn read_marker(engine: &Engine) -> Result<Option<RollbackRecord>, ReplError> {
    let Some(document) = engine.local().read(MARKER_NAME)? else {
        return Ok(None);
    };
    match RollbackRecord::from_document(&document) {
        Some(record) => Ok(Some(record)),
        None => Err(ReplError::from(StorageError::Corruption(format!(
            "the local document {MARKER_NAME} is not a rollback record: {document}"
        )))),
    }
}

/// Stores the record durably (fsynced before it returns).
pub fn write_marker(engine: &Engine, record: &RollbackRecord) -> Result<(), ReplError> {
    Ok(engine.local().write(MARKER_NAME, &record.to_document())?)
}

/// The rollback part of the member's shared state (locks internally).
#[derive(Default)]
pub struct RollbackState {
    last: Mutex<Option<RollbackRecord>>,
    /// Why the last common point search failed; cleared by a success.
    info_message: Mutex<String>,
    /// Set while the member is too stale to catch up from its sources.
    too_stale: std::sync::atomic::AtomicBool,
    /// `rollbackHangBeforeStep`: the step to stop before, when set.
    hang_before_step: Mutex<Option<u32>>,
    rollbacks: AtomicU64,
    undone_entries: AtomicU64,
    documents_saved: AtomicU64,
    searches_failed: AtomicU64,
    total_micros: AtomicU64,
}

impl RollbackState {
    pub fn last(&self) -> Option<RollbackRecord> {
        self.last.lock().clone()
    }

    pub fn set_last(&self, record: RollbackRecord) {
        *self.last.lock() = Some(record);
    }

    pub fn info_message(&self) -> String {
        self.info_message.lock().clone()
    }

    pub fn set_info_message(&self, message: String) {
        *self.info_message.lock() = message;
    }

    pub fn too_stale(&self) -> bool {
        self.too_stale.load(Ordering::SeqCst)
    }

    /// Marks the member too stale; false if it already was.
    pub fn set_too_stale(&self, stale: bool) -> bool {
        self.too_stale.swap(stale, Ordering::SeqCst) != stale
    }

    pub fn note_search_failed(&self) {
        self.searches_failed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn note_finished(&self, record: &RollbackRecord, elapsed: Duration) {
        self.rollbacks.fetch_add(1, Ordering::Relaxed);
        self.undone_entries.fetch_add(record.undone_entries, Ordering::Relaxed);
        self.documents_saved
            .fetch_add(record.documents_saved, Ordering::Relaxed);
        self.total_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// `serverStatus.metrics.repl.rollback`.
    pub fn metrics_document(&self) -> Document {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        doc! {
            "num": load(&self.rollbacks),
            "totalMillis": load(&self.total_micros) / 1_000,
            "undoneEntries": load(&self.undone_entries),
            "documentsSaved": load(&self.documents_saved),
            "commonPointSearchesFailed": load(&self.searches_failed),
        }
    }

    /// `serverStatus.repl.rollback`: the counters and the last rollback.
    pub fn server_status_document(&self) -> Document {
        let mut document = self.metrics_document();
        if let Some(last) = self.last() {
            document.insert("lastRollback", status_document(&last));
        }
        document
    }

    /// `configureFailPoint: "rollbackHangBeforeStep"`, `data: {step: N}`.
    pub fn configure_hang(&self, step: Option<u32>) -> i64 {
        let previous = std::mem::replace(&mut *self.hang_before_step.lock(), step);
        i64::from(previous.is_some())
    }

    /// Stops here while the fail point names `step` (a test then kills the
    /// process, or turns the fail point off).
    pub fn hang_before(&self, step: u32) {
        let mut logged = false;
        while *self.hang_before_step.lock() == Some(step) {
            if !logged {
                tracing::warn!(target: "repl", step, "rollback hangs before step (fail point rollbackHangBeforeStep)");
                logged = true;
            }
            std::thread::sleep(Duration::from_millis(HANG_POLL_MS));
        }
    }
}

/// `replSetGetStatus.lastRollback`: the record without its local `_id`.
pub fn status_document(record: &RollbackRecord) -> Document {
    let mut document = record.to_document();
    document.remove("_id");
    document
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_clock::Timestamp;

    #[test]
    fn a_record_survives_its_document() {
        let record = RollbackRecord {
            in_progress: true,
            common_point: OpTime::new(Timestamp::new(5, 2), 3),
            sync_source: "h:1".into(),
            started_wall_ms: 1_700_000_000_000,
            finished_wall_ms: Some(1_700_000_000_250),
            undone_entries: 7,
            documents_saved: 4,
            files: vec![("d.c".into(), "/x/rollback/d.c/removed.bson".into())],
        };
        let document = record.to_document();
        assert_eq!(document.get_i64("durationMillis").ok(), Some(250));
        assert_eq!(RollbackRecord::from_document(&document), Some(record));
        assert_eq!(RollbackRecord::from_document(&doc! {"_id": "rollback"}), None);
    }

    #[test]
    fn the_fail_point_holds_only_its_step() {
        let state = RollbackState::default();
        assert_eq!(state.configure_hang(Some(3)), 0);
        state.hang_before(2);
        assert_eq!(state.configure_hang(None), 1);
        state.hang_before(3);
    }
}
