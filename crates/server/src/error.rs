//! `CommandError`, the error every command returns, and the one table that
//! maps lower layers' errors to MongoDB error codes and code names.

use std::borrow::Cow;

use bson::Document;
use slipstream_query::QueryError;
use slipstream_repl::ReplError;
use slipstream_storage::StorageError;

pub use crate::error_codes::code_name;

/// An error reply: `{ok: 0, errmsg, code, codeName, ...extra}`.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandError {
    pub code: i32,
    pub message: String,
    /// Extra fields for the reply (e.g. `keyPattern`, `keyValue`).
    pub extra: Document,
}

impl CommandError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        CommandError { code, message: message.into(), extra: Document::new() }
    }

    /// The MongoDB code name of this error's code.
    pub fn code_name(&self) -> Cow<'static, str> {
        code_name(self.code)
    }

    /// Adds a field to the error reply.
    pub fn with_extra(mut self, key: &str, value: impl Into<bson::Bson>) -> Self {
        self.extra.insert(key, value.into());
        self
    }

    /// BadValue (2).
    pub fn bad_value(message: impl Into<String>) -> Self {
        CommandError::new(2, message)
    }

    /// TypeMismatch (14).
    pub fn type_mismatch(message: impl Into<String>) -> Self {
        CommandError::new(14, message)
    }

    /// InternalError (1).
    pub fn internal(message: impl Into<String>) -> Self {
        CommandError::new(1, message)
    }

    /// The error fields of a reply: `{ok: 0, errmsg, code, codeName, ...extra}`.
    pub fn to_reply(&self) -> Document {
        let mut reply = bson::doc! {
            "ok": 0.0,
            "errmsg": self.message.clone(),
            "code": self.code,
            "codeName": self.code_name().into_owned(),
        };
        for (key, value) in &self.extra {
            reply.insert(key.clone(), value.clone());
        }
        reply
    }
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.message, self.code, self.code_name())
    }
}

impl std::error::Error for CommandError {}

/// THE table from storage errors to MongoDB codes: every storage failure a
/// client sees passes through here.
impl From<StorageError> for CommandError {
    fn from(err: StorageError) -> Self {
        let message = err.to_string();
        match err {
            StorageError::DuplicateKey { key_pattern, key_value, .. } => CommandError::new(11000, message)
                .with_extra("keyPattern", key_pattern)
                .with_extra("keyValue", key_value),
            StorageError::NamespaceNotFound(_) => CommandError::new(26, message),
            StorageError::NamespaceExists(_) => CommandError::new(48, message),
            StorageError::IndexNotFound(_) => CommandError::new(27, message),
            StorageError::IndexConflict { code, .. } => CommandError::new(code, message),
            StorageError::SnapshotTooOld(_) => CommandError::new(239, message),
            StorageError::InvalidDocument(_) => CommandError::new(2, message),
            StorageError::DocumentTooLarge(_) => CommandError::new(10334, message),
            StorageError::InvalidNamespace(_) => CommandError::new(73, message),
            StorageError::IllegalOperation(_) => CommandError::new(20, message),
            // A write command passes the topology's check only on a writable
            // primary, so a closed write gate met later means a stepdown
            // came while it ran: MongoDB's InterruptedDueToReplStateChange
            // (found by the outside probe: an insert of thousands answered
            // 10107 halfway through).
            StorageError::NotWritablePrimary => CommandError::new(
                11602,
                "operation was interrupted because the member stopped being primary while it ran",
            ),
            StorageError::TransactionTooOld(_) => CommandError::new(225, message),
            StorageError::OplogOutOfOrder(_) => CommandError::new(152, message),
            StorageError::InvalidOplogEntry(_) => CommandError::new(1, message),
            StorageError::ShuttingDown => CommandError::new(91, message),
            StorageError::Query(query) => CommandError::from(query),
            StorageError::DataDirectoryLocked(_)
            | StorageError::Corruption(_)
            | StorageError::JournalLost(_)
            | StorageError::Poisoned(_)
            | StorageError::Io(_)
            | StorageError::Kv(_) => CommandError::new(1, message),
        }
    }
}

