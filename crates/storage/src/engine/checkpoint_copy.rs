//! Checkpoint copies: an initial sync that copies the source's checkpoint
//! file byte for byte (issue 8: "streamed from the source's checkpoint
//! snapshot, which is a consistent image at the checkpoint's timestamp")
//! instead of reading and re-inserting every document. The file is the
//! state at its checkpoint's timestamp T, and the journal entry at T is the
//! one the syncing member's oplog starts from, so applying the source's
//! entries after T makes it consistent, with no idempotency repair.
//!
//! The source's side (`begin_checkpoint_copy`, `read_checkpoint_copy`,
//! `end_checkpoint_copy`):
//! 1. Unless another copy's pin lives (it keeps the checkpoint it pinned),
//!    write a checkpoint at the stable timestamp now (as an explicit
//!    checkpoint, it does not stay below the snapshot window: what the
//!    copy does not hold, the syncing member must replay entry by entry).
//!    A checkpoint with history past the commit point is refused (the copy
//!    would need the journal from its floor, not its timestamp): the
//!    syncing member then copies logically.
//! 2. Pin it for the holder (a lease renewed by every read): the
//!    background checkpoints wait while a pin lives, unless memory passes
//!    its bound (`checkpoint.rs`; the journal may pass its size cap
//!    meanwhile, as for an initial sync's oplog hold).
//! 3. The copy's id names the file's generation: every commit, compaction
//!    or replacement moves it before it writes, so a read whose generation
//!    is not the copy's before and after it fails, and the copy starts
//!    over. A pin never blocks the source; it only makes that unlikely.
//!
//! The syncing member's side: the copy goes to a staged file
//! (`STAGED_FILE_NAME`, written and synced by the caller through
//! `write_staged_checkpoint` and `sync_staged_checkpoint`, so it resumes at
//! its durable length), then `install_checkpoint_copy` puts it in place.
//! Its steps, and what a crash between two of them leaves:
//! 1. Check the engine is empty (no journal entry, no collection) with its
//!    write gate closed, under the write lock and `checkpoint_lock`.
//! 2. Write the marker `INSTALL_MARKER_FILE_NAME` and sync it: from here
//!    the next open deletes the checkpoint file and the journal before
//!    recovery (as an interrupted reset's, `reset.rs`), so that a journal
//!    entry never meets the wrong checkpoint; the sync then starts over.
//! 3. Append the entry at T to the journal and sync it.
//! 4. Rename the staged file over the checkpoint file and sync the directory
//!    (`KvEngine::replace_file`).
//! 5. In memory: the new checkpoint is the base, its catalog the catalog,
//!    the stable timestamp and the applied position T.
//! 6. Remove the marker and sync the directory: the member recovers from T.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::RawDocumentBuf;

use super::{Engine, Inner, Result, WriteGate};
use crate::catalog::CatalogHistory;
use crate::io::{IoFile, DIRECT_IO_ALIGN};
use crate::kv::FilePiece;
use crate::mvcc::BaseView;
use crate::oplog_entry::OplogEntry;
use crate::position::Position;
use crate::recovery::read_checkpoint;
use crate::{OpTime, StorageError, Timestamp};

/// How long a pin lives without a read.
pub const CHECKPOINT_COPY_LEASE: Duration = Duration::from_secs(30);
/// Holders at most (a bound on a map a remote command fills).
pub const CHECKPOINT_COPY_HOLDERS_MAX: usize = 64;
/// The most bytes one read returns.
pub const CHECKPOINT_COPY_READ_BYTES_MAX: usize = 15 * 1024 * 1024;
/// The syncing member's copy, under its dbpath.
pub const STAGED_FILE_NAME: &str = "checkpoint.redb.incoming";
/// The marker of an installation in progress, under the dbpath.
pub const INSTALL_MARKER_FILE_NAME: &str = "install-checkpoint.marker";
const INSTALL_MARKER_TEXT: &[u8] =
    b"slipstream: a copied checkpoint is being installed; the next open deletes the data files\n";

