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
//! - Reads of a collection or index that does not exist at the reader's
//!   timestamp find nothing (`Ok(None)`, empty, 0) rather than an error;
//!   `scan_index` with an unknown index name answers `IndexNotFound`.
//!
//! - Client writes commit only while the write gate is open (checked in
//!   the commit's critical section), with the gate's term; entries from a
//!   sync source go through `apply_batch` instead, which bypasses the gate
//!   and makes each batch visible whole.
//!
//! The engine's parts: `lock_file` (one process per dbpath), `redb_engine`
//! behind `kv` (checkpoints), `mvcc` (versions above the checkpoint),
//! `catalog`, `journal` (the oplog), `apply` (one entry's changes),
//! `checkpoint` and `recovery`, `local_store` (the local documents); here,
//! `write_gate`, `apply_batch`, `cluster_time` and `local_view` (local
//! documents as collections). Client writes follow one path
//! (`Inner::commit`): check the gate, tick the clock, compute the entry's
//! changes against the newest state (checks first, nothing written yet),
//! add a retryable write's session bookkeeping, append the entry to the
//! journal, commit the changes to memory at the entry's timestamp, publish
//! it.

use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use bson::{doc, Bson, Document, RawDocumentBuf};
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use slipstream_query::index_key::{prefix_end, record_key, KeyPattern};

use crate::apply::{
    encode_document, index_store_key, parse_document, record_store_key, split_index_entry, table_prefix, table_range,
    Applier, Strictness,
};
use crate::catalog::{Catalog, CatalogHistory, CollectionMeta};
use crate::collection_totals::{self, CollectionTotals};
use crate::history::{catalog_at, CatalogVersions};
use crate::index_spec::{IndexModification, Verdict};
use crate::io::{IoBackend, StdIo};
use crate::journal::{EntryMeta, Journal, JournalOptions};
use crate::kv::KvEngine;
use crate::local_store::{LocalDocuments, LocalStore};
use crate::lock_file::{create_data_directory, LockFile};
use crate::mvcc::{BaseView, ReadView, VersionedStore};
use crate::oplog_entry::{build_raw, command_namespace, split_namespace, EntryFields, OpKind, OplogEntry};
use crate::poison::{FailedPart, PoisonPolicy};
use crate::position::{Position, PositionCell};
use local_view::{is_local_namespace, local_collection_info, local_document, local_get, local_namespaces, local_scan};
use crate::session::{RetryImage, StatementSession};
use crate::timestamp::{OplogClock, UNINITIALIZED_TERM};
use crate::{OpTime, StorageError, Timestamp};

mod apply_batch;
mod bulk_load;
mod capped;
mod checkpoint_copy;
mod index_build;
mod cluster_time;
mod local_view;
mod oplog_hold;
mod reset;
mod validate;
mod write_gate;

pub(crate) use oplog_hold::retain_floor;
pub use index_build::{IndexBuildReport, BUILD_COMMIT_BYTES, SORT_DIRECTORY, SORT_RUN_BYTES};
pub use checkpoint_copy::{
    CheckpointCopy, CHECKPOINT_COPY_LEASE, CHECKPOINT_COPY_READ_BYTES_MAX, INSTALL_MARKER_FILE_NAME, STAGED_FILE_NAME,
};
pub use oplog_hold::{OplogHoldError, OPLOG_HOLD_LEASE_MAX};
pub use reset::{ResetStep, RESET_MARKER_FILE_NAME};
pub use write_gate::WriteGate;

pub type Result<T> = std::result::Result<T, StorageError>;

/// Options of `Engine::open`, from the command line.
#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub dbpath: PathBuf,
    /// Longest a `j: false` write waits for the group commit (MongoDB's
    /// `--journalCommitInterval`, default 100 ms).
    pub journal_commit_interval_ms: u64,
    /// The oplog's size cap; it is never truncated past the checkpoint. A
    /// cap set by `resize_oplog` and kept in the data directory wins over
    /// it, as MongoDB's stored oplog size wins over `--oplogSize`.
    pub oplog_size_bytes: u64,
    /// MongoDB's `oplogMinRetentionHours`: entries younger than this stay
    /// even over the cap (0: none is kept for its age).
    pub oplog_min_retention_hours: f64,
    /// How often the state at the stable timestamp is checkpointed
    /// (`CHECKPOINT_INTERVAL_MS_DEFAULT` unless set).
    pub checkpoint_interval_ms: u64,
    /// What a failed journal or checkpoint write or fsync does (by default:
    /// log the cause and abort the process, see `poison.rs`).
    pub poison_policy: PoisonPolicy,
    /// Start from the checkpoint even when the journal no longer reaches
    /// it (`--accept-journal-loss`): the writes it held are given up on
    /// purpose. Without it such an open fails with `JournalLost`.
    pub accept_journal_loss: bool,
    /// A replica set member (`--replSet`): checkpoints stay at or below the
    /// stable timestamp (the commit point) unless memory passes
    /// `history_bytes_max`, and then keep on disk the history a rollback to
    /// it needs (`checkpoint.rs`); the write gate starts closed, and
    /// clients may not write to the `local` database.
    pub replicated: bool,
    /// Most bytes the versions above the checkpoint may take in memory
    /// before a checkpoint goes past the commit point (`version_bytes`).
    pub history_bytes_max: u64,
    /// The checkpoint store's page cache.
    pub kv_cache_bytes: usize,
    /// How far back snapshot reads reach (MongoDB's
    /// `minSnapshotHistoryWindowInSeconds`): the checkpoint thread keeps
    /// the versions of this many seconds in memory while they fit in
    /// `history_bytes_max` (past it the window shrinks). 0: checkpoints
    /// follow the stable timestamp. Changeable at runtime.
    pub snapshot_history_window_secs: u32,
    /// The journal's memory (`JournalOptions::recent_cache_bytes_max` and
    /// `pending_bytes_max`); the node sizes both from `--cache-size-mb`.
    pub journal_recent_cache_bytes: usize,
    pub journal_pending_bytes: usize,
    /// Threads that read ahead the documents a batch of oplog entries
    /// (applied from a sync source, or replayed by recovery) will read
    /// (`read_ahead.rs`); below 2, none.
    pub read_ahead_threads: usize,
}

/// Default of `EngineOptions::history_bytes_max`.
pub const HISTORY_BYTES_MAX_DEFAULT: u64 = 256 * 1024 * 1024;

impl EngineOptions {
    pub fn new(dbpath: impl Into<PathBuf>) -> Self {
        EngineOptions {
            dbpath: dbpath.into(),
            journal_commit_interval_ms: 100,
            oplog_size_bytes: 1024 * 1024 * 1024,
            oplog_min_retention_hours: 0.0,
            checkpoint_interval_ms: CHECKPOINT_INTERVAL_MS_DEFAULT,
            poison_policy: PoisonPolicy::default(),
            accept_journal_loss: false,
            replicated: false,
            history_bytes_max: HISTORY_BYTES_MAX_DEFAULT,
            kv_cache_bytes: crate::redb_engine::CACHE_SIZE_BYTES,
            snapshot_history_window_secs: 0,
            journal_recent_cache_bytes: crate::journal::RECENT_CACHE_BYTES_MAX,
            journal_pending_bytes: crate::journal::PENDING_BYTES_MAX,
            read_ahead_threads: crate::read_ahead::READ_AHEAD_THREADS_DEFAULT,
        }
    }
}

/// Checkpoint interval of a node. Each checkpoint is one redb commit with
/// an fsync of everything changed since the last; at one second, under a
/// sustained journaled load, those large fsyncs competed with the
/// journal's every second and set the tail latency (insert-j, 32
/// connections: p99 7.4-10.2 ms, p999 32-38 ms; at five seconds 6.0-6.4 ms
/// and 14-21 ms, with less CPU per insert). The price: up to five seconds
/// of writes held in memory and replayed from the journal after a crash.
pub const CHECKPOINT_INTERVAL_MS_DEFAULT: u64 = 5000;

pub use crate::index_spec::IndexSpec;

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
    /// What the versions in memory cost (`mvcc::version_bytes`).
    pub history_bytes_in_memory: u64,
    /// The bound on it (`EngineOptions::history_bytes_max`).
    pub history_bytes_max: u64,
    /// The oldest timestamp reads and `rollback_to` reach: the history
    /// floor when the checkpoint is past the commit point, else the
    /// checkpoint timestamp.
    pub oldest_timestamp: Timestamp,
    /// The history floor (None: no history on disk).
    pub history_floor: Option<Timestamp>,
    /// Checkpoints written past the stable timestamp, with history.
    pub checkpoints_past_stable: u64,
    pub oplog_first: Timestamp,
    pub oplog_last: Timestamp,
    pub oplog_size_bytes: u64,
    /// The oplog's size cap (`--oplogSize`, or `replSetResizeOplog`'s); it
    /// may hold more while a checkpoint still needs older entries, or while
    /// they are younger than the minimum retention.
    pub oplog_size_cap_bytes: u64,
    /// The minimum retention of oplog entries, in hours (0: none).
    pub oplog_min_retention_hours: f64,
    /// Oplog segments deleted by the size cap since open.
    pub oplog_segments_truncated: u64,
    /// Time spent deleting them, in microseconds.
    pub oplog_truncate_micros: u64,
    /// Time opening the journal took (finding its segments and entries).
    pub oplog_open_micros: u64,
    /// How long the oldest write that is not yet fsynced has waited (a
    /// `w: 1` write is acknowledged before its fsync); zero when every
    /// write is durable.
    pub oldest_unsynced_write_age_ms: u64,
    /// Zeros written and fsynced ahead of the journal's appends (the rest
    /// of its active segment and a ready spare segment).
    pub journal_preallocated_bytes: u64,
    /// Spare journal segments prepared since open.
    pub journal_spares_prepared: u64,
    /// Journal segments read whole when the node started, and sealed ones
    /// taken from their index files unread (`journal/index_file.rs`).
    pub journal_segments_scanned_at_open: u64,
    pub journal_segments_indexed_at_open: u64,
    /// Index files of sealed journal segments written since open.
    pub journal_index_files_written: u64,
    /// Bytes the checkpoint store's page cache holds now.
    pub kv_cache_bytes_used: u64,
    /// Its bound (`EngineOptions::kv_cache_bytes`).
    pub kv_cache_bytes_max: u64,
    /// Bytes of recent oplog entries the journal keeps for readers, and of
    /// its index of every entry it holds (`journal/index.rs`).
    pub journal_cache_bytes: u64,
    pub journal_index_bytes: u64,
}

