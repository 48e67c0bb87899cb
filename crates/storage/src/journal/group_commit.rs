//! The group-commit thread and its sync workers: one fsync for every append
//! waiting on it, with up to `SYNC_WORKERS` fsyncs in flight at once.
//!
//! The group-commit thread, one batch per turn:
//! 1. Sleep until there is pending data and someone asked for a sync
//!    (`wait_durable`), or the oldest pending append is `commit_interval_ms`
//!    old, or the journal is closing, or the size cap needs a look; and
//!    until fewer than `SYNC_WORKERS` batches are in flight. When a sync is
//!    asked for, first gather for a moment (at most
//!    `COMMIT_GATHER_MAX_MICROS`, at most half the last commit's duration)
//!    until as many entries are pending as the last commit released
//!    waiters: those writers are about to append again, and one fsync for all
//!    of them beats one for the first and another for the rest (MySQL's and
//!    PostgreSQL's commit delay, made adaptive).
//! 2. Take `io_lock`, then swap the pending chunks out under the state lock
//!    (appends go on into a fresh buffer meanwhile).
//! 3. Outside the state lock: write each chunk at its offset. Before a new
//!    segment is created, the previous one is fsynced through its main
//!    handle, whether its last bytes were written by this batch or by an
//!    earlier one whose fsync is still in flight on a worker: a later
//!    segment must never exist on disk next to an unsynced earlier one. A
//!    new segment is the ready spare renamed into place (preallocated,
//!    `spare.rs`), or else a new file; its header is fsynced, then the
//!    directory, before any frame is written to it.
//! 4. Under the state lock: record the batch as in flight and hand the
//!    fsync of its last file to sync worker `batch_no % SYNC_WORKERS`; go
//!    back to step 1 without waiting for it.
//! 5. If the journal is over its size cap, delete the oldest whole durable
//!    segments below the retain point, as long as the segment after each
//!    starts at or below it (so the journal still begins at or before the
//!    retain point), oldest first (a crash midway leaves no gap), then fsync
//!    the directory. A wake for the size cap alone takes no batch: what was
//!    appended meanwhile waits for its own reason to be written.
//!
//! A sync worker fsyncs its batch's file, then, under the state lock, marks
//! the batch done; batches leave the in-flight queue strictly in order, and
//! each one leaving moves `durable_ts` to its last entry, wakes the
//! waiters and publishes on the durable watch. So `durable_ts` only covers
//! a batch when it and every batch before it are fsynced.
//!
//! Why fsyncs overlap: the disk's flush latency, not the CPU, bounds a
//! journal whose writers each wait for their own entry. While one fsync is
//! in flight the writers it released append again, and their batch can be
//! written and its fsync started at once; Linux lets concurrent fsyncs of
//! one file share the device flush.
//!
//! Why each worker has its own open file per segment: Linux reports a
//! writeback error once per open file description. Two fsyncs racing on one
//! descriptor could see the error reported to the later batch while the
//! earlier one returns success for pages that were lost. Each worker's
//! handle is opened before any frame is written to the segment, so every
//! handle sees every later error.
//!
//! A failed write or fsync poisons the journal: the threads stop, nothing
//! is retried, and `durable_ts` never moves again. A panic in either kind
//! of thread does the same (`run_guarded`, `run_sync_worker_guarded`):
//! otherwise the waiters whose batch it held would wait forever. Under the
//! default policy poisoning aborts the process (`poison.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::io::{IoBackend, IoFile};
use crate::journal::segment::{encode_header, segment_path, SegmentState, SEGMENT_HEADER_BYTES, SPARE_FILE_NAME};
use crate::journal::spare::{self, Spare};
use crate::journal::{EntryMeta, PendingChunk, Shared, State};
use crate::poison::panic_message;
use crate::{StorageError, Timestamp};

/// The longest the thread waits for more writers before an fsync that
/// someone asked for.
pub const COMMIT_GATHER_MAX_MICROS: u64 = 1000;
/// Sync workers, and so the most batches whose fsync is in flight at once.
pub const SYNC_WORKERS: usize = 3;

/// A batch written and waiting for its fsync.
pub(crate) struct InFlightBatch {
    pub batch_no: u64,
    pub last_ts: Timestamp,
    /// The meta of the entry at `last_ts`.
    pub last_meta: EntryMeta,
    /// (segment, end of the chunk written to it) for each chunk.
    pub chunk_ends: Vec<(u64, u64)>,
    pub bytes: u64,
    /// Waiters whose entries are in this batch.
    pub waiters: usize,
    /// Fsyncs done while writing (segment rollover), counted at the end.
    pub fsyncs: u64,
    /// When the batch's first entry was appended.
    pub appended_since: Instant,
    pub done: bool,
}

