//! A deterministic cluster of member processes (`SimMember`): each with
//! its `Node`, oplog, durable state, clock and oplog clock, and an emulated
//! oplog fetcher; plus a network that can delay, drop, duplicate, reorder
//! and partition. Every action a node returns is carried out here the way
//! the `repl` layer will, and every invariant of `Checker` is checked on
//! the way. Configurations (persisting, fetching, members not yet
//! initiated) are in `cluster_configs.rs`.

use crate::config::{MemberId, ReplSetConfig};
use crate::error::StepDownError;
use crate::io::{Action, Event, PullBatch};
use crate::message::Message;
use crate::millis::{Millis, ShortOpTime};
use crate::simulation::checker::{Checker, Quorum};
use crate::simulation::member::{Outstanding, Request, SimMember};
use crate::simulation::rng::Rng;
use crate::state::MemberState;
use crate::write_concern::{WriteConcern, WriteConcernStatus, W};
use slipstream_clock::{OpTime, Timestamp};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// Most entries one pull returns.
pub const PULL_BATCH_ENTRIES_MAX: usize = 16;
/// How long a pull that found nothing new waits before the next one
/// (the awaitData timeout of the tailable oplog query).
pub const PULL_AWAIT_MS: u64 = 50;
/// How long a pull may stay unanswered before it counts as failed.
pub const PULL_TIMEOUT_MS: u64 = 400;
/// A vote request unanswered that long fails (`Event::VoteRequestFailed`).
pub const VOTE_TIMEOUT_MS: u64 = 400;
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
    PullResponse(PullReply),
    /// A request for the receiver's configuration (`Action::FetchConfig`;
    /// in MongoDB it rides on a heartbeat response).
    ConfigRequest,
    /// The receiver's configuration.
    ConfigResponse(ReplSetConfig),
}

/// The answer to a pull: a batch and the source's state when it answered
/// (what MongoDB's `$replData` and `$oplogQueryData` carry).
#[derive(Clone, Debug)]
pub struct PullReply {
    /// Echo of the request's `after`.
    pub after: OpTime,
    /// The entries (at most `PULL_BATCH_ENTRIES_MAX`).
    pub entries: Vec<OpTime>,
    /// The source's commit point.
    pub commit_point: OpTime,
    /// The source's term.
    pub term: i64,
    /// The source's last entry, past the batch when the batch is full.
    pub source_last: OpTime,
}

