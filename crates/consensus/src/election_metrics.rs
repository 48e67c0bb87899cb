//! What the node remembers of its own elections, for `replSetGetStatus`'s
//! `electionCandidateMetrics` and the log: why it stood, in which term,
//! what it knew then, and how catch-up ended.

use crate::config::MemberId;
use crate::millis::Millis;
use slipstream_clock::OpTime;
use std::fmt;

/// Why a member stood for election (MongoDB's `StartElectionReasonEnum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElectionReason {
    /// No primary heard from within the election timeout.
    ElectionTimeout,
    /// A member of higher priority than the primary, nearly caught up.
    PriorityTakeover,
    /// A member ahead of a primary that is still catching up.
    CatchUpTakeover,
    /// `replSetStepUp` from an administrator: dry run first.
    StepUpRequest,
    /// Election handoff from a stepping-down primary (`replSetStepUp` with
    /// `skipDryRun`): no dry run.
    StepUpHandoff,
    /// The only voting member, standing without waiting for a timeout.
    SingleNode,
}

impl ElectionReason {
    /// MongoDB's name (`lastElectionReason`).
    pub fn name(self) -> &'static str {
        match self {
            ElectionReason::ElectionTimeout => "electionTimeout",
            ElectionReason::PriorityTakeover => "priorityTakeover",
            ElectionReason::CatchUpTakeover => "catchupTakeover",
            ElectionReason::StepUpRequest => "stepUpRequest",
            ElectionReason::StepUpHandoff => "stepUpRequestSkipDryRun",
            ElectionReason::SingleNode => "singleNodePromptElection",
        }
    }
}

impl fmt::Display for ElectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a new primary's catch-up ended (MongoDB's `electionMetrics`
/// catch-up counters; one that a newer term cuts short ends with the
/// metrics, which leaving PRIMARY clears).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CatchUpOutcome {
    /// A majority answered and nobody was ahead of us
    /// (`numCatchUpsAlreadyCaughtUp`).
    AlreadyCaughtUp,
    /// We pulled up to the freshest entry a majority reported (`numCatchUpsSucceeded`).
    Succeeded,
    /// `catchUpTimeoutMillis` passed first (`numCatchUpsTimedOut`).
    TimedOut,
    /// `catchUpTimeoutMillis` is 0 (`numCatchUpsSkipped`).
    Skipped,
}

/// `electionCandidateMetrics`: kept from the start of a real election until
/// the member leaves PRIMARY (or loses), as MongoDB clears it then.
#[derive(Clone, Debug, PartialEq)]
pub struct ElectionCandidateMetrics {
    /// `lastElectionReason`.
    pub reason: ElectionReason,
    /// `lastElectionDate`, on this member's monotonic clock (the `repl`
    /// layer turns it into a date).
    pub started_at: Millis,
    /// `electionTerm`.
    pub term: i64,
    /// `lastCommittedOpTimeAtElection`.
    pub last_committed_at_election: OpTime,
    /// `lastSeenOpTimeAtElection`: our last applied entry.
    pub last_applied_at_election: OpTime,
    /// `numVotesNeeded`.
    pub votes_needed: usize,
    /// `priorityAtElection`.
    pub priority_at_election: f64,
    /// `electionTimeoutMillis`.
    pub election_timeout_ms: u64,
    /// `priorPrimaryMemberId`: the primary we knew of when we stood.
    pub prior_primary: Option<MemberId>,
    /// When the vote was won.
    pub won_at: Option<Millis>,
    /// `targetCatchupOpTime`: the freshest entry heard of during catch-up.
    pub target_catch_up: Option<OpTime>,
    /// How catch-up ended.
    pub catch_up: Option<CatchUpOutcome>,
    /// How long catch-up took, in ms (`catchUpDurationMillis`-like).
    pub catch_up_ms: Option<u64>,
    /// The term's first entry (the "new primary" no-op) and its wall-clock
    /// date (`newTermStartDate`), once appended.
    pub new_term_start: Option<(OpTime, i64)>,
    /// `wMajorityWriteAvailabilityDate`: when an entry of the term first
    /// committed, on the monotonic clock.
    pub w_majority_available_at: Option<Millis>,
}
