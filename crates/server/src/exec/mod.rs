//! Query execution: running plans over a storage `Reader`, batching results
//! into replies, in-memory sorts under a named memory limit, reads of
//! `local.oplog.rs`, and the state a cursor keeps between batches.
//!
//! Commands (`commands/find.rs`, `crud.rs`, `aggregate.rs`, ...) parse
//! their arguments and call in here; nothing in this module parses command
//! documents except the small shared argument helpers in `args`.
//!
//! - `limits`: every named maximum (batch sizes, sort memory, timeouts).
//! - `size`: encoded BSON sizes without encoding.
//! - `batch`: cutting reply batches by count, limit and bytes.
//! - `scan`: resumable collection and index scans over a `Reader`.
//! - `sort`: the in-memory sort with its memory budget.
//! - `query`: streaming and sorted query execution, buffered results.
//! - `plan`: choosing the scan (collection or index) for a query.
//! - `oplog`: `local.oplog.rs` reads, `ts` bounds, tailing.
//! - `capped`: capped collections' options and tailable cursors.
//! - `cursor_body`: a cursor's state and how its next batch is made.
//! - `read_concern`: which timestamp a read reads at.
//! - `source`: pipeline input and `$lookup` reads over storage.
//! - `args`: argument and namespace helpers shared by the commands.
//! - `views`: resolving views to their backing collection and pipeline.
//! - `stored_document`: the depth, `_id` and size rules of every write.

pub mod args;
pub mod await_data;
pub mod batch;
pub mod capped;
pub mod collation;
pub mod cursor_body;
pub mod limits;
pub mod oplog;
pub mod plan;
pub mod query;
pub mod read_concern;
pub mod scan;
pub mod size;
pub mod sort;
pub mod source;
pub mod stored_document;
pub mod validation;
pub mod views;

pub use cursor_body::CursorBody;

/// Runs `work` without occupying an async worker: statements may scan a
/// collection or wait for the write lock, and the node has only a few
/// workers. On the multi-threaded runtime `block_in_place` hands this
/// worker's other tasks to another worker (cheaper than a trip to the
/// blocking pool for the common short write); elsewhere (tests on a
/// current-thread runtime) the work simply runs here.
pub fn off_async_workers<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod engine_tests;
