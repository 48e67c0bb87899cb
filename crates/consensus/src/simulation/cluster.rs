//! A deterministic cluster of `Node`s: each member's oplog (a list of
//! OpTimes; payloads do not matter to consensus), its durable prefix, its
//! persisted term and vote, a clock, and an emulated oplog fetcher; plus a
//! network that can delay, drop, duplicate, reorder and partition. Every
//! action a node returns is carried out here the way the `repl` layer
//! will, and every invariant of `Checker` is checked on the way.

use crate::config::ReplSetConfig;
use crate::io::{Action, Event, PullBatch, StepDownError};
use crate::message::Message;
use crate::node::{Node, Persisted};
use crate::optime::{MemberId, Millis, OpTime};
use crate::simulation::checker::Checker;
use crate::simulation::rng::Rng;
use crate::state::MemberState;
use crate::write_concern::{WriteConcern, WriteConcernStatus, W};
use std::collections::{BinaryHeap, VecDeque};
use std::cmp::Reverse;

/// Most entries one pull returns.
pub const PULL_BATCH_ENTRIES_MAX: usize = 16;
/// How long a pull that found nothing new waits before the next one
/// (the awaitData timeout of the tailable oplog query).
pub const PULL_AWAIT_MS: u64 = 50;
/// How long a pull may stay unanswered before it counts as failed.
pub const PULL_TIMEOUT_MS: u64 = 400;
/// Most messages in flight; beyond it new ones are dropped (a full socket).
pub const IN_FLIGHT_MAX: usize = 100_000;
/// Most majority writes waiting for acknowledgement at once.
pub const PENDING_WRITES_MAX: usize = 64;
/// Most rounds `stabilize` runs before giving up.
pub const STABILIZE_ROUNDS_MAX: usize = 200;

/// What travels between members.
#[derive(Clone, Debug)]
pub enum Payload {
    /// A consensus message.
    Consensus(Message),
    /// PullEntries: entries with timestamp at or after `after`'s.
    PullRequest {
        /// The puller's last entry.
        after: OpTime,
    },
    /// The answer to a pull.
    PullResponse {
        /// Echo of the request's `after`.
        after: OpTime,
        /// The entries.
        entries: Vec<OpTime>,
        /// The source's commit point.
        commit_point: OpTime,
        /// The source's term.
        term: u64,
    },
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Consensus(m) => write!(f, "{m}"),
            Payload::PullRequest { after } => write!(f, "PullRequest after={after}"),
            Payload::PullResponse { entries, commit_point, term, .. } => {
                write!(f, "PullResponse term={term} commit={commit_point} [")?;
                for (i, e) in entries.iter().enumerate() {
                    write!(f, "{}{e}", if i > 0 { " " } else { "" })?;
                }
                write!(f, "]")
            }
        }
    }
}

/// A message on the wire.
#[derive(Clone, Debug)]
pub struct Envelope {
    /// Sender index.
    pub from: usize,
    /// Receiver index.
    pub to: usize,
    /// Content.
    pub payload: Payload,
}

/// Network and process faults for randomized runs (all zero: a perfect network).
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Chance per message to drop it, in millionths.
    pub drop_per_million: u64,
    /// Chance per message to deliver it twice, in millionths.
    pub duplicate_per_million: u64,
    /// Smallest delivery delay.
    pub delay_min_ms: u64,
    /// Largest delivery delay (random delays reorder messages).
    pub delay_max_ms: u64,
    /// Largest clock offset of a member against the global clock.
    pub clock_jitter_ms: u64,
    /// Chance, in millionths, that a member crashes right after the action
    /// that sends a granted vote, before the rest of that step's actions (a
    /// targeted fault: it loses whatever the step would have persisted
    /// after the reply).
    pub crash_after_vote_per_million: u64,
    /// Chance per step, in millionths, that the member crashes while the
    /// step's actions are carried out: after a prefix of them, drawn
    /// uniformly from none to all. What survives is what the actions before
    /// the crash made durable.
    pub crash_in_step_per_million: u64,
    /// Largest election timeout jitter (`None`: up to an election timeout).
    /// Small values make concurrent candidates, and split votes, common.
    pub election_jitter_max_ms: Option<u64>,
}

