//! Elections: dry run (pre-vote, Raft thesis 9.6) then the real vote, with
//! OpTime in place of Raft's index (seed 000 section 3.1 and Appendix A);
//! priority takeover and catch-up takeover (section 4.5.2); election handoff
//! (section 4.5.1); the single voter's prompt election; primary catch-up
//! (section 4.3), then the term's configuration and no-op.

use slipstream_clock::OpTime;

use crate::config::MemberId;
use crate::election_metrics::{CatchUpOutcome, ElectionCandidateMetrics, ElectionReason};
use crate::error::StepUpError;
use crate::io::Action;
use crate::message::{Heartbeat, Message, VoteRequest, VoteResponse};
use crate::mutation::{self, Mutation};
use crate::node::{CatchUp, Election, Node, Role, PRIORITY_TAKEOVER_FRESHNESS_MS};

impl Node {
    /// True if this member may stand for election now.
    pub(crate) fn can_stand(&self) -> bool {
        self.role == Role::Secondary
            && self.config.members[self.my_index()].is_electable()
            && self.io_state.is_none()
            && !self.rolling_back
            && self.now >= self.no_election_until
            && !self.awaits_first_entry()
    }

    /// True while our oplog is empty although a member we heard from holds
    /// entries: we have not synced yet (in MongoDB such a member is in
    /// initial sync, STARTUP2, and never stands). Elected, we would start a
    /// history without the entries the others hold (the initiating set's
    /// no-op, whatever the initiator held), and they could only undo them:
    /// the initiator's rollback finds no common point. A set whose members
    /// all start empty (the simulator's) elects as before.
    fn awaits_first_entry(&self) -> bool {
        self.last_applied == OpTime::NULL
            && self.members.iter().any(|m| m.seen_applied != OpTime::NULL || m.applied != OpTime::NULL)
    }

    pub(crate) fn check_election_timers(&mut self) {
        if self.election.is_some() {
            // An election that has not finished within an election timeout
            // is abandoned; the timer then decides when to try again.
            if self.now >= self.election_deadline {
                self.lose_election();
                self.reset_election_timer();
            }
            return;
        }
        if !self.can_stand() {
            self.priority_takeover_at = None;
            self.catch_up_takeover_at = None;
            return;
        }
        if self.config.is_single_electable_voter(self.me) {
            self.start_election(true, ElectionReason::SingleNode);
            return;
        }
        if self.now >= self.election_deadline {
            self.start_election(true, ElectionReason::ElectionTimeout);
            return;
        }
        self.check_priority_takeover();
        self.check_catch_up_takeover();
    }

