//! `CommandError`, the error every command returns, and the one table that
//! maps lower layers' errors to MongoDB error codes and code names.

use bson::Document;
use slipstream_query::QueryError;
use slipstream_storage::StorageError;

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
    pub fn code_name(&self) -> &'static str {
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
            "codeName": self.code_name(),
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
            StorageError::InvalidDocument(ref detail) => {
                // The storage layer folds several causes into this variant;
                // its message tells them apart: a size violation is
                // BSONObjectTooLarge, a bad namespace InvalidNamespace, the
                // rest BadValue.
                let lower = detail.to_ascii_lowercase();
                let code = if lower.contains("too large") {
                    10334
                } else if lower.contains("namespace") {
                    73
                } else {
                    2
                };
                CommandError::new(code, message)
            }
            StorageError::ShuttingDown => CommandError::new(91, message),
            StorageError::Query(query) => CommandError::from(query),
            StorageError::DataDirectoryLocked(_)
            | StorageError::Corruption(_)
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

/// MongoDB code names (from MongoDB's error_codes.yml) for the codes
/// Slipstream sends.
pub fn code_name(code: i32) -> &'static str {
    match code {
        1 => "InternalError",
        2 => "BadValue",
        4 => "NoSuchKey",
        9 => "FailedToParse",
        11 => "UserNotFound",
        13 => "Unauthorized",
        14 => "TypeMismatch",
        15 => "Overflow",
        20 => "IllegalOperation",
        22 => "InvalidBSON",
        26 => "NamespaceNotFound",
        27 => "IndexNotFound",
        28 => "PathNotViable",
        40 => "ConflictingUpdateOperators",
        43 => "CursorNotFound",
        48 => "NamespaceExists",
        50 => "MaxTimeMSExpired",
        52 => "DollarPrefixedFieldName",
        56 => "EmptyFieldName",
        59 => "CommandNotFound",
        61 => "ShardKeyNotFound",
        66 => "ImmutableField",
        67 => "CannotCreateIndex",
        72 => "InvalidOptions",
        73 => "InvalidNamespace",
        85 => "IndexOptionsConflict",
        86 => "IndexKeySpecsConflict",
        91 => "ShutdownInProgress",
        96 => "OperationFailed",
        115 => "CommandNotSupported",
        166 => "CommandNotSupportedOnView",
        168 => "InvalidPipelineOperator",
        171 => "CannotIndexParallelArrays",
        197 => "InvalidIndexSpecificationOption",
        224 => "QueryFeatureNotAllowed",
        239 => "SnapshotTooOld",
        10107 => "NotWritablePrimary",
        10334 => "BSONObjectTooLarge",
        11000 => "DuplicateKey",
        11600 => "InterruptedAtShutdown",
        40571 => "Location40571",
        40413 => "Location40413",
        352 => "UnsupportedOpQueryCommand",
        10065 => "Location10065",
        13435 => "NotPrimaryNoSecondaryOk",
        _ => "Location",
    }
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
            (StorageError::InvalidDocument("document too large".into()), 10334),
            (StorageError::InvalidDocument("_id cannot be an array".into()), 2),
            (StorageError::InvalidDocument("Invalid target namespace: x".into()), 73),
            (StorageError::Query(QueryError::new(52, "bad")), 52),
        ];
        for (error, code) in cases {
            assert_eq!(CommandError::from(error).code, code);
        }
    }
}
