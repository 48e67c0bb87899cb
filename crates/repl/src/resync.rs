//! Resync: a member too stale to catch up wipes itself and initial-syncs
//! (issue 8, item 3), where MongoDB needs an operator to empty its data
//! directory by hand.
//!
//! A common point search that finds every entry of its source newer than
//! our last one (`rollback::search`, "too stale") starts `watch`: the
//! member reports RECOVERING with the reason in its `infoMessage`, and looks
//! every `CHECK_INTERVAL_MS` at each candidate source (`initial_sync::
//! source::candidates`: healthy data-bearing PRIMARY/SECONDARY members,
//! which includes sources the node's own choice skips, such as secondaries
//! under `chainingAllowed: false`). A source whose oplog still reaches back
//! to our last entry (its first entry at or below it) serves us: a source
//! with a longer oplog, or one holding entries we diverged from (a rollback,
//! not a resync). The member resyncs only when every candidate has been too
//! stale for `CONFIRM_MS` in a row, and goes back to SECONDARY on its own
//! if its oplog moves again meanwhile.
//!
//! The steps, and what a crash between two of them leaves:
//!
//! 1. Confirm (read-only): a crash leaves the member as it was; restarted,
//!    it finds itself too stale again.
//! 2. Persist the initial sync progress record with the phase `resync`
//!    (`local.replset.initialSync`, fsynced). From here a restart finishes
//!    the wipe before replication starts (`finish_interrupted`) and then
//!    initial-syncs (`initial_sync::needed` holds for any phase but done).
//! 3. Mark the resync begun (`ResyncState::begin`): from here no applier
//!    batch and no rollback touches the data, and ask the coordinator
//!    (`Input::Resync`) to report STARTUP2 (the node stops pulling and
//!    never stands) and start the initial syncer.
//! 4. The initial syncer wipes the data (`wipe`: `Engine::reset_to_empty`,
//!    whose own marker makes a crash inside it reopen empty) once no
//!    applier batch or rollback holds the data.
//! 5. The ordinary initial sync starts over from the `resync` record (its
//!    first progress record replaces it); a crash from here on resumes it
//!    as any initial sync. When it is done the member reports SECONDARY and
//!    the too-stale state clears.
//!
//! The term, vote, configuration and rollback id are local documents, which
//! the wipe keeps. What the member held past the others' oldest entries
//! (writes of a primary that never replicated) is dropped without rollback
//! files: no common point exists to tell what they undo.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{RwLock, RwLockReadGuard};
use slipstream_clock::OpTime;
use slipstream_consensus::{Event, MemberState};
use slipstream_storage::Engine;

use crate::coordinator::{fatal, Input};
use crate::error::ReplError;
use crate::fail_points::RESYNC_HANG_BEFORE_WIPE;
use crate::initial_sync::progress::{Phase, Progress};
use crate::initial_sync::source;
use crate::replica_set::Shared;
use crate::rollback::optime_text;

/// How often a too-stale member looks at every candidate's oplog.
pub const CHECK_INTERVAL_MS: u64 = 1_000;
/// How long every candidate must have been too stale, in a row, before the
/// member wipes itself: a few heartbeat intervals (2 s), so that one slow
/// answer or a source in the middle of a restart does not cost a full copy.
pub const CONFIRM_MS: u64 = 5_000;

/// The resync part of the member's shared state.
#[derive(Default)]
pub struct ResyncState {
    /// True from step 3 until the initial sync is done.
    started: AtomicBool,
    /// Held shared by an applier batch and a rollback while they change the
    /// data, exclusively by the wipe: the wipe never runs under either.
    data: RwLock<()>,
    /// Resyncs this process started (`serverStatus.metrics.repl.tooStaleResyncs`).
    resyncs: AtomicU64,
}

impl ResyncState {
    pub fn started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// Step 3; false if a resync had begun already.
    pub fn begin(&self) -> bool {
        let first = !self.started.swap(true, Ordering::SeqCst);
        if first {
            self.resyncs.fetch_add(1, Ordering::Relaxed);
        }
        first
    }

    /// The initial sync is done; true if it was a resync's.
    pub fn finish(&self) -> bool {
        self.started.swap(false, Ordering::SeqCst)
    }

    pub fn count(&self) -> u64 {
        self.resyncs.load(Ordering::Relaxed)
    }

    /// The data for an applier batch or a rollback: `None` once a resync
    /// began (the batch or rollback must then change nothing). Never
    /// waits: only the wipe takes the lock exclusively, and it does so
    /// after `begin`, so a lock not free for reading means a resync began.
    /// (A small batch is applied on a runtime worker holding the
    /// coordinator: it must not wait out a wipe.)
    pub fn data_guard(&self) -> Option<RwLockReadGuard<'_, ()>> {
        let guard = self.data.try_read()?;
        (!self.started()).then_some(guard)
    }
}

