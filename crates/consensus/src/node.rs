//! `Node`: one member's replication decisions as a deterministic state
//! machine. Events and the current time go in through `step`; actions come
//! out. The handlers live in sibling modules, one concern each:
//! `heartbeat`, `election`, `sync_source`, `replication` (pulls, positions,
//! the commit rule), `stepdown`, `reconfig` (configurations and REMOVED),
//! `commands` (freeze, step-up request, maintenance), `write_concern`, and
//! `status` (the read-only views).

use crate::config::{ConfigError, ConfigVersionAndTerm, MemberId, ReplSetConfig};
use crate::election_metrics::{ElectionCandidateMetrics, ElectionReason};
use crate::io::{Action, Event, StepDownRequest};
use crate::message::Message;
use crate::millis::Millis;
use crate::state::MemberState;
use slipstream_clock::OpTime;

/// Term and vote as last made durable (`Action::PersistTermAndVote`); given
/// back to `Node::new` on restart. The very first start has term 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Persisted {
    /// `currentTerm`.
    pub term: i64,
    /// `votedFor` in `term`.
    pub voted_for: Option<MemberId>,
}

/// Where the member's oplog stands when its `Node` starts: the last applied
/// and last durable entries (after a crash both are the last durable one)
/// and their wall-clock dates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OplogPositions {
    /// The oplog's last entry (`OpTime::NULL` for an empty oplog).
    pub last_applied: OpTime,
    /// Its wall-clock date, ms since the epoch (0 for an empty oplog).
    pub last_applied_wall_ms: i64,
    /// The last entry known durable.
    pub last_durable: OpTime,
    /// Its wall-clock date.
    pub last_durable_wall_ms: i64,
}

impl OplogPositions {
    /// An oplog whose last entry `last` (written at `wall_ms`) is durable.
    pub fn at(last: OpTime, wall_ms: i64) -> OplogPositions {
        OplogPositions {
            last_applied: last,
            last_applied_wall_ms: wall_ms,
            last_durable: last,
            last_durable_wall_ms: wall_ms,
        }
    }
}

/// What this member knows about another (MongoDB's `MemberData`).
/// Owned by `Node`; only its handlers change it.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemberData {
    /// When any message from the member last arrived.
    pub heard_at: Option<Millis>,
    /// When our last heartbeat request to it left.
    pub heartbeat_sent_at: Option<Millis>,
    /// When its last heartbeat response arrived (`lastHeartbeat`).
    pub heartbeat_response_at: Option<Millis>,
    /// When its last heartbeat request arrived (`lastHeartbeatRecv`).
    pub heartbeat_request_at: Option<Millis>,
    /// Last measured heartbeat round-trip time.
    pub rtt_ms: Option<u64>,
    /// State from its last heartbeat (`None`: never heard).
    pub state: Option<MemberState>,
    /// Term from its last heartbeat.
    pub term: i64,
    /// Last applied OpTime from its last heartbeat (sync source choice).
    pub seen_applied: OpTime,
    /// Wall-clock date of that entry (lag rules).
    pub seen_applied_wall_ms: i64,
    /// Its sync source from its last heartbeat.
    pub sync_source: Option<MemberId>,
    /// The configuration its last heartbeat reported holding (config commitment).
    pub config: Option<ConfigVersionAndTerm>,
    /// Highest applied OpTime reported (UpdatePosition or heartbeat).
    pub applied: OpTime,
    /// Wall-clock date of `applied`.
    pub applied_wall_ms: i64,
    /// Highest durable OpTime reported (the commit rule).
    pub durable: OpTime,
    /// Wall-clock date of `durable`.
    pub durable_wall_ms: i64,
    /// Added to the configuration at this time by this member as primary:
    /// the primary's majority check counts it live for an election timeout
    /// from then, as MongoDB resets member timeouts on a new configuration.
    pub added_at: Option<Millis>,
}