/// What a source tells the member that copies its checkpoint.
#[derive(Clone, Debug)]
pub struct CheckpointCopy {
    /// Names the file's state: reads of another state fail.
    pub id: String,
    /// The journal entry at the checkpoint's timestamp.
    pub entry: RawDocumentBuf,
    pub optime: OpTime,
    pub file_bytes: u64,
}

/// Live pins: holder -> lease end.
#[derive(Default)]
pub struct CopyPins {
    pins: BTreeMap<String, Instant>,
}

impl CopyPins {
    fn set(&mut self, holder: &str, now: Instant) -> Result<()> {
        self.pins.retain(|_, until| *until > now);
        if !self.pins.contains_key(holder) && self.pins.len() >= CHECKPOINT_COPY_HOLDERS_MAX {
            return Err(StorageError::IllegalOperation(format!(
                "{} checkpoint copies are in progress already (at most {CHECKPOINT_COPY_HOLDERS_MAX})",
                self.pins.len()
            )));
        }
        self.pins.insert(holder.to_owned(), now + CHECKPOINT_COPY_LEASE);
        Ok(())
    }

    /// Whether any pin lives.
    pub(crate) fn any(&self, now: Instant) -> bool {
        self.pins.values().any(|until| *until > now)
    }
}

impl Inner {
    fn copy_id(&self) -> String {
        format!("{:016x}-{}", self.copy_nonce, self.kv.file_generation())
    }

    fn staged_path(&self) -> PathBuf {
        self.options.dbpath.join(STAGED_FILE_NAME)
    }
}

impl Engine {
    /// The source's steps 1 and 2 (module doc).
    pub fn begin_checkpoint_copy(&self, holder: &str) -> Result<CheckpointCopy> {
        // Another member's copy in progress keeps the checkpoint it pinned.
        if !self.checkpoint_copy_pinned() {
            self.checkpoint_now()?;
        }
        let inner = &self.inner;
        let _checkpoint = inner.checkpoint_lock.lock();
        let base = inner.store.base();
        if let Some(floor) = base.floor {
            return Err(StorageError::IllegalOperation(format!(
                "the checkpoint at {} holds history down to {floor} (the commit point stalled): \
                 it cannot be copied alone",
                base.ts
            )));
        }
        if base.ts == Timestamp::ZERO {
            return Err(StorageError::IllegalOperation("nothing is checkpointed yet".into()));
        }
        let entry = match inner.journal.read(Bound::Included(base.ts), 1, usize::MAX)?.pop() {
            Some((ts, bytes)) if ts == base.ts => bytes,
            _ => {
                return Err(StorageError::IllegalOperation(format!(
                    "the journal no longer holds the checkpoint's entry at {}",
                    base.ts
                )))
            }
        };
        let parsed = OplogEntry::from_bytes(&entry)?;
        let entry = RawDocumentBuf::from_bytes(entry)
            .map_err(|err| StorageError::Corruption(format!("journal entry at {}: {err}", base.ts)))?;
        inner.copy_pins.lock().set(holder, Instant::now())?;
        let copy = CheckpointCopy {
            id: inner.copy_id(),
            entry,
            optime: OpTime::new(parsed.ts, parsed.term),
            file_bytes: inner.kv.file_bytes()?,
        };
        tracing::info!(target: "storage", holder, id = %copy.id, checkpoint = %base.ts, file_bytes = copy.file_bytes,
            "checkpoint copy begins");
        Ok(copy)
    }

    /// Up to `len` bytes of the checkpoint file from `offset`, if it still
    /// holds the state `id` names, as the parts that hold data (the
    /// file's holes are left out); renews the holder's pin.
    pub fn read_checkpoint_copy(&self, holder: &str, id: &str, offset: u64, len: usize) -> Result<FilePiece> {
        let inner = &self.inner;
        let changed = || {
            StorageError::IllegalOperation(format!(
                "the checkpoint file changed since the copy {id} began (now {})",
                inner.copy_id()
            ))
        };
        if inner.copy_id() != id {
            return Err(changed());
        }
        inner.copy_pins.lock().set(holder, Instant::now())?;
        let piece = inner.kv.read_file_at(offset, len.min(CHECKPOINT_COPY_READ_BYTES_MAX))?;
        if inner.copy_id() != id {
            return Err(changed());
        }
        Ok(piece)
    }

