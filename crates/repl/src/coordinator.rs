//! The coordinator: owns the `consensus::Node`, the one source of truth
//! for term, role, positions and commit point. It takes `Input`s from one
//! queue (`inputs.rs`: stepped under one lock by the `repl-coordinator`
//! thread, or by the thread that queued a write-path input when the lock
//! is free), steps the node with its monotonic clock, and carries out the
//! returned actions in order:
//!
//! 1. `PersistTermAndVote` / `PersistConfig` are durable (`LocalState`)
//!    before the next action runs, so a vote is on disk before the reply
//!    that grants it leaves.
//! 2. A `Send` answering the request being stepped (heartbeat, vote)
//!    becomes that request's reply; other sends go to the companion that
//!    owns the message (heartbeat sender, election runner, position
//!    reporter).
//! 3. Everything else goes to its companion, which does its I/O on the
//!    async runtime and reports back through the same channel: the
//!    coordinator never blocks on the network.
//! 4. After the step: events the actions produced locally (a no-op's
//!    `Appended`) are stepped at once, write-concern waiters are released,
//!    and a new `Snapshot` is published (the topology counter moves when
//!    state, primary or configuration changed).
//!
//! A tick every `COORDINATOR_TICK_MS` (on the coordinator thread) drives
//! the node's timers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use slipstream_clock::OpTime;
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{
    Action, Event, Heartbeat, Message, Millis, Node, NotSecondary, OplogPositions, PullBatch, ReconfigError,
    StepDownError, StepUpError, WriteConcern as CoreWriteConcern, WriteConcernStatus,
};
use slipstream_storage::WriteGate;
use tokio::sync::oneshot;

use crate::applier::Applier;
use crate::election_runner::ElectionRunner;
use crate::error::ReplError;
use crate::heartbeat_sender::HeartbeatSender;
use crate::initial_sync::InitialSyncer;
use crate::oplog_fetcher::{HeldBatch, OplogFetcher};
use crate::position_reporter::PositionReporter;
use crate::replica_set::Shared;
use crate::report::SyncSourceSelection;
use crate::rollback::Rollback;
use crate::snapshot::Snapshot;

/// How often the node's timers are driven.
pub const COORDINATOR_TICK_MS: u64 = 10;
/// The random part of an election timeout, at most, as a fraction of the
/// timeout (the core adds what we draw). MongoDB draws up to 15%; on a
/// loaded machine, where persisting a vote takes hundreds of ms, two
/// survivors of a dead primary drew within that window election after
/// election and split the vote five times in a row (12 s to a new primary
/// with a 1 s timeout). Half the timeout keeps them apart, as Raft's
/// [T, 2T] range does, at the cost of a quarter timeout on average.
pub const ELECTION_JITTER_FRACTION: f64 = 0.5;

/// What the coordinator answers a command with.
pub type CommandReply = oneshot::Sender<Result<(), ReplError>>;

pub enum Input {
    /// An event with nobody waiting for an answer.
    Event(Event),
    /// The outcome of a heartbeat this member sent (the response, or
    /// `HeartbeatFailed`), dropped unless sent since this member last became
    /// primary: a new primary's catch-up must hear fresh answers, as MongoDB
    /// cancels its heartbeats on taking office.
    Heartbeat { generation: u64, event: Event },
    /// Another member's request the node answers (heartbeat, vote): the
    /// reply is the node's `Send` back to `from`, or `None`.
    Receive {
        from: MemberId,
        from_host: Option<String>,
        message: Message,
        reply: oneshot::Sender<Option<Message>>,
    },
    /// A pulled batch: the fetcher's entries ride along, for the applier.
    Pulled {
        batch: PullBatch,
        held: HeldBatch,
    },
    /// `replSetInitiate` (validated, persisted by the caller).
    Initiate {
        config: ReplSetConfig,
        me: MemberId,
        reply: CommandReply,
    },
    /// A configuration an uninitialized member learned from a heartbeat.
    Adopt {
        config: ReplSetConfig,
        me: MemberId,
    },
    /// A command the node answers in a later step (stepdown, reconfig,
    /// step-up, freeze, maintenance) or at once (syncFrom).
    Command {
        event: Event,
        reply: CommandReply,
    },
    /// A write waiting for its write concern.
    WaitWriteConcern {
        optime: OpTime,
        concern: CoreWriteConcern,
        reply: CommandReply,
    },
    /// `Node::check_reconfig_allowed()`, asked before a reconfig.
    CheckReconfig {
        reply: CommandReply,
    },
    /// The initial syncer finished: the member may become SECONDARY.
    InitialSyncDone,
    /// A member too stale on every source resyncs (`crate::resync`, step 3):
    /// STARTUP2, then the initial syncer, which wipes the data first.
    Resync,
    Stop,
}

