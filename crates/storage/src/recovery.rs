//! Recovery: open the checkpoint, replay the oplog from its timestamp.
//!
//! Steps (a crash between any two of them repeats them on the next open):
//! 1. A checkpoint file without a journal directory means the journal was
//!    lost: refuse (`JournalLost`) before anything is created, so that the
//!    refusal holds on every start until the loss is accepted.
//! 2. Open the journal (`dbpath/journal/`): it checks every frame, cuts a
//!    torn tail and refuses any other damage. It comes first so that a
//!    crash before step 3 never leaves a checkpoint without a journal.
//!    A journal with entries and no checkpoint file (or an empty one) means
//!    the checkpoint was lost: refuse (`check_checkpoint_present`).
//! 3. Open the key-value store (`dbpath/checkpoint.redb`) and read the
//!    checkpoint timestamp and the catalog committed with it, and its
//!    history floor and catalogs when the checkpoint went past the commit
//!    point (`history.rs`): reads and `rollback_to` reach down to the floor
//!    again, and a replicated engine's stable timestamp starts there.
//! 4. Fsync the data directory: the names `journal/` and `checkpoint.redb`
//!    (created by the first open) are durable before any write is
//!    acknowledged.
//! 5. Check that the journal still reaches the checkpoint: it starts at or
//!    before the checkpoint timestamp, or the history floor when there is one
//!    (the size cap never deletes past the retain point; otherwise
//!    `Corruption`) and ends at or after it (the
//!    checkpoint never covers more than is durable; otherwise writes were
//!    lost: `JournalLost`). When the loss is accepted on purpose, a no-op
//!    entry is appended at the checkpoint timestamp and fsynced, so that
//!    the journal reaches the checkpoint again and later opens need no
//!    flag.
//! 6. Replay every entry above the checkpoint timestamp through `apply`,
//!    in replay mode (idempotent), into the versioned store; the documents
//!    each journal batch will read are read ahead first (`read_ahead.rs`).
//!
//! Recovery time depends on the entries above the checkpoint, never on the
//! size of the data.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bson::doc;

use crate::apply::{Applier, Strictness};
use crate::catalog::{Catalog, CatalogHistory};
use crate::engine::EngineOptions;
use crate::history::{read_catalogs, read_floor, CatalogVersions};
use crate::io::IoBackend;
use crate::journal::{Journal, JournalOptions};
use crate::kv::{KvEngine, KvSnapshot};
use crate::mvcc::{BaseView, VersionedStore};
use crate::oplog_entry::{build_raw, EntryFields, OpKind, OplogEntry};
use crate::position::Position;
use crate::read_ahead::read_ahead;
use crate::redb_engine::RedbEngine;
use crate::timestamp::UNINITIALIZED_TERM;
use crate::{OpTime, StorageError, Timestamp};

/// Name of the checkpoint file under the dbpath.
pub const CHECKPOINT_FILE_NAME: &str = "checkpoint.redb";
/// Name of the journal directory under the dbpath.
pub const JOURNAL_DIR_NAME: &str = "journal";
/// Metadata slots of a checkpoint.
pub const META_FORMAT_VERSION: &str = "format_version";
pub const META_CHECKPOINT_TS: &str = "checkpoint_ts";
pub const META_CATALOG: &str = "catalog";
/// The checkpoint format this code writes and reads.
pub const CHECKPOINT_FORMAT_VERSION: u32 = 1;
/// Journal entries read per batch during replay.
const REPLAY_BATCH_ENTRIES_MAX: usize = 1024;
const REPLAY_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

pub(crate) struct Recovered {
    pub kv: Arc<dyn KvEngine>,
    pub store: VersionedStore,
    pub catalog: CatalogHistory,
    pub journal: Journal,
    /// The newest entry's position and wall date.
    pub last_applied: Position,
    /// The catalogs from the history floor up (empty without history).
    pub history_catalogs: CatalogVersions,
}

