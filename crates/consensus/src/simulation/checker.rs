//! The invariants checked after every simulated step. Each violation is a
//! string naming the invariant, so that a failing seed says what broke.
//!
//! - NoTwoPrimariesInSameTerm: at most one member becomes primary per term.
//! - LogMatching: an OpTime is written once (by its term's primary) and
//!   every copy of it follows the same predecessor, so two logs holding the
//!   same OpTime agree on everything before it.
//! - CommitPointInLog / CommittedPrefix: a member's commit point is an entry
//!   of its own log and every member's committed prefix is one sequence.
//! - CommitPointMonotonic: no member's commit point moves backwards (per
//!   incarnation: a restart forgets the volatile commit point).
//! - NeverRollbackCommitted: a rollback never removes an entry committed
//!   in a term the rolling-back member knows of (a term at or below its
//!   current term), nor one at or below its own commit point. (An entry
//!   committed in a later term that the member has not heard of may be
//!   dropped from its copy and pulled again: no local rule can see that
//!   commit, and CommittedOnMajority shows the entry stays on a majority.)
//! - CommittedOnMajority: the last committed entry is in the durable logs
//!   of a write majority of data-bearing voters (a majority of voters, or
//!   all data-bearing voters when arbiters leave fewer) of the
//!   configuration of the primary that committed it. (A later reconfig may
//!   add members that lack it; safe reconfig commits it under the new
//!   configuration before the next change, and LeaderCompleteness checks
//!   what matters: every later primary holds it.)
//! - LeaderCompleteness: a new primary holds every committed entry.
//! - AckBackedByMajority: an acknowledged w:"majority" write is durable on
//!   a majority of voters when acknowledged and held by every later primary.
//! - DurableBeforeSend: no message leaves carrying a term, a vote request
//!   or a granted vote that is not durable yet (seed 000 Appendix A:
//!   persistent state is "updated on stable storage before responding to
//!   RPCs"). The crash model (a crash after any prefix of a step's actions)
//!   turns a violation into two primaries in one term, but only when the
//!   crash lands in the gap; this check sees the gap itself on every run.
//! - ConfigUnique: one `(version, term)` names one configuration: only the
//!   primary of a term writes configurations of that term, with growing
//!   versions (force reconfigs, term -1, are left out: their versions are
//!   drawn at random).
//! - ConfigCommittedBeforeReconfig: when a primary writes a configuration
//!   with a new version, the one it replaces is durable (or superseded) on
//!   a majority of that configuration's voters, judged from every member's
//!   persisted configuration rather than from heartbeats.
//! - NoSyncSourceCycle: no cycle of sync sources lasts longer than
//!   `SYNC_SOURCE_CYCLE_MAX_MS`. Members choose sources from heartbeat
//!   information that may be stale (a source that crashed and lost its
//!   unsynced tail still looks ahead), so a cycle can form for a moment;
//!   the rules must break it at once (the pull's double check, the
//!   "syncs from us" check, the idle-source check). The simulator found
//!   that a strict "never" fails; see README, bugs found.

use crate::config::{MemberId, ReplSetConfig};
use crate::message::Message;
use crate::millis::ShortOpTime;
use crate::mutation::{self, Mutation};
use crate::node::Persisted;
use slipstream_clock::{OpTime, UNINITIALIZED_TERM};
use std::collections::{BTreeMap, HashMap};

/// Longest a sync source cycle may last (simulated milliseconds).
pub const SYNC_SOURCE_CYCLE_MAX_MS: u64 = 3_000;

/// Most violations kept per run; the first is what matters.
pub const VIOLATIONS_MAX: usize = 32;

/// The members whose durable logs make an entry committed, and how many of
/// them must hold it: a configuration's data-bearing voters and its write
/// majority.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Quorum {
    /// Data-bearing voters.
    pub voters: Vec<MemberId>,
    /// How many of them must hold a committed entry.
    pub write_majority: usize,
}

impl Quorum {
    /// The commit quorum of `config`.
    pub fn of(config: &ReplSetConfig) -> Quorum {
        let voters = config
            .members
            .iter()
            .filter(|m| m.is_voter() && m.is_data_bearing())
            .map(|m| m.id)
            .collect();
        Quorum {
            voters,
            write_majority: config.write_majority(),
        }
    }
}

