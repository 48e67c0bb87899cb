//! A REMOVED member: one whose configuration does not contain it (a
//! reconfig removed it, or it restarted with such a configuration). It
//! takes no part in elections, replication or commitment; it keeps
//! heartbeating the members of its configuration and answering their
//! heartbeats, so that it learns of a configuration that adds it back, and
//! it finishes what its oplog was doing when it was removed.

use crate::config::MemberId;
use crate::error::{StepDownError, StepUpError};
use crate::io::{Action, Event};
use crate::message::Message;
use crate::node::Node;

impl Node {
    /// `Node::step` for a REMOVED member.
    pub(crate) fn step_removed(&mut self, event: Event) {
        match event {
            Event::Tick { election_jitter_ms } => self.jitter_ms = election_jitter_ms,
            Event::Receive { from, message } => self.on_receive_while_removed(from, message),
            Event::Appended { last_applied, wall_ms } => self.on_appended(last_applied, wall_ms),
            Event::Durable { last_durable, wall_ms } => self.on_durable(last_durable, wall_ms),
            Event::RollbackComplete { common_point, wall_ms } => self.on_rollback_complete(common_point, wall_ms),
            // A rollback decided before the removal ends here, undone.
            Event::CommonPointFound { .. } | Event::RollbackFailed { .. } => {
                self.rolling_back = false;
                self.report_state();
            }
            Event::Pulled(_)
            | Event::PullFailed { .. }
            | Event::VoteRequestFailed { .. }
            | Event::HeartbeatFailed { .. }
            | Event::SyncFrom { .. } => {}
            Event::StepDown(_) => self.out.push(Action::StepDownFinished(Err(StepDownError::NotPrimary))),
            Event::StepUpRequest => self.out.push(Action::StepUpFinished(Err(StepUpError::NotElectable))),
            Event::ReportState(state) => self.on_report_state(state),
            Event::Reconfig { config, force, answered } => self.on_reconfig(config, force, &answered),
            Event::ConfigReceived { config } => self.on_config_received(config),
            Event::Freeze { until } => self.on_freeze(until),
        }
    }

    /// Heartbeats from members of our configuration are recorded (their
    /// term too, so that a member added back does not start far behind);
    /// everything else is ignored.
    fn on_receive_while_removed(&mut self, from: MemberId, message: Message) {
        let Some(index) = self.config.index_of(from) else {
            self.on_receive_from_outsider(from, message);
            return;
        };
        self.members[index].heard_at = Some(self.now);
        match message {
            Message::HeartbeatRequest(hb) => {
                self.members[index].heartbeat_request_at = Some(self.now);
                self.observe_term(hb.term);
                self.record_peer(index, &hb);
                self.out.push(Action::Send {
                    to: from,
                    message: Message::HeartbeatResponse(self.heartbeat()),
                });
            }
            Message::HeartbeatResponse(hb) => {
                self.note_heartbeat_response(index);
                self.observe_term(hb.term);
                self.record_peer(index, &hb);
            }
            _ => {}
        }
    }
}