struct Waiter {
    optime: OpTime,
    concern: CoreWriteConcern,
    started_at: Millis,
    reply: CommandReply,
}

/// Which command a `*Finished` action answers.
#[derive(Clone, Copy)]
enum Kind {
    StepDown,
    Reconfig,
    StepUp,
    Freeze,
    ReportState,
}

/// Commands waiting for the node's `*Finished` action, oldest first. Each
/// answer goes to the oldest waiting command of its kind, which is the right
/// one only while a kind's answers come in request order: the node answers
/// reconfig, freeze and state reports in the step of their own request, and
/// every `replSetStepUp` waiting for one election with that election's
/// outcome; a stepdown waits, so a second one is refused before it reaches
/// the node (whose refusal would go to the first).
#[derive(Default)]
struct Pending {
    step_down: VecDeque<CommandReply>,
    reconfig: VecDeque<CommandReply>,
    step_up: VecDeque<CommandReply>,
    freeze: VecDeque<CommandReply>,
    report_state: VecDeque<CommandReply>,
}

pub struct Coordinator {
    shared: Arc<Shared>,
    node: Option<Node>,
    started: Instant,
    rng: u64,
    /// Events the last actions produced locally, stepped before new input.
    follow_ups: VecDeque<Event>,
    /// The batch of the last `Pulled`, until the node appends or ignores it.
    held_batch: Option<HeldBatch>,
    waiters: Vec<Waiter>,
    pending: Pending,
    /// Answers of this step, sent once its snapshot is published.
    answers: Vec<(CommandReply, Result<(), ReplError>)>,
    heartbeats: HeartbeatSender,
    elections: ElectionRunner,
    positions: PositionReporter,
    fetcher: OplogFetcher,
    applier: Applier,
    rollback: Rollback,
    initial_sync: InitialSyncer,
    /// The last heartbeat the node sent, reused to fetch a configuration.
    last_heartbeat: Option<Heartbeat>,
    /// Hosts of members outside our configuration (learned from their
    /// heartbeats) for `FetchConfig`.
    peer_hosts: HashMap<MemberId, String>,
    published_key: Option<crate::snapshot::TopologyKey>,
    /// The "new primary" no-op already written when the gate opened, so
    /// that the `WriteNoop` following `AcceptWrites(true)` writes nothing.
    noop_written_at_open: Option<OpTime>,
    /// The last sync source chosen (metrics: same or different).
    last_sync_source: Option<MemberId>,
    /// The last state reported and the term this member was last primary
    /// in (metrics: stepdowns for a higher term).
    last_state: Option<slipstream_consensus::MemberState>,
    primary_term: i64,
    /// Raised each time this member becomes primary (`Input::Heartbeat`).
    heartbeat_generation: u64,
    /// Whether this term's catch-up outcome was counted.
    catch_up_counted_term: i64,
    /// A configuration just persisted that names this member's host under
    /// another `_id` (removed, then added back as a new member): the node
    /// starts again under that `_id` once the step ends.
    new_identity: Option<(ReplSetConfig, MemberId)>,
}

impl Coordinator {
    pub fn new(shared: Arc<Shared>, node: Option<Node>) -> Coordinator {
        Coordinator {
            heartbeats: HeartbeatSender::new(shared.clone()),
            elections: ElectionRunner::new(shared.clone()),
            positions: PositionReporter::new(shared.clone()),
            fetcher: OplogFetcher::new(shared.clone()),
            applier: Applier::new(shared.clone()),
            rollback: Rollback::new(shared.clone()),
            initial_sync: InitialSyncer::new(shared.clone()),
            rng: seed(),
            started: shared.started,
            shared,
            node,
            follow_ups: VecDeque::new(),
            new_identity: None,
            held_batch: None,
            waiters: Vec::new(),
            pending: Pending::default(),
            answers: Vec::new(),
            last_heartbeat: None,
            peer_hosts: HashMap::new(),
            published_key: None,
            noop_written_at_open: None,
            last_sync_source: None,
            last_state: None,
            primary_term: 0,
            heartbeat_generation: 0,
            catch_up_counted_term: 0,
        }
    }

    /// The coordinator's first steps, on its thread before it takes
    /// inputs: an interrupted initial sync resumes, and the node's first
    /// actions (a term raised past its log) carry out.
    pub(crate) fn start(&mut self) {
        if let Some(node) = &self.node {
            tracing::info!(target: "repl", term = node.term(), state = %node.state(), member = node.id(),
                "replica set member started");
        }
        self.start_initial_sync_if_needed();
        self.step(Event::Tick { election_jitter_ms: 0 }, None);
    }

