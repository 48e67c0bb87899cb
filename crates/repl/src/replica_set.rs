//! `ReplicaSet`: the handle the server holds for a member started with
//! `--replSet` (it implements `Topology`). It starts the coordinator
//! thread and the companions that watch storage, and answers the server's
//! questions from the coordinator's last published `Snapshot`; anything
//! that needs the node goes through the coordinator's channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bson::{doc, Document};
use parking_lot::{Mutex, RwLock};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::{MemberState, Millis, Node, OplogPositions, WriteConcern as CoreWriteConcern, W as CoreW};
use slipstream_storage::{bson_timestamp, Engine, ReadAt};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};

use crate::commit_waiters::CommitWaiters;
use crate::concern::{ReadConcernArgs, ReadConcernLevel, WriteConcern, W};
use crate::coordinator::{Coordinator, Input};
use crate::inputs::Inputs;
use crate::error::ReplError;
use crate::local_state::LocalState;
use crate::network::{NetError, Network};
use crate::newly_added::NewlyAddedRemover;
use crate::noop_writer::{write_note, NoopWriter};
use crate::position_watcher::PositionWatcher;
use crate::protocol::optime_document;
use crate::report::{self, MemberExtras, ReplMetrics, ReplSnapshot, SetView, SnapshotExtras};
use crate::snapshot::Snapshot;
use crate::topology::{BoxFuture, CommandAccess, Topology};

/// What `serve --replSet` tells the member about itself.
pub struct ReplicaSetOptions {
    /// `--replSet`.
    pub set_name: String,
    /// The port this node listens on (how it finds itself in a configuration).
    pub port: u16,
    /// Host names that mean this machine besides `localhost` / `127.0.0.1`
    /// (the bind addresses, the host name).
    pub host_names: Vec<String>,
}

/// State shared by the handle, the coordinator and the companions. Each
/// field says who writes it; everything else only reads.
pub struct Shared {
    /// The storage engine (locks internally). Its write gate is opened and
    /// closed only by the coordinator (and `stop`).
    pub engine: Arc<Engine>,
    /// How companions reach other members (stateless to callers).
    pub network: Arc<dyn Network>,
    /// Where companions spawn their I/O.
    pub runtime: Handle,
    /// Term/vote and configuration are written only by the coordinator's
    /// thread; the rollback id only by the rollback companion.
    pub local: LocalState,
    /// Fixed at start.
    pub options: ReplicaSetOptions,
    /// The coordinator's clock starts here (`Millis` are ms since).
    pub started: Instant,
    /// Wall-clock start, for `uptime`.
    pub started_wall_ms: i64,
    /// The coordinator's input queue and the coordinator itself
    /// (`inputs.rs`: who steps it).
    inputs: Inputs,
    /// Written only by the coordinator after each step (`publish`).
    snapshot: RwLock<Arc<Snapshot>>,
    /// `topologyVersion.counter`; awaitable `hello`s wait on it. Moved
    /// only by the coordinator.
    pub topology: watch::Sender<i64>,
    /// The commit point, for majority reads waiting on it. Written only
    /// by the coordinator.
    pub commit_point_changed: watch::Sender<OpTime>,
    /// This primary's majority writes waiting for the commit point, woken
    /// by the coordinator right after it publishes one that reaches them.
    pub commit_waiters: CommitWaiters,
    /// This member's `host:port` as its configuration names it (shared
    /// with `TcpNetwork`'s handshake). Written by the coordinator when a
    /// configuration is installed, and by `replSetInitiate`.
    pub me_host: Arc<RwLock<String>>,
    /// Bumped only by the rollback companion.
    rbid: AtomicI32,
    /// The last rollback, its counters, its fail point (`rollback.rs`).
    pub rollback: crate::rollback::RollbackState,
    /// Heartbeat details of the other members for replSetGetStatus
    /// (written by the heartbeat sender's tasks).
    member_extras: Mutex<HashMap<MemberId, MemberExtras>>,
    /// True while the applier has a batch in flight (written by the applier).
    pub applier_busy: watch::Sender<bool>,
    /// Counters and histograms for serverStatus and Prometheus.
    pub metrics: ReplMetrics,
    /// `topologyVersion.processId` in the report module's documents.
    process_id: bson::oid::ObjectId,
    /// True while a member without a configuration asks a peer for one
    /// (`heartbeat_sender::fetch_initial_config`).
    /// `replSetMaintenance` calls in force: MongoDB's counter, so that the
    /// member leaves RECOVERING only when every `true` has had its `false`.
    /// Held across the call, which serializes them.
    pub maintenance_calls: tokio::sync::Mutex<u32>,
    pub config_fetch_in_flight: std::sync::atomic::AtomicBool,
    /// True once `stop` began.
    stopping: std::sync::atomic::AtomicBool,
    /// Test-only fail points the companions consult (`configureFailPoint`).
    pub fail_points: crate::fail_points::ReplFailPoints,
    /// Initial sync's live counters (written by the initial syncer).
    pub initial_sync: Arc<crate::initial_sync::progress::Status>,
    /// A too-stale member's resync (`resync.rs`): begun by its watcher or
    /// the initial syncer, finished by the coordinator; its data guard is
    /// held by the applier and a rollback, taken whole by the wipe.
    pub resync: crate::resync::ResyncState,
}