/// One simulated member process.
#[derive(Debug)]
pub struct SimMember {
    /// `_id`.
    pub id: MemberId,
    /// The state machine; `None` while crashed.
    pub node: Option<Node>,
    /// The oplog.
    pub log: Vec<OpTime>,
    /// How much of `log` survives a crash.
    pub durable_len: usize,
    /// Term and vote as persisted.
    pub persisted: Persisted,
    /// This member's clock.
    pub clock: u64,
    /// Offset of the clock against the global one (randomized runs).
    pub clock_offset: u64,
    /// The fetcher's source (mirrors `Action::SetSyncSource`).
    pub fetch_source: Option<usize>,
    /// A pull in flight: (source, after, sent at).
    pub pull_in_flight: Option<(usize, OpTime, u64)>,
    /// Earliest time of the next pull.
    pub next_pull_at: u64,
    /// The last pull's entries, kept until the node says append or not.
    pub pending_batch: Vec<OpTime>,
    /// Commit point seen at the last check (this incarnation).
    pub last_commit_point: OpTime,
}

impl SimMember {
    fn durable_log(&self) -> &[OpTime] {
        &self.log[..self.durable_len]
    }
    fn last(&self) -> OpTime {
        self.log.last().copied().unwrap_or(OpTime::NULL)
    }
}

/// A simulated replica set.
pub struct Cluster {
    /// The configuration all members share.
    pub config: ReplSetConfig,
    /// The members, in configuration order.
    pub members: Vec<SimMember>,
    /// Global time (randomized runs).
    pub now: u64,
    /// The randomness of this run.
    pub rng: Rng,
    /// Faults in force.
    pub faults: Faults,
    /// `link[i][j]`: messages from i reach j.
    pub link: Vec<Vec<bool>>,
    /// Manual mode: messages wait in `pending` until delivered by command,
    /// and everything that happens is written to `trace`.
    pub manual: bool,
    /// Messages waiting (manual mode).
    pub pending: VecDeque<Envelope>,
    in_flight: BinaryHeap<Reverse<(u64, u64, usize)>>,
    envelopes: Vec<Option<Envelope>>,
    free_slots: Vec<usize>,
    sequence: u64,
    /// Human-readable log of events (manual mode, or when `tracing`).
    pub trace: Vec<String>,
    /// Record `trace` in randomized runs too (for replaying a failing seed).
    pub tracing: bool,
    /// Invariant checks.
    pub checker: Checker,
    /// Node steps taken.
    pub steps: u64,
    /// Majority writes waiting: (member index, OpTime, started at).
    pub pending_writes: Vec<(usize, OpTime, u64)>,
    /// Durability lags behind appends (randomized runs) or follows at once.
    pub lazy_durability: bool,
    /// Last stepdown outcome per member.
    pub step_down_results: Vec<Option<Result<(), StepDownError>>>,
    /// When each crashed member restarts (randomized runs).
    pub restart_at: Vec<Option<u64>>,
    /// Crashes in the middle of a step, for the report.
    pub crashes_in_step: u64,
}

impl Cluster {
    /// A cluster of `config`'s members, all started with empty logs.
    pub fn new(config: ReplSetConfig, seed: u64, faults: Faults, manual: bool) -> Cluster {
        config.validate().expect("valid configuration");
        let n = config.members.len();
        let mut rng = Rng::new(seed);
        let mut members = Vec::with_capacity(n);
        for m in &config.members {
            let offset = if faults.clock_jitter_ms > 0 { rng.below(faults.clock_jitter_ms + 1) } else { 0 };
            members.push(SimMember {
                id: m.id,
                node: None,
                log: Vec::new(),
                durable_len: 0,
                persisted: Persisted::default(),
                clock: offset,
                clock_offset: offset,
                fetch_source: None,
                pull_in_flight: None,
                next_pull_at: 0,
                pending_batch: Vec::new(),
                last_commit_point: OpTime::NULL,
            });
        }
        let mut cluster = Cluster {
            config,
            members,
            now: 0,
            rng,
            faults,
            link: vec![vec![true; n]; n],
            manual,
            pending: VecDeque::new(),
            in_flight: BinaryHeap::new(),
            envelopes: Vec::new(),
            free_slots: Vec::new(),
            sequence: 0,
            trace: Vec::new(),
            tracing: manual,
            checker: Checker::default(),
            steps: 0,
            pending_writes: Vec::new(),
            lazy_durability: !manual,
            step_down_results: vec![None; n],
            restart_at: vec![None; n],
            crashes_in_step: 0,
        };
        for i in 0..n {
            cluster.start(i);
        }
        cluster
    }