/// Starts watching a member found too stale at `stale_at` (its last entry).
pub fn watch(shared: Arc<Shared>, stale_at: OpTime) {
    let runtime = shared.runtime.clone();
    runtime.spawn(async move { run_watch(shared, stale_at).await });
}

async fn run_watch(shared: Arc<Shared>, stale_at: OpTime) {
    report_state(&shared, MemberState::Recovering).await;
    let mut stale_since: Option<Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(CHECK_INTERVAL_MS)).await;
        if shared.resync.started() {
            return;
        }
        if shared.engine.last_applied() > stale_at {
            shared.rollback.set_too_stale(false);
            shared.rollback.set_info_message(String::new());
            tracing::info!(target: "repl", from = %optime_text(stale_at), "no longer too stale: the oplog moves again");
            report_state(&shared, MemberState::Secondary).await;
            return;
        }
        let verdict = stale_on_every_source(&shared, stale_at).await;
        let firsts = match verdict {
            Ok(firsts) => {
                let since = *stale_since.get_or_insert_with(Instant::now);
                tracing::debug!(target: "repl", sources = ?firsts, stale_for_ms = since.elapsed().as_millis() as u64,
                    "too stale on every sync source");
                if since.elapsed() < Duration::from_millis(CONFIRM_MS) {
                    continue;
                }
                firsts
            }
            Err(why) => {
                if stale_since.take().is_some() {
                    tracing::info!(target: "repl", why = %why, "too-stale confirmation starts over");
                }
                continue;
            }
        };
        decide(&shared, stale_at, &firsts).await;
        return;
    }
}

/// Each candidate's first entry when every candidate is too stale for a
/// member whose last entry is `ours`; otherwise why not.
async fn stale_on_every_source(shared: &Arc<Shared>, ours: OpTime) -> Result<Vec<(String, OpTime)>, String> {
    let candidates = source::candidates(shared, None);
    if candidates.is_empty() {
        return Err("no candidate sync source is up".into());
    }
    let mut firsts = Vec::with_capacity(candidates.len());
    for host in candidates {
        let first = source::first_entry(shared, &host)
            .await
            .map_err(|err| format!("{host}: {err}"))?;
        if first.ts <= ours.ts {
            return Err(format!("{host}'s oplog reaches back to {}", optime_text(first)));
        }
        firsts.push((host, first));
    }
    Ok(firsts)
}

/// Steps 2 and 3.
async fn decide(shared: &Arc<Shared>, stale_at: OpTime, firsts: &[(String, OpTime)]) {
    let sources: Vec<String> = firsts
        .iter()
        .map(|(host, first)| format!("{host} from {}", optime_text(*first)))
        .collect();
    tracing::warn!(target: "repl", last_applied = %optime_text(stale_at), sources = ?sources, confirm_ms = CONFIRM_MS,
        "member too stale on every sync source: resyncing from scratch (initial sync)");
    let engine = shared.engine.clone();
    let marker = tokio::task::spawn_blocking(move || Progress::resync().save(&engine)).await;
    match marker {
        Ok(Ok(())) => {}
        Ok(Err(err)) => fatal(&format!("cannot persist the resync marker: {err}")),
        Err(err) => fatal(&format!("cannot persist the resync marker: {err}")),
    }
    shared.rollback.set_info_message(format!(
        "too stale to catch up from any sync source (last entry {}; {}): resyncing with an initial sync",
        optime_text(stale_at),
        sources.join(", ")
    ));
    shared.resync.begin();
    shared.initial_sync.start_new();
    shared.input(Input::Resync);
}

/// Step 4, on the initial syncer's task: waits until no applier batch or
/// rollback holds the data, then empties it.
pub async fn wipe(shared: &Arc<Shared>) {
    shared.resync.begin();
    if shared.fail_points.is_on(RESYNC_HANG_BEFORE_WIPE) {
        tracing::warn!(target: "repl", fail_point = RESYNC_HANG_BEFORE_WIPE,
            "resync fail point reached: hanging before the wipe while it is on");
        shared.fail_points.wait_while_on(RESYNC_HANG_BEFORE_WIPE).await;
    }
    let task_shared = shared.clone();
    let wiped = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let _exclusive = task_shared.resync.data.write();
        let before = task_shared.engine.last_applied();
        task_shared
            .engine
            .reset_to_empty()
            .map(|()| (before, started.elapsed()))
            .map_err(|err| err.to_string())
    })
    .await;
    match wiped {
        Ok(Ok((before, elapsed))) => {
            tracing::warn!(target: "repl", last_applied_before = %optime_text(before),
                duration_ms = elapsed.as_millis() as u64, "resync: data wiped; initial sync starts");
        }
        Ok(Err(err)) => fatal(&format!("resync: cannot wipe the data: {err}")),
        Err(err) => fatal(&format!("resync: the wipe did not finish: {err}")),
    }
}

