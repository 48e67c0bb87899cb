//! Commands that describe the node to its operators: `getParameter` and
//! `setParameter`, `listCommands`, `dataSize`, `currentOp` and `killOp`
//! (over `operations`), `profile` (over `profiler`).

use bson::{doc, Bson, Document};

use super::admin::is_generic_argument;
use super::{CommandContext, CommandRequest, CommandResult, COMMANDS};
use crate::error::CommandError;
use crate::exec::args::{self, namespace};
use crate::state::ServerState;

/// Sets a runtime parameter from a `setParameter` value and returns the
/// previous value.
type SetParameter = fn(&ServerState, &Bson) -> Result<Bson, CommandError>;

/// One server parameter: its current value, and how to change it at
/// runtime (`None`: fixed at start).
struct ParameterSpec {
    name: &'static str,
    value: fn(&ServerState) -> Bson,
    set: Option<SetParameter>,
}

/// Every server parameter this node has. MongoDB lets `logLevel`, `quiet`,
/// `journalCommitInterval` and `transactionLifetimeLimitSeconds` change at
/// runtime too; here they are fixed (IllegalOperation on a change) until
/// the log, the journal and transactions can honour a new value.
const PARAMETERS: &[ParameterSpec] = &[
    ParameterSpec {
        name: "enableTestCommands",
        value: |state| Bson::Boolean(state.options.enable_test_commands),
        set: None,
    },
    ParameterSpec {
        name: "featureCompatibilityVersion",
        value: |_| Bson::Document(doc! {"version": "7.0"}),
        set: None,
    },
    ParameterSpec {
        name: "authenticationMechanisms",
        value: |_| Bson::Array(vec![]),
        set: None,
    },
    ParameterSpec {
        name: "journalCommitInterval",
        value: |state| Bson::Int32(state.options.journal_commit_interval_ms as i32),
        set: None,
    },
    ParameterSpec {
        name: "logLevel",
        value: |_| Bson::Int32(0),
        set: None,
    },
    ParameterSpec {
        name: "quiet",
        value: |_| Bson::Boolean(false),
        set: None,
    },
    ParameterSpec {
        name: "requireApiVersion",
        value: |state| Bson::Boolean(state.parameters.require_api_version()),
        set: Some(set_require_api_version),
    },
    ParameterSpec {
        name: "ttlMonitorSleepSecs",
        value: |state| Bson::Int32(state.parameters.ttl_monitor_sleep_secs() as i32),
        set: Some(set_ttl_monitor_sleep_secs),
    },
    ParameterSpec {
        name: "ttlMonitorEnabled",
        value: |state| Bson::Boolean(state.parameters.ttl_monitor_enabled()),
        set: Some(set_ttl_monitor_enabled),
    },
    ParameterSpec {
        name: "numInitialSyncAttempts",
        value: |_| Bson::Int32(slipstream_repl::initial_sync::progress::attempts_max() as i32),
        set: Some(set_num_initial_sync_attempts),
    },
    ParameterSpec {
        name: "initialSyncMethod",
        value: |_| Bson::String(slipstream_repl::initial_sync::checkpoint_copy::method().to_owned()),
        set: Some(set_initial_sync_method),
    },
    ParameterSpec {
        name: "transactionLifetimeLimitSeconds",
        value: |_| Bson::Int32(60),
        set: None,
    },
    ParameterSpec {
        name: "maxIncomingConnections",
        value: |state| Bson::Int32(state.options.max_connections as i32),
        set: None,
    },
    ParameterSpec {
        name: "minSnapshotHistoryWindowInSeconds",
        value: |state| Bson::Int32(i32::try_from(state.engine.snapshot_history_window_secs()).unwrap_or(i32::MAX)),
        set: Some(set_snapshot_history_window),
    },
    ParameterSpec {
        name: "localLogicalSessionTimeoutMinutes",
        value: |_| Bson::Int32(super::handshake::LOGICAL_SESSION_TIMEOUT_MINUTES),
        set: None,
    },
];

fn set_require_api_version(state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let required = match value {
        Bson::Boolean(required) => *required,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(n) => *n != 0.0,
        _ => return Err(CommandError::bad_value("requireApiVersion must be a boolean")),
    };
    Ok(Bson::Boolean(state.parameters.set_require_api_version(required)))
}

