//! `slipstream serve`: open the engine (which takes the data directory's
//! lock and recovers), listen, serve until SIGTERM/SIGINT or `shutdown`,
//! then stop accepting, let in-flight requests finish, and shut the engine
//! down with a final checkpoint.
//!
//! Everything the process says goes to the node's log (`--logpath`, else
//! stdout), as MongoDB's does: stderr carries only the errors that stop a
//! start before that log is open.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use slipstream_server::log::{Log, Severity};
use parking_lot::RwLock;
use slipstream_repl::{MemberBlocklist, ReplicaSet, ReplicaSetOptions, Standalone, TcpNetwork, Topology};
use slipstream_server::{ServerOptions, ServerState};
use slipstream_storage::io::StdIo;
use slipstream_storage::{Engine, EngineOptions, StorageError};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::{log_layer, ServeArgs};

/// MongoDB's exit code when the data directory is in use by another process.
const EXIT_DBPATH_IN_USE: u8 = 100;
/// MongoDB's exit code when the port cannot be bound.
const EXIT_NETWORK: u8 = 48;

/// Most async workers `--worker-threads` may ask for.
pub const WORKER_THREADS_MAX: u16 = 256;

/// MongoDB's default `minSnapshotHistoryWindowInSeconds`.
const SNAPSHOT_HISTORY_WINDOW_SECS_DEFAULT: u32 = 300;

/// What bounds the storage engine's memory: `--cache-size-mb` and the
/// snapshot window (kept in memory within the cache's history quarter).
struct Memory {
    cache_size_mb: u64,
    snapshot_window_secs: u32,
}