/// An fsync for a sync worker to run.
pub(crate) struct SyncJob {
    pub batch_no: u64,
    pub file: Arc<dyn IoFile>,
}

/// Opens the sync workers' handles on a segment.
pub(crate) fn open_sync_files(io: &Arc<dyn IoBackend>, path: &std::path::Path) -> std::io::Result<Vec<Arc<dyn IoFile>>> {
    (0..SYNC_WORKERS).map(|_| io.open(path)).collect()
}

/// The group-commit thread: `run`, with a panic turned into poison.
pub(crate) fn run_guarded(shared: Arc<Shared>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(shared.clone())));
    if let Err(payload) = result {
        // The guards the thread held were released while unwinding.
        let mut state = shared.state.lock();
        shared.poison(&mut state, format!("the journal's group-commit thread panicked: {}", panic_message(&*payload)));
        state.thread_exited = true;
        shared.sync_work.iter().for_each(|worker| {
            worker.notify_all();
        });
    }
}

/// Sync worker `slot`: `run_sync_worker`, with a panic turned into poison.
pub(crate) fn run_sync_worker_guarded(shared: Arc<Shared>, slot: usize) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_sync_worker(shared.clone(), slot)));
    if let Err(payload) = result {
        let mut state = shared.state.lock();
        shared.poison(&mut state, format!("journal sync worker {slot} panicked: {}", panic_message(&*payload)));
    }
}

fn run(shared: Arc<Shared>) {
    while let Some(work) = wait_for_work(&shared) {
        let io_guard = shared.io_lock.lock();
        let batch = match work {
            // A look at the size cap alone takes no batch: appends made
            // since `wait_for_work` looked were not asked to be synced, and
            // writing them would make them durable behind the back of a
            // caller that counts on syncs happening only when asked or when
            // their interval ends (the journal's model test does).
            Work::CapCheck => None,
            Work::Batch => {
                let mut state = shared.state.lock();
                if state.poisoned.is_some() {
                    break;
                }
                // `commit_on_caller` may have taken a batch since
                // `wait_for_work` looked: its number moved the next batch's
                // slot to one whose job may not be taken yet.
                if !next_slot_free(&state) {
                    continue;
                }
                Some(take_batch(&shared, &mut state))
            }
        };
        if let Some(batch) = batch.filter(|batch| !batch.chunks.is_empty()) {
            let result = write_batch(&shared, &batch);
            let mut state = shared.state.lock();
            match result {
                Ok(written) => dispatch_batch(&shared, &mut state, &batch, written),
                Err(err) => {
                    shared.poison(&mut state, format!("writing the journal: {err}"));
                    break;
                }
            }
        }
        if let Err(err) = enforce_size_cap(&shared) {
            let mut state = shared.state.lock();
            shared.poison(&mut state, format!("deleting old journal segments: {err}"));
            break;
        }
        drop(io_guard);
    }
    // Let the fsyncs in flight finish (or fail) before saying goodbye, so
    // that `close` returns with everything durable.
    let mut state = shared.state.lock();
    while !state.in_flight.is_empty() && state.poisoned.is_none() {
        shared.work.wait(&mut state);
    }
    state.thread_exited = true;
    shared.progress.notify_all();
    shared.sync_work.iter().for_each(|worker| {
        worker.notify_all();
    });
    // Async waiters on the durable watch learn of the exit too.
    shared.durable_tx.send_replace(state.durable_ts);
}

/// What woke the group-commit thread.
enum Work {
    /// Pending entries to write and sync.
    Batch,
    /// Only the size cap to look at.
    CapCheck,
}

/// Blocks until there is work; None when the thread should exit.
fn wait_for_work(shared: &Shared) -> Option<Work> {
    let interval = Duration::from_millis(shared.options.commit_interval_ms);
    let mut state = shared.state.lock();
    loop {
        if state.poisoned.is_some() {
            return None;
        }
        if !next_slot_free(&state) {
            state.waiting_for_slot = true;
            shared.work.wait(&mut state);
            state.waiting_for_slot = false;
            state.stats.group_commit_wakes += 1;
            continue;
        }
        if let Some(since) = state.pending_since {
            let deadline = since + interval;
            if state.closing || Instant::now() >= deadline {
                return Some(Work::Batch);
            }
            if state.sync_requested {
                gather(shared, &mut state);
                return Some(Work::Batch);
            }
            shared.work.wait_until(&mut state, deadline);
            state.stats.group_commit_wakes += 1;
            continue;
        }
        if state.cap_check_requested {
            return Some(Work::CapCheck);
        }
        if state.closing {
            return None;
        }
        // Idle, for at most an interval: appends do not wake the thread,
        // and an entry appended during this wait is found at its end, no
        // later than its own interval's end (`Journal::append_locked`).
        shared.work.wait_for(&mut state, interval);
        state.stats.group_commit_wakes += 1;
    }
}