    /// Drives the node's timers (every `COORDINATOR_TICK_MS`).
    pub(crate) fn tick(&mut self) {
        let jitter = self.jitter();
        self.step(
            Event::Tick {
                election_jitter_ms: jitter,
            },
            None,
        );
    }

    /// After `Input::Stop`: the companions stop and waiting writes learn it.
    pub(crate) fn shutdown(mut self) {
        self.fetcher.stop();
        self.initial_sync.stop();
        for waiter in self.waiters.drain(..) {
            let _ = waiter.reply.send(Err(ReplError::ShutdownInProgress));
        }
    }

    fn now(&self) -> Millis {
        Millis(self.started.elapsed().as_millis() as u64)
    }

    /// xorshift64*, seeded by the OS (`RandomState`): election jitter only.
    fn jitter(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let draw = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let timeout = self
            .node
            .as_ref()
            .map_or(10_000, |n| n.config().settings.election_timeout_ms);
        let span = ((timeout as f64) * ELECTION_JITTER_FRACTION) as u64 + 1;
        draw % span
    }

    pub(crate) fn handle(&mut self, input: Input) {
        match input {
            Input::Event(event) => self.step(event, None),
            Input::Heartbeat { generation, event } => {
                if generation == self.heartbeat_generation {
                    self.step(event, None);
                } else {
                    tracing::trace!(target: "repl", "a heartbeat outcome from before this member became primary");
                }
            }
            Input::Receive {
                from,
                from_host,
                message,
                reply,
            } => {
                if self.node.is_none() {
                    let _ = reply.send(None);
                    return;
                }
                if let Some(host) = from_host {
                    self.peer_hosts.insert(from, host);
                }
                self.step(Event::Receive { from, message }, Some((from, reply)));
            }
            Input::Pulled { batch, held } => {
                tracing::debug!(target: "repl", source = batch.source, first = ?batch.first, last = ?batch.last,
                    node_last = ?self.node.as_ref().map(|n| n.last_applied()), "pulled");
                self.held_batch = Some(held);
                self.step(Event::Pulled(batch), None);
                // Ignored (or turned into a rollback): the fetcher learns so.
                if let Some(held) = self.held_batch.take() {
                    held.not_appended();
                }
            }
            Input::Initiate { config, me, reply } => {
                let result = self.start_node(config, me, false);
                let _ = reply.send(result);
            }
            Input::Adopt { config, me } => {
                if self.node.is_none() {
                    if let Err(err) = self.start_node(config, me, true) {
                        tracing::warn!(target: "repl", error = %err, "cannot adopt the configuration received");
                    }
                }
            }
            Input::Command { event, reply } => self.command(event, reply),
            Input::WaitWriteConcern { optime, concern, reply } => {
                let started_at = self.now();
                self.waiters.push(Waiter {
                    optime,
                    concern,
                    started_at,
                    reply,
                });
                self.release_waiters();
            }
            Input::CheckReconfig { reply } => {
                let result = match &self.node {
                    None => Err(ReplError::NotYetInitialized),
                    Some(node) => node.check_reconfig_allowed().map_err(reconfig_error),
                };
                let _ = reply.send(result);
            }
            Input::InitialSyncDone => {
                tracing::info!(target: "repl", "initial sync finished: leaving STARTUP2");
                self.initial_sync.finished();
                if self.shared.resync.finish() {
                    self.shared.rollback.set_too_stale(false);
                    self.shared.rollback.set_info_message(String::new());
                    tracing::info!(target: "repl", "resync finished: no longer too stale");
                }
                let (reply, _) = oneshot::channel();
                self.command(Event::ReportState(slipstream_consensus::MemberState::Secondary), reply);
            }
            Input::Resync => {
                if self.node.is_none() || self.initial_sync.is_running() {
                    return;
                }
                let (reply, _) = oneshot::channel();
                self.command(Event::ReportState(slipstream_consensus::MemberState::Startup2), reply);
                self.initial_sync.start();
            }
            Input::Stop => unreachable!("handled by run"),
        }
    }