    /// Releases the holder's pin.
    pub fn end_checkpoint_copy(&self, holder: &str) {
        if self.inner.copy_pins.lock().pins.remove(holder).is_some() {
            tracing::info!(target: "storage", holder, "checkpoint copy ends");
        }
    }

    /// Whether a live pin holds the background checkpoints back.
    pub fn checkpoint_copy_pinned(&self) -> bool {
        self.inner.copy_pins.lock().any(Instant::now())
    }

    /// The staged copy's length (zero when there is none).
    pub fn staged_checkpoint_bytes(&self) -> Result<u64> {
        let path = self.inner.staged_path();
        if !self.inner.io.exists(&path)? {
            return Ok(0);
        }
        Ok(self.inner.io.open(&path)?.size_bytes()?)
    }

    /// Writes `piece` into the staged copy: at offset 0 a new file, past 0
    /// the file cut to the piece's offset first (what a resumed copy had
    /// written after its last sync is written again). Its holes are left
    /// unwritten (they read as zeros, as on the source) and the file ends
    /// no earlier than the piece, so that its length is what was copied.
    pub fn write_staged_checkpoint<D: AsRef<[u8]>>(&self, piece: &FilePiece<D>) -> Result<()> {
        if !piece.is_well_formed() {
            return Err(StorageError::IllegalOperation(format!(
                "a checkpoint copy's piece at {} ({} bytes) has extents outside it or unlike its data",
                piece.offset, piece.span
            )));
        }
        let io = &self.inner.io;
        let path = self.inner.staged_path();
        let mut staged = self.inner.staged.lock();
        let offset = piece.offset;
        if offset == 0 {
            *staged = None;
            if io.exists(&path)? {
                io.remove_file(&path)?;
            }
            *staged = Some(StagedFile::new(io, &path, io.create(&path)?)?);
        } else if staged.is_none() {
            let file = io.open(&path)?;
            if file.size_bytes()? < offset {
                return Err(StorageError::IllegalOperation(format!(
                    "the staged checkpoint copy is shorter than {offset} bytes"
                )));
            }
            file.set_len(offset)?;
            *staged = Some(StagedFile::new(io, &path, file)?);
        }
        let staged = staged.as_mut().expect("opened above");
        for (at, bytes) in piece.parts() {
            staged.write(bytes, at)?;
        }
        let end = offset + piece.span;
        if staged.file.size_bytes()? < end {
            staged.file.set_len(end)?;
        }
        Ok(())
    }

    /// Makes what was written to the staged copy durable.
    pub fn sync_staged_checkpoint(&self) -> Result<()> {
        if let Some(staged) = &*self.inner.staged.lock() {
            staged.file.sync_all()?;
        }
        self.inner.io.sync_dir(&self.inner.options.dbpath)?;
        Ok(())
    }

    /// Deletes the staged copy, if any.
    pub fn discard_staged_checkpoint(&self) -> Result<()> {
        *self.inner.staged.lock() = None;
        let path = self.inner.staged_path();
        if self.inner.io.exists(&path)? {
            self.inner.io.remove_file(&path)?;
            self.inner.io.sync_dir(&self.inner.options.dbpath)?;
        }
        Ok(())
    }

