//! The heartbeat sender: carries the node's `Send HeartbeatRequest` to a
//! member as `replSetHeartbeat` and feeds the response back as
//! `Receive { HeartbeatResponse }`, a failure or a timeout as
//! `HeartbeatFailed` (the node counts silence itself; a new primary's
//! catch-up counts the failure as the member heard from), each tagged with
//! the coordinator's heartbeat generation (`Input::Heartbeat`). It also fetches
//! configurations: `Action::FetchConfig` (a member reported a newer one)
//! and, on a member without any, the configuration of the member whose
//! heartbeat showed one.
//!
//! Stateless: each heartbeat is one task; nothing to stop (a task ends
//! with its timeout).

use std::sync::Arc;
use std::time::Duration;

use slipstream_clock::OpTime;
use slipstream_consensus::config::{MemberId, Settings};
use slipstream_consensus::{Event, Heartbeat, MemberState, Message};

use crate::coordinator::Input;
use crate::protocol::{decode_heartbeat_reply, encode_heartbeat_request, UNINITIALIZED_CONFIG_VERSION};
use crate::replica_set::Shared;

/// How long a heartbeat waits for its response without a configuration:
/// the default `heartbeatTimeoutSecs` (MongoDB's 10 s).
fn default_timeout() -> Duration {
    Duration::from_millis(Settings::default().heartbeat_timeout_ms)
}

pub struct HeartbeatSender {
    shared: Arc<Shared>,
}

impl HeartbeatSender {
    pub fn new(shared: Arc<Shared>) -> HeartbeatSender {
        HeartbeatSender { shared }
    }

    /// The configuration's `heartbeatTimeoutSecs` as MongoDB waits, but no
    /// longer than the election timeout: past the silence limit
    /// (`Settings::silence_limit_ms`) the member counts as down whatever
    /// comes, and a heartbeat goes out every period, so longer waits would
    /// only pile up tasks towards an unreachable member.
    fn timeout(&self) -> Duration {
        let snapshot = self.shared.snapshot();
        snapshot
            .config
            .as_ref()
            .map_or_else(default_timeout, |c| Duration::from_millis(c.settings.silence_limit_ms()))
    }

    pub fn send(&self, to: MemberId, host: String, hb: Heartbeat, set_name: String, me: MemberId, generation: u64) {
        let shared = self.shared.clone();
        let timeout = self.timeout();
        self.shared.runtime.spawn(async move {
            let body = encode_heartbeat_request(&set_name, &shared.me_host(), Some(me), &hb);
            let failed = Event::HeartbeatFailed { member: to };
            let event = match shared.network.run(&host, "admin", body, timeout).await {
                Err(err) => {
                    tracing::trace!(target: "repl", host = %host, error = %err, "heartbeat failed");
                    shared.note_heartbeat(to, Err(err.to_string()));
                    failed
                }
                Ok(reply) => match decode_heartbeat_reply(&reply) {
                    Ok(reply) if reply.set_name == set_name => {
                        let primary = reply.heartbeat.state == MemberState::Primary;
                        shared.note_heartbeat(to, Ok(reply.election_time.filter(|_| primary)));
                        let message = Message::HeartbeatResponse(reply.heartbeat);
                        Event::Receive { from: to, message }
                    }
                    Ok(reply) => {
                        let set = reply.set_name;
                        tracing::warn!(target: "repl", host = %host, set = %set, "heartbeat from another set");
                        failed
                    }
                    Err(err) => {
                        tracing::warn!(target: "repl", host = %host, error = %err, "malformed heartbeat response");
                        failed
                    }
                },
            };
            shared.input(Input::Heartbeat { generation, event });
        });
    }

    /// `Action::FetchConfig`: a heartbeat whose response carries the
    /// newer configuration (ours, as the request shows it, is older).
    pub fn fetch_config(&self, from: MemberId, host: String, hb: Heartbeat, set_name: String) {
        let shared = self.shared.clone();
        let timeout = self.timeout();
        let me = shared.snapshot().me;
        self.shared.runtime.spawn(async move {
            let body = encode_heartbeat_request(&set_name, &shared.me_host(), me, &hb);
            let Ok(reply) = shared.network.run(&host, "admin", body, timeout).await else {
                return;
            };
            match decode_heartbeat_reply(&reply) {
                Ok(reply) => match reply.config {
                    Some(config) => shared.input(Input::Event(Event::ConfigReceived { config })),
                    None => tracing::debug!(target: "repl", member = from, "heartbeat response without a config"),
                },
                Err(err) => tracing::warn!(target: "repl", host = %host, error = %err, "malformed heartbeat response"),
            }
        });
    }
}

/// A member without a configuration got a heartbeat from `host`, which has
/// one: ask for it (a heartbeat showing version -2 gets the config in its
/// response) and adopt it if it names this member.
pub fn fetch_initial_config(shared: Arc<Shared>, host: String, set_name: String) {
    // One fetch at a time: every member's heartbeats would start one.
    if shared
        .config_fetch_in_flight
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    let runtime = shared.runtime.clone();
    runtime.spawn(async move {
        fetch_and_adopt(&shared, &host, &set_name).await;
        shared
            .config_fetch_in_flight
            .store(false, std::sync::atomic::Ordering::SeqCst);
    });
}

async fn fetch_and_adopt(shared: &Arc<Shared>, host: &str, set_name: &str) {
    let hb = Heartbeat {
        term: 0,
        config_version: UNINITIALIZED_CONFIG_VERSION,
        config_term: -1,
        state: MemberState::Startup,
        last_applied: OpTime::NULL,
        last_applied_wall_ms: 0,
        last_durable: OpTime::NULL,
        last_durable_wall_ms: 0,
        commit_point: OpTime::NULL,
        sync_source: None,
    };
    let body = encode_heartbeat_request(set_name, &shared.me_host(), None, &hb);
    let timeout = default_timeout();
    let Ok(reply) = shared.network.run(host, "admin", body, timeout).await else {
        return;
    };
    let Ok(reply) = decode_heartbeat_reply(&reply) else {
        return;
    };
    let Some(config) = reply.config else { return };
    match shared.find_self(&config) {
        Some(me) => {
            tracing::info!(target: "repl", from = %host, version = config.version, "configuration learned by heartbeat");
            shared.input(Input::Adopt { config, me });
        }
        None => tracing::warn!(target: "repl", from = %host, "a configuration that does not name this member"),
    }
}
