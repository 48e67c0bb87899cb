//! `ReplError`: the replication failures a caller acts on. The server maps
//! each variant to MongoDB's code, code name and error labels in its one
//! error table (`crates/server/src/error.rs`); drivers retry, rediscover
//! the primary or give up according to those codes.

use std::fmt;

use slipstream_storage::StorageError;

#[derive(Debug)]
pub enum ReplError {
    /// A write reached a member that is not a writable primary (10107).
    NotWritablePrimary,
    /// A read without secondaryOk reached a secondary (13435).
    NotPrimaryNoSecondaryOk,
    /// A read reached a member that is neither primary nor secondary
    /// (STARTUP2, RECOVERING, ROLLBACK, ...) (13436).
    NotPrimaryOrSecondary,
    /// The primary stepped down while the operation waited (189), e.g. a
    /// write waiting for its write concern.
    PrimarySteppedDown,
    /// The operation was interrupted by a state change (11602).
    InterruptedDueToReplStateChange,
    /// The write concern was not satisfied within `wtimeout` (64); the
    /// write itself happened.
    WriteConcernTimeout { wtimeout_ms: i64 },
    /// More members asked for than the set has (100).
    UnsatisfiableWriteConcern(String),
    /// A `w` tag the configuration does not define (79).
    UnknownReplWriteConcern(String),
    /// A replication command on a node started without `--replSet` (76).
    NoReplicationEnabled,
    /// A read or write concern that needs a replica set on a standalone (123).
    NotAReplicaSet(String),
    /// An argument the node's mode rules out (20), e.g. `afterClusterTime`
    /// on a standalone, which keeps no cluster time.
    IllegalOperation(String),
    /// The member has no configuration yet (94).
    NotYetInitialized,
    /// `replSetInitiate` on an initiated member (23).
    AlreadyInitialized,
    /// An invalid configuration document (93).
    InvalidReplicaSetConfig(String),
    /// A configuration that cannot follow the current one (103).
    NewReplicaSetConfigurationIncompatible(String),
    /// A member named in a command is not in the configuration (74).
    NodeNotFound(String),
    /// A time limit passed (262), e.g. no secondary caught up for a stepdown.
    ExceededTimeLimit(String),
    /// `maxTimeMS` passed while waiting (50).
    MaxTimeMsExpired,
    /// Another operation of the same kind is in progress (117).
    ConflictingOperationInProgress(String),
    /// The node is shutting down (91).
    ShutdownInProgress,
    /// A majority snapshot is not available yet (134).
    ReadConcernMajorityNotAvailableYet,
    /// A snapshot read below the retained history (239).
    SnapshotTooOld(String),
    /// A received `$clusterTime` past the drift limit (205
    /// ClusterTimeFailsRateLimiter, MongoDB's `_ensurePassesRateLimiter`;
    /// not 262, which drivers retry).
    ClusterTimeDrift(String),
    /// A malformed argument: the MongoDB code of the specific complaint
    /// (2 BadValue, 9 FailedToParse, 14 TypeMismatch, 72 InvalidOptions, ...).
    BadArgument { code: i32, message: String },
    /// The operation is valid but not supported here (115).
    CommandNotSupported(String),
    /// A storage failure underneath (boxed: storage errors carry documents).
    Storage(Box<StorageError>),
}

impl ReplError {
    pub fn bad_value(message: impl Into<String>) -> ReplError {
        ReplError::BadArgument { code: 2, message: message.into() }
    }

    pub fn failed_to_parse(message: impl Into<String>) -> ReplError {
        ReplError::BadArgument { code: 9, message: message.into() }
    }

    pub fn type_mismatch(message: impl Into<String>) -> ReplError {
        ReplError::BadArgument { code: 14, message: message.into() }
    }

    pub fn invalid_options(message: impl Into<String>) -> ReplError {
        ReplError::BadArgument { code: 72, message: message.into() }
    }

    /// A replSet command's refusal with MongoDB's code for it, for codes
    /// no variant names (95 NotSecondary, 104 NodeNotElectable, 125
    /// CommandFailed, 308 CurrentConfigNotCommittedYet, 108
    /// InconsistentReplicaSetNames): carried as `BadArgument`, which the
    /// server's table passes through with its code.
    pub fn coded(code: i32, message: impl Into<String>) -> ReplError {
        ReplError::BadArgument { code, message: message.into() }
    }
}

impl From<StorageError> for ReplError {
    fn from(err: StorageError) -> Self {
        ReplError::Storage(Box::new(err))
    }
}

impl fmt::Display for ReplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Drivers older than the codes still read these texts ("not
            // master", "node is recovering"), so they keep MongoDB's words.
            ReplError::NotWritablePrimary => write!(f, "not primary"),
            ReplError::NotPrimaryNoSecondaryOk => write!(f, "not primary and secondaryOk=false"),
            ReplError::NotPrimaryOrSecondary => write!(f, "node is not in primary or recovering state"),
            ReplError::PrimarySteppedDown => write!(f, "Primary stepped down while waiting for replication"),
            ReplError::InterruptedDueToReplStateChange => {
                write!(f, "operation was interrupted because of a replication state change")
            }
            ReplError::WriteConcernTimeout { wtimeout_ms } => {
                write!(f, "waiting for replication timed out after {wtimeout_ms} ms")
            }
            ReplError::UnsatisfiableWriteConcern(m)
            | ReplError::UnknownReplWriteConcern(m)
            | ReplError::NotAReplicaSet(m)
            | ReplError::IllegalOperation(m)
            | ReplError::InvalidReplicaSetConfig(m)
            | ReplError::NewReplicaSetConfigurationIncompatible(m)
            | ReplError::NodeNotFound(m)
            | ReplError::ExceededTimeLimit(m)
            | ReplError::ConflictingOperationInProgress(m)
            | ReplError::SnapshotTooOld(m)
            | ReplError::ClusterTimeDrift(m)
            | ReplError::CommandNotSupported(m) => write!(f, "{m}"),
            ReplError::NoReplicationEnabled => write!(f, "not running with --replSet"),
            ReplError::NotYetInitialized => write!(f, "no replset config has been received"),
            ReplError::AlreadyInitialized => write!(f, "already initialized"),
            ReplError::MaxTimeMsExpired => write!(f, "operation exceeded time limit"),
            ReplError::ShutdownInProgress => write!(f, "The server is in quiesce mode and will shut down"),
            ReplError::ReadConcernMajorityNotAvailableYet => {
                write!(f, "Read concern majority reads are currently not possible.")
            }
            ReplError::BadArgument { message, .. } => write!(f, "{message}"),
            ReplError::Storage(err) => write!(f, "{err}"),
        }
    }
}

impl std::error::Error for ReplError {}
