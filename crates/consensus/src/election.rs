//! Elections: dry run (pre-vote, Raft thesis 9.6) then the real vote, with
//! OpTime in place of Raft's index (seed 000 section 3.1 and Appendix A);
//! priority takeover and catch-up takeover (section 4.5.2); election handoff
//! (section 4.5.1); primary catch-up (section 4.3).

use crate::io::Action;
use crate::message::{Heartbeat, Message, VoteRequest, VoteResponse};
use crate::mutation::{self, Mutation};
use crate::node::{CatchUp, Election, Node, Role, PRIORITY_TAKEOVER_FRESHNESS_MS};
use crate::optime::MemberId;

impl Node {
    /// True if this member may stand for election now.
    pub(crate) fn can_stand(&self) -> bool {
        self.config.members[self.my_index].is_electable()
            && self.role == Role::Secondary
            && self.io_state.is_none()
            && !self.rolling_back
            && self.now >= self.no_election_until
    }

    pub(crate) fn check_election_timers(&mut self) {
        if self.election.is_some() {
            // An election that has not finished within an election timeout
            // is abandoned; the timer then decides when to try again.
            if self.now >= self.election_deadline {
                self.election = None;
                if self.role == Role::Candidate {
                    self.become_secondary();
                } else {
                    self.reset_election_timer();
                }
            }
            return;
        }
        if !self.can_stand() {
            self.priority_takeover_at = None;
            self.catch_up_takeover_at = None;
            return;
        }
        if self.now >= self.election_deadline {
            self.start_election(true);
            return;
        }
        self.check_priority_takeover();
        self.check_catch_up_takeover();
    }

    /// A member with a higher priority than the primary, and nearly caught
    /// up with it, stands after a delay that grows with its priority rank,
    /// so that the highest-priority member goes first.
    fn check_priority_takeover(&mut self) {
        let Some(p) = self.known_primary_index() else {
            self.priority_takeover_at = None;
            return;
        };
        let mine = self.config.members[self.my_index].priority;
        let primary_seen = self.members[p].seen_applied;
        let fresh = self.last_applied.term == primary_seen.term
            && self.last_applied.timestamp.0 + PRIORITY_TAKEOVER_FRESHNESS_MS >= primary_seen.timestamp.0;
        if mine <= self.config.members[p].priority || !fresh {
            self.priority_takeover_at = None;
            return;
        }
        let rank = self
            .config
            .members
            .iter()
            .filter(|m| m.is_electable() && m.priority > mine)
            .count() as u64;
        let delay = (rank + 1) * self.config.settings.election_timeout_ms / 2 + self.jitter_ms;
        let at = *self.priority_takeover_at.get_or_insert(self.now.plus(delay));
        if self.now >= at {
            self.priority_takeover_at = None;
            self.start_election(true);
        }
    }

    /// A primary still catching up (it has not written in its term) while
    /// this member is ahead of it: after `catchUpTakeoverDelayMillis` this
    /// member stands, so that the fresher log wins instead of waiting for
    /// the catch-up timeout.
    fn check_catch_up_takeover(&mut self) {
        let Some(delay) = self.config.settings.catch_up_takeover_delay_ms else { return };
        let Some(p) = self.known_primary_index() else {
            self.catch_up_takeover_at = None;
            return;
        };
        let primary = &self.members[p];
        let catching_up = primary.seen_applied.term < primary.term;
        if !catching_up || self.last_applied <= primary.seen_applied {
            self.catch_up_takeover_at = None;
            return;
        }
        let at = *self.catch_up_takeover_at.get_or_insert(self.now.plus(delay));
        if self.now >= at {
            self.catch_up_takeover_at = None;
            self.start_election(true);
        }
    }

    /// Starts a dry run (term unchanged, nothing recorded by voters) or a
    /// real election (term raised, own vote made durable first).
    pub(crate) fn start_election(&mut self, dry_run: bool) {
        assert!(self.config.members[self.my_index].is_electable());
        let term = if dry_run {
            self.term + 1
        } else {
            self.term += 1;
            self.voted_for = Some(self.me);
            self.role = Role::Candidate;
            self.out.push(Action::PersistTermAndVote { term: self.term, voted_for: Some(self.me) });
            self.term
        };
        self.election = Some(Election { term, dry_run, granted: vec![self.me] });
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        self.reset_election_timer();
        let request = VoteRequest {
            term,
            candidate: self.me,
            last_applied: self.last_applied,
            config_version: self.config.version,
            dry_run,
        };
        for (index, member) in self.config.members.iter().enumerate() {
            if index != self.my_index && member.is_voter() {
                self.out.push(Action::Send { to: member.id, message: Message::RequestVote(request.clone()) });
            }
        }
        self.count_votes();
    }

