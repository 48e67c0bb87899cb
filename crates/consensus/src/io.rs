//! What goes into the state machine (`Event`) and what comes out (`Action`).

use crate::config::{MemberId, ReplSetConfig};
use crate::election_metrics::ElectionReason;
use crate::error::{NotSecondary, ReconfigError, StepDownError, StepUpError};
use crate::message::Message;
use crate::millis::{Millis, ShortOpTime};
use crate::state::MemberState;
use slipstream_clock::OpTime;
use std::fmt;

/// The result of one pull (PullEntries, seed 000 section 3.2.1) from the
/// sync source, summarised: the I/O layer holds the entries themselves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullBatch {
    /// The member the batch came from.
    pub source: MemberId,
    /// First entry of the batch (the source's first entry with a timestamp
    /// at or after our last one); `None` if the batch is empty.
    pub first: Option<OpTime>,
    /// Last entry of the batch; `None` if the batch is empty.
    pub last: Option<OpTime>,
    /// The source's last entry when it answered (MongoDB's
    /// `$oplogQueryData.lastOpApplied`): past `last` when the batch is not
    /// the end of the source's oplog. Whether the source is ahead of a
    /// member whose log it does not continue is judged by this, not by the
    /// batch: OpTimes order by term first, and a full batch of an older
    /// term's entries says nothing of what follows it.
    pub source_last: OpTime,
    /// The source's commit point when it answered.
    pub source_commit_point: OpTime,
    /// The source's term when it answered.
    pub source_term: i64,
}

/// `replSetStepDown` arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepDownRequest {
    /// `stepDownSecs` in milliseconds: how long the member will not stand.
    pub step_down_ms: u64,
    /// `secondaryCatchUpPeriodSecs` in milliseconds: how long to wait for an
    /// electable secondary to catch up.
    pub secondary_catch_up_period_ms: u64,
    /// `force`: step down even if no secondary caught up in time.
    pub force: bool,
}

/// `replSetReconfig` with `force: true`. MongoDB raises the version by
/// 10,000 plus a random number below 100,000 so that the forced
/// configuration wins over any a primary may still be writing; the caller
/// draws it (no randomness inside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForceReconfig {
    /// Added to the greater of the current and the proposed version.
    pub version_increment: i64,
}

