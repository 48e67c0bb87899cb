//! Rollback: `Action::FindCommonPoint` reads the source's oplog backwards
//! against ours, a page at a time (`search`), and reports the last entry
//! both share, with the source's last entry and commit point read in the
//! same query (`CommonPointFound`, or `RollbackFailed`, with the reason in
//! the member's `infoMessage`). `Action::Rollback` then runs the steps
//! below on a blocking thread and reports `RollbackComplete`.
//!
//! The steps, and what a crash between two of them leaves (the fail point
//! `rollbackHangBeforeStep`, `data: {step: N}`, stops a rollback before
//! step N, 2 to 8, so that a test can kill the member there):
//!
//! 1. Search for the common point: read-only on both sides. A crash leaves
//!    nothing to undo; the restarted member searches again.
//! 2. Check that the common point is at or above this member's durable
//!    commit point (the stable timestamp, which no checkpoint passes): a
//!    rollback below it would undo a committed write, so the member stops
//!    with a fatal error instead. Read-only.
//! 3. Save every document an undone entry touched, as it is now, to the
//!    rollback files (`saved_documents`), each fsynced. A crash here or
//!    after it, before 4, leaves files but no marker: the restarted member
//!    searches and rolls back again and writes the documents again, to new
//!    files (nothing is lost, some documents are saved twice).
//! 4. Persist the marker `local.replset.rollback` with `inProgress: true`
//!    and the common point. From here on a restart finishes the rollback
//!    itself, before replication starts (`finish_interrupted`): it bumps
//!    the rollback id and truncates to the recorded common point.
//! 5. Bump and persist the rollback id (before the oplog changes, as
//!    MongoDB does): whoever compares it before and after reading this
//!    oplog sees the change even if this member crashes in the middle. A
//!    crash after it and a restart bump it once more, which only makes
//!    others look again.
//! 6. `Engine::rollback_to(common point)`: storage truncates the journal
//!    durably, then drops the versions above the point and rolls the
//!    catalog back (dropped collections return, created ones go). A crash
//!    before the journal truncation is durable replays the divergent
//!    entries on restart, and the marker truncates them again; after it
//!    the member restarts at the common point.
//! 7. Persist the marker with `inProgress: false`: the record of the last
//!    rollback (`replSetGetStatus.lastRollback`). A crash before it is
//!    finished by a restart as after 4 (the truncation is then a no-op).
//! 8. Report `RollbackComplete`; the node chooses a sync source again. A
//!    crash here is an ordinary restart.

mod record;
mod saved_documents;
mod search;

use std::sync::Arc;
use std::time::Instant;

use bson::{doc, Document};
use parking_lot::Mutex;
use slipstream_clock::OpTime;
use slipstream_consensus::config::MemberId;
use slipstream_consensus::Event;
use slipstream_storage::Engine;

use crate::coordinator::{fatal, Input};
use crate::error::ReplError;
use crate::local_state::LocalState;
use crate::replica_set::Shared;

pub use record::{status_document, RollbackRecord, RollbackState};
pub use search::{newest_common, SearchError, SEARCH_PAGE_ENTRIES};

/// The first and last step a fail point may stop before.
pub const HANG_STEP_FIRST: u32 = 2;
pub const HANG_STEP_LAST: u32 = 8;

pub struct Rollback {
    shared: Arc<Shared>,
    /// The member and host of the last search (the rollback's sync source).
    source: Arc<Mutex<(MemberId, String)>>,
}

impl Rollback {
    pub fn new(shared: Arc<Shared>) -> Rollback {
        Rollback {
            shared,
            source: Arc::new(Mutex::new((MemberId::MAX, String::new()))),
        }
    }

