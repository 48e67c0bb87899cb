//! The election runner: carries the node's `Send RequestVote` to a voter
//! as `replSetRequestVotes` and feeds the answer back as
//! `Receive { VoteResponse }`; and `Send StepUp` (election handoff) as
//! `replSetStepUp {skipDryRun: true}`. The node counts the votes and
//! decides; a request that fails (no answer within `VOTE_TIMEOUT_MS`, a
//! refused connection, an error reply) goes back as `VoteRequestFailed`, a
//! vote not granted, so that an election every voter has answered ends.

use std::sync::Arc;
use std::time::Duration;

use slipstream_consensus::config::MemberId;
use slipstream_consensus::{Event, Message, VoteRequest};

use crate::coordinator::Input;
use crate::protocol::{decode_vote_response, encode_step_up, encode_vote_request};
use crate::replica_set::Shared;

/// Longest a vote request waits: an election that waits longer has lost
/// its timeout anyway.
pub const VOTE_TIMEOUT_MS: u64 = 5_000;

pub struct ElectionRunner {
    shared: Arc<Shared>,
}

impl ElectionRunner {
    pub fn new(shared: Arc<Shared>) -> ElectionRunner {
        ElectionRunner { shared }
    }

    pub fn request_vote(&self, to: MemberId, host: String, request: VoteRequest, set_name: String, my_index: usize) {
        let shared = self.shared.clone();
        self.shared.runtime.spawn(async move {
            tracing::debug!(target: "repl", host = %host, term = request.term, dry_run = request.dry_run, "vote request sent");
            let body = encode_vote_request(&set_name, my_index, &request);
            let timeout = Duration::from_millis(VOTE_TIMEOUT_MS);
            let reply = shared.network.run(&host, "admin", body, timeout).await;
            let response = match reply {
                Ok(reply) => decode_vote_response(&reply, &request).map_err(|err| err.to_string()),
                Err(err) => Err(err.to_string()),
            };
            let event = match response {
                Ok(response) => {
                    tracing::debug!(
                        target: "repl",
                        host = %host,
                        term = response.request_term,
                        dry_run = response.dry_run,
                        granted = response.granted,
                        "vote answered"
                    );
                    Event::Receive {
                        from: to,
                        message: Message::VoteResponse(response),
                    }
                }
                Err(err) => {
                    tracing::info!(target: "repl", host = %host, error = %err, "vote request failed");
                    Event::VoteRequestFailed {
                        voter: to,
                        term: request.term,
                        dry_run: request.dry_run,
                    }
                }
            };
            shared.input(Input::Event(event));
        });
    }

    /// Election handoff: the stepping-down primary asks `to` to stand now.
    pub fn hand_off(&self, to: MemberId, host: String, term: i64, me: MemberId) {
        let shared = self.shared.clone();
        self.shared.runtime.spawn(async move {
            let mut body = encode_step_up(term);
            body.insert("fromId", me as i32);
            let timeout = Duration::from_millis(VOTE_TIMEOUT_MS);
            if let Err(err) = shared.network.run(&host, "admin", body, timeout).await {
                tracing::info!(target: "repl", member = to, error = %err, "election handoff refused");
            }
        });
    }
}
