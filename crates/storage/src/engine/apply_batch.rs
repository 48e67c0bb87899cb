//! Applying a batch of oplog entries fetched from a sync source (a
//! secondary's applier), all under the write lock:
//!
//! 1. Parse every entry and check the batch: within the limits, strictly
//!    increasing timestamps, the first above the last applied entry. A
//!    failure applies nothing (`OplogOutOfOrder`, `InvalidOplogEntry`).
//!    The parse comes before the write lock, and with it the read-ahead
//!    of the documents the entries will read (`read_ahead.rs`).
//! 2. Apply the entries in order against the newest state, idempotently
//!    (`Strictness::Replay`, as recovery does), each one's changes
//!    committed to the versioned store at its own timestamp and its
//!    catalog changes to the catalog history. These versions are above the
//!    visible position, so no reader sees them yet; the next entry's
//!    applier reads the newest state and so sees them.
//! 3. If an entry cannot be applied, drop the versions and catalog
//!    versions step 2 made (back to the position before the batch) and
//!    return the error: nothing of the batch was applied. A member cannot
//!    move past such an entry; its caller stops the node, as MongoDB
//!    fasserts.
//! 4. Append the whole batch to the journal under one lock.
//! 5. Advance the oplog clock and the cluster time to the last entry, then
//!    move the visible position to it: readers at `Latest` and the oplog
//!    tail see the whole batch at once, never a prefix of it.
//!
//! A crash between 4 and 5 loses nothing: recovery replays the journal, so
//! an entry is applied exactly when it is in the journal (no `minValid`).
//! A checkpoint meanwhile covers at most the visible position (the stable
//! timestamp is never above it), so no version of a batch in progress is
//! checkpointed, and pruning removes only versions at or below a
//! checkpoint: the batch's versions stay in memory until a later
//! checkpoint covers them.

use bson::RawDocumentBuf;

use super::{Engine, Result};
use crate::apply::{Applier, Strictness};
use crate::journal::{EntryMeta, JournalAppend};
use crate::oplog_entry::OplogEntry;
use crate::position::Position;
use crate::read_ahead::read_ahead;
use crate::{OpTime, StorageError, Timestamp};

/// Most entries in one batch (MongoDB's `replBatchLimitOperations`).
pub const APPLY_BATCH_ENTRIES_MAX: usize = 5000;
/// Most bytes of entries in one batch (MongoDB's `replBatchLimitBytes`):
/// every version of a batch stays in memory until it is visible.
pub const APPLY_BATCH_BYTES_MAX: usize = 100 * 1024 * 1024;

impl Engine {
    /// Applies a batch of oplog entries written elsewhere (steps above):
    /// each at its own timestamp, idempotently, appended to the journal and
    /// made visible at once at the end. Bypasses the write gate. Returns
    /// the new last applied OpTime (the current one for an empty batch).
    pub fn apply_batch(&self, entries: &[RawDocumentBuf]) -> Result<OpTime> {
        // Parsed before the write lock, so that the documents the entries
        // will read can be read ahead meanwhile (`read_ahead.rs`); its
        // errors still come after `check_writable`'s, as they did.
        let parsed = parse_batch(entries);
        if let Ok(parsed) = &parsed {
            let catalog = self.inner.catalog.read().latest();
            read_ahead(&self.inner.store, &catalog, parsed, self.inner.options.read_ahead_threads);
        }
        let mut state = self.inner.write.lock();
        self.inner.check_writable()?;
        let before = self.inner.applied.load();
        let parsed = parsed?;
        check_order(&parsed, before.optime.ts)?;
        let Some(last) = parsed.last() else {
            return Ok(before.optime);
        };
        let last = Position::new(OpTime::new(last.ts, last.term), last.wall.timestamp_millis());
        if let Err(err) = self.apply_parsed(&parsed) {
            self.discard_above(before.optime.ts);
            return Err(err);
        }
        let appends: Vec<JournalAppend<'_>> = parsed
            .iter()
            .zip(entries)
            .map(|(entry, raw)| JournalAppend {
                ts: entry.ts,
                meta: EntryMeta { term: entry.term, wall_ms: entry.wall.timestamp_millis() },
                entry: raw.as_bytes(),
            })
            .collect();
        if let Err(err) = self.inner.journal.append_batch(&appends) {
            self.discard_above(before.optime.ts);
            return Err(err);
        }
        state.clock.advance_to(last.optime.ts);
        self.inner.cluster_time.fetch_max(last.optime.ts.as_u64(), std::sync::atomic::Ordering::AcqRel);
        self.inner.make_visible(last);
        Ok(last.optime)
    }

    /// Step 2: every entry's changes at its own timestamp, invisible.
    fn apply_parsed(&self, parsed: &[OplogEntry]) -> Result<()> {
        let inner = &self.inner;
        let mut catalog = inner.catalog.read().latest();
        for entry in parsed {
            let mut applier = Applier::new(&inner.store, &catalog, Strictness::Replay);
            applier.apply_entry(entry).map_err(|err| unappliable(entry, err))?;
            let Applier { catalog: changed, catalog_changed, changes, .. } = applier;
            inner.store.write(entry.ts, changes);
            if catalog_changed {
                inner.catalog.write().push(entry.ts, changed.clone());
                catalog = changed;
            }
        }
        Ok(())
    }

    /// Step 3: drops the versions a failed batch committed above `ts`.
    fn discard_above(&self, ts: Timestamp) {
        self.inner.store.rollback_to(ts);
        self.inner.catalog.write().rollback_to(ts);
    }
}

/// Step 1: the parsed entries of a batch within the limits.
fn parse_batch(entries: &[RawDocumentBuf]) -> Result<Vec<OplogEntry>> {
    if entries.len() > APPLY_BATCH_ENTRIES_MAX {
        return Err(StorageError::OplogOutOfOrder(format!(
            "a batch of {} entries is over the limit of {APPLY_BATCH_ENTRIES_MAX}",
            entries.len()
        )));
    }
    let bytes: usize = entries.iter().map(|raw| raw.as_bytes().len()).sum();
    if bytes > APPLY_BATCH_BYTES_MAX {
        return Err(StorageError::OplogOutOfOrder(format!(
            "a batch of {bytes} bytes is over the limit of {APPLY_BATCH_BYTES_MAX}"
        )));
    }
    entries
        .iter()
        .map(|raw| {
            OplogEntry::from_bytes(raw.as_bytes()).map_err(|err| match err {
                StorageError::Corruption(message) => StorageError::InvalidOplogEntry(message),
                other => other,
            })
        })
        .collect()
}

/// Step 1 (under the write lock): the entries' timestamps increase
/// strictly from above `last_applied`.
fn check_order(parsed: &[OplogEntry], last_applied: Timestamp) -> Result<()> {
    let mut previous = last_applied;
    for entry in parsed {
        if entry.ts <= previous {
            return Err(StorageError::OplogOutOfOrder(format!(
                "the entry at {} is not after {previous} (last applied {last_applied})",
                entry.ts
            )));
        }
        previous = entry.ts;
    }
    Ok(())
}

/// An entry's application failed: a fault of the entry (`InvalidOplogEntry`)
/// unless the engine itself failed (I/O, poison), which keeps its variant.
fn unappliable(entry: &OplogEntry, err: StorageError) -> StorageError {
    match err {
        StorageError::Poisoned(_) | StorageError::Io(_) | StorageError::Kv(_) | StorageError::ShuttingDown => err,
        other => {
            StorageError::InvalidOplogEntry(format!("{} {} at {}: {other}", entry.op.as_str(), entry.ns, entry.ts))
        }
    }
}