    /// A member with a higher priority than the primary, and nearly caught
    /// up with it (by the wall-clock dates of their last applied entries, as
    /// MongoDB's freshness window), stands after a delay that grows with its
    /// priority rank, so that the highest-priority member goes first.
    fn check_priority_takeover(&mut self) {
        let Some(p) = self.known_primary_index() else {
            self.priority_takeover_at = None;
            return;
        };
        let mine = self.config.members[self.my_index()].priority;
        let primary = &self.members[p];
        let fresh = self.last_applied.term == primary.seen_applied.term
            && self.last_applied_wall_ms + PRIORITY_TAKEOVER_FRESHNESS_MS >= primary.seen_applied_wall_ms;
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
            self.start_election(true, ElectionReason::PriorityTakeover);
        }
    }

    /// A primary still catching up (it has not written in its term) while
    /// this member is ahead of it: after `catchUpTakeoverDelayMillis` this
    /// member stands, so that the fresher log wins instead of waiting for
    /// the catch-up timeout.
    fn check_catch_up_takeover(&mut self) {
        let Some(delay) = self.config.settings.catch_up_takeover_delay_ms else {
            return;
        };
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
            self.start_election(true, ElectionReason::CatchUpTakeover);
        }
    }

    /// Starts a dry run (term unchanged, nothing recorded by voters) or a
    /// real election (term raised, own vote made durable first).
    pub(crate) fn start_election(&mut self, dry_run: bool, reason: ElectionReason) {
        assert!(self.config.members[self.my_index()].is_electable());
        assert!(self.election.is_none(), "one election at a time");
        let term = if dry_run {
            self.term + 1
        } else {
            let prior_primary = self.known_primary_index().map(|p| self.config.members[p].id);
            self.term += 1;
            self.voted_for = Some(self.me);
            self.role = Role::Candidate;
            self.out.push(Action::PersistTermAndVote {
                term: self.term,
                voted_for: Some(self.me),
            });
            self.election_metrics = Some(self.candidate_metrics(reason, prior_primary));
            self.term
        };
        self.out.push(Action::ElectionStarted { term, reason, dry_run });
        self.election = Some(Election {
            term,
            dry_run,
            reason,
            granted: vec![self.me],
            refused: Vec::new(),
        });
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        self.reset_election_timer();
        let request = VoteRequest {
            term,
            candidate: self.me,
            last_applied: self.last_applied,
            config_version: self.config.version,
            config_term: self.config.term,
            dry_run,
        };
        for (index, member) in self.config.members.iter().enumerate() {
            if index != self.my_index() && member.is_voter() {
                self.out.push(Action::Send {
                    to: member.id,
                    message: Message::RequestVote(request.clone()),
                });
            }
        }
        self.count_votes();
    }

    /// What `electionCandidateMetrics` records when a real election starts.
    fn candidate_metrics(&self, reason: ElectionReason, prior_primary: Option<MemberId>) -> ElectionCandidateMetrics {
        ElectionCandidateMetrics {
            reason,
            started_at: self.now,
            term: self.term,
            last_committed_at_election: self.commit_point,
            last_applied_at_election: self.last_applied,
            votes_needed: self.config.majority(),
            priority_at_election: self.config.members[self.my_index()].priority,
            election_timeout_ms: self.config.settings.election_timeout_ms,
            prior_primary,
            won_at: None,
            target_catch_up: None,
            catch_up: None,
            catch_up_ms: None,
            new_term_start: None,
            w_majority_available_at: None,
        }
    }

    /// Ends the attempt in progress, if any: one `ElectionFinished` per
    /// attempt, and the answer to a waiting `replSetStepUp`.
    pub(crate) fn end_election(&mut self, won: bool) {
        let Some(election) = self.election.take() else { return };
        self.out.push(Action::ElectionFinished {
            term: election.term,
            won,
            reason: election.reason,
        });
        if !won && !election.dry_run {
            self.election_metrics = None;
        }
        for _ in 0..std::mem::take(&mut self.step_up_waiting) {
            let result = if won { Ok(()) } else { Err(StepUpError::ElectionLost) };
            self.out.push(Action::StepUpFinished(result));
        }
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
                self.out.push(Action::PersistTermAndVote {
                    term: self.term,
                    voted_for: self.voted_for,
                });
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
        self.out.push(Action::Send {
            to: from,
            message: Message::VoteResponse(response),
        });
        if persist_late {
            self.out.push(Action::PersistTermAndVote {
                term: self.term,
                voted_for: self.voted_for,
            });
        }
    }

    /// Raft's RequestVote receiver rules with OpTime for index, and MongoDB's
    /// configuration rule: a voter whose configuration is newer than the
    /// candidate's refuses; one whose configuration is older grants (it
    /// fetches the newer one by heartbeat). Safe reconfig makes that enough:
    /// each configuration was committed on a majority of its predecessor
    /// before the next one was written, and consecutive configurations'
    /// majorities overlap, so a candidate two configurations behind meets a
    /// voter with a newer one in any majority it can gather.
    fn decide_vote(&self, from: MemberId, request: &VoteRequest) -> (bool, &'static str) {
        if !self.config.members[self.my_index()].is_voter() {
            return (false, "not a voter");
        }
        let ours = self.config.version_and_term();
        let theirs = request.config_version_and_term();
        if ours.is_newer_than(theirs) {
            return (false, "candidate's config is older than mine");
        }
        // Electability is judged only under the same configuration: an older
        // one of ours may not know the candidate's current priority.
        let same_config = ours == theirs;
        if request.candidate != from || (same_config && !self.config.member(from).is_some_and(|m| m.is_electable())) {
            return (false, "candidate not electable");
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
        self.record_vote(from, response.request_term, response.dry_run, response.granted);
    }

    /// A request the I/O layer could not get answered is a vote not granted.
    pub(crate) fn on_vote_request_failed(&mut self, voter: MemberId, term: i64, dry_run: bool) {
        self.record_vote(voter, term, dry_run, false);
    }

    fn record_vote(&mut self, from: MemberId, term: i64, dry_run: bool, granted: bool) {
        let Some(election) = &mut self.election else { return };
        if dry_run != election.dry_run || term != election.term {
            return;
        }
        if !self.config.member(from).is_some_and(|m| m.is_voter()) {
            return;
        }
        if election.granted.contains(&from) || election.refused.contains(&from) {
            return;
        }
        if granted {
            election.granted.push(from);
        } else {
            election.refused.push(from);
        }
        self.count_votes();
    }

    /// Won with a majority of grants; lost as soon as every voter has
    /// answered without one (MongoDB's vote requester stops once all
    /// responses are in), so that neither the next attempt nor a waiting
    /// `replSetStepUp` waits out the election's deadline.
    fn count_votes(&mut self) {
        let Some(election) = &self.election else { return };
        if election.granted.len() < self.config.majority() {
            if election.granted.len() + election.refused.len() >= self.config.voter_count() {
                self.lose_election();
            }
            return;
        }
        if election.dry_run {
            // The term may have moved while the dry run was out.
            let still_current = election.term == self.term + 1;
            let reason = election.reason;
            if still_current && self.can_stand() {
                // The attempt goes on as the real election.
                self.election = None;
                self.start_election(false, reason);
            } else {
                self.end_election(false);
            }
        } else {
            assert_eq!(election.term, self.term);
            assert_eq!(self.voted_for, Some(self.me));
            self.become_primary();
        }
    }

    /// A dry run lost leaves the member as it was; a real election lost
    /// makes the candidate a secondary again, as at the election deadline.
    fn lose_election(&mut self) {
        if self.role == Role::Candidate {
            self.become_secondary();
        } else {
            self.end_election(false);
        }
    }

    fn become_primary(&mut self) {
        // A primary's log only grows while it is primary; Leader
        // Completeness and the rollback rule rely on it.
        assert!(!self.rolling_back, "elected while rolling back");
        self.role = Role::Primary;
        self.report_state();
        self.end_election(true);
        if let Some(metrics) = &mut self.election_metrics {
            metrics.won_at = Some(self.now);
        }
        self.catch_up = Some(CatchUp {
            started_at: self.now,
            started_from: self.last_applied,
            target: self.last_applied,
            heard: vec![self.me],
        });
        // Heartbeat at once to learn how far behind the freshest member we are.
        self.next_heartbeat_at = self.now;
        self.send_heartbeats_if_due();
        // A single voter (or a zero catch-up timeout) is done already.
        self.check_catch_up();
    }

    pub(crate) fn note_catch_up_response(&mut self, index: usize, heartbeat: &Heartbeat) {
        let id = self.config.members[index].id;
        let Some(catch_up) = &mut self.catch_up else { return };
        if heartbeat.term > self.term {
            return;
        }
        catch_up.target = catch_up.target.max(heartbeat.last_applied);
        if !catch_up.heard.contains(&id) {
            catch_up.heard.push(id);
        }
    }

    /// `Event::HeartbeatFailed`: the member is heard from (down), with no
    /// position to catch up to.
    pub(crate) fn note_catch_up_failure(&mut self, member: MemberId) {
        if self.config.member(member).is_none() {
            return;
        }
        let Some(catch_up) = &mut self.catch_up else { return };
        if !catch_up.heard.contains(&member) {
            catch_up.heard.push(member);
        }
    }

    /// Catch-up ends when every member has answered a heartbeat or failed
    /// to since the election, and we have the freshest entry any of them
    /// had (MongoDB's `latestKnownOpTimeSinceHeartbeatRestart`), or when
    /// `catchUpTimeoutMillis` passes. A majority is not enough: a member
    /// up and ahead of us (an old primary's `w: 1` writes) may be slower to
    /// answer than the members that elected us, and its entries would be
    /// rolled back for nothing. The
    /// primary then raises its configuration's term to its own (MongoDB's
    /// step-up reconfig: a configuration of an older primary can no longer
    /// win), opens writes and writes the first entry of its term.
    pub(crate) fn check_catch_up(&mut self) {
        let Some(catch_up) = &self.catch_up else { return };
        if self.append_in_flight {
            return;
        }
        let timeout = self.config.settings.catch_up_timeout_ms;
        let timed_out = timeout.is_some_and(|t| self.now.since(catch_up.started_at) >= t);
        let all_heard = self.config.members.iter().all(|m| catch_up.heard.contains(&m.id));
        let caught_up = all_heard && self.last_applied >= catch_up.target;
        if !(timed_out || caught_up) {
            return;
        }
        let outcome = match (caught_up, timeout) {
            (false, Some(0)) => CatchUpOutcome::Skipped,
            (false, _) => CatchUpOutcome::TimedOut,
            (true, _) if self.last_applied > catch_up.started_from => CatchUpOutcome::Succeeded,
            (true, _) => CatchUpOutcome::AlreadyCaughtUp,
        };
        if let Some(metrics) = &mut self.election_metrics {
            metrics.target_catch_up = Some(catch_up.target);
            metrics.catch_up = Some(outcome);
            metrics.catch_up_ms = Some(self.now.since(catch_up.started_at));
        }
        self.catch_up = None;
        if self.sync_source.take().is_some() {
            self.out.push(Action::SetSyncSource(None));
        }
        self.raise_config_term_on_step_up();
        if self.step_down.is_none() {
            self.open_for_writes();
        }
    }

    /// Opens writes; the first time in the term, also asks for the term's
    /// no-op (a stepdown that began during catch-up and failed opens them
    /// later, and the no-op follows then).
    pub(crate) fn open_for_writes(&mut self) {
        assert_eq!(self.role, Role::Primary);
        assert!(self.catch_up.is_none());
        self.set_writable(true);
        if !self.term_noop_asked {
            self.term_noop_asked = true;
            self.out.push(Action::WriteNoop);
        }
    }

    /// Election handoff: the old primary asks us to stand without a dry run.
    pub(crate) fn on_step_up(&mut self, term: i64) {
        if term == self.term && self.can_stand() && self.election.is_none() {
            self.start_election(false, ElectionReason::StepUpHandoff);
        }
    }
}
