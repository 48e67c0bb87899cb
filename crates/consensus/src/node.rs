//! `Node`: one member's replication decisions as a deterministic state
//! machine. Events and the current time go in through `step`; actions come
//! out. The handlers live in sibling modules, one concern each:
//! `heartbeat`, `election`, `sync_source`, `replication` (pulls, positions,
//! the commit rule), `stepdown` and `write_concern`.

use crate::config::{ConfigError, ReplSetConfig};
use crate::io::{Action, Event, StepDownRequest};
use crate::message::Message;
use crate::optime::{MemberId, Millis, OpTime, Timestamp};
use crate::state::MemberState;

/// Term and vote as last made durable (`Action::PersistTermAndVote`); given
/// back to `Node::new` on restart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Persisted {
    /// `currentTerm`.
    pub term: u64,
    /// `votedFor` in `term`.
    pub voted_for: Option<MemberId>,
}

/// Why a write was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// Not primary, or primary still catching up or stepping down
    /// (MongoDB code 10107 NotWritablePrimary).
    NotWritablePrimary,
}

/// What this member knows about another (MongoDB's `MemberData`).
/// Owned by `Node`; only its handlers change it.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemberData {
    /// When any message from the member last arrived.
    pub heard_at: Option<Millis>,
    /// When our last heartbeat request to it left.
    pub heartbeat_sent_at: Option<Millis>,
    /// Last measured heartbeat round-trip time.
    pub rtt_ms: Option<u64>,
    /// State from its last heartbeat (`None`: never heard).
    pub state: Option<MemberState>,
    /// Term from its last heartbeat.
    pub term: u64,
    /// Last applied OpTime from its last heartbeat (sync source choice).
    pub seen_applied: OpTime,
    /// Its sync source from its last heartbeat.
    pub sync_source: Option<MemberId>,
    /// Highest applied OpTime reported through UpdatePosition.
    pub applied: OpTime,
    /// Highest durable OpTime reported through UpdatePosition (commit rule).
    pub durable: OpTime,
}

/// The decided role; I/O-reported states override it in `state()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Secondary,
    Candidate,
    Primary,
    Arbiter,
}

/// An election in progress (dry run or real).
#[derive(Clone, Debug)]
pub(crate) struct Election {
    /// The term being asked for.
    pub term: u64,
    /// Dry run (pre-vote) or real.
    pub dry_run: bool,
    /// Voters that granted, the candidate included.
    pub granted: Vec<MemberId>,
}

/// Primary catch-up (seed 000 section 4.3) in progress.
#[derive(Clone, Debug)]
pub(crate) struct CatchUp {
    pub started_at: Millis,
    /// The freshest last applied OpTime heard since the election.
    pub target: OpTime,
    /// Voters whose heartbeat responses arrived since the election.
    pub responded: Vec<MemberId>,
}

/// A `replSetStepDown` in progress.
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepDownState {
    pub deadline: Millis,
    pub request: StepDownRequest,
}

/// Most members a sync-source deny list holds (one entry per member at most).
pub(crate) const DENY_LIST_MAX: usize = crate::config::MEMBERS_MAX;
/// How close (in timestamp milliseconds) to the primary a higher-priority
/// member must be before it attempts a priority takeover.
pub const PRIORITY_TAKEOVER_FRESHNESS_MS: u64 = 2_000;

/// One replica set member's consensus state.
#[derive(Clone, Debug)]
pub struct Node {
    pub(crate) config: ReplSetConfig,
    pub(crate) me: MemberId,
    pub(crate) my_index: usize,
    // Durable: changed only together with an Action::PersistTermAndVote.
    pub(crate) term: u64,
    pub(crate) voted_for: Option<MemberId>,
    // Volatile.
    pub(crate) role: Role,
    pub(crate) io_state: Option<MemberState>,
    pub(crate) reported_state: MemberState,
    pub(crate) last_applied: OpTime,
    pub(crate) last_durable: OpTime,
    pub(crate) last_written: OpTime,
    pub(crate) commit_point: OpTime,
    pub(crate) members: Vec<MemberData>,
    pub(crate) now: Millis,
    pub(crate) election: Option<Election>,
    pub(crate) election_deadline: Millis,
    pub(crate) jitter_ms: u64,
    pub(crate) catch_up: Option<CatchUp>,
    pub(crate) writable: bool,
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
    pub(crate) no_election_until: Millis,
    pub(crate) priority_takeover_at: Option<Millis>,
    pub(crate) catch_up_takeover_at: Option<Millis>,
    pub(crate) out: Vec<Action>,
}

