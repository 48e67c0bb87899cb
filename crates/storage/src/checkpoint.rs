//! Checkpoints: the state at the stable timestamp, written into the
//! key-value engine in one atomic batch.
//!
//! Steps (numbered as the recovery steps are; a crash between any two
//! leaves the previous checkpoint and the whole journal, so recovery
//! works from either):
//! 1. Under `checkpoint_lock` (no rollback meanwhile) pick the stable
//!    timestamp S: the commit point under replication, the journal's
//!    durable timestamp on a standalone, never above what is durable.
//! 2. Copy, in key order, the newest version `<= S` of every key in
//!    memory (a tombstone becomes a delete), skipping tables whose drop is
//!    at or below S; add a range delete for each such table; add the
//!    catalog as of S and S itself as metadata.
//! 3. Commit the batch (one fsync). A failure poisons the engine: under
//!    the default policy the cause is logged and the process aborts
//!    (`poison.rs`), as it does when the checkpoint thread panics.
//! 4. Make the new checkpoint the base of new readers, fold the catalog
//!    history, prune memory versions every base holds.
//! 5. Let the journal delete segments below S (its size cap).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::apply::table_range;
use crate::catalog::checkpoint_catalog;
use crate::engine::Inner;
use crate::kv::KvBatch;
use crate::mvcc::BaseView;
use crate::poison::{panic_message, FailedPart};
use crate::recovery::{CHECKPOINT_FORMAT_VERSION, META_CATALOG, META_CHECKPOINT_TS, META_FORMAT_VERSION};
use crate::{StorageError, Timestamp};

/// The background thread: a checkpoint every `checkpoint_interval_ms`,
/// start to start, until told to stop (the final one is written by
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

fn run_thread(inner: Arc<Inner>) {
    let interval = Duration::from_millis(inner.options.checkpoint_interval_ms.max(1));
    let mut next = Instant::now() + interval;
    loop {
        {
            let mut stop = inner.checkpoint_stop.lock();
            if !*stop && Instant::now() < next {
                inner.checkpoint_wake.wait_until(&mut stop, next);
            }
            if *stop {
                return;
            }
        }
        next = Instant::now() + interval;
        if let Err(err) = checkpoint(&inner) {
            tracing::error!(target: "storage", error = %err, "checkpoint failed");
            if matches!(err, StorageError::Poisoned(_)) {
                return;
            }
        }
    }
}

/// Writes a checkpoint at the stable timestamp if it moved; returns the
/// checkpoint timestamp.
pub(crate) fn checkpoint(inner: &Inner) -> Result<Timestamp, StorageError> {
    let _guard = inner.checkpoint_lock.lock();
    if let Some(reason) = &*inner.poisoned.lock() {
        return Err(StorageError::Poisoned(reason.clone()));
    }
    let current = inner.store.checkpoint_ts();
    let stable = inner.stable_for_checkpoint();
    if stable <= current {
        // Readers that held older bases may have gone: prune what they kept.
        inner.store.prune();
        return Ok(current);
    }
    let started = Instant::now();
    let (catalog_bytes, dropped_tables) = {
        let history = inner.catalog.read();
        let at_stable = history.at(stable);
        let dropped: BTreeSet<u32> =
            at_stable.dropped_tables.iter().filter(|(_, ts)| **ts <= stable).map(|(table, _)| *table).collect();
        (checkpoint_catalog(&history, stable).to_bytes(), dropped)
    };
    let mut batch = KvBatch::default();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (changes, next) = inner.store.checkpoint_batch(stable, current, after.as_deref());
        for (key, value) in changes {
            let table = u32::from_be_bytes(key[..4].try_into().expect("store keys start with a table id"));
            if dropped_tables.contains(&table) {
                continue;
            }
            match value {
                Some(value) => batch.put(key, value.to_vec()),
                None => batch.delete(key),
            }
        }
        match next {
            Some(key) => after = Some(key),
            None => break,
        }
    }
    for table in &dropped_tables {
        let (start, end) = table_range(*table);
        batch.delete_range(start, end);
    }
    let keys_written = batch.ops.len();
    batch.set_metadata(META_FORMAT_VERSION, CHECKPOINT_FORMAT_VERSION.to_be_bytes().to_vec());
    batch.set_metadata(META_CHECKPOINT_TS, stable.as_u64().to_be_bytes().to_vec());
    batch.set_metadata(META_CATALOG, catalog_bytes);
    if let Err(err) = inner.kv.commit(batch) {
        let reason = format!("checkpoint commit at {stable} failed: {err}");
        inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
        *inner.poisoned.lock() = Some(reason.clone());
        return Err(StorageError::Poisoned(reason));
    }
    let snapshot = inner.kv.snapshot()?;
    inner.store.install_base(BaseView { kv: snapshot, ts: stable });
    inner.catalog.write().fold_to(stable);
    let pruned = inner.store.prune();
    // An initial sync reading from this member may still need older
    // entries (`engine/oplog_hold.rs`).
    let hold = inner.oplog_holds.lock().floor(std::time::Instant::now());
    inner.journal.set_retain_from(crate::engine::retain_floor(stable, hold));
    let elapsed_ms = started.elapsed().as_millis() as u64;
    inner.checkpoints.fetch_add(1, Ordering::Relaxed);
    inner.last_checkpoint_ms.store(elapsed_ms, Ordering::Relaxed);
    tracing::debug!(target: "storage", at = %stable, keys_written, pruned, elapsed_ms, "checkpoint");
    Ok(stable)
}