impl std::fmt::Display for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Consensus(m) => write!(f, "{m}"),
            Payload::PullRequest { after } => write!(f, "PullRequest after={}", ShortOpTime(*after)),
            Payload::PullResponse(PullReply {
                entries,
                commit_point,
                term,
                ..
            }) => {
                write!(f, "PullResponse term={term} commit={} [", ShortOpTime(*commit_point))?;
                for (i, e) in entries.iter().enumerate() {
                    write!(f, "{}{}", if i > 0 { " " } else { "" }, ShortOpTime(*e))?;
                }
                write!(f, "]")
            }
            Payload::ConfigRequest => write!(f, "ConfigRequest"),
            Payload::ConfigResponse(c) => {
                let ids: Vec<String> = c.members.iter().map(|m| m.id.to_string()).collect();
                write!(f, "ConfigResponse {} members=[{}]", c.version_and_term(), ids.join(" "))
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
    /// The sender's cluster time (`$clusterTime`, gossiped with every message).
    pub cluster_time: Timestamp,
    /// A heartbeat request's `heartbeat_generation`, echoed by its response
    /// (the I/O layer knows which request an answer belongs to).
    pub tag: u64,
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

/// A simulated replica set.
pub struct Cluster {
    /// The newest configuration any member has persisted (the one the set
    /// started with until a reconfig). Its settings are every member's.
    pub config: ReplSetConfig,
    /// The member processes: the initial configuration's members in order,
    /// then any spares added later.
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
    /// Reconfigurations a node accepted (`ReconfigFinished(Ok)`), for the report.
    pub reconfigs_accepted: u64,
    /// Wall-clock date (ms) of every entry ever written, by OpTime (unique).
    pub(crate) walls: HashMap<OpTime, i64>,
    /// While a member steps on a heartbeat request: the requester and the
    /// request's tag, for the response.
    answering: Option<(usize, u64)>,
}

impl Cluster {
    /// A cluster of `config`'s members, all started with empty logs and
    /// `config` as their initiated configuration.
    pub fn new(config: ReplSetConfig, seed: u64, faults: Faults, manual: bool) -> Cluster {
        config.validate().expect("valid configuration");
        let mut cluster = Cluster {
            config: config.clone(),
            members: Vec::with_capacity(config.members.len()),
            now: 0,
            rng: Rng::new(seed),
            faults,
            link: Vec::new(),
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
            step_down_results: Vec::new(),
            restart_at: Vec::new(),
            crashes_in_step: 0,
            reconfigs_accepted: 0,
            walls: HashMap::new(),
            answering: None,
        };
        for m in &config.members {
            cluster.add_process(m.id, m.host.clone(), Some(config.clone()));
        }
        for i in 0..cluster.members.len() {
            cluster.start(i);
        }
        cluster
    }

    /// Adds a member process (not started).
    pub(crate) fn add_process(&mut self, id: MemberId, host: String, config: Option<ReplSetConfig>) -> usize {
        assert!(
            self.members.iter().all(|m| m.id != id && m.host != host),
            "one process per _id and host"
        );
        let jitter = self.faults.clock_jitter_ms;
        let offset = if jitter > 0 { self.rng.below(jitter + 1) } else { 0 };
        let mut member = SimMember::new(id, host, config, offset);
        member.clock = member.clock.max(self.now + offset);
        self.members.push(member);
        let n = self.members.len();
        for row in &mut self.link {
            row.push(true);
        }
        self.link.push(vec![true; n]);
        self.step_down_results.push(None);
        self.restart_at.push(None);
        n - 1
    }

    /// Index of the process with `_id` `id`.
    pub fn index(&self, id: MemberId) -> usize {
        self.members
            .iter()
            .position(|m| m.id == id)
            .expect("a process with that _id")
    }

    /// The random part of an election timeout (zero in manual mode).
    pub fn election_jitter(&mut self) -> u64 {
        if self.manual {
            return 0;
        }
        let max = self
            .faults
            .election_jitter_max_ms
            .unwrap_or(self.config.settings.election_timeout_ms);
        self.rng.below(max + 1)
    }

    /// Wall-clock date of `entry` (0 for `OpTime::NULL`).
    pub fn wall(&self, entry: OpTime) -> i64 {
        if entry.is_null() {
            return 0;
        }
        *self
            .walls
            .get(&entry)
            .expect("every entry's date is recorded when written")
    }

    /// Starts process `i`: with its persisted configuration it runs a
    /// `Node`; without one it waits to be given a configuration.
    pub(crate) fn start(&mut self, i: usize) {
        assert!(!self.members[i].running);
        let jitter = self.election_jitter();
        self.members[i].running = true;
        self.members[i].last_commit_point = OpTime::NULL;
        self.members[i].next_pull_at = self.members[i].clock;
        self.start_node(i, jitter);
    }

    /// Creates the `Node` of running process `i` from its durable state.
    pub(crate) fn start_node(&mut self, i: usize, jitter: u64) {
        let m = &self.members[i];
        let Some(config) = m.persisted_config.clone() else {
            return;
        };
        let last = m.last();
        let oplog = crate::node::OplogPositions::at(last, self.wall(last));
        let m = &mut self.members[i];
        let node = crate::node::Node::new(config, m.id, m.persisted, oplog, jitter, Millis(m.clock))
            .expect("valid configuration");
        m.node = Some(node);
    }

    /// Crashes member `i`: what was not durable is lost.
    pub fn crash(&mut self, i: usize) {
        if !self.members[i].running {
            return;
        }
        self.members[i].lose_volatile_state();
        self.pending_writes.retain(|&(w, _, _)| w != i);
        let m = &self.members[i];
        let line = format!("{} crashed; log ends at {}", m.id, ShortOpTime(m.last()));
        self.note(line);
    }

    /// Restarts crashed member `i` from its durable state.
    pub fn restart(&mut self, i: usize) {
        if self.members[i].running {
            return;
        }
        self.start(i);
        let id = self.members[i].id;
        self.note(format!("{id} restarted"));
        self.drive_fetcher(i);
    }

    /// Whether member process `i` is running.
    pub fn is_alive(&self, i: usize) -> bool {
        self.members[i].running
    }

    /// Adds `line` to the trace (when tracing).
    pub fn note(&mut self, line: String) {
        if self.tracing {
            let line = if self.manual {
                line
            } else {
                format!("{:>7} {line}", self.now)
            };
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
            let Some(node) = self.members[at].node.as_mut() else {
                continue;
            };
            let actions = node.step(event, now);
            self.steps += 1;
            let mut crash_after = self.draw_crash_point(actions.len());
            for (done, action) in actions.into_iter().enumerate() {
                if crash_after == Some(done) {
                    break;
                }
                let granted_vote = matches!(&action, Action::Send { message: Message::VoteResponse(r), .. } if r.granted && !r.dry_run);
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
                let m = &mut self.members[i];
                let request = match &message {
                    Message::RequestVote(r) => Some(Request::Vote {
                        term: r.term,
                        dry_run: r.dry_run,
                    }),
                    Message::HeartbeatRequest(_) => Some(Request::Heartbeat {
                        generation: m.heartbeat_generation,
                    }),
                    _ => None,
                };
                if let Some(request) = request {
                    m.outstanding.push(Outstanding {
                        to,
                        request,
                        sent: m.clock,
                    });
                }
                self.send(i, to, Payload::Consensus(message));
            }
            Action::PersistTermAndVote { term, voted_for } => {
                self.members[i].persisted = crate::node::Persisted { term, voted_for };
            }
            Action::PersistConfig(config) => self.persist_config(i, config),
            Action::FetchConfig { from } => {
                let from = self.index(from);
                self.send(i, from, Payload::ConfigRequest);
            }
            Action::SetSyncSource(source) => {
                let source = source.map(|s| self.index(s));
                let m = &mut self.members[i];
                m.fetch_source = source;
                m.pull_in_flight = None;
                m.next_pull_at = m.clock;
            }
            Action::AppendBatch { .. } => self.append_batch(i, queue),
            Action::FindCommonPoint { source } => self.find_common_point(i, self.index(source), queue),
            Action::Rollback { common_point } => self.rollback(i, common_point, queue),
            Action::AdvanceCommitPoint(commit_point) => self.on_advance_commit_point(i, commit_point),
            Action::StateChanged { state, term } => {
                if state == MemberState::Primary {
                    self.checker.on_primary(id, term, &self.members[i].log);
                    // Catch-up hears only heartbeats sent from now on.
                    self.members[i].heartbeat_generation += 1;
                }
            }
            Action::WriteNoop => {
                let term = self.members[i].node.as_ref().expect("running").term();
                let entry = self.write_new_entry(i, term);
                queue.push_back((
                    i,
                    Event::Appended {
                        last_applied: entry,
                        wall_ms: self.wall(entry),
                    },
                ));
                self.make_durable_if_eager(i, queue);
            }
            Action::StepDownFinished(result) => self.step_down_results[i] = Some(result),
            Action::ReconfigFinished(result) => self.reconfigs_accepted += u64::from(result.is_ok()),
            Action::AcceptWrites(_)
            | Action::LostMajority { .. }
            | Action::ElectionStarted { .. }
            | Action::ElectionFinished { .. }
            | Action::StepUpFinished(_)
            | Action::FreezeFinished(_)
            | Action::ReportStateFinished(_) => {}
        }
    }

    fn on_advance_commit_point(&mut self, i: usize, commit_point: OpTime) {
        let m = &mut self.members[i];
        let previous = m.last_commit_point;
        m.last_commit_point = commit_point;
        let quorum = Quorum::of(m.node.as_ref().expect("running").config());
        let id = m.id;
        self.checker
            .on_commit_point(id, previous, commit_point, &self.members[i].log, quorum);
    }

    /// A new entry of `term` at member `i`, timestamped by its oplog clock
    /// (the write gate's term, storage's timestamp).
    fn write_new_entry(&mut self, i: usize, term: i64) -> OpTime {
        let m = &mut self.members[i];
        let entry = OpTime::new(m.next_timestamp(), term);
        let previous = m.last();
        m.log.push(entry);
        let id = m.id;
        self.walls.insert(entry, m.clock as i64);
        self.checker.on_created(id, entry, previous);
        entry
    }

    fn make_durable_if_eager(&mut self, i: usize, queue: &mut VecDeque<(usize, Event)>) {
        if !self.lazy_durability {
            let m = &mut self.members[i];
            m.durable_len = m.log.len();
            let last = m.last();
            queue.push_back((
                i,
                Event::Durable {
                    last_durable: last,
                    wall_ms: self.wall(last),
                },
            ));
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
        let wall_ms = self.wall(last);
        self.step(
            i,
            Event::Durable {
                last_durable: last,
                wall_ms,
            },
        );
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
            m.observe_applied(entry.ts);
            self.checker.on_copied(m.id, entry, previous);
            appended = true;
        }
        assert!(appended, "AppendBatch for a batch with nothing new");
        let last = m.last();
        queue.push_back((
            i,
            Event::Appended {
                last_applied: last,
                wall_ms: self.wall(last),
            },
        ));
        self.make_durable_if_eager(i, queue);
    }

    /// Finds the common point with the source (RollbackImpl reads the
    /// source's oplog backwards).
    fn find_common_point(&mut self, i: usize, source: usize, queue: &mut VecDeque<(usize, Event)>) {
        let id = self.members[source].id;
        let reachable = self.members[source].node.is_some() && self.link[i][source] && self.link[source][i];
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
        let source_commit_point = source_member.node.as_ref().expect("running").commit_point();
        queue.push_back((
            i,
            Event::CommonPointFound {
                source: id,
                common_point,
                source_last,
                source_commit_point,
            },
        ));
    }

    /// Truncates after `common_point`.
    fn rollback(&mut self, i: usize, common_point: OpTime, queue: &mut VecDeque<(usize, Event)>) {
        let log = &self.members[i].log;
        let keep = if common_point.is_null() {
            0
        } else {
            log.binary_search(&common_point).expect("common point in log") + 1
        };
        let removed: Vec<OpTime> = log[keep..].to_vec();
        let id = self.members[i].id;
        let node = self.members[i].node.as_ref().expect("running");
        self.checker.on_rollback(id, node.term(), node.commit_point(), &removed);
        let m = &mut self.members[i];
        m.log.truncate(keep);
        m.durable_len = m.durable_len.min(keep);
        self.note(format!(
            "  {id}: rolled back {} entries to {}",
            removed.len(),
            ShortOpTime(common_point)
        ));
        let wall_ms = self.wall(common_point);
        queue.push_back((i, Event::RollbackComplete { common_point, wall_ms }));
    }

    /// Invariants and bookkeeping after member `i` stepped.
    fn after_step(&mut self, i: usize) {
        self.check_pending_writes(i);
        self.drive_fetcher(i);
        self.fail_unanswered_requests(i);
    }

    /// Requests of member `i` unanswered for their timeout fail: a vote
    /// request after `VOTE_TIMEOUT_MS`, a heartbeat after the silence limit
    /// (the I/O layer's heartbeat timeout), either at once if the member
    /// asked is down (a refused connection); a heartbeat of an earlier
    /// generation is forgotten.
    fn fail_unanswered_requests(&mut self, i: usize) {
        let m = &mut self.members[i];
        let Some(node) = m.node.as_ref() else { return };
        let heartbeat_timeout = node.config().settings.silence_limit_ms();
        let (clock, generation) = (m.clock, m.heartbeat_generation);
        m.outstanding.retain(|o| !matches!(o.request, Request::Heartbeat { generation: g } if g != generation));
        let members = &self.members;
        let timed_out = |o: &Outstanding| {
            let timeout = match o.request {
                Request::Vote { .. } => VOTE_TIMEOUT_MS,
                Request::Heartbeat { .. } => heartbeat_timeout,
            };
            !members[o.to].running || clock.saturating_sub(o.sent) >= timeout
        };
        let Some(at) = members[i].outstanding.iter().position(timed_out) else {
            return;
        };
        let failed = self.members[i].outstanding.swap_remove(at);
        let member = self.members[failed.to].id;
        let event = match failed.request {
            Request::Vote { term, dry_run } => Event::VoteRequestFailed {
                voter: member,
                term,
                dry_run,
            },
            Request::Heartbeat { .. } => Event::HeartbeatFailed { member },
        };
        self.step(i, event);
    }

    /// Checks the invariants that span all members.
    pub fn check_global_invariants(&mut self) {
        let members = &self.members;
        self.checker
            .check_committed_on_majority(|id| members.iter().find(|m| m.id == id).map(|m| m.durable_log()));
        let edges: Vec<Option<usize>> = self
            .members
            .iter()
            .map(|m| m.node.as_ref().and_then(|n| n.sync_source()).map(|s| self.index(s)))
            .collect();
        let ids: Vec<MemberId> = self.members.iter().map(|m| m.id).collect();
        let now = if self.manual {
            self.members.iter().map(|m| m.clock).max().unwrap_or(0)
        } else {
            self.now
        };
        self.checker.check_no_cycles(&edges, &ids, now);
    }

    fn check_pending_writes(&mut self, i: usize) {
        if self.pending_writes.is_empty() {
            return;
        }
        let concern = WriteConcern {
            w: W::Majority,
            journal: true,
            wtimeout_ms: None,
        };
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
                    let quorum = Quorum::of(node.config());
                    self.pending_writes.swap_remove(index);
                    self.acknowledge(optime, &quorum);
                }
                _ => {
                    self.pending_writes.swap_remove(index);
                }
            }
        }
    }

    fn acknowledge(&mut self, optime: OpTime, quorum: &Quorum) {
        let logs: Vec<&[OpTime]> = self
            .members
            .iter()
            .filter(|m| quorum.voters.contains(&m.id))
            .map(|m| m.durable_log())
            .collect();
        self.checker.on_ack(optime, &logs, quorum.write_majority);
        self.note(format!("  acknowledged w:majority write {}", ShortOpTime(optime)));
    }

    /// A client write at member `i`; returns its OpTime if accepted. Only a
    /// writable primary takes it (the write gate), at the next timestamp of
    /// its oplog clock, in its term.
    pub fn client_write(&mut self, i: usize, majority: bool) -> Option<OpTime> {
        let clock = self.members[i].clock;
        let node = self.members[i].node.as_ref()?;
        if !node.is_writable_primary() {
            return None;
        }
        let term = node.term();
        let optime = self.write_new_entry(i, term);
        let mut queue = VecDeque::new();
        queue.push_back((
            i,
            Event::Appended {
                last_applied: optime,
                wall_ms: self.wall(optime),
            },
        ));
        self.make_durable_if_eager(i, &mut queue);
        while let Some((at, event)) = queue.pop_front() {
            self.step(at, event);
        }
        if majority && self.pending_writes.len() < PENDING_WRITES_MAX {
            self.pending_writes.push((i, optime, clock));
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

    /// Sends `payload` from `from` to `to`, through the faults in force.
    pub(crate) fn send(&mut self, from: usize, to: usize, payload: Payload) {
        if !self.link[from][to] {
            if self.tracing {
                let (a, b) = (self.members[from].id, self.members[to].id);
                self.note(format!("dropped {a}->{b}: {payload}"));
            }
            return;
        }
        let sender = &self.members[from];
        let cluster_time = sender.oplog_clock.max(sender.cluster_time);
        let tag = match &payload {
            Payload::Consensus(Message::HeartbeatRequest(_)) => sender.heartbeat_generation,
            Payload::Consensus(Message::HeartbeatResponse(_)) => match self.answering {
                Some((requester, tag)) if requester == to => tag,
                _ => 0,
            },
            _ => 0,
        };
        let envelope = Envelope {
            from,
            to,
            cluster_time,
            tag,
            payload,
        };
        if self.manual {
            self.pending.push_back(envelope);
            return;
        }
        if self.envelopes.len() - self.free_slots.len() >= IN_FLIGHT_MAX
            || self.rng.chance(self.faults.drop_per_million)
        {
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate_per_million) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = self.rng.range(
                self.faults.delay_min_ms,
                self.faults.delay_max_ms.max(self.faults.delay_min_ms),
            );
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
        let Envelope {
            from,
            to,
            cluster_time,
            tag,
            payload,
        } = envelope;
        if !self.is_alive(to) || !self.link[from][to] {
            return;
        }
        let receiver = &mut self.members[to];
        receiver.cluster_time = receiver.cluster_time.max(cluster_time);
        let from_id = self.members[from].id;
        if self.tracing {
            let to_id = self.members[to].id;
            self.note(format!("{from_id}->{to_id} {payload}"));
        }
        if self.members[to].node.is_none() {
            self.deliver_to_uninitiated(from, to, payload);
            return;
        }
        let answered = match &payload {
            Payload::Consensus(Message::VoteResponse(r)) => Some(Request::Vote {
                term: r.request_term,
                dry_run: r.dry_run,
            }),
            Payload::Consensus(Message::HeartbeatResponse(_)) => Some(Request::Heartbeat { generation: tag }),
            _ => None,
        };
        if let Some(request) = answered {
            let receiver = &mut self.members[to];
            if request == (Request::Heartbeat { generation: tag }) && tag != receiver.heartbeat_generation {
                // The answer to a heartbeat sent before the receiver became
                // primary (or before it restarted): dropped.
                return;
            }
            if let Some(at) = receiver.outstanding.iter().position(|o| o.to == from && o.request == request) {
                receiver.outstanding.remove(at);
            }
        }
        match payload {
            Payload::Consensus(message @ Message::HeartbeatRequest(_)) => {
                self.answering = Some((from, tag));
                self.step(to, Event::Receive { from: from_id, message });
                self.answering = None;
            }
            Payload::Consensus(message) => self.step(to, Event::Receive { from: from_id, message }),
            Payload::PullRequest { after } => self.serve_pull(to, from, after),
            Payload::PullResponse(reply) => self.on_pull_response(to, from, reply),
            Payload::ConfigRequest => {
                let config = self.members[to].node.as_ref().expect("running").config().clone();
                self.send(to, from, Payload::ConfigResponse(config));
            }
            Payload::ConfigResponse(config) => self.step(to, Event::ConfigReceived { config }),
        }
    }

    /// The source side of PullEntries: entries from the first with a
    /// timestamp at or after `after`'s.
    fn serve_pull(&mut self, source: usize, puller: usize, after: OpTime) {
        let m = &self.members[source];
        let Some(node) = m.node.as_ref() else { return };
        let start = m.log.partition_point(|e| e.ts < after.ts);
        let end = (start + PULL_BATCH_ENTRIES_MAX).min(m.log.len());
        let entries = m.log[start..end].to_vec();
        let payload = Payload::PullResponse(PullReply {
            after,
            entries,
            commit_point: node.commit_point(),
            term: node.term(),
            source_last: m.last(),
        });
        self.send(source, puller, payload);
    }

    fn on_pull_response(&mut self, i: usize, source: usize, reply: PullReply) {
        let PullReply {
            after,
            entries,
            commit_point,
            term,
            source_last,
        } = reply;
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
            source_last,
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

    /// The writable primary, if exactly one member thinks it is (the one in
    /// the highest term otherwise).
    pub fn writable_primary(&self) -> Option<usize> {
        let writable = |i: usize| {
            self.members[i]
                .node
                .as_ref()
                .filter(|n| n.is_writable_primary())
                .map(|n| n.term())
        };
        (0..self.members.len())
            .filter_map(|i| writable(i).map(|t| (t, Reverse(i))))
            .max()
            .map(|(_, Reverse(i))| i)
    }

    /// One line per member: state, term, configuration, positions, sync
    /// source, log tail.
    pub fn status(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for m in &self.members {
            let Some(node) = m.node.as_ref() else {
                let what = if m.running { "UNINITIATED" } else { "DOWN" };
                lines.push(format!("{}: {what} log={}", m.id, format_log(&m.log)));
                continue;
            };
            let source = node.sync_source().map_or("-".to_string(), |s| s.to_string());
            let vote = node.voted_for().map_or("-".to_string(), |v| v.to_string());
            lines.push(format!(
                "{}: {}{} term={} vote={} config={}.{} applied={} durable={} commit={} sync={} log={}",
                m.id,
                node.state(),
                if node.is_writable_primary() { "(writable)" } else { "" },
                node.term(),
                vote,
                node.config().version,
                node.config().term,
                ShortOpTime(node.last_applied()),
                ShortOpTime(node.last_durable()),
                ShortOpTime(node.commit_point()),
                source,
                format_log(&m.log)
            ));
        }
        lines
    }
}

/// Most log entries `status` prints (the tail).
pub const STATUS_LOG_ENTRIES_MAX: usize = 8;

/// `[1:5.1 1:5.2 2:9.1]`, or `[(3 more) ... 2:9.1]` (the tail) for a long log.
pub fn format_log(log: &[OpTime]) -> String {
    let skip = log.len().saturating_sub(STATUS_LOG_ENTRIES_MAX);
    let items: Vec<String> = log[skip..].iter().map(|e| ShortOpTime(*e).to_string()).collect();
    let prefix = if skip > 0 {
        format!("({skip} more) ")
    } else {
        String::new()
    };
    format!("[{prefix}{}]", items.join(" "))
}
