//! Heartbeats among all members (seed 000 Appendix A, "Heartbeat RPC"):
//! liveness, roles, positions for sync source choice, commit point
//! propagation, and the primary's check that it still sees a majority.

use crate::io::Action;
use crate::message::{Heartbeat, MemberPosition, Message};
use crate::node::{Node, Role};
use crate::state::MemberState;

impl Node {
    /// This member's heartbeat body.
    pub(crate) fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            term: self.term,
            config_version: self.config.version,
            state: self.state(),
            last_applied: self.last_applied,
            last_durable: self.last_durable,
            commit_point: self.commit_point,
            sync_source: self.sync_source,
        }
    }

    pub(crate) fn send_heartbeats_if_due(&mut self) {
        if self.now < self.next_heartbeat_at {
            return;
        }
        self.next_heartbeat_at = self.now.plus(self.config.settings.heartbeat_interval_ms);
        let heartbeat = self.heartbeat();
        for index in 0..self.config.members.len() {
            if index == self.my_index {
                continue;
            }
            self.members[index].heartbeat_sent_at = Some(self.now);
            let to = self.config.members[index].id;
            self.out.push(Action::Send { to, message: Message::HeartbeatRequest(heartbeat.clone()) });
        }
    }

    pub(crate) fn on_heartbeat_request(&mut self, index: usize, heartbeat: Heartbeat) {
        self.record_heartbeat(index, &heartbeat);
        let to = self.config.members[index].id;
        self.out.push(Action::Send { to, message: Message::HeartbeatResponse(self.heartbeat()) });
    }

    pub(crate) fn on_heartbeat_response(&mut self, index: usize, heartbeat: Heartbeat) {
        if let Some(sent) = self.members[index].heartbeat_sent_at {
            self.members[index].rtt_ms = Some(self.now.since(sent));
        }
        self.record_heartbeat(index, &heartbeat);
        self.note_catch_up_response(index, &heartbeat);
    }

    /// Steps 1-3 of the receiver implementation: liveness and role, position
    /// for sync source choice, commit point.
    fn record_heartbeat(&mut self, index: usize, heartbeat: &Heartbeat) {
        let member = &mut self.members[index];
        member.state = Some(heartbeat.state);
        member.term = heartbeat.term;
        member.seen_applied = heartbeat.last_applied;
        member.sync_source = heartbeat.sync_source;
        if heartbeat.state == MemberState::Primary && heartbeat.term == self.term {
            // Two primaries in one term would mean two majorities voted for
            // different candidates in the same term: a broken vote rule.
            assert!(self.role != Role::Primary, "NoTwoPrimariesInSameTerm: term {}", self.term);
            if self.role == Role::Candidate {
                self.become_secondary();
            }
            // A dry run continues: priority and catch-up takeovers stand
            // against a live primary on purpose.
            self.reset_election_timer();
        }
        self.learn_commit_point(heartbeat.commit_point, false);
        // The sender's own positions count like an UpdatePosition from it:
        // MongoDB's primary also learns positions from heartbeats, which
        // keeps commit going for members that have no sync source.
        let position = MemberPosition {
            member: self.config.members[index].id,
            applied: heartbeat.last_applied,
            durable: heartbeat.last_durable,
        };
        self.merge_position(position);
        self.update_commit_point_as_primary();
    }

    /// A primary that cannot see a majority of voters (itself included)
    /// within an election timeout steps down: another primary may exist.
    pub(crate) fn check_primary_sees_majority(&mut self) {
        if self.role != Role::Primary {
            return;
        }
        let visible = (0..self.config.members.len())
            .filter(|&i| self.config.members[i].is_voter() && self.is_up(i))
            .count();
        if visible < self.config.majority() {
            self.become_secondary();
        }
    }
}