/// `ttlMonitorSleepSecs`: a whole number of seconds, at least 1 (MongoDB's
/// bound is `gt: 0`).
fn set_ttl_monitor_sleep_secs(state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let seconds = match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(n) if n.fract() == 0.0 => *n as i64,
        _ => return Err(CommandError::bad_value("ttlMonitorSleepSecs must be an integer")),
    };
    if seconds < 1 || seconds > i64::from(i32::MAX) {
        return Err(CommandError::bad_value(format!(
            "Invalid value for parameter ttlMonitorSleepSecs: {seconds} is not greater than 0"
        )));
    }
    Ok(Bson::Int32(state.parameters.set_ttl_monitor_sleep_secs(seconds as u64) as i32))
}

/// `numInitialSyncAttempts`: failed initial sync attempts before the
/// process stops, at least 1.
fn set_num_initial_sync_attempts(_state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let attempts = match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(n) if n.fract() == 0.0 => *n as i64,
        _ => return Err(CommandError::bad_value("numInitialSyncAttempts must be an integer")),
    };
    let previous = slipstream_repl::initial_sync::progress::set_attempts_max(attempts).ok_or_else(|| {
        CommandError::bad_value(format!(
            "Invalid value for parameter numInitialSyncAttempts: {attempts} is not between 1 and {}",
            slipstream_repl::initial_sync::progress::INITIAL_SYNC_ATTEMPTS_LIMIT
        ))
    })?;
    Ok(Bson::Int32(previous as i32))
}

/// `initialSyncMethod`: `"fileCopyBased"` (the default) or `"logical"`;
/// a sync under way keeps the method it started with.
fn set_initial_sync_method(_state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let previous = value
        .as_str()
        .and_then(slipstream_repl::initial_sync::checkpoint_copy::set_method)
        .ok_or_else(|| {
            CommandError::bad_value(format!(
                "Invalid value for parameter initialSyncMethod: {value} is not \"fileCopyBased\" or \"logical\""
            ))
        })?;
    Ok(Bson::String(previous.to_owned()))
}

fn set_ttl_monitor_enabled(state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let Bson::Boolean(enabled) = value else {
        return Err(CommandError::bad_value("ttlMonitorEnabled must be a boolean"));
    };
    Ok(Bson::Boolean(state.parameters.set_ttl_monitor_enabled(*enabled)))
}

/// `minSnapshotHistoryWindowInSeconds`: a non-negative whole number of
/// seconds (BadValue otherwise, as MongoDB).
fn set_snapshot_history_window(state: &ServerState, value: &Bson) -> Result<Bson, CommandError> {
    let secs = match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(n) if n.fract() == 0.0 => *n as i64,
        _ => return Err(CommandError::bad_value("minSnapshotHistoryWindowInSeconds must be a number of seconds")),
    };
    let secs = u32::try_from(secs)
        .map_err(|_| CommandError::bad_value("minSnapshotHistoryWindowInSeconds must be at least 0"))?;
    let was = state.engine.set_snapshot_history_window_secs(secs);
    Ok(Bson::Int32(i32::try_from(was).unwrap_or(i32::MAX)))
}

fn parameter(name: &str) -> Option<&'static ParameterSpec> {
    PARAMETERS.iter().find(|spec| spec.name == name)
}

pub async fn get_parameter(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let (want_all, show_details) = match req.body.get("getParameter") {
        Some(Bson::String(star)) if star == "*" => (true, false),
        Some(Bson::Document(options)) => (
            args::get_bool(options, "getParameter", "allParameters")?.unwrap_or(false),
            args::get_bool(options, "getParameter", "showDetails")?.unwrap_or(false),
        ),
        _ => (false, false),
    };
    let present = |spec: &ParameterSpec| {
        let value = (spec.value)(&ctx.state);
        if show_details {
            Bson::Document(doc! {"value": value, "settableAtRuntime": spec.set.is_some(), "settableAtStartup": true})
        } else {
            value
        }
    };
    let mut reply = Document::new();
    if want_all {
        for spec in PARAMETERS {
            reply.insert(spec.name, present(spec));
        }
        return Ok(reply);
    }
    for key in req.body.keys().skip(1).filter(|key| !is_generic_argument(key)) {
        let spec = parameter(key).ok_or_else(|| CommandError::new(72, format!("no option found to get: {key}")))?;
        reply.insert(key.clone(), present(spec));
    }
    if reply.is_empty() {
        return Err(CommandError::new(72, "no option found to get"));
    }
    Ok(reply)
}

