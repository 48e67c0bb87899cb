//! Replica set configuration (`replSetInitiate` / `replSetReconfig` document),
//! its validation, its place in the order of configurations
//! (`ConfigVersionAndTerm`) and the rules a new configuration must obey
//! against the one it replaces.

use slipstream_clock::UNINITIALIZED_TERM;
use std::cmp::Ordering;
use std::fmt;

/// A member's `_id` in the replica set configuration.
pub type MemberId = u32;

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
    /// `newlyAdded`: a member a reconfig added with a vote, which counts as
    /// a non-voter (no vote, no part of any majority, never electable)
    /// until the primary sees it SECONDARY and reconfigures the flag away,
    /// as MongoDB 4.4+ does. An empty member in initial sync then cannot
    /// make a majority unreachable while it copies. Set only by the server.
    pub newly_added: bool,
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
            newly_added: false,
        }
    }

    /// True if the member counts in elections and in the commit majority:
    /// it has a vote and is not `newlyAdded`.
    pub fn is_voter(&self) -> bool {
        self.votes > 0 && !self.newly_added
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
    /// `heartbeatTimeoutSecs` in milliseconds: how long a heartbeat waits
    /// for its response, and (with the election timeout, whichever is
    /// shorter) how long a member may stay silent before the others count
    /// it down. A primary's own majority check waits the election timeout
    /// alone, as MongoDB's liveness check does.
    pub heartbeat_timeout_ms: u64,
    /// `catchUpTimeoutMillis`; `None` waits without limit (MongoDB's -1).
    pub catch_up_timeout_ms: Option<u64>,
    /// `catchUpTakeoverDelayMillis`; `None` disables catch-up takeover.
    pub catch_up_takeover_delay_ms: Option<u64>,
    /// `maxSyncSourceLagSecs` in milliseconds: how far the wall-clock date
    /// of a source's last applied entry may trail the primary's.
    pub max_sync_source_lag_ms: u64,
    /// How much nearer (round-trip time) another source must be before a
    /// member abandons a working sync source for it.
    pub change_sync_source_threshold_ms: u64,
    /// `replicaSetId`, the ObjectId's 12 bytes: made when the set is
    /// initiated, never changed by a reconfig (`repl` keeps both rules).
    pub replica_set_id: Option<[u8; 12]>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            chaining_allowed: true,
            heartbeat_interval_ms: 2_000,
            election_timeout_ms: 10_000,
            heartbeat_timeout_ms: 10_000,
            catch_up_timeout_ms: None,
            catch_up_takeover_delay_ms: Some(30_000),
            max_sync_source_lag_ms: 30_000,
            change_sync_source_threshold_ms: 5,
            replica_set_id: None,
        }
    }
}

impl Settings {
    /// How often a member heartbeats the others and repeats its position
    /// report: `heartbeatIntervalMillis`, but at least twice per silence
    /// limit (`silence_limit_ms`: the election or the heartbeat timeout). A
    /// member not heard from within the election timeout counts as down (a
    /// primary steps down, a secondary stands), so with the interval at or
    /// past the timeout (MongoDB's default 2 s interval beside
    /// `electionTimeoutMillis: 1000`) an idle set elected a new primary every
    /// second, for ever; past a shorter heartbeat timeout (`heartbeatTimeoutSecs:
    /// 1` beside the 2 s interval) healthy members would show DOWN between
    /// two heartbeats. MongoDB's position reporter keeps alive at half the
    /// election timeout for the same reason; its heartbeats mark a member
    /// down on failures, not on silence.
    pub fn heartbeat_period_ms(&self) -> u64 {
        self.heartbeat_interval_ms.min((self.silence_limit_ms() / 2).max(1))
    }