/// Waits briefly for the writers released by the last commit to append
/// again, so that one fsync serves them all (see step 1 above).
fn gather(shared: &Shared, state: &mut parking_lot::MutexGuard<'_, State>) {
    let target = state.released_at_last_commit;
    if state.pending_entries >= target {
        return;
    }
    let window = Duration::from_micros(COMMIT_GATHER_MAX_MICROS.min(state.last_commit_micros / 2));
    let deadline = Instant::now() + window;
    state.gather_target = target;
    while state.pending_entries < target && state.poisoned.is_none() && !state.closing {
        if shared.work.wait_until(state, deadline).timed_out() {
            break;
        }
    }
    state.gather_target = 0;
}

/// A segment's main handle and its sync workers' handles.
type SegmentHandles = (Arc<dyn IoFile>, Vec<Arc<dyn IoFile>>);

struct Batch {
    batch_no: u64,
    waiters: usize,
    /// Each chunk with its segment's file and sync handles, None for a
    /// segment to create.
    chunks: Vec<(PendingChunk, Option<SegmentHandles>)>,
    /// When the first chunk starts a new segment: the main handle of the
    /// segment before it, whose tail an earlier batch wrote and whose
    /// fsync may still be in flight on a worker.
    previous_segment: Option<Arc<dyn IoFile>>,
    last_ts: Timestamp,
    last_meta: EntryMeta,
    /// When the batch's first entry was appended.
    appended_since: Instant,
}

fn take_batch(shared: &Shared, state: &mut State) -> Batch {
    let chunks = std::mem::take(&mut state.pending);
    state.pending_bytes = 0;
    state.pending_entries = 0;
    let appended_since = state.pending_since.take().unwrap_or_else(Instant::now);
    if !chunks.is_empty() {
        state.writing_since = Some(appended_since);
    }
    state.sync_requested = false;
    let last_ts = state.last_ts().unwrap_or(Timestamp::ZERO);
    let last_meta = state.last_meta;
    state.in_flight_ts = last_ts;
    let batch_no = state.next_batch_no;
    let waiters = std::mem::take(&mut state.pending_waiters);
    if !chunks.is_empty() {
        state.next_batch_no += 1;
    }
    let chunks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let segment = state.segment(chunk.seq).expect("pending chunk's segment");
            let handles = segment.file.clone().map(|file| (file, segment.sync_files.clone()));
            (chunk, handles)
        })
        .collect();
    let previous_segment = match chunks.first() {
        Some((chunk, None)) => chunk.seq.checked_sub(1).and_then(|seq| state.segment(seq)).and_then(|s| s.file.clone()),
        _ => None,
    };
    // Appenders held back by the pending-bytes maximum may go on.
    shared.progress.notify_all();
    Batch { batch_no, waiters, chunks, previous_segment, last_ts, last_meta, appended_since }
}

/// A segment a batch created.
struct Created {
    seq: u64,
    handles: SegmentHandles,
    /// The file's size when created (`SegmentState::file_bytes`).
    file_bytes: u64,
    /// Whether it is the spare, renamed into place.
    from_spare: bool,
}

/// What writing a batch did, to be recorded under the lock.
struct Written {
    created: Vec<Created>,
    /// The sync handle of the last file written, for this batch's worker.
    last_sync_file: Arc<dyn IoFile>,
    bytes: u64,
    fsyncs: u64,
}

fn write_batch(shared: &Shared, batch: &Batch) -> std::io::Result<Written> {
    let slot = (batch.batch_no % SYNC_WORKERS as u64) as usize;
    let mut created = Vec::new();
    let mut bytes = 0;
    let mut fsyncs = 0;
    // The file that may hold bytes not yet fsynced, to be fsynced before a
    // new segment is created after it.
    let mut unsynced: Option<Arc<dyn IoFile>> = batch.previous_segment.clone();
    let mut last_sync_file = None;
    for (chunk, handles) in &batch.chunks {
        let (file, sync_files) = match handles {
            Some((file, sync_files)) => (file.clone(), sync_files.clone()),
            None => {
                // A later segment must never exist next to an unsynced
                // earlier one: after a crash recovery would call its torn
                // tail corruption, and after a power loss the earlier
                // segment could lose entries the later one keeps.
                if let Some(previous) = unsynced.take() {
                    previous.sync_data()?;
                    fsyncs += 1;
                }
                let segment = create_segment(shared, chunk.seq, &mut bytes, &mut fsyncs)?;
                let (file, sync_files) = segment.handles.clone();
                created.push(segment);
                (file, sync_files)
            }
        };
        if let Some(previous) = &unsynced {
            if !Arc::ptr_eq(previous, &file) {
                previous.sync_data()?;
                fsyncs += 1;
            }
        }
        file.write_all_at(&chunk.bytes, chunk.offset)?;
        bytes += chunk.bytes.len() as u64;
        unsynced = Some(file);
        assert_eq!(sync_files.len(), SYNC_WORKERS, "segment {} takes writes without sync handles", chunk.seq);
        last_sync_file = Some(sync_files[slot].clone());
    }
    Ok(Written { created, last_sync_file: last_sync_file.expect("a batch has a chunk"), bytes, fsyncs })
}

