//! Replica set configuration (`replSetInitiate` / `replSetReconfig` document)
//! and its validation.

use crate::optime::MemberId;
use std::fmt;

/// Most members a replica set may have (MongoDB's limit).
pub const MEMBERS_MAX: usize = 50;
/// Most voting members a replica set may have (MongoDB's limit).
pub const VOTING_MEMBERS_MAX: usize = 7;
/// Highest priority a member may have.
pub const PRIORITY_MAX: f64 = 1000.0;

/// One entry of `members[]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberConfig {
    /// `_id`, unique within the set.
    pub id: MemberId,
    /// `host`, "name:port", unique within the set.
    pub host: String,
    /// `votes`: 0 or 1.
    pub votes: u8,
    /// `priority`: 0 means the member never stands for election.
    pub priority: f64,
    /// `arbiterOnly`: votes, holds no data.
    pub arbiter_only: bool,
    /// `hidden`: invisible to clients; must have priority 0.
    pub hidden: bool,
    /// `tags`, kept for the `repl` layer (custom write concern modes are not
    /// evaluated here).
    pub tags: Vec<(String, String)>,
}

impl MemberConfig {
    /// A data-bearing voting member with priority 1.
    pub fn new(id: MemberId, host: impl Into<String>) -> MemberConfig {
        MemberConfig {
            id,
            host: host.into(),
            votes: 1,
            priority: 1.0,
            arbiter_only: false,
            hidden: false,
            tags: Vec::new(),
        }
    }

    /// True if the member counts in elections and in the commit majority.
    pub fn is_voter(&self) -> bool {
        self.votes > 0
    }

    /// True if the member holds an oplog (everyone except arbiters).
    pub fn is_data_bearing(&self) -> bool {
        !self.arbiter_only
    }

    /// True if the member may ever stand for election.
    pub fn is_electable(&self) -> bool {
        self.is_voter() && self.is_data_bearing() && self.priority > 0.0
    }
}

/// The `settings` sub-document.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `chainingAllowed`: may secondaries sync from other secondaries.
    pub chaining_allowed: bool,
    /// `heartbeatIntervalMillis`.
    pub heartbeat_interval_ms: u64,
    /// `electionTimeoutMillis`.
    pub election_timeout_ms: u64,
    /// `catchUpTimeoutMillis`; `None` waits without limit (MongoDB's -1).
    pub catch_up_timeout_ms: Option<u64>,
    /// `catchUpTakeoverDelayMillis`; `None` disables catch-up takeover.
    pub catch_up_takeover_delay_ms: Option<u64>,
    /// `maxSyncSourceLagSecs` in milliseconds of timestamp distance.
    pub max_sync_source_lag_ms: u64,
    /// How much nearer (round-trip time) another source must be before a
    /// member abandons a working sync source for it.
    pub change_sync_source_threshold_ms: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            chaining_allowed: true,
            heartbeat_interval_ms: 2_000,
            election_timeout_ms: 10_000,
            catch_up_timeout_ms: None,
            catch_up_takeover_delay_ms: Some(30_000),
            max_sync_source_lag_ms: 30_000,
            change_sync_source_threshold_ms: 5,
        }
    }
}

/// A whole replica set configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplSetConfig {
    /// `_id` of the replica set.
    pub set_name: String,
    /// `version`, raised by every reconfiguration.
    pub version: u64,
    /// `term` in which the configuration was written.
    pub term: u64,
    /// `members[]`.
    pub members: Vec<MemberConfig>,
    /// `settings`.
    pub settings: Settings,
}