/// The decided role; I/O-reported states override it in `state()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Secondary,
    Candidate,
    Primary,
    Arbiter,
    /// Not in its own configuration: exchanges heartbeats and nothing else.
    Removed,
}

/// An election in progress (dry run or real).
#[derive(Clone, Debug)]
pub(crate) struct Election {
    /// The term being asked for.
    pub term: i64,
    /// Dry run (pre-vote) or real.
    pub dry_run: bool,
    /// Why we stand.
    pub reason: ElectionReason,
    /// Voters that granted, the candidate included.
    pub granted: Vec<MemberId>,
    /// Voters that refused, or whose request failed.
    pub refused: Vec<MemberId>,
}

/// Primary catch-up (seed 000 section 4.3) in progress.
#[derive(Clone, Debug)]
pub(crate) struct CatchUp {
    pub started_at: Millis,
    /// Our last applied entry when catch-up began.
    pub started_from: OpTime,
    /// The freshest last applied OpTime heard since the election.
    pub target: OpTime,
    /// Members whose heartbeats were answered, or failed, since the
    /// election (this member included).
    pub heard: Vec<MemberId>,
}

/// A `replSetStepDown` in progress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepDownState {
    pub deadline: Millis,
    pub request: StepDownRequest,
}

/// Most members a sync-source deny list holds (one entry per member at most).
pub(crate) const DENY_LIST_MAX: usize = crate::config::MEMBERS_MAX;
/// How close (by the wall-clock dates of last applied entries) to the
/// primary a higher-priority member must be before it attempts a priority
/// takeover (MongoDB's `priorityTakeoverFreshnessWindowSeconds`).
pub const PRIORITY_TAKEOVER_FRESHNESS_MS: i64 = 2_000;

/// One replica set member's consensus state.
#[derive(Clone, Debug)]
pub struct Node {
    pub(crate) config: ReplSetConfig,
    pub(crate) me: MemberId,
    /// Our position in `config.members`; `None` while REMOVED.
    pub(crate) my_index: Option<usize>,
    // Durable: changed only together with an Action::PersistTermAndVote.
    pub(crate) term: i64,
    pub(crate) voted_for: Option<MemberId>,
    // Volatile.
    pub(crate) role: Role,
    pub(crate) io_state: Option<MemberState>,
    pub(crate) reported_state: MemberState,
    pub(crate) last_applied: OpTime,
    pub(crate) last_applied_wall_ms: i64,
    pub(crate) last_durable: OpTime,
    pub(crate) last_durable_wall_ms: i64,
    pub(crate) commit_point: OpTime,
    pub(crate) members: Vec<MemberData>,
    pub(crate) now: Millis,
    pub(crate) election: Option<Election>,
    pub(crate) election_deadline: Millis,
    pub(crate) jitter_ms: u64,
    pub(crate) catch_up: Option<CatchUp>,
    pub(crate) writable: bool,
    /// The primary asked for its term's no-op (`Action::WriteNoop`).
    pub(crate) term_noop_asked: bool,
    /// The first entry of our term as primary, once appended (`electionTime`).
    pub(crate) term_start: Option<(OpTime, i64)>,
    pub(crate) sync_source: Option<MemberId>,
    pub(crate) sync_source_chosen_at: Millis,
    pub(crate) sync_source_forced: bool,
    /// Since when pulls from the sync source have brought nothing new.
    pub(crate) sync_source_idle_since: Option<Millis>,
    pub(crate) requested_sync_source: Option<MemberId>,
    pub(crate) deny_list: Vec<(MemberId, Millis)>,
    pub(crate) append_in_flight: bool,
    pub(crate) pending_source_commit_point: Option<OpTime>,
    pub(crate) rolling_back: bool,
    pub(crate) next_heartbeat_at: Millis,
    pub(crate) positions_dirty: bool,
    pub(crate) next_update_position_at: Millis,
    pub(crate) step_down: Option<StepDownState>,
    /// No election before this instant (stepdown period or `replSetFreeze`).
    pub(crate) no_election_until: Millis,
    pub(crate) priority_takeover_at: Option<Millis>,
    pub(crate) catch_up_takeover_at: Option<Millis>,
    /// The commit point when the configuration in force was adopted: it must
    /// be on a majority of this configuration before the next reconfig.
    pub(crate) config_oplog_commitment: OpTime,
    /// The newest configuration asked for with `Action::FetchConfig`, and when.
    pub(crate) config_fetch: Option<(ConfigVersionAndTerm, Millis)>,
    /// How many `replSetStepUp`s wait for the election in progress to end:
    /// each gets its answer.
    pub(crate) step_up_waiting: usize,
    pub(crate) election_metrics: Option<ElectionCandidateMetrics>,
    pub(crate) out: Vec<Action>,
}