impl Shared {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().clone()
    }

    pub(crate) fn publish(&self, snapshot: Snapshot) {
        *self.snapshot.write() = Arc::new(snapshot);
    }

    /// Hands an input to the coordinator thread (dropped once it has
    /// stopped).
    pub fn input(&self, input: Input) {
        self.inputs.send(input);
    }

    /// Resolves once `ReplicaSet::stop` has begun (at once if it has): the
    /// waits of read and write concerns end on it with ShutdownInProgress
    /// instead of holding their connection open through the shutdown.
    pub async fn stopped(&self) {
        // Subscribed before the flag is read: `stop` sets the flag, then
        // moves the topology counter, so neither order misses it.
        let mut topology = self.topology.subscribe();
        while !self.stopping.load(Ordering::SeqCst) {
            if topology.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Hands an input to the coordinator and steps it on this thread when
    /// no other thread is stepping the coordinator: for inputs on a
    /// replicated write's path (`inputs.rs`).
    pub fn step_input(&self, input: Input) {
        self.inputs.send_and_step(input);
    }

    pub fn me_host(&self) -> String {
        self.me_host.read().clone()
    }

    pub fn now(&self) -> Millis {
        Millis(self.started.elapsed().as_millis() as u64)
    }

    pub fn rbid(&self) -> i32 {
        self.rbid.load(Ordering::SeqCst)
    }

    pub fn bump_rbid(&self) -> i32 {
        let rbid = self.rbid.fetch_add(1, Ordering::SeqCst) + 1;
        if let Err(err) = self.local.write_rbid(rbid) {
            crate::coordinator::fatal(&format!("cannot persist the rollback id: {err}"));
        }
        rbid
    }

    pub async fn wait_applier_idle(&self) {
        let mut busy = self.applier_busy.subscribe();
        let _ = busy.wait_for(|busy| !*busy).await;
    }

    /// A heartbeat to `member` succeeded (with the `electionTime` of a
    /// primary) or failed (with why): `uptime` counts from the first success
    /// after a failure, `lastHeartbeatMessage` says the last failure.
    pub fn note_heartbeat(&self, member: MemberId, outcome: Result<Option<Timestamp>, String>) {
        let now = self.now();
        let mut extras = self.member_extras.lock();
        let entry = extras.entry(member).or_insert_with(|| MemberExtras {
            id: member,
            ..MemberExtras::default()
        });
        match outcome {
            Ok(election_time) => {
                entry.up_since.get_or_insert(now);
                entry.last_heartbeat_message.clear();
                entry.election_time = election_time;
            }
            Err(why) => {
                entry.up_since = None;
                entry.last_heartbeat_message = why;
                entry.election_time = None;
            }
        }
    }

    /// The report module's view of this member: the coordinator's last
    /// snapshot plus what the I/O layer knows (storage positions, clocks,
    /// identity).
    pub fn report_snapshot(&self) -> ReplSnapshot {
        let snapshot = self.snapshot();
        let (applied, applied_wall) = self.engine.last_applied_wall();
        let durable = self.engine.last_durable_wall();
        let commit_point_wall_ms = Some(commit_wall_ms(self, snapshot.commit_point)).filter(|ms| *ms > 0);
        let extras = SnapshotExtras {
            me_host: self.me_host(),
            rbid: self.rbid(),
            topology_version_counter: snapshot.topology_counter,
            process_id: self.process_id,
            started_at_wall_ms: self.started_wall_ms,
            now_wall_ms: bson::DateTime::now().timestamp_millis(),
            now: self.now(),
            sync_source_host: snapshot
                .sync_source
                .and_then(|s| snapshot.host_of(s))
                .map(str::to_owned),
            info_message: self.rollback.info_message(),
            members: self.member_extras.lock().values().cloned().collect(),
            applied: (applied, applied_wall),
            durable,
            read_concern_majority: snapshot.commit_point.min(applied),
            commit_point_wall_ms,
            last_stable_recovery_timestamp: Some(self.engine.checkpoint_timestamp()),
            in_shutdown: self.stopping.load(Ordering::SeqCst),
        };
        let Some(config) = snapshot.config.as_deref().cloned() else {
            return ReplSnapshot::uninitialized(extras);
        };
        let set = SetView {
            config,
            me: snapshot.me.unwrap_or(u32::MAX),
            state: snapshot.state,
            term: snapshot.term,
            writable_primary: snapshot.writable_primary,
            primary: snapshot.primary,
            commit_point: snapshot.commit_point,
            sync_source: snapshot.sync_source,
            election_time: snapshot.election_time,
            election_metrics: snapshot.election_metrics.clone(),
            in_maintenance: snapshot.in_maintenance,
            members: snapshot.members.clone(),
        };
        ReplSnapshot { extras, set: Some(set) }
    }

    /// This member's `_id` in `config`: the member whose host is ours (its
    /// port is ours and its name one of this machine's).
    pub fn find_self(&self, config: &ReplSetConfig) -> Option<MemberId> {
        config.members.iter().find(|m| self.is_me(&m.host)).map(|m| m.id)
    }

    pub fn is_me(&self, host: &str) -> bool {
        let Ok((name, port)) = crate::config_document::split_host(host) else {
            return false;
        };
        if port.parse::<u16>().ok() != Some(self.options.port) {
            return false;
        }
        matches!(name, "localhost" | "127.0.0.1" | "::1") || self.options.host_names.iter().any(|h| h == name)
    }
}

pub struct ReplicaSet {
    shared: Arc<Shared>,
    coordinator: Mutex<Option<JoinHandle<()>>>,
    watcher: Mutex<PositionWatcher>,
    noop_writer: Mutex<NoopWriter>,
    newly_added: Mutex<NewlyAddedRemover>,
}

impl ReplicaSet {
    /// MongoDB's `checkIfWriteConcernCanBeSatisfied`: more members than the
    /// set has data-bearing ones (100), or a tag mode its configuration does
    /// not define (79: Slipstream's configurations define none).
    fn unsatisfiable(&self, concern: &WriteConcern) -> Result<(), ReplError> {
        match &concern.w {
            W::Tag(mode) => Err(ReplError::UnknownReplWriteConcern(format!(
                "No write concern mode named '{mode}' found in replica set configuration"
            ))),
            W::Nodes(n) => {
                let snapshot = self.shared.snapshot();
                let data_bearing = snapshot
                    .config
                    .as_ref()
                    .map_or(1, |c| c.members.iter().filter(|m| m.is_data_bearing()).count());
                if *n as usize > data_bearing {
                    return Err(ReplError::UnsatisfiableWriteConcern("Not enough data-bearing nodes".into()));
                }
                Ok(())
            }
            W::Majority => Ok(()),
        }
    }

    /// Starts a member: reads its stored configuration, term and vote,
    /// starts the coordinator (with a node when a configuration is
    /// stored, else in STARTUP waiting for `replSetInitiate` or a
    /// heartbeat that brings one) and the storage watchers.
    pub fn start(
        engine: Arc<Engine>,
        network: Arc<dyn Network>,
        me_host: Arc<RwLock<String>>,
        options: ReplicaSetOptions,
        runtime: Handle,
    ) -> Result<ReplicaSet, ReplError> {
        let local = LocalState::new(engine.clone());
        // A rollback a crash interrupted finishes before anything reads the
        // oplog or the rollback id.
        let last_rollback = crate::rollback::finish_interrupted(&engine, &local)?;
        // So does the wipe of a resync decided before a crash: the member
        // then starts empty and initial-syncs.
        let resync_pending = crate::resync::finish_interrupted(&engine)?;
        let rbid = match local.read_rbid()? {
            Some(rbid) => rbid,
            None => {
                // MongoDB starts the rollback id from the clock so that a
                // wiped member does not repeat an old one.
                let rbid = (bson::DateTime::now().timestamp_millis() / 1000 % 1_000_000) as i32;
                local.write_rbid(rbid)?;
                rbid
            }
        };
        let shared = Arc::new(Shared {
            engine: engine.clone(),
            network,
            runtime,
            local,
            options,
            started: Instant::now(),
            started_wall_ms: bson::DateTime::now().timestamp_millis(),
            inputs: Inputs::default(),
            snapshot: RwLock::new(Arc::new(Snapshot::uninitialized())),
            topology: watch::channel(1).0,
            commit_point_changed: watch::channel(OpTime::NULL).0,
            commit_waiters: CommitWaiters::default(),
            me_host,
            rbid: AtomicI32::new(rbid),
            rollback: crate::rollback::RollbackState::default(),
            applier_busy: watch::channel(false).0,
            member_extras: Mutex::new(HashMap::new()),
            metrics: ReplMetrics::new(crate::oplog_fetcher::FETCH_BUFFER_BYTES_MAX),
            process_id: bson::oid::ObjectId::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            initial_sync: Arc::default(),
            config_fetch_in_flight: std::sync::atomic::AtomicBool::new(false),
            maintenance_calls: tokio::sync::Mutex::new(0),
            fail_points: crate::fail_points::ReplFailPoints::default(),
            resync: crate::resync::ResyncState::default(),
        });
        if resync_pending {
            shared.resync.begin();
        }
        if let Some(record) = last_rollback {
            shared.rollback.set_last(record);
        }
        let node = match shared.local.read_config()? {
            Some(config) => Some(restart_node(&shared, config)?),
            None => None,
        };
        // A data-bearing member restarted with its data catches up before
        // it calls itself SECONDARY (`restart_catch_up`).
        let restarted_with_data = node
            .as_ref()
            .is_some_and(|node| node.config().member(node.id()).is_some_and(|m| m.is_data_bearing()))
            && !engine.last_applied().is_null();
        let coordinator = Coordinator::new(shared.clone(), node);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("repl-coordinator".into())
            .spawn(move || {
                // A member whose coordinator died must not go on serving (its
                // write gate may be open): stop, as MongoDB fasserts.
                let run = || thread_shared.inputs.run_thread(coordinator);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
                    crate::coordinator::fatal("the replication coordinator panicked");
                }
            })
            .map_err(|err| ReplError::IllegalOperation(format!("cannot start the coordinator: {err}")))?;
        if restarted_with_data {
            crate::restart_catch_up::start(shared.clone());
        }
        let watcher = PositionWatcher::start(shared.clone());
        let noop_writer = NoopWriter::start(shared.clone());
        let newly_added = NewlyAddedRemover::start(shared.clone());
        Ok(ReplicaSet {
            shared,
            coordinator: Mutex::new(Some(thread)),
            watcher: Mutex::new(watcher),
            noop_writer: Mutex::new(noop_writer),
            newly_added: Mutex::new(newly_added),
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops the coordinator and the companions (before the engine shuts down).
    pub fn stop(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Majority waiters waiting on their own learn of it.
        self.shared.topology.send_modify(|counter| *counter += 1);
        self.watcher.lock().stop();
        self.noop_writer.lock().stop();
        self.newly_added.lock().stop();
        self.shared.input(Input::Stop);
        if let Some(thread) = self.coordinator.lock().take() {
            let _ = thread.join();
        }
        // No client write after this: the engine's final checkpoint follows.
        self.shared.engine.set_write_gate(slipstream_storage::WriteGate::Closed);
    }

    /// Sends `input` built around a fresh oneshot and waits for its answer.
    pub(crate) async fn ask<T>(&self, build: impl FnOnce(oneshot::Sender<T>) -> Input) -> Result<T, ReplError> {
        self.ask_by(build, Shared::input).await
    }

    /// `ask`, stepping the input on this thread when the coordinator is
    /// free (`Shared::step_input`): for inputs on a write's path.
    pub(crate) async fn ask_stepping<T>(
        &self,
        build: impl FnOnce(oneshot::Sender<T>) -> Input,
    ) -> Result<T, ReplError> {
        self.ask_by(build, Shared::step_input).await
    }

    async fn ask_by<T>(
        &self,
        build: impl FnOnce(oneshot::Sender<T>) -> Input,
        send: fn(&Shared, Input),
    ) -> Result<T, ReplError> {
        let (reply, answer) = oneshot::channel();
        send(&self.shared, build(reply));
        answer.await.map_err(|_| ReplError::ShutdownInProgress)
    }

    async fn wait_majority(&self, optime: OpTime, deadline: Option<Instant>) -> Result<(), ReplError> {
        let concern = CoreWriteConcern {
            w: CoreW::Majority,
            journal: true,
            wtimeout_ms: None,
        };
        let wait = self.ask_stepping(|reply| Input::WaitWriteConcern { optime, concern, reply });
        match deadline {
            None => wait.await?,
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), wait).await {
                Ok(result) => result?,
                Err(_) => Err(ReplError::MaxTimeMsExpired),
            },
        }
    }

    /// MongoDB's `waitForReadConcern`: a time past this member's cluster
    /// time (after the request's own `$clusterTime` gossip) is refused
    /// (72) rather than waited for: no write has it yet, and a wait
    /// without `maxTimeMS` would never end.
    fn check_not_past_cluster_time(&self, concern: &ReadConcernArgs) -> Result<(), ReplError> {
        let asked = match (concern.after_cluster_time, concern.at_cluster_time) {
            (Some(ts), _) => ("afterClusterTime", ts),
            (None, Some(ts)) => ("atClusterTime", ts),
            (None, None) => return Ok(()),
        };
        let current = self.shared.engine.cluster_time();
        if asked.1 > current {
            return Err(ReplError::invalid_options(format!(
                "readConcern {} value must not be greater than the current clusterTime. Requested clusterTime: {}; \
                 current clusterTime: {current}",
                asked.0, asked.1
            )));
        }
        Ok(())
    }

    /// Waits until this member has applied `ts` (afterClusterTime); a
    /// primary behind it writes a no-op to get there (seed 001 A2.2).
    async fn wait_applied(&self, ts: Timestamp, deadline: Option<Instant>) -> Result<(), ReplError> {
        let engine = &self.shared.engine;
        let mut oplog = engine.oplog_watch();
        if engine.last_applied().ts < ts && self.shared.snapshot().writable_primary && engine.cluster_time() >= ts {
            write_note(&self.shared, doc! {"msg": "afterClusterTime"}).await?;
        }
        let applied = async {
            loop {
                if engine.last_applied().ts >= ts {
                    return Ok(());
                }
                let changed = oplog.changed();
                match deadline {
                    None => {
                        let _ = changed.await;
                    }
                    Some(deadline) => {
                        if tokio::time::timeout_at(deadline.into(), changed).await.is_err() {
                            return Err(ReplError::MaxTimeMsExpired);
                        }
                    }
                }
            }
        };
        tokio::select! {
            result = applied => result,
            () = self.shared.stopped() => Err(ReplError::ShutdownInProgress),
        }
    }

    /// Waits until the commit point reaches `op`, which must then still be
    /// in this member's oplog with its term: the commit point is always on
    /// this member's own log, so an entry of `op`'s timestamp from another
    /// term (or none) means `op` was rolled back, as a write can be when
    /// its primary steps down before its wait begins.
    async fn wait_committed_for_concern(&self, op: OpTime, concern: &WriteConcern) -> Result<(), ReplError> {
        let deadline = concern.wtimeout_deadline(Instant::now());
        match self.wait_committed(op.ts, deadline).await {
            Ok(_) if op.is_null() => Ok(()),
            Ok(_) => {
                let entry = self.shared.engine.oplog_entry(op.ts)?;
                let term = entry.as_ref().and_then(|entry| entry.get_i64("t").ok());
                if term == Some(op.term) {
                    Ok(())
                } else {
                    Err(ReplError::PrimarySteppedDown)
                }
            }
            Err(ReplError::MaxTimeMsExpired) => Err(ReplError::WriteConcernTimeout {
                wtimeout_ms: concern.wtimeout_ms,
            }),
            Err(err) => Err(err),
        }
    }

    /// A majority write of this primary's, waiting for the commit point on
    /// its own: a commit point that reaches it (`commit_waiters`) and the
    /// topology counter wake it,
    /// with no round through the coordinator's queue (which cost every
    /// majority write a cross-thread hand-off in, a hand-off out and a
    /// place in a list the coordinator scanned at every step).
    ///
    /// The same rule as the core's `evaluate_write_concern`: satisfied once
    /// a commit point of the write's own term reaches it (entries of one
    /// term come from its one primary, so such a commit point is on the
    /// write's branch, whatever this member's role is by now); interrupted
    /// once this member is no longer primary in that term (a stepdown moves
    /// the topology counter).
    async fn wait_majority_as_primary(&self, optime: OpTime, concern: &WriteConcern) -> Result<(), ReplError> {
        let started = Instant::now();
        let deadline = concern.wtimeout_deadline(started);
        let wtimeout_ms = concern.wtimeout_ms;
        let mut commit = self.shared.commit_point_changed.subscribe();
        let mut topology = self.shared.topology.subscribe();
        let metrics = &self.shared.metrics;
        metrics.majority_waiter(true);
        let result = loop {
            // Marked seen before reading, so that a change after the read
            // wakes the wait below.
            topology.borrow_and_update();
            let commit_point = *commit.borrow_and_update();
            if commit_point >= optime && commit_point.term == optime.term {
                break Ok(());
            }
            let snapshot = self.shared.snapshot();
            if snapshot.state != MemberState::Primary || snapshot.term != optime.term {
                break Err(ReplError::PrimarySteppedDown);
            }
            if self.shared.stopping.load(Ordering::SeqCst) {
                break Err(ReplError::ShutdownInProgress);
            }
            // Woken only by a commit point that reaches the write's
            // timestamp (`commit_waiters.rs`). One that reached it in
            // another term is waited out on the watch: the topology moves
            // too when this member stops being primary in the write's term.
            let waiters = &self.shared.commit_waiters;
            let mut registration = (commit_point.ts < optime.ts).then(|| waiters.register(optime.ts));
            if registration.is_some() && self.shared.commit_point_changed.borrow().ts >= optime.ts {
                // Published before the registration: no release will come.
                continue;
            }
            let commit_moved = async {
                match registration.as_mut() {
                    // A dropped sender (the registry gone at shutdown) also
                    // sends the loop round to its checks.
                    Some(registration) => Ok(drop((&mut registration.released).await)),
                    None => commit.changed().await,
                }
            };
            let timeout = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = commit_moved => if changed.is_err() { break Err(ReplError::ShutdownInProgress) },
                changed = topology.changed() => if changed.is_err() { break Err(ReplError::ShutdownInProgress) },
                () = timeout => break Err(ReplError::WriteConcernTimeout { wtimeout_ms }),
            }
        };
        metrics.majority_waiter(false);
        let timed_out = matches!(result, Err(ReplError::WriteConcernTimeout { .. }));
        metrics.record_write_concern_wait(started.elapsed(), timed_out);
        result
    }

    async fn wait_committed(&self, ts: Timestamp, deadline: Option<Instant>) -> Result<OpTime, ReplError> {
        let mut commit = self.shared.commit_point_changed.subscribe();
        let wait = commit.wait_for(|commit_point| commit_point.ts >= ts);
        let committed = async {
            match deadline {
                None => wait.await.map(|c| *c).map_err(|_| ReplError::ShutdownInProgress),
                Some(deadline) => match tokio::time::timeout_at(deadline.into(), wait).await {
                    Ok(result) => result.map(|c| *c).map_err(|_| ReplError::ShutdownInProgress),
                    Err(_) => Err(ReplError::MaxTimeMsExpired),
                },
            }
        };
        tokio::select! {
            result = committed => result,
            () = self.shared.stopped() => Err(ReplError::ShutdownInProgress),
        }
    }
}

