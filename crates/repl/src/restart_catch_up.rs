//! Fast restart (seed 003): a member restarted with its own data directory
//! has recovered its checkpoint and journal before replication starts; it
//! then fetches only the entries it missed. Its states follow MongoDB's:
//! STARTUP2 while it learns from the first heartbeats how far the others
//! are, RECOVERING while it fetches up to the newest position it heard of
//! (it serves no reads and does not stand for election), then SECONDARY.
//! One log line says how many entries it fetched and how long it took, so
//! that the catch-up is seen to depend on what was missed, not on the data.

use std::sync::Arc;
use std::time::{Duration, Instant};

use slipstream_clock::OpTime;
use slipstream_consensus::{Event, MemberState};
use tokio::sync::oneshot;

use crate::coordinator::Input;
use crate::replica_set::Shared;

/// How often the catch-up looks at the member's state when no batch was
/// applied meanwhile (each applied batch wakes it at once, so that
/// SECONDARY follows the last batch without waiting out a poll).
const POLL_MS: u64 = 50;
/// How often it looks for the other members' first heartbeat answers:
/// their arrival has no signal to wait on, and each look is a clone of an
/// `Arc`, so a short poll costs nothing and keeps STARTUP2 short.
const HEARD_POLL_MS: u64 = 5;
/// Longest the member waits for every other member's first heartbeat
/// answer (a member that is down never answers).
const HEARD_WAIT_MS_MAX: u64 = 10_000;
/// Longest it stays RECOVERING: past it, it reports SECONDARY and fetches
/// the rest as any secondary does (its lag shows in replSetGetStatus).
const CATCH_UP_MS_MAX: u64 = 120_000;
/// Entries counted per oplog read for the log line.
const COUNT_READ_ENTRIES: usize = 10_000;
const COUNT_READ_BYTES: usize = 64 * 1024 * 1024;

/// Starts the catch-up of a member restarted with a configuration and data.
pub fn start(shared: Arc<Shared>) {
    let runtime = shared.runtime.clone();
    runtime.spawn(async move { run(&shared).await });
}

async fn run(shared: &Shared) {
    let started = Instant::now();
    let from = shared.engine.last_applied();
    if !report(shared, MemberState::Startup2).await {
        return;
    }
    let target = newest_heard(shared).await;
    if !report(shared, MemberState::Recovering).await {
        return;
    }
    let recovering = Instant::now();
    let deadline = started + Duration::from_millis(CATCH_UP_MS_MAX);
    let mut visible = shared.engine.oplog_watch();
    let mut applied = shared.engine.last_applied();
    while applied < target && Instant::now() < deadline {
        if shared.rollback.too_stale() {
            // The resync watcher (`resync.rs`) has it from here: RECOVERING
            // with the reason in its infoMessage, then a resync.
            tracing::warn!(target: "repl", from = %crate::rollback::optime_text(from), "restart catch-up stopped: too stale");
            return;
        }
        let poll = Duration::from_millis(POLL_MS);
        if let Ok(Err(_closed)) = tokio::time::timeout(poll, visible.changed()).await {
            // The engine is gone: nothing will wake us, so poll.
            tokio::time::sleep(poll).await;
        }
        applied = shared.engine.last_applied();
    }
    let fetched = count_entries_after(shared, from);
    tracing::info!(target: "repl", fetched_entries = fetched, from = %crate::rollback::optime_text(from),
        to = %crate::rollback::optime_text(applied), target = %crate::rollback::optime_text(target),
        caught_up = applied >= target, duration_ms = started.elapsed().as_millis() as u64,
        startup2_ms = (recovering - started).as_millis() as u64, recovering_ms = recovering.elapsed().as_millis() as u64,
        "restart catch-up finished");
    report(shared, MemberState::Secondary).await;
}

/// The newest applied position among the other members once each has
/// answered a heartbeat (or the wait ran out): what this member missed.
async fn newest_heard(shared: &Shared) -> OpTime {
    let started = Instant::now();
    loop {
        let snapshot = shared.snapshot();
        let others: Vec<_> = snapshot.members.iter().filter(|m| !m.is_self).collect();
        let all_heard = others.iter().all(|m| m.health);
        if all_heard || started.elapsed() >= Duration::from_millis(HEARD_WAIT_MS_MAX) {
            return others
                .iter()
                .filter(|m| m.health)
                .map(|m| m.applied)
                .max()
                .unwrap_or(OpTime::NULL);
        }
        tokio::time::sleep(Duration::from_millis(HEARD_POLL_MS)).await;
    }
}

/// Asks the node to report `state`; false when it refuses (it is primary
/// or a candidate: a one-member set elects itself at once) or is gone.
async fn report(shared: &Shared, state: MemberState) -> bool {
    let (reply, answer) = oneshot::channel();
    shared.input(Input::Command {
        event: Event::ReportState(state),
        reply,
    });
    matches!(answer.await, Ok(Ok(_)))
}

/// Entries this member holds after `from` (what it fetched since start).
fn count_entries_after(shared: &Shared, from: OpTime) -> u64 {
    let mut count = 0;
    let mut after = std::ops::Bound::Excluded(from.ts);
    loop {
        let Ok(entries) = shared.engine.oplog_read(after, COUNT_READ_ENTRIES, COUNT_READ_BYTES) else {
            return count;
        };
        let Some(last) = entries.last().and_then(|entry| entry.get_timestamp("ts").ok()) else {
            return count;
        };
        count += entries.len() as u64;
        after = std::ops::Bound::Excluded(slipstream_storage::from_bson_timestamp(last));
    }
}
