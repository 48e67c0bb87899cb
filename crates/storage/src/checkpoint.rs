//! Checkpoints: the state at a chosen timestamp, written into the
//! key-value engine in one atomic batch.
//!
//! Which timestamp (`checkpoint`):
//! - the stable timestamp S (the commit point under replication, the
//!   journal's durable timestamp on a standalone, never above what is
//!   durable) when it moved past the current checkpoint: an ordinary
//!   checkpoint, which also drops any history on disk (nothing can roll back
//!   or read below S any more);
//! - past S, up to what is durable, when the versions in memory cost more
//!   than `EngineOptions::history_bytes_max` (the commit point stalls: a
//!   P-S-A set with its secondary down): the checkpoint then also writes
//!   every version of each key it changes since the history floor (the
//!   checkpoint where it first went past S) to the history (`history.rs`),
//!   so that reads and `rollback_to` still reach down to the floor, and the
//!   journal keeps every entry from the floor;
//! - otherwise none (memory is pruned of what readers no longer need).
//!
//! The background thread's ordinary checkpoints also stay below the start of
//! the snapshot window (`minSnapshotHistoryWindowInSeconds`) while the
//! journal is within its size cap, so that snapshot reads reach back that
//! far; past the cap the window gives way (a checkpoint held back holds the
//! journal back: the recovery floor, `engine.rs`). The window keeps at most
//! a share of the memory bound (`WINDOW_SHARE_DIVISOR`): when the versions
//! it holds cost more, each checkpoint slides it up just enough
//! (`window_marks.rs`), so a steady load is checkpointed a few seconds at a
//! time rather than a memory bound's worth at once; a load that passes the
//! whole bound between two checkpoints slides it the same way (only
//! within one 100 ms sample, as a burst does, can it not be split).
//!
//! Every checkpoint is written at a journal entry's timestamp
//! (`Inner::checkpoint_target`): the window's start is a wall-clock time,
//! and a checkpoint there would put the floor below the journal's first
//! entry of a young set, which recovery refuses.
//!
//! Steps (numbered as the recovery steps are; a crash between any two
//! leaves the previous checkpoint and the whole journal, so recovery
//! works from either):
//! 1. Under `checkpoint_lock` (no rollback meanwhile) pick the timestamp T
//!    as above.
//! 2. Copy, in key order, the newest version `<= T` of every key in
//!    memory (a tombstone becomes a delete), skipping tables whose drop is
//!    carried out (at or below T, or at or below the floor with history);
//!    with history, add each key's record of versions; add a range delete
//!    for each dropped table; add the catalog as of T, T, the floor and the
//!    catalogs since the floor as metadata.
//! 3. Commit the batch (one fsync). A failure poisons the engine: under
//!    the default policy the cause is logged and the process aborts
//!    (`poison.rs`), as it does when the checkpoint thread panics.
//! 4. Make the new checkpoint the base of new readers, fold the catalog
//!    history, prune memory versions every base holds.
//! 5. Let the journal delete segments below the floor, or below T.
//!
//! `roll_back_history` is `rollback_to` below the checkpoint: it writes the
//! checkpoint as of the rollback point from the history records, in one
//! batch, before the journal is truncated.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::apply::table_range;
use crate::catalog::{checkpoint_catalog, Catalog, CatalogHistory};
use crate::engine::Inner;
use crate::history::{
    catalog_at, decode_versions, encode_catalogs, encode_versions, history_key, history_range, CatalogVersions,
    HISTORY_PREFIX, META_HISTORY_CATALOGS, META_HISTORY_FLOOR,
};
use crate::jitter::Jitter;
use crate::kv::{KvBatch, KvSnapshot};
use crate::mvcc::{BaseView, KeyChange};
use crate::poison::{panic_message, FailedPart};
use crate::recovery::{CHECKPOINT_FORMAT_VERSION, META_CATALOG, META_CHECKPOINT_TS, META_FORMAT_VERSION};
use crate::{StorageError, Timestamp};

/// The background thread: a checkpoint every `checkpoint_interval_ms`,
/// start to start, give or take a quarter, until told to stop (the final one is written by
/// `shutdown`). A checkpoint that takes longer than the interval is
/// followed at once by the next, so that memory does not grow while the
/// thread sleeps.
/// The checkpoint thread: `run_thread`, with a panic turned into poison
/// (without checkpoints, memory grows until the node falls over).
pub(crate) fn run_thread_guarded(inner: Arc<Inner>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_thread(inner.clone())));
    if let Err(payload) = result {
        let reason = format!("the checkpoint thread panicked: {}", panic_message(&*payload));
        inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
        inner.poisoned.lock().get_or_insert(reason);
    }
}