    fn command(&mut self, event: Event, reply: CommandReply) {
        if self.node.is_none() {
            let _ = reply.send(Err(ReplError::NotYetInitialized));
            return;
        }
        match &event {
            // During an initial sync the member's state is the sync's: a
            // RECOVERING (maintenance, a catch-up task) or SECONDARY report
            // would make the node pull while the sync writes.
            Event::ReportState(state)
                if *state != slipstream_consensus::MemberState::Startup2 && self.initial_sync.is_running() =>
            {
                let _ = reply.send(Err(ReplError::coded(95, "initial sync in progress")));
                return;
            }
            Event::StepDown(_) if !self.pending.step_down.is_empty() => {
                let _ = reply.send(Err(step_down_error(StepDownError::AlreadyInProgress)));
                return;
            }
            Event::StepDown(_) => self.pending.step_down.push_back(reply),
            Event::Reconfig { .. } => self.pending.reconfig.push_back(reply),
            Event::StepUpRequest => self.pending.step_up.push_back(reply),
            Event::Freeze { .. } => self.pending.freeze.push_back(reply),
            Event::ReportState(_) => self.pending.report_state.push_back(reply),
            _ => {
                self.step(event, None);
                let _ = reply.send(Ok(()));
                return;
            }
        }
        self.step(event, None);
    }

    /// `replSetInitiate` or a configuration learned while uninitialized
    /// (`may_sync`: an empty member joining syncs first): the node starts
    /// from the engine's positions and the stored term.
    fn start_node(&mut self, config: ReplSetConfig, me: MemberId, may_sync: bool) -> Result<(), ReplError> {
        if self.node.is_some() {
            return Err(ReplError::AlreadyInitialized);
        }
        self.shared.local.write_config(&config)?;
        let persisted = self.shared.local.read_term_and_vote()?;
        let engine = &self.shared.engine;
        let (applied, applied_wall) = engine.last_applied_wall();
        let (durable, durable_wall) = engine.last_durable_wall();
        let positions = OplogPositions {
            last_applied: applied,
            last_applied_wall_ms: applied_wall,
            last_durable: durable.min(applied),
            last_durable_wall_ms: durable_wall,
        };
        let jitter = self.jitter();
        let node = Node::new(config.clone(), me, persisted, positions, jitter, self.now())
            .map_err(|err| ReplError::InvalidReplicaSetConfig(err.to_string()))?;
        if let Some(host) = config.member(me).map(|m| m.host.clone()) {
            *self.shared.me_host.write() = host;
        }
        tracing::info!(target: "repl", set = %config.set_name, version = config.version, member = me,
            state = %node.state(), "replica set configuration installed");
        self.node = Some(node);
        if may_sync {
            self.start_initial_sync_if_needed();
        }
        self.step(
            Event::Tick {
                election_jitter_ms: jitter,
            },
            None,
        );
        Ok(())
    }

    /// A member with an empty oplog (or an unfinished initial sync) reports
    /// STARTUP2, which keeps the node from pulling and standing, and syncs;
    /// `Input::InitialSyncDone` ends it. Before the node's first tick, so
    /// that it never chooses a sync source meanwhile.
    fn start_initial_sync_if_needed(&mut self) {
        let Some(node) = &self.node else { return };
        if !crate::initial_sync::needed(&self.shared, node.config(), node.id()) {
            return;
        }
        let (reply, _) = oneshot::channel();
        self.command(Event::ReportState(slipstream_consensus::MemberState::Startup2), reply);
        self.initial_sync.start();
    }

    /// Steps the node with `event` and carries out its actions; `request`
    /// is the member request being answered, if any.
    fn step(&mut self, event: Event, mut request: Option<(MemberId, oneshot::Sender<Option<Message>>)>) {
        self.follow_ups.push_back(event);
        let mut stepped = false;
        while let Some(event) = self.follow_ups.pop_front() {
            let Some(node) = self.node.as_mut() else {
                return;
            };
            let Some(mut event) = sanitize(node, event, &self.shared) else {
                continue;
            };
            // A primary learns its own appends before positions others
            // report: a secondary can fetch, sync and report an entry before
            // the watcher's `Appended` for it arrives here, and the node's
            // commit rule must never see a majority past its own oplog.
            if node.is_writable_primary() && matches!(event, Event::Receive { .. }) {
                let (applied, wall_ms) = self.shared.engine.last_applied_wall();
                if applied > node.last_applied() && applied.term == node.term() {
                    self.follow_ups.push_front(event);
                    event = Event::Appended {
                        last_applied: applied,
                        wall_ms,
                    };
                }
            }
            let now = Millis(self.started.elapsed().as_millis() as u64);
            stepped = true;
            let actions = node.step(event, now);
            for action in actions {
                self.carry_out(action, &mut request);
            }
        }
        if let Some((_, reply)) = request.take() {
            let _ = reply.send(None);
        }
        if let Some((config, id)) = self.new_identity.take() {
            let old = self.node.take().map(|node| node.id());
            tracing::info!(target: "repl", old_id = ?old, new_id = id, version = config.version,
                "this member's host is in the configuration under a new _id: starting again as that member");
            if let Err(err) = self.start_node(config, id, false) {
                fatal(&format!("cannot start again under _id {id}: {err}"));
            }
            return;
        }
        // An event dropped as stale changed nothing to publish.
        if stepped {
            self.release_waiters();
            self.publish();
        }
        // Answered only now, so that a caller reading hello right after
        // its command sees the state the command left.
        for (reply, result) in self.answers.drain(..) {
            let _ = reply.send(result);
        }
    }