/// The node of a member restarting with a stored configuration.
fn restart_node(shared: &Shared, config: ReplSetConfig) -> Result<Node, ReplError> {
    let me = shared.find_self(&config);
    if config.set_name != shared.options.set_name {
        return Err(ReplError::InvalidReplicaSetConfig(format!(
            "the stored configuration is of set '{}', not '{}' (--replSet)",
            config.set_name, shared.options.set_name
        )));
    }
    if let Some(host) = me.and_then(|me| config.member(me)).map(|m| m.host.clone()) {
        *shared.me_host.write() = host;
    }
    let persisted = shared.local.read_term_and_vote()?;
    let (applied, applied_wall) = shared.engine.last_applied_wall();
    let (durable, durable_wall) = shared.engine.last_durable_wall();
    let positions = OplogPositions {
        last_applied: applied,
        last_applied_wall_ms: applied_wall,
        last_durable: durable.min(applied),
        last_durable_wall_ms: durable_wall,
    };
    // A member no longer in its configuration starts REMOVED (an `_id`
    // the configuration does not hold).
    let me = me.unwrap_or(u32::MAX);
    Node::new(config, me, persisted, positions, 0, shared.now())
        .map_err(|err| ReplError::InvalidReplicaSetConfig(err.to_string()))
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        self.watcher.lock().stop();
        self.noop_writer.lock().stop();
        self.newly_added.lock().stop();
        self.shared.input(Input::Stop);
    }
}