    /// How long a member may stay silent before the others count it down
    /// (`health: 0`, state DOWN; no sync source, no stepdown successor, no
    /// quorum for a reconfig): the heartbeat timeout or the election
    /// timeout, whichever is shorter. MongoDB marks a member down when its
    /// heartbeats fail for `heartbeatTimeoutSecs` (at once when the
    /// connection is refused), and a member silent for an election timeout
    /// is already one a secondary would stand against.
    pub fn silence_limit_ms(&self) -> u64 {
        self.heartbeat_timeout_ms.min(self.election_timeout_ms)
    }
}

/// A whole replica set configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplSetConfig {
    /// `_id` of the replica set.
    pub set_name: String,
    /// `version`, raised by every reconfiguration.
    pub version: i64,
    /// `term` of the primary that wrote the configuration (raised to the
    /// primary's term when it steps up); -1 after a force reconfig, 0 for
    /// the configuration of `replSetInitiate`.
    pub term: i64,
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
    /// A version below 1.
    BadVersion(i64),
    /// No member that could ever be primary (a data-bearing member with a
    /// priority above 0): a set that could never take a write.
    NoElectableMember,
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
            ConfigError::BadVersion(v) => write!(f, "version {v} must be at least 1"),
            ConfigError::NoElectableMember => write!(
                f,
                "replica set configuration must contain at least one non-arbiter member with priority > 0"
            ),
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

    /// Where this configuration stands in the order of configurations.
    pub fn version_and_term(&self) -> ConfigVersionAndTerm {
        ConfigVersionAndTerm {
            version: self.version,
            term: self.term,
        }
    }

    /// Checks MongoDB's structural rules for a configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.version < 1 {
            return Err(ConfigError::BadVersion(self.version));
        }
        if self.members.is_empty() {
            return Err(ConfigError::NoMembers);
        }
        if self.members.len() > MEMBERS_MAX {
            return Err(ConfigError::TooManyMembers(self.members.len()));
        }
        // Members with a vote, `newlyAdded` ones too: each becomes a voter
        // once its flag goes, with no other check of the limit then.
        let voters = self.members.iter().filter(|m| m.votes > 0).count();
        if voters > VOTING_MEMBERS_MAX {
            return Err(ConfigError::TooManyVoters(voters));
        }
        if self.voter_count() == 0 {
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
        if !self.members.iter().any(|m| m.is_data_bearing() && m.priority > 0.0) {
            return Err(ConfigError::NoElectableMember);
        }
        let s = &self.settings;
        if s.heartbeat_interval_ms == 0 {
            return Err(ConfigError::BadSetting("heartbeatIntervalMillis"));
        }
        if s.election_timeout_ms == 0 {
            return Err(ConfigError::BadSetting("electionTimeoutMillis"));
        }
        if s.heartbeat_timeout_ms == 0 {
            return Err(ConfigError::BadSetting("heartbeatTimeoutSecs"));
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
        let data_bearing_voters = self
            .members
            .iter()
            .filter(|m| m.is_voter() && m.is_data_bearing())
            .count();
        self.majority().min(data_bearing_voters)
    }

    /// True if arbiters leave the data-bearing voters short of a majority
    /// of voters, so that a commit (on every data-bearing voter, by
    /// `write_majority`) is not on a voting majority. Safe reconfig's
    /// argument (consecutive configurations' majorities overlap) then does
    /// not reach commits, and `reconfig.rs` adds two rules for such sets.
    pub fn data_voters_below_majority(&self) -> bool {
        self.write_majority() < self.majority()
    }

    /// Primary-secondary-arbiter: three members, two of them data-bearing.
    pub fn is_psa(&self) -> bool {
        self.members.len() == 3 && self.members.iter().filter(|m| m.is_data_bearing()).count() == 2
    }

    /// True if every majority of voters includes a data-bearing voter, so
    /// that a candidate missing committed writes meets a member that
    /// refuses it its vote. Counts `votes` as configured, a `newlyAdded`
    /// member's too (MongoDB's base votes).
    fn every_election_majority_holds_a_data_voter(&self) -> bool {
        let voters = self.members.iter().filter(|m| m.votes > 0).count();
        let data_voters = self.members.iter().filter(|m| m.votes > 0 && m.is_data_bearing()).count();
        voters / 2 + 1 <= data_voters
    }

    /// Position of the member with `_id` `id` in `members[]`.
    pub fn index_of(&self, id: MemberId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// The member with `_id` `id`.
    pub fn member(&self, id: MemberId) -> Option<&MemberConfig> {
        self.members.iter().find(|m| m.id == id)
    }

    /// True if `id` is the only voting member and may stand: nobody else
    /// can vote, so waiting for an election timeout gains nothing (MongoDB's
    /// single-node prompt election).
    pub fn is_single_electable_voter(&self, id: MemberId) -> bool {
        self.voter_count() == 1 && self.member(id).is_some_and(|m| m.is_electable())
    }

    /// MongoDB's rules for replacing `self` by `new` (`validateOldAndNewConfigsCompatible`
    /// and, unless `force`, the single-node change of safe reconfig): the
    /// version grows, a host keeps its `_id`, a member keeps `arbiterOnly`,
    /// and at most one voting member is added or removed (compared by `_id`
    /// and `votes`), so that every majority of the old voters overlaps every
    /// majority of the new ones.
    pub fn check_replacement(&self, new: &ReplSetConfig, force: bool) -> Result<(), Incompatibility> {
        if !force && new.version <= self.version {
            return Err(Incompatibility::VersionNotGreater {
                old: self.version,
                new: new.version,
            });
        }
        for m in &new.members {
            if let Some(old) = self.members.iter().find(|o| o.host == m.host && o.id != m.id) {
                return Err(Incompatibility::HostChangedId {
                    host: m.host.clone(),
                    old: old.id,
                    new: m.id,
                });
            }
            if self.member(m.id).is_some_and(|old| old.arbiter_only != m.arbiter_only) {
                return Err(Incompatibility::ArbiterOnlyChanged(m.id));
            }
        }
        if new.is_psa() && !self.every_election_majority_holds_a_data_voter() {
            // Counted by `priority` as configured: a `newlyAdded` member
            // stands once the mark goes, with no further reconfig.
            let electable = new.members.iter().filter(|m| m.priority > 0.0).count();
            if electable > 1 {
                return Err(Incompatibility::PsaSecondaryElectable);
            }
        }
        if !force {
            let voter = |c: &ReplSetConfig, id: MemberId| c.member(id).is_some_and(|m| m.is_voter());
            let added = new
                .members
                .iter()
                .filter(|m| m.is_voter() && !voter(self, m.id))
                .count();
            let removed = self
                .members
                .iter()
                .filter(|m| m.is_voter() && !voter(new, m.id))
                .count();
            if added + removed > 1 {
                return Err(Incompatibility::MoreThanOneVoterChanged { added, removed });
            }
        }
        Ok(())
    }
}

/// A configuration's place in the order of configurations (MongoDB's
/// `ConfigVersionAndTerm`): by term, then version; a force reconfig's
/// configuration (term -1) on either side compares by version alone. Not a
/// total order (that is why it has no `Ord`): a force configuration can
/// sort after one that sorts after another, which sorts after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConfigVersionAndTerm {
    /// `version`.
    pub version: i64,
    /// `term` (-1 after a force reconfig).
    pub term: i64,
}

