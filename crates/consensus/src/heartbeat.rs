//! Heartbeats among all members (seed 000 Appendix A, "Heartbeat RPC"):
//! liveness, roles, positions for sync source choice, commit point
//! propagation, configuration propagation, and the primary's check that it
//! still sees a majority.

use crate::config::MemberId;
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
            config_term: self.config.term,
            state: self.state(),
            last_applied: self.last_applied,
            last_applied_wall_ms: self.last_applied_wall_ms,
            last_durable: self.last_durable,
            last_durable_wall_ms: self.last_durable_wall_ms,
            commit_point: self.commit_point,
            sync_source: self.sync_source,
        }
    }

    /// Heartbeats every other member of our configuration once per
    /// period (`Settings::heartbeat_period_ms`; a REMOVED member too: that is how it learns a
    /// configuration that adds it back).
    pub(crate) fn send_heartbeats_if_due(&mut self) {
        if self.now < self.next_heartbeat_at {
            return;
        }
        self.next_heartbeat_at = self.now.plus(self.config.settings.heartbeat_period_ms());
        let heartbeat = self.heartbeat();
        for index in 0..self.config.members.len() {
            if Some(index) == self.my_index {
                continue;
            }
            self.members[index].heartbeat_sent_at = Some(self.now);
            let to = self.config.members[index].id;
            self.out.push(Action::Send {
                to,
                message: Message::HeartbeatRequest(heartbeat.clone()),
            });
        }
    }

    pub(crate) fn on_heartbeat_request(&mut self, index: usize, heartbeat: Heartbeat) {
        self.members[index].heartbeat_request_at = Some(self.now);
        self.record_peer(index, &heartbeat);
        self.act_on_heartbeat(index, &heartbeat, false);
        let to = self.config.members[index].id;
        self.out.push(Action::Send {
            to,
            message: Message::HeartbeatResponse(self.heartbeat()),
        });
    }

    pub(crate) fn on_heartbeat_response(&mut self, index: usize, heartbeat: Heartbeat) {
        self.note_heartbeat_response(index);
        self.record_peer(index, &heartbeat);
        self.act_on_heartbeat(index, &heartbeat, true);
        self.note_catch_up_response(index, &heartbeat);
    }

    /// Round trip and `lastHeartbeat` of a heartbeat response.
    pub(crate) fn note_heartbeat_response(&mut self, index: usize) {
        let member = &mut self.members[index];
        member.heartbeat_response_at = Some(self.now);
        if let Some(sent) = member.heartbeat_sent_at {
            member.rtt_ms = Some(self.now.since(sent));
        }
    }

    /// Steps 1-2 of the receiver implementation: liveness and role, position
    /// for sync source choice, and the configuration the sender holds (a
    /// newer one is fetched).
    pub(crate) fn record_peer(&mut self, index: usize, heartbeat: &Heartbeat) {
        let member = &mut self.members[index];
        member.state = Some(heartbeat.state);
        member.term = heartbeat.term;
        member.seen_applied = heartbeat.last_applied;
        member.seen_applied_wall_ms = heartbeat.last_applied_wall_ms;
        member.sync_source = heartbeat.sync_source;
        member.config = Some(heartbeat.config_version_and_term());
        let from = self.config.members[index].id;
        self.note_peer_config(from, heartbeat.config_version_and_term());
    }

    /// Step 3 and MongoDB's additions: a primary of our term is believed
    /// (a candidate gives up), the commit point of a response is learned,
    /// and the sender's own positions count like an UpdatePosition from it.
    /// A request's commit point is not: MongoDB's heartbeat request carries
    /// none, and a member learns the commit point only from its sync source
    /// and from answers to the heartbeats it sent itself (a request can come
    /// from anyone who names a member).
    fn act_on_heartbeat(&mut self, index: usize, heartbeat: &Heartbeat, learn_commit_point: bool) {
        if heartbeat.state == MemberState::Primary && heartbeat.term == self.term {
            // Two primaries in one term would mean two majorities voted for
            // different candidates in the same term: a broken vote rule. A
            // primary told so by a peer keeps its role (the simulation's
            // checker catches the broken rule; a forged message must not
            // stop the process).
            if self.role == Role::Primary {
                return;
            }
            if self.role == Role::Candidate {
                self.become_secondary();
            }
            // A dry run continues: priority and catch-up takeovers stand
            // against a live primary on purpose.
            self.reset_election_timer();
        }
        if learn_commit_point {
            self.learn_commit_point(heartbeat.commit_point, false);
        }
        // MongoDB's primary also learns positions from heartbeats, which
        // keeps commit going for members that have no sync source.
        let position = MemberPosition {
            member: self.config.members[index].id,
            applied: heartbeat.last_applied,
            applied_wall_ms: heartbeat.last_applied_wall_ms,
            durable: heartbeat.last_durable,
            durable_wall_ms: heartbeat.last_durable_wall_ms,
        };
        self.merge_position(position);
        self.update_commit_point_as_primary();
    }

    /// A member outside our configuration (a removed one, or one added by a
    /// configuration we have not seen yet): its heartbeats are answered and
    /// a newer configuration is fetched from it; its other messages, and its
    /// term, are ignored, since it takes no part in our elections.
    pub(crate) fn on_receive_from_outsider(&mut self, from: MemberId, message: Message) {
        match message {
            Message::HeartbeatRequest(hb) => {
                self.note_peer_config(from, hb.config_version_and_term());
                self.out.push(Action::Send {
                    to: from,
                    message: Message::HeartbeatResponse(self.heartbeat()),
                });
            }
            Message::HeartbeatResponse(hb) => self.note_peer_config(from, hb.config_version_and_term()),
            _ => {}
        }
    }

    /// A primary that cannot see a majority of voters (itself included)
    /// within an election timeout steps down: another primary may exist.
    pub(crate) fn check_primary_sees_majority(&mut self) {
        if self.role != Role::Primary {
            return;
        }
        let timeout = self.config.settings.election_timeout_ms;
        let just_added = |i: usize| self.members[i].added_at.is_some_and(|at| self.now.since(at) < timeout);
        let visible = (0..self.config.members.len())
            .filter(|&i| self.config.members[i].is_voter() && (self.is_live(i) || just_added(i)))
            .count();
        if visible < self.config.majority() {
            let silent = (0..self.config.members.len())
                .filter(|&i| self.config.members[i].is_voter() && !self.is_live(i))
                .map(|i| (self.config.members[i].id, self.members[i].heard_at.map(|t| self.now.since(t))))
                .collect();
            self.out.push(Action::LostMajority { term: self.term, silent });
            self.become_secondary();
        }
    }
}
