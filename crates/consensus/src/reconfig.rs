//! Reconfiguration and configuration propagation: MongoDB 4.4+ "safe
//! reconfig", the logless protocol of Schultz, Zhou, Dirkmaat et al.
//! ("Design and Analysis of a Logless Dynamic Reconfiguration Protocol",
//! OPODIS 2021). Configurations are not oplog entries; they are ordered by
//! `(term, version)` (`ConfigVersionAndTerm`) and spread by heartbeats.
//!
//! A non-force reconfig is accepted only by a writable primary, and only
//! when
//!
//! 1. the current configuration is *committed*: a majority of its voters
//!    have reported holding it (same version and term) in heartbeats;
//! 2. the oplog is committed in it: the commit point is in the primary's
//!    term, and the commit point of the moment the configuration was
//!    adopted is durable on a write majority of it (what was committed
//!    under the previous configuration is committed under this one);
//! 3. the new configuration adds or removes at most one voter, so that every
//!    majority of the old voters meets every majority of the new.
//!
//! A new primary first raises its configuration's term to its own term
//! (step-up, after catch-up): from then on no configuration written by an
//! older primary sorts after ours, and rule 1 means a majority holds ours
//! before we change it. Voters refuse candidates whose configuration is
//! older than theirs (`election.rs`). Together these keep any two primaries
//! of different configurations from being elected by disjoint majorities.
//!
//! Arbiters break that argument, which MongoDB's own model of the protocol
//! leaves out: when the data-bearing voters are fewer than a majority of
//! the voters, a commit is on every data-bearing voter (`writeMajority`),
//! not on a voting majority, and a voting majority can be one data-bearing
//! member plus arbiters, whose votes say nothing about logs. The simulator
//! found both ways this loses a committed entry (README, bug 7), and such
//! sets get two more rules:
//!
//! 4. a data-bearing member may gain a vote only once it durably holds the
//!    commit point (else it could win with arbiters' votes alone without
//!    the entries committed on the old data-bearing voters): add it with
//!    `votes: 0`, give it a vote once it has caught up (what MongoDB's
//!    `newlyAdded` and initial sync do for a new member);
//! 5. the primary advances its commit point only while its configuration is
//!    committed (else a member the new configuration removed, still holding
//!    the old one, could win with arbiters that hold the old one too,
//!    without the entries committed on the new configuration's fewer
//!    data-bearing voters). Once a majority holds the new configuration, no
//!    candidate of the old one can gather a majority.
//!
//! A force reconfig skips all of it: it raises the version by a large
//! increment the caller draws, sets the term to -1, and may be run on any
//! member (that is its purpose: recovering a set that lost its majority).
//!
//! Propagation: heartbeats carry `(config_version, config_term)`; a member
//! that sees a newer one asks for it (`Action::FetchConfig`), gets it back as
//! `Event::ConfigReceived`, persists and adopts it. A member missing from the
//! configuration it adopts becomes REMOVED (`removed.rs`).

use crate::config::{MemberId, ReplSetConfig};
use crate::error::ReconfigError;
use crate::io::{Action, ForceReconfig};
use crate::mutation::{self, Mutation};
use crate::node::{Node, Role};
use slipstream_clock::UNINITIALIZED_TERM;

impl Node {
    /// `replSetReconfig`.
    pub(crate) fn on_reconfig(&mut self, proposed: ReplSetConfig, force: Option<ForceReconfig>, answered: &[MemberId]) {
        let result = match force {
            None => self.safe_reconfig(proposed, answered),
            Some(force) => self.force_reconfig(proposed, force),
        };
        self.out.push(Action::ReconfigFinished(result));
    }

    fn safe_reconfig(&mut self, mut config: ReplSetConfig, answered: &[MemberId]) -> Result<(), ReconfigError> {
        self.check_reconfig_allowed()?;
        // The configuration's term is ours, whatever the caller passed.
        config.term = self.term;
        self.check_new_config(&config, false)?;
        let index = config.index_of(self.me).ok_or(ReconfigError::SelfNotFound)?;
        if !config.members[index].is_electable() {
            return Err(ReconfigError::NotElectable);
        }
        self.check_quorum(&config, answered)?;
        if self.config.data_voters_below_majority() && !mutation::on(Mutation::NewVoterWithoutCommitPoint) {
            self.check_new_voters_hold_commit_point(&config)?;
        }
        self.persist_and_install(config);
        Ok(())
    }

    /// Rule 4: every data-bearing member that gains a vote has reported a
    /// durable position at or past the commit point. The commit point is in
    /// our term (rule 2) and only we write entries of our term, so such a
    /// position is on our log: the member holds every committed entry.
    fn check_new_voters_hold_commit_point(&self, config: &ReplSetConfig) -> Result<(), ReconfigError> {
        for member in config.members.iter().filter(|m| m.is_voter() && m.is_data_bearing()) {
            if self.config.member(member.id).is_some_and(|old| old.is_voter()) {
                continue;
            }
            let durable = self.config.index_of(member.id).map(|i| self.members[i].durable);
            if durable.is_none_or(|d| d < self.commit_point) {
                return Err(ReconfigError::NewVoterBehind(member.id));
            }
        }
        Ok(())
    }