    fn answer(&mut self, kind: Kind, result: Result<(), ReplError>) {
        let queue = match kind {
            Kind::StepDown => &mut self.pending.step_down,
            Kind::Reconfig => &mut self.pending.reconfig,
            Kind::StepUp => &mut self.pending.step_up,
            Kind::Freeze => &mut self.pending.freeze,
            Kind::ReportState => &mut self.pending.report_state,
        };
        if let Some(reply) = queue.pop_front() {
            self.answers.push((reply, result));
        }
    }

    fn carry_out(&mut self, action: Action, request: &mut Option<(MemberId, oneshot::Sender<Option<Message>>)>) {
        tracing::debug!(target: "repl", action = %action, "carry out");
        match action {
            Action::Send { to, message } => {
                let answers = matches!(message, Message::HeartbeatResponse(_) | Message::VoteResponse(_));
                if answers && request.as_ref().is_some_and(|(from, _)| *from == to) {
                    let (_, reply) = request.take().expect("checked above");
                    let _ = reply.send(Some(message));
                    return;
                }
                self.send(to, message);
            }
            Action::PersistTermAndVote { term, voted_for } => {
                if let Err(err) = self.shared.local.write_term_and_vote(term, voted_for) {
                    fatal(&format!("cannot persist term and vote: {err}"));
                }
            }
            Action::PersistConfig(config) => {
                if let Err(err) = self.shared.local.write_config(&config) {
                    fatal(&format!("cannot persist the configuration: {err}"));
                }
                let me = self.node.as_ref().map(|n| n.id());
                if let Some(host) = me.and_then(|me| config.member(me)).map(|m| m.host.clone()) {
                    *self.shared.me_host.write() = host;
                }
                // MongoDB finds itself in a configuration by host: a host
                // removed and added back under a new `_id` is this member
                // again. The node knows itself by `_id`, so it starts over
                // under the new one (it stayed REMOVED until a restart).
                let mine = me.and_then(|me| config.member(me)).is_some_and(|m| self.shared.is_me(&m.host));
                if !mine {
                    if let Some(id) = self.shared.find_self(&config).filter(|id| Some(*id) != me) {
                        self.new_identity = Some((config.clone(), id));
                    }
                }
                tracing::info!(target: "repl", version = config.version, term = config.term, "configuration persisted");
            }
            Action::FetchConfig { from } => {
                let host = self.host_of(from);
                match (host, &self.last_heartbeat) {
                    (Some(host), Some(hb)) => self.heartbeats.fetch_config(from, host, hb.clone(), self.set_name()),
                    _ => {
                        tracing::debug!(target: "repl", member = from, "no host to fetch a configuration from")
                    }
                }
            }
            Action::SetSyncSource(source) => {
                let selection = match source {
                    None => SyncSourceSelection::CouldNotFind,
                    Some(id) if Some(id) == self.last_sync_source => SyncSourceSelection::ChoseSame,
                    Some(_) => SyncSourceSelection::ChoseDifferent,
                };
                self.shared.metrics.record_sync_source_selection(selection);
                if source.is_some() {
                    self.last_sync_source = source;
                }
                let host = source.and_then(|s| self.host_of(s));
                tracing::info!(target: "repl", source = source.map_or(-1, i64::from), host = host.as_deref().unwrap_or(""),
                    "sync source changed");
                match (source, host) {
                    (Some(id), Some(host)) => self.fetcher.start(id, host, self.term()),
                    _ => self.fetcher.stop(),
                }
            }
            Action::AppendBatch { source } => match self.held_batch.take() {
                Some(held) if held.source == source => self.applier.apply(held),
                other => {
                    // Cannot happen: the node appends only the batch it was
                    // just given. Unstick it rather than wait forever.
                    tracing::error!(target: "repl", source, "AppendBatch without a held batch");
                    self.held_batch = other;
                    let (applied, wall_ms) = self.shared.engine.last_applied_wall();
                    self.follow_ups.push_back(Event::Appended {
                        last_applied: applied,
                        wall_ms,
                    });
                }
            },
            Action::FindCommonPoint { source } => match self.host_of(source) {
                Some(host) => self.rollback.find_common_point(source, host),
                None => self.follow_ups.push_back(Event::RollbackFailed { source }),
            },
            Action::Rollback { common_point } => self.rollback.roll_back(common_point),
            Action::AdvanceCommitPoint(op) => {
                self.shared.engine.set_stable_timestamp(op.ts);
                self.shared.commit_point_changed.send_replace(op);
                // After the watch: see `commit_waiters.rs` for why no wake is lost.
                self.shared.commit_waiters.release_through(op.ts);
            }
            Action::StateChanged { state, term } => {
                tracing::info!(target: "repl", state = %state, term, "member state changed");
                let was_primary = self.last_state == Some(slipstream_consensus::MemberState::Primary);
                if was_primary && state != slipstream_consensus::MemberState::Primary && term > self.primary_term {
                    self.shared.metrics.record_step_down_for_higher_term();
                }
                if state == slipstream_consensus::MemberState::Primary {
                    self.primary_term = term;
                    self.heartbeat_generation += 1;
                } else {
                    self.fail_waiters(|| ReplError::PrimarySteppedDown);
                }
                self.last_state = Some(state);
            }
            Action::LostMajority { term, silent } => {
                let silent: Vec<String> = silent
                    .iter()
                    .map(|(id, ms)| match ms {
                        Some(ms) => format!("{id} (last heard {ms} ms ago)"),
                        None => format!("{id} (never heard)"),
                    })
                    .collect();
                tracing::warn!(target: "repl", term, silent = %silent.join(", "),
                    "stepping down: a majority of voters was not heard within the election timeout");
            }
            Action::ElectionStarted { term, reason, dry_run } => {
                tracing::info!(target: "repl", term, reason = reason.name(), dry_run, "election started");
            }
            Action::ElectionFinished { term, won, reason } => {
                self.shared.metrics.record_election(reason, won);
                let metrics = self.node.as_ref().and_then(|n| n.election_candidate_metrics().cloned());
                // Without metrics (a lost dry run) the numbers are 0.
                let duration_ms = metrics.as_ref().map_or(0, |m| self.now().since(m.started_at));
                let votes_needed = metrics.as_ref().map_or(0, |m| m.votes_needed as u64);
                tracing::info!(target: "repl", term, won, reason = reason.name(), duration_ms, votes_needed,
                    "election finished");
            }
            Action::WriteNoop => self.write_noop("new primary"),
            Action::AcceptWrites(true) => {
                let term = self.term();
                if self.node.as_ref().is_some_and(|n| n.is_writable_primary()) {
                    // The no-op the node asks for next is the term's first
                    // entry: written under the same hold of the write lock.
                    match self.shared.engine.open_write_gate_with_noop(term, "new primary") {
                        Ok(op) => {
                            self.noop_written_at_open = Some(op);
                            let (applied, wall_ms) = self.shared.engine.last_applied_wall();
                            self.follow_ups.push_back(Event::Appended {
                                last_applied: applied,
                                wall_ms,
                            });
                        }
                        Err(err) => fatal(&format!("cannot write the new primary's no-op: {err}")),
                    }
                } else {
                    self.shared.engine.set_write_gate(WriteGate::Open { term });
                }
                tracing::info!(target: "repl", term, "accepting writes");
            }
            Action::AcceptWrites(false) => {
                self.shared.engine.set_write_gate(WriteGate::Closed);
                let (applied, wall_ms) = self.shared.engine.last_applied_wall();
                self.follow_ups.push_back(Event::Appended {
                    last_applied: applied,
                    wall_ms,
                });
                tracing::info!(target: "repl", "no longer accepting writes");
            }
            Action::StepDownFinished(result) => {
                self.answer(Kind::StepDown, result.map_err(step_down_error));
            }
            Action::ReconfigFinished(result) => self.answer(Kind::Reconfig, result.map_err(reconfig_error)),
            Action::StepUpFinished(result) => self.answer(Kind::StepUp, result.map_err(step_up_error)),
            Action::FreezeFinished(result) => self.answer(Kind::Freeze, result.map_err(not_secondary)),
            Action::ReportStateFinished(result) => self.answer(Kind::ReportState, result.map_err(not_secondary)),
        }
    }