/// How often the checkpoint thread looks at what the versions in memory
/// cost between its interval's checkpoints, and the least time between two
/// checkpoints it starts for that reason: at 1 KB inserts a second fill
/// tens of megabytes, so waiting out a 5 s interval would overshoot the
/// bound by far.
const HISTORY_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The snapshot window keeps versions in memory up to
/// `history_bytes_max / WINDOW_SHARE_DIVISOR`; the rest of the bound is
/// headroom for what arrives between two checkpoints and for a commit point
/// that lags.
pub const WINDOW_SHARE_DIVISOR: u64 = 2;

fn run_thread(inner: Arc<Inner>) {
    let interval = Duration::from_millis(inner.options.checkpoint_interval_ms.max(1));
    // The first checkpoint comes after half to one and a half intervals,
    // each later one after three quarters to five quarters (`jitter.rs`).
    let mut jitter = Jitter::new(inner.copy_nonce);
    let mut next = Instant::now() + jitter.spread(interval, 50, 150);
    loop {
        let earliest = Instant::now() + HISTORY_POLL_INTERVAL.min(interval);
        {
            let mut stop = inner.checkpoint_stop.lock();
            loop {
                if *stop {
                    return;
                }
                inner.window_marks.lock().sample(inner.visible(), inner.store.bytes_written());
                let now = Instant::now();
                if now >= next || (now >= earliest && over_history_bound(&inner)) {
                    break;
                }
                let wake = if now < earliest { earliest } else { now + HISTORY_POLL_INTERVAL }.min(next);
                inner.checkpoint_wake.wait_until(&mut stop, wake);
            }
        }
        next = Instant::now() + jitter.spread(interval, 75, 125);
        if let Err(err) = checkpoint(&inner, true) {
            tracing::error!(target: "storage", error = %err, "checkpoint failed");
            if matches!(err, StorageError::Poisoned(_)) {
                return;
            }
        }
    }
}

/// Writes a checkpoint if one is due (see the module comment); returns the
/// checkpoint timestamp. With `keep_window` (the background thread; not an
/// explicit checkpoint or the one at shutdown) an ordinary checkpoint stays
/// below the snapshot window's start while memory is within its bound.
pub(crate) fn checkpoint(inner: &Inner, keep_window: bool) -> Result<Timestamp, StorageError> {
    let _guard = inner.checkpoint_lock.lock();
    if let Some(reason) = &*inner.poisoned.lock() {
        return Err(StorageError::Poisoned(reason.clone()));
    }
    let mut base = inner.store.base();
    let mut wanted = inner.stable_for_checkpoint();
    // The window gives way to the oplog's size cap: a checkpoint held back
    // holds the journal back with it (the floor). To memory it gives way
    // only as far as its share (`window_memory_start`), wholly only when
    // memory is past the bound and the samples cannot say how far to go
    // (what is in memory came before the oldest sample: a rollback).
    let memory_start = inner.window_memory_start();
    let window_holds =
        keep_window && !inner.journal_over_cap() && (memory_start.is_some() || !over_history_bound(inner));
    // A checkpoint copy in progress (`engine/checkpoint_copy.rs`) holds the
    // background checkpoints back while memory is within its bound: one
    // would change the file under the copy, which then starts over. Like an
    // initial sync's oplog hold it outweighs the journal's size cap (for
    // its lease, which the copy's reads renew).
    if keep_window && !over_history_bound(inner) && inner.copy_pins.lock().any(Instant::now()) {
        inner.store.prune();
        return Ok(base.ts);
    }
    if let Some(window_start) = inner.snapshot_window_start().filter(|_| window_holds) {
        let start = match memory_start {
            Some(memory_start) => window_start.max(memory_start),
            None => window_start,
        };
        wanted = wanted.min(start);
    }
    let stable = inner.checkpoint_target(wanted);
    // A checkpoint past the commit point keeps its history (and the journal
    // from its floor) until an ordinary one replaces it. The commit point
    // may catch up with it exactly and no write come after: the ordinary
    // checkpoint is then the same state without the history.
    let history_done = base.floor.is_some() && stable == base.ts;
    if stable > base.ts || history_done {
        let at = write_checkpoint(inner, base, stable, None)?;
        if !(inner.options.replicated && over_history_bound(inner)) {
            return Ok(at);
        }
        // What is above the stable timestamp is still too much: go past it.
        base = inner.store.base();
    }
    let limit = inner.checkpoint_target(inner.checkpoint_limit());
    if inner.options.replicated && limit > base.ts && over_history_bound(inner) {
        let floor = base.floor.unwrap_or(base.ts);
        return write_checkpoint(inner, base, limit, Some(floor));
    }
    // Readers that held older bases may have gone: prune what they kept.
    inner.store.prune();
    Ok(base.ts)
}