/// The checkpoint's timestamp and catalog.
pub(crate) fn read_checkpoint(snapshot: &dyn KvSnapshot) -> Result<(Timestamp, Catalog), StorageError> {
    let Some(version) = snapshot.metadata(META_FORMAT_VERSION)? else {
        // A new database: nothing was ever checkpointed.
        return Ok((Timestamp::ZERO, Catalog::default()));
    };
    let version: [u8; 4] = version.as_slice().try_into().map_err(|_| StorageError::Corruption("checkpoint format_version".into()))?;
    if u32::from_be_bytes(version) != CHECKPOINT_FORMAT_VERSION {
        return Err(StorageError::Corruption(format!(
            "checkpoint format version {} is not {CHECKPOINT_FORMAT_VERSION}",
            u32::from_be_bytes(version)
        )));
    }
    let ts = snapshot
        .metadata(META_CHECKPOINT_TS)?
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.as_slice()).ok())
        .map(|bytes| Timestamp::from_u64(u64::from_be_bytes(bytes)))
        .ok_or_else(|| StorageError::Corruption("checkpoint without a timestamp".into()))?;
    let catalog_bytes = snapshot.metadata(META_CATALOG)?.ok_or_else(|| StorageError::Corruption("checkpoint without a catalog".into()))?;
    Ok((ts, Catalog::from_bytes(&catalog_bytes)?))
}

/// Step 2b: a journal holding entries means the checkpoint file was made
/// before them (step 3 of the first open precedes every write, and a reset
/// or an installation that a crash interrupts is finished before recovery).
/// So a checkpoint file that is gone, or empty, while the journal holds
/// entries was lost, with every document it held: opened as a new file, the
/// member would replay only the journal's newest entries and serve an
/// almost empty data set as if it were current (an outside probe saw such a
/// member elected). Refused, whatever `--accept-journal-loss` says: the
/// data directory must be restored, or emptied so that a member copies its
/// data again.
fn check_checkpoint_present(io: &dyn IoBackend, path: &Path, journal: &Journal) -> Result<(), StorageError> {
    let (Some(first), Some(last)) = (journal.first_ts(), journal.last_ts()) else {
        return Ok(());
    };
    let size = match io.exists(path).map_err(StorageError::Io)? {
        true => Some(io.open(path).and_then(|file| file.size_bytes()).map_err(StorageError::Io)?),
        false => None,
    };
    let what = match size {
        None => "is missing",
        Some(0) => "is empty",
        Some(_) => return Ok(()),
    };
    Err(StorageError::Corruption(format!(
        "the checkpoint file {} {what} while the journal holds entries from {first} to {last}: the data it held \
         is lost. Restore the data directory, or empty it so that this member copies its data again from the set \
         (initial sync)",
        path.display()
    )))
}

/// A journal that lost entries stops the open, unless the loss is accepted
/// on purpose (then it is logged).
fn check_journal_loss(options: &EngineOptions, reason: String) -> Result<(), StorageError> {
    if !options.accept_journal_loss {
        return Err(StorageError::JournalLost(reason));
    }
    tracing::warn!(
        target: "storage",
        reason = %reason,
        "accepting the loss of journal entries: starting from the checkpoint"
    );
    Ok(())
}

/// After an accepted loss: a durable no-op entry at the checkpoint
/// timestamp, so that the journal reaches the checkpoint again (replay
/// starts after it, so it changes nothing).
fn mark_accepted_loss(journal: &Journal, checkpoint_ts: Timestamp) -> Result<(), StorageError> {
    let message = format!("journal entries up to {checkpoint_ts} were lost; the loss was accepted");
    let o = bson::RawDocumentBuf::try_from(&doc! {"msg": message})
        .map_err(|e| StorageError::InvalidDocument(e.to_string()))?;
    let entry = build_raw(&EntryFields::plain(checkpoint_ts, UNINITIALIZED_TERM, OpKind::Noop, "", &o, bson::DateTime::now()));
    journal.append(checkpoint_ts, &entry)?;
    journal.sync_now()?;
    Ok(())
}