    pub(crate) fn on_request_vote(&mut self, from: MemberId, request: VoteRequest) {
        let (granted, reason) = self.decide_vote(from, &request);
        let persist_vote = granted && !request.dry_run;
        let persist_late = persist_vote && mutation::on(Mutation::VotePersistedAfterReply);
        if persist_vote {
            self.voted_for = Some(request.candidate);
            // The vote must be durable before the reply that grants it: a
            // voter that crashes after replying must not vote again in this
            // term after the restart.
            if !persist_late {
                self.out.push(Action::PersistTermAndVote { term: self.term, voted_for: self.voted_for });
            }
            self.reset_election_timer();
        }
        let response = VoteResponse {
            term: self.term,
            request_term: request.term,
            dry_run: request.dry_run,
            granted,
            reason,
        };
        self.out.push(Action::Send { to: from, message: Message::VoteResponse(response) });
        if persist_late {
            self.out.push(Action::PersistTermAndVote { term: self.term, voted_for: self.voted_for });
        }
    }

    /// Raft's RequestVote receiver rules with OpTime for index.
    fn decide_vote(&self, from: MemberId, request: &VoteRequest) -> (bool, &'static str) {
        if !self.config.members[self.my_index].is_voter() {
            return (false, "not a voter");
        }
        if request.candidate != from || !self.config.member(from).is_some_and(|m| m.is_electable()) {
            return (false, "candidate not electable");
        }
        if request.config_version != self.config.version {
            return (false, "config version differs");
        }
        if request.dry_run && request.term <= self.term {
            return (false, "term not newer");
        }
        if !request.dry_run && request.term < self.term {
            return (false, "stale term");
        }
        if !request.dry_run && self.voted_for.is_some_and(|v| v != request.candidate) {
            return (false, "already voted");
        }
        if request.last_applied < self.last_applied {
            return (false, "candidate oplog behind");
        }
        (true, "")
    }

    pub(crate) fn on_vote_response(&mut self, from: MemberId, response: VoteResponse) {
        let Some(election) = &mut self.election else { return };
        if !response.granted || response.dry_run != election.dry_run || response.request_term != election.term {
            return;
        }
        if !self.config.member(from).is_some_and(|m| m.is_voter()) {
            return;
        }
        if !election.granted.contains(&from) {
            election.granted.push(from);
        }
        self.count_votes();
    }

    fn count_votes(&mut self) {
        let Some(election) = &self.election else { return };
        if election.granted.len() < self.config.majority() {
            return;
        }
        if election.dry_run {
            // The term may have moved while the dry run was out.
            let still_current = election.term == self.term + 1;
            self.election = None;
            if still_current && self.can_stand() {
                self.start_election(false);
            }
        } else {
            assert_eq!(election.term, self.term);
            assert_eq!(self.voted_for, Some(self.me));
            self.become_primary();
        }
    }

    fn become_primary(&mut self) {
        // A primary's log only grows while it is primary; Leader
        // Completeness and the rollback rule rely on it.
        assert!(!self.rolling_back, "elected while rolling back");
        self.role = Role::Primary;
        self.election = None;
        self.catch_up = Some(CatchUp { started_at: self.now, target: self.last_applied, responded: vec![self.me] });
        // Heartbeat at once to learn how far behind the freshest member we are.
        self.next_heartbeat_at = self.now;
        self.report_state();
        self.send_heartbeats_if_due();
    }

    pub(crate) fn note_catch_up_response(&mut self, index: usize, heartbeat: &Heartbeat) {
        let voter = self.config.members[index].is_voter();
        let id = self.config.members[index].id;
        let Some(catch_up) = &mut self.catch_up else { return };
        if heartbeat.term > self.term {
            return;
        }
        catch_up.target = catch_up.target.max(heartbeat.last_applied);
        if voter && !catch_up.responded.contains(&id) {
            catch_up.responded.push(id);
        }
    }

    /// Catch-up ends when a majority has answered and we have the freshest
    /// entry any of them had, or when `catchUpTimeoutMillis` passes; the
    /// primary then writes the first entry of its term and takes writes.
    pub(crate) fn check_catch_up(&mut self) {
        let Some(catch_up) = &self.catch_up else { return };
        if self.append_in_flight {
            return;
        }
        let timeout = self.config.settings.catch_up_timeout_ms;
        let timed_out = timeout.is_some_and(|t| self.now.since(catch_up.started_at) >= t);
        let caught_up = catch_up.responded.len() >= self.config.majority() && self.last_applied >= catch_up.target;
        if !(timed_out || caught_up) {
            return;
        }
        self.catch_up = None;
        if self.sync_source.take().is_some() {
            self.out.push(Action::SetSyncSource(None));
        }
        let noop = self.next_optime();
        self.out.push(Action::WriteNoop(noop));
        if self.step_down.is_none() {
            self.set_writable(true);
        }
    }

    /// Election handoff: the old primary asks us to stand without a dry run.
    pub(crate) fn on_step_up(&mut self, term: u64) {
        if term == self.term && self.can_stand() && self.election.is_none() {
            self.start_election(false);
        }
    }
}
