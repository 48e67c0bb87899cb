//! The node's memory bound (`--cache-size-mb`) and where the resident set
//! goes, for `serverStatus`'s `slipstream.memory` section.
//!
//! The bound on the resident set is 1.25 x the cache, plus
//! `RESIDENT_FIXED_BYTES`, plus `RESIDENT_PER_CONNECTION_BYTES` per
//! connection, plus twice the bytes cursors' buffered results hold. `MemoryLimits` sizes everything that follows
//! the cache: inside it the checkpoint store's page cache (a quarter) and
//! the versions above the checkpoint (a quarter; flow control holds client
//! writes back past twice that); outside it the journal's recent entries
//! (1/32) and appends not yet written (1/16), between floors and their old
//! fixed sizes, and the budget of large requests in flight (1/8,
//! `admission.rs`). Fixed, each with its own limit: the journal's index
//! (32 bytes per oplog entry, bounded by `--oplogSize`), a secondary's
//! fetched batches (two 16 MB replies), a connection's read buffer (kept up
//! to 1 MB). The fixed part is mostly the allocator's free and partly used
//! pages, which follow the live heap's churn, not the cache.
//! `docs/design-notes.md` ("Memory") gives the measurements behind the
//! constants.

use std::sync::OnceLock;

use bson::{doc, Document};
use slipstream_storage::engine::EngineStats;

use crate::admission::AdmissionStats;

/// The resident set's allowance for the cache, in percent of it: the two
/// quarters inside it, the versions flow control lets past their quarter,
/// and the limits that scale with it outside (journal buffers, request
/// budget).
pub const RESIDENT_CACHE_PERCENT: u64 = 125;
/// The resident set's allowance beyond the cache's share: code and static
/// data (10 MB release, 20 MB debug), thread stacks, the floors of the
/// scaled limits, a secondary's fetched batches (32 MB), and mostly the
/// allocator's free and partly used pages, which follow the churn of the
/// live heap rather than the cache: measured at 128, 256 and 1024 MB under
/// 64 connections of 1 KB and 1 MB inserts, updates, reads and open sorted
/// cursors, the resident set went up to 608 MB over 1.25 x the cache plus
/// twice the cursors' buffered bytes (`docs/design-notes.md`, "Memory").
/// An envelope measured, not a guarantee.
pub const RESIDENT_FIXED_BYTES: u64 = 576 * 1024 * 1024;
/// The resident set's allowance per byte that cursors' buffered results
/// hold (encoded size): the documents in memory and their allocator pages.
/// Nothing bounds these bytes but the number of open cursors
/// (`OPEN_CURSORS_MAX`) times each query's in-memory sort limit.
pub const RESIDENT_PER_CURSOR_BUFFERED_BYTE: u64 = 2;
/// The resident set's allowance per open connection: its read buffer
/// (kept up to 1 MB after a large message) and its command context and
/// session (about 20 KB idle).
pub const RESIDENT_PER_CONNECTION_BYTES: u64 = 1024 * 1024;

/// Smallest journal cache of recent entries (readers of the oplog's tail
/// read older entries from the files).
pub const JOURNAL_RECENT_BYTES_MIN: u64 = 4 * 1024 * 1024;
/// Smallest journal buffer of appends not yet written: above one maximal
/// oplog entry (16 MB), so that a group commit still gathers many writes.
pub const JOURNAL_PENDING_BYTES_MIN: u64 = 16 * 1024 * 1024;
/// Smallest budget of large requests in flight: a 16 MB document's insert
/// (the frame is a little larger) still runs beside small ones.
pub const REQUEST_BUDGET_BYTES_MIN: u64 = 16 * 1024 * 1024;

/// Every memory limit that follows `--cache-size-mb`: what is inside the
/// cache (page cache, versions) and what scales with it outside (the
/// journal's buffers, the requests in flight). At the default 1 GB cache
/// the journal's buffers are their old fixed sizes (32 and 64 MB), so
/// throughput there is unchanged; smaller caches shrink them down to the
/// floors above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    pub cache_bytes: u64,
    /// The checkpoint store's page cache: a quarter.
    pub kv_cache_bytes: u64,
    /// Versions above the checkpoint: a quarter (flow control past twice).
    pub history_bytes_max: u64,
    /// The journal's recent entries: 1/32, within 4..32 MB.
    pub journal_recent_bytes_max: u64,
    /// The journal's appends not yet written: 1/16, within 16..64 MB.
    pub journal_pending_bytes_max: u64,
    /// Bytes of large requests in flight (`admission.rs`): 1/8, at least
    /// 16 MB.
    pub request_bytes_max: u64,
}