    /// Index of the member with `_id` `id`.
    pub fn index(&self, id: MemberId) -> usize {
        self.config.index_of(id).expect("member in configuration")
    }

    /// The random part of an election timeout (zero in manual mode).
    pub fn election_jitter(&mut self) -> u64 {
        if self.manual {
            return 0;
        }
        let max = self.faults.election_jitter_max_ms.unwrap_or(self.config.settings.election_timeout_ms);
        self.rng.below(max + 1)
    }

    fn start(&mut self, i: usize) {
        let jitter = self.election_jitter();
        let m = &mut self.members[i];
        assert!(m.node.is_none());
        let last = m.last();
        let node = Node::new(self.config.clone(), m.id, m.persisted, last, last, jitter, Millis(m.clock))
            .expect("valid configuration");
        m.node = Some(node);
        m.last_commit_point = OpTime::NULL;
        m.fetch_source = None;
        m.pull_in_flight = None;
        m.pending_batch.clear();
    }

    /// Crashes member `i`: what was not durable is lost.
    pub fn crash(&mut self, i: usize) {
        let m = &mut self.members[i];
        if m.node.take().is_none() {
            return;
        }
        m.log.truncate(m.durable_len);
        m.fetch_source = None;
        m.pull_in_flight = None;
        self.pending_writes.retain(|&(w, _, _)| w != i);
        let line = format!("{} crashed; log ends at {}", m.id, m.last());
        self.note(line);
    }

    /// Restarts crashed member `i` from its durable state.
    pub fn restart(&mut self, i: usize) {
        if self.members[i].node.is_some() {
            return;
        }
        self.start(i);
        let id = self.members[i].id;
        self.note(format!("{id} restarted"));
        self.drive_fetcher(i);
    }

    /// Whether member `i` is running.
    pub fn is_alive(&self, i: usize) -> bool {
        self.members[i].node.is_some()
    }

    /// Adds `line` to the trace (when tracing).
    pub fn note(&mut self, line: String) {
        if self.tracing {
            let line = if self.manual { line } else { format!("{:>7} {line}", self.now) };
            self.trace.push(line);
        }
    }

    /// Feeds `event` to member `i` and carries out everything that follows.
    /// A randomized run may crash a member part way through a step's
    /// actions (`Faults::crash_in_step_per_million`,
    /// `Faults::crash_after_vote_per_million`): the caller carries them out
    /// in order, and a process can die between any two.
    pub fn step(&mut self, i: usize, event: Event) {
        let mut queue = VecDeque::from([(i, event)]);
        while let Some((at, event)) = queue.pop_front() {
            let now = Millis(self.members[at].clock);
            let Some(node) = self.members[at].node.as_mut() else { continue };
            let actions = node.step(event, now);
            self.steps += 1;
            let mut crash_after = self.draw_crash_point(actions.len());
            for (done, action) in actions.into_iter().enumerate() {
                if crash_after == Some(done) {
                    break;
                }
                let granted_vote =
                    matches!(&action, Action::Send { message: Message::VoteResponse(r), .. } if r.granted && !r.dry_run);
                self.apply(at, action, &mut queue);
                if granted_vote && !self.manual && self.rng.chance(self.faults.crash_after_vote_per_million) {
                    crash_after = Some(done + 1);
                    break;
                }
            }
            if crash_after.is_some() {
                self.crash_in_step(at);
                continue;
            }
            self.after_step(at);
        }
    }

    /// How many of a step's `actions` run before a crash, if one is drawn.
    fn draw_crash_point(&mut self, actions: usize) -> Option<usize> {
        if self.manual || !self.rng.chance(self.faults.crash_in_step_per_million) {
            return None;
        }
        Some(self.rng.range(0, actions as u64) as usize)
    }

