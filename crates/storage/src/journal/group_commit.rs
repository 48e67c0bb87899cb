//! The group-commit thread: one fsync for every append waiting on it.
//!
//! Loop, one batch per turn:
//! 1. Sleep until there is pending data and someone asked for a sync
//!    (`wait_durable`), or the oldest pending append is `commit_interval_ms`
//!    old, or the journal is closing, or the size cap needs a look. When a
//!    sync is asked for right after a commit, first gather for a moment
//!    (at most `COMMIT_GATHER_MAX_MICROS`, at most half the last commit's
//!    duration) until as many entries are pending as there were waiters at
//!    the last commit: those writers are about to append again, and one
//!    fsync for all of them beats one for the first and another for the
//!    rest (MySQL's and PostgreSQL's commit delay, made adaptive).
//! 2. Take `io_lock`, then swap the pending chunks out under the state lock
//!    (appends go on into a fresh buffer meanwhile).
//! 3. Outside the state lock: write each chunk at its offset. Before a new
//!    segment is created, the previous one is fsynced, so a later segment
//!    never exists on disk next to an unsynced earlier one; a new segment's
//!    header is fsynced, then the directory. Then fsync the last file.
//! 4. Under the state lock: move `durable_ts` to the batch's last entry,
//!    wake the waiters, publish on the durable watch.
//! 5. If the journal is over its size cap, delete the oldest whole segments
//!    below the retain point (oldest first, so a crash midway leaves no
//!    gap), then fsync the directory.
//!
//! A failed write or fsync in step 3 or 5 poisons the journal and ends the
//! thread: nothing is retried.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::io::IoFile;
use crate::journal::segment::{encode_header, segment_path, SegmentState};
use crate::journal::{PendingChunk, Shared, State};
use crate::Timestamp;

/// The longest the thread waits for more writers before an fsync that
/// someone asked for.
pub const COMMIT_GATHER_MAX_MICROS: u64 = 1000;