pub fn run(args: ServeArgs) -> ExitCode {
    let mut enable_test_commands = args.enable_test_commands;
    let mut snapshot_window_secs = SNAPSHOT_HISTORY_WINDOW_SECS_DEFAULT;
    for parameter in &args.set_parameter {
        match parameter.split_once('=') {
            Some(("enableTestCommands", value)) => enable_test_commands = matches!(value, "1" | "true"),
            Some(("numInitialSyncAttempts", value)) => {
                let set = value
                    .parse::<i64>()
                    .ok()
                    .and_then(slipstream_repl::initial_sync::progress::set_attempts_max);
                if set.is_none() {
                    eprintln!("error: --setParameter numInitialSyncAttempts must be a positive integer, not '{value}'");
                    return ExitCode::from(2);
                }
            }
            Some(("initialSyncMethod", value)) => {
                if slipstream_repl::initial_sync::checkpoint_copy::set_method(value).is_none() {
                    eprintln!("error: --setParameter initialSyncMethod must be fileCopyBased or logical, not '{value}'");
                    return ExitCode::from(2);
                }
            }
            Some(("minSnapshotHistoryWindowInSeconds", value)) => match value.parse() {
                Ok(secs) => snapshot_window_secs = secs,
                Err(_) => {
                    eprintln!("error: --setParameter minSnapshotHistoryWindowInSeconds takes seconds, not '{value}'");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!(
                    "error: unsupported --setParameter '{parameter}' \
                     (known: enableTestCommands, numInitialSyncAttempts, initialSyncMethod, \
                     minSnapshotHistoryWindowInSeconds)"
                );
                return ExitCode::from(2);
            }
        }
    }
    let log = match Log::open(args.logpath.as_deref()) {
        Ok(log) => log,
        Err(err) => {
            let path = args.logpath.as_deref().map(|path| path.display().to_string()).unwrap_or_default();
            eprintln!("error: cannot open --logpath {path}: {err}");
            return ExitCode::from(1);
        }
    };
    log_layer::install(&log, args.verbose);
    crate::allocator::configure();
    log_panics(log.clone());
    let options = ServerOptions {
        port: args.port,
        bind_ip: args.bind_ip.clone(),
        dbpath: args.dbpath.clone(),
        journal_commit_interval_ms: args.journal_commit_interval_ms,
        oplog_size_mb: args.oplog_size_mb,
        oplog_min_retention_hours: args.oplog_min_retention_hours,
        enable_test_commands,
        logpath: args.logpath.clone(),
        max_connections: args.max_connections.max(1),
        cache_size_mb: args.cache_size_mb,
        argv: std::env::args().collect(),
    };
    log.info(
        "CONTROL",
        4615611,
        "initandlisten",
        "Slipstream starting",
        json!({"pid": std::process::id(), "port": options.port, "dbPath": options.dbpath.display().to_string(),
               "version": env!("CARGO_PKG_VERSION"), "mongodbVersion": slipstream_server::commands::admin::MONGODB_VERSION}),
    );
    if enable_test_commands {
        log.startup_warning(
            22120,
            "Test commands are enabled: do not use this node in production",
            serde_json::Value::Null,
        );
    }
    // Commands recurse as deep as the nesting limits allow; see THREAD_STACK_BYTES.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .thread_stack_size(slipstream_server::THREAD_STACK_BYTES)
        .enable_all();
    if args.worker_threads > 0 {
        builder.worker_threads(usize::from(args.worker_threads));
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(err) => {
            log.error(
                "CONTROL",
                20573,
                "initandlisten",
                "cannot start the async runtime",
                json!({"error": err.to_string()}),
            );
            return ExitCode::from(1);
        }
    };
    log.info(
        "CONTROL",
        crate::log_layer::derived_id("slipstream::serve", "async runtime started"),
        "initandlisten",
        "async runtime started",
        json!({"workerThreads": runtime.metrics().num_workers()}),
    );
    // An empty set name is no set, as in MongoDB (`usingReplSets()` tests
    // for a non-empty name): a standalone, not a member nobody could
    // initiate.
    let repl_set = args.repl_set.clone().filter(|name| !name.is_empty());
    if args.metrics_port.is_some() && repl_set.is_none() {
        log.error("CONTROL", 20574, "initandlisten", "--metrics-port requires --replSet", serde_json::Value::Null);
        return ExitCode::from(2);
    }
    let memory = Memory { cache_size_mb: args.cache_size_mb, snapshot_window_secs };
    runtime.block_on(serve(options, args.accept_journal_loss, memory, repl_set, args.metrics_port, log))
}

async fn serve(
    options: ServerOptions,
    accept_journal_loss: bool,
    memory: Memory,
    repl_set: Option<String>,
    metrics_port: Option<u16>,
    log: Log,
) -> ExitCode {
    // Installed before anything else: a SIGTERM during recovery or right
    // after the port opens is then held for the watcher below (a clean
    // shutdown) instead of killing the process with the default action.
    let signals = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(terminate), Ok(interrupt)) => Some((terminate, interrupt)),
        _ => {
            log.error("CONTROL", 23377, "initandlisten", "cannot install signal handlers", serde_json::Value::Null);
            None
        }
    };
    if let Err(err) = slipstream_storage::lock_file::create_data_directory(&*StdIo::new(), &options.dbpath) {
        log.error(
            "STORAGE",
            20557,
            "initandlisten",
            "cannot create the data directory",
            json!({"error": err.to_string()}),
        );
        return ExitCode::from(1);
    }
    let mut engine_options = EngineOptions::new(options.dbpath.clone());
    engine_options.journal_commit_interval_ms = options.journal_commit_interval_ms;
    engine_options.oplog_size_bytes = options.oplog_size_mb * 1024 * 1024;
    engine_options.oplog_min_retention_hours = options.oplog_min_retention_hours;
    engine_options.accept_journal_loss = accept_journal_loss;
    engine_options.replicated = repl_set.is_some();
    // One place sizes everything that follows the cache (`memory.rs`); the
    // server sizes its request budget from the same `cache_size_mb`.
    let limits = slipstream_server::memory::MemoryLimits::for_cache(memory.cache_size_mb * 1024 * 1024);
    engine_options.history_bytes_max = limits.history_bytes_max;
    engine_options.kv_cache_bytes = usize::try_from(limits.kv_cache_bytes).unwrap_or(usize::MAX);
    engine_options.journal_recent_cache_bytes = limits.journal_recent_bytes_max as usize;
    engine_options.journal_pending_bytes = limits.journal_pending_bytes_max as usize;
    engine_options.snapshot_history_window_secs = memory.snapshot_window_secs;
    // The span names the context of recovery's lines, as MongoDB's
    // startup thread does.
    let startup = tracing::info_span!("initandlisten");
    let opened = tokio::task::spawn_blocking(move || {
        let _entered = startup.enter();
        Engine::open(engine_options).map_err(Box::new)
    })
    .await;
    let engine = match opened {
        Ok(Ok(engine)) => engine,
        Ok(Err(err)) => return refuse_start(&log, &options, *err),
        Err(join) => {
            log.error(
                "STORAGE",
                20557,
                "initandlisten",
                "opening the storage engine panicked",
                json!({"error": join.to_string()}),
            );
            return ExitCode::from(1);
        }
    };
    let stats = engine.stats();
    log.info(
        "STORAGE",
        22430,
        "initandlisten",
        "Recovery complete",
        json!({"lastApplied": engine.last_applied().ts.to_string(), "checkpointTimestamp": engine.checkpoint_timestamp().to_string(),
               "oplogFirst": stats.oplog_first.to_string(), "oplogLast": stats.oplog_last.to_string()}),
    );
    let listeners = match slipstream_server::listener::bind(&options.bind_ip, options.port).await {
        Ok(listeners) => listeners,
        Err(err) => {
            log.error(
                "NETWORK",
                20568,
                "initandlisten",
                "Error setting up listener",
                json!({"error": err.to_string()}),
            );
            shutdown_engine(&log, &engine);
            return ExitCode::from(EXIT_NETWORK);
        }
    };
    // A node without --replSet is a standalone; a member's replication
    // network shares the member blocklist with the server.
    let member_blocklist = Arc::new(MemberBlocklist::default());
    let (topology, replica_set): (Arc<dyn Topology>, Option<Arc<ReplicaSet>>) = match &repl_set {
        None => (Arc::new(Standalone::new(engine.clone())), None),
        Some(set_name) => match start_replica_set(&engine, &options, set_name, &member_blocklist) {
            Ok(set) => (set.clone(), Some(set)),
            Err(err) => {
                log.error("REPL", 21700, "initandlisten", "cannot start replication", json!({"error": err.to_string()}));
                shutdown_engine(&log, &engine);
                return ExitCode::from(1);
            }
        },
    };
    let metrics_endpoint = match (&replica_set, metrics_port) {
        (Some(set), Some(port)) => match serve_metrics(set, &options.bind_ip, port).await {
            Ok(endpoint) => Some(endpoint),
            Err(err) => {
                log.error("NETWORK", 20568, "initandlisten", "cannot listen on --metrics-port", json!({"error": err.to_string()}));
                set.stop();
                shutdown_engine(&log, &engine);
                return ExitCode::from(EXIT_NETWORK);
            }
        },
        _ => None,
    };
    let state = Arc::new(ServerState::new(engine.clone(), topology, member_blocklist, options, log));
    let signals = tokio::spawn(watch_signals(state.clone(), signals));
    // Replication stops as soon as the shutdown begins, before the listener
    // waits for in-flight requests: a write waiting for its write concern,
    // or a read for its read concern, then answers ShutdownInProgress (91)
    // instead of holding its connection until the grace period ends and
    // being cut off without a reply.
    let early_stop = replica_set.clone().map(|set| {
        let state = state.clone();
        tokio::spawn(async move {
            state.shutdown.wait().await;
            let _ = tokio::task::spawn_blocking(move || set.stop()).await;
        })
    });
    slipstream_server::serve(state.clone(), listeners).await;
    signals.abort();
    if let Some(early_stop) = early_stop {
        let _ = early_stop.await;
    }
    if let Some(endpoint) = metrics_endpoint {
        endpoint.abort();
    }
    if let Some(set) = replica_set {
        set.stop();
    }
    let ok = shutdown_engine(&state.log, &engine);
    state.log.info("CONTROL", 20565, "initandlisten", "Now exiting", json!({"clean": ok}));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `--replSet`: the member's network (the internal client, refusing
