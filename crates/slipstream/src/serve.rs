//! `slipstream serve`: open the engine (which takes the data directory's
//! lock and recovers), listen, serve until SIGTERM/SIGINT or `shutdown`,
//! then stop accepting, let in-flight requests finish, and shut the engine
//! down with a final checkpoint.

use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use slipstream_server::log::Log;
use slipstream_server::{ServerOptions, ServerState};
use slipstream_storage::{Engine, EngineOptions, StorageError};
use tokio::signal::unix::{signal, SignalKind};

use crate::ServeArgs;

/// MongoDB's exit code when the data directory is in use by another process.
const EXIT_DBPATH_IN_USE: u8 = 100;
/// MongoDB's exit code when the port cannot be bound.
const EXIT_NETWORK: u8 = 48;

pub fn run(args: ServeArgs) -> ExitCode {
    let mut enable_test_commands = args.enable_test_commands;
    for parameter in &args.set_parameter {
        match parameter.split_once('=') {
            Some(("enableTestCommands", value)) => enable_test_commands = matches!(value, "1" | "true"),
            _ => {
                eprintln!("error: unsupported --setParameter '{parameter}' (only enableTestCommands=1 is known)");
                return ExitCode::from(2);
            }
        }
    }
    let log = match Log::open(args.logpath.as_deref()) {
        Ok(log) => log,
        Err(err) => {
            eprintln!("error: cannot open --logpath {:?}: {err}", args.logpath);
            return ExitCode::from(1);
        }
    };
    let _ = tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .try_init();
    let options = ServerOptions {
        port: args.port,
        bind_ip: args.bind_ip.clone(),
        dbpath: args.dbpath.clone(),
        journal_commit_interval_ms: args.journal_commit_interval_ms,
        oplog_size_mb: args.oplog_size_mb,
        enable_test_commands,
        logpath: args.logpath.clone(),
        max_connections: args.max_connections.max(1),
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
        log.startup_warning(22120, "Test commands are enabled: do not use this node in production", serde_json::Value::Null);
    }
    // Commands recurse as deep as the nesting limits allow; see THREAD_STACK_BYTES.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(slipstream_server::THREAD_STACK_BYTES)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(serve(options, log))
}

async fn serve(options: ServerOptions, log: Log) -> ExitCode {
    if let Err(err) = std::fs::create_dir_all(&options.dbpath) {
        log.error("STORAGE", 20557, "initandlisten", "cannot create the data directory", json!({"error": err.to_string()}));
        eprintln!("error: cannot create --dbpath {}: {err}", options.dbpath.display());
        return ExitCode::from(1);
    }
    let mut engine_options = EngineOptions::new(options.dbpath.clone());
    engine_options.journal_commit_interval_ms = options.journal_commit_interval_ms;
    engine_options.oplog_size_bytes = options.oplog_size_mb * 1024 * 1024;
    let opened = tokio::task::spawn_blocking(move || Engine::open(engine_options)).await;
    let engine = match opened {
        Ok(Ok(engine)) => engine,
        Ok(Err(err)) => return refuse_start(&log, &options, err),
        Err(join) => {
            eprintln!("error: opening the storage engine panicked: {join}");
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
            log.error("NETWORK", 20568, "initandlisten", "Error setting up listener", json!({"error": err.to_string()}));
            eprintln!("error: cannot listen on {}:{}: {err}", options.bind_ip, options.port);
            shutdown_engine(&log, &engine);
            return ExitCode::from(EXIT_NETWORK);
        }
    };
    let state = Arc::new(ServerState::new(engine.clone(), options, log));
    let signals = tokio::spawn(watch_signals(state.clone()));
    slipstream_server::serve(state.clone(), listeners).await;
    signals.abort();
    let ok = shutdown_engine(&state.log, &engine);
    state.log.info("CONTROL", 20565, "initandlisten", "Now exiting", json!({"clean": ok}));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn refuse_start(log: &Log, options: &ServerOptions, err: StorageError) -> ExitCode {
    let locked = matches!(err, StorageError::DataDirectoryLocked(_));
    log.error("STORAGE", 20557, "initandlisten", "Cannot open the data directory", json!({"error": err.to_string(), "dbPath": options.dbpath.display().to_string()}));
    if locked {
        eprintln!(
            "error: the data directory {} is in use by another slipstream process: {err}",
            options.dbpath.display()
        );
        ExitCode::from(EXIT_DBPATH_IN_USE)
    } else {
        eprintln!("error: cannot open the data directory {}: {err}", options.dbpath.display());
        ExitCode::from(1)
    }
}

fn shutdown_engine(log: &Log, engine: &Arc<Engine>) -> bool {
    match engine.shutdown() {
        Ok(()) => {
            log.info("STORAGE", 22261, "initandlisten", "Storage engine shut down (final checkpoint written)", serde_json::Value::Null);
            true
        }
        Err(err) => {
            log.error("STORAGE", 22262, "initandlisten", "Storage engine shutdown failed", json!({"error": err.to_string()}));
            false
        }
    }
}

/// Turns SIGTERM or SIGINT into the node's shutdown signal.
async fn watch_signals(state: Arc<ServerState>) {
    let (Ok(mut terminate), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        state.log.error("CONTROL", 23377, "signalProcessingThread", "cannot install signal handlers", serde_json::Value::Null);
        return;
    };
    let name = tokio::select! {
        _ = terminate.recv() => "SIGTERM",
        _ = interrupt.recv() => "SIGINT",
    };
    state.log.info("CONTROL", 23377, "signalProcessingThread", "Received signal", json!({"signal": name}));
    state.shutdown.trigger();
}