    /// Rule 5: whether the primary may advance its commit point now.
    pub(crate) fn may_commit_in_config(&self) -> bool {
        !self.config.data_voters_below_majority()
            || self.is_config_committed()
            || mutation::on(Mutation::CommitInUncommittedConfig)
    }

    fn force_reconfig(&mut self, mut config: ReplSetConfig, force: ForceReconfig) -> Result<(), ReconfigError> {
        assert!(force.version_increment > 0, "a force reconfig raises the version");
        config.version = self.config.version.max(config.version) + force.version_increment;
        config.term = UNINITIALIZED_TERM;
        self.check_new_config(&config, true)?;
        if config.index_of(self.me).is_none() {
            return Err(ReconfigError::SelfNotFound);
        }
        self.persist_and_install(config);
        Ok(())
    }

    /// Whether a non-force reconfig may start now: rules 1 and 2 of the
    /// module comment, on a writable primary. MongoDB's command waits for
    /// them (until `maxTimeMS`) before reconfiguring; the `repl` layer can
    /// wait the same way by asking this after each step.
    pub fn check_reconfig_allowed(&self) -> Result<(), ReconfigError> {
        if !self.is_writable_primary() {
            return Err(ReconfigError::NotPrimary);
        }
        // Step-up raised the configuration's term to ours, and only a force
        // reconfig writes another.
        assert!(self.config.term == self.term || self.config.term == UNINITIALIZED_TERM);
        if !self.is_config_committed() && !mutation::on(Mutation::ReconfigBeforeConfigCommitted) {
            return Err(ReconfigError::ConfigNotCommitted);
        }
        if !self.is_oplog_committed_in_config() {
            return Err(ReconfigError::OplogNotCommitted);
        }
        Ok(())
    }

    /// Rule 1: a majority of the configuration's voters (this member
    /// included) have reported holding it: the same version and term, or
    /// the same version where either side is a force reconfig's (term -1),
    /// as MongoDB's `ConfigVersionAndTerm` equality has it. A primary
    /// elected after a force reconfig raises the term of the same
    /// configuration; the others never fetch it (it is not newer by that
    /// order), and an exact match refused every later reconfig (308).
    pub fn is_config_committed(&self) -> bool {
        let Some(my_index) = self.my_index else { return false };
        let ours = self.config.version_and_term();
        let holders = (0..self.config.members.len())
            .filter(|&i| self.config.members[i].is_voter())
            .filter(|&i| i == my_index || self.members[i].config.is_some_and(|theirs| theirs.compare(ours).is_eq()))
            .count();
        holders >= self.config.majority()
    }

    /// Rule 2. A configuration from a force reconfig skips it, as MongoDB's
    /// does: forcing exists to leave a set that cannot commit.
    fn is_oplog_committed_in_config(&self) -> bool {
        if self.config.term == UNINITIALIZED_TERM {
            return true;
        }
        self.commit_point.term == self.term && self.majority_durable() >= self.config_oplog_commitment
    }

    /// Structure, set name, and the rules against the current configuration.
    fn check_new_config(&self, config: &ReplSetConfig, force: bool) -> Result<(), ReconfigError> {
        config.validate().map_err(ReconfigError::Invalid)?;
        if config.set_name != self.config.set_name {
            return Err(ReconfigError::SetNameDiffers {
                current: self.config.set_name.clone(),
                proposed: config.set_name.clone(),
            });
        }
        self.config
            .check_replacement(config, force)
            .map_err(ReconfigError::Incompatible)
    }

    /// MongoDB's reconfig quorum check: it heartbeats the new
    /// configuration's members and needs a majority of its voters to
    /// answer. Here a member counts when it answered the caller's heartbeat
    /// just now (`answered`: new members, and members at a new host), or
    /// when this node has recently heard it at the same host (a member
    /// never heard from is not up); the liveness of a member's old host
    /// says nothing of its new one (a process left at the old host kept a
    /// moved voter counted up).
    fn check_quorum(&self, config: &ReplSetConfig, answered: &[MemberId]) -> Result<(), ReconfigError> {
        let heard_at_same_host = |m: &crate::config::MemberConfig| {
            self.config
                .index_of(m.id)
                .is_some_and(|i| self.config.members[i].host == m.host && self.is_up(i))
        };
        let up = config
            .members
            .iter()
            .filter(|m| m.is_voter())
            .filter(|m| m.id == self.me || answered.contains(&m.id) || heard_at_same_host(m))
            .count();
        let needed = config.majority();
        if up < needed {
            return Err(ReconfigError::QuorumCheckFailed { up, needed });
        }
        Ok(())
    }

