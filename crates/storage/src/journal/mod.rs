//! The oplog journal: the write-ahead log of the engine.
//!
//! Every write is one oplog entry appended here with its timestamp; only
//! the journal is fsynced on commit. Entries live in segment files of
//! CRC-framed BSON (`segment.rs`, `frame.rs`; the byte-level format is in
//! `docs/storage/journal-format.md`). Segments are preallocated: a
//! background thread zero-fills and fsyncs the next one ahead of use
//! (`spare.rs`), so that appends overwrite zeros and never change a file's
//! size.
//!
//! Write path: `append` encodes the frame into an in-memory pending buffer
//! under a short lock and returns; the group-commit thread
//! (`group_commit.rs`) swaps the buffer out, writes it and fsyncs once for
//! every entry in it, then moves `durable_ts`. A waiter that needs
//! durability (`j: true`) asks for an immediate sync; otherwise the thread
//! syncs at least every `commit_interval_ms` while data is unsynced.
//!
//! A failed write or fsync, or a panic in one of its threads, poisons the
//! journal: nothing is retried (after a failed fsync the kernel may have
//! dropped the dirty pages; retrying would report durability that is not
//! there). Under the default `PoisonPolicy` the cause is logged and the
//! process aborts, so that it restarts from what is durable; under
//! `RefuseLaterCalls` (tests) every later call and every waiter gets
//! `StorageError::Poisoned`.
//!
//! Read path: an index `ts -> (segment, offset, len)` covers every entry;
//! recent entries are served from a bounded cache, older ones are read from
//! their segment with positional reads and checked again (CRC, timestamp).
//! The index of a sealed segment is also kept in a file beside it
//! (`index_file.rs`, written by `indexer.rs`), so that opening the journal
//! reads only the last segment whole, however much oplog it holds.

mod clean_scan;
mod frame;
mod group_commit;
mod index;
mod index_file;
mod indexer;
mod recovery;
mod segment;
mod spare;

use std::collections::VecDeque;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};
use tokio::sync::watch;

use crate::io::{IoBackend, IoFile};
use crate::poison::{FailedPart, PoisonPolicy};
use crate::{StorageError, Timestamp};

pub use frame::{ENTRY_BYTES_MAX, ENTRY_BYTES_MIN, FRAME_HEADER_BYTES};
pub use segment::{
    encode_header as segment_header, segment_file_name, SEGMENT_BYTES_MAX, SEGMENT_FILE_BYTES_MAX, SEGMENT_HEADER_BYTES,
    SPARE_FILE_NAME,
};
pub use spare::{SPARE_SEGMENTS_AHEAD, SPARE_WANTED_BELOW_PERCENT_LEFT};

use frame::{check_entry_shape, check_frame, encode_frame, FrameCheck};
use index::{Index, Location, RecentCache};
use segment::SegmentState;
use spare::Spare;

/// Default and largest `JournalOptions::recent_cache_bytes_max`: bytes of
/// recent entries kept in memory for readers (entries not yet written to a
/// file stay in memory regardless).
pub const RECENT_CACHE_BYTES_MAX: usize = 32 * 1024 * 1024;
/// Default and largest `JournalOptions::pending_bytes_max`: bytes of
/// appended but not yet written frames; an append beyond it waits for the
/// group commit (back-pressure instead of unbounded memory).
pub const PENDING_BYTES_MAX: usize = 64 * 1024 * 1024;
/// How often a read retries when a concurrent truncation moved the entries
/// it was reading.
const READ_RETRIES_MAX: usize = 8;

/// Options of `Journal::open`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalOptions {
    /// Longest an appended entry waits for its fsync when nobody asks for
    /// it sooner (MongoDB's `--journalCommitInterval`).
    pub commit_interval_ms: u64,
    /// A segment is closed and a new one started when the next frame would
    /// take it past this size.
    pub segment_size_bytes: u64,
    /// The oplog's size cap at open (`--oplog-size-mb`): whole old
    /// segments are deleted to stay near it, never past the retain point
    /// (`Journal::set_size_cap` changes it while open).
    pub size_cap_bytes: u64,
    /// MongoDB's `oplogMinRetentionHours` at open, in seconds: a segment
    /// whose newest entry is younger than this (by its timestamp's
    /// wall-clock seconds) is kept even over the cap; 0 keeps nothing for
    /// its age.
    pub min_retention_secs: u64,
    /// What a failed write or fsync, or a panic in one of the journal's
    /// threads, does (by default: log and abort the process).
    pub poison_policy: PoisonPolicy,
    /// Prepare each next segment ahead, zero-filled and fsynced, so that
    /// appends never change a file's size (`spare.rs`). Off, segments grow
    /// as frames are written (tests that need the old file layout).
    pub preallocate_segments: bool,
    /// Bytes of recent entries kept for readers (the node sizes it from
    /// `--cache-size-mb`; at most `RECENT_CACHE_BYTES_MAX`).
    pub recent_cache_bytes_max: usize,
    /// Bytes of frames appended and not yet written before an append waits
    /// (sized from `--cache-size-mb`; at most `PENDING_BYTES_MAX`).
    pub pending_bytes_max: usize,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            commit_interval_ms: 100,
            segment_size_bytes: 64 * 1024 * 1024,
            size_cap_bytes: 1024 * 1024 * 1024,
            min_retention_secs: 0,
            poison_policy: PoisonPolicy::default(),
            preallocate_segments: true,
            recent_cache_bytes_max: RECENT_CACHE_BYTES_MAX,
            pending_bytes_max: PENDING_BYTES_MAX,
        }
    }
}