impl Node {
    /// A member starting (or restarting) with `config`, its durable term and
    /// vote, and its oplog's positions. The very first start after
    /// `replSetInitiate` passes term 0 and an empty oplog (or a former
    /// standalone's, whose entries carry term -1). A member that is not in
    /// `config` starts REMOVED, as MongoDB's does.
    pub fn new(
        config: ReplSetConfig,
        me: MemberId,
        persisted: Persisted,
        oplog: OplogPositions,
        election_jitter_ms: u64,
        now: Millis,
    ) -> Result<Node, ConfigError> {
        config.validate()?;
        assert!(oplog.last_durable <= oplog.last_applied);
        let mut node = Node {
            me,
            my_index: None,
            term: persisted.term,
            voted_for: persisted.voted_for,
            role: Role::Removed,
            io_state: None,
            reported_state: MemberState::Removed,
            last_applied: oplog.last_applied,
            last_applied_wall_ms: oplog.last_applied_wall_ms,
            last_durable: oplog.last_durable,
            last_durable_wall_ms: oplog.last_durable_wall_ms,
            commit_point: OpTime::NULL,
            members: Vec::new(),
            now,
            election: None,
            election_deadline: now,
            jitter_ms: election_jitter_ms,
            catch_up: None,
            writable: false,
            term_noop_asked: false,
            term_start: None,
            sync_source: None,
            sync_source_chosen_at: now,
            sync_source_forced: false,
            sync_source_idle_since: None,
            requested_sync_source: None,
            deny_list: Vec::new(),
            append_in_flight: false,
            pending_source_commit_point: None,
            rolling_back: false,
            next_heartbeat_at: now,
            positions_dirty: false,
            next_update_position_at: now,
            step_down: None,
            no_election_until: now,
            priority_takeover_at: None,
            catch_up_takeover_at: None,
            config_oplog_commitment: OpTime::NULL,
            config_fetch: None,
            step_up_waiting: 0,
            election_metrics: None,
            out: Vec::new(),
            config: config.clone(),
        };
        node.install_config(config);
        node.reported_state = node.state();
        node.reset_election_timer();
        // A crash can keep appended entries of a term whose persist did not
        // happen; a member must never stand in a term older than its own log.
        if node.last_applied.term > node.term {
            node.term = node.last_applied.term;
            node.voted_for = None;
            node.out.push(Action::PersistTermAndVote {
                term: node.term,
                voted_for: None,
            });
        }
        Ok(node)
    }

