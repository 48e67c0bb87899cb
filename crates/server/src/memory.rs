//! The node's memory bound (`--cache-size-mb`) and where the resident set
//! goes, for `serverStatus`'s `slipstream.memory` section.
//!
//! The bound on the resident set is
//! `cache + RESIDENT_FIXED_BYTES + RESIDENT_PER_CONNECTION_BYTES * connections`.
//! Inside the cache: the checkpoint store's page cache (a quarter) and the
//! versions above the checkpoint (a quarter; flow control holds client
//! writes back past twice that). Outside it, each with its own limit: the
//! journal's recent entries (32 MB) and appends not yet written (64 MB),
//! its index (32 bytes per oplog entry, so bounded by `--oplogSize`), a
//! connection's read buffer (kept up to 1 MB). The fixed part is mostly
//! the allocator's: under a sustained load mimalloc holds free and partly
//! used pages of about the live heap again. `docs/design-notes.md`
//! ("Memory") gives the measurements behind the constants.

use std::sync::OnceLock;

use bson::{doc, Document};
use slipstream_storage::engine::EngineStats;

/// The resident set's allowance beyond the cache: code and static data
/// (10 MB release, 20 MB debug), thread stacks (a few MB), the journal's
/// buffers (up to 96 MB) and index, and the allocator's free and partly
/// used pages: measured at `--cache-size-mb 256` under 32 connections of
/// 1 KB inserts, updates and reads, the resident set went up to 460 MB over
/// the cache on a standalone and 600 MB on a member's primary (up to 640 MB
/// over the live heap). An envelope measured, not a guarantee.
pub const RESIDENT_FIXED_BYTES: u64 = 576 * 1024 * 1024;
/// The resident set's allowance per open connection: its read buffer
/// (kept up to 1 MB after a large message) and its command context and
/// session (about 20 KB idle).
pub const RESIDENT_PER_CONNECTION_BYTES: u64 = 1024 * 1024;

/// What the process's allocator holds; the binary provides it (the server
/// does not choose the allocator).
#[derive(Clone, Copy, Debug)]
pub struct AllocatorReport {
    pub name: &'static str,
    /// Bytes allocated and not freed (the program's live heap).
    pub heap_bytes_in_use: u64,
}

/// Set once by the binary at start; unset in tests that build a server
/// without it.
static ALLOCATOR_REPORT: OnceLock<fn() -> AllocatorReport> = OnceLock::new();

/// Called once by the binary before it serves.
pub fn install_allocator_report(report: fn() -> AllocatorReport) {
    let installed = ALLOCATOR_REPORT.set(report);
    assert!(installed.is_ok(), "the allocator report is installed once");
}

/// The bound on the resident set with `connections` open.
pub fn resident_bytes_bound(cache_bytes: u64, connections: u64) -> u64 {
    cache_bytes + RESIDENT_FIXED_BYTES + RESIDENT_PER_CONNECTION_BYTES * connections
}

/// The process's resident set (`/proc/self/status` VmRSS), in bytes.
pub fn resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kb: u64 = line["VmRSS:".len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// `serverStatus.slipstream.memory`.
pub fn server_status_section(cache_bytes: u64, connections: u64, stats: &EngineStats) -> Document {
    let resident = resident_bytes().unwrap_or(0);
    let mut section = doc! {
        "cacheSizeBytes": cache_bytes as i64,
        "residentBytes": resident as i64,
        "residentBytesBound": resident_bytes_bound(cache_bytes, connections) as i64,
        "residentFixedBytes": RESIDENT_FIXED_BYTES as i64,
        "residentBytesPerConnection": RESIDENT_PER_CONNECTION_BYTES as i64,
        "connections": connections as i64,
        "kvCacheBytes": stats.kv_cache_bytes_used as i64,
        "kvCacheBytesMax": stats.kv_cache_bytes_max as i64,
        "historyBytes": stats.history_bytes_in_memory as i64,
        "historyBytesMax": stats.history_bytes_max as i64,
        "journalCacheBytes": stats.journal_cache_bytes as i64,
        "journalIndexBytes": stats.journal_index_bytes as i64,
    };
    if let Some(report) = ALLOCATOR_REPORT.get().map(|report| report()) {
        // What the live heap holds beyond the two caches: connections,
        // cursors, checkpoint batches, replication buffers, the catalog.
        let cached = stats.kv_cache_bytes_used
            + stats.history_bytes_in_memory
            + stats.journal_cache_bytes
            + stats.journal_index_bytes;
        section.insert(
            "allocator",
            doc! {
                "name": report.name,
                "heapBytesInUse": report.heap_bytes_in_use as i64,
                "heapBytesOutsideCaches": report.heap_bytes_in_use.saturating_sub(cached) as i64,
                // Code, stacks, and what the allocator holds beyond the heap.
                "residentOutsideHeapBytes": resident.saturating_sub(report.heap_bytes_in_use) as i64,
            },
        );
    }
    section
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_grows_with_the_cache_and_the_connections() {
        let mb = 1024 * 1024;
        assert_eq!(resident_bytes_bound(256 * mb, 0), 256 * mb + RESIDENT_FIXED_BYTES);
        assert_eq!(
            resident_bytes_bound(256 * mb, 32) - resident_bytes_bound(256 * mb, 0),
            32 * RESIDENT_PER_CONNECTION_BYTES
        );
    }

    #[test]
    fn the_section_reports_each_component_and_its_bound() {
        let stats = EngineStats {
            kv_cache_bytes_used: 3,
            kv_cache_bytes_max: 4,
            history_bytes_in_memory: 5,
            history_bytes_max: 6,
            journal_cache_bytes: 7,
            journal_index_bytes: 8,
            ..EngineStats::default()
        };
        let section = server_status_section(64 << 20, 2, &stats);
        assert_eq!(section.get_i64("cacheSizeBytes").unwrap(), 64 << 20);
        assert_eq!(
            section.get_i64("residentBytesBound").unwrap(),
            resident_bytes_bound(64 << 20, 2) as i64
        );
        assert_eq!(section.get_i64("kvCacheBytes").unwrap(), 3);
        assert_eq!(section.get_i64("kvCacheBytesMax").unwrap(), 4);
        assert_eq!(section.get_i64("historyBytes").unwrap(), 5);
        assert_eq!(section.get_i64("historyBytesMax").unwrap(), 6);
        assert_eq!(section.get_i64("journalCacheBytes").unwrap(), 7);
        assert_eq!(section.get_i64("journalIndexBytes").unwrap(), 8);
        // The test process reads its own resident set.
        assert!(section.get_i64("residentBytes").unwrap() > 0);
    }
}