/// Per-collection sizes for `collStats` / `dbStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// Journal segment size: an eighth of the oplog's size cap (the cap frees
/// whole segments, so this is its granularity), within these bounds so that
/// rotation stays rare and files stay manageable.
const JOURNAL_SEGMENT_BYTES_MIN: u64 = 1024 * 1024;
const JOURNAL_SEGMENT_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Documents per batch when a whole collection is read internally (count,
/// dbHash, validate, stats).
const FULL_SCAN_BATCH_MAX: usize = 1024;

/// Attempts to take a Latest view while checkpoints move past it.
const READER_ATTEMPTS_MAX: usize = 16;

/// The longest `wait_durable_async` waits on the durable watch before it
/// looks at the journal again (a safety net; the watch normally wakes it).
const DURABLE_RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// The write lock's state. Guarded by `Inner::write`.
pub(crate) struct WriteState {
    pub clock: OplogClock,
    /// Whether client writes are taken, and the term their entries carry.
    /// Checked by every client write in the critical section of its commit.
    pub gate: WriteGate,
}

/// Everything shared by the engine, its readers and its threads.
pub(crate) struct Inner {
    /// Read-only after open.
    pub options: EngineOptions,
    /// The file system the journal and the local documents go through
    /// (read-only after open; a reset writes its marker through it).
    pub io: Arc<dyn IoBackend>,
    /// The checkpoint store; written only by the checkpoint (under
    /// `checkpoint_lock`).
    pub kv: Arc<dyn KvEngine>,
    /// Versions above the checkpoint (locks internally).
    pub store: VersionedStore,
    /// Catalog versions; pushed to under `write`, folded by the checkpoint.
    pub catalog: RwLock<CatalogHistory>,
    /// The oplog (locks internally).
    pub journal: Journal,
    /// The minimum retention of oplog entries in hours, as set (f64 bits;
    /// the journal keeps it in seconds).
    pub oplog_min_retention_hours: AtomicU64,
    /// The durable documents of `local` that are not oplog entries (locks
    /// internally).
    pub local: LocalStore,
    /// The single write lock: every change of data, catalog and journal.
    pub write: Mutex<WriteState>,
    /// The newest applied and visible entry: its timestamp (readers at
    /// `Latest` read at it), term and wall date. Stored under `write` after
    /// the entry's (or the batch's) changes are in memory.
    pub applied: PositionCell,
    /// The greatest cluster time seen: advanced by gossip without any lock,
    /// and by every timestamp the oplog clock hands out or an applied batch
    /// brings (as u64). The clock never ticks at or below it.
    pub cluster_time: AtomicU64,
    /// Fires after each entry becomes visible (tailable oplog cursors).
    pub visible_tx: tokio::sync::watch::Sender<Timestamp>,
    /// The stable timestamp when replication sets one; None on a standalone
    /// (the journal's durable timestamp is used). A replicated engine starts
    /// at its checkpoint's timestamp. Only grows.
    pub stable_ts: Mutex<Option<Timestamp>>,
    /// Serializes checkpoints and rollbacks.
    pub checkpoint_lock: Mutex<()>,
    /// Initial syncs' leases on old oplog entries (`oplog_hold.rs`).
    pub oplog_holds: Mutex<oplog_hold::OplogHolds>,
    /// Set when a checkpoint commit failed: no more writes.
    pub poisoned: Mutex<Option<String>>,
    pub shutting_down: AtomicBool,
    pub checkpoints: AtomicU64,
    pub checkpoints_past_stable: AtomicU64,
    pub last_checkpoint_ms: AtomicU64,
    /// The catalog at the history floor and each version above it up to the
    /// checkpoint (empty without history): readers below the checkpoint
    /// take theirs here. Written under `catalog`'s write lock.
    pub history_catalogs: RwLock<CatalogVersions>,
    /// `EngineOptions::snapshot_history_window_secs`, as set now.
    pub snapshot_window_secs: AtomicU32,
    /// What the versions above each recent visible timestamp cost: how far
    /// the window must slide to stay within its share of memory
    /// (`window_marks.rs`). Sampled by the checkpoint thread.
    pub window_marks: Mutex<crate::window_marks::WindowMarks>,
    /// Held until shutdown (or the last user of the files goes away).
    pub lock_file: Mutex<Option<LockFile>>,
    /// Checkpoint copies in progress from this member (`checkpoint_copy.rs`).
    pub copy_pins: Mutex<checkpoint_copy::CopyPins>,
    /// Told apart from any other process's copies: part of a copy's id.
    pub copy_nonce: u64,
    /// The staged checkpoint copy being written, once opened.
    pub staged: Mutex<Option<checkpoint_copy::StagedFile>>,
    /// Wakes the checkpoint thread early (shutdown).
    pub checkpoint_wake: Condvar,
    pub checkpoint_stop: Mutex<bool>,
}

pub struct Engine {
    inner: Arc<Inner>,
    /// The background checkpoint thread; taken on shutdown/drop.
    checkpoint_thread: Mutex<Option<JoinHandle<()>>>,
}

pub struct Writer<'a> {
    engine: &'a Engine,
    state: MutexGuard<'a, WriteState>,
    /// The retryable-write statement the next inserts, updates and deletes
    /// belong to (`set_session`).
    session: Option<StatementSession>,
    /// The image the next update or delete keeps for a findAndModify retry.
    retry_image: Option<RetryImage>,
}

pub struct Reader {
    inner: Arc<Inner>,
    view: ReadView,
    catalog: Arc<Catalog>,
    /// The local documents when the reader was made.
    local: LocalDocuments,
}

/// Whether a top-level field other than `_id` holds `Timestamp(0, 0)`.
fn has_empty_timestamp(document: &Document) -> bool {
    document.iter().any(|(key, value)| key != "_id" && is_empty_timestamp(value))
}

fn is_empty_timestamp(value: &Bson) -> bool {
    matches!(value, Bson::Timestamp(t) if t.time == 0 && t.increment == 0)
}

/// `document` with each top-level empty timestamp but `_id`'s set to `ts`.
fn with_empty_timestamps_filled(document: &Document, ts: Timestamp) -> Document {
    document
        .iter()
        .map(|(key, value)| {
            let filled = key != "_id" && is_empty_timestamp(value);
            let value = if filled { Bson::Timestamp(crate::timestamp::bson_timestamp(ts)) } else { value.clone() };
            (key.clone(), value)
        })
        .collect()
}

fn wall_clock_secs() -> u32 {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    u32::try_from(secs).unwrap_or(u32::MAX)
}

/// One change to log: what `Inner::commit` needs besides the applier work.
struct EntryPlan {
    op: OpKind,
    ns: String,
    ui: Option<bson::Uuid>,
    o: RawDocumentBuf,
    o2: Option<RawDocumentBuf>,
}

fn raw(document: &Document) -> Result<RawDocumentBuf> {
    RawDocumentBuf::try_from(document).map_err(|e| StorageError::InvalidDocument(e.to_string()))
}

fn raw_from_bytes(bytes: Vec<u8>) -> Result<RawDocumentBuf> {
    RawDocumentBuf::from_bytes(bytes).map_err(|e| StorageError::Corruption(format!("oplog entry is not BSON: {e}")))
}

/// A retryable write's statement, for one commit.
pub(crate) struct StatementPlan<'s> {
    pub session: &'s StatementSession,
    pub retry_image: Option<RetryImage>,
}

impl Inner {
    pub(crate) fn visible(&self) -> Timestamp {
        self.applied.ts()
    }

    fn check_writable(&self) -> Result<()> {
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(StorageError::ShuttingDown);
        }
        if let Some(reason) = &*self.poisoned.lock() {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        Ok(())
    }

    /// Refuses a client write to the `local` database of a replica set
    /// member: every client write is an oplog entry, and `local` must never
    /// replicate (the `LocalStore` is the only way to write there).
    pub(crate) fn check_client_namespace(&self, ns: &str) -> Result<()> {
        if self.options.replicated && (ns == "local" || ns.starts_with("local.")) {
            // A command's entry names `local.$cmd`: the database is what
            // the client wrote to.
            let target = if ns.ends_with(".$cmd") { "the local database" } else { ns };
            return Err(StorageError::IllegalOperation(format!(
                "cannot write to {target}: the local database of a replica set member is not replicated"
            )));
        }
        Ok(())
    }

    /// Makes an entry's changes visible: the store and catalog first, then
    /// the position readers use.
    pub(crate) fn publish(&self, position: Position, applier_changes: Applier<'_>) {
        let ts = position.optime.ts;
        let Applier { catalog, catalog_changed, changes, .. } = applier_changes;
        self.store.write(ts, changes);
        if catalog_changed {
            self.catalog.write().push(ts, catalog);
        }
        self.make_visible(position);
    }

    /// Moves the position readers read at (one entry's, or a whole
    /// batch's): after this, `Latest` readers and the oplog tail see
    /// everything up to it. Called under `write`.
    pub(crate) fn make_visible(&self, position: Position) {
        self.applied.store(position);
        self.visible_tx.send_replace(position.optime.ts);
    }