    fn write_noop(&mut self, message: &str) {
        if self.noop_written_at_open.take().is_some() {
            return;
        }
        match self.shared.engine.writer().noop(message) {
            Ok(_) => {
                let (applied, wall_ms) = self.shared.engine.last_applied_wall();
                self.follow_ups.push_back(Event::Appended {
                    last_applied: applied,
                    wall_ms,
                });
            }
            Err(err) => tracing::warn!(target: "repl", error = %err, "no-op not written"),
        }
    }

    fn send(&mut self, to: MemberId, message: Message) {
        let Some(host) = self.host_of(to) else {
            tracing::debug!(target: "repl", member = to, "no host for a message");
            return;
        };
        let set_name = self.set_name();
        let (me, my_index, config_version) = match &self.node {
            Some(node) => (
                node.id(),
                node.config().index_of(node.id()).unwrap_or(0),
                node.config().version,
            ),
            None => return,
        };
        match message {
            Message::HeartbeatRequest(hb) => {
                self.last_heartbeat = Some(hb.clone());
                self.heartbeats.send(to, host, hb, set_name, me, self.heartbeat_generation);
            }
            Message::RequestVote(request) => self.elections.request_vote(to, host, request, set_name, my_index),
            Message::UpdatePosition(update) => self.positions.report(host, update, config_version, me),
            Message::StepUp { term } => self.elections.hand_off(to, host, term, me),
            Message::HeartbeatResponse(_) | Message::VoteResponse(_) => {
                // An answer whose request is no longer waiting (the caller
                // gave up): nothing to deliver it to.
            }
        }
    }

