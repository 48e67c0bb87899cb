//! State shared by every connection of a node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bson::oid::ObjectId;
use slipstream_repl::{MemberBlocklist, Topology};
use slipstream_storage::Engine;
use tokio::sync::watch;

use crate::cursor::CursorManager;
use crate::failpoint::FailPoints;
use crate::log::Log;
use crate::metrics::Metrics;
use crate::sessions::SessionCatalog;

/// The most connections a node serves at once; further clients wait in
/// the accept queue until one closes (MongoDB's `net.maxIncomingConnections`).
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;

/// The node's settings from the command line (read-only after start).
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub port: u16,
    pub bind_ip: String,
    pub dbpath: PathBuf,
    pub journal_commit_interval_ms: u64,
    pub oplog_size_mb: u64,
    /// `--oplogMinRetentionHours` (0: none).
    pub oplog_min_retention_hours: f64,
    /// Test-only commands (fail points) exist only when this is set.
    pub enable_test_commands: bool,
    pub logpath: Option<PathBuf>,
    pub max_connections: usize,
    /// `--cache-size-mb`: what bounds the resident set (`memory.rs`).
    pub cache_size_mb: u64,
    /// The process's arguments, for `getCmdLineOpts`.
    pub argv: Vec<String>,
}

impl ServerOptions {
    pub fn new(dbpath: impl Into<PathBuf>, port: u16) -> Self {
        ServerOptions {
            port,
            bind_ip: "127.0.0.1".into(),
            dbpath: dbpath.into(),
            journal_commit_interval_ms: 100,
            oplog_size_mb: 1024,
            oplog_min_retention_hours: 0.0,
            enable_test_commands: false,
            logpath: None,
            max_connections: MAX_CONNECTIONS_DEFAULT,
            cache_size_mb: 1024,
            argv: Vec::new(),
        }
    }
}

/// The node-wide shutdown signal: set once (by `shutdown`, SIGTERM or
/// SIGINT), observed by the listener and every connection's read loop.
pub struct ShutdownSignal {
    sender: watch::Sender<bool>,
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        ShutdownSignal { sender: watch::channel(false).0 }
    }
}

impl ShutdownSignal {
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.sender.borrow()
    }

    /// Resolves once the signal is set (at once if it already is).
    pub async fn wait(&self) {
        let mut receiver = self.sender.subscribe();
        // The sender lives as long as `self`, so `wait_for` only ends when
        // the value turns true.
        let _ = receiver.wait_for(|triggered| *triggered).await;
    }
}

/// Everything a command may touch beyond its own connection. Every field
/// is either read-only after start or locks internally.
pub struct ServerState {
    /// The storage engine (shared; the engine locks internally).
    pub engine: Arc<Engine>,
    /// Open cursors (locks internally).
    pub cursors: CursorManager,
    /// Logical sessions, checked out by one command at a time (locks
    /// internally).
    pub sessions: SessionCatalog,
    /// Read-only after start.
    pub options: ServerOptions,
    /// Atomics; any task may count.
    pub metrics: Metrics,
    /// Structured log and its ring (locks internally).
    pub log: Log,
    pub shutdown: ShutdownSignal,
    /// Test-only fail points; consulted only with `enable_test_commands`.
    pub fail_points: FailPoints,
    /// Replication as the server sees it: the one handle that knows
    /// whether this node is a standalone or a replica set member (role,
    /// concerns, `hello` fields, reply metadata, replSet commands). Set at
    /// start; the topology locks internally.
    pub topology: Arc<dyn Topology>,
    /// Members this node must not talk to (test-only `blockMembers` fault
    /// hook), shared with the replication network; locks internally.
    pub member_blocklist: Arc<MemberBlocklist>,
    /// `topologyVersion.processId`: new on every start so that monitors
    /// notice a restart (read-only).
    pub process_id: ObjectId,
    /// When the node started (read-only), for `uptime`.
    pub started_at: Instant,
    pub host_name: String,
    /// Parameters `setParameter` changes at runtime (atomics).
    pub parameters: crate::parameters::Parameters,
    /// Running commands, for `currentOp` and `killOp` (locks internally).
    pub operations: crate::operations::OperationRegistry,
    /// Profiling levels per database, for `profile` (locks internally).
    pub profiler: crate::profiler::Profiler,
    /// Client writes wait here while storage memory is far past its bound
    /// (atomics).
    pub flow_control: crate::flow_control::FlowControl,
    /// The budget of large requests in flight, sized from the cache
    /// (`admission.rs`).
    pub admission: Arc<crate::admission::RequestAdmission>,
}

impl ServerState {
    pub fn new(
        engine: Arc<Engine>,
        topology: Arc<dyn Topology>,
        member_blocklist: Arc<MemberBlocklist>,
        options: ServerOptions,
        log: Log,
    ) -> Self {
        let limits = crate::memory::MemoryLimits::for_cache(options.cache_size_mb * 1024 * 1024);
        let process_id = topology.process_id().unwrap_or_else(ObjectId::new);
        ServerState {
            admission: crate::admission::RequestAdmission::new(limits.request_bytes_max),
            engine,
            topology,
            member_blocklist,
            cursors: CursorManager::default(),
            sessions: SessionCatalog::default(),
            options,
            metrics: Metrics::default(),
            log,
            shutdown: ShutdownSignal::default(),
            fail_points: FailPoints::default(),
            process_id,
            started_at: Instant::now(),
            host_name: host_name(),
            parameters: crate::parameters::Parameters::default(),
            operations: crate::operations::OperationRegistry::default(),
            profiler: crate::profiler::Profiler::default(),
            flow_control: crate::flow_control::FlowControl::default(),
        }
    }

    /// `host:port` as MongoDB reports it in `serverStatus.host` and `me`.
    pub fn host_and_port(&self) -> String {
        format!("{}:{}", self.host_name, self.options.port)
    }
}

/// The machine's host name (from the kernel), or "localhost".
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