impl Topology for ReplicaSet {
    fn is_replica_set(&self) -> bool {
        true
    }

    fn hello_fields(&self, legacy: bool, reply: &mut Document) -> i64 {
        let snapshot = self.shared.report_snapshot();
        for (key, value) in report::hello_fields(&snapshot, legacy) {
            reply.insert(key, value);
        }
        snapshot.extras.topology_version_counter
    }

    fn process_id(&self) -> Option<bson::oid::ObjectId> {
        Some(self.shared.process_id)
    }

    fn topology_counter(&self) -> i64 {
        self.shared.snapshot().topology_counter
    }

    fn not_primary_topology_counter(&self) -> Option<i64> {
        let snapshot = self.shared.snapshot();
        (!snapshot.writable_primary).then_some(snapshot.topology_counter)
    }

    fn commit_point_passed(&self, known: OpTime) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Looked at only after a short wait: under a steady load the
            // next entry comes first and carries the commit point itself,
            // with no wake-up per commit point on the way. Answering at
            // once cost every majority write an empty `getMore` round trip
            // per secondary (one connection: p50 +9%, throughput -10%), and
            // waking on each commit point a few per cent more; an idle set
            // learns it this much later.
            tokio::time::sleep(Duration::from_millis(COMMIT_POINT_NOTICE_DELAY_MS)).await;
            let mut commit = self.shared.commit_point_changed.subscribe();
            if commit.wait_for(|commit_point| *commit_point > known).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    fn topology_changed(&self, seen: i64) -> BoxFuture<'_, ()> {
        let mut changes = self.shared.topology.subscribe();
        Box::pin(async move {
            if changes.wait_for(|counter| *counter > seen).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    fn check_access(&self, access: CommandAccess, db: &str, secondary_ok: bool) -> Result<(), ReplError> {
        let snapshot = self.shared.snapshot();
        match access {
            CommandAccess::Always => Ok(()),
            CommandAccess::Write if snapshot.writable_primary => Ok(()),
            CommandAccess::Write => Err(ReplError::NotWritablePrimary),
            // `local` is this member's own: readable in any state (the
            // oplog fetcher of a member syncing from a RECOVERING one).
            CommandAccess::Read if db == "local" => Ok(()),
            CommandAccess::Read => match snapshot.state {
                MemberState::Primary => Ok(()),
                MemberState::Secondary if secondary_ok => Ok(()),
                MemberState::Secondary => Err(ReplError::NotPrimaryNoSecondaryOk),
                _ => Err(ReplError::NotPrimaryOrSecondary),
            },
        }
    }

    /// MongoDB 5.0's implicit default: `w: "majority"`, except `w: 1` in a
    /// set with arbiters whose data-bearing voters are no more than a
    /// majority of voters (PSA), where majority writes would stall as soon
    /// as one data-bearing member is down.
    fn default_write_concern(&self) -> WriteConcern {
        let snapshot = self.shared.snapshot();
        let psa_like = snapshot.config.as_ref().is_some_and(|config| {
            let arbiters = config.members.iter().filter(|m| m.arbiter_only).count();
            let data_voters = config
                .members
                .iter()
                .filter(|m| m.is_voter() && m.is_data_bearing())
                .count();
            arbiters > 0 && data_voters <= config.majority()
        });
        if psa_like {
            return WriteConcern {
                implicit: true,
                ..WriteConcern::w1()
            };
        }
        WriteConcern {
            implicit: true,
            ..WriteConcern::majority()
        }
    }

    /// A concern the set cannot satisfy (more data-bearing members than it
    /// has, an unknown tag) is not refused here: MongoDB runs the write and
    /// answers `ok: 1` with a `writeConcernError` (100 or 79), which the
    /// wait reports (`unsatisfiable`).
    fn check_write_concern(&self, _concern: &WriteConcern) -> Result<(), ReplError> {
        Ok(())
    }

    fn wait_for_write_concern<'a>(
        &'a self,
        last_write: OpTime,
        concern: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>> {
        Box::pin(async move {
            if concern.is_unacknowledged() {
                return Ok(());
            }
            self.unsatisfiable(concern)?;
            if last_write.is_null() {
                return Ok(());
            }
            self.shared
                .fail_points
                .wait_while_on(crate::fail_points::HANG_BEFORE_WAITING_FOR_WRITE_CONCERN)
                .await;
            let core = match &concern.w {
                W::Nodes(0) | W::Nodes(1) => {
                    if concern.journal == Some(true) {
                        self.shared.engine.wait_durable_async(last_write.ts).await?;
                    }
                    return Ok(());
                }
                W::Nodes(n) => CoreWriteConcern {
                    w: CoreW::Nodes(*n),
                    journal: concern.journal == Some(true),
                    wtimeout_ms: Some(concern.wtimeout_ms.max(0) as u64),
                },
                W::Majority => {
                    let snapshot = self.shared.snapshot();
                    // Only a commit point of the write's own term proves it
                    // committed: one of a later term sorts after every entry
                    // of an earlier one, rolled back or not.
                    if snapshot.commit_point >= last_write && snapshot.commit_point.term == last_write.term {
                        return Ok(());
                    }
                    if !snapshot.writable_primary {
                        // Not a write of ours (a failed command, a read):
                        // majority means the commit point reaching it.
                        return self.wait_committed_for_concern(last_write, concern).await;
                    }
                    // Majority writes are journaled on a majority, which the
                    // commit point says alone: it counts durable positions
                    // only, this member's once its fsync is done. Ask for
                    // that fsync now rather than at the group commit's
                    // interval, and wait for the commit point only (waiting
                    // for the local fsync first woke every writer at every
                    // fsync, and cost a hop when it finished last).
                    self.shared.engine.request_durable(last_write.ts, true)?;
                    return self.wait_majority_as_primary(last_write, concern).await;
                }
                W::Tag(_) => unreachable!("unsatisfiable() refused every tag"),
            };
            let wait = self.ask_stepping(|reply| Input::WaitWriteConcern {
                optime: last_write,
                concern: core,
                reply,
            });
            if concern.wtimeout_ms >= 0 {
                return wait.await?;
            }
            // A negative wtimeout: what holds now, or a timeout.
            match tokio::time::timeout(Duration::ZERO, wait).await {
                Ok(result) => result?,
                Err(_) => Err(ReplError::WriteConcernTimeout { wtimeout_ms: concern.wtimeout_ms }),
            }
        })
    }

    fn read_point<'a>(
        &'a self,
        concern: &'a ReadConcernArgs,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>> {
        Box::pin(async move {
            self.check_not_past_cluster_time(concern)?;
            match concern.effective_level() {
                ReadConcernLevel::Local | ReadConcernLevel::Available => {
                    if let Some(ts) = concern.after_cluster_time {
                        self.wait_applied(ts, deadline).await?;
                    }
                    Ok(ReadAt::Latest)
                }
                ReadConcernLevel::Majority => {
                    let commit_point = match concern.after_cluster_time {
                        Some(ts) => {
                            self.wait_applied(ts, deadline).await?;
                            self.wait_committed(ts, deadline).await?
                        }
                        None => self.shared.snapshot().commit_point,
                    };
                    if commit_point.is_null() {
                        return Err(ReplError::ReadConcernMajorityNotAvailableYet);
                    }
                    self.shared
                        .fail_points
                        .wait_while_on(crate::fail_points::HANG_AFTER_MAJORITY_READ_POINT)
                        .await;
                    Ok(ReadAt::At(commit_point.ts))
                }
                ReadConcernLevel::Linearizable => {
                    if !self.shared.snapshot().writable_primary {
                        return Err(ReplError::NotWritablePrimary);
                    }
                    Ok(ReadAt::Latest)
                }
                ReadConcernLevel::Snapshot => {
                    if let Some(ts) = concern.after_cluster_time {
                        self.wait_applied(ts, deadline).await?;
                    }
                    match concern.at_cluster_time {
                        // A snapshot read is a majority read at a chosen
                        // time: MongoDB waits until the commit point reaches
                        // it (else maxTimeMS). Read once applied only, a
                        // write not yet on a majority, later rolled back,
                        // was returned.
                        Some(ts) => {
                            self.wait_applied(ts, deadline).await?;
                            self.wait_committed(ts, deadline).await?;
                            let oldest = self.shared.engine.oldest_snapshot_timestamp();
                            if ts < oldest {
                                return Err(ReplError::SnapshotTooOld(format!(
                                    "Read timestamp {ts} is older than the oldest available timestamp {oldest}"
                                )));
                            }
                            Ok(ReadAt::At(ts))
                        }
                        // MongoDB reads the most recent majority-committed
                        // snapshot, and the reply names it (`atClusterTime`)
                        // for the session's later reads.
                        None => {
                            let commit_point = match concern.after_cluster_time {
                                Some(ts) => self.wait_committed(ts, deadline).await?,
                                None => self.shared.snapshot().commit_point,
                            };
                            if commit_point.is_null() {
                                return Err(ReplError::ReadConcernMajorityNotAvailableYet);
                            }
                            Ok(ReadAt::At(commit_point.ts))
                        }
                    }
                }
            }
        })
    }

    fn linearizable_barrier(&self, deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>> {
        Box::pin(async move {
            let op = write_note(&self.shared, doc! {"msg": "linearizable read"}).await?;
            self.wait_majority(op, deadline).await
        })
    }

    fn observe_cluster_time(&self, cluster_time: Timestamp) -> Result<(), ReplError> {
        self.shared
            .engine
            .advance_cluster_time(cluster_time)
            .map_err(|err| ReplError::ClusterTimeDrift(err.to_string()))
    }

    fn cluster_time(&self) -> Timestamp {
        self.shared.engine.cluster_time()
    }

    fn last_applied(&self) -> OpTime {
        self.shared.engine.last_applied()
    }

    fn oplog_query_metadata(&self) -> Option<Document> {
        let snapshot = self.shared.snapshot();
        let config = snapshot.config.as_ref()?;
        let index_of = |id: Option<MemberId>| id.and_then(|id| config.index_of(id)).map_or(-1, |i| i as i32);
        let commit = optime_document(snapshot.commit_point);
        let commit_wall = bson::DateTime::from_millis(commit_wall_ms(&self.shared, snapshot.commit_point));
        Some(doc! {
            "$replData": {
                "term": snapshot.term,
                "lastOpCommitted": commit.clone(),
                "lastCommittedWall": commit_wall,
                "lastOpVisible": optime_document(self.shared.engine.last_applied()),
                "configVersion": config.version,
                "configTerm": config.term,
                "replicaSetId": bson::oid::ObjectId::from_bytes([0; 12]),
                "primaryIndex": index_of(snapshot.primary),
                "syncSourceIndex": index_of(snapshot.sync_source),
            },
            "$oplogQueryData": {
                "lastOpCommitted": commit,
                "lastOpApplied": optime_document(self.shared.engine.last_applied()),
                "rbid": self.shared.rbid(),
                "primaryIndex": index_of(snapshot.primary),
                "syncSourceIndex": index_of(snapshot.sync_source),
                "oplogComplete": true,
            },
        })
    }

    fn run_command<'a>(&'a self, name: &'a str, body: &'a Document) -> BoxFuture<'a, Result<Document, ReplError>> {
        Box::pin(crate::commands::run(self, name, body))
    }

