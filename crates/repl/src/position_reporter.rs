//! The position reporter: carries the node's `Send UpdatePosition` to the
//! sync source as `replSetUpdatePosition`. At most one is in flight; one
//! asked for meanwhile replaces any still waiting (the newest positions
//! include the older ones), so reports coalesce under load instead of
//! queueing (seed 000 3.2.3).
//!
//! ```text
//!   Idle --report--> Sending --done, nothing waiting--> Idle
//!                     |  ^
//!             report  |  | done, one waiting: send it
//!                     v  |
//!                   Sending + Waiting
//! ```

use std::sync::Arc;
use std::time::Duration;

use bson::Document;
use parking_lot::Mutex;
use slipstream_consensus::config::MemberId;
use slipstream_consensus::UpdatePosition;

use crate::protocol::encode_update_position;
use crate::replica_set::Shared;

/// Longest one report waits for its answer.
pub const UPDATE_POSITION_TIMEOUT_MS: u64 = 5_000;

#[derive(Default)]
struct State {
    sending: bool,
    waiting: Option<(String, Document)>,
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
        {
            let mut state = self.state.lock();
            state.waiting = Some((host, body));
            if state.sending {
                return;
            }
            state.sending = true;
        }
        let shared = self.shared.clone();
        let state = self.state.clone();
        self.shared.runtime.spawn(async move {
            loop {
                let next = {
                    let mut state = state.lock();
                    match state.waiting.take() {
                        Some(next) => next,
                        None => {
                            state.sending = false;
                            return;
                        }
                    }
                };
                let (host, body) = next;
                let timeout = Duration::from_millis(UPDATE_POSITION_TIMEOUT_MS);
                shared.metrics.record_update_position_sent();
                if let Err(err) = shared.network.run(&host, "admin", body, timeout).await {
                    tracing::debug!(target: "repl", host = %host, error = %err, "replSetUpdatePosition failed");
                }
            }
        });
    }
}