/// Creates segment `seq` with its header, both durable, and opens the sync
/// workers' handles on it before any frame is written: the ready spare
/// renamed into place if there is one, else a new file that grows as
/// frames are written.
fn create_segment(shared: &Shared, seq: u64, bytes: &mut u64, fsyncs: &mut u64) -> std::io::Result<Created> {
    let path = segment_path(&shared.dir, seq);
    let from_spare = {
        let mut state = shared.state.lock();
        let ready = state.spare == Spare::Ready;
        if ready {
            state.spare = Spare::Taken;
        }
        ready
    };
    let file = if from_spare {
        // Opened again under its new name, so that every handle on the
        // segment names it alike (the test backend models files by name).
        shared.io.rename(&shared.dir.join(SPARE_FILE_NAME), &path)?;
        shared.io.open(&path)?
    } else {
        shared.io.create(&path)?
    };
    let header = encode_header(seq);
    file.write_all_at(&header, 0)?;
    file.sync_data()?;
    shared.io.sync_dir(&shared.dir)?;
    let file_bytes = if from_spare { file.size_bytes()? } else { SEGMENT_HEADER_BYTES };
    let sync_files = open_sync_files(&shared.io, &path)?;
    *bytes += header.len() as u64;
    *fsyncs += 2;
    tracing::debug!(target: "journal", file = %path.display(), preallocated = from_spare, "journal segment created");
    Ok(Created { seq, handles: (file, sync_files), file_bytes, from_spare })
}

/// Whether the next batch may be taken: fewer than `SYNC_WORKERS` batches
/// in flight, and the sync worker of its number (`dispatch_batch`) has
/// taken its previous job. Both writers (the group-commit thread and
/// `commit_on_caller`) check it under the state lock right before
/// `take_batch`: a look taken earlier is stale once the other writer took
/// a batch, since each batch moves the next one's slot.
fn next_slot_free(state: &State) -> bool {
    let slot = (state.next_batch_no % SYNC_WORKERS as u64) as usize;
    state.in_flight.len() < SYNC_WORKERS && state.sync_jobs[slot].is_none()
}

/// Records a written batch and hands its fsync to a sync worker.
fn dispatch_batch(shared: &Shared, state: &mut State, batch: &Batch, written: Written) {
    let file = record_batch(shared, state, batch, written);
    let slot = (batch.batch_no % SYNC_WORKERS as u64) as usize;
    assert!(state.sync_jobs[slot].is_none(), "sync worker {slot} still busy");
    state.sync_jobs[slot] = Some(SyncJob { batch_no: batch.batch_no, file });
    shared.sync_work[slot].notify_one();
}

/// Records a written batch as in flight; returns the handle its fsync
/// goes through.
fn record_batch(shared: &Shared, state: &mut State, batch: &Batch, written: Written) -> Arc<dyn IoFile> {
    let mut first_created = None;
    for created in written.created {
        first_created.get_or_insert(created.seq);
        if created.from_spare {
            assert_eq!(state.spare, Spare::Taken);
            state.spare = Spare::None;
        }
        let segment = segment_mut(state, created.seq);
        assert!(segment.file.is_none());
        let (file, sync_files) = created.handles;
        segment.file = Some(file);
        segment.sync_files = sync_files;
        segment.file_bytes = created.file_bytes;
    }
    // A new segment (or an old one taking frames past its end) may want
    // the next spare.
    spare::notify_if_wanted(shared, state);
    // Segments before a new one take no more writes: close their sync
    // handles (fsyncs in flight hold their own), so that open files stay
    // at one per segment plus the workers' handles on the last one.
    if let Some(first_created) = first_created {
        for segment in state.segments.iter_mut().filter(|segment| segment.seq < first_created) {
            segment.sync_files.clear();
        }
    }
    let chunk_ends = batch
        .chunks
        .iter()
        .map(|(chunk, _)| {
            let chunk_end = chunk.offset + chunk.bytes.len() as u64;
            assert!(chunk_end <= segment_mut(state, chunk.seq).end);
            (chunk.seq, chunk_end)
        })
        .collect();
    assert!(batch.last_ts >= state.written_ts);
    state.written_ts = batch.last_ts;
    let written_ts = state.written_ts;
    state.cache.evict(written_ts);
    if let Some(previous) = state.in_flight.back() {
        assert_eq!(previous.batch_no + 1, batch.batch_no);
    }
    state.in_flight.push_back(InFlightBatch {
        batch_no: batch.batch_no,
        last_ts: batch.last_ts,
        last_meta: batch.last_meta,
        chunk_ends,
        bytes: written.bytes,
        waiters: batch.waiters,
        fsyncs: written.fsyncs,
        appended_since: batch.appended_since,
        done: false,
    });
    state.writing_since = None;
    written.last_sync_file
}