/// Counters for `serverStatus`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Bytes written to segment files since open (frames and headers).
    pub bytes_written: u64,
    /// File and directory fsyncs since open.
    pub fsyncs: u64,
    /// Group commits (batches written) since open.
    pub commits: u64,
    /// Of `commits`, those written and fsynced by the thread that waited
    /// for them (`sync_through`).
    pub commits_on_caller: u64,
    /// Entries appended since open.
    pub entries_appended: u64,
    /// Entries the journal holds now.
    pub entries: u64,
    pub segments: u64,
    /// Bytes of all segments, including appends not yet written.
    pub size_bytes: u64,
    /// Segments deleted by the size cap since open.
    pub segments_deleted: u64,
    /// Time spent deleting them (`oplogTruncation.totalTimeTruncatingMicros`).
    pub truncate_micros: u64,
    /// Time `open` took to find the segments and their entries
    /// (`oplogTruncation.totalTimeProcessingMicros`).
    pub open_micros: u64,
    /// The size cap now.
    pub size_cap_bytes: u64,
    /// The minimum retention now, in seconds.
    pub min_retention_secs: u64,
    pub cache_entries: u64,
    pub cache_bytes: u64,
    /// Bytes of the in-memory index (one slot per entry held).
    pub index_bytes: u64,
    pub first_ts: Option<Timestamp>,
    pub last_ts: Option<Timestamp>,
    pub durable_ts: Timestamp,
    /// How long ago the oldest entry that is not yet fsynced was appended
    /// (for a `w: 1` write: acknowledged, but not yet durable); zero when
    /// everything is durable.
    pub oldest_unsynced_age_ms: u64,
    /// Bytes cut from a torn tail when the journal was opened.
    pub torn_bytes_cut_at_open: u64,
    /// Zeros written and fsynced ahead of the appends: the rest of the
    /// active segment plus a ready spare segment (`spare.rs`).
    pub preallocated_bytes: u64,
    /// Spare segments prepared since open.
    pub spares_prepared: u64,
    /// Times the group-commit thread woke from a wait for work since open
    /// (a notification or the end of a timed wait).
    pub group_commit_wakes: u64,
    /// Segments read and checked frame by frame when the journal was
    /// opened (the last one, and sealed ones without a usable index file).
    pub segments_scanned_at_open: u64,
    /// Sealed segments taken from their index file at open, unread.
    pub segments_indexed_at_open: u64,
    /// Index files of sealed segments written since open (`indexer.rs`).
    pub index_files_written: u64,
}

/// What the journal keeps of an entry besides its timestamp: the term and
/// `wall` date (ms) of the entry at the durable position, so that the
/// engine can report that position with its date (heartbeats, `hello`'s
/// `lastWrite`) without reading the entry back. The journal does not look
/// inside entries otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryMeta {
    pub term: i64,
    pub wall_ms: i64,
}

impl EntryMeta {
    /// The meta of an empty journal.
    pub const NONE: EntryMeta = EntryMeta { term: crate::timestamp::UNINITIALIZED_TERM, wall_ms: 0 };

    /// Read from the entry's own `t` and `wall` fields.
    pub fn of_entry(entry: &[u8]) -> EntryMeta {
        let (term, wall_ms) = crate::oplog_entry::entry_term_and_wall(entry);
        EntryMeta { term, wall_ms }
    }
}

/// One entry to append.
#[derive(Clone, Copy, Debug)]
pub struct JournalAppend<'a> {
    pub ts: Timestamp,
    pub meta: EntryMeta,
    pub entry: &'a [u8],
}

/// Frames appended to one segment and not yet written.
pub(crate) struct PendingChunk {
    pub seq: u64,
    /// File offset of the first byte of `bytes`.
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// Everything mutable, guarded by `Shared::state`.
pub(crate) struct State {
    /// Oldest first; the last one takes appends.
    pub segments: VecDeque<SegmentState>,
    pub index: Index,
    pub cache: RecentCache,
    /// Frames appended and not yet taken by the group-commit thread.
    pub pending: Vec<PendingChunk>,
    pub pending_bytes: usize,
    /// Entries in `pending`.
    pub pending_entries: usize,
    /// When the oldest pending frame was appended.
    pub pending_since: Option<Instant>,
    /// When the oldest frame of the batch the group-commit thread is
    /// writing now (taken, not yet in flight) was appended.
    pub writing_since: Option<Instant>,
    /// Entries at or below this are in their files (maybe not fsynced).
    pub written_ts: Timestamp,
    /// Entries at or below this are fsynced.
    pub durable_ts: Timestamp,
    /// The meta of the entry at `durable_ts` (moves with it).
    pub durable_meta: EntryMeta,
    /// The meta of the newest appended entry (a batch takes it along as
    /// the meta of its last entry).
    pub last_meta: EntryMeta,
    /// The last entry of the batch the group-commit thread is writing (or
    /// wrote last): a waiter at or below it needs no new sync request.
    pub in_flight_ts: Timestamp,
    /// A waiter wants the pending frames synced now.
    pub sync_requested: bool,
    /// Batches written and handed to a sync worker, oldest first; the
    /// front ones leave (and `durable_ts` moves) only in order.
    pub in_flight: VecDeque<group_commit::InFlightBatch>,
    /// The number the next batch gets.
    pub next_batch_no: u64,
    /// One job slot per sync worker (`batch_no % SYNC_WORKERS`).
    pub sync_jobs: Vec<Option<group_commit::SyncJob>>,
    /// Threads in `wait_durable` whose entry is still in `pending` (each
    /// counted once); a batch takes the count with it.
    pub pending_waiters: usize,
    /// How many pending entries the group-commit thread hopes to gather
    /// before its next fsync: the waiters it released last time, who are
    /// about to append again. Zero when it is not gathering.
    pub gather_target: usize,
    /// Waiters released when `durable_ts` last moved.
    pub released_at_last_commit: usize,
    /// How long the last fsync took.
    pub last_commit_micros: u64,
    /// The retain point moved or the journal grew: check the size cap.
    pub cap_check_requested: bool,
    /// The last look at the size cap stopped at the retain point: growth
    /// alone cannot free a segment until the retain point moves.
    pub cap_blocked_by_retain: bool,
    /// The size cap now (`JournalOptions::size_cap_bytes`, then
    /// `Journal::set_size_cap`).
    pub size_cap_bytes: u64,
    /// The minimum retention now, in seconds
    /// (`JournalOptions::min_retention_secs`, then
    /// `Journal::set_min_retention_secs`).
    pub min_retention_secs: u64,
    /// The last look at the size cap stopped at a segment still inside the
    /// minimum retention: until this wall-clock second no commit asks for
    /// another look (growth alone frees nothing before then).
    pub retained_until_secs: u64,
    /// The group-commit thread waits for a free sync slot (untimed): a
    /// completed batch must wake it.
    pub waiting_for_slot: bool,
    /// Set by the first failed write or fsync; never cleared.
    pub poisoned: Option<String>,
    /// `close` was called: the thread drains and exits.
    pub closing: bool,
    /// The group-commit thread has exited.
    pub thread_exited: bool,
    /// Entries below this may be deleted by the size cap.
    pub retain_from: Timestamp,
    /// Bumped by every truncation, so that a reader can tell that the
    /// locations it collected may now point at other data.
    pub generation: u64,
    /// The spare segment's state: moved by the spare thread (None or
    /// Preparing to Ready or Disabled) and the group-commit thread (Ready to
    /// Taken to None).
    pub spare: Spare,
    pub stats: JournalStats,
}

impl State {
    fn check_usable(&self) -> Result<(), StorageError> {
        if let Some(reason) = &self.poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if self.closing {
            return Err(StorageError::ShuttingDown);
        }
        Ok(())
    }