impl MemoryLimits {
    pub fn for_cache(cache_bytes: u64) -> MemoryLimits {
        MemoryLimits {
            cache_bytes,
            kv_cache_bytes: cache_bytes / 4,
            history_bytes_max: cache_bytes / 4,
            journal_recent_bytes_max: (cache_bytes / 32)
                .clamp(JOURNAL_RECENT_BYTES_MIN, slipstream_storage::journal::RECENT_CACHE_BYTES_MAX as u64),
            journal_pending_bytes_max: (cache_bytes / 16)
                .clamp(JOURNAL_PENDING_BYTES_MIN, slipstream_storage::journal::PENDING_BYTES_MAX as u64),
            request_bytes_max: (cache_bytes / 8).max(REQUEST_BUDGET_BYTES_MIN),
        }
    }
}

/// What the process's allocator holds; the binary provides it (the server
/// does not choose the allocator).
#[derive(Clone, Copy, Debug)]
pub struct AllocatorReport {
    pub name: &'static str,
    /// Bytes allocated and not freed (the program's live heap).
    pub heap_bytes_in_use: u64,
    /// Transparent huge pages are off for the process (each would be
    /// resident whole for one used block).
    pub huge_pages_disabled: bool,
}

/// Set once by the binary at start; unset in tests that build a server
/// without it.
static ALLOCATOR_REPORT: OnceLock<fn() -> AllocatorReport> = OnceLock::new();

/// Called once by the binary before it serves.
pub fn install_allocator_report(report: fn() -> AllocatorReport) {
    let installed = ALLOCATOR_REPORT.set(report);
    assert!(installed.is_ok(), "the allocator report is installed once");
}

/// The bound on the resident set with `connections` open and cursors
/// buffering `cursor_buffered_bytes`.
pub fn resident_bytes_bound(cache_bytes: u64, connections: u64, cursor_buffered_bytes: u64) -> u64 {
    cache_bytes * RESIDENT_CACHE_PERCENT / 100
        + RESIDENT_FIXED_BYTES
        + RESIDENT_PER_CONNECTION_BYTES * connections
        + RESIDENT_PER_CURSOR_BUFFERED_BYTE * cursor_buffered_bytes
}

/// What the request budget and open cursors hold now, for the section.
#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    pub requests: AdmissionStats,
    /// Documents buffered results keep for later batches (in-memory sorts,
    /// aggregation output), over every open cursor.
    pub cursor_buffered_bytes: u64,
}