/// Writes the pending entries and fsyncs them on the calling thread, which
/// is for one batch both the group-commit thread and its sync worker, when
/// the group-commit thread is not writing and a sync slot is free (a
/// batch's fsync on a worker uses that worker's handle; here the slot's
/// handle, which no worker holds while the slot is free). Does nothing
/// otherwise, or when nothing is pending; the caller then waits for
/// `durable_ts` as before.
///
/// Why: a caller that is about to block on the fsync anyway (a secondary's
/// applier, whose durable position is what majority writes wait for) paid
/// three thread hand-offs for it: to the group-commit thread, to a sync
/// worker, and back when the fsync was done. Each costs tens of µs on an
/// idle machine and more on a virtual one, on the path of every majority
/// write. The steps are the group-commit thread's (take the batch under
/// `io_lock`, write it, record it in flight in order, release `io_lock`)
/// and the sync worker's (fsync, then `complete_batch`, which retires
/// batches strictly in order), so batches still become durable in order
/// whoever wrote them.
pub(crate) fn commit_on_caller(shared: &Arc<Shared>) -> Result<(), StorageError> {
    let Some(io_guard) = shared.io_lock.try_lock() else {
        return Ok(());
    };
    let batch = {
        let mut state = shared.state.lock();
        if let Some(reason) = &state.poisoned {
            return Err(StorageError::Poisoned(reason.clone()));
        }
        if state.pending.is_empty() || state.closing || state.thread_exited || !next_slot_free(&state) {
            return Ok(());
        }
        take_batch(shared, &mut state)
    };
    let (file, more_pending) = match write_batch(shared, &batch) {
        Ok(written) => {
            let mut state = shared.state.lock();
            let file = record_batch(shared, &mut state, &batch, written);
            (file, !state.pending.is_empty())
        }
        Err(err) => {
            let mut state = shared.state.lock();
            return Err(shared.poison(&mut state, format!("writing the journal: {err}")));
        }
    };
    drop(io_guard);
    // The group-commit thread may write the next batch meanwhile, if one
    // was appended while this one was written. Waking it with nothing
    // pending cost every secondary batch a futex call and a wake-up of an
    // idle thread before its fsync.
    if more_pending {
        shared.work.notify_one();
    }
    let mut state = sync_and_complete(shared, &*file, batch.batch_no)?;
    state.stats.commits_on_caller += 1;
    Ok(())
}

/// A written batch's fsync (failed instead by the failJournalFsync fail
/// point when armed), then its retirement in order (`complete_batch`);
/// a failure poisons the journal. The sync workers' and
/// `commit_on_caller`'s one way to finish a batch. Returns the state
/// lock, still held.
fn sync_and_complete<'a>(
    shared: &'a Shared,
    file: &dyn IoFile,
    batch_no: u64,
) -> Result<parking_lot::MutexGuard<'a, State>, StorageError> {
    let started = Instant::now();
    let result = if shared.fail_next_sync.swap(false, std::sync::atomic::Ordering::AcqRel) {
        Err(std::io::Error::other("fsync failed by the failJournalFsync fail point"))
    } else {
        file.sync_data()
    };
    let mut state = shared.state.lock();
    match result {
        Ok(()) => {
            state.last_commit_micros = started.elapsed().as_micros() as u64;
            complete_batch(shared, &mut state, batch_no);
            Ok(state)
        }
        Err(err) => Err(shared.poison(&mut state, format!("fsyncing the journal: {err}"))),
    }
}