    /// The write path of every client entry: the gate, tick, compute (all
    /// checks), the session bookkeeping, append to the journal, commit to
    /// memory, publish. The gate is read under the write lock, in the same
    /// critical section as the commit, so a stepdown that closes it cannot
    /// interleave with a write.
    fn commit(
        &self,
        state: &mut WriteState,
        statement: Option<StatementPlan<'_>>,
        compute: impl FnOnce(&mut Applier<'_>, Timestamp) -> Result<Option<EntryPlan>>,
    ) -> Result<Option<OpTime>> {
        self.check_writable()?;
        let WriteGate::Open { term } = state.gate else {
            return Err(StorageError::NotWritablePrimary);
        };
        let ts = self.tick(&mut state.clock);
        let catalog = self.catalog.read().latest();
        let mut applier = Applier::new(&self.store, &catalog, Strictness::Write);
        applier.entry_ts = ts;
        applier.capture_images = statement.as_ref().is_some_and(|s| s.retry_image.is_some());
        let Some(plan) = compute(&mut applier, ts)? else {
            return Ok(None);
        };
        self.check_client_namespace(&plan.ns)?;
        let optime = OpTime::new(ts, term);
        let wall = bson::DateTime::now();
        let session = match &statement {
            Some(statement) => Some(applier.record_statement(statement.session, statement.retry_image, optime, wall)?),
            None => None,
        };
        let bytes = build_raw(&EntryFields {
            ts,
            term,
            op: plan.op,
            ns: &plan.ns,
            ui: plan.ui,
            o: &plan.o,
            o2: plan.o2.as_deref(),
            wall,
            session: session.as_ref(),
            needs_retry_image: statement.and_then(|s| s.retry_image),
        });
        let meta = EntryMeta { term, wall_ms: wall.timestamp_millis() };
        self.journal.append_with_meta(ts, meta, &bytes)?;
        self.publish(Position::new(optime, meta.wall_ms), applier);
        Ok(Some(optime))
    }

    fn reader_at(self: &Arc<Self>, at: ReadAt) -> Result<Reader> {
        // The catalog lock is held across taking the view so that the
        // checkpoint cannot fold the catalog history past a view whose
        // base it has just replaced.
        let history = self.catalog.read();
        let mut attempts = 0;
        loop {
            let visible = self.visible();
            let ts = match at {
                ReadAt::Latest => visible,
                // A timestamp beyond the newest entry reads the newest state.
                ReadAt::At(ts) => ts.min(visible),
            };
            if let Some(view) = self.store.view(ts) {
                let catalog = if ts < view.base.ts {
                    catalog_at(&self.history_catalogs.read(), ts).expect("the history holds the catalog at its floor")
                } else {
                    history.at(ts)
                };
                return Ok(Reader { inner: self.clone(), view, catalog, local: self.local.snapshot() });
            }
            // A checkpoint may pass a Latest timestamp read a moment ago;
            // the newer visible timestamp is then above it.
            attempts += 1;
            if at != ReadAt::Latest || attempts >= READER_ATTEMPTS_MAX {
                return Err(StorageError::SnapshotTooOld(format!(
                    "{ts} is older than the oldest timestamp held, {}",
                    self.store.base().oldest_readable()
                )));
            }
        }
    }

    /// The oldest timestamp the snapshot window wants kept in memory (its
    /// start), or None without a window. A standalone keeps none: it refuses
    /// snapshot reads (as MongoDB's does), and a window would only hold its
    /// checkpoints five minutes back, with as much journal to replay.
    pub(crate) fn snapshot_window_start(&self) -> Option<Timestamp> {
        let window = self.snapshot_window_secs.load(Ordering::Relaxed);
        (self.options.replicated && window > 0).then(|| Timestamp::new(wall_clock_secs().saturating_sub(window), 0))
    }

    /// The start of the snapshot window as memory allows it: the oldest
    /// timestamp above which the versions fit in the window's share of
    /// `history_bytes_max` (`WINDOW_SHARE_DIVISOR`), or None while all of
    /// them fit.
    pub(crate) fn window_memory_start(&self) -> Option<Timestamp> {
        let budget = self.options.history_bytes_max / crate::checkpoint::WINDOW_SHARE_DIVISOR;
        self.window_marks.lock().start_within(self.store.bytes_written(), budget)
    }

    /// The newest timestamp any checkpoint may cover: durable and visible.
    pub(crate) fn checkpoint_limit(&self) -> Timestamp {
        self.journal.durable_ts().min(self.visible())
    }

    /// The one floor: the oldest timestamp anything may still need from the
    /// journal, i.e. where recovery after a crash starts and how far down
    /// `rollback_to` and reads reach: the history floor while the
    /// checkpoint is past the commit point, else the checkpoint's
    /// timestamp. Every consumer reads it here: the journal's retention
    /// (`retain_journal_for_floor`), recovery's check that the journal
    /// reaches it, `rollback_to`'s lower bound, snapshot reads'
    /// `SnapshotTooOld`, and the oplog window's `retainedFrom`.
    pub(crate) fn recovery_floor(&self) -> Timestamp {
        self.store.base().oldest_readable()
    }

    /// Tells the journal's size cap to keep everything from the floor, after
    /// the floor moved (a checkpoint, or the open).
    pub(crate) fn retain_journal_for_floor(&self) {
        let floor = self.recovery_floor();
        // An initial sync reading from this member may still need older
        // entries (`engine/oplog_hold.rs`).
        let hold = self.oplog_holds.lock().floor(std::time::Instant::now());
        self.journal.set_retain_from(retain_floor(floor, hold));
        // What recovery will check after a crash: the journal still starts
        // at or below the floor (an empty journal, or a floor of zero, needs
        // nothing). A floor between two entries would fail it, which is why
        // checkpoints are written at entries' timestamps (`checkpoint_target`).
        if let Some(first) = self.journal.first_ts() {
            assert!(
                floor == Timestamp::ZERO || first <= floor,
                "the journal starts at {first}, above the recovery floor {floor}"
            );
        }
    }

    /// Where a checkpoint wanted at `wanted` is written: the newest journal
    /// entry at or below it (the same state: nothing changed in between), or
    /// zero when the journal holds none. A wanted timestamp that is not an
    /// entry's (the snapshot window's start is a wall-clock time) would
    /// otherwise put the floor below the journal's first entry, and the
    /// next recovery would refuse to open ("entries in between are missing").
    pub(crate) fn checkpoint_target(&self, wanted: Timestamp) -> Timestamp {
        self.journal.entry_at_or_before(wanted).unwrap_or(Timestamp::ZERO)
    }

    /// Whether the journal holds more than its size cap:
    /// the snapshot window then stops holding checkpoints back, so that the
    /// capped oplog can shrink again (a lagging member must still be able to
    /// fall off it and report "too stale").
    pub(crate) fn journal_over_cap(&self) -> bool {
        let stats = self.journal.stats();
        stats.size_bytes > stats.size_cap_bytes
    }

    /// The stable timestamp a checkpoint may cover now.
    pub(crate) fn stable_for_checkpoint(&self) -> Timestamp {
        let limit = self.checkpoint_limit();
        match *self.stable_ts.lock() {
            Some(stable) => stable.min(limit),
            None => limit,
        }
    }
}

/// The local document that keeps a size cap set by `resize_oplog`
/// (`local.replset.oplogSize`).
pub const OPLOG_SIZE_DOCUMENT: &str = "replset.oplogSize";

/// Hours of minimum retention in whole seconds, rounded up (negative or
/// NaN: none).
fn retention_secs(hours: f64) -> u64 {
    if hours > 0.0 {
        (hours * 3600.0).ceil() as u64
    } else {
        0
    }
}

/// The size cap `resize_oplog` stored, if any (one without a positive
/// `sizeBytes` is ignored, with a warning: the option's cap applies).
fn stored_oplog_size(local: &LocalStore) -> Result<Option<u64>> {
    let Some(document) = local.read(OPLOG_SIZE_DOCUMENT)? else { return Ok(None) };
    match document.get("sizeBytes") {
        Some(bson::Bson::Int64(bytes)) if *bytes > 0 => Ok(Some(*bytes as u64)),
        _ => {
            tracing::warn!(target: "storage", document = %document, "stored oplog size not positive: ignored");
            Ok(None)
        }
    }
}

/// A number no other opening of an engine is likely to draw: the wall
/// clock's nanoseconds mixed with the process id.
fn copy_nonce() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

impl Engine {
    /// Takes the lock file (refusing a second process), opens the
    /// checkpoint, replays the journal from its timestamp, starts the group
    /// commit and checkpoint threads.
    pub fn open(options: EngineOptions) -> Result<Arc<Engine>> {
        Engine::open_with_io(options, StdIo::new())
    }

    /// `open` with the journal's file I/O going through `io` (tests pass a
    /// fault-injecting backend).
    pub fn open_with_io(options: EngineOptions, io: Arc<dyn IoBackend>) -> Result<Arc<Engine>> {
        create_data_directory(&*io, &options.dbpath)?;
        let lock_file = LockFile::acquire(&options.dbpath)?;
        // A reset to empty a crash interrupted is finished before anything
        // reads the files it empties (`engine/reset.rs`).
        reset::finish_interrupted(&io, &options.dbpath)?;
        let local = LocalStore::open(&options.dbpath, io.clone(), options.poison_policy)?;
        let size_cap_bytes = stored_oplog_size(&local)?.unwrap_or(options.oplog_size_bytes);
        let journal_options = JournalOptions {
            commit_interval_ms: options.journal_commit_interval_ms,
            segment_size_bytes: (options.oplog_size_bytes / 8).clamp(JOURNAL_SEGMENT_BYTES_MIN, JOURNAL_SEGMENT_BYTES_MAX),
            size_cap_bytes,
            min_retention_secs: retention_secs(options.oplog_min_retention_hours),
            poison_policy: options.poison_policy,
            preallocate_segments: true,
            recent_cache_bytes_max: options.journal_recent_cache_bytes,
            pending_bytes_max: options.journal_pending_bytes,
        };
        let recovered = crate::recovery::recover(&options, io.clone(), journal_options)?;
        let last_applied = recovered.last_applied;
        let (visible_tx, _) = tokio::sync::watch::channel(last_applied.optime.ts);
        // A member takes no client write until replication opens the gate
        // with its term; a standalone's entries carry the uninitialized term.
        let gate = if options.replicated { WriteGate::Closed } else { WriteGate::Open { term: UNINITIALIZED_TERM } };
        // A member must be able to roll back to its commit point: until the
        // first one is known, checkpoints stay where recovery found them.
        // With history on disk the member can still roll back to its floor.
        let oldest = recovered.store.base().oldest_readable();
        let stable_ts = options.replicated.then_some(oldest);
        let snapshot_window_secs = options.snapshot_history_window_secs;
        let min_retention_hours = options.oplog_min_retention_hours.max(0.0);
        let window_marks = crate::window_marks::WindowMarks::starting_at(recovered.store.base().ts);
        let inner = Arc::new(Inner {
            options,
            io,
            kv: recovered.kv,
            store: recovered.store,
            catalog: RwLock::new(recovered.catalog),
            oplog_min_retention_hours: AtomicU64::new(min_retention_hours.to_bits()),
            journal: recovered.journal,
            local,
            write: Mutex::new(WriteState { clock: OplogClock::new(last_applied.optime.ts), gate }),
            applied: PositionCell::new(last_applied),
            cluster_time: AtomicU64::new(last_applied.optime.ts.as_u64()),
            visible_tx,
            stable_ts: Mutex::new(stable_ts),
            checkpoint_lock: Mutex::new(()),
            oplog_holds: Mutex::new(oplog_hold::OplogHolds::default()),
            poisoned: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            checkpoints: AtomicU64::new(0),
            checkpoints_past_stable: AtomicU64::new(0),
            last_checkpoint_ms: AtomicU64::new(0),
            history_catalogs: RwLock::new(recovered.history_catalogs),
            snapshot_window_secs: AtomicU32::new(snapshot_window_secs),
            window_marks: Mutex::new(window_marks),
            lock_file: Mutex::new(Some(lock_file)),
            copy_pins: Mutex::new(checkpoint_copy::CopyPins::default()),
            copy_nonce: copy_nonce(),
            staged: Mutex::new(None),
            checkpoint_wake: Condvar::new(),
            checkpoint_stop: Mutex::new(false),
        });
        inner.retain_journal_for_floor();
        let thread_inner = inner.clone();
        let thread = std::thread::Builder::new()
            .name("storage-checkpoint".to_string())
            .spawn(move || crate::checkpoint::run_thread_guarded(thread_inner))?;
        Ok(Arc::new(Engine { inner, checkpoint_thread: Mutex::new(Some(thread)) }))
    }

