//! Why a command the node decides was refused. One enum per command, with
//! the variants the caller acts on; the `repl` layer maps each to MongoDB's
//! code (given on each variant) in its one error table, and may use the
//! `Display` text as `errmsg`.

use crate::config::{ConfigError, Incompatibility, MemberId};
use std::fmt;

/// Why a `replSetStepDown` did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownError {
    /// This member is not primary (code 10107 NotWritablePrimary).
    NotPrimary,
    /// No electable secondary caught up within the period (code 262 ExceededTimeLimit).
    ExceededTimeLimit,
    /// A stepdown is already in progress (code 117 ConflictingOperationInProgress).
    AlreadyInProgress,
    /// The member stopped being primary for another reason (a higher term,
    /// a lost majority, a reconfig) while the stepdown waited (code 189
    /// PrimarySteppedDown, as MongoDB's).
    SteppedDownForOtherReasons,
}

/// Why a `replSetReconfig` was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconfigError {
    /// A non-force reconfig on a member that is not a writable primary
    /// (code 10107 NotWritablePrimary).
    NotPrimary,
    /// The new configuration breaks a structural rule (code 93 InvalidReplicaSetConfig).
    Invalid(ConfigError),
    /// The new configuration names another set (code 93 InvalidReplicaSetConfig).
    SetNameDiffers {
        /// The set's name.
        current: String,
        /// The name in the new configuration.
        proposed: String,
    },
    /// The new configuration may not replace the current one (code 103
    /// NewReplicaSetConfigurationIncompatible).
    Incompatible(Incompatibility),
    /// A non-force reconfig would leave this primary unelectable (code 104 NodeNotElectable).
    NotElectable,
    /// This member is not in the new configuration (code 103
    /// NewReplicaSetConfigurationIncompatible).
    SelfNotFound,
    /// Fewer than a majority of the new configuration's voters are up
    /// (code 74 NodeNotFound, MongoDB's quorum check).
    QuorumCheckFailed {
        /// Voters of the new configuration that are up, this member included.
        up: usize,
        /// A majority of its voters.
        needed: usize,
    },
    /// In a set whose data-bearing voters are fewer than a majority of its
    /// voters, a data-bearing member would gain a vote before holding the
    /// commit point (code 103 NewReplicaSetConfigurationIncompatible): add
    /// it with `votes: 0` and give it a vote once it has caught up.
    NewVoterBehind(MemberId),
    /// A majority of the current configuration's voters have not reported
    /// holding it (code 308 CurrentConfigNotCommittedYet; MongoDB's command
    /// first waits for it until `maxTimeMS`, which the `repl` layer does by
    /// asking `Node::check_reconfig_allowed` after each step).
    ConfigNotCommitted,
    /// The commit point is not in this primary's term, or what was committed
    /// under the previous configuration is not yet on a majority of the
    /// current one (code 308 CurrentConfigNotCommittedYet, same wait).
    OplogNotCommitted,
}

impl fmt::Display for ReconfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconfigError::NotPrimary => f.write_str("Safe reconfig is only allowed on a writable PRIMARY"),
            ReconfigError::Invalid(e) => write!(f, "{e}"),
            ReconfigError::SetNameDiffers { current, proposed } => write!(
                f,
                "Rejecting reconfig where new config set name ({proposed}) differs from the set name ({current})"
            ),
            ReconfigError::Incompatible(e) => write!(f, "{e}"),
            ReconfigError::NotElectable => f.write_str("This node is not electable under the new configuration"),
            ReconfigError::SelfNotFound => f.write_str("No host described in new configuration maps to this node"),
            ReconfigError::QuorumCheckFailed { up, needed } => write!(
                f,
                "Quorum check failed because not enough voting nodes responded; required {needed} but only {up} responded"
            ),
            ReconfigError::NewVoterBehind(id) => write!(
                f,
                "member {id} must hold the commit point before it can vote in a set whose data-bearing voters are fewer than a majority: add it with votes: 0 and give it a vote once it has caught up"
            ),
            ReconfigError::ConfigNotCommitted => {
                f.write_str("Cannot run replSetReconfig because the current config is not majority committed")
            }
            ReconfigError::OplogNotCommitted => {
                f.write_str("Last committed optime from previous config is not committed in the current config")
            }
        }
    }
}

/// Why a `replSetStepUp` failed (code 125 CommandFailed, "Election failed.").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepUpError {
    /// This member may not stand now (priority 0, arbiter, frozen, in
    /// maintenance, rolling back, removed).
    NotElectable,
    /// The election was held and lost (or abandoned).
    ElectionLost,
}

/// Why `replSetFreeze` or `replSetMaintenance` was refused (code 95 NotSecondary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotSecondary {
    /// "primaries can't modify maintenance mode" / cannot freeze a primary.
    Primary,
    /// The member is running for election.
    RunningForElection,
}

impl fmt::Display for NotSecondary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotSecondary::Primary => f.write_str("not allowed on a primary"),
            NotSecondary::RunningForElection => f.write_str("currently running for election"),
        }
    }
}