/// Sync worker `slot`: runs the fsyncs of batches `slot`, `slot +
/// SYNC_WORKERS`, ... and completes them in order.
fn run_sync_worker(shared: Arc<Shared>, slot: usize) {
    loop {
        let job = {
            let mut state = shared.state.lock();
            loop {
                if state.poisoned.is_some() {
                    return;
                }
                if let Some(job) = state.sync_jobs[slot].take() {
                    break job;
                }
                if state.thread_exited {
                    return;
                }
                shared.sync_work[slot].wait(&mut state);
            }
        };
        if sync_and_complete(&shared, &*job.file, job.batch_no).is_err() {
            return;
        }
    }
}

/// Marks a batch fsynced, then retires every finished batch at the front
/// of the queue in order, moving `durable_ts`.
fn complete_batch(shared: &Shared, state: &mut State, batch_no: u64) {
    if state.poisoned.is_some() {
        return;
    }
    let front = state.in_flight.front().expect("a completed batch is in flight").batch_no;
    let position = (batch_no - front) as usize;
    let batch = &mut state.in_flight[position];
    assert_eq!(batch.batch_no, batch_no);
    assert!(!batch.done);
    batch.done = true;
    let mut released = 0;
    let mut moved = false;
    // A batch ended in a sealed segment: it may be fsynced whole now.
    let mut seal_completed = false;
    while state.in_flight.front().is_some_and(|batch| batch.done) {
        let batch = state.in_flight.pop_front().unwrap();
        for (seq, chunk_end) in batch.chunk_ends {
            let segment = segment_mut(state, seq);
            segment.durable_end = segment.durable_end.max(chunk_end);
            seal_completed |= seq != state.segments.back().unwrap().seq;
        }
        assert!(batch.last_ts >= state.durable_ts);
        state.durable_ts = batch.last_ts;
        state.durable_meta = batch.last_meta;
        state.stats.bytes_written += batch.bytes;
        state.stats.fsyncs += batch.fsyncs + 1;
        state.stats.commits += 1;
        released += batch.waiters;
        moved = true;
    }
    if moved {
        state.released_at_last_commit = released;
        // Over the cap, a look helps unless the last one stopped at the
        // retain point (which asks for its own look when it moves): a
        // journal held over its cap by the snapshot window would otherwise
        // wake the group-commit thread for a vain look at every commit.
        if state.size_bytes() > state.size_cap_bytes
            && !state.cap_blocked_by_retain
            && (state.retained_until_secs == 0 || wall_clock_secs() >= state.retained_until_secs)
        {
            state.cap_check_requested = true;
        }
        shared.durable_tx.send_replace(state.durable_ts);
        shared.progress.notify_all();
    }
    if seal_completed {
        crate::journal::indexer::notify_if_wanted(shared, state);
    }
    // A slot is free again, and the cap may need a look: wake the
    // group-commit thread when that matters to it (it waits for a slot,
    // has entries to write, has the cap to look at, or drains in-flight
    // batches before it exits). Woken always, an idle thread cost every
    // commit a futex call and a context switch for nothing: on a
    // secondary, whose applier commits on its own thread, one per batch.
    if state.waiting_for_slot || !state.pending.is_empty() || state.cap_check_requested || state.closing {
        shared.work.notify_one();
    }
}

fn segment_mut(state: &mut State, seq: u64) -> &mut SegmentState {
    let first = state.segments.front().expect("segments").seq;
    let position = (seq - first) as usize;
    let segment = &mut state.segments[position];
    assert_eq!(segment.seq, seq);
    segment
}

