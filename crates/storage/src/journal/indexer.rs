//! The indexer thread: writes the index file (`index_file.rs`) of each
//! sealed segment once all its frames are fsynced, so that the next open
//! need not read it.
//!
//! A segment wants its index when it is not the last one, exists on disk,
//! holds entries, is durable to its end, and has none yet (`indexed`). The
//! thread is woken when a segment is sealed (`Journal::append`) and when a
//! batch that ends in a sealed segment is fsynced (`group_commit.rs`); at
//! open it indexes the sealed segments that were scanned. It takes the
//! entries under the state lock and writes the file outside it, holding
//! `Shared::index_files`, after checking that no truncation happened since
//! (`State::generation`) and the segment is still there: a truncation
//! removes index files under the same lock, so a file for a segment's old
//! content is either not written or removed after it.
//!
//! A failed write is logged and not retried (the segment is marked
//! `indexed`): the next open scans that segment and the indexer tries again
//! then. On close the thread writes what is still wanted before it exits.

use std::sync::Arc;

use crate::journal::index_file::{write_index_file, SegmentIndex};
use crate::journal::{Shared, State};
use crate::poison::panic_message;

/// One index file to write.
struct Job {
    index: SegmentIndex,
    file: Arc<dyn crate::io::IoFile>,
    generation: u64,
}

/// Whether some sealed segment wants its index file now.
fn wanted(state: &State) -> Option<usize> {
    let sealed = state.segments.len().saturating_sub(1);
    state.segments.iter().take(sealed).position(|segment| {
        !segment.indexed && segment.file.is_some() && segment.has_entries() && segment.durable_end == segment.end
    })
}

/// Wakes the indexer thread if a sealed segment wants its index file.
pub(crate) fn notify_if_wanted(shared: &Shared, state: &State) {
    if wanted(state).is_some() {
        shared.index_work.notify_one();
    }
}

/// `run`, with a panic turned into poison (a bug; the journal's threads
/// all fail loudly alike).
pub(crate) fn run_guarded(shared: Arc<Shared>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&shared)));
    if let Err(payload) = result {
        let mut state = shared.state.lock();
        shared.poison(&mut state, format!("the journal's indexer thread panicked: {}", panic_message(&*payload)));
    }
}

fn run(shared: &Shared) {
    while let Some(job) = next_job(shared) {
        let seq = job.index.seq;
        let result = write(shared, &job);
        let mut state = shared.state.lock();
        match result {
            Ok(true) => state.stats.index_files_written += 1,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(
                    target: "journal",
                    seq,
                    error = %err,
                    "writing a segment's index file failed; the next open scans the segment"
                );
            }
        }
        if state.generation == job.generation {
            if let Some(segment) = state.segments.iter_mut().find(|segment| segment.seq == seq) {
                segment.indexed = true;
            }
        }
    }
}

/// Sleeps until a sealed segment wants its index file (and takes what it
/// needs for it) or there is nothing left to do: the journal is poisoned,
/// or closing with no segment waiting.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut state = shared.state.lock();
    loop {
        if state.poisoned.is_some() {
            return None;
        }
        if let Some(position) = wanted(&state) {
            let segment = &state.segments[position];
            let index = SegmentIndex {
                seq: segment.seq,
                file_bytes: 0,
                end: segment.end,
                entries: state.index.segment_entries(segment.seq),
            };
            let file = segment.file.clone().expect("a wanted segment has a file");
            return Some(Job { index, file, generation: state.generation });
        }
        if state.closing {
            return None;
        }
        shared.index_work.wait(&mut state);
    }
}

/// Writes the job's file unless a truncation or the size cap changed the
/// segment since it was taken (then Ok(false)).
fn write(shared: &Shared, job: &Job) -> std::io::Result<bool> {
    let _index_files = shared.index_files.lock();
    {
        let state = shared.state.lock();
        let present = state.segments.iter().any(|segment| segment.seq == job.index.seq);
        if state.generation != job.generation || !present {
            return Ok(false);
        }
    }
    // Sealed and fsynced: nothing changes the file's length any more (a
    // segment that grew past its preallocation is longer than it was made).
    let index = SegmentIndex { file_bytes: job.file.size_bytes()?, ..job.index.clone() };
    write_index_file(&shared.io, &shared.dir, &index)?;
    Ok(true)
}