pub(crate) fn run(shared: Arc<Shared>) {
    while wait_for_work(&shared) {
        let io_guard = shared.io_lock.lock();
        let batch = {
            let mut state = shared.state.lock();
            if state.poisoned.is_some() {
                break;
            }
            take_batch(&shared, &mut state)
        };
        if !batch.chunks.is_empty() {
            let started = Instant::now();
            let result = write_batch(&shared, &batch);
            let mut state = shared.state.lock();
            state.last_commit_micros = started.elapsed().as_micros() as u64;
            match result {
                Ok(written) => finish_batch(&shared, &mut state, &batch, written),
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
    let mut state = shared.state.lock();
    state.thread_exited = true;
    shared.progress.notify_all();
}

/// Blocks until there is work; false when the thread should exit.
fn wait_for_work(shared: &Shared) -> bool {
    let interval = Duration::from_millis(shared.options.commit_interval_ms);
    let mut state = shared.state.lock();
    loop {
        if state.poisoned.is_some() {
            return false;
        }
        if let Some(since) = state.pending_since {
            let deadline = since + interval;
            if state.closing || Instant::now() >= deadline {
                return true;
            }
            if state.sync_requested {
                gather(shared, &mut state);
                return true;
            }
            shared.work.wait_until(&mut state, deadline);
            continue;
        }
        if state.cap_check_requested {
            return true;
        }
        if state.closing {
            return false;
        }
        shared.work.wait(&mut state);
    }
}

/// Waits briefly for the writers released by the last commit to append
/// again, so that one fsync serves them all (see step 1 above).
fn gather(shared: &Shared, state: &mut parking_lot::MutexGuard<'_, State>) {
    let target = state.waiters_at_last_commit;
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

struct Batch {
    /// Each chunk with its segment's file, None for a segment to create.
    chunks: Vec<(PendingChunk, Option<Arc<dyn IoFile>>)>,
    last_ts: Timestamp,
}

fn take_batch(shared: &Shared, state: &mut State) -> Batch {
    let chunks = std::mem::take(&mut state.pending);
    state.pending_bytes = 0;
    state.pending_entries = 0;
    state.pending_since = None;
    state.sync_requested = false;
    let last_ts = state.last_ts().unwrap_or(Timestamp::ZERO);
    state.in_flight_ts = last_ts;
    let chunks = chunks
        .into_iter()
        .map(|chunk| {
            let file = state.segment(chunk.seq).expect("pending chunk's segment").file.clone();
            (chunk, file)
        })
        .collect();
    // Appenders held back by the pending-bytes maximum may go on.
    shared.progress.notify_all();
    Batch { chunks, last_ts }
}

/// What a batch did, to be recorded under the lock.
struct Written {
    created: Vec<(u64, Arc<dyn IoFile>)>,
    bytes: u64,
    fsyncs: u64,
}

fn write_batch(shared: &Shared, batch: &Batch) -> std::io::Result<Written> {
    let mut written = Written { created: Vec::new(), bytes: 0, fsyncs: 0 };
    let mut unsynced: Option<Arc<dyn IoFile>> = None;
    for (chunk, file) in &batch.chunks {
        let file = match file {
            Some(file) => file.clone(),
            None => {
                if let Some(previous) = unsynced.take() {
                    previous.sync_data()?;
                    written.fsyncs += 1;
                }
                let file = create_segment(shared, chunk.seq, &mut written)?;
                written.created.push((chunk.seq, file.clone()));
                file
            }
        };
        if let Some(previous) = &unsynced {
            if !Arc::ptr_eq(previous, &file) {
                previous.sync_data()?;
                written.fsyncs += 1;
            }
        }
        file.write_all_at(&chunk.bytes, chunk.offset)?;
        written.bytes += chunk.bytes.len() as u64;
        unsynced = Some(file);
    }
    if let Some(file) = unsynced {
        file.sync_data()?;
        written.fsyncs += 1;
    }
    Ok(written)
}

/// Creates segment `seq` with its header, both durable.
fn create_segment(shared: &Shared, seq: u64, written: &mut Written) -> std::io::Result<Arc<dyn IoFile>> {
    let path = segment_path(&shared.dir, seq);
    let file = shared.io.create(&path)?;
    let header = encode_header(seq);
    file.write_all_at(&header, 0)?;
    file.sync_data()?;
    shared.io.sync_dir(&shared.dir)?;
    written.bytes += header.len() as u64;
    written.fsyncs += 2;
    tracing::debug!(target: "journal", file = %path.display(), "journal segment created");
    Ok(file)
}

fn finish_batch(shared: &Shared, state: &mut State, batch: &Batch, written: Written) {
    for (seq, file) in written.created {
        let segment = segment_mut(state, seq);
        assert!(segment.file.is_none());
        segment.file = Some(file);
    }
    for (chunk, _) in &batch.chunks {
        let segment = segment_mut(state, chunk.seq);
        let chunk_end = chunk.offset + chunk.bytes.len() as u64;
        assert!(chunk_end <= segment.end);
        segment.durable_end = segment.durable_end.max(chunk_end);
    }
    assert!(batch.last_ts >= state.durable_ts);
    state.written_ts = batch.last_ts;
    state.durable_ts = batch.last_ts;
    state.stats.bytes_written += written.bytes;
    state.stats.fsyncs += written.fsyncs;
    state.stats.commits += 1;
    state.waiters_at_last_commit = state.waiters;
    let written_ts = state.written_ts;
    state.cache.evict(written_ts);
    if state.size_bytes() > shared.options.size_cap_bytes {
        state.cap_check_requested = true;
    }
    shared.durable_tx.send_replace(batch.last_ts);
    shared.progress.notify_all();
}

fn segment_mut(state: &mut State, seq: u64) -> &mut SegmentState {
    let first = state.segments.front().expect("segments").seq;
    let position = (seq - first) as usize;
    let segment = &mut state.segments[position];
    assert_eq!(segment.seq, seq);
    segment
}

/// Deletes the oldest whole segments while the journal is over its cap and
/// they hold nothing at or above the retain point. Called with `io_lock`.
fn enforce_size_cap(shared: &Shared) -> std::io::Result<()> {
    let doomed = {
        let mut state = shared.state.lock();
        if !state.cap_check_requested {
            return Ok(());
        }
        state.cap_check_requested = false;
        let mut doomed = Vec::new();
        while state.size_bytes() > shared.options.size_cap_bytes && state.segments.len() > 1 {
            let front = state.segments.front().unwrap();
            let below_retain_point = match front.last_ts {
                None => true,
                Some(last) => last < state.retain_from,
            };
            let fully_written = front.durable_end == front.end && front.file.is_some();
            if !below_retain_point || !fully_written {
                break;
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
    for segment in &doomed {
        shared.io.remove_file(&segment.path)?;
        tracing::info!(target: "journal", file = %segment.path.display(), "journal segment deleted by the size cap");
    }
    shared.io.sync_dir(&shared.dir)?;
    shared.state.lock().stats.fsyncs += 1;
    Ok(())
}