impl Node {
    /// A member starting (or restarting) with `config`, its durable term and
    /// vote, and its oplog's last entry (after a crash: the last durable one).
    pub fn new(
        config: ReplSetConfig,
        me: MemberId,
        persisted: Persisted,
        last_applied: OpTime,
        last_durable: OpTime,
        election_jitter_ms: u64,
        now: Millis,
    ) -> Result<Node, ConfigError> {
        config.validate()?;
        let my_index = config.index_of(me).ok_or(ConfigError::NotAMember(me))?;
        assert!(last_durable <= last_applied);
        let arbiter = config.members[my_index].arbiter_only;
        let members = vec![MemberData::default(); config.members.len()];
        let timeout = config.settings.election_timeout_ms;
        let role = if arbiter { Role::Arbiter } else { Role::Secondary };
        Ok(Node {
            me,
            my_index,
            term: persisted.term,
            voted_for: persisted.voted_for,
            role,
            io_state: None,
            reported_state: if arbiter { MemberState::Arbiter } else { MemberState::Secondary },
            last_applied,
            last_durable,
            last_written: last_applied,
            commit_point: OpTime::NULL,
            members,
            now,
            election: None,
            election_deadline: now.plus(timeout + election_jitter_ms),
            jitter_ms: election_jitter_ms,
            catch_up: None,
            writable: false,
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
            out: Vec::new(),
            config,
        })
    }

    /// Feeds one event at time `now` (monotonic per member) and returns the
    /// actions to carry out, in order.
    pub fn step(&mut self, event: Event, now: Millis) -> Vec<Action> {
        assert!(now >= self.now, "time went backwards: {:?} < {:?}", now, self.now);
        self.now = now;
        match event {
            Event::Tick { election_jitter_ms } => self.jitter_ms = election_jitter_ms,
            Event::Receive { from, message } => self.on_receive(from, message),
            Event::Appended { last_applied } => self.on_appended(last_applied),
            Event::Durable { last_durable } => self.on_durable(last_durable),
            Event::Pulled(batch) => self.on_pulled(batch),
            Event::PullFailed { source } => self.on_pull_failed(source),
            Event::CommonPointFound { source, common_point, source_last, source_commit_point } => {
                self.on_common_point_found(source, common_point, source_last, source_commit_point)
            }
            Event::RollbackComplete { common_point } => self.on_rollback_complete(common_point),
            Event::RollbackFailed { source } => self.on_rollback_failed(source),
            Event::StepDown(request) => self.on_step_down(request),
            Event::SyncFrom { member } => self.on_sync_from(member),
            Event::ReportState(state) => self.on_report_state(state),
        }
        self.on_time();
        std::mem::take(&mut self.out)
    }

    /// Assigns the OpTime of a client write. Only a writable primary (catch-up
    /// finished, no stepdown in progress) accepts writes. The caller writes
    /// the entry and reports `Event::Appended`.
    pub fn prepare_write(&mut self, now: Millis) -> Result<OpTime, WriteError> {
        assert!(now >= self.now);
        self.now = now;
        if !self.is_writable_primary() {
            return Err(WriteError::NotWritablePrimary);
        }
        Ok(self.next_optime())
    }

    /// The next OpTime of this primary's term, after every entry it has.
    pub(crate) fn next_optime(&mut self) -> OpTime {
        let previous = self.last_written.max(self.last_applied).timestamp.0;
        let timestamp = (previous + 1).max(self.now.0);
        let optime = OpTime { term: self.term, timestamp: Timestamp(timestamp) };
        assert!(optime > self.last_written);
        self.last_written = optime;
        optime
    }