    fn last_ts(&self) -> Option<Timestamp> {
        self.index.last()
    }

    fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|segment| segment.end).sum()
    }

    /// When the oldest entry that is not yet durable was appended: the
    /// first batch in flight, else the batch being written, else the
    /// pending buffer (batches retire in order, so that is the oldest).
    fn oldest_unsynced_since(&self) -> Option<Instant> {
        self.in_flight.front().map(|batch| batch.appended_since).or(self.writing_since).or(self.pending_since)
    }

    fn segment(&self, seq: u64) -> Option<&SegmentState> {
        let first = self.segments.front()?.seq;
        let position = seq.checked_sub(first)? as usize;
        self.segments.get(position)
    }
}

/// What the journal's threads share.
pub(crate) struct Shared {
    pub dir: PathBuf,
    pub io: Arc<dyn IoBackend>,
    pub options: JournalOptions,
    pub state: Mutex<State>,
    /// Wakes the group-commit thread (guarded by `state`).
    pub work: Condvar,
    /// Wakes each sync worker, one condition per worker so that a job
    /// wakes only its own worker (guarded by `state`).
    pub sync_work: [Condvar; group_commit::SYNC_WORKERS],
    /// Wakes waiters when `durable_ts` moves, the pending buffer drains, or
    /// the journal is poisoned (guarded by `state`).
    pub progress: Condvar,
    /// Wakes the spare thread when a spare may be wanted, or the journal
    /// closes (guarded by `state`).
    pub spare_work: Condvar,
    /// Wakes the indexer thread when a sealed segment may want its index
    /// file, or the journal closes (guarded by `state`).
    pub index_work: Condvar,
    /// Held while the indexer writes an index file and while a truncation
    /// removes them, so that the removal never races the write of a file
    /// for a segment's old content (`indexer.rs`). The size cap does not
    /// take it (`group_commit::enforce_size_cap`).
    pub index_files: Mutex<()>,
    /// Held by whoever does segment I/O that must not interleave with a
    /// batch write: the group-commit thread and `truncate_after`. Taken
    /// before `state`, never after.
    pub io_lock: Mutex<()>,
    /// Set by `fail_next_sync` (a test fail point); taken by the sync
    /// worker whose fsync it fails.
    pub fail_next_sync: AtomicBool,
    pub durable_tx: watch::Sender<Timestamp>,
    pub appended_tx: watch::Sender<Timestamp>,
}

impl Shared {
    /// Logs the failure and, under the default policy, aborts the process;
    /// otherwise marks the journal poisoned and wakes everybody. Returns
    /// the error.
    pub fn poison(&self, state: &mut State, reason: String) -> StorageError {
        self.options.poison_policy.on_failure(FailedPart::Journal, &reason);
        if state.poisoned.is_none() {
            state.poisoned = Some(reason);
        }
        self.progress.notify_all();
        self.work.notify_all();
        self.spare_work.notify_all();
        // Async waiters (`request_durable`) wait on the watch: wake them to
        // see the error. The value does not move.
        self.durable_tx.send_replace(state.durable_ts);
        StorageError::Poisoned(state.poisoned.clone().unwrap())
    }

    /// One look for `wait_durable` / `request_durable`: true when every
    /// entry up to `ts` (or the last appended one, if `ts` is beyond it) is
    /// fsynced; otherwise asks for a sync unless a batch already being
    /// written covers the target.
    fn check_durable(&self, state: &mut State, ts: Timestamp, counted: &mut bool) -> Result<bool, StorageError> {
        if let Some(reason) = &state.poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        let target = ts.min(state.last_ts().unwrap_or(Timestamp::ZERO));
        if state.durable_ts >= target {
            return Ok(true);
        }
        if state.thread_exited {
            return Err(StorageError::ShuttingDown);
        }
        // A batch already being written covers the target: wait for it
        // instead of asking for another fsync right behind it.
        if target > state.in_flight_ts {
            if !*counted {
                state.pending_waiters += 1;
                *counted = true;
            }
            if !state.sync_requested {
                state.sync_requested = true;
                self.work.notify_one();
            }
        }
        Ok(false)
    }
}

