//! Reset to empty: how a member that has applied entries becomes an empty
//! member again, so that an initial sync can bulk-load it from scratch (a
//! member too stale to catch up from any source resyncs by itself). Every
//! user database, the catalog, the checkpoint's history and the oplog go;
//! the local documents (term and vote, configuration, rollback id, initial
//! sync progress) and the rollback files stay, so the member keeps its
//! identity and the durability of its vote.
//!
//! The engine stays open (the server and replication hold it), so the
//! reset is done in place, under the write lock and `checkpoint_lock`, with
//! the write gate closed. Its steps, and what a crash between two of them
//! leaves:
//!
//! 1. Write the marker `dbpath/RESET_MARKER_FILE_NAME` and fsync it and
//!    the directory. A crash before this leaves the engine as it was. From
//!    here on, the next `Engine::open` finishes the reset before recovery
//!    (`finish_interrupted`): it deletes the checkpoint file and every
//!    journal segment, then the marker, so no half-wiped state is ever
//!    opened.
//! 2. Commit an empty checkpoint at timestamp zero: every table and history
//!    record deleted, an empty catalog, no history floor (one fsynced redb
//!    commit). Alone, this state (an empty checkpoint and the old journal)
//!    would replay the old entries over nothing; the marker keeps it from
//!    ever being opened.
//! 3. Truncate the journal to nothing (durable when it returns).
//! 4. Install the empty state in memory: an empty base with no version
//!    above it, an empty catalog history and no history catalogs, the
//!    stable timestamp at zero, and the applied position at zero (readers
//!    and the oplog tail see the empty state).
//! 5. Remove the marker and fsync the directory. A crash before this makes
//!    the next open delete the (already empty) files again.
//!
//! Readers that hold a view from before keep reading their old checkpoint
//! snapshot, as across a rollback. The oplog clock and the cluster time do
//! not move back (they only grow).

use std::path::Path;
use std::sync::Arc;

use super::{Engine, Inner, Result, WriteGate};
use crate::catalog::{Catalog, CatalogHistory};
use crate::history::{encode_catalogs, history_range, META_HISTORY_CATALOGS, META_HISTORY_FLOOR};
use crate::io::IoBackend;
use crate::kv::KvBatch;
use crate::mvcc::BaseView;
use crate::poison::FailedPart;
use crate::position::Position;
use crate::recovery::{
    CHECKPOINT_FILE_NAME, CHECKPOINT_FORMAT_VERSION, JOURNAL_DIR_NAME, META_CATALOG, META_CHECKPOINT_TS,
    META_FORMAT_VERSION,
};
use crate::timestamp::UNINITIALIZED_TERM;
use crate::{OpTime, StorageError, Timestamp};

/// The marker of a reset in progress, under the dbpath.
pub const RESET_MARKER_FILE_NAME: &str = "reset-to-empty.marker";
/// What the marker holds (for a person who finds it; only its existence counts).
const RESET_MARKER_TEXT: &[u8] = b"slipstream: a reset to empty is in progress; the next open deletes the data files\n";

/// Where a test stops a reset, as a crash there would (`reset_to_empty_stopping_after`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ResetStep {
    Marker = 1,
    EmptyCheckpoint = 2,
    JournalTruncated = 3,
    InMemory = 4,
    MarkerRemoved = 5,
}

impl Engine {
    /// Drops every user database, the catalog and the oplog (steps in the
    /// module doc), keeping the local documents. The write gate must be
    /// closed: no client write may race with the wipe.
    pub fn reset_to_empty(&self) -> Result<()> {
        self.reset_to_empty_stopping_after(ResetStep::MarkerRemoved)
    }

    /// `reset_to_empty` that stops after `last` (crash tests: the caller
    /// then drops the engine without shutting it down).
    pub fn reset_to_empty_stopping_after(&self, last: ResetStep) -> Result<()> {
        let state = self.inner.write.lock();
        if state.gate != WriteGate::Closed {
            return Err(StorageError::IllegalOperation(
                "cannot reset to empty: the write gate is open".into(),
            ));
        }
        let _checkpoint = self.inner.checkpoint_lock.lock();
        let inner = &self.inner;
        inner.check_writable()?;
        let before = inner.applied.load().optime;
        let dbpath = inner.options.dbpath.clone();
        write_marker(&*inner.io, &dbpath)?;
        if last == ResetStep::Marker {
            return Ok(());
        }
        commit_empty_checkpoint(inner)?;
        if last == ResetStep::EmptyCheckpoint {
            return Ok(());
        }
        inner.journal.truncate_after(Timestamp::ZERO)?;
        assert!(
            inner.journal.last_ts().is_none(),
            "the journal kept entries after a reset"
        );
        if last == ResetStep::JournalTruncated {
            return Ok(());
        }
        install_empty(inner)?;
        if last == ResetStep::InMemory {
            return Ok(());
        }
        remove_marker(&*inner.io, &dbpath)?;
        drop(state);
        tracing::warn!(target: "storage", last_applied_before = %before.ts, "storage reset to empty");
        Ok(())
    }
}