/// Query errors already carry their MongoDB code.
impl From<QueryError> for CommandError {
    fn from(err: QueryError) -> Self {
        CommandError::new(err.code, err.message)
    }
}

/// Wire errors that still let the node answer (the frame was delimited).
impl From<slipstream_wire::WireError> for CommandError {
    fn from(err: slipstream_wire::WireError) -> Self {
        CommandError::new(err.code(), err.to_string())
    }
}

/// THE table from replication errors to MongoDB codes: every `ReplError`
/// a client sees (from the topology: access, concerns, replSet commands)
/// passes through here. Labels are added per command, not per error: see
/// `retryable_write_labels`.
impl From<ReplError> for CommandError {
    fn from(err: ReplError) -> Self {
        let message = err.to_string();
        let code = match err {
            ReplError::Storage(storage) => return CommandError::from(*storage),
            ReplError::BadArgument { code, .. } => code,
            ReplError::NotWritablePrimary => 10107,
            ReplError::NotPrimaryNoSecondaryOk => 13435,
            ReplError::NotPrimaryOrSecondary => 13436,
            ReplError::PrimarySteppedDown => 189,
            ReplError::InterruptedDueToReplStateChange => 11602,
            ReplError::WriteConcernTimeout { .. } => 64,
            ReplError::UnsatisfiableWriteConcern(_) => 100,
            ReplError::UnknownReplWriteConcern(_) => 79,
            ReplError::NoReplicationEnabled => 76,
            ReplError::NotAReplicaSet(_) => 123,
            ReplError::IllegalOperation(_) => 20,
            ReplError::NotYetInitialized => 94,
            ReplError::AlreadyInitialized => 23,
            ReplError::InvalidReplicaSetConfig(_) => 93,
            ReplError::NewReplicaSetConfigurationIncompatible(_) => 103,
            ReplError::NodeNotFound(_) => 74,
            ReplError::ExceededTimeLimit(_) => 262,
            ReplError::ClusterTimeDrift(_) => 205,
            ReplError::MaxTimeMsExpired => 50,
            ReplError::ConflictingOperationInProgress(_) => 117,
            ReplError::ShutdownInProgress => 91,
            ReplError::ReadConcernMajorityNotAvailableYet => 134,
            ReplError::SnapshotTooOld(_) => 239,
            ReplError::CommandNotSupported(_) => 115,
        };
        CommandError::new(code, message)
    }
}

/// The codes after which a driver retries a retryable write (the
/// retryable-writes specification's list, which MongoDB's server applies
/// through its `RetriableError` category).
pub const RETRYABLE_WRITE_CODES: &[i32] = &[11600, 11602, 10107, 13435, 13436, 189, 91, 7, 6, 89, 9001, 262];

/// MongoDB's `NotPrimaryError` category: NotWritablePrimary,
/// NotPrimaryNoSecondaryOk, NotPrimaryOrSecondary,
/// InterruptedDueToReplStateChange and PrimarySteppedDown.
const NOT_PRIMARY_ERROR_CODES: &[i32] = &[10107, 13435, 13436, 11602, 189];

/// Whether `code` is in MongoDB's `NotPrimaryError` category.
pub fn is_not_primary_error(code: i32) -> bool {
    NOT_PRIMARY_ERROR_CODES.contains(&code)
}

