//! Commands that describe the node to its operators: `getParameter` and
//! `setParameter`, `listCommands`, `dataSize`.

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
            let stats = engine.collection_stats(&ns)?;
            (stats.data_size_bytes as i64, stats.count as i64)
        }
    };
    Ok(doc! {"size": size, "numObjects": count, "millis": started.elapsed().as_millis() as i64})
}