    fn stop_checkpoint_thread(&self) {
        *self.inner.checkpoint_stop.lock() = true;
        self.inner.checkpoint_wake.notify_all();
        if let Some(thread) = self.checkpoint_thread.lock().take() {
            if thread.join().is_err() {
                tracing::error!(target: "storage", "the checkpoint thread panicked");
            }
        }
    }

    /// Final checkpoint, stop threads, close files, release the lock file.
    pub fn shutdown(&self) -> Result<()> {
        self.stop_checkpoint_thread();
        // Take the write lock so that no write is half done, then refuse
        // new ones.
        let guard = self.inner.write.lock();
        self.inner.shutting_down.store(true, Ordering::Release);
        drop(guard);
        let mut result = Ok(());
        if self.inner.poisoned.lock().is_none() {
            if let Err(err) = self.inner.journal.sync_now() {
                result = Err(err);
            } else if let Err(err) = crate::checkpoint::checkpoint(&self.inner, false) {
                result = Err(err);
            }
        }
        if let Err(err) = self.inner.journal.close() {
            if result.is_ok() {
                result = Err(err);
            }
        }
        self.inner.lock_file.lock().take();
        tracing::info!(target: "storage", "storage engine shut down");
        result
    }

    pub fn list_databases(&self) -> Vec<String> {
        let mut databases = self.inner.catalog.read().latest().databases();
        if !self.inner.local.names().is_empty() && !databases.iter().any(|db| db == "local") {
            databases.push("local".to_string());
            databases.sort();
        }
        databases
    }

    /// The collections of `db`, in namespace order; in `local`, the local
    /// documents' collections too (see `local_view.rs`).
    pub fn list_collections(&self, db: &str) -> Vec<CollectionInfo> {
        let mut collections: Vec<CollectionInfo> =
            self.inner.catalog.read().latest().collections_in(db).iter().map(|c| c.info()).collect();
        if db == "local" {
            let local = self.inner.local.snapshot();
            collections.retain(|c| local_document(&local, &c.ns).is_none());
            collections.extend(local_namespaces(&local).map(|ns| local_collection_info(&ns)));
            collections.sort_by(|a, b| a.ns.cmp(&b.ns));
        }
        collections
    }

    /// The UUID of collection `ns` now, without copying its description
    /// (a cursor's `getMore` checks that its collection is still the one
    /// it opened on).
    pub fn collection_uuid(&self, ns: &str) -> Option<bson::Uuid> {
        self.inner.catalog.read().latest().get(ns).map(|c| c.uuid)
    }

    pub fn collection_info(&self, ns: &str) -> Option<CollectionInfo> {
        if is_local_namespace(ns) && local_document(&self.inner.local.snapshot(), ns).is_some() {
            return Some(local_collection_info(ns));
        }
        self.inner.catalog.read().latest().get(ns).map(|c| c.info())
    }

    /// The durable documents of `local` that are not oplog entries (a
    /// member's vote, config, rollback id): `read` / `write` by name,
    /// durable on return; readable through `find` on `local.<name>`.
    /// The data directory (rollback files go under it).
    pub fn dbpath(&self) -> &std::path::Path {
        &self.inner.options.dbpath
    }

    pub fn local(&self) -> &LocalStore {
        &self.inner.local
    }

    /// MongoDB's `replSetResizeOplog`: a new size cap, kept in the data
    /// directory (durable before it applies; later opens use it rather
    /// than `oplog_size_bytes`), and a new minimum retention, for this
    /// process only (as MongoDB's, which starts again from
    /// `--oplogMinRetentionHours`). A smaller cap deletes old entries at the
    /// journal's next look, never past what a checkpoint needs.
    pub fn resize_oplog(&self, size_bytes: Option<u64>, min_retention_hours: Option<f64>) -> Result<()> {
        if let Some(bytes) = size_bytes {
            let document = bson::doc! {"_id": OPLOG_SIZE_DOCUMENT, "sizeBytes": bytes as i64};
            self.inner.local.write(OPLOG_SIZE_DOCUMENT, &document)?;
            self.inner.journal.set_size_cap(bytes);
        }
        if let Some(hours) = min_retention_hours {
            self.inner.journal.set_min_retention_secs(retention_secs(hours));
            self.inner.oplog_min_retention_hours.store(hours.max(0.0).to_bits(), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Logs `{op: "c", o: {create: coll, ...options}}`. `NamespaceExists` if present.
    pub fn create_collection(&self, ns: &str, options: Document) -> Result<OpTime> {
        let mut writer = self.writer();
        writer.create_collection(ns, options)
    }

    /// `NamespaceNotFound` if absent.
    pub fn drop_collection(&self, ns: &str) -> Result<OpTime> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let entry_ns = command_namespace(db);
        let o = doc! {"drop": coll};
        let mut writer = self.writer();
        let optime = self.inner.commit(&mut writer.state, None, |applier, ts| {
            let ui = applier.catalog.get(ns).map(|c| c.uuid);
            applier.drop_collection(ns, ts)?;
            Ok(Some(EntryPlan { op: OpKind::Command, ns: entry_ns, ui, o: raw(&o)?, o2: None }))
        })?;
        Ok(optime.expect("drop always logs"))
    }

    /// `None` when the database held nothing.
    pub fn drop_database(&self, db: &str) -> Result<Option<OpTime>> {
        let mut writer = self.writer();
        self.inner.commit(&mut writer.state, None, |applier, ts| {
            if applier.drop_database(db, ts)? == 0 {
                return Ok(None);
            }
            Ok(Some(EntryPlan {
                op: OpKind::Command,
                ns: command_namespace(db),
                ui: None,
                o: raw(&doc! {"dropDatabase": 1})?,
                o2: None,
            }))
        })
    }

    pub fn rename_collection(&self, from: &str, to: &str, drop_target: bool) -> Result<OpTime> {
        let (from_db, _) = split_namespace(from).ok_or_else(|| StorageError::NamespaceNotFound(from.to_string()))?;
        if split_namespace(to).is_none() {
            return Err(StorageError::InvalidNamespace(format!("Invalid target namespace: {to}")));
        }
        self.inner.check_client_namespace(to)?;
        let o = doc! {"renameCollection": from, "to": to, "dropTarget": drop_target};
        let mut writer = self.writer();
        let optime = self.inner.commit(&mut writer.state, None, |applier, ts| {
            let ui = applier.catalog.get(from).map(|c| c.uuid);
            applier.rename_collection(from, to, drop_target, ts)?;
            Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(from_db), ui, o: raw(&o)?, o2: None }))
        })?;
        Ok(optime.expect("rename always logs"))
    }