    /// A configuration fetched from a peer: adopted if valid, of our set,
    /// and newer than ours.
    pub(crate) fn on_config_received(&mut self, config: ReplSetConfig) {
        if config.validate().is_err() || config.set_name != self.config.set_name {
            return;
        }
        if !config.version_and_term().is_newer_than(self.config.version_and_term()) {
            return;
        }
        // The primary of the configuration's term wrote it: that term exists.
        self.observe_term(config.term);
        self.persist_and_install(config);
    }

    /// A peer reported holding `theirs`: ask for it if it is newer than
    /// ours, at most once per heartbeat interval for one configuration.
    pub(crate) fn note_peer_config(&mut self, from: MemberId, theirs: crate::config::ConfigVersionAndTerm) {
        if !theirs.is_newer_than(self.config.version_and_term()) {
            return;
        }
        let interval = self.config.settings.heartbeat_interval_ms;
        let due = match self.config_fetch {
            Some((asked, at)) => theirs.is_newer_than(asked) || self.now.since(at) >= interval,
            None => true,
        };
        if due {
            self.config_fetch = Some((theirs, self.now));
            self.out.push(Action::FetchConfig { from });
        }
    }

    /// Step-up: the new primary's configuration takes its term (same
    /// version), made durable before writes open.
    pub(crate) fn raise_config_term_on_step_up(&mut self) {
        assert_eq!(self.role, Role::Primary);
        if self.config.term == self.term {
            return;
        }
        let mut config = self.config.clone();
        config.term = self.term;
        self.persist_and_install(config);
    }

    fn persist_and_install(&mut self, config: ReplSetConfig) {
        self.out.push(Action::PersistConfig(config.clone()));
        self.install_config(config);
        self.report_state();
    }

    /// Puts `config` in force: what is known of members that stay is kept
    /// (rebuilt by `_id`, and only at the same host: what a member's old
    /// host said is not its new one's), an election in progress is
    /// abandoned (MongoDB cancels elections around a reconfig: the
    /// candidate may not be electable afterwards), and our role follows our
    /// entry in it. On a primary, a member new to us has an election
    /// timeout to answer before the majority check counts it down, as
    /// MongoDB resets member timeouts on a new configuration (at once, a
    /// primary that added the voter it needed stepped down before the
    /// member could learn the configuration).
    pub(crate) fn install_config(&mut self, config: ReplSetConfig) {
        let old = std::mem::take(&mut self.members);
        let added_at = (self.role == Role::Primary).then_some(self.now);
        self.members = config
            .members
            .iter()
            .map(|m| {
                self.config
                    .index_of(m.id)
                    .filter(|&i| self.config.members[i].host == m.host)
                    .and_then(|i| old.get(i))
                    .cloned()
                    .unwrap_or_else(|| crate::node::MemberData { added_at, ..Default::default() })
            })
            .collect();
        self.config = config;
        self.my_index = self.config.index_of(self.me);
        self.config_oplog_commitment = self.commit_point;
        self.config_fetch = None;
        // Heartbeat at once, as MongoDB restarts heartbeats on a new
        // configuration: peers learn it, and report it, a round trip later.
        self.next_heartbeat_at = self.now;
        self.forget_departed_members();
        if self.role == Role::Candidate {
            self.become_secondary();
        }
        self.end_election(false);
        self.update_role();
    }

    /// Members gone from the configuration leave the sync source, its
    /// deny list and the catch-up tally.
    fn forget_departed_members(&mut self) {
        let config = &self.config;
        self.deny_list.retain(|&(m, _)| config.index_of(m).is_some());
        if self.requested_sync_source.is_some_and(|m| config.index_of(m).is_none()) {
            self.requested_sync_source = None;
        }
        if let Some(catch_up) = &mut self.catch_up {
            catch_up.heard.retain(|&m| config.index_of(m).is_some());
        }
        if self.sync_source.is_some_and(|m| self.config.index_of(m).is_none()) {
            self.clear_sync_source();
        }
    }

    /// Our role under the configuration just installed.
    fn update_role(&mut self) {
        let Some(index) = self.my_index else {
            self.become_removed();
            return;
        };
        let member = &self.config.members[index];
        let (arbiter, electable) = (member.arbiter_only, member.is_electable());
        match self.role {
            Role::Removed => {
                self.role = if arbiter { Role::Arbiter } else { Role::Secondary };
                self.reset_election_timer();
            }
            Role::Primary if !electable => self.become_secondary(),
            Role::Arbiter if !arbiter => {
                self.role = Role::Secondary;
                self.reset_election_timer();
            }
            Role::Secondary if arbiter => {
                self.role = Role::Arbiter;
                self.io_state = None;
            }
            _ => {}
        }
    }

    /// Leaves every role for REMOVED: nothing but heartbeats from now on.
    fn become_removed(&mut self) {
        if matches!(self.role, Role::Primary | Role::Candidate) {
            self.become_secondary();
        }
        self.end_election(false);
        self.clear_sync_source();
        self.requested_sync_source = None;
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        self.role = Role::Removed;
    }
}
