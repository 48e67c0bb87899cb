//! Counters for `serverStatus`: connections, opcounters, network bytes
//! (wire compression included).
//!
//! Every field is an atomic updated with relaxed ordering: the counters are
//! statistics, read without any consistency between them.
//!
//! Who counts what: `insert`, `update`, `delete`, `query` (find) and
//! `getmore` are counted by the CRUD handlers, per document or statement as
//! MongoDB does (`count_insert(n)` for n documents); the dispatcher counts
//! every other command under `command`.

use std::sync::atomic::{AtomicU64, Ordering};

use bson::{doc, Document};

#[derive(Default)]
pub struct Metrics {
    insert: AtomicU64,
    query: AtomicU64,
    update: AtomicU64,
    delete: AtomicU64,
    getmore: AtomicU64,
    command: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    requests: AtomicU64,
    connections_current: AtomicU64,
    connections_total_created: AtomicU64,
    connections_rejected: AtomicU64,
    not_primary_unacknowledged_writes: AtomicU64,
    /// Wire compression, by compressor id (0 noop, 1 snappy, 2 zlib, 3 zstd).
    compression: [CompressionCounters; COMPRESSOR_IDS],
    /// `metrics.ttl`: documents the TTL monitor deleted, and its passes.
    ttl_deleted_documents: AtomicU64,
    ttl_passes: AtomicU64,
    /// `slipstream.compact`: `compact` runs, the bytes they freed, and the
    /// last one's duration.
    compactions: AtomicU64,
    compaction_bytes_freed: AtomicU64,
    compaction_last_ms: AtomicU64,
}

/// How many compressor ids the counters cover (MongoDB's 0 to 3).
const COMPRESSOR_IDS: usize = 4;

/// `network.compression.<name>` of `serverStatus`.
#[derive(Default)]
struct CompressionCounters {
    /// Bytes given to the compressor, and the compressed bytes it made.
    compressor_in: AtomicU64,
    compressor_out: AtomicU64,
    /// Compressed bytes given to the decompressor, and what it restored.
    decompressor_in: AtomicU64,
    decompressor_out: AtomicU64,
}

/// The commands whose handlers count themselves (see the module note).
pub const SELF_COUNTING_COMMANDS: &[&str] = &["insert", "update", "delete", "find", "getMore"];

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> i64 {
    counter.load(Ordering::Relaxed) as i64
}

impl Metrics {
    pub fn count_insert(&self, documents: u64) {
        add(&self.insert, documents);
    }

    pub fn count_query(&self) {
        add(&self.query, 1);
    }

    pub fn count_update(&self, statements: u64) {
        add(&self.update, statements);
    }

    pub fn count_delete(&self, statements: u64) {
        add(&self.delete, statements);
    }

    pub fn count_getmore(&self) {
        add(&self.getmore, 1);
    }

    pub fn count_command(&self) {
        add(&self.command, 1);
    }

    pub fn count_request(&self, bytes_in: u64) {
        add(&self.requests, 1);
        add(&self.bytes_in, bytes_in);
    }

    pub fn count_bytes_out(&self, bytes: u64) {
        add(&self.bytes_out, bytes);
    }

    pub fn connection_opened(&self) {
        add(&self.connections_current, 1);
        add(&self.connections_total_created, 1);
    }

    /// A `w: 0` write this member refused for not being primary (its
    /// connection is closed so that the driver looks for the primary).
    pub fn not_primary_unacknowledged_write(&self) {
        add(&self.not_primary_unacknowledged_writes, 1);
    }

    pub fn not_primary_unacknowledged_writes(&self) -> i64 {
        get(&self.not_primary_unacknowledged_writes)
    }

    /// A connection closed at once because the limit was reached.
    pub fn connection_rejected(&self) {
        add(&self.connections_rejected, 1);
    }

