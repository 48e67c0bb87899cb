//! Pulls, positions and the commit rule (seed 000 sections 3.2 and 3.3).
//!
//! The overlap check: a batch whose first entry is our last entry extends
//! our log; a batch that does not overlap but ends later means our log
//! diverged and must be rolled back to the common point; anything else
//! means the source is not ahead of us and another must be chosen.
//!
//! The commit rule: an entry is committed when a majority of voting members
//! report a durable position at or past it AND it belongs to the primary's
//! current term. Positions arrive by UpdatePosition carrying the sender's
//! term; a higher term makes the primary step down before it counts them.

use crate::config::MemberId;
use crate::io::{Action, PullBatch};
use crate::message::{MemberPosition, Message, UpdatePosition};
use crate::mutation::{self, Mutation};
use crate::node::{Node, Role};
use slipstream_clock::OpTime;

impl Node {
    pub(crate) fn on_pulled(&mut self, batch: PullBatch) {
        if self.sync_source != Some(batch.source) || self.rolling_back || self.append_in_flight {
            return;
        }
        self.observe_term(batch.source_term);
        if self.sync_source != Some(batch.source) {
            return;
        }
        let (Some(first), Some(last)) = (batch.first, batch.last) else {
            if batch.source_last > self.last_applied && !self.last_applied.is_null() {
                // Nothing at or after our last timestamp, yet a newer last
                // entry (of a later term: the source's new primary wrote
                // less than our old one did): our last entries are not on
                // its log, as MongoDB's fetcher concludes from an empty
                // first batch. Waiting for the source to write past our
                // timestamp left a diverged member unrolled for as long.
                self.on_diverged(batch.source);
                return;
            }
            // The source has nothing at or after our last timestamp: it is
            // behind us (perhaps it rolled back).
            self.deny(batch.source);
            self.clear_sync_source();
            return;
        };
        assert!(first <= last);
        if first == self.last_applied || self.last_applied.is_null() {
            if last > self.last_applied {
                self.sync_source_idle_since = None;
                self.append_in_flight = true;
                self.pending_source_commit_point = Some(batch.source_commit_point);
                self.out.push(Action::AppendBatch { source: batch.source });
            } else {
                self.sync_source_idle_since.get_or_insert(self.now);
                self.learn_commit_point(batch.source_commit_point, true);
            }
        } else if batch.source_last.max(last) <= self.last_applied {
            // The source does not continue our log and holds nothing newer.
            self.deny(batch.source);
            self.clear_sync_source();
        } else {
            self.on_diverged(batch.source);
        }
    }

    /// The source holds a newer log that does not continue ours: look for
    /// the common point, on the way to a rollback.
    fn on_diverged(&mut self, source: MemberId) {
        if self.role != Role::Secondary {
            // A primary never rolls back: catch-up gives up on this source.
            // Nor does a candidate, which could win while its log shrinks.
            self.deny(source);
            self.clear_sync_source();
        } else {
            self.rolling_back = true;
            self.out.push(Action::FindCommonPoint { source });
            self.report_state();
        }
    }

    /// The second half of the overlap check: the logs share `common_point`,
    /// and this member's entries after it (the divergent suffix) would be
    /// truncated in favour of the source's branch. `source_last` and
    /// `source_commit_point` were read from the source together with the
    /// search (see `Event::CommonPointFound`).
    pub(crate) fn on_common_point_found(
        &mut self,
        source: MemberId,
        common_point: OpTime,
        source_last: OpTime,
        source_commit_point: OpTime,
    ) {
        assert!(self.rolling_back);
        assert!(common_point <= self.last_applied);
        assert!(
            common_point <= source_last,
            "the common point is an entry of the source's log"
        );
        assert!(
            source_commit_point <= source_last,
            "the source's commit point is in its log"
        );
        if common_point == self.last_applied {
            // The source's oplog changed since the batch (it rolled back
            // itself and now holds our whole log): nothing to undo. Found by
            // the simulator (seed 107696, 7 members).
            self.rolling_back = false;
            self.report_state();
            return;
        }
        // An entry of a newer term proves a newer election.
        self.observe_term(source_last.term);
        if self.rollback_is_proven_safe(source, common_point, source_last, source_commit_point) {
            self.out.push(Action::Rollback { common_point });
            return;
        }
        self.rolling_back = false;
        self.deny(source);
        self.clear_sync_source();
        self.report_state();
    }