    fn run_on_primary<'a>(
        &'a self,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Document, ReplError>> {
        Box::pin(async move {
            let snapshot = self.shared.snapshot();
            let primary = match (snapshot.state, snapshot.primary_host()) {
                (MemberState::Secondary, Some(host)) => host.to_owned(),
                _ => return Err(ReplError::NotWritablePrimary),
            };
            match self.shared.network.run(&primary, db, body, timeout).await {
                Ok(reply) => Ok(reply),
                // The primary's own refusal, as it gave it.
                Err(NetError::Command { reply, .. }) => Ok(reply),
                Err(err) => Err(ReplError::coded(
                    6, // HostUnreachable
                    format!("could not run the command on the primary {primary}: {err}"),
                )),
            }
        })
    }

    fn server_status(&self) -> Option<Document> {
        let mut section = report::server_status_repl(&self.shared.report_snapshot());
        section.insert("rollback", self.shared.rollback.server_status_document());
        Some(section)
    }

    fn configure_fail_point(&self, body: &Document) -> Option<Result<Document, ReplError>> {
        // The rollback's step hang keeps its own state (the step to stop before).
        if body.get_str("configureFailPoint").ok() == Some("rollbackHangBeforeStep") {
            return Some(crate::rollback::configure_fail_point(&self.shared, body));
        }
        self.shared.fail_points.configure(body)
    }

    fn prepare_shutdown(&self, force: bool, timeout_secs: Option<u64>) -> BoxFuture<'_, Result<(), ReplError>> {
        Box::pin(async move {
            let snapshot = self.shared.snapshot();
            let Some(config) = snapshot.config.as_ref().filter(|_| snapshot.writable_primary && !force) else {
                return Ok(());
            };
            // A set where nobody else could take over shuts down at once.
            if !config
                .members
                .iter()
                .any(|m| Some(m.id) != snapshot.me && m.is_electable())
            {
                return Ok(());
            }
            let catch_up_ms = timeout_secs.unwrap_or(SHUTDOWN_CATCH_UP_SECS_DEFAULT) * 1000;
            let request = slipstream_consensus::StepDownRequest {
                step_down_ms: catch_up_ms.max(SHUTDOWN_STEP_DOWN_MS),
                secondary_catch_up_period_ms: catch_up_ms,
                force: false,
            };
            let event = slipstream_consensus::Event::StepDown(request);
            match self.ask(|reply| Input::Command { event, reply }).await? {
                Err(ReplError::NotWritablePrimary) => Ok(()),
                other => other,
            }
        })
    }

    fn server_status_sections(&self) -> Vec<(&'static str, Document)> {
        let metrics = &self.shared.metrics;
        let mut repl = report::metrics_repl_document(metrics);
        repl.insert("rollback", self.shared.rollback.metrics_document());
        repl.insert("tooStaleResyncs", self.shared.resync.count() as i64);
        vec![
            (
                "metrics",
                doc! {
                    "repl": repl,
                    "getLastError": report::get_last_error_document(metrics),
                },
            ),
            ("electionMetrics", report::election_metrics_document(metrics)),
            ("oplog", crate::oplog_window::window_document(&self.shared.engine)),
        ]
    }
}