/// Whether the versions in memory cost more than the bound.
pub(crate) fn over_history_bound(inner: &Inner) -> bool {
    inner.store.bytes_in_memory() > inner.options.history_bytes_max
}

/// The history record of `change.key` with the change's versions added: its
/// record so far, or (a key unchanged since the floor) its value at the floor
/// read from the current checkpoint.
fn history_record(kv: &dyn KvSnapshot, floor: Timestamp, change: &KeyChange) -> Result<Vec<u8>, StorageError> {
    let mut versions = match kv.get(&history_key(&change.key))? {
        Some(record) => decode_versions(&record)?,
        None => vec![(floor, kv.get(&change.key)?)],
    };
    versions.extend(change.versions.iter().map(|(ts, value)| (*ts, value.as_ref().map(|v| v.to_vec()))));
    Ok(encode_versions(&versions))
}

/// Steps 2 to 5 at `target`, with history from `floor` when given.
fn write_checkpoint(
    inner: &Inner,
    base: Arc<BaseView>,
    target: Timestamp,
    floor: Option<Timestamp>,
) -> Result<Timestamp, StorageError> {
    let started = Instant::now();
    let current = base.ts;
    // With history, a table dropped above the floor keeps its keys: reads
    // and rollbacks below the drop still need them.
    let drops_done_to = floor.unwrap_or(target);
    let (catalog_bytes, dropped_tables, catalogs) = {
        let history = inner.catalog.read();
        let at_target = history.at(target);
        let dropped: BTreeSet<u32> = at_target
            .dropped_tables
            .iter()
            .filter(|(_, ts)| **ts <= drops_done_to)
            .map(|(table, _)| *table)
            .collect();
        let catalogs = match floor {
            None => Vec::new(),
            Some(_) => {
                let mut catalogs = inner.history_catalogs.read().clone();
                if catalogs.is_empty() {
                    catalogs.push((current, history.at(current)));
                }
                catalogs.extend(history.versions_between(current, target));
                catalogs
            }
        };
        (checkpoint_catalog(&history, target, drops_done_to).to_bytes(), dropped, catalogs)
    };
    let mut batch = KvBatch::default();
    // History records go after the data keys: they sort after every table.
    let mut records = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (changes, next) =
            inner.store.checkpoint_batch_with_versions(target, current, after.as_deref(), floor.is_some());
        for change in changes {
            let table = u32::from_be_bytes(change.key[..4].try_into().expect("store keys start with a table id"));
            if dropped_tables.contains(&table) {
                continue;
            }
            if let Some(floor) = floor {
                records.push((history_key(&change.key), history_record(&*base.kv, floor, &change)?));
            }
            match change.value {
                Some(value) => batch.put_shared(change.key, value),
                None => batch.delete(change.key),
            }
        }
        match next {
            Some(key) => after = Some(key),
            None => break,
        }
    }
    for (key, record) in records {
        batch.put(key, record);
    }
    for table in &dropped_tables {
        let (start, end) = table_range(*table);
        batch.delete_range(start, end);
    }
    if floor.is_none() && base.floor.is_some() {
        let (start, end) = history_range();
        batch.delete_range(start, end);
    }
    let keys_written = batch.ops.len();
    batch.set_metadata(META_FORMAT_VERSION, CHECKPOINT_FORMAT_VERSION.to_be_bytes().to_vec());
    batch.set_metadata(META_CHECKPOINT_TS, target.as_u64().to_be_bytes().to_vec());
    batch.set_metadata(META_CATALOG, catalog_bytes);
    set_history_metadata(&mut batch, floor, &catalogs);
    commit_or_poison(inner, batch, target)?;
    let snapshot = inner.kv.snapshot()?;
    {
        // Under the catalog lock, as readers take their views: a reader
        // below the checkpoint finds its catalog among the new `catalogs`.
        let mut history = inner.catalog.write();
        inner.store.install_base(BaseView { kv: snapshot, ts: target, floor });
        inner.window_marks.lock().forget_below(target);
        *inner.history_catalogs.write() = catalogs;
        history.fold_to(target, drops_done_to);
    }
    // The old base is no reader's: let `prune` drop what only it needed.
    drop(base);
    let pruned = inner.store.prune();
    inner.retain_journal_for_floor();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    inner.checkpoints.fetch_add(1, Ordering::Relaxed);
    inner.last_checkpoint_ms.store(elapsed_ms, Ordering::Relaxed);
    if floor.is_some() {
        inner.checkpoints_past_stable.fetch_add(1, Ordering::Relaxed);
    }
    tracing::debug!(target: "storage", at = %target, ?floor, keys_written, pruned, elapsed_ms, "checkpoint");
    Ok(target)
}