    /// Feeds one event at time `now` (monotonic per member) and returns the
    /// actions to carry out, in order.
    pub fn step(&mut self, event: Event, now: Millis) -> Vec<Action> {
        assert!(now >= self.now, "time went backwards: {:?} < {:?}", now, self.now);
        self.now = now;
        if self.role == Role::Removed {
            self.step_removed(event);
        } else {
            self.dispatch(event);
        }
        self.on_time();
        std::mem::take(&mut self.out)
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Tick { election_jitter_ms } => self.jitter_ms = election_jitter_ms,
            Event::Receive { from, message } => self.on_receive(from, message),
            Event::Appended { last_applied, wall_ms } => self.on_appended(last_applied, wall_ms),
            Event::Durable { last_durable, wall_ms } => self.on_durable(last_durable, wall_ms),
            Event::Pulled(batch) => self.on_pulled(batch),
            Event::PullFailed { source } => self.on_pull_failed(source),
            Event::VoteRequestFailed { voter, term, dry_run } => self.on_vote_request_failed(voter, term, dry_run),
            Event::HeartbeatFailed { member } => self.note_catch_up_failure(member),
            Event::CommonPointFound {
                source,
                common_point,
                source_last,
                source_commit_point,
            } => self.on_common_point_found(source, common_point, source_last, source_commit_point),
            Event::RollbackComplete { common_point, wall_ms } => self.on_rollback_complete(common_point, wall_ms),
            Event::RollbackFailed { source } => self.on_rollback_failed(source),
            Event::StepDown(request) => self.on_step_down(request),
            Event::SyncFrom { member } => self.on_sync_from(member),
            Event::ReportState(state) => self.on_report_state(state),
            Event::Reconfig { config, force, answered } => self.on_reconfig(config, force, &answered),
            Event::ConfigReceived { config } => self.on_config_received(config),
            Event::Freeze { until } => self.on_freeze(until),
            Event::StepUpRequest => self.on_step_up_request(),
        }
    }

    fn on_receive(&mut self, from: MemberId, message: Message) {
        assert!(
            self.role != Role::Removed,
            "REMOVED members are stepped by step_removed"
        );
        if from == self.me {
            return;
        }
        let Some(index) = self.config.index_of(from) else {
            self.on_receive_from_outsider(from, message);
            return;
        };
        self.members[index].heard_at = Some(self.now);
        // A dry-run vote request carries the term the candidate would take,
        // which nobody adopts (that is the point of the dry run).
        let dry_run_request = matches!(&message, Message::RequestVote(r) if r.dry_run);
        if !dry_run_request {
            self.observe_term(message.term());
        }
        match message {
            Message::HeartbeatRequest(hb) => self.on_heartbeat_request(index, hb),
            Message::HeartbeatResponse(hb) => self.on_heartbeat_response(index, hb),
            Message::RequestVote(request) => self.on_request_vote(from, request),
            Message::VoteResponse(response) => self.on_vote_response(from, response),
            Message::UpdatePosition(update) => self.on_update_position(update),
            Message::StepUp { term } => self.on_step_up(term),
        }
    }

    /// Adopts a higher term seen in any message (Raft's "all servers" rule):
    /// a primary or candidate steps down, and the election timer starts
    /// over. Returns true if the term rose.
    pub(crate) fn observe_term(&mut self, term: i64) -> bool {
        if term <= self.term {
            return false;
        }
        self.term = term;
        self.voted_for = None;
        self.out.push(Action::PersistTermAndVote { term, voted_for: None });
        if matches!(self.role, Role::Primary | Role::Candidate) {
            self.become_secondary();
        }
        self.end_election(false);
        // MongoDB's _updateTerm_inlock: a newer term means someone stands
        // or has won; its heartbeats as primary get a whole election
        // timeout to arrive before we stand and depose it (takeovers
        // waited for the old term's primary and start over).
        self.reset_election_timer();
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        true
    }

    /// Leaves PRIMARY or candidate for SECONDARY.
    pub(crate) fn become_secondary(&mut self) {
        assert!(matches!(self.role, Role::Primary | Role::Candidate | Role::Secondary));
        if self.role == Role::Primary {
            // MongoDB clears the candidate metrics once no longer primary.
            self.election_metrics = None;
        }
        self.role = Role::Secondary;
        self.end_election(false);
        self.catch_up = None;
        self.term_start = None;
        self.term_noop_asked = false;
        self.set_writable(false);
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        self.reset_election_timer();
        self.report_state();
        // A stepdown still waiting did not cause this one (`check_step_down`
        // takes it first): answered once the new state is published.
        if self.step_down.take().is_some() {
            self.out
                .push(Action::StepDownFinished(Err(crate::error::StepDownError::SteppedDownForOtherReasons)));
        }
    }

    pub(crate) fn set_writable(&mut self, writable: bool) {
        if self.writable != writable {
            self.writable = writable;
            self.out.push(Action::AcceptWrites(writable));
        }
    }

    pub(crate) fn reset_election_timer(&mut self) {
        let timeout = self.config.settings.election_timeout_ms;
        self.election_deadline = self.now.plus(timeout + self.jitter_ms);
    }

    /// Emits `StateChanged` when the externally visible state changed.
    pub(crate) fn report_state(&mut self) {
        let state = self.state();
        if state != self.reported_state {
            self.reported_state = state;
            self.out.push(Action::StateChanged { state, term: self.term });
        }
    }

    /// `Event::ReportState`: the I/O layer's initial sync (STARTUP2) and
    /// maintenance mode (RECOVERING, `replSetMaintenance`), and back to
    /// SECONDARY. A primary or a candidate refuses, as MongoDB's
    /// `setMaintenanceMode` does ("primaries can't modify maintenance mode").
    pub(crate) fn on_report_state(&mut self, state: MemberState) {
        let refused = match self.role {
            Role::Primary => Some(crate::error::NotSecondary::Primary),
            Role::Candidate => Some(crate::error::NotSecondary::RunningForElection),
            // A dry run is running for election too (MongoDB's candidate
            // role starts with it): maintenance waits for its outcome. The
            // I/O layer's STARTUP2 ends it instead (below).
            _ if self.election.is_some() && state != MemberState::Startup2 => {
                Some(crate::error::NotSecondary::RunningForElection)
            }
            _ => None,
        };
        if let Some(reason) = refused {
            self.out.push(Action::ReportStateFinished(Err(reason)));
            return;
        }
        match state {
            MemberState::Secondary => self.io_state = None,
            MemberState::Startup2 | MemberState::Recovering if self.role != Role::Arbiter => {
                self.io_state = Some(state);
                // A dry run of ours no longer stands for anything.
                self.end_election(false);
            }
            _ => {}
        }
        self.out.push(Action::ReportStateFinished(Ok(())));
        self.report_state();
    }

    /// Everything that depends on the passage of time, checked after every
    /// event: heartbeats, election timers, takeovers, catch-up, stepdown,
    /// the primary's majority check, sync source and position reports. A
    /// REMOVED member only heartbeats.
    fn on_time(&mut self) {
        self.send_heartbeats_if_due();
        if self.role != Role::Removed {
            self.check_primary_sees_majority();
            self.check_catch_up();
            self.check_step_down();
            self.check_election_timers();
            self.choose_sync_source_if_needed();
            self.send_update_position_if_due();
        }
        self.report_state();
    }

    /// Our index in the configuration; only called where REMOVED members
    /// never go (`step_removed` keeps them out).
    pub(crate) fn my_index(&self) -> usize {
        self.my_index
            .expect("a REMOVED member has no index in its configuration")
    }

    /// Index of another member that is primary in our term and alive.
    pub(crate) fn known_primary_index(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            let m = &self.members[i];
            Some(i) != self.my_index && m.state == Some(MemberState::Primary) && m.term == self.term && self.is_up(i)
        })
    }

    /// True if member `index` was heard from within the silence limit
    /// (`Settings::silence_limit_ms`): its `health`.
    pub(crate) fn is_up(&self, index: usize) -> bool {
        self.heard_within(index, self.config.settings.silence_limit_ms())
    }

    /// True if member `index` was heard from within an election timeout:
    /// what a primary's majority check counts (MongoDB's liveness timeout),
    /// even where a shorter heartbeat timeout already shows it down.
    pub(crate) fn is_live(&self, index: usize) -> bool {
        self.heard_within(index, self.config.settings.election_timeout_ms)
    }

    fn heard_within(&self, index: usize, timeout_ms: u64) -> bool {
        if Some(index) == self.my_index {
            return true;
        }
        self.members[index]
            .heard_at
            .is_some_and(|t| self.now.since(t) < timeout_ms)
    }
}
