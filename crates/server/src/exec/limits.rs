//! Every named maximum of query execution and cursors, in one place so that
//! a reader sees the whole budget of a query at a glance. Units are last in
//! each name.

/// Documents in a `find` first batch when the client gives no `batchSize`
/// (MongoDB's default of 101).
pub const FIND_DEFAULT_FIRST_BATCH_DOCUMENTS: usize = 101;

/// Bytes of documents in one reply batch (MongoDB's 16 MiB cap on a
/// reply's documents; the reply's own fields fit in the slack the wire
/// layer allows above `maxBsonObjectSize`).
pub const REPLY_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;

/// The largest document a client may store (`maxBsonObjectSize`).
pub const DOCUMENT_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Memory an in-memory sort (or any result buffered for a cursor) may use
/// without `allowDiskUse` (MongoDB's `internalQueryMaxBlockingSortMemoryUsageBytes`).
pub const BLOCKING_SORT_MEMORY_BYTES_MAX: usize = 100 * 1024 * 1024;

/// Memory an in-memory sort may use with `allowDiskUse: true`. Slipstream
/// has no external sort yet, so `allowDiskUse` raises the budget instead of
/// spilling, up to this bound.
pub const BLOCKING_SORT_ALLOW_DISK_USE_MEMORY_BYTES_MAX: usize = 512 * 1024 * 1024;

/// Records fetched from storage per scan call while executing a plan: one
/// storage round trip serves this many candidates.
pub const SCAN_CHUNK_RECORDS: usize = 256;

/// Oplog entries read per storage call for `local.oplog.rs` queries.
pub const OPLOG_READ_CHUNK_ENTRIES: usize = 1000;

/// Idle time after which a cursor is closed (MongoDB's `cursorTimeoutMillis`).
pub const CURSOR_TIMEOUT_MS: u64 = 10 * 60 * 1000;

/// How long a tailable awaitData `getMore` waits for new entries when the
/// client gives no `maxTimeMS` (MongoDB's default of one second).
pub const AWAIT_DATA_DEFAULT_WAIT_MS: u64 = 1000;

/// Open cursors a node keeps at most; beyond it `find` answers an error
/// rather than growing without bound.
pub const OPEN_CURSORS_MAX: usize = 100_000;

/// Records a multikey index scan remembers to skip duplicates. A cursor
/// that would remember more fails rather than grow without bound.
pub const MULTIKEY_SEEN_RECORDS_MAX: usize = 10_000_000;

/// Writes in one insert/update/delete command (`maxWriteBatchSize`).
pub const WRITE_BATCH_STATEMENTS_MAX: usize = 100_000;