    /// Creates the collection if needed, builds each new index from the
    /// existing documents (DuplicateKey if a unique one cannot be built).
    /// Returns (indexes before, indexes after, optime of the last entry).
    pub fn create_indexes(&self, ns: &str, specs: Vec<IndexSpec>) -> Result<(usize, usize, Option<OpTime>)> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let mut writer = self.writer();
        let mut last = None;
        if writer.catalog().get(ns).is_none() {
            last = Some(writer.create_collection(ns, Document::new())?);
        }
        let before = writer.catalog().get(ns).map(|c| c.indexes.len() + 1).unwrap_or(1);
        for spec in specs {
            let existing = writer.catalog().get(ns).cloned().expect("created above");
            if !check_new_index(&existing, &spec)? {
                continue;
            }
            let mut o = doc! {"createIndexes": coll};
            o.extend(spec.to_document());
            let uuid = existing.uuid;
            let optime = self.inner.commit(&mut writer.state, None, |applier, _ts| {
                applier.create_index(ns, spec)?;
                Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(db), ui: Some(uuid), o: raw(&o)?, o2: None }))
            })?;
            last = optime.or(last);
        }
        let after = writer.catalog().get(ns).map(|c| c.indexes.len() + 1).unwrap_or(1);
        Ok((before, after, last))
    }

    /// `collMod` of an index's `hidden` flag (see `modify_index`).
    pub fn set_index_hidden(&self, ns: &str, name: &str, hidden: bool) -> Result<(bool, Option<OpTime>)> {
        let modification = IndexModification { hidden: Some(hidden), ..IndexModification::default() };
        let (before, optime) = self.modify_index(ns, name, &modification)?;
        Ok((before.hidden, optime))
    }

    /// `collMod` of an index: one `collMod` command entry
    /// `{collMod: coll, index: {name, hidden?, expireAfterSeconds?}}` that
    /// every member applies. Returns the spec before and the entry's optime
    /// (none when nothing changes: nothing to log).
    pub fn modify_index(&self, ns: &str, name: &str, modification: &IndexModification) -> Result<(IndexSpec, Option<OpTime>)> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let mut writer = self.writer();
        let collection = writer.catalog().get(ns).cloned().ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let index = collection
            .index(name)
            .ok_or_else(|| StorageError::IndexNotFound(format!("cannot find index {name} for ns {ns}")))?;
        let before = index.spec.clone();
        if modification.applied_to(&before) == before {
            return Ok((before, None));
        }
        let o = doc! {"collMod": coll, "index": modification.to_document(name)};
        let uuid = collection.uuid;
        let optime = self.inner.commit(&mut writer.state, None, |applier, _ts| {
            applier.modify_index(ns, name, modification)?;
            Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(db), ui: Some(uuid), o: raw(&o)?, o2: None }))
        })?;
        Ok((before, optime))
    }

    /// `collMod` of collection options: one entry `{collMod: coll,
    /// ...changes}` that every member applies. Returns the options before.
    pub fn modify_collection_options(&self, ns: &str, changes: Document) -> Result<(Document, OpTime)> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        assert!(!changes.contains_key("collMod") && !changes.contains_key("index"), "not an option: {changes}");
        let mut writer = self.writer();
        let collection = writer.catalog().get(ns).cloned().ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let mut o = doc! {"collMod": coll};
        o.extend(changes.clone());
        let uuid = collection.uuid;
        let optime = self.inner.commit(&mut writer.state, None, |applier, _ts| {
            applier.modify_collection_options(ns, &changes)?;
            Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(db), ui: Some(uuid), o: raw(&o)?, o2: None }))
        })?;
        Ok((collection.options.clone(), optime.expect("collMod always logs")))
    }

    /// Drops the named indexes (`"*"`: all but `_id_`); returns the number of
    /// indexes before.
    pub fn drop_indexes(&self, ns: &str, names: &[String]) -> Result<(usize, OpTime)> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let mut writer = self.writer();
        let collection = writer.catalog().get(ns).cloned().ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        let before = collection.indexes.len() + 1;
        let targets: Vec<String> = if names.iter().any(|n| n == "*") {
            collection.indexes.iter().map(|i| i.spec.name.clone()).collect()
        } else {
            for name in names {
                if name == "_id_" {
                    return Err(StorageError::IndexConflict { code: 72, message: "cannot drop _id index".to_string() });
                }
                if collection.index(name).is_none() {
                    return Err(StorageError::IndexNotFound(format!("index not found with name [{name}]")));
                }
            }
            names.to_vec()
        };
        let mut last = self.last_applied();
        for name in targets {
            let o = doc! {"dropIndexes": coll, "index": name.clone()};
            let uuid = collection.uuid;
            let optime = self.inner.commit(&mut writer.state, None, |applier, ts| {
                applier.drop_index(ns, &name, ts)?;
                Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(db), ui: Some(uuid), o: raw(&o)?, o2: None }))
            })?;
            last = optime.expect("drop index always logs");
        }
        Ok((before, last))
    }

    /// Takes the write lock.
    pub fn writer(&self) -> Writer<'_> {
        Writer { engine: self, state: self.inner.write.lock(), session: None, retry_image: None }
    }

    /// The write lock if it is free now, without waiting: callers on an
    /// async worker write inline when nobody holds it, and move off the
    /// worker only when they would have to wait.
    pub fn try_writer(&self) -> Option<Writer<'_>> {
        self.inner.write.try_lock().map(|state| Writer { engine: self, state, session: None, retry_image: None })
    }

    pub fn reader(self: &Arc<Self>, at: ReadAt) -> Result<Reader> {
        self.inner.reader_at(at)
    }

    /// Blocks until the journal has fsynced every entry up to `ts`
    /// (asks the group commit to sync now rather than at the interval).
    pub fn wait_durable(&self, ts: Timestamp) -> Result<()> {
        self.inner.journal.wait_durable(ts)
    }

    /// `wait_durable` for a thread that would only block meanwhile: the
    /// write and fsync run on it when the journal's group-commit thread is
    /// not busy, sparing the hand-offs to that thread, to a sync worker and
    /// back (a secondary's applier: its durable position is what majority
    /// writes wait for).
    pub fn sync_journal_through(&self, ts: Timestamp) -> Result<()> {
        self.inner.journal.sync_through(ts)
    }

    /// Asks the group commit to fsync every entry up to `ts` now, without
    /// waiting: a caller that will wait anyway starts the fsync before its
    /// other work (a secondary's applier, before it reports the batch), or
    /// waits for something that needs it (a majority write, for the commit
    /// point). `count_waiter`: count the caller as a writer waiting on the
    /// commit (the group commit gathers for as many writers as its last
    /// commit released); false for a caller whose later `wait_durable`
    /// counts itself. True when the entries are durable already.
    pub fn request_durable(&self, ts: Timestamp, count_waiter: bool) -> Result<bool> {
        let mut counted = !count_waiter;
        self.inner.journal.request_durable(ts, &mut counted)
    }

    /// `wait_durable` for async callers: waits on the durable watch instead
    /// of blocking a thread, so that many `j: true` writers cost no thread
    /// each and no thread wake-ups beyond the async workers'.
    pub async fn wait_durable_async(&self, ts: Timestamp) -> Result<()> {
        // Subscribed before the first look, so a commit between the look
        // and the wait still wakes the wait.
        let mut durable = self.inner.journal.durable_watch();
        let mut counted = false;
        loop {
            if *durable.borrow_and_update() >= ts {
                return Ok(());
            }
            if self.inner.journal.request_durable(ts, &mut counted)? {
                return Ok(());
            }
            // The watch fires on every commit, on poisoning and when the
            // group-commit thread exits; the timeout only bounds the wait
            // should a wake-up ever be missed.
            let _ = tokio::time::timeout(DURABLE_RECHECK_INTERVAL, durable.changed()).await;
        }
    }

    /// Changes whenever the durable timestamp moves.
    pub fn durable_watch(&self) -> tokio::sync::watch::Receiver<Timestamp> {
        self.inner.journal.durable_watch()
    }

    pub fn last_applied(&self) -> OpTime {
        self.inner.applied.load().optime
    }

    /// The newest applied entry's position and its `wall` date (ms).
    pub fn last_applied_wall(&self) -> (OpTime, i64) {
        let position = self.inner.applied.load();
        (position.optime, position.wall_ms)
    }

    /// The durable position: the newest entry that is both fsynced and
    /// visible, with its own term.
    pub fn last_durable(&self) -> OpTime {
        self.last_durable_wall().0
    }

    /// `last_durable` with the entry's `wall` date (ms). Both come from
    /// memory: the journal keeps the durable entry's term and date.
    pub fn last_durable_wall(&self) -> (OpTime, i64) {
        // The applied position first: whatever the journal says afterwards
        // is at least as new, and an entry both durable and visible is at
        // or below it.
        let applied = self.inner.applied.load();
        let (durable_ts, meta) = self.inner.journal.durable_position();
        if durable_ts >= applied.optime.ts {
            return (applied.optime, applied.wall_ms);
        }
        (OpTime::new(durable_ts, meta.term), meta.wall_ms)
    }

    pub fn checkpoint_timestamp(&self) -> Timestamp {
        self.inner.store.checkpoint_ts()
    }

    /// What the versions in memory cost and their bound
    /// (`history_bytes_max`), cheaply, for flow control.
    pub fn history_pressure(&self) -> (u64, u64) {
        (self.inner.store.bytes_in_memory(), self.inner.options.history_bytes_max)
    }

    /// `EngineOptions::snapshot_history_window_secs` as set now.
    pub fn snapshot_history_window_secs(&self) -> u32 {
        self.inner.snapshot_window_secs.load(Ordering::Relaxed)
    }

    /// Changes the snapshot window (`setParameter
    /// minSnapshotHistoryWindowInSeconds`); returns the previous value.
    pub fn set_snapshot_history_window_secs(&self, secs: u32) -> u32 {
        self.inner.snapshot_window_secs.swap(secs, Ordering::Relaxed)
    }

    /// The oldest timestamp readers and `rollback_to` reach: the history
    /// floor while the checkpoint is past the commit point, else the
    /// checkpoint timestamp.
    pub fn oldest_timestamp(&self) -> Timestamp {
        self.inner.store.base().oldest_readable()
    }

    /// The oldest timestamp a snapshot read (`atClusterTime`) may name:
    /// the oldest one held, and never below this member's first journal
    /// entry. Below it the store may answer (a checkpoint at zero holds
    /// every version), but with a state this member never had as a whole:
    /// nothing before its set was initiated, or an initial sync's copy
    /// half made. MongoDB's oldest timestamp likewise starts at the set's
    /// first stable timestamp.
    pub fn oldest_snapshot_timestamp(&self) -> Timestamp {
        let first_entry = self.inner.journal.first_ts().unwrap_or(Timestamp::ZERO);
        self.oldest_timestamp().max(first_entry)
    }

    /// Writes a checkpoint at the stable timestamp now; returns its timestamp.
    /// The journal is synced first, so on a standalone the checkpoint
    /// covers every write made before the call.
    pub fn checkpoint_now(&self) -> Result<Timestamp> {
        self.inner.journal.sync_now()?;
        crate::checkpoint::checkpoint(&self.inner, false)
    }

    /// The `fsync` command's work: every write so far made durable in the
    /// journal now, then the checkpoint the background thread would write
    /// now (`checkpoint.rs`): below the snapshot window's start, so that
    /// snapshot reads still reach back that far, and none while another
    /// member copies the checkpoint file, which would have to start over.
    /// Returns the checkpoint's timestamp.
    pub fn flush(&self) -> Result<Timestamp> {
        self.inner.journal.sync_now()?;
        crate::checkpoint::checkpoint(&self.inner, true)
    }

    /// Rewrites the checkpoint file without its free space (`compact`).
    /// Checkpoints wait meanwhile (writes go on into the journal and
    /// memory, reads go on from the views they hold); new views then read
    /// the new file. A failure that leaves the file's rename undurable
    /// poisons the engine as a failed checkpoint does; any earlier one
    /// leaves the old file in use.
    pub fn compact(&self) -> Result<crate::kv::KvCompaction> {
        let _guard = self.inner.checkpoint_lock.lock();
        if let Some(reason) = &*self.inner.poisoned.lock() {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        let compaction = match self.inner.kv.compact() {
            Ok(compaction) => compaction,
            Err(StorageError::Poisoned(reason)) => {
                self.inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
                *self.inner.poisoned.lock() = Some(reason.clone());
                return Err(StorageError::Poisoned(reason));
            }
            Err(err) => return Err(err),
        };
        // The same checkpoint, history records and floor included, in a new file.
        let base = self.inner.store.base();
        self.inner.store.install_base(BaseView { kv: self.inner.kv.snapshot()?, ts: base.ts, floor: base.floor });
        Ok(compaction)
    }

    /// Sets the stable timestamp (replication: the commit point); it never
    /// moves back. A checkpoint goes past it only with the history a
    /// `rollback_to` needs (`checkpoint.rs`), so that `rollback_to` any
    /// timestamp at or above it works. Without it a standalone checkpoints
    /// up to the journal's durable timestamp; a replicated engine starts at
    /// its recovered checkpoint's timestamp.
    pub fn set_stable_timestamp(&self, ts: Timestamp) {
        let mut stable = self.inner.stable_ts.lock();
        if stable.is_none_or(|current| ts > current) {
            *stable = Some(ts);
        }
    }

    /// The stable timestamp checkpoints are bounded by, when one is set.
    pub fn stable_timestamp(&self) -> Option<Timestamp> {
        *self.inner.stable_ts.lock()
    }

    /// Opens or closes the write gate, under the write lock: a write in
    /// progress finishes first, and no client write commits after `Closed`
    /// returns. `Open { term }` makes `term` the `t` of every later entry a
    /// client write makes (replication opens it on election, with the new
    /// term; a standalone is `Open { term: -1 }` from the start).
    pub fn set_write_gate(&self, gate: WriteGate) {
        let mut state = self.inner.write.lock();
        if let WriteGate::Open { term } = gate {
            assert!(term >= UNINITIALIZED_TERM, "a gate opened with term {term}");
        }
        state.gate = gate;
    }

    pub fn write_gate(&self) -> WriteGate {
        self.inner.write.lock().gate
    }

    /// Discards every version and oplog entry above `ts` (which must be at
    /// or above `oldest_timestamp`: the checkpoint timestamp, or its history
    /// floor; a replicated engine keeps that at or below the stable
    /// timestamp, so any `ts` at or above that works). The write gate must be closed: a rollback under a node
    /// taking writes would discard acknowledged ones. Data, indexes, the
    /// catalog and the session records (`config.transactions`, images) go
    /// back together, as do the applied and durable positions; the oplog
    /// clock and the cluster time do not (they only grow), and neither do
    /// the local documents.
    pub fn rollback_to(&self, ts: Timestamp) -> Result<()> {
        let writer = self.writer();
        if writer.state.gate != WriteGate::Closed {
            return Err(StorageError::IllegalOperation(format!("cannot roll back to {ts}: the write gate is open")));
        }
        let _checkpoint = self.inner.checkpoint_lock.lock();
        let base = self.inner.store.base();
        if ts < base.oldest_readable() {
            return Err(StorageError::SnapshotTooOld(format!(
                "cannot roll back to {ts}: the oldest timestamp held is {}",
                base.oldest_readable()
            )));
        }
        self.inner.check_writable()?;
        if ts >= self.inner.visible() {
            return Ok(());
        }
        if ts < base.ts {
            // The checkpoint is past `ts`: write it back from the history
            // first, so that the journal never ends below the checkpoint.
            drop(base);
            crate::checkpoint::roll_back_history(&self.inner, ts)?;
            self.inner.journal.truncate_after(ts)?;
        } else {
            self.inner.journal.truncate_after(ts)?;
            self.inner.store.rollback_to(ts);
            self.inner.catalog.write().rollback_to(ts);
        }
        let position = match self.inner.journal.read_newest(1)?.first() {
            Some((_, bytes)) => {
                let entry = OplogEntry::from_bytes(bytes)?;
                Position::new(OpTime::new(entry.ts, entry.term), entry.wall.timestamp_millis())
            }
            None => Position::new(OpTime::new(ts, UNINITIALIZED_TERM), 0),
        };
        assert!(position.optime.ts <= ts, "the journal kept an entry above the rollback point");
        self.inner.make_visible(Position { optime: OpTime::new(ts, position.optime.term), ..position });
        drop(writer);
        tracing::info!(target: "storage", to = %ts, "rolled back");
        Ok(())
    }

    /// Oplog entries in timestamp order starting after/at `from`, at most
    /// `max_entries` and about `max_bytes`.
    pub fn oplog_read(&self, from: Bound<Timestamp>, max_entries: usize, max_bytes: usize) -> Result<Vec<RawDocumentBuf>> {
        let visible = self.inner.visible();
        let entries = self.inner.journal.read(from, max_entries, max_bytes)?;
        entries.into_iter().take_while(|(ts, _)| *ts <= visible).map(|(_, bytes)| raw_from_bytes(bytes)).collect()
    }

    /// The newest `max_entries` oplog entries, newest first (`$natural: -1`).
    pub fn oplog_read_newest(&self, max_entries: usize) -> Result<Vec<RawDocumentBuf>> {
        self.oplog_read_newest_at_or_before(Timestamp::MAX, max_entries)
    }

    /// The oplog read backwards from `ts`: the newest `max_entries` visible
    /// entries at or before it, newest first (a rollback's common point
    /// search).
    pub fn oplog_read_newest_at_or_before(&self, ts: Timestamp, max_entries: usize) -> Result<Vec<RawDocumentBuf>> {
        let at_or_before = ts.min(self.inner.visible());
        let entries = self.inner.journal.read_newest_at_or_before(at_or_before, max_entries)?;
        entries.into_iter().map(|(_, bytes)| raw_from_bytes(bytes)).collect()
    }

    /// The visible entry at exactly `ts` (a retried write's history, walked
    /// along `prevOpTime`): one index lookup, no scan.
    pub fn oplog_entry(&self, ts: Timestamp) -> Result<Option<RawDocumentBuf>> {
        if ts > self.inner.visible() {
            return Ok(None);
        }
        self.inner.journal.read_entry(ts)?.map(raw_from_bytes).transpose()
    }

    /// Changes whenever a new oplog entry becomes visible (tailable cursors).
    pub fn oplog_watch(&self) -> tokio::sync::watch::Receiver<Timestamp> {
        self.inner.visible_tx.subscribe()
    }

    /// The `failJournalFsync` fail point (test commands only): when
    /// `armed`, the journal's next fsync fails, which poisons it (and by
    /// default aborts the process).
    pub fn fail_next_journal_fsync(&self, armed: bool) {
        self.inner.journal.fail_next_sync(armed);
    }

    pub fn stats(&self) -> EngineStats {
        let journal = self.inner.journal.stats();
        EngineStats {
            journal_bytes_written: journal.bytes_written,
            journal_fsyncs: journal.fsyncs,
            journal_entries: journal.entries,
            checkpoints: self.inner.checkpoints.load(Ordering::Relaxed),
            last_checkpoint_ms: self.inner.last_checkpoint_ms.load(Ordering::Relaxed),
            checkpoint_timestamp: self.inner.store.checkpoint_ts(),
            versions_in_memory: self.inner.store.versions_in_memory(),
            history_bytes_in_memory: self.inner.store.bytes_in_memory(),
            history_bytes_max: self.inner.options.history_bytes_max,
            oldest_timestamp: self.inner.store.base().oldest_readable(),
            history_floor: self.inner.store.history_floor(),
            checkpoints_past_stable: self.inner.checkpoints_past_stable.load(Ordering::Relaxed),
            oplog_first: journal.first_ts.unwrap_or_default(),
            oplog_last: journal.last_ts.unwrap_or_default(),
            oplog_size_bytes: journal.size_bytes,
            oplog_size_cap_bytes: journal.size_cap_bytes,
            oplog_min_retention_hours: f64::from_bits(self.inner.oplog_min_retention_hours.load(Ordering::Relaxed)),
            oplog_segments_truncated: journal.segments_deleted,
            oplog_truncate_micros: journal.truncate_micros,
            oplog_open_micros: journal.open_micros,
            oldest_unsynced_write_age_ms: journal.oldest_unsynced_age_ms,
            journal_preallocated_bytes: journal.preallocated_bytes,
            journal_spares_prepared: journal.spares_prepared,
            journal_segments_scanned_at_open: journal.segments_scanned_at_open,
            journal_segments_indexed_at_open: journal.segments_indexed_at_open,
            journal_index_files_written: journal.index_files_written,
            kv_cache_bytes_used: self.inner.kv.cache_bytes_used() as u64,
            kv_cache_bytes_max: self.inner.options.kv_cache_bytes as u64,
            journal_cache_bytes: journal.cache_bytes,
            journal_index_bytes: journal.index_bytes,
        }
    }

    /// The count, data size and index key counts of `ns`: from its running
    /// totals (no document read), or by a scan for a collection created
    /// before the totals existed.
    pub fn collection_stats(&self, ns: &str) -> Result<CollectionStats> {
        let reader = self.inner.reader_at(ReadAt::Latest)?;
        let collection = reader.collection(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        match reader.totals(&collection)? {
            Some(totals) => stats_from_totals(&collection, &totals),
            None => reader.scanned_stats(&collection),
        }
    }

    /// `collection_stats` by a scan of every record and index, whatever the
    /// totals say (what tests compare the totals with).
    pub fn collection_stats_scanned(&self, ns: &str) -> Result<CollectionStats> {
        let reader = self.inner.reader_at(ReadAt::Latest)?;
        let collection = reader.collection(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        reader.scanned_stats(&collection)
    }

    /// md5 of each collection's documents in `_id` order, as hex.
    pub fn db_hash(&self, db: &str, collections: Option<&[String]>) -> Result<Vec<(String, String)>> {
        use md5::{Digest, Md5};
        let reader = self.inner.reader_at(ReadAt::Latest)?;
        let mut out = Vec::new();
        for collection in reader.catalog.collections_in(db) {
            let (_, name) = split_namespace(&collection.ns).expect("catalog namespaces have a dot");
            if let Some(wanted) = collections {
                if !wanted.iter().any(|w| w == name) {
                    continue;
                }
            }
            let mut hasher = Md5::new();
            reader.for_each_record(&collection, |_, bytes| {
                hasher.update(bytes);
                Ok(())
            })?;
            let digest = hasher.finalize();
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            out.push((name.to_string(), hex));
        }
        Ok(out)
    }

    pub fn validate(&self, ns: &str) -> Result<ValidateReport> {
        let reader = self.inner.reader_at(ReadAt::Latest)?;
        let collection = reader.collection(ns).ok_or_else(|| StorageError::NamespaceNotFound(ns.to_string()))?;
        validate::validate_collection(&reader.inner.store, &reader.view, &collection)
    }
}

/// Whether `spec` is a new index for `collection`: false when an identical
/// one exists, an error when it conflicts with one.
fn check_new_index(collection: &CollectionMeta, spec: &IndexSpec) -> Result<bool> {
    KeyPattern::parse(&spec.key)?;
    if spec.name.is_empty() {
        return Err(StorageError::IndexConflict { code: 67, message: "index name cannot be empty".to_string() });
    }
    let id_spec = crate::catalog::id_index_spec();
    let existing = std::iter::once(&id_spec).chain(collection.indexes.iter().map(|i| &i.spec));
    for index in existing {
        match crate::index_spec::verdict(index, spec) {
            Verdict::Unrelated => {}
            Verdict::AlreadyExists => return Ok(false),
            Verdict::Conflict { code, message } => return Err(StorageError::IndexConflict { code, message }),
        }
    }
    Ok(true)
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Without shutdown (a crash test, or a panic): stop the thread but
        // write no checkpoint; recovery replays the journal.
        self.stop_checkpoint_thread();
    }
}

impl Writer<'_> {
    fn catalog(&self) -> Arc<Catalog> {
        self.engine.inner.catalog.read().latest()
    }

    /// Makes the following inserts, updates and deletes of this writer
    /// statements of a retryable write (None: plain writes again). Their
    /// entries carry `lsid`, `txnNumber`, `stmtId` and `prevOpTime`, and
    /// each commit records the write in `config.transactions` (see
    /// `session.rs`). `TransactionTooOld` when the session has already
    /// written with a higher transaction number. The implicit create of a
    /// missing collection is not part of the statement.
    pub fn set_session(&mut self, session: Option<StatementSession>) {
        self.session = session;
    }

    /// `set_session` for a writer made for one statement.
    pub fn with_session(mut self, session: StatementSession) -> Self {
        self.session = Some(session);
        self
    }

    /// Makes the following updates and deletes of this writer's session
    /// keep the document's pre- or post-image for a findAndModify retry
    /// (`needsRetryImage`, `config.image_collection`). Ignored without a
    /// session.
    pub fn set_retry_image(&mut self, image: Option<RetryImage>) {
        self.retry_image = image;
    }

    fn create_collection(&mut self, ns: &str, options: Document) -> Result<OpTime> {
        let (db, coll) = split_namespace(ns).ok_or_else(|| StorageError::InvalidNamespace(format!("Invalid namespace: {ns}")))?;
        let mut o = doc! {"create": coll};
        o.extend(options.clone());
        let uuid = bson::Uuid::new();
        let optime = self.engine.inner.commit(&mut self.state, None, |applier, _ts| {
            applier.create_collection(ns, options, uuid)?;
            Ok(Some(EntryPlan { op: OpKind::Command, ns: command_namespace(db), ui: Some(uuid), o: raw(&o)?, o2: None }))
        })?;
        Ok(optime.expect("create always logs"))
    }

    fn ensure_collection(&mut self, ns: &str) -> Result<Arc<CollectionMeta>> {
        if let Some(collection) = self.catalog().get(ns) {
            return Ok(collection.clone());
        }
        self.create_collection(ns, Document::new())?;
        Ok(self.catalog().get(ns).expect("just created").clone())
    }

    /// Inserts `document` (which must hold `_id`), creating the collection
    /// if needed (its create entry is logged first). Checks unique indexes.
    /// Into a capped collection, the oldest documents over its limits are
    /// then deleted, and the last of those deletes is the optime returned.
    pub fn insert(&mut self, ns: &str, document: Document) -> Result<OpTime> {
        self.insert_with(ns, document, false)
    }

    /// `insert` of a client's document, as MongoDB's insert command stores
    /// it: each top-level field other than `_id` that holds the empty
    /// timestamp `Timestamp(0, 0)` gets the timestamp of the insert's own
    /// oplog entry (unique and current, as MongoDB's cluster time tick),
    /// and the entry carries the filled document, so that every member
    /// stores the same one. (`bypassEmptyTsReplacement` is a plain
    /// `insert`; so is an applied entry.)
    pub fn insert_filling_empty_timestamps(&mut self, ns: &str, document: Document) -> Result<OpTime> {
        self.insert_with(ns, document, true)
    }

    fn insert_with(&mut self, ns: &str, document: Document, fill_empty_timestamps: bool) -> Result<OpTime> {
        match document.get("_id") {
            None => return Err(StorageError::InvalidDocument("document to insert has no _id".to_string())),
            // MongoDB refuses these as _id: an array would index as many
            // keys, a regex or undefined cannot be matched back.
            Some(Bson::Array(_)) | Some(Bson::RegularExpression(_)) | Some(Bson::Undefined) => {
                let kind = match document.get("_id") {
                    Some(Bson::Array(_)) => "array",
                    Some(Bson::RegularExpression(_)) => "regex",
                    _ => "undefined",
                };
                return Err(StorageError::InvalidDocument(format!("The '_id' value cannot be of type {kind}")));
            }
            Some(_) => {}
        }
        let bytes = encode_document(&document)?;
        let collection = self.ensure_collection(ns)?;
        let capped = collection.order_table.is_some();
        if capped {
            self.check_capped_insert(&collection.options, bytes.len())?;
        }
        // An inserted document is its own image: the entry's `o` answers a
        // retried upsert, so an insert keeps none.
        let statement = self.session.as_ref().map(|session| StatementPlan { session, retry_image: None });
        let fill = fill_empty_timestamps && has_empty_timestamp(&document);
        let optime = self.engine.inner.commit(&mut self.state, statement, |applier, ts| {
            // The filled document is the same size: the capped check holds.
            let filled = fill.then(|| with_empty_timestamps_filled(&document, ts));
            let (document, bytes) = match &filled {
                Some(filled) => (filled, encode_document(filled)?),
                None => (&document, bytes.clone()),
            };
            applier.insert(ns, document, bytes.clone())?;
            let o = RawDocumentBuf::from_bytes(bytes.to_vec()).map_err(|e| StorageError::InvalidDocument(e.to_string()))?;
            Ok(Some(EntryPlan { op: OpKind::Insert, ns: ns.to_string(), ui: Some(collection.uuid), o, o2: None }))
        })?;
        let optime = optime.expect("insert always logs");
        if capped {
            // The trims' deletes follow the insert: a write concern on the
            // insert waits for them too.
            return Ok(self.trim_capped(ns)?.unwrap_or(optime));
        }
        Ok(optime)
    }

    /// Replaces the document with `_id == id` by `new_document` (the full
    /// post-image), logging `{op: "u", o2: {_id}, o: oplog_update}` where
    /// `oplog_update` is the idempotent form from `slipstream_query::update`.
    /// `NamespaceNotFound` when the collection, `InvalidDocument` when the
    /// document does not exist (callers update what they just read).
    pub fn update(&mut self, ns: &str, id: &Bson, new_document: Document, oplog_update: Document) -> Result<OpTime> {
        let bytes = encode_document(&new_document)?;
        let o2 = doc! {"_id": id.clone()};
        let statement = self.session.as_ref().map(|session| StatementPlan { session, retry_image: self.retry_image });
        let optime = self.engine.inner.commit(&mut self.state, statement, |applier, _ts| {
            let ui = applier.catalog.get(ns).map(|c| c.uuid);
            if !applier.update_to(ns, id, &new_document, bytes)? {
                return Err(StorageError::InvalidDocument(format!("no document with _id {id} to update in {ns}")));
            }
            Ok(Some(EntryPlan { op: OpKind::Update, ns: ns.to_string(), ui, o: raw(&oplog_update)?, o2: Some(raw(&o2)?) }))
        })?;
        Ok(optime.expect("update always logs"))
    }

    /// Deletes the document with `_id == id`. `InvalidDocument` when there
    /// is none (callers delete what they just read).
    pub fn delete(&mut self, ns: &str, id: &Bson) -> Result<OpTime> {
        let o = doc! {"_id": id.clone()};
        let statement = self.session.as_ref().map(|session| StatementPlan { session, retry_image: self.retry_image });
        let optime = self.engine.inner.commit(&mut self.state, statement, |applier, _ts| {
            let ui = applier.catalog.get(ns).map(|c| c.uuid);
            if !applier.delete(ns, id)? {
                return Err(StorageError::InvalidDocument(format!("no document with _id {id} to delete in {ns}")));
            }
            Ok(Some(EntryPlan { op: OpKind::Delete, ns: ns.to_string(), ui, o: raw(&o)?, o2: None }))
        })?;
        Ok(optime.expect("delete always logs"))
    }

    /// Logs a no-op entry `{op: "n", o: {msg}}` (e.g. a new primary's first
    /// entry of its term).
    pub fn noop(&mut self, message: &str) -> Result<OpTime> {
        let o = doc! {"msg": message};
        let optime = self.engine.inner.commit(&mut self.state, None, |_applier, _ts| {
            Ok(Some(EntryPlan { op: OpKind::Noop, ns: String::new(), ui: None, o: raw(&o)?, o2: None }))
        })?;
        Ok(optime.expect("noop always logs"))
    }

    /// A reader that sees every write made so far, this writer's included.
    pub fn reader(&self) -> Reader {
        self.engine.inner.reader_at(ReadAt::Latest).expect("the newest state is always readable")
    }
}

