//! The facade the server uses: `Engine`, its `Writer` and `Reader`.
//!
//! CONTRACT (agreed between the storage and server work; change only
//! together with every caller):
//! - Every write is one oplog entry with its own timestamp, committed to the
//!   versioned store and appended to the journal before the call returns;
//!   it is visible to readers at once and durable once the journal's
//!   group commit has fsynced it (`wait_durable`).
//! - A `Writer` holds the engine's single write lock: writes are serialized,
//!   and a read-modify-write done through one `Writer` is atomic.
//! - Record keys are `slipstream_query::index_key::record_key(&_id)`;
//!   index keys are `slipstream_query::index_key` encodings.
//! - Readers see the state at one timestamp (`ReadAt::Latest` = everything
//!   committed when the reader was made).
//!
//! The bodies below are placeholders of the skeleton; the storage work
//! replaces every one of them.

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;

use bson::{Bson, Document, RawDocumentBuf};

use crate::{OpTime, StorageError, Timestamp};

pub type Result<T> = std::result::Result<T, StorageError>;

/// Options of `Engine::open`, from the command line.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub dbpath: PathBuf,
    /// Longest a `j: false` write waits for the group commit (MongoDB's
    /// `--journalCommitInterval`, default 100 ms).
    pub journal_commit_interval_ms: u64,
    /// The oplog's size cap; it is never truncated past the checkpoint.
    pub oplog_size_bytes: u64,
    /// How often the state at the stable timestamp is checkpointed.
    pub checkpoint_interval_ms: u64,
}

impl EngineOptions {
    pub fn new(dbpath: impl Into<PathBuf>) -> Self {
        EngineOptions {
            dbpath: dbpath.into(),
            journal_commit_interval_ms: 100,
            oplog_size_bytes: 1024 * 1024 * 1024,
            checkpoint_interval_ms: 1000,
        }
    }
}

/// One index of a collection, as `listIndexes` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexSpec {
    pub name: String,
    /// The key pattern, e.g. `{a: 1, b: -1}`.
    pub key: Document,
    pub unique: bool,
    pub sparse: bool,
}

/// A collection in the catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct CollectionInfo {
    /// `db.collection`
    pub ns: String,
    pub uuid: bson::Uuid,
    /// The options given to `create` (capped, validator... as stored).
    pub options: Document,
    /// Every index, `_id_` first.
    pub indexes: Vec<IndexSpec>,
    /// Names of indexes that have seen an array value (multikey).
    pub multikey_indexes: Vec<String>,
}

/// Which timestamp a reader reads at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAt {
    /// Everything committed when the reader is made.
    Latest,
    /// The state as of this timestamp (`SnapshotTooOld` below the checkpoint).
    At(Timestamp),
}

/// One entry of an index scan.
#[derive(Clone, Debug)]
pub struct IndexEntry {
    pub index_key: Vec<u8>,
    pub record_key: Vec<u8>,
    pub document: Document,
}

/// The engine's own counters for `serverStatus`.
#[derive(Clone, Debug, Default)]
pub struct EngineStats {
    pub journal_bytes_written: u64,
    pub journal_fsyncs: u64,
    pub journal_entries: u64,
    pub checkpoints: u64,
    pub last_checkpoint_ms: u64,
    pub checkpoint_timestamp: Timestamp,
    pub versions_in_memory: u64,
    pub oplog_first: Timestamp,
    pub oplog_last: Timestamp,
    pub oplog_size_bytes: u64,
}

/// Per-collection sizes for `collStats` / `dbStats`.
#[derive(Clone, Debug, Default)]
pub struct CollectionStats {
    pub count: u64,
    pub data_size_bytes: u64,
    /// (index name, number of keys)
    pub index_key_counts: Vec<(String, u64)>,
}

/// What `validate` found.
#[derive(Clone, Debug, Default)]
pub struct ValidateReport {
    pub valid: bool,
    pub records: u64,
    pub errors: Vec<String>,
    pub keys_per_index: Vec<(String, u64)>,
}

pub struct Engine {
    _private: (),
}

pub struct Writer<'a> {
    _engine: &'a Engine,
}

pub struct Reader {
    _engine: Arc<Engine>,
}

impl Engine {
    /// Takes the lock file (refusing a second process), opens the
    /// checkpoint, replays the journal from its timestamp, starts the group
    /// commit and checkpoint threads.
    pub fn open(_options: EngineOptions) -> Result<Arc<Engine>> {
        unimplemented!("skeleton")
    }

    /// Final checkpoint, stop threads, close files, release the lock file.
    pub fn shutdown(&self) -> Result<()> {
        unimplemented!("skeleton")
    }

    pub fn list_databases(&self) -> Vec<String> {
        unimplemented!("skeleton")
    }

    pub fn list_collections(&self, _db: &str) -> Vec<CollectionInfo> {
        unimplemented!("skeleton")
    }

    pub fn collection_info(&self, _ns: &str) -> Option<CollectionInfo> {
        unimplemented!("skeleton")
    }

    /// Logs `{op: "c", o: {create: coll, ...options}}`. `NamespaceExists` if present.
    pub fn create_collection(&self, _ns: &str, _options: Document) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    /// `NamespaceNotFound` if absent.
    pub fn drop_collection(&self, _ns: &str) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    /// `None` when the database held nothing.
    pub fn drop_database(&self, _db: &str) -> Result<Option<OpTime>> {
        unimplemented!("skeleton")
    }

