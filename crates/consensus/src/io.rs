//! What goes into the state machine (`Event`) and what comes out (`Action`).

use crate::message::Message;
use crate::optime::{MemberId, OpTime};
use crate::state::MemberState;
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
    /// The source's commit point when it answered.
    pub source_commit_point: OpTime,
    /// The source's term when it answered.
    pub source_term: u64,
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

/// Why a stepdown did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownError {
    /// This member is not primary (MongoDB code 189 NotWritablePrimary... 10107).
    NotPrimary,
    /// No electable secondary caught up within the period (code 262 ExceededTimeLimit).
    ExceededTimeLimit,
    /// A stepdown is already in progress (code 117 ConflictingOperationInProgress).
    AlreadyInProgress,
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
    /// `last_applied` is now the last one.
    Appended {
        /// New last applied OpTime.
        last_applied: OpTime,
    },
    /// The oplog was made durable up to `last_durable`.
    Durable {
        /// New last durable OpTime.
        last_durable: OpTime,
    },
    /// A pull from the sync source returned.
    Pulled(PullBatch),
    /// A pull from `source` failed (timeout, connection refused).
    PullFailed {
        /// The member that did not answer.
        source: MemberId,
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
        /// The last entry both logs share.
        common_point: OpTime,
    },
    /// The common point could not be found (source gone); choose another source.
    RollbackFailed {
        /// The source that was to be used.
        source: MemberId,
    },
    /// `replSetStepDown`.
    StepDown(StepDownRequest),
    /// `replSetSyncFrom`: prefer this member as sync source (`None` clears).
    SyncFrom {
        /// The requested source.
        member: Option<MemberId>,
    },
    /// The I/O layer's own state: STARTUP2 during initial sync, RECOVERING
    /// for maintenance, SECONDARY when done. Other values are rejected.
    ReportState(MemberState),
}

/// Outputs of `Node::step`, to be carried out in order.
#[derive(Clone, Debug, PartialEq, Eq)]
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
        term: u64,
        /// Vote cast in `term`.
        voted_for: Option<MemberId>,
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
        term: u64,
    },
    /// The new primary finished catch-up: write this no-op as the first
    /// entry of its term, then report `Event::Appended`.
    WriteNoop(OpTime),
    /// Whether client writes are accepted from now on.
    AcceptWrites(bool),
    /// The outcome of a `replSetStepDown`.
    StepDownFinished(Result<(), StepDownError>),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Send { to, message } => write!(f, "send to {to}: {message}"),
            Action::PersistTermAndVote { term, voted_for } => match voted_for {
                Some(v) => write!(f, "persist term={term} vote={v}"),
                None => write!(f, "persist term={term} vote=none"),
            },
            Action::SetSyncSource(Some(s)) => write!(f, "sync from {s}"),
            Action::SetSyncSource(None) => write!(f, "stop syncing"),
            Action::AppendBatch { source } => write!(f, "append batch from {source}"),
            Action::FindCommonPoint { source } => write!(f, "find common point with {source}"),
            Action::Rollback { common_point } => write!(f, "roll back to {common_point}"),
            Action::AdvanceCommitPoint(o) => write!(f, "commit point {o}"),
            Action::StateChanged { state, term } => write!(f, "becomes {state} term={term}"),
            Action::WriteNoop(o) => write!(f, "write no-op {o}"),
            Action::AcceptWrites(b) => write!(f, "accept writes {b}"),
            Action::StepDownFinished(r) => write!(f, "stepdown finished {r:?}"),
        }
    }
}