/// members the fault hook blocks) and its coordinator.
fn start_replica_set(
    engine: &Arc<Engine>,
    options: &ServerOptions,
    set_name: &str,
    blocklist: &Arc<MemberBlocklist>,
) -> Result<Arc<ReplicaSet>, slipstream_repl::ReplError> {
    let me_host = Arc::new(RwLock::new(format!("localhost:{}", options.port)));
    let network = Arc::new(TcpNetwork::new(me_host.clone(), blocklist.clone()));
    let mut host_names: Vec<String> = options.bind_ip.split(',').map(|ip| ip.trim().to_owned()).collect();
    if let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        host_names.push(name.trim().to_owned());
    }
    let set_options = ReplicaSetOptions { set_name: set_name.to_owned(), port: options.port, host_names };
    let set = ReplicaSet::start(engine.clone(), network, me_host, set_options, tokio::runtime::Handle::current())?;
    Ok(Arc::new(set))
}

/// `--metrics-port`: Prometheus text of the member, on the first bind address.
async fn serve_metrics(
    set: &Arc<ReplicaSet>,
    bind_ip: &str,
    port: u16,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let address = bind_ip.split(',').next().unwrap_or("127.0.0.1").trim();
    let listener = tokio::net::TcpListener::bind((address, port)).await?;
    let shared = set.shared().clone();
    let render: slipstream_repl::report::metrics_http::Render =
        Arc::new(move || slipstream_repl::report::prometheus_text(&shared.report_snapshot(), &shared.metrics));
    Ok(slipstream_repl::report::metrics_http::serve(listener, render))
}