    pub fn find_common_point(&self, source: MemberId, host: String) {
        let shared = self.shared.clone();
        *self.source.lock() = (source, host.clone());
        self.shared.runtime.spawn(async move {
            if shared.resync.started() {
                // The member is wiping itself: nothing to roll back.
                shared.input(Input::Event(Event::RollbackFailed { source }));
                return;
            }
            let event = match search::search(&shared, &host).await {
                Ok(found) => {
                    tracing::info!(target: "repl", source = %host, common_point = %optime_text(found.common_point),
                        source_last = %optime_text(found.source_last), pages = found.pages, "rollback common point found");
                    shared.rollback.set_info_message(String::new());
                    Event::CommonPointFound {
                        source,
                        common_point: found.common_point,
                        source_last: found.source_last,
                        source_commit_point: found.source_commit_point,
                    }
                }
                Err(why) => {
                    shared.rollback.note_search_failed();
                    match why {
                        SearchError::TooStale { our_last } => {
                            tracing::error!(target: "repl", source = %host, why = %why, "member too stale");
                            shared.rollback.set_info_message(format!("{host}: {why}"));
                            if shared.rollback.set_too_stale(true) {
                                crate::resync::watch(shared.clone(), our_last);
                            }
                        }
                        SearchError::NoCommonPoint { .. } => {
                            tracing::error!(target: "repl", source = %host, why = %why, "rollback common point not found");
                            shared.rollback.set_info_message(format!("rollback against {host} impossible: {why}"));
                        }
                        _ => {
                            tracing::warn!(target: "repl", source = %host, why = %why, "rollback common point search failed")
                        }
                    }
                    Event::RollbackFailed { source }
                }
            };
            shared.input(Input::Event(event));
        });
    }

    pub fn roll_back(&self, common_point: OpTime) {
        let shared = self.shared.clone();
        let (source, source_host) = self.source.lock().clone();
        self.shared.runtime.spawn_blocking(move || {
            // A resync that began since the search wipes the data instead;
            // one that begins now waits for this rollback (`resync.rs`).
            let Some(_data) = shared.resync.data_guard() else {
                shared.input(Input::Event(Event::RollbackFailed { source }));
                return;
            };
            let wall_ms = run_steps(&shared, common_point, source_host);
            shared.input(Input::Event(Event::RollbackComplete { common_point, wall_ms }));
        });
    }
}

/// Steps 2 to 7 (see the module doc); returns the wall date of the new
/// last entry.
fn run_steps(shared: &Arc<Shared>, common_point: OpTime, sync_source: String) -> i64 {
    let started = Instant::now();
    let engine = &shared.engine;
    let state = &shared.rollback;
    state.hang_before(2);
    check_above_commit_point(engine, common_point);
    state.hang_before(3);
    let started_wall_ms = bson::DateTime::now().timestamp_millis();
    let touched = saved_documents::collect(engine, common_point)
        .unwrap_or_else(|err| fatal(&format!("cannot read the entries a rollback undoes: {err}")));
    let collect_ms = started.elapsed().as_millis() as u64;
    let saved = saved_documents::save(engine, &touched, started_wall_ms)
        .unwrap_or_else(|err| fatal(&format!("cannot save the documents a rollback undoes: {err}")));
    let save_ms = started.elapsed().as_millis() as u64 - collect_ms;
    state.hang_before(4);
    let mut record = RollbackRecord {
        in_progress: true,
        common_point,
        sync_source,
        started_wall_ms,
        finished_wall_ms: None,
        undone_entries: saved.undone_entries,
        documents_saved: saved.documents,
        files: saved.files,
    };
    if let Err(err) = record::write_marker(engine, &record) {
        fatal(&format!("cannot persist the rollback marker: {err}"));
    }
    state.hang_before(5);
    let rbid = shared.bump_rbid();
    state.hang_before(6);
    let truncate_started = Instant::now();
    truncate(engine, common_point);
    let truncate_ms = truncate_started.elapsed().as_millis() as u64;
    state.hang_before(7);
    record.in_progress = false;
    record.finished_wall_ms = Some(bson::DateTime::now().timestamp_millis());
    if let Err(err) = record::write_marker(engine, &record) {
        fatal(&format!("cannot persist the rollback record: {err}"));
    }
    state.note_finished(&record, started.elapsed());
    let files: Vec<&str> = record.files.iter().map(|(_, path)| path.as_str()).collect();
    tracing::warn!(target: "repl", common_point = %optime_text(common_point), sync_source = %record.sync_source,
        undone_entries = record.undone_entries, documents_saved = record.documents_saved, files = ?files, rbid,
        collect_ms, save_ms, truncate_ms, duration_ms = started.elapsed().as_millis() as u64, "rollback complete");
    state.set_last(record);
    state.hang_before(8);
    engine.last_applied_wall().1
}