/// `errorLabels` of a reply to a retryable write (a command carrying
/// `txnNumber` without `autocommit`): `RetryableWriteError` when the
/// command's error or its write concern error has a retryable code, on the
/// reply's top level, as MongoDB's `ErrorLabelBuilder` puts it.
pub fn retryable_write_labels(error_code: Option<i32>, write_concern_code: Option<i32>) -> Option<Vec<&'static str>> {
    let retryable = |code: Option<i32>| code.is_some_and(|code| RETRYABLE_WRITE_CODES.contains(&code));
    (retryable(error_code) || retryable(write_concern_code)).then(|| vec!["RetryableWriteError"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_map_to_mongodb_codes() {
        let duplicate = CommandError::from(StorageError::DuplicateKey {
            namespace: "db.c".into(),
            index_name: "a_1".into(),
            key_pattern: bson::doc! {"a": 1},
            key_value: bson::doc! {"a": 5},
        });
        assert_eq!(duplicate.code, 11000);
        assert_eq!(duplicate.code_name(), "DuplicateKey");
        assert_eq!(duplicate.extra.get_document("keyPattern").unwrap(), &bson::doc! {"a": 1});
        assert_eq!(duplicate.extra.get_document("keyValue").unwrap(), &bson::doc! {"a": 5});
        let reply = duplicate.to_reply();
        assert_eq!(reply.get_f64("ok").ok(), Some(0.0));
        assert!(reply.get_str("errmsg").unwrap().starts_with("E11000"));
        assert!(reply.contains_key("keyValue"));

        let cases = [
            (StorageError::NamespaceNotFound("db.c".into()), 26),
            (StorageError::NamespaceExists("db.c".into()), 48),
            (StorageError::SnapshotTooOld("x".into()), 239),
            (StorageError::ShuttingDown, 91),
            (StorageError::Poisoned("fsync".into()), 1),
            (StorageError::Kv("x".into()), 1),
            (StorageError::Corruption("x".into()), 1),
            (StorageError::DocumentTooLarge("document too large".into()), 10334),
            (StorageError::InvalidDocument("_id cannot be an array".into()), 2),
            (StorageError::InvalidNamespace("Invalid target namespace: x".into()), 73),
            (StorageError::IllegalOperation("local".into()), 20),
            (StorageError::NotWritablePrimary, 11602),
            (StorageError::TransactionTooOld("old".into()), 225),
            (StorageError::OplogOutOfOrder("x".into()), 152),
            (StorageError::Query(QueryError::new(52, "bad")), 52),
        ];
        for (error, code) in cases {
            assert_eq!(CommandError::from(error).code, code);
        }
    }

    #[test]
    fn replication_errors_map_to_mongodb_codes() {
        let cases = [
            (ReplError::NotWritablePrimary, 10107, "NotWritablePrimary"),
            (ReplError::NotPrimaryNoSecondaryOk, 13435, "NotPrimaryNoSecondaryOk"),
            (ReplError::NotPrimaryOrSecondary, 13436, "NotPrimaryOrSecondary"),
            (ReplError::PrimarySteppedDown, 189, "PrimarySteppedDown"),
            (ReplError::WriteConcernTimeout { wtimeout_ms: 5 }, 64, "WriteConcernFailed"),
            (ReplError::NoReplicationEnabled, 76, "NoReplicationEnabled"),
            (ReplError::NotAReplicaSet("x".into()), 123, "NotAReplicaSet"),
            (ReplError::IllegalOperation("x".into()), 20, "IllegalOperation"),
            (ReplError::ClusterTimeDrift("x".into()), 205, "ClusterTimeFailsRateLimiter"),
            (ReplError::invalid_options("x"), 72, "InvalidOptions"),
            (ReplError::Storage(Box::new(StorageError::ShuttingDown)), 91, "ShutdownInProgress"),
        ];
        for (error, code, name) in cases {
            let mapped = CommandError::from(error);
            assert_eq!((mapped.code, mapped.code_name().as_ref()), (code, name));
        }
    }

    #[test]
    fn retryable_write_label_follows_either_code() {
        assert_eq!(retryable_write_labels(Some(10107), None), Some(vec!["RetryableWriteError"]));
        assert_eq!(retryable_write_labels(None, Some(91)), Some(vec!["RetryableWriteError"]));
        assert_eq!(retryable_write_labels(Some(11000), Some(64)), None);
        assert_eq!(retryable_write_labels(None, None), None);
    }
}
