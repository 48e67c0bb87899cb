//! The position reporter: carries the node's `Send UpdatePosition` to the
//! sync source as `replSetUpdatePosition`, one-way (OP_MSG moreToCome: the
//! source answers nothing). At most `UPDATE_POSITIONS_IN_FLIGHT_MAX` are
//! being sent at once; one asked for while all senders are busy replaces any
//! still waiting (the newest positions include the older ones), so reports
//! coalesce under load instead of queueing (seed 000 3.2.3).
//!
//! ```text
//!   Idle --report--> Sending(1) --report--> Sending(2) --report--> Sending(2) + Waiting
//!     ^                 |                      |                         |
//!     +--done, nothing--+                      |  done: send the waiting +
//!        waiting           <--done, nothing----+
//! ```
//!
//! Why one-way: nothing here acts on the answer (a failed report was only
//! logged; the next one, at the latest the keep-alive a heartbeat period
//! later, carries the same positions). Waiting for it cost a reply written
//! by the source and read here for every report, on the path of every
//! majority write: one of each five messages the primary handled per
//! 1-connection majority write. A send is done once its bytes are in the
//! socket; a connection that the source closed while idle is noticed
//! before the send (`Connection::idle_and_open`).
//!
//! Why two senders: a secondary reports its applied position as soon as a
//! batch is applied and its durable position one fsync later. While one
//! send waits (a connection being opened, a full socket) the durable
//! report goes on a second connection at once. Two reports in flight may
//! arrive out of order; the receiver keeps the highest applied and durable
//! position of each member, so order does not matter.

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use parking_lot::Mutex;
use slipstream_consensus::config::MemberId;
use slipstream_consensus::UpdatePosition;

use crate::protocol::encode_update_position;
use crate::replica_set::Shared;

/// Longest one report's send may take (connecting included).
pub const UPDATE_POSITION_TIMEOUT_MS: u64 = 5_000;
/// Reports in flight at once, at most.
pub const UPDATE_POSITIONS_IN_FLIGHT_MAX: usize = 2;

/// A report: the sync source's host and the command.
type Report = (String, Document);

/// The senders and the report waiting for one.
#[derive(Default)]
struct State {
    /// Senders running (each sends until nothing waits).
    senders: usize,
    waiting: Option<Report>,
}

impl State {
    /// Takes a report (replacing any still waiting); true when a new
    /// sender should start for it.
    fn offer(&mut self, report: Report) -> bool {
        self.waiting = Some(report);
        if self.senders >= UPDATE_POSITIONS_IN_FLIGHT_MAX {
            return false;
        }
        self.senders += 1;
        true
    }

    /// The report a sender sends next; `None` ends the sender.
    fn next(&mut self) -> Option<Report> {
        let next = self.waiting.take();
        if next.is_none() {
            assert!(self.senders > 0, "a sender ends that was not counted");
            self.senders -= 1;
        }
        next
    }
}

pub struct PositionReporter {
    shared: Arc<Shared>,
    state: Arc<Mutex<State>>,
}

impl PositionReporter {
    pub fn new(shared: Arc<Shared>) -> PositionReporter {
        PositionReporter {
            shared,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    pub fn report(&self, host: String, update: UpdatePosition, config_version: i64, me: MemberId) {
        let mut body = encode_update_position(&update, config_version);
        body.insert("fromId", me as i32);
        if !self.state.lock().offer((host, body)) {
            return;
        }
        let shared = self.shared.clone();
        let state = self.state.clone();
        self.shared.runtime.spawn(send_until_none_waits(shared, state));
    }
}

/// One sender: sends the waiting report, then the one that arrived
/// meanwhile, until none waits.
async fn send_until_none_waits(shared: Arc<Shared>, state: Arc<Mutex<State>>) {
    loop {
        let Some(next) = state.lock().next() else {
            return;
        };
        let (host, body) = next;
        let timeout = Duration::from_millis(UPDATE_POSITION_TIMEOUT_MS);
        shared.metrics.record_update_position_sent();
        if let Err(err) = shared.network.send_one_way(&host, "admin", body, timeout).await {
            tracing::debug!(target: "repl", host = %host, error = %err, "replSetUpdatePosition failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: i32) -> Report {
        ("h:1".to_owned(), bson::doc! {"n": n})
    }

    #[test]
    fn a_report_goes_at_once_while_another_is_in_flight() {
        let mut state = State::default();
        assert!(state.offer(report(1)), "the first report starts a sender");
        assert_eq!(state.next().unwrap().1, bson::doc! {"n": 1});
        // Report 1 is in flight: the durable report after it must not wait
        // for its answer.
        assert!(
            state.offer(report(2)),
            "a second sender starts while the first waits for its answer"
        );
        assert_eq!(state.next().unwrap().1, bson::doc! {"n": 2});
    }

    #[test]
    fn reports_coalesce_once_every_sender_is_busy() {
        let mut state = State::default();
        assert!(state.offer(report(1)));
        assert!(state.next().is_some());
        assert!(state.offer(report(2)));
        assert!(state.next().is_some());
        assert!(!state.offer(report(3)), "no third sender");
        assert!(!state.offer(report(4)));
        // The first sender to finish sends only the newest report.
        assert_eq!(state.next().unwrap().1, bson::doc! {"n": 4});
        assert!(state.next().is_none(), "nothing left: this sender ends");
        assert!(state.next().is_none(), "and so does the other");
        assert_eq!(state.senders, 0);
        assert!(state.offer(report(5)), "an idle reporter starts a sender again");
    }
}
