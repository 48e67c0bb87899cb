//! The spare segment: the journal's next segment file, written with zeros
//! to `segment_size_bytes` and fsynced by a background thread before the
//! journal needs it.
//!
//! Why: a file that grows with every append changes its inode's size, so
//! every fdatasync of it also commits the file system's metadata journal
//! (ext4's jbd2), and waits for whatever else that commit carries. Frames
//! written over preallocated zeros change neither the size nor the block
//! map, and fdatasync has only their data to flush
//! (`examples/fdatasync_stalls.rs` measures the three ways).
//!
//! At most `SPARE_SEGMENTS_AHEAD` (one) spare exists, under the name
//! `SPARE_FILE_NAME`, never a segment name, so that recovery never sees a
//! segment on disk before every earlier one is complete. Its life:
//!
//! ```text
//! None --(active segment needs one)--> Preparing --(zeros fsynced)--> Ready
//!   ^                                     |                              |
//!   |                 (closing: removed)--+            (group commit takes it)
//!   |                 (failure: removed)--> Disabled                     v
//!   +-----------------(renamed into place, directory fsynced)-------- Taken
//! ```
//!
//! The active segment needs a spare once less than half of it is left as
//! preallocated zeros (`SPARE_WANTED_BELOW_PERCENT_LEFT`). A segment that
//! was created the old way (no spare was ready, or the journal was just
//! created) or cut by `truncate_after` has none left at all: it needs one
//! once it has grown by `SPARE_AFTER_GROWN_BYTES_MAX` (or a quarter of a
//! segment, if less), so that a journal that is opened and barely written
//! (most tests, an idle node) never writes a segment of zeros, and the
//! journal rolls over to the spare as soon as it is ready (`Journal::append`)
//! rather than growing that segment for a whole segment's worth of writes.
//!
//! The group-commit thread takes a Ready spare when it creates a segment
//! (`group_commit.rs`): it renames the spare to the segment's name, writes
//! and fsyncs the header, then fsyncs the directory, the same steps and
//! fsyncs as creating the file. A crash after the rename and before the
//! header is durable leaves a last segment with a zero header and no frame,
//! which recovery removes as a segment whose creation was interrupted.
//!
//! A failed preparation loses nothing: the file is removed, the journal
//! goes on creating segments the old way (Disabled, logged once), and it
//! is not retried (a disk that fails here will fail the journal's own
//! writes soon enough, and those poison it).

use std::sync::Arc;

use crate::journal::segment::{SegmentState, SPARE_FILE_NAME};
use crate::journal::{JournalOptions, Shared, State};
use crate::poison::panic_message;

/// Spare segments prepared ahead of the active one.
pub const SPARE_SEGMENTS_AHEAD: usize = 1;
/// The active segment wants a spare once less than this share of it (in
/// percent of `segment_size_bytes`) is left as preallocated zeros: early
/// enough that preparing it (about a second for 64 MiB on a busy disk)
/// finishes before half a segment of appends does.
pub const SPARE_WANTED_BELOW_PERCENT_LEFT: u64 = 50;
/// A segment without preallocated zeros wants a spare once it has grown by
/// this much (or by a quarter of `segment_size_bytes`, if less).
pub const SPARE_AFTER_GROWN_BYTES_MAX: u64 = 1024 * 1024;

/// Where the spare is in its life (see the drawing above). Guarded by the
/// journal's state lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Spare {
    None,
    /// The spare thread is writing it.
    Preparing,
    /// Whole and fsynced; the group-commit thread may take it.
    Ready,
    /// The group-commit thread is renaming it into place.
    Taken,
    /// A preparation failed; segments are created the old way from now on.
    Disabled,
}

/// Whether the spare thread should prepare a spare now.
pub(crate) fn spare_wanted(state: &State, options: &JournalOptions) -> bool {
    if !options.preallocate_segments {
        return false;
    }
    if state.spare != Spare::None || state.closing || state.poisoned.is_some() {
        return false;
    }
    let active = state.segments.back().expect("the journal always has a segment");
    active_segment_wants_spare(active, options.segment_size_bytes)
}

/// The rule of `SPARE_WANTED_BELOW_PERCENT_LEFT`; a segment that exists
/// only as pending appends is created with the spare if one is ready, and
/// asks for nothing yet.
fn active_segment_wants_spare(active: &SegmentState, segment_size_bytes: u64) -> bool {
    if active.file.is_none() {
        return false;
    }
    let zeroed_ahead = active.zeroed_bytes_ahead();
    if zeroed_ahead > 0 {
        return zeroed_ahead.saturating_mul(100) < segment_size_bytes.saturating_mul(SPARE_WANTED_BELOW_PERCENT_LEFT);
    }
    let grown = active.end.saturating_sub(active.file_bytes);
    grown >= SPARE_AFTER_GROWN_BYTES_MAX.min(segment_size_bytes / 4)
}

/// Wakes the spare thread if the active segment now wants a spare.
pub(crate) fn notify_if_wanted(shared: &Shared, state: &State) {
    if spare_wanted(state, &shared.options) {
        shared.spare_work.notify_one();
    }
}

/// The spare thread: `run`, with a panic turned into poison (it is a bug,
/// and the journal's threads all fail loudly alike).
pub(crate) fn run_guarded(shared: Arc<Shared>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&shared)));
    if let Err(payload) = result {
        let mut state = shared.state.lock();
        shared.poison(
            &mut state,
            format!("the journal's spare thread panicked: {}", panic_message(&*payload)),
        );
    }
}

fn run(shared: &Shared) {
    let path = shared.dir.join(SPARE_FILE_NAME);
    let size = shared.options.segment_size_bytes;
    while wait_until_wanted(shared) {
        let cancelled = || {
            let state = shared.state.lock();
            state.closing || state.poisoned.is_some()
        };
        let result = shared.io.create_zeroed(&path, size, &cancelled);
        let mut state = shared.state.lock();
        assert_eq!(state.spare, Spare::Preparing);
        match result {
            Ok(true) => {
                state.spare = Spare::Ready;
                state.stats.spares_prepared += 1;
                tracing::debug!(target: "journal", file = %path.display(), bytes = size, "spare journal segment ready");
            }
            Ok(false) => {
                state.spare = Spare::None;
                return;
            }
            Err(err) => {
                state.spare = Spare::Disabled;
                drop(state);
                tracing::warn!(
                    target: "journal",
                    file = %path.display(),
                    error = %err,
                    "preparing a spare journal segment failed; segments are created as they fill from now on"
                );
                // Best effort: a leftover is removed at the next open too.
                let _ = shared.io.remove_file(&path);
                return;
            }
        }
    }
}

/// Sleeps until a spare is wanted (then marks it Preparing and answers
/// true) or the journal closes or is poisoned (false).
fn wait_until_wanted(shared: &Shared) -> bool {
    let mut state = shared.state.lock();
    loop {
        if state.closing || state.poisoned.is_some() || state.spare == Spare::Disabled {
            return false;
        }
        if spare_wanted(&state, &shared.options) {
            state.spare = Spare::Preparing;
            return true;
        }
        shared.spare_work.wait(&mut state);
    }
}

// The `Spare` state holds one spare; more would need a queue of them.
const _: () = assert!(SPARE_SEGMENTS_AHEAD == 1);