/// Step 2: a rollback never goes below the member's durable commit point
/// (MongoDB's fassert that the common point is at least the stable
/// timestamp). A checkpoint past the common point is no reason to stop:
/// with the commit point stalled the checkpoint goes past it, and the
/// engine rolls back to any timestamp from its history floor up
/// (`Engine::rollback_to`); refusing there made a primary that took `w: 1`
/// writes past its checkpoint exit at every start once another member won.
fn check_above_commit_point(engine: &Engine, common_point: OpTime) {
    let stable = engine.stable_timestamp().unwrap_or(slipstream_clock::Timestamp::ZERO);
    if common_point.ts < stable {
        fatal(&format!(
            "refusing to roll back to {}: it is below this member's commit point (stable timestamp {stable}); \
             committed writes would be undone",
            optime_text(common_point)
        ));
    }
    let oldest = engine.oldest_timestamp();
    if common_point.ts < oldest {
        fatal(&format!(
            "cannot roll back to {}: the oldest timestamp this member holds is {oldest} (checkpoint {})",
            optime_text(common_point),
            engine.checkpoint_timestamp()
        ));
    }
}

fn truncate(engine: &Engine, common_point: OpTime) {
    if let Err(err) = engine.rollback_to(common_point.ts) {
        fatal(&format!("rollback to {} failed: {err}", optime_text(common_point)));
    }
}

/// At start, before replication runs: a rollback that a crash interrupted
/// after its marker (step 4) is finished here: the rollback id moves
/// again and the oplog is truncated to the recorded common point. Returns
/// the record of the last rollback, if any.
pub fn finish_interrupted(engine: &Engine, local: &LocalState) -> Result<Option<RollbackRecord>, ReplError> {
    let Some(mut record) = record::read_marker(engine)? else {
        return Ok(None);
    };
    if !record.in_progress {
        return Ok(Some(record));
    }
    let rbid = local.read_rbid()?.unwrap_or(0).wrapping_add(1);
    local.write_rbid(rbid)?;
    let last = engine.last_applied();
    engine.rollback_to(record.common_point.ts)?;
    record.in_progress = false;
    record.finished_wall_ms = Some(bson::DateTime::now().timestamp_millis());
    record::write_marker(engine, &record)?;
    tracing::warn!(target: "repl", common_point = %optime_text(record.common_point), last_applied_before = %optime_text(last),
        rbid, "rollback interrupted by a restart finished");
    Ok(Some(record))
}

/// `configureFailPoint: "rollbackHangBeforeStep"` (test commands only).
pub fn configure_fail_point(shared: &Shared, body: &Document) -> Result<Document, ReplError> {
    let step = match body.get("mode") {
        Some(bson::Bson::String(mode)) if mode == "off" => None,
        Some(bson::Bson::String(mode)) if mode == "alwaysOn" => {
            let step = body
                .get_document("data")
                .ok()
                .and_then(|data| data.get("step"))
                .and_then(crate::protocol::integral);
            match step {
                Some(step) if (i64::from(HANG_STEP_FIRST)..=i64::from(HANG_STEP_LAST)).contains(&step) => {
                    Some(step as u32)
                }
                _ => {
                    return Err(ReplError::bad_value(format!(
                        "rollbackHangBeforeStep needs data.step, a number from {HANG_STEP_FIRST} to {HANG_STEP_LAST}"
                    )))
                }
            }
        }
        _ => {
            return Err(ReplError::bad_value(
                "rollbackHangBeforeStep takes mode 'alwaysOn' or 'off'",
            ))
        }
    };
    Ok(doc! {"count": shared.rollback.configure_hang(step)})
}

pub fn optime_text(op: OpTime) -> String {
    format!("{{ts: {}, t: {}}}", op.ts, op.term)
}
