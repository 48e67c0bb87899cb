//! The Slipstream storage engine.
//!
//! It owns everything on disk under `--dbpath`: the oplog journal (the
//! write-ahead log: every write is an oplog entry, and only the journal is
//! fsynced on commit), the in-memory versioned store (version chains keyed
//! by commit timestamp, giving reads at a timestamp and `rollback_to`), the
//! checkpoints of the state at the stable timestamp written into an
//! embedded ordered key-value engine, and recovery (open the checkpoint,
//! replay the oplog from its timestamp).
//!
//! The key-value engine (redb) is reached only through the `kv` trait: no
//! crate above `storage` may depend on redb or name its types. This crate
//! must not depend on the network, the server or the consensus crate.
//!
//! Layout (one concern per module):
//! - `timestamp`: `Timestamp`, `OpTime` and the oplog clock that ticks them.
//! - `error`: `StorageError`, the variants callers act on.
//! - `journal`: segment files of CRC-framed oplog entries, group commit,
//!   torn-tail recovery, truncation, tailing (see `docs/storage/journal-format.md`).
//! - `io`: the file I/O backend behind the journal, with a fault-injecting
//!   implementation for tests.
//! - `kv`, `redb_engine`: the ordered key-value trait and its redb engine.
//! - `mvcc`: the versioned ordered map layered over a checkpoint.
//! - `catalog`: collections, their UUIDs, table ids and index specs.
//! - `oplog_entry`: building and parsing oplog entries `{ts, t, op, ns, ui, o, o2, wall}`.
//! - `apply`: applying one oplog entry to the versioned store (used by the
//!   write path, recovery and, later, secondaries).
//! - `checkpoint`, `recovery`: the two halves of durability for data.
//! - `history`: the versions kept on disk when a checkpoint goes past the
//!   commit point (reads and rollbacks below the checkpoint).
//! - `engine`: the facade (`Engine`) the server uses; its submodules hold
//!   the write gate, batch application and the cluster time.
//! - `position`: the applied position (timestamp, term, wall date), read
//!   together without a lock.
//! - `session`: retryable-write bookkeeping (`config.transactions`, retry
//!   images), derived from oplog entries alike on every member.
//! - `lock_file`: `dbpath/mongod.lock`, one process per data directory.
//! - `local_store`: the durable documents of `local` that are not oplog
//!   entries (a member's vote, config, rollback id), under `dbpath/local/`.
//! - `rollback_files`: the documents a rollback undoes, saved under
//!   `dbpath/rollback/` before the undo.
//! - `poison`: what a failed write or fsync (or a panicked durability
//!   thread) does: log the cause and abort the process, by default.
//!
//! On-disk formats: `docs/storage/checkpoint-format.md` (checkpoint and
//! key layout) and `docs/storage/journal-format.md` (the journal).

pub mod error;
pub mod io;
pub mod journal;
pub mod timestamp;

pub use error::StorageError;
pub use timestamp::{bson_timestamp, from_bson_timestamp, OpTime, Timestamp, TimestampBson};
pub mod engine;
pub mod index_spec;
pub mod apply;
pub mod capped;
pub mod catalog;
pub mod collection_totals;
pub mod checkpoint;
pub mod history;
pub mod jitter;
pub mod kv;
pub mod local_store;
pub mod lock_file;
pub mod mvcc;
pub mod window_marks;
pub mod oplog_entry;
pub mod poison;
pub mod position;
pub mod read_ahead;
pub mod recovery;
pub mod redb_engine;
pub mod rollback_files;
pub mod session;

pub use engine::{CollectionInfo, Engine, EngineOptions, IndexBuildReport, IndexEntry, IndexSpec, ReadAt, Reader, WriteGate, Writer};
pub use session::{RetryImage, StatementSession};
pub use slipstream_clock::ClusterTimeDrift;