    fn host_of(&self, id: MemberId) -> Option<String> {
        let from_config = self
            .node
            .as_ref()
            .and_then(|n| n.config().member(id))
            .map(|m| m.host.clone());
        from_config.or_else(|| self.peer_hosts.get(&id).cloned())
    }

    fn set_name(&self) -> String {
        self.node
            .as_ref()
            .map(|n| n.config().set_name.clone())
            .unwrap_or_default()
    }

    fn term(&self) -> i64 {
        self.node.as_ref().map_or(0, |n| n.term())
    }

    fn release_waiters(&mut self) {
        if self.waiters.is_empty() {
            return;
        }
        let now = self.now();
        let Some(node) = &self.node else {
            self.fail_waiters(|| ReplError::NotYetInitialized);
            return;
        };
        let mut kept = Vec::with_capacity(self.waiters.len());
        for waiter in self.waiters.drain(..) {
            if waiter.reply.is_closed() {
                continue;
            }
            let status = node.evaluate_write_concern(waiter.optime, &waiter.concern, waiter.started_at, now);
            if status != WriteConcernStatus::Waiting {
                let elapsed = Duration::from_millis(now.since(waiter.started_at));
                self.shared
                    .metrics
                    .record_write_concern_wait(elapsed, status == WriteConcernStatus::TimedOut);
            }
            let result = match status {
                WriteConcernStatus::Waiting => {
                    kept.push(waiter);
                    continue;
                }
                WriteConcernStatus::Satisfied => Ok(()),
                WriteConcernStatus::TimedOut => Err(ReplError::WriteConcernTimeout {
                    wtimeout_ms: waiter.concern.wtimeout_ms.unwrap_or(0) as i64,
                }),
                WriteConcernStatus::Unsatisfiable => Err(ReplError::UnsatisfiableWriteConcern(
                    "Not enough data-bearing nodes".into(),
                )),
                WriteConcernStatus::SteppedDown => Err(ReplError::PrimarySteppedDown),
            };
            let _ = waiter.reply.send(result);
        }
        self.waiters = kept;
        self.shared.metrics.set_write_concern_waiters(self.waiters.len() as u64);
    }