    /// True if no entry of our divergent suffix can have been committed in
    /// a term this member knows of (a term at or below ours), so that
    /// truncating it removes nothing committed. Committed entries form one
    /// sequence, so it is enough to show this for the suffix's first entry,
    /// `d1`, whose only possible predecessor in any log is `common_point`
    /// (Log Matching). Either fact, both read from the source's oplog at one
    /// moment, proves it:
    ///
    /// 1. **The source's commit point lies past the common point.** The
    ///    committed sequence continues with the source's entry after the
    ///    common point, not with `d1`, so `d1` is never committed.
    /// 2. **The source's last entry lies past the common point and its term
    ///    `u` is at least ours.** The primary of term `u` wrote that entry, so
    ///    its log then held the source's log up to it (Log Matching): the
    ///    common point followed by the source's next entry, which is not
    ///    `d1`. A primary only appends while it is primary, so `d1` was not in
    ///    its log at any time since its election. By Leader Completeness
    ///    nothing committed before term `u` is missing from that log, so `d1`
    ///    was not committed before `u`; in term `u` only that log's entries
    ///    commit. So `d1` is committed in no term up to `u`, and `u` is at
    ///    least every term we know of. The same argument makes our own commit
    ///    point lie at or before the common point (asserted on completion).
    ///
    /// Seed 000 (section 3.2.1 and Appendix A) rolls back whenever the
    /// source's branch is newer. A secondary may still sit on a dead branch
    /// of an older term whose last OpTime is newer than ours, and following
    /// it removed entries committed in a term this member knew of (README,
    /// bug 3). Fact 1 alone deadlocks when the commit needs this member
    /// (P-S-A, bug 4), which the earlier rule repaired by also trusting the
    /// primary of our own term, known from heartbeats. That still left a
    /// member stuck when a lasting partial partition cut it off from the
    /// primary and its only source was a secondary whose commit point could
    /// not pass the common point without this member (README, bug 6). Fact
    /// 2 covers both: a secondary that pulled the current primary's entries
    /// carries the proof in its own oplog, and so does the primary itself
    /// once it has written its term's first entry. Unlike "the source is
    /// primary", which came from a heartbeat that can be stale, it rests
    /// only on the oplog read with the search.
    fn rollback_is_proven_safe(
        &self,
        source: MemberId,
        common_point: OpTime,
        source_last: OpTime,
        source_commit_point: OpTime,
    ) -> bool {
        if mutation::on(Mutation::BareRollbackRule) {
            return true;
        }
        let commit_point_past = common_point < source_commit_point;
        if mutation::on(Mutation::RollbackRuleWithoutSourceTerm) {
            let source_is_primary = self
                .known_primary_index()
                .is_some_and(|p| self.config.members[p].id == source);
            return commit_point_past || source_is_primary;
        }
        let branch_of_our_term = common_point < source_last && source_last.term >= self.term;
        commit_point_past || branch_of_our_term
    }

    pub(crate) fn on_pull_failed(&mut self, source: MemberId) {
        if self.sync_source == Some(source) {
            self.deny(source);
            self.clear_sync_source();
        }
    }

    pub(crate) fn on_appended(&mut self, last_applied: OpTime, wall_ms: i64) {
        assert!(last_applied >= self.last_applied, "appends only extend the oplog");
        self.last_applied = last_applied;
        self.last_applied_wall_ms = wall_ms;
        self.append_in_flight = false;
        self.positions_dirty = true;
        // Entries of a newer term mean a newer election happened.
        self.observe_term(last_applied.term);
        self.note_term_start(last_applied, wall_ms);
        if let Some(commit_point) = self.pending_source_commit_point.take() {
            self.learn_commit_point(commit_point, true);
        }
        self.update_commit_point_as_primary();
    }

    /// The first entry of our term as primary (the "new primary" no-op, or
    /// the last of the entries reported with it): `electionTime`.
    fn note_term_start(&mut self, last_applied: OpTime, wall_ms: i64) {
        if self.role != Role::Primary || self.term_start.is_some() || last_applied.term != self.term {
            return;
        }
        self.term_start = Some((last_applied, wall_ms));
        if let Some(metrics) = &mut self.election_metrics {
            metrics.new_term_start = Some((last_applied, wall_ms));
        }
    }

    pub(crate) fn on_durable(&mut self, last_durable: OpTime, wall_ms: i64) {
        assert!(last_durable >= self.last_durable, "durability only moves forward");
        assert!(last_durable <= self.last_applied, "durable past the oplog's end");
        self.last_durable = last_durable;
        self.last_durable_wall_ms = wall_ms;
        self.positions_dirty = true;
        self.update_commit_point_as_primary();
    }

    pub(crate) fn on_rollback_complete(&mut self, common_point: OpTime, wall_ms: i64) {
        assert!(self.rolling_back);
        assert!(common_point <= self.last_applied);
        // Rolling back a committed entry would break NeverRollbackCommitted.
        assert!(common_point >= self.commit_point, "rollback below the commit point");
        self.rolling_back = false;
        self.last_applied = common_point;
        self.last_applied_wall_ms = wall_ms;
        if self.last_durable > common_point {
            self.last_durable = common_point;
            self.last_durable_wall_ms = wall_ms;
        }
        self.positions_dirty = true;
        self.clear_sync_source();
        self.report_state();
    }

    pub(crate) fn on_rollback_failed(&mut self, source: MemberId) {
        assert!(self.rolling_back);
        self.rolling_back = false;
        self.deny(source);
        self.clear_sync_source();
        self.report_state();
    }

    pub(crate) fn on_update_position(&mut self, update: UpdatePosition) {
        for position in &update.positions {
            self.merge_position(*position);
        }
        self.update_commit_point_as_primary();
    }