/// How long after its commit point passes what an oplog fetcher knows an
/// awaitData `getMore` answers without new entries (`commit_point_passed`).
pub const COMMIT_POINT_NOTICE_DELAY_MS: u64 = 2;

/// MongoDB's default `timeoutSecs` of `shutdown` on a primary.
pub const SHUTDOWN_CATCH_UP_SECS_DEFAULT: u64 = 10;
/// How long a primary shutting down stays out of elections (it is going away).
pub const SHUTDOWN_STEP_DOWN_MS: u64 = 60_000;

/// The wall date of the commit point's entry (0 when unknown).
pub fn commit_wall_ms(shared: &Shared, commit_point: OpTime) -> i64 {
    if commit_point.is_null() {
        return 0;
    }
    let (applied, applied_wall) = shared.engine.last_applied_wall();
    if applied == commit_point {
        return applied_wall;
    }
    // The commit point is usually some member's durable position, whose
    // date the node keeps: no oplog read on the fetchers' hot path.
    let snapshot = shared.snapshot();
    let known = snapshot
        .members
        .iter()
        .flat_map(|m| [(m.durable, m.durable_wall_ms), (m.applied, m.applied_wall_ms)]);
    if let Some((_, wall)) = known.into_iter().find(|(op, wall)| *op == commit_point && *wall > 0) {
        return wall;
    }
    match shared.engine.oplog_entry(commit_point.ts) {
        Ok(Some(entry)) => entry.get_datetime("wall").map(|d| d.timestamp_millis()).unwrap_or(0),
        _ => 0,
    }
}

/// Used by `bson_timestamp` users in this module's siblings.
pub fn ts_bson(ts: Timestamp) -> bson::Timestamp {
    bson_timestamp(ts)
}

/// How long a reconfig waits for the current configuration to commit
/// when the command names no `maxTimeMS`.
pub const RECONFIG_COMMIT_WAIT_MS_DEFAULT: u64 = 30_000;
/// How often that wait looks again.
pub const RECONFIG_COMMIT_POLL_MS: u64 = 50;

pub fn duration_ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