/// The oplog journal. `Send + Sync`; owns the group-commit thread and its
/// sync workers.
pub struct Journal {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Journal {
    /// Opens or creates the journal in `dir`: scans every segment, checks
    /// each frame's CRC and that timestamps strictly increase, cuts a torn
    /// tail (logged) and refuses any other damage with
    /// `StorageError::Corruption` naming the file and offset.
    pub fn open(dir: &Path, io: Arc<dyn IoBackend>, options: JournalOptions) -> Result<Journal, StorageError> {
        assert!(options.segment_size_bytes > SEGMENT_HEADER_BYTES, "segment_size_bytes too small");
        assert!(options.segment_size_bytes <= SEGMENT_BYTES_MAX, "segment_size_bytes too large");
        assert!(options.recent_cache_bytes_max <= RECENT_CACHE_BYTES_MAX, "recent_cache_bytes_max too large");
        assert!(options.pending_bytes_max <= PENDING_BYTES_MAX, "pending_bytes_max too large");
        let opened_at = std::time::Instant::now();
        let recovered = recovery::recover(dir, &io)?;
        let mut segments = VecDeque::new();
        let segment_count = recovered.segments.len();
        let segments_indexed = recovered.segments.iter().filter(|segment| segment.from_index).count() as u64;
        for (position, found) in recovered.segments.into_iter().enumerate() {
            // The previous process may have died before its last writes
            // reached the disk; fsync what recovery accepted before calling
            // it durable. A segment taken from its index file was fsynced
            // whole before that file was written.
            if !found.from_index {
                found.file.sync_all().map_err(StorageError::Io)?;
            }
            // The last segment takes the next appends: its sync workers'
            // handles are opened now, before anything is written to it.
            let sync_files = if position + 1 == segment_count {
                group_commit::open_sync_files(&io, &found.path).map_err(StorageError::Io)?
            } else {
                Vec::new()
            };
            segments.push_back(SegmentState {
                seq: found.seq,
                path: found.path,
                file: Some(found.file),
                sync_files,
                end: found.end,
                durable_end: found.end,
                file_bytes: found.file_bytes,
                first_ts: found.first_ts,
                last_ts: found.last_ts,
                // The last segment takes appends: its index file was removed.
                indexed: found.from_index && position + 1 != segment_count,
            });
        }
        if segments.is_empty() {
            segments.push_back(SegmentState::planned(dir, 1));
        }
        let index = Index::from_sorted(recovered.entries);
        let durable_ts = index.last().unwrap_or(Timestamp::ZERO);
        let stats = JournalStats {
            torn_bytes_cut_at_open: recovered.torn_bytes_cut,
            segments_scanned_at_open: recovered.segments_scanned,
            segments_indexed_at_open: segments_indexed,
            open_micros: opened_at.elapsed().as_micros() as u64,
            ..JournalStats::default()
        };
        let state = State {
            segments,
            index,
            cache: RecentCache::new(options.recent_cache_bytes_max),
            pending: Vec::new(),
            pending_bytes: 0,
            pending_entries: 0,
            pending_since: None,
            writing_since: None,
            written_ts: durable_ts,
            durable_ts,
            durable_meta: EntryMeta::NONE,
            last_meta: EntryMeta::NONE,
            in_flight_ts: durable_ts,
            sync_requested: false,
            in_flight: VecDeque::new(),
            next_batch_no: 0,
            sync_jobs: (0..group_commit::SYNC_WORKERS).map(|_| None).collect(),
            pending_waiters: 0,
            gather_target: 0,
            released_at_last_commit: 0,
            last_commit_micros: 0,
            cap_check_requested: true,
            cap_blocked_by_retain: false,
            size_cap_bytes: options.size_cap_bytes,
            min_retention_secs: options.min_retention_secs,
            retained_until_secs: 0,
            waiting_for_slot: false,
            poisoned: None,
            closing: false,
            thread_exited: false,
            retain_from: Timestamp::ZERO,
            generation: 0,
            spare: Spare::None,
            stats,
        };
        let (durable_tx, _) = watch::channel(durable_ts);
        let (appended_tx, _) = watch::channel(durable_ts);
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            io,
            options,
            state: Mutex::new(state),
            work: Condvar::new(),
            sync_work: std::array::from_fn(|_| Condvar::new()),
            progress: Condvar::new(),
            spare_work: Condvar::new(),
            index_work: Condvar::new(),
            index_files: Mutex::new(()),
            io_lock: Mutex::new(()),
            fail_next_sync: AtomicBool::new(false),
            durable_tx,
            appended_tx,
        });
        let journal = Journal { shared: shared.clone(), threads: Mutex::new(Vec::new()) };
        let thread_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("journal-group-commit".to_string())
            .spawn(move || group_commit::run_guarded(thread_shared));
        // On a failed spawn, dropping `journal` closes it and joins the
        // threads already started.
        journal.threads.lock().push(spawned.map_err(StorageError::Io)?);
        for slot in 0..group_commit::SYNC_WORKERS {
            let worker_shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("journal-sync-{slot}"))
                .spawn(move || group_commit::run_sync_worker_guarded(worker_shared, slot));
            journal.threads.lock().push(spawned.map_err(StorageError::Io)?);
        }
        let spare_shared = shared.clone();
        let spawned =
            std::thread::Builder::new().name("journal-spare".to_string()).spawn(move || spare::run_guarded(spare_shared));
        journal.threads.lock().push(spawned.map_err(StorageError::Io)?);
        let indexer_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("journal-indexer".to_string())
            .spawn(move || indexer::run_guarded(indexer_shared));
        journal.threads.lock().push(spawned.map_err(StorageError::Io)?);
        // Everything found at open is durable: the newest entry's meta is
        // the durable position's.
        let meta = journal.newest_meta()?;
        let mut state = journal.shared.state.lock();
        state.last_meta = meta;
        state.durable_meta = meta;
        drop(state);
        Ok(journal)
    }

    /// The meta of the newest entry (read back from it; at open and after
    /// a truncation only).
    fn newest_meta(&self) -> Result<EntryMeta, StorageError> {
        Ok(self.read_newest(1)?.first().map_or(EntryMeta::NONE, |(_, entry)| EntryMeta::of_entry(entry)))
    }

    /// Appends one entry (the BSON bytes of the oplog entry) with a
    /// timestamp above every earlier one. Buffered: it is visible to `read`
    /// at once and durable at the next group commit. Callers serialize
    /// appends (the engine's write lock). The entry's term and wall date
    /// are read from its `t` and `wall` fields.
    pub fn append(&self, ts: Timestamp, entry: &[u8]) -> Result<(), StorageError> {
        self.append_batch(&[JournalAppend { ts, meta: EntryMeta::of_entry(entry), entry }])
    }

    /// `append` for a caller that knows the entry's term and wall date.
    pub fn append_with_meta(&self, ts: Timestamp, meta: EntryMeta, entry: &[u8]) -> Result<(), StorageError> {
        self.append_batch(&[JournalAppend { ts, meta, entry }])
    }

    /// Appends entries in timestamp order under one lock (a secondary's
    /// batch). Every entry's shape is checked before any is appended; the
    /// appended watch fires once, for the last. An entry that must wait for
    /// the group commit (the pending bytes are at their maximum) can meet a
    /// journal poisoned or closed meanwhile: then the entries before it
    /// stay appended and the error is returned (the journal refuses all
    /// later work, so nothing builds on them).
    pub fn append_batch(&self, entries: &[JournalAppend<'_>]) -> Result<(), StorageError> {
        for append in entries {
            check_entry_shape(append.entry)?;
        }
        let Some(last) = entries.last() else {
            return Ok(());
        };
        let shared = &self.shared;
        let mut state = shared.state.lock();
        state.check_usable()?;
        for append in entries {
            self.append_locked(&mut state, append)?;
        }
        shared.appended_tx.send_replace(last.ts);
        Ok(())
    }

    fn append_locked(&self, state: &mut MutexGuard<'_, State>, append: &JournalAppend<'_>) -> Result<(), StorageError> {
        let shared = &self.shared;
        let (ts, entry) = (append.ts, append.entry);
        if let Some(last) = state.last_ts() {
            assert!(ts > last, "journal append out of order: {ts} is not after {last}");
        }
        while state.pending_bytes > 0 && state.pending_bytes + entry.len() > shared.options.pending_bytes_max {
            state.sync_requested = true;
            shared.work.notify_one();
            shared.progress.wait(state);
            state.check_usable()?;
        }
        let frame_bytes = (FRAME_HEADER_BYTES + entry.len()) as u64;
        let current = state.segments.back().unwrap();
        let full = current.end + frame_bytes > shared.options.segment_size_bytes;
        // A segment that would grow is left for a ready spare at once: its
        // every fsync commits the file system's metadata as well.
        let leave_for_spare = current.grows_past(current.end + frame_bytes) && state.spare == Spare::Ready;
        if current.has_entries() && (full || leave_for_spare) {
            let next = SegmentState::planned(&shared.dir, current.seq + 1);
            state.segments.push_back(next);
            // The segment just sealed may be fsynced whole already.
            indexer::notify_if_wanted(shared, state);
        }
        let segment = state.segments.back_mut().unwrap();
        let location = Location { seq: segment.seq, offset: segment.end, len: entry.len() as u32 };
        segment.end += frame_bytes;
        segment.first_ts.get_or_insert(ts);
        segment.last_ts = Some(ts);

        let continues_chunk = matches!(state.pending.last(), Some(chunk) if chunk.seq == location.seq);
        if !continues_chunk {
            state.pending.push(PendingChunk { seq: location.seq, offset: location.offset, bytes: Vec::new() });
        }
        let chunk = state.pending.last_mut().unwrap();
        assert_eq!(chunk.offset + chunk.bytes.len() as u64, location.offset);
        encode_frame(&mut chunk.bytes, ts, entry);
        state.pending_bytes += frame_bytes as usize;
        state.pending_entries += 1;
        if state.gather_target > 0 && state.pending_entries >= state.gather_target {
            shared.work.notify_one();
        }
        if state.pending_since.is_none() {
            // The first pending entry starts the commit interval. The
            // thread is not woken for it: idle, it checks once an interval
            // (`group_commit::wait_for_work`), which still syncs the entry
            // within its interval, and a caller that wants it sooner asks
            // (`wait_durable`, `request_durable`, `sync_through`). The wake
            // cost every first append a futex call and a wake-up of another
            // virtual CPU, for a thread that mostly found nothing to do: a
            // secondary's applier writes and fsyncs its batch itself right
            // after, and a majority write asks for the fsync at once.
            state.pending_since = Some(Instant::now());
        }
        state.index.push(ts, location);
        state.cache.push(ts, Arc::from(entry));
        state.last_meta = append.meta;
        state.stats.entries_appended += 1;
        spare::notify_if_wanted(shared, state);
        Ok(())
    }

    pub fn last_ts(&self) -> Option<Timestamp> {
        self.shared.state.lock().last_ts()
    }

    pub fn first_ts(&self) -> Option<Timestamp> {
        self.shared.state.lock().index.first()
    }

    /// Every entry at or below this is fsynced.
    pub fn durable_ts(&self) -> Timestamp {
        self.shared.state.lock().durable_ts
    }

    /// The durable timestamp with the term and wall date of the entry at it.
    pub fn durable_position(&self) -> (Timestamp, EntryMeta) {
        let state = self.shared.state.lock();
        (state.durable_ts, state.durable_meta)
    }

    /// Changes whenever `durable_ts` moves.
    pub fn durable_watch(&self) -> watch::Receiver<Timestamp> {
        self.shared.durable_tx.subscribe()
    }

    /// The newest appended timestamp (tailable cursors wake on it). After
    /// `truncate_after` it moves back to the new last entry.
    pub fn appended_watch(&self) -> watch::Receiver<Timestamp> {
        self.shared.appended_tx.subscribe()
    }

    /// Blocks until every entry up to `ts` is fsynced, asking the group
    /// commit to sync now (`j: true`) rather than at the interval. A `ts`
    /// beyond the last appended entry waits for everything appended so far.
    pub fn wait_durable(&self, ts: Timestamp) -> Result<(), StorageError> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        let mut counted = false;
        while !shared.check_durable(&mut state, ts, &mut counted)? {
            shared.progress.wait(&mut state);
        }
        Ok(())
    }

    /// The non-blocking half of `wait_durable`, for callers that wait on
    /// `durable_watch` instead of a thread (an async task): true when every
    /// entry up to `ts` is fsynced; otherwise asks the group commit to sync
    /// now, counting the caller as a waiter once (`counted` remembers it
    /// across calls for the same wait). The durable watch also fires when
    /// the journal is poisoned or its thread exits, so that such a waiter
    /// sees the error here.
    pub fn request_durable(&self, ts: Timestamp, counted: &mut bool) -> Result<bool, StorageError> {
        let mut state = self.shared.state.lock();
        self.shared.check_durable(&mut state, ts, counted)
    }

    /// `wait_durable`, with the write and fsync done on this thread when
    /// the group-commit thread is not busy (`group_commit::commit_on_caller`):
    /// for a caller that blocks on the fsync at once.
    pub fn sync_through(&self, ts: Timestamp) -> Result<(), StorageError> {
        {
            let state = self.shared.state.lock();
            if state.poisoned.is_none() && state.durable_ts >= ts.min(state.last_ts().unwrap_or(Timestamp::ZERO)) {
                return Ok(());
            }
        }
        group_commit::commit_on_caller(&self.shared)?;
        self.wait_durable(ts)
    }

    /// Makes everything appended so far durable; returns the durable
    /// timestamp.
    pub fn sync_now(&self) -> Result<Timestamp, StorageError> {
        self.wait_durable(Timestamp::MAX)?;
        Ok(self.durable_ts())
    }

    /// Entries in timestamp order from `from`: at most `max_entries`, and
    /// no more than about `max_bytes` (always at least one entry if any is
    /// there).
    pub fn read(
        &self,
        from: Bound<Timestamp>,
        max_entries: usize,
        max_bytes: usize,
    ) -> Result<Vec<(Timestamp, Vec<u8>)>, StorageError> {
        self.read_with_retries(|state| {
            let start = state.index.start_position(from);
            let mut positions = Vec::new();
            let mut bytes = 0usize;
            for position in start..state.index.len() {
                if positions.len() >= max_entries || (!positions.is_empty() && bytes >= max_bytes) {
                    break;
                }
                let (_, location) = state.index.get(position);
                bytes += location.len as usize;
                positions.push(position);
            }
            positions
        })
    }

    /// The newest `max_entries` entries, newest first (`$natural: -1`).
    pub fn read_newest(&self, max_entries: usize) -> Result<Vec<(Timestamp, Vec<u8>)>, StorageError> {
        self.read_newest_at_or_before(Timestamp::MAX, max_entries)
    }

    /// The newest `max_entries` entries at or before `ts`, newest first (a
    /// rollback's common point search walks the oplog back this way).
    pub fn read_newest_at_or_before(
        &self,
        ts: Timestamp,
        max_entries: usize,
    ) -> Result<Vec<(Timestamp, Vec<u8>)>, StorageError> {
        self.read_with_retries(|state| {
            let end = state.index.start_position(Bound::Excluded(ts));
            (end.saturating_sub(max_entries)..end).rev().collect()
        })
    }

    /// The newest entry's timestamp at or below `ts` (the index alone, no
    /// read), or None when the journal holds none: a checkpoint is written
    /// at an entry's timestamp, so that the journal always holds the entry
    /// recovery starts from.
    pub fn entry_at_or_before(&self, ts: Timestamp) -> Option<Timestamp> {
        let state = self.shared.state.lock();
        let end = state.index.start_position(Bound::Excluded(ts));
        (end > 0).then(|| state.index.get(end - 1).0)
    }

    /// The entry at exactly `ts`, if the journal holds one: a binary search
    /// of the index and one read (none when the entry is in the cache).
    pub fn read_entry(&self, ts: Timestamp) -> Result<Option<Vec<u8>>, StorageError> {
        let entries = self.read_with_retries(|state| {
            let position = state.index.start_position(Bound::Included(ts));
            match position < state.index.len() && state.index.get(position).0 == ts {
                true => vec![position],
                false => Vec::new(),
            }
        })?;
        Ok(entries.into_iter().next().map(|(_, entry)| entry))
    }

    /// Runs a read whose index positions `select` picks under the lock,
    /// retrying if a truncation raced with the file reads.
    fn read_with_retries(
        &self,
        select: impl Fn(&State) -> Vec<usize>,
    ) -> Result<Vec<(Timestamp, Vec<u8>)>, StorageError> {
        for _ in 0..READ_RETRIES_MAX {
            let plan = {
                let state = self.shared.state.lock();
                if let Some(reason) = &state.poisoned {
                    return Err(StorageError::Poisoned(reason.clone()));
                }
                ReadPlan::new(&state, &select(&state))
            };
            match plan.execute() {
                Ok(entries) => return Ok(entries),
                Err(err) => {
                    let state = self.shared.state.lock();
                    if state.generation == plan.generation {
                        return Err(err);
                    }
                }
            }
        }
        Err(StorageError::Io(std::io::Error::other("journal read kept racing with truncation")))
    }

    /// Rollback: removes every entry above `ts`, durably, before returning.
    pub fn truncate_after(&self, ts: Timestamp) -> Result<(), StorageError> {
        let shared = &self.shared;
        // Flush first so that the cut only touches written, fsynced data.
        let (_io_guard, mut state) = loop {
            self.sync_now()?;
            let io_guard = shared.io_lock.lock();
            let state = shared.state.lock();
            state.check_usable()?;
            // A racing append may have been taken into a batch whose fsync
            // is still in flight; flush again until nothing is.
            if state.pending.is_empty() && state.in_flight.is_empty() {
                break (io_guard, state);
            }
        };
        let Some((_, cut)) = state.index.truncate_after(ts) else {
            return Ok(());
        };
        state.cache.truncate_after(ts);
        state.generation += 1;
        let mut removed = Vec::new();
        while state.segments.back().unwrap().seq > cut.seq {
            removed.push(state.segments.pop_back().unwrap());
        }
        let new_last = state.index.last_in_segment(cut.seq);
        let segment = state.segments.back_mut().unwrap();
        assert_eq!(segment.seq, cut.seq);
        segment.end = cut.offset;
        segment.durable_end = cut.offset;
        // The file is cut there: what follows would grow it again, so the
        // journal leaves it for a spare (`spare.rs`).
        segment.file_bytes = cut.offset;
        segment.last_ts = new_last;
        // It takes appends again: an index file would describe it wrongly.
        segment.indexed = false;
        if new_last.is_none() {
            segment.first_ts = None;
        }
        let cut_file = segment.file.clone().expect("a flushed segment has a file");
        let cut_path = segment.path.clone();
        let needs_sync_files = segment.sync_files.is_empty();
        let last_ts = state.last_ts().unwrap_or(Timestamp::ZERO);
        state.durable_ts = state.durable_ts.min(last_ts);
        state.written_ts = state.written_ts.min(last_ts);
        state.in_flight_ts = state.in_flight_ts.min(last_ts);
        let durable_ts = state.durable_ts;
        drop(state);

        let result = truncate_files(shared, &removed, cut.seq, &cut_file, cut.offset);
        // The cut segment takes the next appends; if it was not the last
        // one before, its sync workers' handles are opened now, before
        // anything new is written to it.
        let sync_files = match (&result, needs_sync_files) {
            (Ok(()), true) => group_commit::open_sync_files(&shared.io, &cut_path).map(Some),
            _ => Ok(None),
        };
        let mut state = shared.state.lock();
        if let Err(err) = result {
            return Err(shared.poison(&mut state, format!("truncating the journal after {ts}: {err}")));
        }
        match sync_files {
            Ok(Some(files)) => state.segments.back_mut().unwrap().sync_files = files,
            Ok(None) => {}
            Err(err) => return Err(shared.poison(&mut state, format!("reopening the journal after {ts}: {err}"))),
        }
        state.stats.fsyncs += 2;
        spare::notify_if_wanted(shared, &state);
        drop(state);
        // The flush above made the old end durable, so the durable position
        // is now the new last entry; its meta is read back once.
        let meta = self.newest_meta()?;
        let mut state = shared.state.lock();
        state.last_meta = meta;
        if state.durable_ts == last_ts {
            state.durable_meta = meta;
        }
        drop(state);
        shared.appended_tx.send_replace(last_ts);
        shared.durable_tx.send_replace(durable_ts);
        tracing::info!(target: "journal", after = %ts, segments_removed = removed.len(), "journal truncated");
        Ok(())
    }

    /// Entries below `ts` are no longer needed by a checkpoint: when the
    /// journal is over its size cap, whole old segments whose entries are
    /// all below it may be deleted, but only while the next segment starts
    /// at or below `ts`. So afterwards `first_ts() <= ts` whenever the
    /// journal held an entry at or below `ts`, and no entry above `ts` is
    /// ever deleted.
    pub fn set_retain_from(&self, ts: Timestamp) {
        let mut state = self.shared.state.lock();
        if ts > state.retain_from {
            state.retain_from = ts;
            state.cap_blocked_by_retain = false;
            state.cap_check_requested = true;
            self.shared.work.notify_one();
        }
    }

    /// Changes the size cap (MongoDB's `replSetResizeOplog` size); a smaller
    /// one deletes old segments at the next look, as the cap always does.
    pub fn set_size_cap(&self, bytes: u64) {
        let mut state = self.shared.state.lock();
        state.size_cap_bytes = bytes;
        state.cap_check_requested = true;
        self.shared.work.notify_one();
    }

    /// Changes the minimum retention (MongoDB's `replSetResizeOplog`
    /// minRetentionHours, in seconds).
    pub fn set_min_retention_secs(&self, secs: u64) {
        let mut state = self.shared.state.lock();
        state.min_retention_secs = secs;
        state.retained_until_secs = 0;
        state.cap_check_requested = true;
        self.shared.work.notify_one();
    }

    /// A fail point for tests through the real binary: when `armed`, the
    /// next batch fsync fails as a failing disk's would (the journal is
    /// poisoned; by default the process aborts). Only reachable with test
    /// commands enabled.
    pub fn fail_next_sync(&self, armed: bool) {
        self.shared.fail_next_sync.store(armed, Ordering::Release);
    }

    pub fn stats(&self) -> JournalStats {
        let state = self.shared.state.lock();
        let mut stats = state.stats.clone();
        stats.entries = state.index.len() as u64;
        stats.segments = state.segments.iter().filter(|segment| segment.file.is_some() || segment.has_entries()).count() as u64;
        stats.size_bytes = state.size_bytes();
        stats.size_cap_bytes = state.size_cap_bytes;
        stats.min_retention_secs = state.min_retention_secs;
        stats.cache_entries = state.cache.len() as u64;
        stats.cache_bytes = state.cache.bytes() as u64;
        stats.index_bytes = state.index.bytes() as u64;
        stats.first_ts = state.index.first();
        stats.last_ts = state.last_ts();
        stats.durable_ts = state.durable_ts;
        stats.oldest_unsynced_age_ms =
            state.oldest_unsynced_since().map_or(0, |since| since.elapsed().as_millis() as u64);
        let spare_bytes = if state.spare == Spare::Ready { self.shared.options.segment_size_bytes } else { 0 };
        stats.preallocated_bytes = state.segments.back().map_or(0, |segment| segment.zeroed_bytes_ahead()) + spare_bytes;
        stats
    }

    /// Syncs everything and stops the group-commit thread. Later calls get
    /// `ShuttingDown` (reads keep working).
    pub fn close(&self) -> Result<(), StorageError> {
        let synced = {
            let state = self.shared.state.lock();
            if state.closing {
                None
            } else {
                Some(())
            }
        }
        .map(|_| self.sync_now());
        {
            let mut state = self.shared.state.lock();
            state.closing = true;
            self.shared.work.notify_all();
            self.shared.spare_work.notify_all();
            self.shared.index_work.notify_all();
        }
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            thread.join().expect("a journal thread panicked");
        }
        match synced {
            Some(Err(err)) => Err(err),
            _ => Ok(()),
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if let Err(err) = self.close() {
            tracing::warn!(target: "journal", error = %err, "closing the journal on drop failed");
        }
    }
}