/// Converts a table-local lower bound to a store key bound.
fn lower_bound(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(key) => Bound::Included(record_store_key(table, &key)),
        Bound::Excluded(key) => Bound::Excluded(record_store_key(table, &key)),
        Bound::Unbounded => Bound::Included(table_prefix(table).to_vec()),
    }
}

/// Converts a table-local upper bound to a store key bound.
fn upper_bound(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(key) => Bound::Included(record_store_key(table, &key)),
        Bound::Excluded(key) => Bound::Excluded(record_store_key(table, &key)),
        Bound::Unbounded => Bound::Excluded(table_range(table).1),
    }
}

/// Lower bound over `table ++ index key ++ record key` for an index-key
/// bound: `Excluded(k)` skips every entry of `k`.
fn index_lower_bound(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(key) => Bound::Included(record_store_key(table, &key)),
        Bound::Excluded(key) => match prefix_end(&record_store_key(table, &key)) {
            Some(end) => Bound::Included(end),
            None => Bound::Excluded(table_range(table).1),
        },
        Bound::Unbounded => Bound::Included(table_prefix(table).to_vec()),
    }
}

/// Upper bound for an index-key bound: `Included(k)` keeps every entry of `k`.
fn index_upper_bound(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(key) => match prefix_end(&record_store_key(table, &key)) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Excluded(table_range(table).1),
        },
        Bound::Excluded(key) => Bound::Excluded(record_store_key(table, &key)),
        Bound::Unbounded => Bound::Excluded(table_range(table).1),
    }
}