    /// Crashes member `i` part way through a step; it restarts soon, so that
    /// whatever it forgot (a vote not yet durable) matters at once.
    fn crash_in_step(&mut self, i: usize) {
        self.crashes_in_step += 1;
        let id = self.members[i].id;
        self.note(format!("  {id}: crashes in the middle of a step"));
        self.crash(i);
        self.restart_at[i] = Some(self.now + self.rng.range(1, 30));
    }

    fn apply(&mut self, i: usize, action: Action, queue: &mut VecDeque<(usize, Event)>) {
        let id = self.members[i].id;
        if self.tracing && !matches!(action, Action::Send { .. }) {
            self.note(format!("  {id}: {action}"));
        }
        match action {
            Action::Send { to, message } => {
                self.checker.on_send(id, self.members[i].persisted, to, &message);
                let to = self.index(to);
                self.send(i, to, Payload::Consensus(message));
            }
            Action::PersistTermAndVote { term, voted_for } => {
                self.members[i].persisted = Persisted { term, voted_for };
            }
            Action::SetSyncSource(source) => {
                let m = &mut self.members[i];
                m.fetch_source = source.map(|s| self.config.index_of(s).expect("member"));
                m.pull_in_flight = None;
                m.next_pull_at = m.clock;
            }
            Action::AppendBatch { .. } => self.append_batch(i, queue),
            Action::FindCommonPoint { source } => self.find_common_point(i, self.index(source), queue),
            Action::Rollback { common_point } => self.rollback(i, common_point, queue),
            Action::AdvanceCommitPoint(commit_point) => {
                let m = &mut self.members[i];
                let previous = m.last_commit_point;
                m.last_commit_point = commit_point;
                self.checker.on_commit_point(id, previous, commit_point, &self.members[i].log);
            }
            Action::StateChanged { state, term } => {
                if state == MemberState::Primary {
                    self.checker.on_primary(id, term, &self.members[i].log);
                }
            }
            Action::WriteNoop(optime) => {
                self.write_entry(i, optime);
                queue.push_back((i, Event::Appended { last_applied: optime }));
                self.make_durable_if_eager(i, queue);
            }
            Action::AcceptWrites(_) => {}
            Action::StepDownFinished(result) => self.step_down_results[i] = Some(result),
        }
    }

    fn write_entry(&mut self, i: usize, optime: OpTime) {
        let m = &mut self.members[i];
        let previous = m.last();
        m.log.push(optime);
        self.checker.on_created(m.id, optime, previous);
    }

    fn make_durable_if_eager(&mut self, i: usize, queue: &mut VecDeque<(usize, Event)>) {
        if !self.lazy_durability {
            let m = &mut self.members[i];
            m.durable_len = m.log.len();
            queue.push_back((i, Event::Durable { last_durable: m.last() }));
        }
    }

    /// Makes member `i`'s whole log durable (a group-commit fsync).
    pub fn flush(&mut self, i: usize) {
        let m = &mut self.members[i];
        if m.node.is_none() || m.durable_len == m.log.len() {
            return;
        }
        m.durable_len = m.log.len();
        let last = m.last();
        self.step(i, Event::Durable { last_durable: last });
    }

    fn append_batch(&mut self, i: usize, queue: &mut VecDeque<(usize, Event)>) {
        let batch = std::mem::take(&mut self.members[i].pending_batch);
        let m = &mut self.members[i];
        let mut appended = false;
        for entry in batch {
            let previous = m.last();
            if entry <= previous {
                continue;
            }
            m.log.push(entry);
            self.checker.on_copied(m.id, entry, previous);
            appended = true;
        }
        assert!(appended, "AppendBatch for a batch with nothing new");
        let last = m.last();
        queue.push_back((i, Event::Appended { last_applied: last }));
        self.make_durable_if_eager(i, queue);
    }