/// Step 2.
fn commit_empty_checkpoint(inner: &Inner) -> Result<()> {
    let mut batch = KvBatch::default();
    // Everything from the first possible table id to the end of the history
    // records (which sort after every table).
    batch.delete_range(Vec::new(), history_range().1);
    batch.set_metadata(META_FORMAT_VERSION, CHECKPOINT_FORMAT_VERSION.to_be_bytes().to_vec());
    batch.set_metadata(META_CHECKPOINT_TS, Timestamp::ZERO.as_u64().to_be_bytes().to_vec());
    batch.set_metadata(META_CATALOG, Catalog::default().to_bytes());
    batch.set_metadata(META_HISTORY_FLOOR, Vec::new());
    batch.set_metadata(META_HISTORY_CATALOGS, encode_catalogs(&[]));
    if let Err(err) = inner.kv.commit(batch) {
        let reason = format!("the empty checkpoint of a reset failed: {err}");
        inner.options.poison_policy.on_failure(FailedPart::Checkpoint, &reason);
        *inner.poisoned.lock() = Some(reason.clone());
        return Err(StorageError::Poisoned(reason));
    }
    Ok(())
}

/// Step 4 (under the write lock and `checkpoint_lock`).
fn install_empty(inner: &Inner) -> Result<()> {
    let snapshot = inner.kv.snapshot()?;
    {
        let mut history = inner.catalog.write();
        inner.store.reset(BaseView {
            kv: snapshot,
            ts: Timestamp::ZERO,
            floor: None,
        });
        inner.history_catalogs.write().clear();
        *history = CatalogHistory::new(Catalog::default());
    }
    // The stable timestamp otherwise only grows: a reset is the one place
    // it starts over, with the checkpoint.
    *inner.stable_ts.lock() = inner.options.replicated.then_some(Timestamp::ZERO);
    inner.make_visible(Position::new(OpTime::new(Timestamp::ZERO, UNINITIALIZED_TERM), 0));
    assert_eq!(inner.store.versions_in_memory(), 0, "versions survived a reset");
    assert!(
        inner.catalog.read().latest().databases().is_empty(),
        "collections survived a reset"
    );
    Ok(())
}

/// Step 1.
fn write_marker(io: &dyn IoBackend, dbpath: &Path) -> Result<()> {
    write_marker_at(io, &dbpath.join(RESET_MARKER_FILE_NAME), RESET_MARKER_TEXT)
}

/// A marker file holding `text`, synced with its directory (also the
/// marker of a checkpoint copy's installation, `checkpoint_copy.rs`).
pub(crate) fn write_marker_at(io: &dyn IoBackend, path: &Path, text: &[u8]) -> Result<()> {
    if io.exists(path)? {
        io.remove_file(path)?;
    }
    let file = io.create(path)?;
    file.write_all_at(text, 0)?;
    file.sync_all()?;
    io.sync_dir(path.parent().unwrap_or(Path::new(".")))?;
    Ok(())
}

/// Step 5.
fn remove_marker(io: &dyn IoBackend, dbpath: &Path) -> Result<()> {
    io.remove_file(&dbpath.join(RESET_MARKER_FILE_NAME))?;
    io.sync_dir(dbpath)?;
    Ok(())
}

/// At open, before recovery: a reset that a crash interrupted after its
/// marker is finished by deleting the checkpoint file and every journal
/// segment (what the reset empties), then the marker. A crash in the
/// middle of this leaves the marker, and the next open does it again.
/// An interrupted installation of a checkpoint copy (its own marker,
/// `checkpoint_copy.rs`) is undone the same way: the member is empty
/// again. Returns whether there was one.
pub(crate) fn finish_interrupted(io: &Arc<dyn IoBackend>, dbpath: &Path) -> Result<bool> {
    let reset = io.exists(&dbpath.join(RESET_MARKER_FILE_NAME))?;
    let install = dbpath.join(super::checkpoint_copy::INSTALL_MARKER_FILE_NAME);
    if io.exists(&install)? {
        wipe_checkpoint_and_journal(io, dbpath)?;
        io.remove_file(&install)?;
        io.sync_dir(dbpath)?;
        tracing::warn!(target: "storage",
            "an installation of a copied checkpoint interrupted by a restart was undone: the member is empty");
    }
    if !reset {
        return Ok(false);
    }
    let journal_files = wipe_checkpoint_and_journal(io, dbpath)?;
    remove_marker(&**io, dbpath)?;
    tracing::warn!(target: "storage", journal_files_removed = journal_files,
        "a reset to empty interrupted by a restart finished: the checkpoint and the journal are deleted");
    Ok(true)
}

/// Deletes the checkpoint file and every file of the journal (its
/// segments, their index files, a spare); returns how many journal files.
fn wipe_checkpoint_and_journal(io: &Arc<dyn IoBackend>, dbpath: &Path) -> Result<usize> {
    let checkpoint = dbpath.join(CHECKPOINT_FILE_NAME);
    if io.exists(&checkpoint)? {
        io.remove_file(&checkpoint)?;
    }
    let journal = dbpath.join(JOURNAL_DIR_NAME);
    let mut files = 0;
    if io.exists(&journal)? {
        for name in io.list_dir(&journal)? {
            io.remove_file(&journal.join(name))?;
            files += 1;
        }
        io.sync_dir(&journal)?;
    }
    io.sync_dir(dbpath)?;
    Ok(files)
}