/// What identifies a configuration for ConfigUnique: members' `_id`, votes,
/// arbiter flag and priority (its bits).
type Membership = Vec<(MemberId, u8, bool, u64)>;

fn membership(config: &ReplSetConfig) -> Membership {
    config
        .members
        .iter()
        .map(|m| (m.id, m.votes, m.arbiter_only, m.priority.to_bits()))
        .collect()
}

/// Global history the invariants are checked against.
#[derive(Debug, Default)]
pub struct Checker {
    /// term -> the member that became primary in it.
    primaries: BTreeMap<i64, MemberId>,
    /// OpTime -> the OpTime written before it when it was created.
    predecessor: HashMap<OpTime, OpTime>,
    /// The committed prefix, as one sequence.
    committed: Vec<OpTime>,
    /// For each entry of `committed`, the term in which it became committed.
    committed_in_term: Vec<i64>,
    /// The commit quorum of the configuration under which the last
    /// committed entry was committed.
    last_commit_quorum: Quorum,
    /// (version, term) -> the membership of the configuration so named.
    configs: HashMap<(i64, i64), Membership>,
    /// Configurations persisted anywhere (for the report).
    pub configs_written: u64,
    /// Acknowledged w:"majority" writes.
    acked: Vec<OpTime>,
    /// Since when some sync source cycle has existed without a break.
    cycle_since: Option<u64>,
    /// Cycles seen (each counted once when it forms).
    pub cycles_formed: u64,
    /// Rollbacks carried out (each truncation counted once).
    pub rollbacks: u64,
    /// Entries rolled back on a member that had not heard of the term in
    /// which they were committed (allowed; counted for the report).
    pub late_commit_rollbacks: u64,
    /// What went wrong, first first.
    pub violations: Vec<String>,
}

fn contains(log: &[OpTime], optime: OpTime) -> bool {
    log.binary_search(&optime).is_ok()
}

impl Checker {
    /// Records a violation.
    pub fn violation(&mut self, text: String) {
        if self.violations.len() < VIOLATIONS_MAX {
            self.violations.push(text);
        }
    }

    /// The last committed entry known anywhere.
    pub fn last_committed(&self) -> OpTime {
        self.committed.last().copied().unwrap_or(OpTime::NULL)
    }

    /// True if `optime` is on the committed sequence.
    pub fn is_committed(&self, optime: OpTime) -> bool {
        contains(&self.committed, optime)
    }

    /// Number of terms in which a primary was elected.
    pub fn elections(&self) -> usize {
        self.primaries.len()
    }