    /// Keeps the highest applied and durable OpTime per member, applied and
    /// durable separately. Called for UpdatePosition entries and for the
    /// sender's own positions in heartbeats; the message's term has been
    /// observed first, so a primary never counts a position sent under a
    /// newer term. Members outside our configuration are skipped.
    pub(crate) fn merge_position(&mut self, position: MemberPosition) {
        // A position in a newer term proves a newer primary exists.
        self.observe_term(position.applied.term.max(position.durable.term));
        let Some(index) = self.config.index_of(position.member) else {
            return;
        };
        if Some(index) == self.my_index || !self.config.members[index].is_data_bearing() {
            return;
        }
        let member = &mut self.members[index];
        if position.applied > member.applied {
            member.applied = position.applied;
            member.applied_wall_ms = position.applied_wall_ms;
            self.positions_dirty = true;
        }
        if position.durable > member.durable {
            member.durable = position.durable;
            member.durable_wall_ms = position.durable_wall_ms;
            self.positions_dirty = true;
        }
    }

    /// Positions known here, own included, for an UpdatePosition.
    fn positions(&self) -> Vec<MemberPosition> {
        let mut positions = Vec::with_capacity(self.members.len());
        for (index, member) in self.config.members.iter().enumerate() {
            let position = if Some(index) == self.my_index {
                MemberPosition {
                    member: member.id,
                    applied: self.last_applied,
                    applied_wall_ms: self.last_applied_wall_ms,
                    durable: self.last_durable,
                    durable_wall_ms: self.last_durable_wall_ms,
                }
            } else {
                let data = &self.members[index];
                MemberPosition {
                    member: member.id,
                    applied: data.applied,
                    applied_wall_ms: data.applied_wall_ms,
                    durable: data.durable,
                    durable_wall_ms: data.durable_wall_ms,
                }
            };
            if member.is_data_bearing() && !position.applied.is_null() {
                positions.push(position);
            }
        }
        positions
    }

    /// Reports positions to the sync source when they changed, and at least
    /// once per heartbeat period so that a lost report is repaired and the
    /// sync source keeps hearing from us (`Settings::heartbeat_period_ms`).
    pub(crate) fn send_update_position_if_due(&mut self) {
        let Some(source) = self.sync_source else { return };
        if self.role == Role::Primary {
            return;
        }
        if !self.positions_dirty && self.now < self.next_update_position_at {
            return;
        }
        self.positions_dirty = false;
        self.next_update_position_at = self.now.plus(self.config.settings.heartbeat_period_ms());
        let update = UpdatePosition {
            term: self.term,
            positions: self.positions(),
        };
        self.out.push(Action::Send {
            to: source,
            message: Message::UpdatePosition(update),
        });
    }

    /// The durable position that the write majority of data-bearing voters
    /// has reached (`ReplSetConfig::write_majority`-th highest).
    pub(crate) fn majority_durable(&self) -> OpTime {
        let mut durable: Vec<OpTime> = self
            .config
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_voter() && m.is_data_bearing())
            .map(|(i, _)| {
                if Some(i) == self.my_index {
                    self.last_durable
                } else {
                    self.members[i].durable
                }
            })
            .collect();
        durable.sort_unstable_by(|a, b| b.cmp(a));
        durable[self.config.write_majority() - 1]
    }

    pub(crate) fn update_commit_point_as_primary(&mut self) {
        if self.role != Role::Primary || !self.may_commit_in_config() {
            return;
        }
        // No member holds an entry of our term past our own last one: a
        // report that says otherwise is not believed beyond it (MongoDB's
        // commit point never passes the primary's last applied entry).
        let candidate = self.majority_durable().min(self.last_applied);
        // Only an entry of our own term commits by counting (seed 000 3.3);
        // earlier entries commit with it.
        if candidate.term == self.term {
            self.advance_commit_point(candidate);
        }
    }

    /// A commit point learned from another member. From the sync source
    /// right after a pull, our log is a prefix of the source's, so any
    /// commit point up to our last entry is on our log. From anyone else it
    /// is only safe when our last entry is in the commit point's term: then
    /// our log is a prefix of that term's primary's log.
    pub(crate) fn learn_commit_point(&mut self, commit_point: OpTime, from_sync_source: bool) {
        if self.role == Role::Primary && self.catch_up.is_none() {
            return;
        }
        if !from_sync_source && commit_point.term != self.last_applied.term {
            return;
        }
        self.advance_commit_point(commit_point.min(self.last_applied));
    }

    fn advance_commit_point(&mut self, commit_point: OpTime) {
        if commit_point <= self.commit_point {
            return;
        }
        assert!(commit_point <= self.last_applied, "commit point past the oplog's end");
        self.commit_point = commit_point;
        self.out.push(Action::AdvanceCommitPoint(commit_point));
        if self.role == Role::Primary && commit_point.term == self.term {
            if let Some(metrics) = &mut self.election_metrics {
                metrics.w_majority_available_at.get_or_insert(self.now);
            }
        }
    }
}