/// Inputs to `Node::step`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Time passed. `election_jitter_ms` is the random part of the next
    /// election timeout, drawn by the caller (no randomness inside).
    Tick {
        /// Jitter to add when the election timer is next reset.
        election_jitter_ms: u64,
    },
    /// A message arrived.
    Receive {
        /// The sender's `_id`.
        from: MemberId,
        /// The message.
        message: Message,
    },
    /// Entries were written to the local oplog (and applied speculatively);
    /// `last_applied` is now the last one. Storage's oplog clock chose the
    /// timestamps; the node learns them here, the primary's own writes and
    /// its "new primary" no-op included.
    Appended {
        /// New last applied OpTime.
        last_applied: OpTime,
        /// Its entry's wall-clock date (`wall`), ms since the epoch.
        wall_ms: i64,
    },
    /// The oplog was made durable up to `last_durable`.
    Durable {
        /// New last durable OpTime.
        last_durable: OpTime,
        /// Its entry's wall-clock date.
        wall_ms: i64,
    },
    /// A pull from the sync source returned.
    Pulled(PullBatch),
    /// A pull from `source` failed (timeout, connection refused).
    PullFailed {
        /// The member that did not answer.
        source: MemberId,
    },
    /// A heartbeat request to `member` got no answer (timeout, refused
    /// connection, an error reply). Like a response, it tells a new
    /// primary's catch-up that the member has been heard from since the
    /// election (MongoDB marks it updated since the heartbeat restart), so
    /// that catch-up waits for every member's answer or failure, not for a
    /// majority that may lack the freshest one. The I/O layer drops the
    /// answers and failures of heartbeats sent before this member became
    /// primary (MongoDB cancels them), so that what catch-up hears is
    /// fresh.
    HeartbeatFailed {
        /// The member that did not answer.
        member: MemberId,
    },
    /// A `RequestVote` to `voter` got no answer (timeout, connection
    /// refused, an error reply such as a voter without a configuration).
    /// The election counts it as a vote not granted, as MongoDB's vote
    /// requester counts a failed response, so that an election every voter
    /// has answered ends at once instead of at its deadline.
    VoteRequestFailed {
        /// The voter asked.
        voter: MemberId,
        /// The term of the request.
        term: i64,
        /// Whether the request was a dry run.
        dry_run: bool,
    },
    /// `Action::FindCommonPoint` found the last entry both logs share. The
    /// source's last entry and commit point must be read together with the
    /// search, from the same state of the source's oplog (MongoDB checks
    /// the source's rollback id before and after and fails the rollback if
    /// the source rolled back meanwhile): the rollback rule reasons about
    /// what follows the common point on the source, and a value from an
    /// earlier pull may describe a log the source no longer has.
    CommonPointFound {
        /// The source searched.
        source: MemberId,
        /// The last entry both logs share (`OpTime::NULL` if none).
        common_point: OpTime,
        /// The source's last entry when it was searched.
        source_last: OpTime,
        /// The source's commit point when it was searched.
        source_commit_point: OpTime,
    },
    /// A rollback asked for by `Action::Rollback` finished: the oplog was
    /// truncated after `common_point` and its effects undone.
    RollbackComplete {
        /// The last entry both logs share, now the last applied one.
        common_point: OpTime,
        /// Its wall-clock date.
        wall_ms: i64,
    },
    /// The common point could not be found (source gone); choose another source.
    RollbackFailed {
        /// The source that was to be used.
        source: MemberId,
    },
    /// `replSetStepDown`, answered by `Action::StepDownFinished`.
    StepDown(StepDownRequest),
    /// `replSetSyncFrom`: prefer this member as sync source (`None` clears).
    SyncFrom {
        /// The requested source.
        member: Option<MemberId>,
    },
    /// The I/O layer's own state: STARTUP2 during initial sync, RECOVERING
    /// for maintenance (`replSetMaintenance`), SECONDARY when done. Answered
    /// by `Action::ReportStateFinished`: a primary or a candidate refuses.
    ReportState(MemberState),
    /// `replSetReconfig`, answered by `Action::ReconfigFinished` (after
    /// `Action::PersistConfig` when accepted).
    Reconfig {
        /// The proposed configuration; its `term` is ignored (the node sets
        /// it), as MongoDB ignores the term a user passes.
        config: ReplSetConfig,
        /// `force: true`, with the caller's version increment.
        force: Option<ForceReconfig>,
        /// Members of `config` that answered the caller's heartbeat just
        /// now (MongoDB's quorum check heartbeats the new configuration's
        /// members): those new to the configuration, or at a new host, whose
        /// liveness this node has not tracked. They count as up for the
        /// quorum check.
        answered: Vec<MemberId>,
    },
    /// A configuration fetched after `Action::FetchConfig` (from a peer's
    /// heartbeat response). Adopted if valid, of our set and newer than ours.
    ConfigReceived {
        /// The peer's configuration.
        config: ReplSetConfig,
    },
    /// `replSetFreeze`: do not stand before `until`; an `until` at or before
    /// now unfreezes (`replSetFreeze: 0`), which also ends a stepdown's
    /// wait. Answered by `Action::FreezeFinished`.
    Freeze {
        /// End of the freeze on this member's clock.
        until: Millis,
    },
    /// `replSetStepUp` from an administrator: stand now, dry run first.
    /// Answered by `Action::StepUpFinished` when the election is won or lost.
    StepUpRequest,
}