pub(crate) fn recover(options: &EngineOptions, io: Arc<dyn IoBackend>, journal_options: JournalOptions) -> Result<Recovered, StorageError> {
    let started = Instant::now();
    let checkpoint_path = options.dbpath.join(CHECKPOINT_FILE_NAME);
    let journal_dir = options.dbpath.join(JOURNAL_DIR_NAME);
    let exists = |path: &Path| io.exists(path).map_err(StorageError::Io);
    if exists(&checkpoint_path)? && !exists(&journal_dir)? {
        check_journal_loss(
            options,
            format!(
                "the journal directory {} is missing while the checkpoint {} exists",
                journal_dir.display(),
                checkpoint_path.display()
            ),
        )?;
    }
    // The journal directory is created before the checkpoint file, so that
    // a crash between the two never looks like a lost journal.
    let journal = Journal::open(&journal_dir, io.clone(), journal_options)?;
    check_checkpoint_present(&*io, &checkpoint_path, &journal)?;
    let (kv, _) = RedbEngine::open_with_cache(&checkpoint_path, &io, options.kv_cache_bytes)?;
    let kv: Arc<dyn KvEngine> = Arc::new(kv);
    io.sync_dir(&options.dbpath).map_err(StorageError::Io)?;
    let snapshot = kv.snapshot()?;
    let (checkpoint_ts, catalog) = read_checkpoint(&*snapshot)?;
    let floor = read_floor(&*snapshot)?;
    let history_catalogs = if floor.is_some() { read_catalogs(&*snapshot)? } else { Vec::new() };
    if floor.is_some() && history_catalogs.first().map(|(ts, _)| Some(*ts)) != Some(floor) {
        return Err(StorageError::Corruption("the history's catalogs do not start at its floor".into()));
    }
    let oldest = floor.unwrap_or(checkpoint_ts);
    if let Some(first) = journal.first_ts() {
        if oldest != Timestamp::ZERO && first > oldest {
            return Err(StorageError::Corruption(format!(
                "the journal starts at {first}, after the checkpoint (or history floor) at {oldest}: \
                 entries in between are missing"
            )));
        }
    }
    if checkpoint_ts != Timestamp::ZERO && journal.last_ts().is_none_or(|last| last < checkpoint_ts) {
        let ends = journal.last_ts().map_or("is empty".to_string(), |last| format!("ends at {last}"));
        check_journal_loss(
            options,
            format!(
                "the journal {ends}, before the checkpoint at {checkpoint_ts}: \
                 the entry at the checkpoint and any after it are gone"
            ),
        )?;
        mark_accepted_loss(&journal, checkpoint_ts)?;
    }
    let store = VersionedStore::new(BaseView { kv: snapshot, ts: checkpoint_ts, floor });
    let mut history = CatalogHistory::new(catalog);
    let mut last_applied = Position::new(OpTime::new(checkpoint_ts, UNINITIALIZED_TERM), 0);
    let mut replayed = 0u64;
    let mut from = Bound::Excluded(checkpoint_ts);
    loop {
        let batch = journal.read(from, REPLAY_BATCH_ENTRIES_MAX, REPLAY_BATCH_BYTES_MAX)?;
        let Some((last_ts, _)) = batch.last() else { break };
        from = Bound::Excluded(*last_ts);
        let mut entries = Vec::with_capacity(batch.len());
        for (ts, bytes) in &batch {
            let entry = OplogEntry::from_bytes(bytes)?;
            if entry.ts != *ts {
                return Err(StorageError::Corruption(format!("journal frame at {ts} holds an entry at {}", entry.ts)));
            }
            entries.push(entry);
        }
        read_ahead(&store, &history.latest(), &entries, options.read_ahead_threads);
        for entry in &entries {
            let latest = history.latest();
            let mut applier = Applier::new(&store, &latest, Strictness::Replay);
            applier.apply_entry(entry)?;
            let Applier { catalog, catalog_changed, changes, .. } = applier;
            store.write(entry.ts, changes);
            if catalog_changed {
                history.push(entry.ts, catalog);
            }
            last_applied = Position::new(OpTime::new(entry.ts, entry.term), entry.wall.timestamp_millis());
            replayed += 1;
        }
    }
    if replayed == 0 {
        if let Some((_, bytes)) = journal.read_newest(1)?.first() {
            let entry = OplogEntry::from_bytes(bytes)?;
            if entry.ts == checkpoint_ts {
                last_applied = Position::new(OpTime::new(entry.ts, entry.term), entry.wall.timestamp_millis());
            }
        }
    }
    tracing::info!(
        target: "storage",
        checkpoint = %checkpoint_ts,
        history_floor = ?floor,
        replayed,
        last_applied = %last_applied.optime.ts,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Recovered { kv, store, catalog: history, journal, last_applied, history_catalogs })
}
