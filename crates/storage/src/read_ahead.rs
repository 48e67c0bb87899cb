//! Read-ahead of the documents a batch of oplog entries will read.
//!
//! Applying an entry is one thread under the write lock, and an update or
//! a delete (an insert too, on replay) first reads the document it
//! changes. When the data is larger than the checkpoint store's page cache
//! that read mostly misses it: one page read from the file after another,
//! each waiting for the previous, for every entry of a restarted member's
//! catch-up or of its journal replay. Before the batch is applied (and
//! before the write lock), several threads read those documents from the
//! newest state at once, so that the pages are in the cache when the
//! applier asks; the file's reads then overlap instead of queueing behind
//! a single reader.
//!
//! It only warms caches: what it reads is thrown away, so the applied
//! result is the same with or without it (an entry later in the batch may
//! change a document read here; the applier reads it again in order). A
//! failed read is the applier's to report, when it reads the key itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use bson::Document;
use slipstream_query::index_key::record_key;

use crate::apply::record_store_key;
use crate::catalog::Catalog;
use crate::mvcc::VersionedStore;
use crate::oplog_entry::{OpKind, OplogEntry};
use crate::Timestamp;

/// Threads of one read-ahead: the reads wait on the file, not on the CPU,
/// so more threads than cores keep more of them in flight.
pub const READ_AHEAD_THREADS_DEFAULT: usize = 8;
/// Most threads a read-ahead may be given.
pub const READ_AHEAD_THREADS_MAX: usize = 64;
/// Below this many documents a batch is applied without read-ahead: the
/// threads' start costs more than a few reads (a secondary keeping up
/// applies batches of a few entries).
pub const READ_AHEAD_KEYS_MIN: usize = 64;

/// Keys read ahead since the process started (the tests' witness that
/// read-ahead ran).
pub static KEYS_READ_AHEAD: AtomicU64 = AtomicU64::new(0);

/// The store keys of the documents the entries' application reads first,
/// sorted and without repeats (neighbours then share their pages): the
/// `_id` of each insert, update and delete of a collection `catalog`
/// holds. Commands and collections the catalog lacks are left to the
/// applier.
pub fn document_keys(entries: &[OplogEntry], catalog: &Catalog) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = entries
        .iter()
        .filter_map(|entry| {
            let holder: &Document = match entry.op {
                OpKind::Insert | OpKind::Delete => &entry.o,
                OpKind::Update => entry.o2.as_ref()?,
                OpKind::Noop | OpKind::Command => return None,
            };
            let id = holder.get("_id")?;
            let collection = catalog.get(&entry.ns)?;
            Some(record_store_key(collection.record_table, &record_key(id)))
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Reads every key of `keys` in the newest state of `store`, from up to
/// `threads` threads, and drops what it read. Returns how many keys were
/// read: none when there are fewer than `READ_AHEAD_KEYS_MIN` or a single
/// thread would do it (the applier reads them itself as fast).
pub fn warm(store: &VersionedStore, keys: &[Vec<u8>], threads: usize) -> usize {
    assert!(
        threads <= READ_AHEAD_THREADS_MAX,
        "{threads} read-ahead threads is over {READ_AHEAD_THREADS_MAX}"
    );
    if keys.len() < READ_AHEAD_KEYS_MIN || threads < 2 {
        return 0;
    }
    let Some(view) = store.view(Timestamp::MAX) else {
        return 0;
    };
    // Contiguous runs of the sorted keys: each thread walks its own part
    // of the tree, and its neighbouring keys reuse the pages it read.
    let run = keys.len().div_ceil(threads);
    thread::scope(|scope| {
        for part in keys.chunks(run) {
            let view = &view;
            scope.spawn(move || {
                for key in part {
                    // Errors are the applier's to meet and report.
                    let _ = store.get(view, key);
                }
            });
        }
    });
    KEYS_READ_AHEAD.fetch_add(keys.len() as u64, Ordering::Relaxed);
    keys.len()
}

/// `document_keys` then `warm`: the read-ahead of one batch.
pub fn read_ahead(store: &VersionedStore, catalog: &Catalog, entries: &[OplogEntry], threads: usize) -> usize {
    if entries.len() < READ_AHEAD_KEYS_MIN || threads < 2 {
        return 0;
    }
    warm(store, &document_keys(entries, catalog), threads)
}
