//! The one error type of the query layer. Each error carries the MongoDB
//! error code the server reports to clients; the code names live in the
//! server's error table.

use std::fmt;

/// A query-language error: a MongoDB error code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    pub code: i32,
    pub message: String,
}

impl QueryError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        QueryError { code, message: message.into() }
    }

    /// BadValue (2): a well-formed request with a value the operator rejects.
    pub fn bad_value(message: impl Into<String>) -> Self {
        Self::new(codes::BAD_VALUE, message)
    }

    /// FailedToParse (9).
    pub fn failed_to_parse(message: impl Into<String>) -> Self {
        Self::new(codes::FAILED_TO_PARSE, message)
    }

    /// TypeMismatch (14).
    pub fn type_mismatch(message: impl Into<String>) -> Self {
        Self::new(codes::TYPE_MISMATCH, message)
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

impl std::error::Error for QueryError {}

/// MongoDB error codes the query layer produces. Codes without a constant
/// here may be used with `QueryError::new` (MongoDB's numbered "Location"
/// codes, e.g. 40324 for an unknown pipeline stage).
pub mod codes {
    pub const BAD_VALUE: i32 = 2;
    pub const FAILED_TO_PARSE: i32 = 9;
    pub const TYPE_MISMATCH: i32 = 14;
    pub const ILLEGAL_OPERATION: i32 = 20;
    pub const CONFLICTING_UPDATE_OPERATORS: i32 = 40;
    pub const IMMUTABLE_FIELD: i32 = 66;
    pub const INVALID_OPTIONS: i32 = 72;
    pub const PATH_NOT_VIABLE: i32 = 28;
    pub const NO_SUCH_KEY: i32 = 4;
    pub const CANNOT_INDEX_PARALLEL_ARRAYS: i32 = 171;
    pub const OPERATION_FAILED: i32 = 96;
    pub const INVALID_PIPELINE_OPERATOR: i32 = 168;
    pub const UNRECOGNIZED_PIPELINE_STAGE: i32 = 40324;
    pub const DOLLAR_PREFIXED_FIELD_NAME: i32 = 52;
    pub const EMPTY_FIELD_NAME: i32 = 56;
    pub const BAD_POSITIONAL: i32 = 2;
    pub const QUERY_FEATURE_NOT_ALLOWED: i32 = 224;
    pub const COMMAND_NOT_SUPPORTED: i32 = 115;
}