    /// Finds the common point with the source (RollbackImpl reads the
    /// source's oplog backwards).
    fn find_common_point(&mut self, i: usize, source: usize, queue: &mut VecDeque<(usize, Event)>) {
        let id = self.members[source].id;
        let reachable = self.is_alive(source) && self.link[i][source] && self.link[source][i];
        if !reachable {
            queue.push_back((i, Event::RollbackFailed { source: id }));
            return;
        }
        let source_member = &self.members[source];
        let source_log = &source_member.log;
        let log = &self.members[i].log;
        let common_point = log
            .iter()
            .rev()
            .find(|e| source_log.binary_search(e).is_ok())
            .copied()
            .unwrap_or(OpTime::NULL);
        // Read in the same instant as the search, as the event requires.
        let source_last = source_member.last();
        let source_commit_point = source_member.node.as_ref().expect("alive").commit_point();
        queue.push_back((i, Event::CommonPointFound { source: id, common_point, source_last, source_commit_point }));
    }

    /// Truncates after `common_point`.
    fn rollback(&mut self, i: usize, common_point: OpTime, queue: &mut VecDeque<(usize, Event)>) {
        let log = &self.members[i].log;
        let keep = if common_point.is_null() { 0 } else { log.binary_search(&common_point).expect("common point in log") + 1 };
        let removed: Vec<OpTime> = log[keep..].to_vec();
        let id = self.members[i].id;
        let node = self.members[i].node.as_ref().expect("alive");
        self.checker.on_rollback(id, node.term(), node.commit_point(), &removed);
        let m = &mut self.members[i];
        m.log.truncate(keep);
        m.durable_len = m.durable_len.min(keep);
        self.note(format!("  {id}: rolled back {} entries to {common_point}", removed.len()));
        queue.push_back((i, Event::RollbackComplete { common_point }));
    }

    /// Invariants and bookkeeping after member `i` stepped.
    fn after_step(&mut self, i: usize) {
        self.check_pending_writes(i);
        self.drive_fetcher(i);
    }

    /// Checks the invariants that span all members.
    pub fn check_global_invariants(&mut self) {
        let majority = self.config.write_majority();
        let voters: Vec<&[OpTime]> = self
            .members
            .iter()
            .zip(&self.config.members)
            .filter(|(_, c)| c.is_voter() && c.is_data_bearing())
            .map(|(m, _)| m.durable_log())
            .collect();
        self.checker.check_committed_on_majority(&voters, majority);
        let edges: Vec<Option<usize>> = self
            .members
            .iter()
            .map(|m| m.node.as_ref().and_then(|n| n.sync_source()).and_then(|s| self.config.index_of(s)))
            .collect();
        let ids: Vec<MemberId> = self.members.iter().map(|m| m.id).collect();
        let now = if self.manual { self.members.iter().map(|m| m.clock).max().unwrap_or(0) } else { self.now };
        self.checker.check_no_cycles(&edges, &ids, now);
    }

    fn check_pending_writes(&mut self, i: usize) {
        if self.pending_writes.is_empty() {
            return;
        }
        let concern = WriteConcern { w: W::Majority, journal: true, wtimeout_ms: None };
        let mut index = 0;
        while index < self.pending_writes.len() {
            let (member, optime, started) = self.pending_writes[index];
            if member != i {
                index += 1;
                continue;
            }
            let Some(node) = self.members[i].node.as_ref() else {
                self.pending_writes.swap_remove(index);
                continue;
            };
            let status = node.evaluate_write_concern(optime, &concern, Millis(started), Millis(self.members[i].clock));
            match status {
                WriteConcernStatus::Waiting => index += 1,
                WriteConcernStatus::Satisfied => {
                    self.pending_writes.swap_remove(index);
                    self.acknowledge(optime);
                }
                _ => {
                    self.pending_writes.swap_remove(index);
                }
            }
        }
    }

    fn acknowledge(&mut self, optime: OpTime) {
        let majority = self.config.write_majority();
        let voters: Vec<&[OpTime]> = self
            .members
            .iter()
            .zip(&self.config.members)
            .filter(|(_, c)| c.is_voter() && c.is_data_bearing())
            .map(|(m, _)| m.durable_log())
            .collect();
        self.checker.on_ack(optime, &voters, majority);
        self.note(format!("  acknowledged w:majority write {optime}"));
    }