/// `setParameter` on the admin database: every named parameter must exist
/// (InvalidOptions, 72) and be settable at runtime (IllegalOperation, 20)
/// before any is changed; the reply's `was` is the first one's old value.
pub async fn set_parameter(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(
            13,
            "setParameter may only be run against the admin database.",
        ));
    }
    let mut changes = Vec::new();
    for (key, value) in req.body.iter().skip(1).filter(|(key, _)| !is_generic_argument(key)) {
        let spec = parameter(key).ok_or_else(|| {
            CommandError::new(
                72,
                format!("attempted to set unrecognized parameter [{key}], use help:true to see options"),
            )
        })?;
        let set = spec
            .set
            .ok_or_else(|| CommandError::new(20, format!("not allowed to change [{key}] at runtime")))?;
        changes.push((set, value));
    }
    if changes.is_empty() {
        return Err(CommandError::new(
            72,
            "no option found to set, use help:true to see options",
        ));
    }
    let mut was = None;
    for (set, value) in changes {
        let previous = set(&ctx.state, value)?;
        was.get_or_insert(previous);
    }
    Ok(doc! {"was": was.expect("at least one change")})
}

/// `listCommands`: every command (and each historical spelling) with what
/// MongoDB reports of it.
pub async fn list_commands(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    let test_commands = ctx.state.options.enable_test_commands;
    let mut commands = Document::new();
    for spec in COMMANDS.iter().filter(|spec| test_commands || !spec.test_only) {
        for name in std::iter::once(spec.name).chain(spec.aliases.iter().copied()) {
            let versions: Vec<Bson> = if crate::api_version::in_api_version_1(name) {
                vec![Bson::String("1".into())]
            } else {
                Vec::new()
            };
            let access = spec.access_of(&doc! {});
            commands.insert(
                name,
                doc! {
                    "help": format!("{} (see the MongoDB manual)", spec.name),
                    "requiresAuth": false,
                    "secondaryOk": access != slipstream_repl::CommandAccess::Write,
                    "adminOnly": matches!(name, "shutdown" | "setParameter" | "configureFailPoint" | "replSetInitiate"),
                    "apiVersions": versions,
                    "deprecatedApiVersions": [],
                },
            );
        }
    }
    commands.insert("help", "use the MongoDB manual");
    Ok(doc! {"commands": commands})
}

/// `dataSize` of a whole collection (`{dataSize: "db.coll"}`): the sizes
/// the engine keeps, so no scan. A missing collection has size 0, as in
/// MongoDB.
pub async fn data_size(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "dataSize";
    let ns = match req.body.get(COMMAND) {
        Some(Bson::String(ns)) => ns.clone(),
        Some(other) => {
            return Err(CommandError::new(
                14,
                format!(
                    "BSON field 'dataSize.dataSize' is the wrong type '{}', expected type 'string'",
                    args::type_name(other)
                ),
            ))
        }
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field 'dataSize.dataSize' is missing but a required field",
            ))
        }
    };
    let Some((db, collection)) = ns.split_once('.') else {
        return Err(CommandError::new(73, format!("Invalid namespace specified '{ns}'")));
    };
    args::check_database_name(db)?;
    args::check_collection_name(collection)?;
    for range_field in ["keyPattern", "min", "max"] {
        if req.body.contains_key(range_field) {
            return Err(CommandError::new(
                115,
                format!("dataSize with '{range_field}' (a key range) is not supported by Slipstream; omit it for the whole collection"),
            ));
        }
    }
    let started = std::time::Instant::now();
    let engine = &ctx.state.engine;
    let (size, count) = match engine.collection_info(&namespace(db, collection)) {
        None => (0, 0),
        Some(_) => {
            let stats = crate::exec::off_async_workers(|| engine.collection_stats(&ns))?;
            (stats.data_size_bytes as i64, stats.count as i64)
        }
    };
    Ok(doc! {"size": size, "numObjects": count, "millis": started.elapsed().as_millis() as i64})
}

/// `currentOp` (admin only): the running operations, each as MongoDB
/// shows one, that match the command's other fields taken as a query
/// (`{currentOp: 1, op: "query"}`). Every registered operation is active;
/// idle connections and sessions, which `$all: true` adds in MongoDB, are
/// not tracked, so `$all` changes nothing here.
pub async fn current_op(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(
            13,
            "currentOp may only be run against the admin database.",
        ));
    }
    let filter = current_op_filter(&req.body)?;
    let own_ops = args::get_bool(&req.body, "currentOp", "$ownOps")?.unwrap_or(false);
    args::get_bool(&req.body, "currentOp", "$all")?;
    let host = ctx.state.host_and_port();
    let now = std::time::Instant::now();
    let inprog: Vec<Bson> = ctx
        .state
        .operations
        .snapshot()
        .iter()
        .filter(|operation| !own_ops || operation.connection_id == ctx.connection_id)
        .map(|operation| operation.describe(&host, now))
        .filter(|described| filter.matches(described))
        .map(Bson::Document)
        .collect();
    Ok(doc! {"inprog": inprog})
}