fn refuse_start(log: &Log, options: &ServerOptions, err: StorageError) -> ExitCode {
    let locked = matches!(err, StorageError::DataDirectoryLocked(_));
    log.error(
        "STORAGE",
        20557,
        "initandlisten",
        "Cannot open the data directory",
        json!({"error": err.to_string(), "dbPath": options.dbpath.display().to_string()}),
    );
    if locked {
        ExitCode::from(EXIT_DBPATH_IN_USE)
    } else if matches!(err, StorageError::JournalLost(_)) {
        log.error(
            "STORAGE",
            20557,
            "initandlisten",
            "The journal no longer reaches the checkpoint: writes acknowledged as durable are gone. \
             To start from the checkpoint and give them up, restart with --accept-journal-loss.",
            json!({"dbPath": options.dbpath.display().to_string()}),
        );
        ExitCode::from(1)
    } else {
        ExitCode::from(1)
    }
}

fn shutdown_engine(log: &Log, engine: &Arc<Engine>) -> bool {
    let span = tracing::info_span!("initandlisten");
    let _entered = span.enter();
    match engine.shutdown() {
        Ok(()) => {
            log.info(
                "STORAGE",
                22261,
                "initandlisten",
                "Storage engine shut down (final checkpoint written)",
                serde_json::Value::Null,
            );
            true
        }
        Err(err) => {
            log.error(
                "STORAGE",
                22262,
                "initandlisten",
                "Storage engine shutdown failed",
                json!({"error": err.to_string()}),
            );
            false
        }
    }
}

/// Sends panics to the log as fatal lines instead of to stderr. A panic in
/// a connection's task does not end the process (tokio catches it), so
/// this is the only record of it.
fn log_panics(log: Log) {
    std::panic::set_hook(Box::new(move |info| {
        let message = match info.payload().downcast_ref::<&str>() {
            Some(text) => (*text).to_owned(),
            None => info.payload().downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        let location = info.location().map(|at| format!("{}:{}", at.file(), at.line())).unwrap_or_default();
        let thread = std::thread::current();
        let attr = json!({"message": message, "location": location});
        log.write(Severity::Fatal, "CONTROL", 23079, thread.name().unwrap_or("-"), "Panic", attr);
    }));
}

/// Turns SIGTERM or SIGINT (installed at startup; None if they could not
/// be) into the node's shutdown signal.
async fn watch_signals(state: Arc<ServerState>, signals: Option<(Signal, Signal)>) {
    let Some((mut terminate, mut interrupt)) = signals else {
        return;
    };
    let name = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    state.log.info("CONTROL", 23377, "signalProcessingThread", "Received signal", json!({"signal": name}));
    // A primary hands over first, as MongoDB's does on a signal: it waits
    // (up to the `shutdown` command's default) for an electable secondary
    // to catch up and steps down. The shutdown goes on whether or not it
    // could; a second signal ends the wait.
    let handover = state.topology.prepare_shutdown(false, None);
    tokio::select! {
        result = handover => if let Err(err) = result {
            let attr = json!({"error": err.to_string()});
            state.log.warning("REPL", 4719000, "signalProcessingThread", "Error stepping down during shutdown", attr);
        },
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    state.shutdown.trigger();
}
