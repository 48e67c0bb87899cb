//! `CommandError`, the error every command returns, and the one table that
//! maps lower layers' errors to MongoDB error codes and code names.

use bson::Document;

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
        13435 => "NotPrimaryNoSecondaryOk",
        _ => "Location",
    }
}