/// Whether the progress record asks for a resync (step 2 done, the initial
/// sync not started yet).
pub fn pending(engine: &Engine) -> Result<bool, ReplError> {
    Ok(Progress::load(engine)?.is_some_and(|progress| progress.phase == Phase::Resync))
}

/// At start, before replication runs: a resync a crash interrupted after
/// step 2 wipes the data now (again, if it had), so that the member starts
/// empty and initial-syncs. Returns whether one was pending.
pub fn finish_interrupted(engine: &Engine) -> Result<bool, ReplError> {
    if !pending(engine)? {
        return Ok(false);
    }
    let before = engine.last_applied();
    engine.reset_to_empty()?;
    tracing::warn!(target: "repl", last_applied_before = %optime_text(before),
        "resync interrupted by a restart: data wiped; initial sync starts");
    Ok(true)
}

async fn report_state(shared: &Shared, state: MemberState) {
    let (reply, answer) = tokio::sync::oneshot::channel();
    shared.input(Input::Command {
        event: Event::ReportState(state),
        reply,
    });
    let _ = answer.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use slipstream_storage::engine::{EngineOptions, ResetStep};
    use slipstream_storage::WriteGate;

    fn open(dir: &std::path::Path) -> Arc<Engine> {
        let mut options = EngineOptions::new(dir);
        options.replicated = true;
        options.journal_commit_interval_ms = 2;
        Engine::open(options).unwrap()
    }

    /// A member with entries, its term in a local document, gate closed.
    fn member_with_data(dir: &std::path::Path) -> Arc<Engine> {
        let engine = open(dir);
        engine
            .local()
            .write("replset.election", &doc! {"_id": "election", "term": 4i64})
            .unwrap();
        engine.set_write_gate(WriteGate::Open { term: 4 });
        for i in 0..10 {
            engine.writer().insert("app.c", doc! {"_id": i}).unwrap();
        }
        engine.wait_durable(engine.last_applied().ts).unwrap();
        engine.set_write_gate(WriteGate::Closed);
        engine
    }

    fn assert_reopened_into_initial_sync(dir: &std::path::Path) {
        let engine = open(dir);
        assert!(finish_interrupted(&engine).unwrap());
        assert!(engine.last_applied().is_null());
        assert_eq!(engine.list_databases(), vec!["local".to_string()]);
        // The record still asks for the sync (`initial_sync::needed`), and
        // the member kept its term.
        assert!(pending(&engine).unwrap());
        assert_eq!(Progress::load(&engine).unwrap().map(|p| p.phase), Some(Phase::Resync));
        assert!(engine.local().read("replset.election").unwrap().is_some());
        engine.shutdown().unwrap();
    }

    #[test]
    fn a_crash_after_the_resync_marker_reopens_into_initial_sync() {
        // Before the wipe began, and at each point of it.
        let stops = [
            None,
            Some(ResetStep::Marker),
            Some(ResetStep::EmptyCheckpoint),
            Some(ResetStep::InMemory),
        ];
        for stop in stops {
            let dir = tempfile::tempdir().unwrap();
            let engine = member_with_data(dir.path());
            Progress::resync().save(&engine).unwrap();
            if let Some(step) = stop {
                engine.reset_to_empty_stopping_after(step).unwrap();
            }
            drop(engine); // a crash: no shutdown
            assert_reopened_into_initial_sync(dir.path());
        }
    }

    #[test]
    fn without_the_marker_a_restart_keeps_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let engine = member_with_data(dir.path());
        let last = engine.last_applied();
        drop(engine);
        let engine = open(dir.path());
        assert!(!finish_interrupted(&engine).unwrap());
        assert_eq!(engine.last_applied(), last);
        engine.shutdown().unwrap();
    }

    #[test]
    fn the_data_guard_is_refused_once_a_resync_began() {
        let state = ResyncState::default();
        assert!(state.data_guard().is_some());
        assert!(state.begin());
        assert!(!state.begin());
        assert!(state.data_guard().is_none());
        assert_eq!(state.count(), 1);
        assert!(state.finish());
        assert!(state.data_guard().is_some());
    }
}
