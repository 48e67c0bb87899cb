//! Errors of the storage layer, with variants the caller acts on. The
//! server maps them to MongoDB error codes in one table.

use std::fmt;
use std::io;

#[derive(Debug)]
pub enum StorageError {
    /// A unique index already holds this key (MongoDB 11000).
    DuplicateKey {
        namespace: String,
        index_name: String,
        key_pattern: bson::Document,
        key_value: bson::Document,
    },
    /// The collection or database does not exist (26).
    NamespaceNotFound(String),
    /// The collection already exists (48).
    NamespaceExists(String),
    /// No index with that name or key pattern (27).
    IndexNotFound(String),
    /// An index with the same name but other options exists (85/86).
    IndexConflict { code: i32, message: String },
    /// A read asked for a timestamp older than the store still holds (239).
    SnapshotTooOld(String),
    /// The document (or the oplog entry it makes) breaks a rule other than
    /// its size: no `_id`, an `_id` of a refused type, an update of `_id`
    /// (BadValue, 2).
    InvalidDocument(String),
    /// The document, or the oplog entry it makes, is over the size limit
    /// (BSONObjectTooLarge, 10334).
    DocumentTooLarge(String),
    /// A namespace that is not `db.collection` (InvalidNamespace, 73).
    InvalidNamespace(String),
    /// A write the node refuses in its mode, e.g. a client write to the
    /// `local` database of a replica set member (IllegalOperation, 20).
    IllegalOperation(String),
    /// The write gate is closed: this node does not take writes now
    /// (NotWritablePrimary, 10107).
    NotWritablePrimary,
    /// A retryable write whose transaction number is below the session's
    /// newest one (TransactionTooOld, 225).
    TransactionTooOld(String),
    /// An oplog batch to apply is not in strictly increasing timestamp
    /// order after the last applied entry, or is over the batch limits
    /// (OplogOutOfOrder, 152). Nothing of the batch was applied.
    OplogOutOfOrder(String),
    /// An oplog entry to apply is malformed or cannot be applied (a fetched
    /// entry, not the journal's: the journal's own damage is `Corruption`).
    /// Nothing of the batch was applied; a member must stop (MongoDB
    /// fasserts), since it cannot move past the entry.
    InvalidOplogEntry(String),
    /// Another process holds the data directory's lock file.
    DataDirectoryLocked(String),
    /// The journal holds corrupt data that is not a torn tail: the node
    /// must not start.
    Corruption(String),
    /// The journal no longer reaches the checkpoint (it ends before the
    /// checkpoint's timestamp, or its directory is gone): acknowledged
    /// writes were lost. The node must not start unless the loss is
    /// accepted on purpose (`EngineOptions::accept_journal_loss`).
    JournalLost(String),
    /// A write or fsync failed earlier; the engine refuses further work
    /// until the process restarts (never retry an fsync).
    Poisoned(String),
    /// The engine is shutting down (91).
    ShuttingDown,
    /// Query-layer error surfaced while maintaining indexes.
    Query(slipstream_query::QueryError),
    /// Any other I/O failure.
    Io(io::Error),
    /// The embedded key-value engine failed.
    Kv(String),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::DuplicateKey { namespace, index_name, key_value, .. } => write!(
                f,
                "E11000 duplicate key error collection: {namespace} index: {index_name} dup key: {key_value}"
            ),
            StorageError::NamespaceNotFound(ns) => write!(f, "ns not found: {ns}"),
            StorageError::NamespaceExists(ns) => write!(f, "Collection {ns} already exists."),
            StorageError::IndexNotFound(msg) => write!(f, "index not found: {msg}"),
            StorageError::IndexConflict { message, .. } => write!(f, "{message}"),
            StorageError::SnapshotTooOld(msg) => write!(f, "snapshot too old: {msg}"),
            StorageError::InvalidDocument(msg) => write!(f, "{msg}"),
            StorageError::DocumentTooLarge(msg) => write!(f, "{msg}"),
            StorageError::InvalidNamespace(msg) => write!(f, "{msg}"),
            StorageError::IllegalOperation(msg) => write!(f, "{msg}"),
            StorageError::NotWritablePrimary => write!(f, "not primary"),
            StorageError::TransactionTooOld(msg) => write!(f, "{msg}"),
            StorageError::OplogOutOfOrder(msg) => write!(f, "oplog batch out of order: {msg}"),
            StorageError::InvalidOplogEntry(msg) => write!(f, "oplog entry cannot be applied: {msg}"),
            StorageError::DataDirectoryLocked(msg) => write!(f, "{msg}"),
            StorageError::Corruption(msg) => write!(f, "journal corruption: {msg}"),
            StorageError::JournalLost(msg) => write!(f, "journal entries lost: {msg}"),
            StorageError::Poisoned(msg) => write!(f, "storage engine poisoned by an earlier I/O failure: {msg}"),
            StorageError::ShuttingDown => write!(f, "the storage engine is shutting down"),
            StorageError::Query(err) => write!(f, "{err}"),
            StorageError::Io(err) => write!(f, "I/O error: {err}"),
            StorageError::Kv(msg) => write!(f, "key-value engine error: {msg}"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<io::Error> for StorageError {
    fn from(err: io::Error) -> Self {
        StorageError::Io(err)
    }
}

impl From<slipstream_query::QueryError> for StorageError {
    fn from(err: slipstream_query::QueryError) -> Self {
        StorageError::Query(err)
    }
}