/// Removes the segments after the cut, cuts the cut segment, and makes both
/// durable.
fn truncate_files(
    shared: &Shared,
    removed: &[SegmentState],
    cut_seq: u64,
    cut_file: &Arc<dyn IoFile>,
    cut_offset: u64,
) -> std::io::Result<()> {
    // The index files go first, durably: a segment number used again after
    // the cut must never meet an index of its old content.
    let index_files_guard = shared.index_files.lock();
    for seq in removed.iter().map(|segment| segment.seq).chain([cut_seq]) {
        index_file::remove_index_file(&shared.io, &shared.dir, seq)?;
    }
    shared.io.sync_dir(&shared.dir)?;
    drop(index_files_guard);
    // Newest first, so that a crash midway never leaves a gap in the
    // sequence numbers (recovery would call that corruption).
    for segment in removed {
        if segment.file.is_some() {
            shared.io.remove_file(&segment.path)?;
        }
    }
    cut_file.set_len(cut_offset)?;
    cut_file.sync_all()?;
    shared.io.sync_dir(&shared.dir)
}

/// Index positions resolved under the lock: cached entries are taken at
/// once, the others are read from their files after the lock is released.
struct ReadPlan {
    generation: u64,
    items: Vec<ReadItem>,
}

enum ReadItem {
    Cached(Timestamp, Arc<[u8]>),
    File(Timestamp, Location, Arc<dyn IoFile>),
}

