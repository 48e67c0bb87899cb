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
    /// The file's bytes from `offset`, at most `len` (fewer at its end),
    /// as the stretches that hold data: its holes (never-written space
    /// the file grew by) are left out and read as zeros.
    fn read_file_at(&self, offset: u64, len: usize) -> Result<FilePiece>;
    /// Puts the file at `staged` (another engine's file, copied whole and
    /// synced) in place of this engine's: renamed over it, the directory
    /// synced, new snapshots read it. Snapshots already taken keep the old
    /// file, as after a compaction.
    fn replace_file(&self, staged: &std::path::Path) -> Result<()>;
}

/// A stretch of a file, `span` bytes from `offset`, sent as the parts that
/// hold data: `extents` (`(offset, length)`, ascending, inside the
/// stretch) with their bytes one after another in `data`; every other
/// byte of the stretch is zero. `data` is any byte container, so that a
/// piece can be written from the buffer it arrived in without a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FilePiece<D = Vec<u8>> {
    pub offset: u64,
    pub span: u64,
    pub extents: Vec<(u64, u64)>,
    pub data: D,
}

impl<D: AsRef<[u8]>> FilePiece<D> {
    /// A piece whose bytes are all given.
    pub fn dense(offset: u64, data: D) -> FilePiece<D> {
        let span = data.as_ref().len() as u64;
        let extents = if span > 0 { vec![(offset, span)] } else { Vec::new() };
        FilePiece { offset, span, extents, data }
    }

    /// Whether the extents are ascending, apart, inside the stretch, and
    /// as long as `data` together (what a piece from elsewhere must be
    /// before it is written).
    pub fn is_well_formed(&self) -> bool {
        let Some(end) = self.offset.checked_add(self.span) else {
            return false;
        };
        let mut at = self.offset;
        let mut total = 0u64;
        for &(start, len) in &self.extents {
            let Some(stop) = start.checked_add(len) else {
                return false;
            };
            if start < at || stop > end || len == 0 {
                return false;
            }
            at = stop;
            total += len;
        }
        total == self.data.as_ref().len() as u64
    }

    /// The stretch's bytes, zeros in the holes.
    pub fn to_dense(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; self.span as usize];
        for (start, part) in self.parts() {
            let at = (start - self.offset) as usize;
            bytes[at..at + part.len()].copy_from_slice(part);
        }
        bytes
    }

    /// Each extent with its bytes.
    pub fn parts(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let data = self.data.as_ref();
        let mut from = 0usize;
        self.extents.iter().map(move |&(start, len)| {
            let part = &data[from..from + len as usize];
            from += len as usize;
            (start, part)
        })
    }
}

/// The engine file's size before and after a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCompaction {
    pub bytes_before: u64,
    pub bytes_after: u64,
}

#[cfg(test)]
mod tests {
    use super::FilePiece;

    #[test]
    fn a_piece_is_well_formed_only_with_ascending_extents_inside_it_that_match_its_data() {
        let piece = |extents: Vec<(u64, u64)>, data: usize| FilePiece { offset: 100, span: 50, extents, data: vec![7u8; data] };
        assert!(piece(vec![], 0).is_well_formed());
        assert!(piece(vec![(100, 10), (120, 30)], 40).is_well_formed());
        assert!(!piece(vec![(100, 10), (120, 30)], 39).is_well_formed(), "data shorter than the extents");
        assert!(!piece(vec![(90, 20)], 20).is_well_formed(), "before the piece");
        assert!(!piece(vec![(140, 20)], 20).is_well_formed(), "past the piece");
        assert!(!piece(vec![(100, 20), (110, 5)], 25).is_well_formed(), "overlapping");
        assert!(!piece(vec![(120, 5), (100, 5)], 10).is_well_formed(), "descending");
        assert!(!piece(vec![(100, 0)], 0).is_well_formed(), "an empty extent");
        assert!(!FilePiece { offset: u64::MAX, span: 2, extents: vec![], data: Vec::<u8>::new() }.is_well_formed());
    }

    #[test]
    fn a_dense_piece_puts_zeros_in_the_holes() {
        let piece = FilePiece { offset: 8, span: 6, extents: vec![(9, 2), (13, 1)], data: vec![1u8, 2, 3] };
        assert_eq!(piece.to_dense(), vec![0, 1, 2, 0, 0, 3]);
        assert_eq!(piece.parts().collect::<Vec<_>>(), vec![(9, &[1u8, 2][..]), (13, &[3u8][..])]);
        assert_eq!(FilePiece::dense(4, vec![5, 6]).extents, vec![(4, 2)]);
        assert!(FilePiece::dense(4, Vec::<u8>::new()).extents.is_empty());
    }
}
