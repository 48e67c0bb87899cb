//! Messages exchanged between members. The `repl` layer carries them as
//! `replSetHeartbeat`, `replSetRequestVotes`, `replSetUpdatePosition` and
//! `replSetStepUp` commands; this crate only says what they contain.

use crate::config::{ConfigVersionAndTerm, MemberId};
use crate::millis::ShortOpTime;
use crate::state::MemberState;
use slipstream_clock::OpTime;
use std::fmt;

/// The body of a heartbeat request or response (seed 000 Appendix A,
/// "Heartbeat RPC"): liveness, role, positions, the commit point, and the
/// sender's configuration `(version, term)` so that a member holding an
/// older configuration fetches the newer one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The sender's current term.
    pub term: i64,
    /// The sender's configuration version (`configVersion`).
    pub config_version: i64,
    /// The sender's configuration term (`configTerm`).
    pub config_term: i64,
    /// The sender's state.
    pub state: MemberState,
    /// The sender's last applied OpTime (`opTime`).
    pub last_applied: OpTime,
    /// Wall-clock date of that entry (`wallTime`), ms since the epoch.
    pub last_applied_wall_ms: i64,
    /// The sender's last durable OpTime (`durableOpTime`).
    pub last_durable: OpTime,
    /// Wall-clock date of that entry (`durableWallTime`).
    pub last_durable_wall_ms: i64,
    /// The sender's commit point (`lastCommittedOpTime`).
    pub commit_point: OpTime,
    /// The sender's sync source, so that others avoid syncing in a circle.
    pub sync_source: Option<MemberId>,
}

impl Heartbeat {
    /// The sender's configuration's place in the order of configurations.
    pub fn config_version_and_term(&self) -> ConfigVersionAndTerm {
        ConfigVersionAndTerm {
            version: self.config_version,
            term: self.config_term,
        }
    }
}

/// `replSetRequestVotes` (seed 000: RequestVote with OpTime in place of index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoteRequest {
    /// The term the candidate stands in (for a dry run: the term it would take).
    pub term: i64,
    /// The candidate's `_id`.
    pub candidate: MemberId,
    /// The candidate's last applied OpTime.
    pub last_applied: OpTime,
    /// The candidate's configuration version.
    pub config_version: i64,
    /// The candidate's configuration term.
    pub config_term: i64,
    /// A dry run (pre-vote) asks without raising anyone's term or recording a vote.
    pub dry_run: bool,
}

impl VoteRequest {
    /// The candidate's configuration's place in the order of configurations.
    pub fn config_version_and_term(&self) -> ConfigVersionAndTerm {
        ConfigVersionAndTerm {
            version: self.config_version,
            term: self.config_term,
        }
    }
}

/// The answer to a `VoteRequest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoteResponse {
    /// The voter's term after processing the request.
    pub term: i64,
    /// The term the request was for, so that late answers are recognised.
    pub request_term: i64,
    /// Echo of the request's dry-run flag.
    pub dry_run: bool,
    /// Whether the vote was granted.
    pub granted: bool,
    /// Why not, when not granted.
    pub reason: &'static str,
}

/// One member's positions inside an UpdatePosition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberPosition {
    /// The member the positions belong to.
    pub member: MemberId,
    /// Its last applied OpTime (`appliedOpTime`).
    pub applied: OpTime,
    /// Wall-clock date of that entry (`appliedWallTime`).
    pub applied_wall_ms: i64,
    /// Its last durable OpTime (`durableOpTime`).
    pub durable: OpTime,
    /// Wall-clock date of that entry (`durableWallTime`).
    pub durable_wall_ms: i64,
}

/// `replSetUpdatePosition`, sent to one's sync source and forwarded up the
/// chain. The sender's term is what keeps a stale primary from counting
/// entries pulled after a newer election (seed 000 section 3.3, Figure 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdatePosition {
    /// The sender's current term.
    pub term: i64,
    /// Highest known positions per member, the sender's own included.
    pub positions: Vec<MemberPosition>,
}

/// A message between two members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A heartbeat request; the receiver answers with `HeartbeatResponse`.
    HeartbeatRequest(Heartbeat),
    /// A heartbeat response.
    HeartbeatResponse(Heartbeat),
    /// A request for a vote.
    RequestVote(VoteRequest),
    /// The answer to a vote request.
    VoteResponse(VoteResponse),
    /// Positions reported to a sync source.
    UpdatePosition(UpdatePosition),
    /// Election handoff (`replSetStepUp` with `skipDryRun`): the stepping-down
    /// primary asks a caught-up secondary to stand at once.
    StepUp {
        /// The sender's term.
        term: i64,
    },
}

impl Message {
    /// The sender's term carried by every message.
    pub fn term(&self) -> i64 {
        match self {
            Message::HeartbeatRequest(h) | Message::HeartbeatResponse(h) => h.term,
            Message::RequestVote(r) => r.term,
            Message::VoteResponse(r) => r.term,
            Message::UpdatePosition(u) => u.term,
            Message::StepUp { term } => *term,
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::HeartbeatRequest(h) => write!(f, "Heartbeat {h}"),
            Message::HeartbeatResponse(h) => write!(f, "HeartbeatResponse {h}"),
            Message::RequestVote(r) => write!(
                f,
                "RequestVote{} term={} applied={}",
                if r.dry_run { "(dry-run)" } else { "" },
                r.term,
                ShortOpTime(r.last_applied)
            ),
            Message::VoteResponse(r) => {
                write!(
                    f,
                    "VoteResponse{} term={} for={} {}",
                    if r.dry_run { "(dry-run)" } else { "" },
                    r.term,
                    r.request_term,
                    if r.granted { "granted" } else { "rejected" }
                )?;
                if !r.reason.is_empty() {
                    write!(f, " ({})", r.reason)?;
                }
                Ok(())
            }
            Message::UpdatePosition(u) => {
                write!(f, "UpdatePosition term={}", u.term)?;
                for p in &u.positions {
                    write!(f, " {}={}/{}", p.member, ShortOpTime(p.applied), ShortOpTime(p.durable))?;
                }
                Ok(())
            }
            Message::StepUp { term } => write!(f, "StepUp term={term}"),
        }
    }
}

impl fmt::Display for Heartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "term={} {} applied={} durable={} commit={} config={}.{}",
            self.term,
            self.state,
            ShortOpTime(self.last_applied),
            ShortOpTime(self.last_durable),
            ShortOpTime(self.commit_point),
            self.config_version,
            self.config_term
        )?;
        if let Some(s) = self.sync_source {
            write!(f, " syncing-from={s}")?;
        }
        Ok(())
    }
}