    pub fn rename_collection(&self, _from: &str, _to: &str, _drop_target: bool) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    /// Creates the collection if needed, builds each new index from the
    /// existing documents (DuplicateKey if a unique one cannot be built).
    /// Returns (indexes before, indexes after, optime of the last entry).
    pub fn create_indexes(&self, _ns: &str, _specs: Vec<IndexSpec>) -> Result<(usize, usize, Option<OpTime>)> {
        unimplemented!("skeleton")
    }

    /// Drops the named indexes (`"*"`: all but `_id_`); returns the number of
    /// indexes before.
    pub fn drop_indexes(&self, _ns: &str, _names: &[String]) -> Result<(usize, OpTime)> {
        unimplemented!("skeleton")
    }

    /// Takes the write lock.
    pub fn writer(&self) -> Writer<'_> {
        unimplemented!("skeleton")
    }

    pub fn reader(self: &Arc<Self>, _at: ReadAt) -> Result<Reader> {
        unimplemented!("skeleton")
    }

    /// Blocks until the journal has fsynced every entry up to `ts`
    /// (asks the group commit to sync now rather than at the interval).
    pub fn wait_durable(&self, _ts: Timestamp) -> Result<()> {
        unimplemented!("skeleton")
    }

    /// Changes whenever the durable timestamp moves.
    pub fn durable_watch(&self) -> tokio::sync::watch::Receiver<Timestamp> {
        unimplemented!("skeleton")
    }

    pub fn last_applied(&self) -> OpTime {
        unimplemented!("skeleton")
    }

    pub fn last_durable(&self) -> OpTime {
        unimplemented!("skeleton")
    }

    pub fn checkpoint_timestamp(&self) -> Timestamp {
        unimplemented!("skeleton")
    }

    /// Writes a checkpoint at the stable timestamp now; returns its timestamp.
    pub fn checkpoint_now(&self) -> Result<Timestamp> {
        unimplemented!("skeleton")
    }

    /// Discards every version and oplog entry above `ts` (which must be at
    /// or above the checkpoint timestamp).
    pub fn rollback_to(&self, _ts: Timestamp) -> Result<()> {
        unimplemented!("skeleton")
    }

    /// Oplog entries in timestamp order starting after/at `from`, at most
    /// `max_entries` and about `max_bytes`.
    pub fn oplog_read(&self, _from: Bound<Timestamp>, _max_entries: usize, _max_bytes: usize) -> Result<Vec<RawDocumentBuf>> {
        unimplemented!("skeleton")
    }

    /// The newest `max_entries` oplog entries, newest first (`$natural: -1`).
    pub fn oplog_read_newest(&self, _max_entries: usize) -> Result<Vec<RawDocumentBuf>> {
        unimplemented!("skeleton")
    }

    /// Changes whenever a new oplog entry becomes visible (tailable cursors).
    pub fn oplog_watch(&self) -> tokio::sync::watch::Receiver<Timestamp> {
        unimplemented!("skeleton")
    }

    /// Applies oplog entries written elsewhere, at their own timestamps
    /// (recovery uses the same path; secondaries will).
    pub fn apply_oplog_entries(&self, _entries: &[Document]) -> Result<()> {
        unimplemented!("skeleton")
    }

    pub fn stats(&self) -> EngineStats {
        unimplemented!("skeleton")
    }

    pub fn collection_stats(&self, _ns: &str) -> Result<CollectionStats> {
        unimplemented!("skeleton")
    }

    /// md5 of each collection's documents in `_id` order, as hex.
    pub fn db_hash(&self, _db: &str, _collections: Option<&[String]>) -> Result<Vec<(String, String)>> {
        unimplemented!("skeleton")
    }

    pub fn validate(&self, _ns: &str) -> Result<ValidateReport> {
        unimplemented!("skeleton")
    }
}

impl Writer<'_> {
    /// Inserts `document` (which must hold `_id`), creating the collection
    /// if needed (its create entry is logged first). Checks unique indexes.
    pub fn insert(&mut self, _ns: &str, _document: Document) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    /// Replaces the document with `_id == id` by `new_document` (the full
    /// post-image), logging `{op: "u", o2: {_id}, o: oplog_update}` where
    /// `oplog_update` is the idempotent form from `slipstream_query::update`.
    pub fn update(&mut self, _ns: &str, _id: &Bson, _new_document: Document, _oplog_update: Document) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    pub fn delete(&mut self, _ns: &str, _id: &Bson) -> Result<OpTime> {
        unimplemented!("skeleton")
    }

    /// A reader that sees every write made so far, this writer's included.
    pub fn reader(&self) -> Reader {
        unimplemented!("skeleton")
    }
}

impl Reader {
    pub fn read_timestamp(&self) -> Timestamp {
        unimplemented!("skeleton")
    }

    pub fn get(&self, _ns: &str, _id: &Bson) -> Result<Option<Document>> {
        unimplemented!("skeleton")
    }

    /// Documents in record-key (`_id`) order within the key range.
    pub fn scan(&self, _ns: &str, _start: Bound<Vec<u8>>, _end: Bound<Vec<u8>>, _reverse: bool, _limit: usize) -> Result<Vec<(Vec<u8>, Document)>> {
        unimplemented!("skeleton")
    }

    /// Index entries in (index key, record key) order within the index-key
    /// range, resuming strictly after `resume_after` when given.
    pub fn scan_index(
        &self,
        _ns: &str,
        _index_name: &str,
        _start: Bound<Vec<u8>>,
        _end: Bound<Vec<u8>>,
        _reverse: bool,
        _resume_after: Option<(Vec<u8>, Vec<u8>)>,
        _limit: usize,
    ) -> Result<Vec<IndexEntry>> {
        unimplemented!("skeleton")
    }

    pub fn count(&self, _ns: &str) -> Result<u64> {
        unimplemented!("skeleton")
    }
}