fn bound_key(bound: &Bound<Vec<u8>>) -> Option<&Vec<u8>> {
    match bound {
        Bound::Included(key) | Bound::Excluded(key) => Some(key),
        Bound::Unbounded => None,
    }
}

/// The tighter of a lower bound and "strictly after `key`".
fn tighter_lower(bound: Bound<Vec<u8>>, key: Vec<u8>) -> Bound<Vec<u8>> {
    match bound_key(&bound) {
        Some(existing) if *existing > key => bound,
        _ => Bound::Excluded(key),
    }
}

/// The tighter of an upper bound and "strictly before `key`".
fn tighter_upper(bound: Bound<Vec<u8>>, key: Vec<u8>) -> Bound<Vec<u8>> {
    match bound_key(&bound) {
        Some(existing) if *existing < key => bound,
        _ => Bound::Excluded(key),
    }
}

impl Reader {
    pub fn read_timestamp(&self) -> Timestamp {
        self.view.ts
    }

    fn collection(&self, ns: &str) -> Option<Arc<CollectionMeta>> {
        self.catalog.get(ns).cloned()
    }

    /// The collection as of this reader's timestamp.
    pub fn collection_info(&self, ns: &str) -> Option<CollectionInfo> {
        if local_document(&self.local, ns).is_some() {
            return Some(local_collection_info(ns));
        }
        self.catalog.get(ns).map(|c| c.info())
    }