    /// The syncing member's steps 1 to 6 (module doc): the staged copy,
    /// synced, becomes this engine's checkpoint, and `entry` (the source's
    /// journal entry at its timestamp) its journal's first entry. Returns
    /// the applied position.
    pub fn install_checkpoint_copy(&self, entry: &RawDocumentBuf) -> Result<OpTime> {
        let parsed = OplogEntry::from_bytes(entry.as_bytes())?;
        let inner = &self.inner;
        let state = inner.write.lock();
        if state.gate != WriteGate::Closed {
            return Err(StorageError::IllegalOperation(
                "cannot install a checkpoint copy: the write gate is open".into(),
            ));
        }
        let _checkpoint = inner.checkpoint_lock.lock();
        inner.check_writable()?;
        if inner.journal.last_ts().is_some() || !inner.catalog.read().latest().databases().is_empty() {
            return Err(StorageError::IllegalOperation(
                "a checkpoint copy is installed only into an empty member".into(),
            ));
        }
        *inner.staged.lock() = None;
        let dbpath = inner.options.dbpath.clone();
        let marker = dbpath.join(INSTALL_MARKER_FILE_NAME);
        super::reset::write_marker_at(&*inner.io, &marker, INSTALL_MARKER_TEXT)?;
        inner.journal.append(parsed.ts, entry.as_bytes())?;
        inner.journal.sync_now()?;
        inner.kv.replace_file(&inner.staged_path())?;
        let snapshot = inner.kv.snapshot()?;
        let (ts, catalog) = read_checkpoint(&*snapshot)?;
        if ts != parsed.ts || crate::history::read_floor(&*snapshot)?.is_some() {
            // The journal now disagrees with the checkpoint: the marker
            // makes the next open delete both.
            let reason = format!("the copied checkpoint is at {ts} (with history or not its entry's {})", parsed.ts);
            *inner.poisoned.lock() = Some(reason.clone());
            return Err(StorageError::Poisoned(reason));
        }
        {
            let mut history = inner.catalog.write();
            inner.store.reset(BaseView { kv: snapshot, ts, floor: None });
            inner.history_catalogs.write().clear();
            *history = CatalogHistory::new(catalog);
        }
        *inner.stable_ts.lock() = inner.options.replicated.then_some(ts);
        let optime = OpTime::new(parsed.ts, parsed.term);
        let mut state = state;
        state.clock.advance_to(ts);
        inner.cluster_time.fetch_max(ts.as_u64(), std::sync::atomic::Ordering::AcqRel);
        inner.make_visible(Position::new(optime, parsed.wall.timestamp_millis()));
        inner.retain_journal_for_floor();
        inner.io.remove_file(&marker)?;
        inner.io.sync_dir(&dbpath)?;
        drop(state);
        tracing::info!(target: "storage", checkpoint = %ts, "installed a copied checkpoint");
        Ok(optime)
    }
}

/// The staged copy's handles: its bytes go around the page cache where
/// the file system allows (`IoBackend::open_direct`), through an aligned
/// buffer; what is not aligned (a file's tail) through the ordinary handle.
pub(crate) struct StagedFile {
    file: Arc<dyn IoFile>,
    direct: Option<Arc<dyn IoFile>>,
    /// Holds an aligned stretch of `DIRECT_IO_ALIGN` bytes and more.
    buffer: Vec<u8>,
}

impl StagedFile {
    fn new(io: &Arc<dyn crate::io::IoBackend>, path: &std::path::Path, file: Arc<dyn IoFile>) -> Result<StagedFile> {
        Ok(StagedFile { file, direct: io.open_direct(path)?, buffer: Vec::new() })
    }

    fn write(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        let aligned = bytes.len() - bytes.len() % DIRECT_IO_ALIGN;
        let direct = match &self.direct {
            Some(direct) if offset % DIRECT_IO_ALIGN as u64 == 0 && aligned > 0 => direct,
            _ => {
                self.file.write_all_at(bytes, offset)?;
                return Ok(());
            }
        };
        if self.buffer.len() < aligned + DIRECT_IO_ALIGN {
            self.buffer = vec![0u8; aligned + DIRECT_IO_ALIGN];
        }
        let start = self.buffer.as_ptr().align_offset(DIRECT_IO_ALIGN);
        let stretch = &mut self.buffer[start..start + aligned];
        stretch.copy_from_slice(&bytes[..aligned]);
        direct.write_all_at(stretch, offset)?;
        if aligned < bytes.len() {
            self.file.write_all_at(&bytes[aligned..], offset + aligned as u64)?;
        }
        Ok(())
    }
}