/// The process's resident set (`/proc/self/status` VmRSS), in bytes.
pub fn resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kb: u64 = line["VmRSS:".len()..].split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// `serverStatus.slipstream.memory`.
pub fn server_status_section(cache_bytes: u64, connections: u64, stats: &EngineStats, in_flight: &InFlight) -> Document {
    let resident = resident_bytes().unwrap_or(0);
    let limits = MemoryLimits::for_cache(cache_bytes);
    let requests = in_flight.requests;
    let mut section = doc! {
        "cacheSizeBytes": cache_bytes as i64,
        "residentBytes": resident as i64,
        "residentBytesBound": resident_bytes_bound(cache_bytes, connections, in_flight.cursor_buffered_bytes) as i64,
        "residentFixedBytes": RESIDENT_FIXED_BYTES as i64,
        "residentBytesPerConnection": RESIDENT_PER_CONNECTION_BYTES as i64,
        "residentCachePercent": RESIDENT_CACHE_PERCENT as i64,
        "residentBytesPerCursorBufferedByte": RESIDENT_PER_CURSOR_BUFFERED_BYTE as i64,
        "connections": connections as i64,
        "kvCacheBytes": stats.kv_cache_bytes_used as i64,
        "kvCacheBytesMax": stats.kv_cache_bytes_max as i64,
        "historyBytes": stats.history_bytes_in_memory as i64,
        "historyBytesMax": stats.history_bytes_max as i64,
        "journalCacheBytes": stats.journal_cache_bytes as i64,
        "journalIndexBytes": stats.journal_index_bytes as i64,
        "journalCacheBytesMax": limits.journal_recent_bytes_max as i64,
        "journalPendingBytesMax": limits.journal_pending_bytes_max as i64,
        "requestAdmission": {
            "budgetBytes": requests.budget_bytes as i64,
            "chargedBytes": requests.charged_bytes as i64,
            "unchargedFrameBytesMax": crate::admission::UNCHARGED_FRAME_BYTES as i64,
            "waits": requests.waits as i64,
            "waitMicros": requests.wait_micros as i64,
        },
        "cursorBufferedBytes": in_flight.cursor_buffered_bytes as i64,
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
                "transparentHugePages": !report.huge_pages_disabled,
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
    fn limits_follow_the_cache_between_their_floors_and_the_old_fixed_sizes() {
        let mb = 1024 * 1024;
        // The default cache keeps the journal's buffers at their old sizes.
        let default = MemoryLimits::for_cache(1024 * mb);
        assert_eq!(default.journal_recent_bytes_max, 32 * mb);
        assert_eq!(default.journal_pending_bytes_max, 64 * mb);
        assert_eq!(default.request_bytes_max, 128 * mb);
        assert_eq!((default.kv_cache_bytes, default.history_bytes_max), (256 * mb, 256 * mb));
        let small = MemoryLimits::for_cache(256 * mb);
        assert_eq!(small.journal_recent_bytes_max, 8 * mb);
        assert_eq!(small.journal_pending_bytes_max, 16 * mb);
        assert_eq!(small.request_bytes_max, 32 * mb);
        let tiny = MemoryLimits::for_cache(8 * mb);
        assert_eq!(tiny.journal_recent_bytes_max, JOURNAL_RECENT_BYTES_MIN);
        assert_eq!(tiny.journal_pending_bytes_max, JOURNAL_PENDING_BYTES_MIN);
        assert_eq!(tiny.request_bytes_max, REQUEST_BUDGET_BYTES_MIN);
        let huge = MemoryLimits::for_cache(64 * 1024 * mb);
        assert_eq!(huge.journal_recent_bytes_max, slipstream_storage::journal::RECENT_CACHE_BYTES_MAX as u64);
        assert_eq!(huge.journal_pending_bytes_max, slipstream_storage::journal::PENDING_BYTES_MAX as u64);
    }

    #[test]
    fn the_bound_grows_with_the_cache_the_connections_and_the_buffered_cursors() {
        let mb = 1024 * 1024;
        assert_eq!(resident_bytes_bound(256 * mb, 0, 0), 320 * mb + RESIDENT_FIXED_BYTES);
        assert!(resident_bytes_bound(1024 * mb, 0, 0) > resident_bytes_bound(256 * mb, 0, 0));
        assert_eq!(resident_bytes_bound(256 * mb, 0, 10 * mb) - resident_bytes_bound(256 * mb, 0, 0), 20 * mb);
        assert_eq!(
            resident_bytes_bound(256 * mb, 32, 0) - resident_bytes_bound(256 * mb, 0, 0),
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
        let in_flight = InFlight {
            requests: AdmissionStats { budget_bytes: 9, charged_bytes: 10, waits: 11, wait_micros: 12 },
            cursor_buffered_bytes: 13,
        };
        let section = server_status_section(64 << 20, 2, &stats, &in_flight);
        assert_eq!(section.get_i64("cacheSizeBytes").unwrap(), 64 << 20);
        assert_eq!(
            section.get_i64("residentBytesBound").unwrap(),
            resident_bytes_bound(64 << 20, 2, 13) as i64
        );
        assert_eq!(section.get_i64("kvCacheBytes").unwrap(), 3);
        assert_eq!(section.get_i64("kvCacheBytesMax").unwrap(), 4);
        assert_eq!(section.get_i64("historyBytes").unwrap(), 5);
        assert_eq!(section.get_i64("historyBytesMax").unwrap(), 6);
        assert_eq!(section.get_i64("journalCacheBytes").unwrap(), 7);
        assert_eq!(section.get_i64("journalIndexBytes").unwrap(), 8);
        let limits = MemoryLimits::for_cache(64 << 20);
        assert_eq!(section.get_i64("journalCacheBytesMax").unwrap(), limits.journal_recent_bytes_max as i64);
        assert_eq!(section.get_i64("journalPendingBytesMax").unwrap(), limits.journal_pending_bytes_max as i64);
        let requests = section.get_document("requestAdmission").unwrap();
        assert_eq!(requests.get_i64("budgetBytes").unwrap(), 9);
        assert_eq!(requests.get_i64("chargedBytes").unwrap(), 10);
        assert_eq!(requests.get_i64("waits").unwrap(), 11);
        assert_eq!(requests.get_i64("waitMicros").unwrap(), 12);
        assert_eq!(section.get_i64("cursorBufferedBytes").unwrap(), 13);
        // The test process reads its own resident set.
        assert!(section.get_i64("residentBytes").unwrap() > 0);
    }
}