fn set_history_metadata(batch: &mut KvBatch, floor: Option<Timestamp>, catalogs: &[(Timestamp, Arc<Catalog>)]) {
    let floor_bytes = floor.map_or(Vec::new(), |floor| floor.as_u64().to_be_bytes().to_vec());
    batch.set_metadata(META_HISTORY_FLOOR, floor_bytes);
    batch.set_metadata(META_HISTORY_CATALOGS, encode_catalogs(catalogs));
}

fn commit_or_poison(inner: &Inner, batch: KvBatch, at: Timestamp) -> Result<(), StorageError> {
    if let Err(err) = inner.kv.commit(batch) {
        let reason = format!("checkpoint commit at {at} failed: {err}");
        inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
        *inner.poisoned.lock() = Some(reason.clone());
        return Err(StorageError::Poisoned(reason));
    }
    Ok(())
}

/// `rollback_to(ts)` below the checkpoint (at or above its floor), called
/// with the write lock and `checkpoint_lock` held, before the journal is
/// truncated: commits the checkpoint as of `ts` (each history record gives
/// its key's value at `ts` and keeps only its versions up to `ts`; the
/// floor stays), then makes it the base with nothing in memory and the
/// catalog as of `ts`. A crash after the commit leaves that checkpoint and
/// the whole journal: recovery replays the entries above `ts` again, as if
/// the rollback had not begun.
pub(crate) fn roll_back_history(inner: &Inner, ts: Timestamp) -> Result<(), StorageError> {
    let base = inner.store.base();
    let floor = base.floor.expect("a rollback below the checkpoint needs its history");
    assert!(floor <= ts && ts < base.ts, "rollback to {ts} outside [{floor}, {})", base.ts);
    let catalogs: CatalogVersions =
        inner.history_catalogs.read().iter().filter(|(version_ts, _)| *version_ts <= ts).cloned().collect();
    let catalog = catalog_at(&catalogs, ts).ok_or_else(|| {
        StorageError::Corruption(format!("no catalog at or below {ts} in the history from {floor}"))
    })?;
    let mut batch = KvBatch::default();
    let (start, end) = history_range();
    for pair in base.kv.range(Bound::Included(&start), Bound::Excluded(&end), false)? {
        let (record_key, record) = pair?;
        let mut versions = decode_versions(&record)?;
        versions.retain(|(version_ts, _)| *version_ts <= ts);
        let Some((_, value)) = versions.last().cloned() else {
            return Err(StorageError::Corruption(format!("history record without a version at the floor {floor}")));
        };
        let key = record_key[HISTORY_PREFIX.len()..].to_vec();
        match value {
            Some(value) => batch.put(key, value),
            None => batch.delete(key),
        }
        batch.put(record_key, encode_versions(&versions));
    }
    batch.set_metadata(META_FORMAT_VERSION, CHECKPOINT_FORMAT_VERSION.to_be_bytes().to_vec());
    batch.set_metadata(META_CHECKPOINT_TS, ts.as_u64().to_be_bytes().to_vec());
    batch.set_metadata(META_CATALOG, catalog.to_bytes());
    set_history_metadata(&mut batch, Some(floor), &catalogs);
    commit_or_poison(inner, batch, ts)?;
    let snapshot = inner.kv.snapshot()?;
    let mut history = inner.catalog.write();
    inner.store.reset(BaseView { kv: snapshot, ts, floor: Some(floor) });
    *inner.history_catalogs.write() = catalogs;
    *history = CatalogHistory::new((*catalog).clone());
    Ok(())
}
