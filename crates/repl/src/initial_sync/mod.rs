//! Initial sync: how a member with an empty data directory becomes a
//! consistent SECONDARY (seed 000 section 4.2, MongoDB's logical design),
//! resumable across restarts and source failures. One noun a file:
//! `source` (which member to copy from), `cloner` (the copy),
//! `oplog_catch_up` (applying the source's oplog up to `minValid`),
//! `progress` (the durable record and the live status). Its fail points
//! are in `crate::fail_points` with the others.
//!
//! The coordinator starts it (`InitialSyncer::start`) when a member learns
//! a configuration with an empty oplog, restarts with an unfinished sync,
//! or decided to resync because it is too stale (`crate::resync`: the
//! record's phase `resync`, whose data this task wipes first); the node
//! reports STARTUP2 meanwhile (no sync source, never stands).
//! One attempt:
//!
//! 1. Choose a source (`source::candidates`); read its rollback id.
//! 2. With a progress record of a copy in progress: keep it if it is still
//!    valid against this source (the same source with the same rollback
//!    id, or another source whose oplog holds the begin point); otherwise
//!    drop everything copied (`Engine::bulk_reset`) and start over.
//! 3. Without one: the begin point is the source's newest entry; record it.
//! 4. Copy (`cloner`), each batch durable before its progress record.
//! 5. `minValid` = the source's newest entry now, or the newest position
//!    any source read at, if later; recorded with the phase `applying`.
//! 6. Apply the source's oplog from the begin point to `minValid`
//!    (`oplog_catch_up`), wait for it to be durable, record `done`.
//! 7. Tell the coordinator (`Input::InitialSyncDone`): the node goes
//!    SECONDARY and its fetcher continues from our last entry.
//!
//! A failed attempt (source gone, an error) is retried after a pause, at
//! most `numInitialSyncAttempts` times (a server parameter, MongoDB's 10):
//! then the process stops with a fatal log line naming the last error, as
//! MongoDB's fassert does, since only an operator can tell why every source
//! fails. A crash at any step resumes at the recorded step on restart.

pub mod checkpoint_copy;
pub mod cloner;
pub mod oplog_catch_up;
pub mod oplog_hold;
pub mod progress;
pub mod source;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slipstream_clock::OpTime;
use slipstream_storage::StorageError;
use tokio::task::JoinHandle;

use crate::coordinator::{fatal, Input};
use crate::error::ReplError;
use crate::network::NetError;
use crate::replica_set::Shared;
use progress::{attempts_max, Phase, Progress, Status};

/// Pause between failed attempts.
pub const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Pause between looks for a source (a look reads this member's own view
/// of the set, which the first heartbeats fill in within a round trip).
pub const SOURCE_POLL: Duration = Duration::from_millis(20);
/// How long a source that failed is passed over while another candidate
/// exists (its heartbeats may still say it is up).
pub const FAILED_SOURCE_AVOID: Duration = Duration::from_secs(10);

/// Why an attempt stopped.
#[derive(Debug)]
pub enum SyncError {
    /// The source failed or answered nonsense: try again (maybe elsewhere).
    Source(NetError),
    /// The source's oplog no longer holds the entry the copy depends on.
    BeginPointGone { wanted: OpTime, found: Option<OpTime> },
    /// Our own storage refused.
    Storage(StorageError),
    /// The progress record could not be written.
    Local(ReplError),
    /// The runtime is going away.
    Stopped(String),
    /// The source cannot serve a copy of its checkpoint file (or its file
    /// changed under the copy): this attempt copies logically instead.
    FileCopyUnavailable(String),
}

impl SyncError {
    pub fn protocol(what: &str) -> SyncError {
        SyncError::Source(NetError::Protocol(format!("unexpected {what} reply")))
    }
}

impl From<NetError> for SyncError {
    fn from(err: NetError) -> SyncError {
        SyncError::Source(err)
    }
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Source(err) => write!(f, "sync source: {err}"),
            SyncError::BeginPointGone { wanted, found } => {
                write!(
                    f,
                    "the sync source's oplog no longer holds {wanted:?} (first: {found:?})"
                )
            }
            SyncError::Storage(err) => write!(f, "storage: {err}"),
            SyncError::Local(err) => write!(f, "progress record: {err}"),
            SyncError::Stopped(why) => write!(f, "stopped: {why}"),
            SyncError::FileCopyUnavailable(why) => write!(f, "no checkpoint copy from the source: {why}"),
        }
    }
}

