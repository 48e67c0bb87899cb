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

use crate::io::{Action, PullBatch};
use crate::message::{Message, MemberPosition, UpdatePosition};
use crate::node::{Node, Role};
use crate::optime::{MemberId, OpTime};

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
        } else if last <= self.last_applied {
            self.deny(batch.source);
            self.clear_sync_source();
        } else if self.role == Role::Primary {
            // A primary never rolls back: catch-up gives up on this source.
            self.deny(batch.source);
            self.clear_sync_source();
        } else {
            self.rolling_back = true;
            self.rollback_source_commit_point = batch.source_commit_point;
            self.out.push(Action::FindCommonPoint { source: batch.source });
            self.report_state();
        }
    }

    /// Rolls back only against a source whose branch provably holds every
    /// entry committed in a term this member knows of:
    /// - the source's commit point lies past the common point: committed
    ///   entries continue on the source's branch, so none of ours after the
    ///   common point is committed at all; or
    /// - the source is the primary of our current term: by Leader
    ///   Completeness it holds everything committed in earlier terms, and
    ///   everything committed in this term it wrote itself.
    ///
    /// A secondary whose log is merely newer (the rule in seed 000 3.2.1)
    /// may sit on a dead branch it has not rolled back yet; following it
    /// removed committed entries in the simulator (README, bugs found).
    pub(crate) fn on_common_point_found(&mut self, source: MemberId, common_point: OpTime) {
        assert!(self.rolling_back);
        assert!(common_point <= self.last_applied);
        if common_point == self.last_applied {
            // The source's oplog changed since the batch (it rolled back
            // itself and now holds our whole log): nothing to undo. Found by
            // the simulator (seed 107696, 7 members).
            self.rolling_back = false;
            self.report_state();
            return;
        }
        let source_is_primary = self
            .known_primary_index()
            .is_some_and(|p| self.config.members[p].id == source);
        if common_point < self.rollback_source_commit_point || source_is_primary {
            self.out.push(Action::Rollback { common_point });
            return;
        }
        self.rolling_back = false;
        self.deny(source);
        self.clear_sync_source();
        self.report_state();
    }

    pub(crate) fn on_pull_failed(&mut self, source: MemberId) {
        if self.sync_source == Some(source) {
            self.deny(source);
            self.clear_sync_source();
        }
    }

    pub(crate) fn on_appended(&mut self, last_applied: OpTime) {
        assert!(last_applied >= self.last_applied, "appends only extend the oplog");
        self.last_applied = last_applied;
        self.last_written = self.last_written.max(last_applied);
        self.append_in_flight = false;
        self.positions_dirty = true;
        // Entries of a newer term mean a newer election happened.
        self.observe_term(last_applied.term);
        if let Some(commit_point) = self.pending_source_commit_point.take() {
            self.learn_commit_point(commit_point, true);
        }
        self.update_commit_point_as_primary();
    }

    pub(crate) fn on_durable(&mut self, last_durable: OpTime) {
        assert!(last_durable >= self.last_durable, "durability only moves forward");
        assert!(last_durable <= self.last_applied, "durable past the oplog's end");
        self.last_durable = last_durable;
        self.positions_dirty = true;
        self.update_commit_point_as_primary();
    }

    pub(crate) fn on_rollback_complete(&mut self, common_point: OpTime) {
        assert!(self.rolling_back);
        assert!(common_point <= self.last_applied);
        // Rolling back a committed entry would break NeverRollbackCommitted.
        assert!(common_point >= self.commit_point, "rollback below the commit point");
        self.rolling_back = false;
        self.last_applied = common_point;
        self.last_written = common_point;
        self.last_durable = self.last_durable.min(common_point);
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
    /// newer term.
    pub(crate) fn merge_position(&mut self, position: MemberPosition) {
        // A position in a newer term proves a newer primary exists.
        self.observe_term(position.applied.term.max(position.durable.term));
        let Some(index) = self.config.index_of(position.member) else { return };
        if index == self.my_index || !self.config.members[index].is_data_bearing() {
            return;
        }
        let member = &mut self.members[index];
        if position.applied > member.applied || position.durable > member.durable {
            member.applied = member.applied.max(position.applied);
            member.durable = member.durable.max(position.durable);
            self.positions_dirty = true;
        }
    }

    /// Positions known here, own included, for an UpdatePosition.
    fn positions(&self) -> Vec<MemberPosition> {
        let mut positions = Vec::with_capacity(self.members.len());
        for (index, member) in self.config.members.iter().enumerate() {
            let (applied, durable) = if index == self.my_index {
                (self.last_applied, self.last_durable)
            } else {
                (self.members[index].applied, self.members[index].durable)
            };
            if member.is_data_bearing() && !applied.is_null() {
                positions.push(MemberPosition { member: member.id, applied, durable });
            }
        }
        positions
    }

    /// Reports positions to the sync source when they changed, and at least
    /// once per heartbeat interval so that a lost report is repaired.
    pub(crate) fn send_update_position_if_due(&mut self) {
        let Some(source) = self.sync_source else { return };
        if self.role == Role::Primary {
            return;
        }
        if !self.positions_dirty && self.now < self.next_update_position_at {
            return;
        }
        self.positions_dirty = false;
        self.next_update_position_at = self.now.plus(self.config.settings.heartbeat_interval_ms);
        let update = UpdatePosition { term: self.term, positions: self.positions() };
        self.out.push(Action::Send { to: source, message: Message::UpdatePosition(update) });
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
            .map(|(i, _)| if i == self.my_index { self.last_durable } else { self.members[i].durable })
            .collect();
        durable.sort_unstable_by(|a, b| b.cmp(a));
        durable[self.config.write_majority() - 1]
    }

    pub(crate) fn update_commit_point_as_primary(&mut self) {
        if self.role != Role::Primary {
            return;
        }
        let candidate = self.majority_durable();
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
    }
}