/// Seconds since the Unix epoch by the wall clock (oplog timestamps count
/// the same seconds).
fn wall_clock_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Deletes the oldest whole segments while the journal is over its cap and
/// they hold nothing at or above the retain point, nor anything younger
/// than the minimum retention. Called with `io_lock`.
fn enforce_size_cap(shared: &Shared) -> std::io::Result<()> {
    let doomed = {
        let mut state = shared.state.lock();
        if !state.cap_check_requested {
            return Ok(());
        }
        state.cap_check_requested = false;
        let mut doomed = Vec::new();
        let retention_secs = state.min_retention_secs;
        let now_secs = if retention_secs > 0 { wall_clock_secs() } else { 0 };
        state.retained_until_secs = 0;
        while state.size_bytes() > state.size_cap_bytes && state.segments.len() > 1 {
            let front = state.segments.front().unwrap();
            // The next segment must start at or below the retain point: then
            // every entry of the front one is below it, and the journal
            // still begins at or before the retain point afterwards, so that
            // recovery can check that nothing between the checkpoint and the
            // journal's first entry is missing.
            let next_starts_at_or_below = state.segments[1].first_ts.is_some_and(|first| first <= state.retain_from);
            let fully_durable = front.durable_end == front.end && front.file.is_some();
            if !next_starts_at_or_below || !fully_durable {
                // Blocked for good only by an entry above the retain point
                // (a segment with none yet may take one below it).
                state.cap_blocked_by_retain = state.segments[1].first_ts.is_some_and(|first| first > state.retain_from);
                break;
            }
            // MongoDB's oplogMinRetentionHours: an entry is deleted only
            // once the oplog is over its cap and the entry is older than
            // the retention, by its timestamp's seconds. Segments go oldest
            // first, so the first one still too young ends the look.
            if retention_secs > 0 {
                let newest_secs = front.last_ts.map_or(0, |ts| u64::from(ts.secs));
                let kept_until = newest_secs.saturating_add(retention_secs);
                if kept_until > now_secs {
                    state.retained_until_secs = kept_until;
                    break;
                }
            }
            let front = state.segments.pop_front().unwrap();
            state.index.remove_segment_front(front.seq);
            if let Some(last) = front.last_ts {
                state.cache.remove_through(last);
            }
            state.stats.segments_deleted += 1;
            doomed.push(front);
        }
        doomed
    };
    if doomed.is_empty() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    for segment in &doomed {
        shared.io.remove_file(&segment.path)?;
        // Not durably, and a failure only logged: one left behind belongs
        // to no segment and is removed at the next open. Without the
        // indexer's lock, which would hold this thread (and every write)
        // for an index file's write: an indexer that writes this
        // segment's file after this removal leaves such a stray too, and a
        // deleted front segment's number never comes back.
        if let Err(err) = crate::journal::index_file::remove_index_file(&shared.io, &shared.dir, segment.seq) {
            let seq = segment.seq;
            tracing::warn!(target: "journal", seq, error = %err, "removing a segment's index file failed");
        }
        tracing::info!(target: "journal", file = %segment.path.display(), "journal segment deleted by the size cap");
    }
    shared.io.sync_dir(&shared.dir)?;
    let mut state = shared.state.lock();
    state.stats.fsyncs += 1;
    state.stats.truncate_micros += started.elapsed().as_micros() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::io::StdIo;
    use crate::journal::{Journal, JournalOptions};
    use crate::{Timestamp, TimestampBson};

    fn entry(ts: Timestamp) -> Vec<u8> {
        bson::doc! { "ts": ts.to_bson(), "t": 1i64, "op": "n", "ns": "", "o": {"msg": "x"} }.to_vec().unwrap()
    }

    /// A journal whose commit interval never ends during a test, opened
    /// and past the wake at open (`cap_check_requested` starts true): its
    /// group-commit thread runs only when something asks it to.
    fn open_idle(dir: &std::path::Path, options: JournalOptions) -> Journal {
        let options = JournalOptions { commit_interval_ms: 3_600_000, ..options };
        let journal = Journal::open(dir, StdIo::new(), options).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        journal
    }

    /// A wake for the size cap alone found the thread with appends pending
    /// that nobody had asked to sync, took them as a batch and fsynced them
    /// (the journal model test's rare "not exactly the synced prefix"). The
    /// thread is held at `io_lock` right after such a wake, the appends are
    /// made, and the lock released: nothing may be written for them.
    #[test]
    fn a_size_cap_wake_writes_no_batch() {
        let dir = tempfile::tempdir().unwrap();
        let journal = open_idle(dir.path(), JournalOptions::default());
        let before = journal.stats();
        {
            let io_guard = journal.shared.io_lock.lock();
            {
                let mut state = journal.shared.state.lock();
                state.cap_check_requested = true;
                journal.shared.work.notify_one();
            }
            // The thread wakes for the cap and waits for `io_lock`.
            std::thread::sleep(std::time::Duration::from_millis(50));
            for inc in 1..=3 {
                let ts = Timestamp::new(1_700_000_000, inc);
                journal.append(ts, &entry(ts)).unwrap();
            }
            drop(io_guard);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after = journal.stats();
        assert_eq!(after.commits, before.commits, "a batch was written that nobody asked for");
        assert_eq!(after.bytes_written, before.bytes_written);
        assert_eq!(journal.durable_ts(), Timestamp::ZERO);
        // Asked for, the entries are synced as usual.
        assert_eq!(journal.sync_now().unwrap(), Timestamp::new(1_700_000_000, 3));
    }

    /// A secondary's applier writes and fsyncs each batch on its own thread
    /// (`sync_through`); the idle group-commit thread has nothing to do
    /// with it. Every completed batch used to wake it anyway.
    #[test]
    fn a_commit_on_the_callers_thread_leaves_the_idle_thread_asleep() {
        let dir = tempfile::tempdir().unwrap();
        let journal = open_idle(dir.path(), JournalOptions::default());
        let before = journal.stats();
        for inc in 1..=50 {
            let ts = Timestamp::new(1_700_000_000, inc);
            journal.append(ts, &entry(ts)).unwrap();
            journal.sync_through(ts).unwrap();
        }
        let after = journal.stats();
        assert_eq!(after.durable_ts, Timestamp::new(1_700_000_000, 50));
        assert_eq!(after.commits_on_caller - before.commits_on_caller, 50, "each batch committed on the caller");
        // The cap check a commit may ask for can wake it a few times.
        let wakes = after.group_commit_wakes - before.group_commit_wakes;
        assert!(wakes <= 5, "the idle group-commit thread woke {wakes} times for 50 commits on the caller");
    }

    /// A journal over its size cap whose retain point keeps every segment
    /// (no checkpoint moved it) cannot shrink: a look at the cap after
    /// every commit found nothing to delete, and woke the thread for it.
    #[test]
    fn a_cap_held_by_the_retain_point_is_not_looked_at_after_every_commit() {
        let dir = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            segment_size_bytes: 16 * 1024,
            size_cap_bytes: 16 * 1024,
            preallocate_segments: false,
            ..JournalOptions::default()
        };
        let journal = open_idle(dir.path(), options);
        let mut wakes_over_cap = 0;
        for inc in 1..=200 {
            let ts = Timestamp::new(1_700_000_000, inc);
            let over_cap = journal.stats().size_bytes > 16 * 1024;
            let before = journal.stats().group_commit_wakes;
            let o = bson::doc! { "msg": "x".repeat(1000) };
            let padded = bson::doc! { "ts": ts.to_bson(), "t": 1i64, "op": "n", "ns": "", "o": o };
            journal.append(ts, &padded.to_vec().unwrap()).unwrap();
            journal.sync_through(ts).unwrap();
            // Let a wake the commit asked for happen before counting.
            std::thread::sleep(std::time::Duration::from_millis(1));
            if over_cap {
                wakes_over_cap += journal.stats().group_commit_wakes - before;
            }
        }
        let stats = journal.stats();
        assert!(stats.size_bytes > 4 * 16 * 1024, "the test must run well over the cap: {} bytes", stats.size_bytes);
        assert_eq!(stats.segments_deleted, 0, "the retain point keeps every segment");
        assert!(wakes_over_cap <= 5, "the group-commit thread woke {wakes_over_cap} times over a cap it cannot meet");
        // Once the retain point moves, the cap is met again.
        journal.set_retain_from(Timestamp::new(1_700_000_000, 200));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while journal.stats().segments_deleted == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(journal.stats().segments_deleted > 0, "a moved retain point lets old segments go");
    }

    /// MongoDB's oplogMinRetentionHours: over the cap, a segment whose
    /// newest entry is younger than the retention stays; a cap or a
    /// retention changed while open applies at the next look.
    #[test]
    fn the_minimum_retention_keeps_young_segments_over_the_cap_until_changed() {
        let dir = tempfile::tempdir().unwrap();
        let options = JournalOptions {
            segment_size_bytes: 16 * 1024,
            size_cap_bytes: 16 * 1024,
            min_retention_secs: 3600,
            preallocate_segments: false,
            ..JournalOptions::default()
        };
        let journal = open_idle(dir.path(), options);
        // Entries stamped now (their seconds are the wall clock's).
        let now = super::wall_clock_secs() as u32;
        let mut last = Timestamp::ZERO;
        for inc in 1..=200 {
            last = Timestamp::new(now, inc);
            let o = bson::doc! { "msg": "x".repeat(1000) };
            let padded = bson::doc! { "ts": last.to_bson(), "t": 1i64, "op": "n", "ns": "", "o": o };
            journal.append(last, &padded.to_vec().unwrap()).unwrap();
            journal.sync_through(last).unwrap();
        }
        journal.set_retain_from(last);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let held = journal.stats();
        assert!(held.size_bytes > 4 * 16 * 1024, "the test must run well over the cap: {} bytes", held.size_bytes);
        assert_eq!(held.segments_deleted, 0, "segments younger than the retention were deleted");
        assert_eq!(held.min_retention_secs, 3600);
        // A bigger cap: nothing to delete either way.
        journal.set_size_cap(u64::MAX);
        journal.set_min_retention_secs(0);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(journal.stats().segments_deleted, 0);
        assert_eq!(journal.stats().size_cap_bytes, u64::MAX);
        // The cap back and no retention: old segments go.
        journal.set_size_cap(16 * 1024);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while journal.stats().size_bytes > 2 * 16 * 1024 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let after = journal.stats();
        assert!(after.segments_deleted > 0 && after.size_bytes <= 2 * 16 * 1024, "{after:?}");
        assert_eq!(after.last_ts, Some(last));
    }
}