/// One attempt's state.
pub struct Attempt {
    pub shared: Arc<Shared>,
    pub status: Arc<Status>,
    /// The source, `host:port`.
    pub host: String,
    pub progress: Progress,
}

/// Whether a member must sync before it can be a secondary: an
/// unfinished sync is recorded, or its oplog is empty while another
/// data-bearing member of its configuration exists (the initiator of a
/// set never syncs: it does not come through here).
pub fn needed(shared: &Shared, config: &slipstream_consensus::config::ReplSetConfig, me: u32) -> bool {
    match Progress::load(&shared.engine) {
        Ok(Some(progress)) => return progress.phase != Phase::Done,
        Ok(None) => {}
        Err(err) => fatal(&format!("cannot read the initial sync progress: {err}")),
    }
    let data_bearing = config.member(me).is_some_and(|m| m.is_data_bearing());
    let others = config.members.iter().any(|m| m.id != me && m.is_data_bearing());
    data_bearing && others && shared.engine.last_applied().is_null()
}

/// The companion that runs initial sync on the async runtime.
pub struct InitialSyncer {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
    /// From `start` until `finished` (`Input::InitialSyncDone`) or `stop`:
    /// the member's state is the sync's (STARTUP2) meanwhile.
    running: bool,
}

impl InitialSyncer {
    pub fn new(shared: Arc<Shared>) -> InitialSyncer {
        InitialSyncer {
            shared,
            task: None,
            running: false,
        }
    }

    pub fn start(&mut self) {
        self.running = true;
        if self.task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let shared = self.shared.clone();
        self.task = Some(self.shared.runtime.spawn(run(shared)));
    }

    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The sync reported it is done (its task ends by itself).
    pub fn finished(&mut self) {
        self.running = false;
    }