impl ReadPlan {
    fn new(state: &State, positions: &[usize]) -> ReadPlan {
        let items = positions
            .iter()
            .map(|&position| {
                let (ts, location) = state.index.get(position);
                match state.cache.get(ts) {
                    Some(entry) => ReadItem::Cached(ts, entry),
                    None => {
                        // Entries not in the cache were written, so their
                        // segment has a file.
                        let segment = state.segment(location.seq).expect("indexed segment exists");
                        let file = segment.file.clone().expect("written segment has a file");
                        ReadItem::File(ts, location, file)
                    }
                }
            })
            .collect();
        ReadPlan { generation: state.generation, items }
    }

    fn execute(&self) -> Result<Vec<(Timestamp, Vec<u8>)>, StorageError> {
        let mut out = Vec::with_capacity(self.items.len());
        let mut position = 0;
        while position < self.items.len() {
            match &self.items[position] {
                ReadItem::Cached(ts, entry) => {
                    out.push((*ts, entry.to_vec()));
                    position += 1;
                }
                ReadItem::File(..) => {
                    let run = self.file_run(position);
                    self.read_run(&self.items[position..position + run], &mut out)?;
                    position += run;
                }
            }
        }
        Ok(out)
    }

    /// How many items from `start` are frames lying back to back in the
    /// same file, readable with one positional read.
    fn file_run(&self, start: usize) -> usize {
        let mut run = 1;
        while let (Some(ReadItem::File(_, previous, _)), Some(ReadItem::File(_, next, _))) =
            (self.items.get(start + run - 1), self.items.get(start + run))
        {
            let previous_end = previous.offset + (FRAME_HEADER_BYTES + previous.len as usize) as u64;
            if next.seq != previous.seq || next.offset != previous_end {
                break;
            }
            run += 1;
        }
        run
    }