    fn on_receive(&mut self, from: MemberId, message: Message) {
        let Some(index) = self.config.index_of(from) else { return };
        if from == self.me {
            return;
        }
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
    /// a primary or candidate steps down. Returns true if the term rose.
    pub(crate) fn observe_term(&mut self, term: u64) -> bool {
        if term <= self.term {
            return false;
        }
        self.term = term;
        self.voted_for = None;
        self.out.push(Action::PersistTermAndVote { term, voted_for: None });
        if matches!(self.role, Role::Primary | Role::Candidate) {
            self.become_secondary();
        }
        self.election = None;
        true
    }

    /// Leaves PRIMARY or candidate for SECONDARY.
    pub(crate) fn become_secondary(&mut self) {
        assert!(self.role != Role::Arbiter);
        self.role = Role::Secondary;
        self.election = None;
        self.catch_up = None;
        self.set_writable(false);
        if self.step_down.take().is_some() {
            self.out.push(Action::StepDownFinished(Ok(())));
        }
        self.priority_takeover_at = None;
        self.catch_up_takeover_at = None;
        self.reset_election_timer();
        self.report_state();
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

    fn on_report_state(&mut self, state: MemberState) {
        match state {
            MemberState::Secondary => self.io_state = None,
            MemberState::Startup2 | MemberState::Recovering if self.role == Role::Secondary => {
                self.io_state = Some(state);
            }
            _ => {}
        }
        self.report_state();
    }

    /// Everything that depends on the passage of time, checked after every
    /// event: heartbeats, election timers, takeovers, catch-up, stepdown,
    /// the primary's majority check, sync source and position reports.
    fn on_time(&mut self) {
        self.send_heartbeats_if_due();
        self.check_primary_sees_majority();
        self.check_catch_up();
        self.check_step_down();
        self.check_election_timers();
        self.choose_sync_source_if_needed();
        self.send_update_position_if_due();
        self.report_state();
    }

    // Accessors.

    /// This member's `_id`.
    pub fn id(&self) -> MemberId {
        self.me
    }
    /// The configuration in force.
    pub fn config(&self) -> &ReplSetConfig {
        &self.config
    }
    /// Current term.
    pub fn term(&self) -> u64 {
        self.term
    }
    /// Vote cast in the current term.
    pub fn voted_for(&self) -> Option<MemberId> {
        self.voted_for
    }
    /// The member's state as others see it.
    pub fn state(&self) -> MemberState {
        if self.rolling_back {
            return MemberState::Rollback;
        }
        if let Some(state) = self.io_state {
            return state;
        }
        match self.role {
            Role::Primary => MemberState::Primary,
            Role::Secondary | Role::Candidate => MemberState::Secondary,
            Role::Arbiter => MemberState::Arbiter,
        }
    }
    /// True while a real (not dry-run) election of ours is in progress.
    pub fn is_candidate(&self) -> bool {
        self.role == Role::Candidate
    }
    /// True if client writes are accepted now.
    pub fn is_writable_primary(&self) -> bool {
        self.role == Role::Primary && self.writable
    }
    /// Last applied OpTime.
    pub fn last_applied(&self) -> OpTime {
        self.last_applied
    }
    /// Last durable OpTime.
    pub fn last_durable(&self) -> OpTime {
        self.last_durable
    }
    /// The commit point (`lastCommitted`).
    pub fn commit_point(&self) -> OpTime {
        self.commit_point
    }
    /// The current sync source.
    pub fn sync_source(&self) -> Option<MemberId> {
        self.sync_source
    }
    /// The primary this member believes in, itself included.
    pub fn primary(&self) -> Option<MemberId> {
        if self.role == Role::Primary {
            return Some(self.me);
        }
        self.known_primary_index().map(|i| self.config.members[i].id)
    }

    /// Index of another member that is primary in our term and alive.
    pub(crate) fn known_primary_index(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| {
            let m = &self.members[i];
            i != self.my_index
                && m.state == Some(MemberState::Primary)
                && m.term == self.term
                && self.is_up(i)
        })
    }

    /// True if member `index` was heard from within an election timeout.
    pub(crate) fn is_up(&self, index: usize) -> bool {
        if index == self.my_index {
            return true;
        }
        let timeout = self.config.settings.election_timeout_ms;
        self.members[index].heard_at.is_some_and(|t| self.now.since(t) < timeout)
    }
}
