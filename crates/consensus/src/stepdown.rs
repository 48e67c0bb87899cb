//! `replSetStepDown` with `secondaryCatchUpPeriodSecs` and `force`, ending
//! in election handoff (seed 000 section 4.5.1).

use crate::config::MemberId;
use crate::error::StepDownError;
use crate::io::{Action, StepDownRequest};
use crate::message::Message;
use crate::node::{Node, Role, StepDownState};
use crate::state::MemberState;
use slipstream_clock::OpTime;

impl Node {
    pub(crate) fn on_step_down(&mut self, request: StepDownRequest) {
        if self.role != Role::Primary {
            self.out.push(Action::StepDownFinished(Err(StepDownError::NotPrimary)));
            return;
        }
        if self.step_down.is_some() {
            self.out
                .push(Action::StepDownFinished(Err(StepDownError::AlreadyInProgress)));
            return;
        }
        // Writes pause so that secondaries can catch up with a fixed target.
        self.set_writable(false);
        let deadline = self.now.plus(request.secondary_catch_up_period_ms);
        self.step_down = Some(StepDownState { deadline, request });
    }

    /// Steps down once an electable secondary has every entry we wrote,
    /// handing the election to it; at the deadline, steps down anyway if
    /// forced, else gives up and takes writes again.
    pub(crate) fn check_step_down(&mut self) {
        let Some(state) = self.step_down else { return };
        assert_eq!(self.role, Role::Primary);
        // Writes stopped with AcceptWrites(false), after which the caller
        // reported the oplog's end: no entry of ours lies past last_applied.
        let successor = self.caught_up_successor(self.last_applied);
        if successor.is_none() && self.now < state.deadline {
            return;
        }
        if successor.is_none() && !state.request.force {
            self.step_down = None;
            if self.catch_up.is_none() {
                self.open_for_writes();
            }
            self.out
                .push(Action::StepDownFinished(Err(StepDownError::ExceededTimeLimit)));
            return;
        }
        let term = self.term;
        self.no_election_until = self.now.plus(state.request.step_down_ms);
        self.step_down = None;
        self.become_secondary();
        // Answered once the new state is published.
        self.out.push(Action::StepDownFinished(Ok(())));
        if let Some(to) = successor {
            self.out.push(Action::Send {
                to,
                message: Message::StepUp { term },
            });
        }
    }

    /// The electable, live secondary with the highest priority (then lowest
    /// `_id`) whose applied position reaches `target`.
    fn caught_up_successor(&self, target: OpTime) -> Option<MemberId> {
        (0..self.config.members.len())
            .filter(|&i| {
                let m = &self.members[i];
                Some(i) != self.my_index
                    && self.config.members[i].is_electable()
                    && self.is_up(i)
                    && m.state == Some(MemberState::Secondary)
                    && m.applied.max(m.seen_applied) >= target
            })
            .max_by(|&a, &b| {
                let pa = self.config.members[a].priority;
                let pb = self.config.members[b].priority;
                pa.total_cmp(&pb)
                    .then(self.config.members[b].id.cmp(&self.config.members[a].id))
            })
            .map(|i| self.config.members[i].id)
    }
}