/// Outputs of `Node::step`, to be carried out in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send `message` to member `to`.
    Send {
        /// Receiver's `_id`.
        to: MemberId,
        /// The message.
        message: Message,
    },
    /// Make term and vote durable. Must complete before any later action
    /// of the same step is carried out (a vote must be durable before the
    /// reply that grants it leaves).
    PersistTermAndVote {
        /// Current term.
        term: i64,
        /// Vote cast in `term`.
        voted_for: Option<MemberId>,
    },
    /// Make this configuration durable (`local.system.replset`) before any
    /// later action of the same step: heartbeats that follow report it, and
    /// a majority reporting it is what commits it.
    PersistConfig(ReplSetConfig),
    /// Fetch the configuration of member `from`, which reported a newer one
    /// (its heartbeat response carries it when our heartbeat shows an older
    /// configuration); feed it back as `Event::ConfigReceived`. `from` may
    /// be outside our configuration: the I/O layer knows its host from its
    /// heartbeat.
    FetchConfig {
        /// The member holding the newer configuration.
        from: MemberId,
    },
    /// Start pulling from this member (or stop pulling, for `None`).
    SetSyncSource(Option<MemberId>),
    /// The last pull's batch overlaps our last entry: append the entries
    /// after it, then report `Event::Appended`.
    AppendBatch {
        /// The source of the batch.
        source: MemberId,
    },
    /// The last pull's batch does not overlap: read `source`'s oplog
    /// backwards to the last entry both logs share and report it with
    /// `Event::CommonPointFound` (or `Event::RollbackFailed`). Nothing is
    /// truncated yet.
    FindCommonPoint {
        /// The source whose log would win.
        source: MemberId,
    },
    /// Truncate the oplog after `common_point`, undo the removed entries'
    /// effects (rollback files), then report `Event::RollbackComplete`.
    Rollback {
        /// The last entry kept.
        common_point: OpTime,
    },
    /// The commit point moved forward (`lastCommitted`); majority reads and
    /// `w:"majority"` waiters may proceed, the stable timestamp may follow.
    AdvanceCommitPoint(OpTime),
    /// The member's state changed.
    StateChanged {
        /// New state.
        state: MemberState,
        /// Term at the change.
        term: i64,
    },
    /// A primary steps down because it has not heard from a majority of
    /// voters within an election timeout (for the log): each silent voter
    /// with the milliseconds since it was last heard, if ever.
    LostMajority {
        /// The term the primary leaves.
        term: i64,
        /// Voters not heard within the election timeout.
        silent: Vec<(MemberId, Option<u64>)>,
    },
    /// A real election or its dry run began (for the log and metrics).
    ElectionStarted {
        /// The term asked for.
        term: i64,
        /// Why.
        reason: ElectionReason,
        /// A dry run (nobody records a vote) or the real election.
        dry_run: bool,
    },
    /// An attempt begun by `ElectionStarted` ended: one per attempt, after
    /// the real election (won or lost) or after a dry run that failed.
    ElectionFinished {
        /// The term asked for.
        term: i64,
        /// True if this member became primary.
        won: bool,
        /// Why it stood.
        reason: ElectionReason,
    },
    /// The new primary finished catch-up: write the "new primary" no-op
    /// through the write gate (opened by the `AcceptWrites(true)` before
    /// it) with the node's term; storage's oplog clock chooses its
    /// timestamp, and `Event::Appended` reports it.
    WriteNoop,
    /// Whether client writes are accepted from now on (the storage write
    /// gate, with the node's term). After `AcceptWrites(false)` the caller
    /// reports the oplog's last entry with `Event::Appended` if it moved, so
    /// that a stepdown hands over to a member that holds every write the
    /// gate let through.
    AcceptWrites(bool),
    /// The outcome of a `replSetStepDown`.
    StepDownFinished(Result<(), StepDownError>),
    /// The outcome of a `replSetReconfig`.
    ReconfigFinished(Result<(), ReconfigError>),
    /// The outcome of a `replSetStepUp`.
    StepUpFinished(Result<(), StepUpError>),
    /// The outcome of a `replSetFreeze`.
    FreezeFinished(Result<(), NotSecondary>),
    /// The outcome of an `Event::ReportState` (`replSetMaintenance`).
    ReportStateFinished(Result<(), NotSecondary>),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Send { to, message } => write!(f, "send to {to}: {message}"),
            Action::PersistTermAndVote { term, voted_for } => match voted_for {
                Some(v) => write!(f, "persist term={term} vote={v}"),
                None => write!(f, "persist term={term} vote=none"),
            },
            Action::PersistConfig(c) => {
                let ids: Vec<String> = c.members.iter().map(|m| m.id.to_string()).collect();
                write!(f, "persist config {} members=[{}]", c.version_and_term(), ids.join(" "))
            }
            Action::FetchConfig { from } => write!(f, "fetch config from {from}"),
            Action::SetSyncSource(Some(s)) => write!(f, "sync from {s}"),
            Action::SetSyncSource(None) => write!(f, "stop syncing"),
            Action::AppendBatch { source } => write!(f, "append batch from {source}"),
            Action::FindCommonPoint { source } => write!(f, "find common point with {source}"),
            Action::Rollback { common_point } => write!(f, "roll back to {}", ShortOpTime(*common_point)),
            Action::AdvanceCommitPoint(o) => write!(f, "commit point {}", ShortOpTime(*o)),
            Action::StateChanged { state, term } => write!(f, "becomes {state} term={term}"),
            Action::ElectionStarted { term, reason, dry_run } => {
                write!(
                    f,
                    "{} term={term} ({reason})",
                    if *dry_run { "dry run" } else { "election" }
                )
            }
            Action::ElectionFinished { term, won, reason } => {
                write!(
                    f,
                    "election term={term} ({reason}) {}",
                    if *won { "won" } else { "lost" }
                )
            }
            Action::LostMajority { term, silent } => write!(f, "lost majority term={term} silent={silent:?}"),
            Action::WriteNoop => write!(f, "write no-op"),
            Action::AcceptWrites(b) => write!(f, "accept writes {b}"),
            Action::StepDownFinished(r) => write!(f, "stepdown finished {r:?}"),
            Action::ReconfigFinished(r) => write!(f, "reconfig finished {r:?}"),
            Action::StepUpFinished(r) => write!(f, "step up finished {r:?}"),
            Action::FreezeFinished(r) => write!(f, "freeze finished {r:?}"),
            Action::ReportStateFinished(r) => write!(f, "report state finished {r:?}"),
        }
    }
}