    fn fail_waiters(&mut self, error: impl Fn() -> ReplError) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.reply.send(Err(error()));
        }
    }

    /// The published configuration, cloned only when it changed.
    fn published_config(&self, config: &ReplSetConfig) -> Arc<ReplSetConfig> {
        match self.shared.snapshot().config.as_ref() {
            Some(published) if **published == *config => published.clone(),
            _ => Arc::new(config.clone()),
        }
    }

    fn publish(&mut self) {
        let Some(node) = &self.node else { return };
        if let Some(metrics) = node.election_candidate_metrics() {
            if let Some(outcome) = metrics.catch_up.filter(|_| metrics.term > self.catch_up_counted_term) {
                self.shared.metrics.record_catch_up(outcome);
                self.catch_up_counted_term = metrics.term;
            }
        }
        let mut snapshot = Snapshot {
            config: Some(self.published_config(node.config())),
            me: node.config().member(node.id()).map(|m| m.id),
            state: node.state(),
            term: node.term(),
            writable_primary: node.is_writable_primary(),
            primary: node.primary(),
            topology_counter: 0,
            commit_point: node.commit_point(),
            last_applied: node.last_applied(),
            last_applied_wall_ms: node.last_applied_wall_ms(),
            last_durable: node.last_durable(),
            last_durable_wall_ms: node.last_durable_wall_ms(),
            sync_source: node.sync_source(),
            members: node.members(),
            election_time: node.election_time(),
            election_metrics: node.election_candidate_metrics().cloned(),
            frozen_until: node.frozen_until(),
            in_maintenance: node.in_maintenance(),
            config_committed: node.is_config_committed(),
            now: self.now(),
        };
        // The counter travels in the snapshot, so that a reply reads a
        // state and its counter together; awaitable hellos wake on the
        // watch once the snapshot is out.
        let key = snapshot.topology_key();
        let changed = self.published_key != Some(key);
        let published = self.shared.snapshot().topology_counter;
        snapshot.topology_counter = if changed {
            published.max(*self.shared.topology.borrow()) + 1
        } else {
            published
        };
        let counter = snapshot.topology_counter;
        self.shared.publish(snapshot);
        if changed {
            self.published_key = Some(key);
            self.shared.topology.send_replace(counter);
        }
    }
}

/// Drops or adjusts events that would break the node's invariants because
/// they raced with others: positions only move forward (a watcher's read
/// may be older than the applier's report), and durability never passes
/// what the node has been told is applied.
fn sanitize(node: &Node, event: Event, shared: &Shared) -> Option<Event> {
    match event {
        Event::Appended { last_applied, .. } if last_applied < node.last_applied() => None,
        Event::Durable { last_durable, .. } if last_durable <= node.last_durable() => None,
        Event::Durable { last_durable, wall_ms } if last_durable > node.last_applied() => {
            let (applied, applied_wall) = shared.engine.last_applied_wall();
            if applied >= last_durable && applied >= node.last_applied() {
                // Report the append first; the durable event follows it.
                shared.input(Input::Event(Event::Durable { last_durable, wall_ms }));
                Some(Event::Appended {
                    last_applied: applied,
                    wall_ms: applied_wall,
                })
            } else {
                None
            }
        }
        other => Some(other),
    }
}

fn step_down_error(err: StepDownError) -> ReplError {
    match err {
        StepDownError::NotPrimary => ReplError::NotWritablePrimary,
        StepDownError::ExceededTimeLimit => {
            ReplError::ExceededTimeLimit("No electable secondaries caught up as of the stepdown deadline".into())
        }
        StepDownError::AlreadyInProgress => {
            ReplError::ConflictingOperationInProgress("a stepdown is already in progress".into())
        }
        StepDownError::SteppedDownForOtherReasons => ReplError::coded(
            189,
            "while waiting for a secondary to catch up, this node stepped down for other reasons",
        ),
    }
}

pub fn reconfig_error(err: ReconfigError) -> ReplError {
    let message = err.to_string();
    match err {
        ReconfigError::NotPrimary => ReplError::NotWritablePrimary,
        ReconfigError::Invalid(_) | ReconfigError::SetNameDiffers { .. } => ReplError::InvalidReplicaSetConfig(message),
        ReconfigError::Incompatible(_) | ReconfigError::NewVoterBehind(_) => {
            ReplError::NewReplicaSetConfigurationIncompatible(message)
        }
        ReconfigError::NotElectable => ReplError::coded(104, message),
        ReconfigError::SelfNotFound => ReplError::NewReplicaSetConfigurationIncompatible(message),
        ReconfigError::QuorumCheckFailed { .. } => ReplError::NodeNotFound(message),
        ReconfigError::ConfigNotCommitted | ReconfigError::OplogNotCommitted => ReplError::coded(308, message),
    }
}

fn step_up_error(err: StepUpError) -> ReplError {
    match err {
        StepUpError::NotElectable => ReplError::coded(125, "Election failed: this member is not electable"),
        StepUpError::ElectionLost => ReplError::coded(125, "Election failed"),
    }
}

fn not_secondary(err: NotSecondary) -> ReplError {
    ReplError::coded(95, err.to_string())
}

/// A durable-state write failed: a member that cannot keep its vote must
/// not go on (MongoDB fasserts).
pub fn fatal(message: &str) -> ! {
    tracing::error!(target: "repl", message, "fatal replication error");
    eprintln!("fatal replication error: {message}");
    std::process::abort();
}

fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id() as u64);
    hasher.finish() | 1
}
