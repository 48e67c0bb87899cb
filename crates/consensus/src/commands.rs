//! The decisions behind administrative commands that are not elections or
//! stepdowns themselves: `replSetFreeze` and `replSetStepUp` (from an
//! administrator; the handoff's `StepUp` message is in `election.rs`).
//! `replSetMaintenance` is `Event::ReportState` (`node.rs`).

use crate::election_metrics::ElectionReason;
use crate::error::{NotSecondary, StepUpError};
use crate::io::Action;
use crate::millis::Millis;
use crate::node::{Node, Role};

impl Node {
    /// `replSetFreeze`: no election before `until`; an `until` at or before
    /// now unfreezes, ending a stepdown's wait as well (MongoDB sets its
    /// `_stepDownUntil` to now). A single voter then stands at once
    /// (`check_election_timers`). A primary, or a member running for
    /// election (dry run included), refuses.
    pub(crate) fn on_freeze(&mut self, until: Millis) {
        let refused = match self.role {
            Role::Primary => Some(NotSecondary::Primary),
            Role::Candidate => Some(NotSecondary::RunningForElection),
            _ if self.election.is_some() => Some(NotSecondary::RunningForElection),
            _ => None,
        };
        if let Some(reason) = refused {
            self.out.push(Action::FreezeFinished(Err(reason)));
            return;
        }
        self.no_election_until = if until <= self.now {
            self.now
        } else {
            self.no_election_until.max(until)
        };
        self.out.push(Action::FreezeFinished(Ok(())));
    }

    /// `replSetStepUp` without `skipDryRun`: stand now, dry run first, and
    /// answer once the election is won or lost. A primary answers at once
    /// (unless stepping down); a member already running answers when that
    /// election ends; one that may not stand fails ("Election failed.").
    pub(crate) fn on_step_up_request(&mut self) {
        if self.role == Role::Primary {
            let result = if self.step_down.is_some() {
                Err(StepUpError::ElectionLost)
            } else {
                Ok(())
            };
            self.out.push(Action::StepUpFinished(result));
            return;
        }
        if self.election.is_some() {
            self.step_up_waiting += 1;
            return;
        }
        if !self.can_stand() {
            self.out.push(Action::StepUpFinished(Err(StepUpError::NotElectable)));
            return;
        }
        self.step_up_waiting += 1;
        self.start_election(true, ElectionReason::StepUpRequest);
    }
}