    pub fn stop(&mut self) {
        self.running = false;
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn run(shared: Arc<Shared>) {
    let status = shared.initial_sync.clone();
    tracing::info!(target: "repl", id = 21_164, "initial sync starting");
    match crate::resync::pending(&shared.engine) {
        Ok(true) => {
            // initialSyncStatus shows the sync from the wipe on.
            status.begin_attempt("", OpTime::NULL);
            crate::resync::wipe(&shared).await
        }
        Ok(false) => {}
        Err(err) => fatal(&format!("cannot read the initial sync progress: {err}")),
    }
    let mut avoid: Option<(String, Instant)> = None;
    loop {
        let started = Instant::now();
        avoid = avoid.filter(|(_, at)| at.elapsed() < FAILED_SOURCE_AVOID);
        let avoided = avoid.as_ref().map(|(host, _)| host.as_str());
        match attempt(&shared, &status, avoided).await {
            Ok(()) => {
                status.finished(started.elapsed());
                break;
            }
            Err(err) => {
                if matches!(err, SyncError::Source(_)) {
                    avoid = status.source().map(|host| (host, Instant::now()));
                }
                tracing::warn!(target: "repl", id = 21_200, error = %err, "initial sync attempt failed");
                status.attempt_failed(&err.to_string(), started.elapsed());
                let limit = attempts_max();
                if status.failed_attempts() >= limit {
                    tracing::error!(target: "repl", id = 21_200, attempts = status.failed_attempts(), limit,
                        error = %err, "initial sync attempts exhausted (numInitialSyncAttempts): the process stops");
                    fatal(&format!(
                        "initial sync failed {} times (numInitialSyncAttempts is {limit}); last error: {err}",
                        status.failed_attempts()
                    ));
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
    let engine = &shared.engine;
    let (applied, wall_ms) = engine.last_applied_wall();
    if engine.wait_durable_async(applied.ts).await.is_err() {
        fatal("initial sync: the journal cannot sync");
    }
    let (durable, durable_wall_ms) = engine.last_durable_wall();
    shared.input(Input::Event(slipstream_consensus::Event::Appended {
        last_applied: applied,
        wall_ms,
    }));
    shared.input(Input::Event(slipstream_consensus::Event::Durable {
        last_durable: durable,
        wall_ms: durable_wall_ms,
    }));
    shared.input(Input::InitialSyncDone);
}

/// Steps 1 to 6 (the module's list).
async fn attempt(shared: &Arc<Shared>, status: &Arc<Status>, avoid: Option<&str>) -> Result<(), SyncError> {
    let recorded = Progress::load(&shared.engine).map_err(SyncError::Local)?;
    let preferred = recorded.as_ref().map(|p| p.source.clone());
    let host = wait_for_source(shared, preferred.as_deref(), avoid).await;
    status.set_source(&host);
    tracing::debug!(target: "repl", source = %host, "initial sync chose a source");
    let rbid = source::rbid(shared, &host).await?;
    tracing::debug!(target: "repl", source = %host, rbid, "initial sync read the source's rollback id");
    // A copy of the source's checkpoint file (`checkpoint_copy`) unless a
    // logical copy is under way or `initialSyncMethod` says logical.
    let file_copy = match recorded.as_ref().map(|progress| progress.phase) {
        Some(Phase::CopyingFile) => true,
        None | Some(Phase::Resync) => checkpoint_copy::method() == checkpoint_copy::METHOD_FILE_COPY,
        Some(_) => false,
    };
    if file_copy {
        status.set_method(checkpoint_copy::METHOD_FILE_COPY);
        status.begin_attempt(&host, OpTime::NULL);
        match checkpoint_copy::copy(shared, status, &host, rbid, recorded.clone()).await {
            Ok(progress) => return replay(shared, status, host, progress, true).await,
            Err(SyncError::FileCopyUnavailable(why)) => {
                // Expected in a young set (nothing committed, so nothing
                // checkpointed, before this member synced): info, not warn.
                tracing::info!(target: "repl", id = 21_205, source = %host, reason = %why,
                    "initial sync copies logically: the source cannot serve a copy of its checkpoint");
                let progress = start_over(shared, &host, rbid).await?;
                return replay(shared, status, host, progress, false).await;
            }
            Err(err) => return Err(err),
        }
    }
    let progress = match recorded {
        Some(progress) if progress.phase == Phase::Done => return Ok(()),
        Some(progress) if progress.phase == Phase::CopyingFile => start_over(shared, &host, rbid).await?,
        Some(progress) if progress.phase == Phase::Resync => start_over(shared, &host, rbid).await?,
        Some(progress) => match still_valid(shared, &host, rbid, progress).await? {
            Some(progress) => progress,
            None => start_over(shared, &host, rbid).await?,
        },
        None => start_over(shared, &host, rbid).await?,
    };
    replay(shared, status, host, progress, false).await
}

/// Steps 4 to 6 of an attempt whose record is `progress`: the logical copy
/// if it is still `cloning`, then the oplog catch-up. After a checkpoint
/// copy (`copied_file`) the copy is installed and the status counts it.
async fn replay(
    shared: &Arc<Shared>,
    status: &Arc<Status>,
    host: String,
    progress: Progress,
    copied_file: bool,
) -> Result<(), SyncError> {
    // The source keeps its oplog from the begin point on while we need it.
    let _lease = oplog_hold::Lease::start(shared, &host, progress.begin.ts).await;
    if copied_file {
        // The hold is in place: the checkpoint's pin may go.
        checkpoint_copy::end(shared, &host).await;
        status.set_oplog_start(progress.begin);
    } else {
        status.set_method(checkpoint_copy::METHOD_LOGICAL);
        status.begin_attempt(&host, progress.begin);
    }
    let mut attempt = Attempt {
        shared: shared.clone(),
        status: status.clone(),
        host,
        progress,
    };
    if attempt.progress.phase == Phase::Cloning {
        cloner::clone_all(&mut attempt).await?;
        let end = source::last_entry(shared, &attempt.host).await?;
        attempt.progress.min_valid = end.ts.max(attempt.progress.max_seen);
        attempt.progress.phase = Phase::Applying;
        cloner::save(&attempt).await?;
        tracing::info!(target: "repl", id = 21_173, min_valid = %attempt.progress.min_valid,
            "initial sync copied every collection; applying the oplog");
    }
    status.set_oplog_end(OpTime::new(attempt.progress.min_valid, -1));
    oplog_catch_up::catch_up(&mut attempt).await?;
    // The catch-up's cursor outlives a rollback of the source and would
    // have read another branch's entries as if they followed ours: a
    // changed rollback id means this attempt's data cannot be trusted (the
    // next one starts over, `still_valid`).
    let rbid = source::rbid(shared, &attempt.host).await?;
    if rbid != attempt.progress.source_rbid {
        let recorded = attempt.progress.source_rbid;
        tracing::warn!(target: "repl", id = 21_201, source = %attempt.host, recorded_rbid = recorded, rbid,
            "initial sync source rolled back during the oplog catch-up: starting over");
        return Err(SyncError::Source(crate::network::NetError::Protocol(
            "the sync source rolled back during the oplog catch-up".into(),
        )));
    }
    attempt.progress.phase = Phase::Done;
    cloner::save(&attempt).await?;
    let last = shared.engine.last_applied();
    tracing::info!(target: "repl", id = 21_192, source = %attempt.host, last_applied = ?last,
        "initial sync done");
    Ok(())
}

/// Waits until a source is available (not counted as a failed attempt);
/// `avoid` only when it is the one candidate.
async fn wait_for_source(shared: &Shared, preferred: Option<&str>, avoid: Option<&str>) -> String {
    loop {
        let candidates = source::candidates(shared, preferred);
        let chosen = candidates
            .iter()
            .find(|host| Some(host.as_str()) != avoid)
            .or(candidates.first());
        if let Some(host) = chosen {
            return host.clone();
        }
        tokio::time::sleep(SOURCE_POLL).await;
    }
}

/// Step 2: the recorded progress, updated for `host`, if its copy is
/// still valid there; `None` when it must start over.
async fn still_valid(
    shared: &Arc<Shared>,
    host: &str,
    rbid: i32,
    mut progress: Progress,
) -> Result<Option<Progress>, SyncError> {
    if progress.source == host && progress.source_rbid != rbid {
        tracing::warn!(target: "repl", id = 21_201, source = host, recorded_rbid = progress.source_rbid, rbid,
            "initial sync source rolled back: starting over");
        return Ok(None);
    }
    let from = match shared.engine.last_applied() {
        op if op.is_null() => progress.begin,
        op => op,
    };
    if !source::holds_entry(shared, host, from).await? {
        tracing::warn!(target: "repl", id = 21_202, source = host, begin = ?from,
            "initial sync source no longer holds the begin point: starting over");
        return Ok(None);
    }
    if progress.source != host {
        tracing::info!(target: "repl", id = 21_203, previous = %progress.source, source = host,
            "initial sync continues from another source");
        progress.source = host.to_owned();
        progress.source_rbid = rbid;
    }
    match &progress.current {
        Some((ns, id)) => tracing::info!(target: "repl", id = 21_204, ns, last_id = %id,
            done = progress.collections_done.len(), phase = ?progress.phase,
            "resuming initial sync from {ns} after _id {id}"),
        None => tracing::info!(target: "repl", id = 21_204, done = progress.collections_done.len(),
            phase = ?progress.phase, "resuming initial sync after {} collections",
            progress.collections_done.len()),
    }
    Ok(Some(progress))
}

/// Step 3 (after dropping anything copied before).
async fn start_over(shared: &Arc<Shared>, host: &str, rbid: i32) -> Result<Progress, SyncError> {
    if !shared.engine.last_applied().is_null() {
        // Entries were applied on top of the copy: only a new data
        // directory can start over from here.
        return Err(SyncError::Storage(StorageError::IllegalOperation(
            "initial sync cannot start over after applying entries; resync with an empty data directory".into(),
        )));
    }
    let engine = shared.engine.clone();
    cloner::blocking(move || {
        engine.bulk_reset()?;
        // A checkpoint copy given up leaves nothing behind either.
        engine.discard_staged_checkpoint()
    })
    .await?;
    tracing::debug!(target: "repl", "initial sync dropped anything copied before");
    let begin = source::last_entry(shared, host).await?;
    let progress = Progress::new(host.to_owned(), rbid, begin);
    let engine = shared.engine.clone();
    let record = progress.clone();
    tokio::task::spawn_blocking(move || record.save(&engine))
        .await
        .map_err(|err| SyncError::Stopped(err.to_string()))?
        .map_err(SyncError::Local)?;
    tracing::info!(target: "repl", id = 21_173, source = host, rbid, begin = ?begin, "initial sync begins");
    Ok(progress)
}