/// The query part of a `currentOp` command: every field but the command,
/// its own `$` options and the generic arguments (query operators such as
/// `$or` stay).
fn current_op_filter(body: &Document) -> Result<slipstream_query::filter::Filter, CommandError> {
    const OPTIONS: &[&str] = &["$all", "$ownOps", "$truncateOps"];
    const QUERY_OPERATORS: &[&str] = &["$or", "$and", "$nor", "$expr"];
    let mut filter = Document::new();
    for (key, value) in body.iter().skip(1) {
        let is_query = QUERY_OPERATORS.contains(&key.as_str()) || !is_generic_argument(key);
        if is_query && !OPTIONS.contains(&key.as_str()) {
            filter.insert(key.clone(), value.clone());
        }
    }
    Ok(slipstream_query::filter::Filter::parse(&filter)?)
}

/// `killOp` (admin only): flags operation `op` as killed; it answers
/// Interrupted (11601) wherever it waits. Success whether or not such an
/// operation runs, as in MongoDB.
pub async fn kill_op(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(
            13,
            "killOp may only be run against the admin database.",
        ));
    }
    let opid = match req.body.get("op") {
        None => return Err(CommandError::new(4, "Missing expected field \"op\"")),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(n)) if n.fract() == 0.0 => *n as i64,
        Some(Bson::Double(n)) => {
            let message = format!("Expected field \"op\" to have an integral value, but found op: {n}");
            return Err(CommandError::bad_value(message));
        }
        Some(other) => {
            return Err(CommandError::new(
                14,
                format!(
                    "Expected field \"op\" to have numeric type, but found {}",
                    args::type_name(other)
                ),
            ))
        }
    };
    let opid = i32::try_from(opid).map_err(|_| {
        CommandError::new(
            26823,
            format!("invalid op : {opid}. Op ID cannot be represented with 32 bits"),
        )
    })?;
    if let Ok(opid) = u32::try_from(opid) {
        if ctx.state.operations.kill(opid) {
            ctx.state.log.info(
                "COMMAND",
                20482,
                &format!("conn{}", ctx.connection_id),
                "Going to kill op",
                serde_json::json!({"opId": opid}),
            );
        }
    }
    Ok(doc! {"info": "attempting to kill op"})
}

/// `profile`: reads (`profile: -1`) or sets the database's profiling level
/// and the node's `slowms` and `sampleRate`; answers the settings before
/// (see `profiler`).
pub async fn profile(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "profile";
    args::check_database_name(&req.db)?;
    let level = args::get_i64(&req.body, COMMAND, COMMAND)?
        .ok_or_else(|| CommandError::new(40414, "BSON field 'profile.profile' is missing but a required field"))?;
    if !(-1..=2).contains(&level) {
        return Err(CommandError::bad_value(format!(
            "Invalid profiling level: {level}; it must be -1, 0, 1 or 2"
        )));
    }
    let slow_ms = args::get_i64(&req.body, COMMAND, "slowms")?;
    let sample_rate = match req.body.get("sampleRate") {
        None => None,
        Some(Bson::Double(rate)) if (0.0..=1.0).contains(rate) => Some(*rate),
        Some(Bson::Int32(rate)) if (0..=1).contains(rate) => Some(f64::from(*rate)),
        Some(Bson::Int64(rate)) if (0..=1).contains(rate) => Some(*rate as f64),
        Some(_) => {
            return Err(CommandError::bad_value(
                "'sampleRate' must be between 0.0 and 1.0 inclusive",
            ))
        }
    };
    if req.body.contains_key("filter") {
        return Err(CommandError::new(
            115,
            "profile's 'filter' is not supported by Slipstream; use slowms and sampleRate",
        ));
    }
    if level > 0 && ctx.state.topology.is_replica_set() {
        return Err(CommandError::new(
            115,
            "profiling is not supported on a replica set member by Slipstream: system.profile writes would be replicated",
        ));
    }
    let level = (level >= 0).then_some(level as i32);
    let before = ctx.state.profiler.change(&req.db, level, slow_ms, sample_rate);
    Ok(doc! {"was": before.level, "slowms": before.slow_ms as i32, "sampleRate": before.sample_rate})
}