    fn read_run(&self, items: &[ReadItem], out: &mut Vec<(Timestamp, Vec<u8>)>) -> Result<(), StorageError> {
        let ReadItem::File(_, first, file) = &items[0] else { unreachable!() };
        let ReadItem::File(_, last, _) = &items[items.len() - 1] else { unreachable!() };
        let end = last.offset + (FRAME_HEADER_BYTES + last.len as usize) as u64;
        let mut buffer = vec![0u8; (end - first.offset) as usize];
        file.read_exact_at(&mut buffer, first.offset)?;
        for item in items {
            let ReadItem::File(ts, location, _) = item else { unreachable!() };
            let start = (location.offset - first.offset) as usize;
            let frame_end = start + FRAME_HEADER_BYTES + location.len as usize;
            // Check the frame again on the way out: a bad sector or a
            // racing truncation must not be served as an oplog entry.
            match check_frame(&buffer[start..frame_end]) {
                FrameCheck::Valid { ts: found, payload_len } if found == *ts && payload_len == location.len as usize => {
                    out.push((*ts, buffer[start + FRAME_HEADER_BYTES..frame_end].to_vec()));
                }
                other => {
                    return Err(StorageError::Corruption(format!(
                        "reading {ts} from journal segment {} at offset {}: {other:?}",
                        location.seq, location.offset
                    )));
                }
            }
        }
        Ok(())
    }
}