    /// Number of acknowledged majority writes.
    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }

    /// The commit quorum of the last committed entry.
    pub fn last_commit_quorum(&self) -> &Quorum {
        &self.last_commit_quorum
    }

    /// A primary wrote a new entry after `previous`.
    pub fn on_created(&mut self, member: MemberId, entry: OpTime, previous: OpTime) {
        let (e, p) = (ShortOpTime(entry), ShortOpTime(previous));
        if entry <= previous || entry.ts <= previous.ts {
            self.violation(format!("LogMatching: member {member} wrote {e} after {p}"));
        }
        if let Some(old) = self.predecessor.insert(entry, previous) {
            let old = ShortOpTime(old);
            self.violation(format!(
                "LogMatching: {e} written twice (after {old} and after {p}) by {member}"
            ));
        }
    }

    /// A member copied `entry` after `previous`.
    pub fn on_copied(&mut self, member: MemberId, entry: OpTime, previous: OpTime) {
        let (e, p) = (ShortOpTime(entry), ShortOpTime(previous));
        match self.predecessor.get(&entry) {
            Some(&w) if w == previous => {}
            Some(&w) => self.violation(format!(
                "LogMatching: member {member} holds {e} after {p}, but it was written after {}",
                ShortOpTime(w)
            )),
            None => self.violation(format!("LogMatching: member {member} copied {e}, never written")),
        }
    }

    /// `member` made `config` durable. Checks ConfigUnique.
    pub fn on_config_persisted(&mut self, member: MemberId, config: &ReplSetConfig) {
        self.configs_written += 1;
        if config.term == UNINITIALIZED_TERM {
            return;
        }
        let key = (config.version, config.term);
        let this = membership(config);
        match self.configs.get(&key) {
            Some(known) if *known != this => self.violation(format!(
                "ConfigUnique: member {member} holds configuration {} with members {this:?}, known with {known:?}",
                config.version_and_term()
            )),
            Some(_) => {}
            None => {
                self.configs.insert(key, this);
            }
        }
    }

    /// `member`, whose durable term and vote are `persisted`, sends `message` to `to`.
    pub fn on_send(&mut self, member: MemberId, persisted: Persisted, to: MemberId, message: &Message) {
        if mutation::on(Mutation::UncheckedSendOrder) {
            return;
        }
        let (term, vote) = match message {
            // A dry run asks for a term nobody records.
            Message::RequestVote(request) if request.dry_run => return,
            Message::RequestVote(request) => (request.term, Some(member)),
            Message::VoteResponse(response) if response.granted && !response.dry_run => (response.term, Some(to)),
            other => (other.term(), None),
        };
        if term > persisted.term {
            self.violation(format!(
                "DurableBeforeSend: member {member} sent term {term} to {to} with term {} durable",
                persisted.term
            ));
        } else if vote.is_some() && (persisted.term != term || persisted.voted_for != vote) {
            self.violation(format!(
                "DurableBeforeSend: member {member} sent a vote for {vote:?} in term {term} to {to}, durable: {persisted:?}"
            ));
        }
    }

    /// `member` became primary in `term` with `log`.
    pub fn on_primary(&mut self, member: MemberId, term: i64, log: &[OpTime]) {
        if let Some(&other) = self.primaries.get(&term) {
            if other != member {
                self.violation(format!("NoTwoPrimariesInSameTerm: {other} and {member} in term {term}"));
            }
        }
        self.primaries.insert(term, member);
        let last = self.last_committed();
        if !last.is_null() && !contains(log, last) {
            let last = ShortOpTime(last);
            self.violation(format!(
                "LeaderCompleteness: new primary {member} (term {term}) lacks committed {last}"
            ));
        }
        if let Some(&missing) = self.acked.iter().find(|&&a| !contains(log, a)) {
            let missing = ShortOpTime(missing);
            self.violation(format!(
                "AckBackedByMajority: new primary {member} (term {term}) lacks acked {missing}"
            ));
        }
    }

    /// `member`, whose configuration has the commit quorum `quorum`,
    /// advanced its commit point from `previous` to `commit_point`.
    pub fn on_commit_point(
        &mut self,
        member: MemberId,
        previous: OpTime,
        commit_point: OpTime,
        log: &[OpTime],
        quorum: Quorum,
    ) {
        let (c, p) = (ShortOpTime(commit_point), ShortOpTime(previous));
        if commit_point < previous {
            self.violation(format!("CommitPointMonotonic: member {member} from {p} to {c}"));
        }
        let Ok(index) = log.binary_search(&commit_point) else {
            self.violation(format!(
                "CommitPointInLog: member {member} commit point {c} not in its log"
            ));
            return;
        };
        let last = self.last_committed();
        if commit_point <= last {
            if !contains(&self.committed, commit_point) {
                self.violation(format!(
                    "CommittedPrefix: member {member} commit point {c} off the committed prefix"
                ));
            }
            return;
        }
        let start = if last.is_null() {
            0
        } else {
            match log.binary_search(&last) {
                Ok(i) => i + 1,
                Err(_) => {
                    let last = ShortOpTime(last);
                    self.violation(format!("CommittedPrefix: member {member} commits {c} without {last}"));
                    return;
                }
            }
        };
        self.committed.extend_from_slice(&log[start..=index]);
        self.committed_in_term.resize(self.committed.len(), commit_point.term);
        self.last_commit_quorum = quorum;
    }

    /// `member`, in `term` with commit point `commit_point`, rolled back `removed`.
    pub fn on_rollback(&mut self, member: MemberId, term: i64, commit_point: OpTime, removed: &[OpTime]) {
        self.rollbacks += 1;
        for &entry in removed {
            let (e, c) = (ShortOpTime(entry), ShortOpTime(commit_point));
            if entry <= commit_point {
                self.violation(format!(
                    "NeverRollbackCommitted: member {member} rolled back {e} below its commit point {c}"
                ));
                return;
            }
            if let Ok(i) = self.committed.binary_search(&entry) {
                let committed_in = self.committed_in_term[i];
                if committed_in <= term {
                    self.violation(format!(
                        "NeverRollbackCommitted: member {member} (term {term}) rolled back {e}, committed in term {committed_in}"
                    ));
                    return;
                }
                self.late_commit_rollbacks += 1;
            }
        }
    }

    /// A w:"majority" write at `optime` was acknowledged; `durable_logs`
    /// are the voters' durable log prefixes.
    pub fn on_ack(&mut self, optime: OpTime, durable_logs: &[&[OpTime]], majority: usize) {
        let holders = durable_logs.iter().filter(|log| contains(log, optime)).count();
        let o = ShortOpTime(optime);
        if holders < majority {
            self.violation(format!(
                "AckBackedByMajority: {o} acked with {holders} of {majority} needed"
            ));
        }
        if !contains(&self.committed, optime) {
            self.violation(format!("AckBackedByMajority: {o} acked but not committed"));
        }
        self.acked.push(optime);
    }

    /// The last committed entry must be durable on a write majority of the
    /// data-bearing voters of the configuration it was committed under;
    /// `durable_log` gives a member's durable log by `_id`.
    pub fn check_committed_on_majority<'a>(&mut self, durable_log: impl Fn(MemberId) -> Option<&'a [OpTime]>) {
        let last = self.last_committed();
        if last.is_null() {
            return;
        }
        let quorum = &self.last_commit_quorum;
        let holders = quorum
            .voters
            .iter()
            .filter(|&&id| durable_log(id).is_some_and(|log| contains(log, last)))
            .count();
        let majority = quorum.write_majority;
        if holders < majority {
            let last = ShortOpTime(last);
            self.violation(format!(
                "CommittedOnMajority: {last} durable on {holders} voters, {majority} needed"
            ));
        }
    }

    /// `edges[i]` is member i's sync source index, if any; `now` is the
    /// global simulated time.
    pub fn check_no_cycles(&mut self, edges: &[Option<usize>], ids: &[MemberId], now: u64) {
        let cycle = (0..edges.len()).find(|&start| {
            let mut at = start;
            for _ in 0..edges.len() {
                match edges[at] {
                    Some(next) if next == start => return true,
                    Some(next) => at = next,
                    None => return false,
                }
            }
            false
        });
        let Some(member) = cycle else {
            self.cycle_since = None;
            return;
        };
        let since = *self.cycle_since.get_or_insert_with(|| {
            self.cycles_formed += 1;
            now
        });
        if now - since > SYNC_SOURCE_CYCLE_MAX_MS {
            self.violation(format!(
                "NoSyncSourceCycle: a cycle through member {} has lasted {} ms",
                ids[member],
                now - since
            ));
            self.cycle_since = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Checker;
    use crate::message::{Message, VoteRequest, VoteResponse};
    use crate::node::Persisted;
    use slipstream_clock::OpTime;

    fn vote(term: i64, granted: bool) -> Message {
        Message::VoteResponse(VoteResponse {
            term,
            request_term: term,
            dry_run: false,
            granted,
            reason: "",
        })
    }

    fn request(term: i64, dry_run: bool) -> Message {
        Message::RequestVote(VoteRequest {
            term,
            candidate: 1,
            last_applied: OpTime::NULL,
            config_version: 1,
            config_term: 1,
            dry_run,
        })
    }

    fn durable(term: i64, voted_for: Option<u32>) -> Persisted {
        Persisted { term, voted_for }
    }

    #[test]
    fn durable_before_send() {
        let mut checker = Checker::default();
        // Allowed: a granted vote already durable, a refusal, a dry run
        // asking for a term nobody records, a candidate's own durable vote.
        checker.on_send(2, durable(3, Some(1)), 1, &vote(3, true));
        checker.on_send(2, durable(3, None), 1, &vote(3, false));
        checker.on_send(1, durable(2, None), 2, &request(3, true));
        checker.on_send(1, durable(3, Some(1)), 2, &request(3, false));
        assert!(checker.violations.is_empty(), "{:?}", checker.violations);
        // A granted vote not durable yet, a term not durable yet, a
        // candidate whose own vote is not durable.
        checker.on_send(2, durable(3, None), 1, &vote(3, true));
        checker.on_send(2, durable(2, Some(1)), 1, &vote(3, false));
        checker.on_send(1, durable(3, None), 2, &request(3, false));
        assert_eq!(checker.violations.len(), 3, "{:?}", checker.violations);
        assert!(checker.violations.iter().all(|v| v.starts_with("DurableBeforeSend")));
    }
}