    pub fn connection_closed(&self) {
        self.connections_current.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn connections_current(&self) -> u64 {
        self.connections_current.load(Ordering::Relaxed)
    }

    pub fn opcounters(&self) -> Document {
        doc! {
            "insert": get(&self.insert),
            "query": get(&self.query),
            "update": get(&self.update),
            "delete": get(&self.delete),
            "getmore": get(&self.getmore),
            "command": get(&self.command),
        }
    }

    /// A reply compressed by compressor `id` from `uncompressed` to
    /// `compressed` bytes.
    pub fn count_compressed(&self, id: u8, uncompressed: u64, compressed: u64) {
        if let Some(counters) = self.compression.get(usize::from(id)) {
            add(&counters.compressor_in, uncompressed);
            add(&counters.compressor_out, compressed);
        }
    }

    /// A request decompressed by compressor `id`.
    pub fn count_decompressed(&self, id: u8, compressed: u64, uncompressed: u64) {
        if let Some(counters) = self.compression.get(usize::from(id)) {
            add(&counters.decompressor_in, compressed);
            add(&counters.decompressor_out, uncompressed);
        }
    }

    pub fn network(&self) -> Document {
        let mut compression = Document::new();
        for (name, id) in [("snappy", 1), ("zstd", 3), ("zlib", 2)] {
            let counters = &self.compression[id];
            compression.insert(
                name,
                doc! {
                    "compressor": {"bytesIn": get(&counters.compressor_in), "bytesOut": get(&counters.compressor_out)},
                    "decompressor": {"bytesIn": get(&counters.decompressor_in), "bytesOut": get(&counters.decompressor_out)},
                },
            );
        }
        doc! {
            "bytesIn": get(&self.bytes_in),
            "bytesOut": get(&self.bytes_out),
            "numRequests": get(&self.requests),
            "compression": compression,
        }
    }

    /// One pass of the TTL monitor that deleted `deleted` documents.
    pub fn count_ttl_pass(&self, deleted: u64) {
        add(&self.ttl_passes, 1);
        add(&self.ttl_deleted_documents, deleted);
    }

    /// One `compact` that freed `freed` bytes in `elapsed_ms`.
    pub fn count_compaction(&self, freed: u64, elapsed_ms: u64) {
        add(&self.compactions, 1);
        add(&self.compaction_bytes_freed, freed);
        self.compaction_last_ms.store(elapsed_ms, Ordering::Relaxed);
    }

    /// `slipstream.compact` of `serverStatus`.
    pub fn compactions(&self) -> Document {
        doc! {
            "count": get(&self.compactions),
            "bytesFreed": get(&self.compaction_bytes_freed),
            "lastDurationMs": get(&self.compaction_last_ms),
        }
    }

    /// `metrics.ttl` of `serverStatus`. Each pass is one sub-pass here:
    /// a pass runs until every TTL index is done or at its limit.
    pub fn ttl(&self) -> Document {
        doc! {
            "deletedDocuments": get(&self.ttl_deleted_documents),
            "passes": get(&self.ttl_passes),
            "subPasses": get(&self.ttl_passes),
        }
    }

    /// `connections` of `serverStatus`; `available` is what the connection
    /// limit still admits.
    pub fn connections(&self, max_connections: usize) -> Document {
        let current = get(&self.connections_current);
        doc! {
            "current": current as i32,
            "available": (max_connections as i64 - current).max(0) as i32,
            "totalCreated": get(&self.connections_total_created),
            "rejected": get(&self.connections_rejected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up() {
        let metrics = Metrics::default();
        metrics.count_insert(3);
        metrics.count_command();
        metrics.connection_opened();
        metrics.connection_opened();
        metrics.connection_closed();
        assert_eq!(metrics.opcounters().get_i64("insert").unwrap(), 3);
        assert_eq!(metrics.opcounters().get_i64("command").unwrap(), 1);
        let connections = metrics.connections(10);
        assert_eq!(connections.get_i32("current").unwrap(), 1);
        assert_eq!(connections.get_i32("available").unwrap(), 9);
        assert_eq!(connections.get_i64("totalCreated").unwrap(), 2);
        metrics.connection_rejected();
        assert_eq!(metrics.connections(10).get_i64("rejected").unwrap(), 1);
    }
}