/// Why a configuration was rejected (MongoDB answers these with code 103
/// NewReplicaSetConfigurationIncompatible or 93 InvalidReplicaSetConfig).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// No members at all.
    NoMembers,
    /// More than `MEMBERS_MAX` members.
    TooManyMembers(usize),
    /// More than `VOTING_MEMBERS_MAX` voters.
    TooManyVoters(usize),
    /// No voting member at all.
    NoVoters,
    /// Two members share an `_id`.
    DuplicateId(MemberId),
    /// Two members share a host.
    DuplicateHost(String),
    /// `votes` other than 0 or 1.
    BadVotes(MemberId),
    /// Priority out of range or non-zero where it must be zero.
    BadPriority(MemberId, &'static str),
    /// An arbiter that does not vote.
    ArbiterWithoutVote(MemberId),
    /// A timing setting of zero.
    BadSetting(&'static str),
    /// The member starting is not in the configuration.
    NotAMember(MemberId),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoMembers => write!(f, "replica set configuration has no members"),
            ConfigError::TooManyMembers(n) => write!(f, "{n} members, at most {MEMBERS_MAX} allowed"),
            ConfigError::TooManyVoters(n) => {
                write!(f, "{n} voting members, at most {VOTING_MEMBERS_MAX} allowed")
            }
            ConfigError::NoVoters => write!(f, "replica set configuration has no voting members"),
            ConfigError::DuplicateId(id) => write!(f, "duplicate member _id {id}"),
            ConfigError::DuplicateHost(h) => write!(f, "duplicate host {h}"),
            ConfigError::BadVotes(id) => write!(f, "member {id}: votes must be 0 or 1"),
            ConfigError::BadPriority(id, why) => write!(f, "member {id}: priority {why}"),
            ConfigError::ArbiterWithoutVote(id) => write!(f, "member {id}: arbiters must vote"),
            ConfigError::BadSetting(name) => write!(f, "settings.{name} must be positive"),
            ConfigError::NotAMember(id) => write!(f, "member {id} is not in the configuration"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl ReplSetConfig {
    /// A configuration of `members` with default settings, version 1, term 0.
    pub fn new(set_name: impl Into<String>, members: Vec<MemberConfig>) -> ReplSetConfig {
        ReplSetConfig {
            set_name: set_name.into(),
            version: 1,
            term: 0,
            members,
            settings: Settings::default(),
        }
    }

    /// Checks MongoDB's structural rules for a configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.members.is_empty() {
            return Err(ConfigError::NoMembers);
        }
        if self.members.len() > MEMBERS_MAX {
            return Err(ConfigError::TooManyMembers(self.members.len()));
        }
        let voters = self.voter_count();
        if voters > VOTING_MEMBERS_MAX {
            return Err(ConfigError::TooManyVoters(voters));
        }
        if voters == 0 {
            return Err(ConfigError::NoVoters);
        }
        for (i, m) in self.members.iter().enumerate() {
            for other in &self.members[..i] {
                if other.id == m.id {
                    return Err(ConfigError::DuplicateId(m.id));
                }
                if other.host == m.host {
                    return Err(ConfigError::DuplicateHost(m.host.clone()));
                }
            }
            validate_member(m)?;
        }
        let s = &self.settings;
        if s.heartbeat_interval_ms == 0 {
            return Err(ConfigError::BadSetting("heartbeatIntervalMillis"));
        }
        if s.election_timeout_ms == 0 {
            return Err(ConfigError::BadSetting("electionTimeoutMillis"));
        }
        Ok(())
    }

    /// Number of voting members.
    pub fn voter_count(&self) -> usize {
        self.members.iter().filter(|m| m.is_voter()).count()
    }

    /// Votes needed for an election or a commit: a strict majority of voters.
    pub fn majority(&self) -> usize {
        self.voter_count() / 2 + 1
    }

    /// How many data-bearing voters must hold an entry for it to commit:
    /// a majority of voters, or every data-bearing voter when arbiters make
    /// a majority of data-bearing voters impossible (MongoDB's
    /// `writeMajority`). Every electable member is a data-bearing voter, so
    /// every future primary still holds a committed entry.
    pub fn write_majority(&self) -> usize {
        let data_bearing_voters = self.members.iter().filter(|m| m.is_voter() && m.is_data_bearing()).count();
        self.majority().min(data_bearing_voters)
    }

    /// Position of the member with `_id` `id` in `members[]`.
    pub fn index_of(&self, id: MemberId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// The member with `_id` `id`.
    pub fn member(&self, id: MemberId) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.id == id)
    }
}

fn validate_member(m: &MemberConfig) -> Result<(), ConfigError> {
    if m.votes > 1 {
        return Err(ConfigError::BadVotes(m.id));
    }
    if !(0.0..=PRIORITY_MAX).contains(&m.priority) {
        return Err(ConfigError::BadPriority(m.id, "must be between 0 and 1000"));
    }
    if m.arbiter_only && m.priority != 0.0 {
        return Err(ConfigError::BadPriority(m.id, "must be 0 for an arbiter"));
    }
    if m.arbiter_only && m.votes == 0 {
        return Err(ConfigError::ArbiterWithoutVote(m.id));
    }
    if m.votes == 0 && m.priority != 0.0 {
        return Err(ConfigError::BadPriority(m.id, "must be 0 for a non-voting member"));
    }
    if m.hidden && m.priority != 0.0 {
        return Err(ConfigError::BadPriority(m.id, "must be 0 for a hidden member"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: u32) -> ReplSetConfig {
        ReplSetConfig::new("rs", (0..n).map(|i| MemberConfig::new(i, format!("h{i}:27017"))).collect())
    }

    #[test]
    fn accepts_a_plain_set() {
        assert_eq!(set(3).validate(), Ok(()));
        assert_eq!(set(3).majority(), 2);
    }

    #[test]
    fn rejects_eight_voters_but_accepts_eight_members_with_one_non_voter() {
        let mut c = set(8);
        assert_eq!(c.validate(), Err(ConfigError::TooManyVoters(8)));
        c.members[7].votes = 0;
        c.members[7].priority = 0.0;
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.majority(), 4);
    }

    #[test]
    fn rejects_fifty_one_members() {
        let mut c = set(51);
        for m in c.members.iter_mut().skip(7) {
            m.votes = 0;
            m.priority = 0.0;
        }
        assert_eq!(c.validate(), Err(ConfigError::TooManyMembers(51)));
    }

    #[test]
    fn arbiter_and_hidden_rules() {
        let mut c = set(3);
        c.members[2].arbiter_only = true;
        assert!(matches!(c.validate(), Err(ConfigError::BadPriority(2, _))));
        c.members[2].priority = 0.0;
        assert_eq!(c.validate(), Ok(()));
        c.members[1].hidden = true;
        assert!(matches!(c.validate(), Err(ConfigError::BadPriority(1, _))));
        c.members[1].priority = 0.0;
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn write_majority_counts_data_bearing_voters() {
        let mut c = set(5);
        assert_eq!(c.write_majority(), 3);
        for m in c.members.iter_mut().skip(2) {
            m.arbiter_only = true;
            m.priority = 0.0;
        }
        assert_eq!(c.majority(), 3);
        assert_eq!(c.write_majority(), 2);
    }

    #[test]
    fn rejects_duplicates() {
        let mut c = set(3);
        c.members[2].id = 1;
        assert_eq!(c.validate(), Err(ConfigError::DuplicateId(1)));
        let mut c = set(3);
        c.members[2].host = "h0:27017".into();
        assert!(matches!(c.validate(), Err(ConfigError::DuplicateHost(_))));
    }
}