    /// A client write at member `i`; returns its OpTime if accepted.
    pub fn client_write(&mut self, i: usize, majority: bool) -> Option<OpTime> {
        let clock = Millis(self.members[i].clock);
        let node = self.members[i].node.as_mut()?;
        let optime = node.prepare_write(clock).ok()?;
        self.write_entry(i, optime);
        let mut queue = VecDeque::new();
        queue.push_back((i, Event::Appended { last_applied: optime }));
        self.make_durable_if_eager(i, &mut queue);
        while let Some((at, event)) = queue.pop_front() {
            self.step(at, event);
        }
        if majority && self.pending_writes.len() < PENDING_WRITES_MAX {
            self.pending_writes.push((i, optime, clock.0));
            self.check_pending_writes(i);
        }
        Some(optime)
    }

    /// The emulated oplog fetcher: one pull in flight at a time.
    fn drive_fetcher(&mut self, i: usize) {
        let m = &mut self.members[i];
        if m.node.is_none() {
            return;
        }
        let Some(source) = m.fetch_source else { return };
        if let Some((_, _, sent)) = m.pull_in_flight {
            if m.clock.saturating_sub(sent) < PULL_TIMEOUT_MS {
                return;
            }
            m.pull_in_flight = None;
            let id = self.members[source].id;
            self.step(i, Event::PullFailed { source: id });
            return;
        }
        if m.clock < m.next_pull_at {
            return;
        }
        let after = m.last();
        m.pull_in_flight = Some((source, after, m.clock));
        self.send(i, source, Payload::PullRequest { after });
    }

    fn send(&mut self, from: usize, to: usize, payload: Payload) {
        if !self.link[from][to] {
            if self.tracing {
                let (a, b) = (self.members[from].id, self.members[to].id);
                self.note(format!("dropped {a}->{b}: {payload}"));
            }
            return;
        }
        let envelope = Envelope { from, to, payload };
        if self.manual {
            self.pending.push_back(envelope);
            return;
        }
        if self.envelopes.len() - self.free_slots.len() >= IN_FLIGHT_MAX
            || self.rng.chance(self.faults.drop_per_million)
        {
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate_per_million) { 2 } else { 1 };
        for _ in 0..copies {
            let delay = self.rng.range(self.faults.delay_min_ms, self.faults.delay_max_ms.max(self.faults.delay_min_ms));
            let slot = match self.free_slots.pop() {
                Some(s) => {
                    self.envelopes[s] = Some(envelope.clone());
                    s
                }
                None => {
                    self.envelopes.push(Some(envelope.clone()));
                    self.envelopes.len() - 1
                }
            };
            self.sequence += 1;
            self.in_flight.push(Reverse((self.now + delay, self.sequence, slot)));
        }
    }

    /// Delivers one message to its receiver.
    pub fn deliver(&mut self, envelope: Envelope) {
        let Envelope { from, to, payload } = envelope;
        if !self.is_alive(to) || !self.link[from][to] {
            return;
        }
        let from_id = self.members[from].id;
        if self.tracing {
            let to_id = self.members[to].id;
            self.note(format!("{from_id}->{to_id} {payload}"));
        }
        match payload {
            Payload::Consensus(message) => self.step(to, Event::Receive { from: from_id, message }),
            Payload::PullRequest { after } => self.serve_pull(to, from, after),
            Payload::PullResponse { after, entries, commit_point, term } => {
                self.on_pull_response(to, from, after, entries, commit_point, term)
            }
        }
    }

    /// The source side of PullEntries: entries from the first with a
    /// timestamp at or after `after`'s.
    fn serve_pull(&mut self, source: usize, puller: usize, after: OpTime) {
        let m = &self.members[source];
        let Some(node) = m.node.as_ref() else { return };
        let start = m.log.partition_point(|e| e.timestamp < after.timestamp);
        let end = (start + PULL_BATCH_ENTRIES_MAX).min(m.log.len());
        let entries = m.log[start..end].to_vec();
        let payload = Payload::PullResponse { after, entries, commit_point: node.commit_point(), term: node.term() };
        self.send(source, puller, payload);
    }

