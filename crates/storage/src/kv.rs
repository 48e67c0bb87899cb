//! The ordered key-value engine behind checkpoints, as a small trait.
//!
//! Checkpoints need very little from the embedded engine: one atomic,
//! fsynced write batch (puts, deletes, range deletes and named metadata
//! slots) and read snapshots that stay consistent while they are held.
//! Everything the engine-specific code must provide is in this file, so
//! that swapping the engine touches `redb_engine.rs` only; nothing else in
//! the workspace names the engine's types.

use std::ops::Bound;
use std::sync::Arc;

use crate::StorageError;

pub type Result<T> = std::result::Result<T, StorageError>;

/// One key-value pair read from the engine.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// A boxed iterator over pairs in key order (or reverse key order).
pub type KvIter<'a> = Box<dyn Iterator<Item = Result<KvPair>> + Send + 'a>;

/// One change of a write batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Put { key: Vec<u8>, value: Vec<u8> },
    /// A put of a value shared with the versioned store: a checkpoint
    /// writes the store's newest values without copying them, so that it
    /// does not hold a second copy of the history while it commits.
    PutShared { key: Vec<u8>, value: Arc<[u8]> },
    Delete { key: Vec<u8> },
    /// Deletes every key in `[start, end)`.
    DeleteRange { start: Vec<u8>, end: Vec<u8> },
}

/// Changes committed together: either all of them are on disk after
/// `commit` returns, or none (after a crash or a failed commit).
#[derive(Clone, Debug, Default)]
pub struct KvBatch {
    pub ops: Vec<KvOp>,
    /// Named metadata slots written in the same commit (checkpoint
    /// timestamp, catalog).
    pub metadata: Vec<(String, Vec<u8>)>,
}

impl KvBatch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(KvOp::Put { key, value });
    }

    pub fn put_shared(&mut self, key: Vec<u8>, value: Arc<[u8]>) {
        self.ops.push(KvOp::PutShared { key, value });
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(KvOp::Delete { key });
    }

    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) {
        assert!(start <= end, "delete_range with start after end");
        self.ops.push(KvOp::DeleteRange { start, end });
    }

    pub fn set_metadata(&mut self, name: &str, value: Vec<u8>) {
        self.metadata.push((name.to_string(), value));
    }
}

/// A consistent read view of the engine: later commits are not visible
/// through it. Cheap to share between threads behind an `Arc`.
pub trait KvSnapshot: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Pairs with keys inside the bounds, ascending, or descending when
    /// `reverse`. The iterator is lazy: callers stop when they have enough.
    fn range<'a>(&'a self, start: Bound<&[u8]>, end: Bound<&[u8]>, reverse: bool) -> Result<KvIter<'a>>;
    fn metadata(&self, name: &str) -> Result<Option<Vec<u8>>>;
}

/// The engine itself.
pub trait KvEngine: Send + Sync {
    fn snapshot(&self) -> Result<Arc<dyn KvSnapshot>>;
    /// Commits the batch atomically and durably (fsync before returning).
    /// After an error the caller must treat the engine as poisoned.
    fn commit(&self, batch: KvBatch) -> Result<()>;
    /// Rewrites the engine's file without its free space, keeping every
    /// pair; commits wait until it is done.
    fn compact(&self) -> Result<KvCompaction>;
    /// Bytes the engine's page cache holds now (read cache and the write
    /// buffer of a commit in progress), which its configured size bounds.
    fn cache_bytes_used(&self) -> usize;
    /// Which committed state the file holds: moves before any commit,
    /// compaction or replacement starts writing it, so that a reader of
    /// the file's bytes (`read_file_at`) can tell that its copy spans one
    /// state (`engine/checkpoint_copy.rs`).
    fn file_generation(&self) -> u64;
    /// The file's length now.
    fn file_bytes(&self) -> Result<u64>;
    /// The file's bytes from `offset`, at most `len` (fewer at its end).
    fn read_file_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Puts the file at `staged` (another engine's file, copied whole and
    /// synced) in place of this engine's: renamed over it, the directory
    /// synced, new snapshots read it. Snapshots already taken keep the old
    /// file, as after a compaction.
    fn replace_file(&self, staged: &std::path::Path) -> Result<()>;
}

/// The engine file's size before and after a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCompaction {
    pub bytes_before: u64,
    pub bytes_after: u64,
}