impl ConfigVersionAndTerm {
    /// How `self` compares with `other` (see the type).
    pub fn compare(self, other: ConfigVersionAndTerm) -> Ordering {
        if self.term == UNINITIALIZED_TERM || other.term == UNINITIALIZED_TERM {
            return self.version.cmp(&other.version);
        }
        (self.term, self.version).cmp(&(other.term, other.version))
    }

    /// True if `self` is newer than `other`.
    pub fn is_newer_than(self, other: ConfigVersionAndTerm) -> bool {
        self.compare(other) == Ordering::Greater
    }
}

impl fmt::Display for ConfigVersionAndTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{version: {}, term: {}}}", self.version, self.term)
    }
}

/// Why a new configuration may not replace the current one (MongoDB code
/// 103 NewReplicaSetConfigurationIncompatible).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incompatibility {
    /// A non-force reconfig must raise the version.
    VersionNotGreater {
        /// The current version.
        old: i64,
        /// The proposed version.
        new: i64,
    },
    /// A host appears with another `_id` than before.
    HostChangedId {
        /// The host.
        host: String,
        /// Its `_id` now.
        old: MemberId,
        /// Its `_id` in the new configuration.
        new: MemberId,
    },
    /// A member's `arbiterOnly` differs between the configurations.
    ArbiterOnlyChanged(MemberId),
    /// The new configuration is primary-secondary-arbiter with both
    /// data-bearing members electable, while the old one had too few
    /// data-bearing voters for every election majority to include one: the
    /// secondary, perhaps missing committed writes, could win with the
    /// arbiter's vote. `rs.reconfigForPSASet()` takes the two safe steps.
    PsaSecondaryElectable,
    /// A non-force reconfig adds or removes more than one voting member.
    MoreThanOneVoterChanged {
        /// Voters added (new `_id`s, or `votes` raised to 1).
        added: usize,
        /// Voters removed (`_id`s gone, or `votes` lowered to 0).
        removed: usize,
    },
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Incompatibility::VersionNotGreater { old, new } => {
                write!(f, "new replica set configuration version {new} must be greater than the old version {old}")
            }
            Incompatibility::HostChangedId { host, old, new } => write!(
                f,
                "new and old configurations both have members with host of {host} but in the new configuration the _id field is {new} and in the old configuration it is {old}"
            ),
            Incompatibility::ArbiterOnlyChanged(id) => {
                write!(f, "new and old configurations differ in the setting of the arbiterOnly field for member {id}")
            }
            Incompatibility::PsaSecondaryElectable => write!(
                f,
                "Rejecting reconfig where the new config has a PSA topology and the secondary is electable, but the \
                 old config contains only one writable node. Refer to \
                 https://docs.mongodb.com/manual/reference/method/rs.reconfigForPSASet/ for next steps on \
                 reconfiguring a PSA set."
            ),
            Incompatibility::MoreThanOneVoterChanged { added, removed } => write!(
                f,
                "non force replica set reconfig can only add or remove at most 1 voting member ({added} added, {removed} removed)"
            ),
        }
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
        ReplSetConfig::new(
            "rs",
            (0..n).map(|i| MemberConfig::new(i, format!("h{i}:27017"))).collect(),
        )
    }

    #[test]
    fn heartbeats_go_out_at_least_twice_per_silence_limit() {
        let mut settings = Settings::default();
        assert_eq!((settings.silence_limit_ms(), settings.heartbeat_period_ms()), (10_000, 2_000));
        settings.election_timeout_ms = 1_000;
        assert_eq!((settings.silence_limit_ms(), settings.heartbeat_period_ms()), (1_000, 500));
        settings.election_timeout_ms = 10_000;
        settings.heartbeat_timeout_ms = 1_000;
        assert_eq!((settings.silence_limit_ms(), settings.heartbeat_period_ms()), (1_000, 500));
        settings.heartbeat_timeout_ms = 0;
        let mut config = set(3);
        config.settings = settings;
        assert_eq!(config.validate(), Err(ConfigError::BadSetting("heartbeatTimeoutSecs")));
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

    #[test]
    fn config_order_is_term_then_version_and_force_compares_versions() {
        let vt = |version, term| ConfigVersionAndTerm { version, term };
        assert!(
            vt(1, 2).is_newer_than(vt(5, 1)),
            "a newer term wins over a higher version"
        );
        assert!(vt(3, 2).is_newer_than(vt(2, 2)));
        assert!(!vt(2, 2).is_newer_than(vt(2, 2)));
        assert!(vt(20_000, -1).is_newer_than(vt(3, 7)), "force: versions only");
        assert!(vt(4, 1).is_newer_than(vt(3, -1)));
        assert_eq!(vt(3, -1).compare(vt(3, 9)), Ordering::Equal);
    }

    #[test]
    fn replacement_adds_or_removes_one_voter_at_most() {
        let old = set(3);
        let mut add_one = set(4);
        add_one.version = 2;
        assert_eq!(old.check_replacement(&add_one, false), Ok(()));
        let mut add_two = set(5);
        add_two.version = 2;
        assert_eq!(
            old.check_replacement(&add_two, false),
            Err(Incompatibility::MoreThanOneVoterChanged { added: 2, removed: 0 })
        );
        assert_eq!(old.check_replacement(&add_two, true), Ok(()), "force skips the rule");
        // Swapping a voter for a non-voter and removing one: two changes.
        let mut swap = set(3);
        swap.version = 2;
        swap.members[1].votes = 0;
        swap.members[1].priority = 0.0;
        swap.members.pop();
        assert!(matches!(
            old.check_replacement(&swap, false),
            Err(Incompatibility::MoreThanOneVoterChanged { .. })
        ));
        // A non-voter added alongside a voter removed: one change.
        let mut one = set(3);
        one.version = 2;
        one.members[2] = MemberConfig {
            votes: 0,
            priority: 0.0,
            ..MemberConfig::new(9, "h9:27017")
        };
        assert_eq!(old.check_replacement(&one, false), Ok(()));
    }

    #[test]
    fn replacement_keeps_ids_arbiters_and_raises_the_version() {
        let old = set(3);
        let same = set(3);
        assert_eq!(
            old.check_replacement(&same, false),
            Err(Incompatibility::VersionNotGreater { old: 1, new: 1 })
        );
        let mut moved = set(3);
        moved.version = 2;
        moved.members[2].id = 7;
        assert!(matches!(
            old.check_replacement(&moved, false),
            Err(Incompatibility::HostChangedId { old: 2, new: 7, .. })
        ));
        let mut arbiter = set(3);
        arbiter.version = 2;
        arbiter.members[2].arbiter_only = true;
        arbiter.members[2].priority = 0.0;
        assert_eq!(
            old.check_replacement(&arbiter, false),
            Err(Incompatibility::ArbiterOnlyChanged(2))
        );
    }

    fn psa(secondary_votes: u8, secondary_priority: f64, version: i64) -> ReplSetConfig {
        let mut config = set(3);
        config.version = version;
        config.members[1].votes = secondary_votes;
        config.members[1].priority = secondary_priority;
        config.members[2].arbiter_only = true;
        config.members[2].priority = 0.0;
        config
    }

    #[test]
    fn a_psa_secondary_becomes_electable_only_after_it_has_a_vote() {
        // P-A with a non-voting secondary: only the primary holds data
        // among the voters, so an election majority need not include it.
        let primary_arbiter = psa(0, 0.0, 1);
        assert_eq!(
            primary_arbiter.check_replacement(&psa(1, 1.0, 2), false),
            Err(Incompatibility::PsaSecondaryElectable)
        );
        assert_eq!(
            primary_arbiter.check_replacement(&psa(1, 1.0, 2), true),
            Err(Incompatibility::PsaSecondaryElectable),
            "MongoDB checks it for force reconfigs too"
        );
        // rs.reconfigForPSASet's two steps: a vote without priority, then priority.
        let voting = psa(1, 0.0, 2);
        assert_eq!(primary_arbiter.check_replacement(&voting, false), Ok(()));
        assert_eq!(voting.check_replacement(&psa(1, 1.0, 3), false), Ok(()));
        // A secondary added to a two-member primary-arbiter set.
        let mut two = psa(0, 0.0, 1);
        two.members.remove(1);
        assert_eq!(
            two.check_replacement(&psa(1, 1.0, 2), false),
            Err(Incompatibility::PsaSecondaryElectable)
        );
        // A newlyAdded secondary counts by its configured vote.
        let mut marked = psa(1, 1.0, 2);
        marked.members[1].newly_added = true;
        assert_eq!(marked.check_replacement(&psa(1, 1.0, 3), false), Ok(()));
    }
}