    fn on_pull_response(&mut self, i: usize, source: usize, after: OpTime, entries: Vec<OpTime>, commit_point: OpTime, term: u64) {
        let m = &mut self.members[i];
        match m.pull_in_flight {
            Some((s, a, _)) if s == source && a == after && m.last() == after => {}
            _ => return,
        }
        m.pull_in_flight = None;
        let new_entries = entries.last().is_some_and(|&l| l > after);
        m.next_pull_at = if new_entries { m.clock } else { m.clock + PULL_AWAIT_MS };
        let batch = PullBatch {
            source: self.members[source].id,
            first: entries.first().copied(),
            last: entries.last().copied(),
            source_commit_point: commit_point,
            source_term: term,
        };
        self.members[i].pending_batch = entries;
        self.step(i, Event::Pulled(batch));
        self.members[i].pending_batch.clear();
    }

    /// Randomized runs: pops and delivers every message due by `self.now`.
    pub fn deliver_due(&mut self) {
        while let Some(&Reverse((at, _, slot))) = self.in_flight.peek() {
            if at > self.now {
                break;
            }
            self.in_flight.pop();
            let envelope = self.envelopes[slot].take().expect("slot in use");
            self.free_slots.push(slot);
            self.deliver(envelope);
        }
    }

    /// Loses every message in flight; fetchers stop waiting for answers
    /// that will not come and pull again at once.
    pub fn drop_in_flight(&mut self) {
        self.in_flight.clear();
        self.envelopes.clear();
        self.free_slots.clear();
        self.pending.clear();
        for m in &mut self.members {
            m.pull_in_flight = None;
            m.next_pull_at = m.clock;
        }
    }

    /// Messages in flight (randomized runs).
    pub fn in_flight_count(&self) -> usize {
        self.envelopes.len() - self.free_slots.len()
    }

    /// Sets links so that only members in the same group talk.
    pub fn partition(&mut self, groups: &[Vec<usize>]) {
        let n = self.members.len();
        for a in 0..n {
            for b in 0..n {
                let together = groups.iter().any(|g| g.contains(&a) && g.contains(&b));
                self.link[a][b] = a == b || together;
            }
        }
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        for row in &mut self.link {
            row.iter_mut().for_each(|l| *l = true);
        }
    }

    /// The writable primary, if exactly one member thinks it is.
    pub fn writable_primary(&self) -> Option<usize> {
        let mut found = None;
        for (i, m) in self.members.iter().enumerate() {
            if m.node.as_ref().is_some_and(|n| n.is_writable_primary()) {
                match found {
                    None => found = Some(i),
                    Some(f) => {
                        let (tf, ti) = (self.members[f].node.as_ref().unwrap().term(), m.node.as_ref().unwrap().term());
                        if ti > tf {
                            found = Some(i);
                        }
                    }
                }
            }
        }
        found
    }

    /// One line per member: state, term, positions, sync source, log tail.
    pub fn status(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for m in &self.members {
            let Some(node) = m.node.as_ref() else {
                lines.push(format!("{}: DOWN log={}", m.id, format_log(&m.log)));
                continue;
            };
            let source = node.sync_source().map_or("-".to_string(), |s| s.to_string());
            let vote = node.voted_for().map_or("-".to_string(), |v| v.to_string());
            lines.push(format!(
                "{}: {}{} term={} vote={} applied={} durable={} commit={} sync={} log={}",
                m.id,
                node.state(),
                if node.is_writable_primary() { "(writable)" } else { "" },
                node.term(),
                vote,
                node.last_applied(),
                node.last_durable(),
                node.commit_point(),
                source,
                format_log(&m.log)
            ));
        }
        lines
    }
}

/// Most log entries `status` prints (the tail).
pub const STATUS_LOG_ENTRIES_MAX: usize = 8;

/// `[1.5 1.7 2.9]`, or `[... 2.9]` (the tail) for a long log.
pub fn format_log(log: &[OpTime]) -> String {
    let skip = log.len().saturating_sub(STATUS_LOG_ENTRIES_MAX);
    let items: Vec<String> = log[skip..].iter().map(|e| e.to_string()).collect();
    let prefix = if skip > 0 { format!("({skip} more) ") } else { String::new() };
    format!("[{prefix}{}]", items.join(" "))
}