    /// The session's `config.transactions` record (`{_id: lsid, txnNum,
    /// lastWriteOpTime, lastWriteDate}`) as of this reader: where a retried
    /// write starts walking its `prevOpTime` chain (`Engine::oplog_entry`).
    pub fn session_record(&self, lsid: &Document) -> Result<Option<Document>> {
        self.get(crate::session::TRANSACTIONS_NS, &Bson::Document(lsid.clone()))
    }

    /// The session's findAndModify image (`config.image_collection`:
    /// `{_id: lsid, txnNum, ts, imageKind, image | invalidated}`) as of this
    /// reader; it answers a retry only when its `txnNum` and `ts` are the
    /// retried statement's.
    pub fn retry_image(&self, lsid: &Document) -> Result<Option<Document>> {
        self.get(crate::session::IMAGE_COLLECTION_NS, &Bson::Document(lsid.clone()))
    }

    pub fn get(&self, ns: &str, id: &Bson) -> Result<Option<Document>> {
        if let Some(document) = local_document(&self.local, ns) {
            return Ok(local_get(document, id));
        }
        let Some(collection) = self.collection(ns) else {
            return Ok(None);
        };
        let key = record_store_key(collection.record_table, &record_key(id));
        match self.inner.store.get(&self.view, &key)? {
            Some(bytes) => Ok(Some(parse_document(bytes.as_ref())?)),
            None => Ok(None),
        }
    }

    /// Documents in record-key (`_id`) order within the key range.
    pub fn scan(&self, ns: &str, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>, reverse: bool, limit: usize) -> Result<Vec<(Vec<u8>, Document)>> {
        if let Some(document) = local_document(&self.local, ns) {
            return Ok(local_scan(document, &start, &end, limit));
        }
        let Some(collection) = self.collection(ns) else {
            return Ok(Vec::new());
        };
        let table = collection.record_table;
        let pairs = self.inner.store.scan(&self.view, lower_bound(table, start), upper_bound(table, end), reverse, limit)?;
        pairs.into_iter().map(|(key, bytes)| Ok((key[4..].to_vec(), parse_document(bytes.as_ref())?))).collect()
    }

    /// Index entries in (index key, record key) order within the index-key
    /// range, resuming strictly after `resume_after` when given.
    #[allow(clippy::too_many_arguments)]
    pub fn scan_index(
        &self,
        ns: &str,
        index_name: &str,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        reverse: bool,
        resume_after: Option<(Vec<u8>, Vec<u8>)>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>> {
        if index_name == "_id_" {
            return self.scan_id_index(ns, start, end, reverse, resume_after, limit);
        }
        if local_document(&self.local, ns).is_some() {
            return Err(StorageError::IndexNotFound(format!("index not found with name [{index_name}]")));
        }
        let Some(collection) = self.collection(ns) else {
            return Ok(Vec::new());
        };
        let index = collection
            .index(index_name)
            .ok_or_else(|| StorageError::IndexNotFound(format!("index not found with name [{index_name}]")))?;
        let mut lower = index_lower_bound(index.table, start);
        let mut upper = index_upper_bound(index.table, end);
        if let Some((index_key, record_key)) = resume_after {
            let resume = index_store_key(index.table, &index_key, &record_key);
            if reverse {
                upper = tighter_upper(upper, resume);
            } else {
                lower = tighter_lower(lower, resume);
            }
        }
        let pairs = self.inner.store.scan(&self.view, lower, upper, reverse, limit)?;
        let mut out = Vec::with_capacity(pairs.len());
        for (key, value) in pairs {
            let (index_key, record_key) = split_index_entry(&key, value.as_ref())?;
            let record = record_store_key(collection.record_table, record_key);
            let bytes = self.inner.store.get(&self.view, &record)?.ok_or_else(|| {
                StorageError::Corruption(format!("index {index_name} of {ns} points to a missing document"))
            })?;
            out.push(IndexEntry {
                index_key: index_key.to_vec(),
                record_key: record_key.to_vec(),
                document: parse_document(bytes.as_ref())?,
            });
        }
        Ok(out)
    }

    /// `scan_index` of `_id_`: the record table itself.
    fn scan_id_index(
        &self,
        ns: &str,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        reverse: bool,
        resume_after: Option<(Vec<u8>, Vec<u8>)>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>> {
        let (mut start, mut end) = (start, end);
        if let Some((_, record_key)) = resume_after {
            if reverse {
                end = tighter_upper(end, record_key);
            } else {
                start = tighter_lower(start, record_key);
            }
        }
        let documents = self.scan(ns, start, end, reverse, limit)?;
        Ok(documents
            .into_iter()
            .map(|(record_key, document)| IndexEntry { index_key: record_key.clone(), record_key, document })
            .collect())
    }

    pub fn count(&self, ns: &str) -> Result<u64> {
        if local_document(&self.local, ns).is_some() {
            return Ok(1);
        }
        let Some(collection) = self.collection(ns) else {
            return Ok(0);
        };
        match self.totals(&collection)? {
            Some(totals) => Ok(totals.count),
            None => self.count_table(collection.record_table),
        }
    }

    /// Statistics by a scan of every record and every index.
    fn scanned_stats(&self, collection: &CollectionMeta) -> Result<CollectionStats> {
        let mut stats = CollectionStats::default();
        self.for_each_record(collection, |_, bytes| {
            stats.count += 1;
            stats.data_size_bytes += bytes.len() as u64;
            Ok(())
        })?;
        stats.index_key_counts.push(("_id_".to_string(), stats.count));
        for index in &collection.indexes {
            stats.index_key_counts.push((index.spec.name.clone(), self.count_table(index.table)?));
        }
        Ok(stats)
    }

    /// The running totals of a collection as this reader sees them; None
    /// for a collection created before they existed.
    fn totals(&self, collection: &CollectionMeta) -> Result<Option<CollectionTotals>> {
        match collection.stats_table {
            Some(stats_table) => Ok(Some(collection_totals::read(&self.inner.store, &self.view, stats_table)?)),
            None => Ok(None),
        }
    }

    fn count_table(&self, table: u32) -> Result<u64> {
        let (start, end) = table_range(table);
        let mut from = Bound::Included(start);
        let mut count = 0u64;
        loop {
            let batch = self.inner.store.scan(&self.view, from, Bound::Excluded(end.clone()), false, FULL_SCAN_BATCH_MAX)?;
            count += batch.len() as u64;
            match batch.last() {
                Some((last, _)) if batch.len() == FULL_SCAN_BATCH_MAX => from = Bound::Excluded(last.clone()),
                _ => return Ok(count),
            }
        }
    }

    /// Calls `visit` with (record key, document bytes) of every document.
    fn for_each_record(&self, collection: &CollectionMeta, mut visit: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        let (start, end) = table_range(collection.record_table);
        let mut from = Bound::Included(start);
        loop {
            let batch = self.inner.store.scan(&self.view, from, Bound::Excluded(end.clone()), false, FULL_SCAN_BATCH_MAX)?;
            for (key, bytes) in &batch {
                visit(&key[4..], bytes.as_ref())?;
            }
            match batch.last() {
                Some((last, _)) if batch.len() == FULL_SCAN_BATCH_MAX => from = Bound::Excluded(last.clone()),
                _ => return Ok(()),
            }
        }
    }
}

/// `CollectionStats` from a collection's totals; `_id_` has one key per
/// document.
fn stats_from_totals(collection: &CollectionMeta, totals: &CollectionTotals) -> Result<CollectionStats> {
    let mut index_key_counts = vec![("_id_".to_string(), totals.count)];
    for index in &collection.indexes {
        // Every index of a collection with totals was built after them and
        // counted when built, so a missing count is damage, not age.
        let keys = totals.index_keys.get(&index.table).copied().ok_or_else(|| {
            StorageError::Corruption(format!("index {} of {} has no key count", index.spec.name, collection.ns))
        })?;
        index_key_counts.push((index.spec.name.clone(), keys));
    }
    Ok(CollectionStats { count: totals.count, data_size_bytes: totals.bytes, index_key_counts })
}

#[allow(dead_code)]
fn assert_send_sync() {
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Engine>();
    is_send_sync::<Reader>();
}
