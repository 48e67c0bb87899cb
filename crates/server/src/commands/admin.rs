//! Administrative commands: `ping`, `buildInfo`, `getCmdLineOpts`, `hostInfo`, `whatsmyuri`,
//! `connectionStatus`, `endSessions`, `shutdown`, `getLog`, `serverStatus`.

use std::net::SocketAddr;

use bson::{doc, Bson, DateTime, Document};
use serde_json::json;

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use slipstream_storage::TimestampBson;

/// The MongoDB release whose behaviour Slipstream follows (wire version 21).
pub const MONGODB_VERSION: &str = "7.0.0";
pub const MONGODB_VERSION_ARRAY: [i32; 4] = [7, 0, 0, 0];

/// Fields any command may carry that are not parameters or options of the
/// command itself (MongoDB's generic arguments: the driver specifications'
/// ones, and those members send each other).
pub fn is_generic_argument(key: &str) -> bool {
    key.starts_with('$')
        || matches!(
            key,
            "lsid"
                | "txnNumber"
                | "txnRetryCounter"
                | "stmtId"
                | "autocommit"
                | "startTransaction"
                | "readConcern"
                | "writeConcern"
                | "comment"
                | "maxTimeMS"
                | "maxTimeMSOpOnly"
                | "apiVersion"
                | "apiStrict"
                | "apiDeprecationErrors"
                | "clientOperationKey"
                | "help"
                | "allowImplicitCollectionCreation"
                | "databaseVersion"
                | "shardVersion"
                | "mayBypassWriteBlocking"
                | "usesDefaultMaxTimeMS"
        )
}

pub async fn ping(_ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    Ok(Document::new())
}

pub async fn build_info(_ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    Ok(doc! {
        "version": MONGODB_VERSION,
        "gitVersion": "slipstream",
        "slipstreamVersion": env!("CARGO_PKG_VERSION"),
        "versionArray": MONGODB_VERSION_ARRAY.to_vec(),
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "bits": 64,
        "debug": cfg!(debug_assertions),
        "maxBsonObjectSize": slipstream_wire::MAX_BSON_OBJECT_SIZE_BYTES as i32,
        "storageEngines": ["slipstream"],
        "openssl": {"running": "disabled", "compiled": "disabled"},
        "buildEnvironment": {"target_arch": std::env::consts::ARCH, "target_os": std::env::consts::OS},
    })
}

pub async fn get_cmd_line_opts(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    let options = &ctx.state.options;
    let mut parsed = doc! {
        "net": {"bindIp": options.bind_ip.clone(), "port": i32::from(options.port)},
        "storage": {
            "dbPath": options.dbpath.display().to_string(),
            "journal": {"commitIntervalMs": options.journal_commit_interval_ms as i64},
        },
        "replication": {"oplogSizeMB": options.oplog_size_mb as i64},
    };
    if options.oplog_min_retention_hours > 0.0 {
        let storage = parsed.get_document_mut("storage").expect("built above");
        storage.insert("oplogMinRetentionHours", options.oplog_min_retention_hours);
    }
    if options.enable_test_commands {
        parsed.insert("setParameter", doc! {"enableTestCommands": "1"});
    }
    if let Some(path) = &options.logpath {
        parsed.insert("systemLog", doc! {"destination": "file", "path": path.display().to_string()});
    }
    Ok(doc! {"argv": options.argv.clone(), "parsed": parsed})
}

pub async fn host_info(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    let mem_total_kb = proc_field_kb("/proc/meminfo", "MemTotal:").unwrap_or(0);
    let cores = std::thread::available_parallelism().map(|n| n.get() as i32).unwrap_or(1);
    let os_name = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("PRETTY_NAME=").map(|name| name.trim_matches('"').to_owned()))
        })
        .unwrap_or_else(|| std::env::consts::OS.to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|v| v.trim().to_owned()).unwrap_or_default();
    Ok(doc! {
        "system": {
            "currentTime": DateTime::now(),
            "hostname": ctx.state.host_and_port(),
            "cpuAddrSize": 64,
            "memSizeMB": (mem_total_kb / 1024) as i64,
            "memLimitMB": (mem_total_kb / 1024) as i64,
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
            "numaEnabled": false,
        },
        "os": {"type": "Linux", "name": os_name, "version": kernel},
        "extra": {"pageSize": 4096_i64},
    })
}

pub async fn whats_my_uri(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    Ok(doc! {"you": ctx.client_address.clone()})
}

pub async fn connection_status(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let mut auth_info = doc! {"authenticatedUsers": [], "authenticatedUserRoles": []};
    if req.body.get_bool("showPrivileges").unwrap_or(false) {
        auth_info.insert("authenticatedUserPrivileges", Bson::Array(vec![]));
    }
    Ok(doc! {"authInfo": auth_info})
}

/// Shuts the node down cleanly. Only from a loopback client and on the
/// admin database, as MongoDB requires without authentication.
pub async fn shutdown(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(13, "shutdown may only be run against the admin database."));
    }
    let local = ctx.client_address.parse::<SocketAddr>().map(|addr| addr.ip().is_loopback()).unwrap_or(false);
    if !local {
        return Err(CommandError::new(13, "shutdown is only accepted from a client on localhost"));
    }
    let force = match req.body.get("force") {
        None => false,
        Some(Bson::Boolean(force)) => *force,
        Some(_) => return Err(CommandError::type_mismatch("force must be a boolean")),
    };
    // A primary hands over first (unless `force`); a standalone has no
    // secondaries to wait for. In-flight requests are answered either way.
    let timeout_secs = match req.body.get("timeoutSecs") {
        None | Some(Bson::Null) => None,
        Some(value) => Some(as_count(value).filter(|secs| *secs >= 0).ok_or_else(|| {
            CommandError::bad_value("timeoutSecs must be a non-negative number")
        })? as u64),
    };
    ctx.state.topology.prepare_shutdown(force, timeout_secs).await?;
    ctx.state.log.info(
        "COMMAND",
        4695400,
        &format!("conn{}", ctx.connection_id),
        "Terminating via shutdown command",
        json!({"force": force}),
    );
    ctx.state.shutdown.trigger();
    Ok(Document::new())
}

pub async fn get_log(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let log = &ctx.state.log;
    match req.body.get("getLog") {
        Some(Bson::String(name)) if name == "*" => Ok(doc! {"names": ["global", "startupWarnings"]}),
        Some(Bson::String(name)) if name == "global" => {
            let (total, lines) = log.recent();
            Ok(doc! {"totalLinesWritten": total as i64, "log": lines})
        }
        Some(Bson::String(name)) if name == "startupWarnings" => {
            let lines = log.startup_warnings();
            Ok(doc! {"totalLinesWritten": lines.len() as i64, "log": lines})
        }
        Some(Bson::String(name)) => Err(CommandError::bad_value(format!("No log named '{name}'"))),
        _ => Err(CommandError::type_mismatch("Argument to getLog must be of type String")),
    }
}

/// `configureFailPoint` (dispatched only with test commands enabled).
pub async fn configure_fail_point(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(13, "configureFailPoint may only be run against the admin database."));
    }
    match req.body.get_str("configureFailPoint") {
        Ok(JOURNAL_FSYNC_FAIL_POINT) => configure_journal_fsync_fail_point(ctx, &req.body),
        Ok(BLOCK_MEMBERS_FAIL_POINT) => configure_block_members(ctx, &req.body),
        _ => match ctx.state.topology.configure_fail_point(&req.body) {
            Some(reply) => Ok(reply?),
            None => ctx.state.fail_points.configure(&req.body),
        },
    }
}

/// Cuts this node off from the named members (`data.hosts`, `host:port`
/// as each member's handshake names itself) until `mode: "off"`: see
/// `slipstream_repl::fault`.
const BLOCK_MEMBERS_FAIL_POINT: &str = "blockMembers";

fn configure_block_members(ctx: &CommandContext, body: &Document) -> CommandResult {
    let blocklist = &ctx.state.member_blocklist;
    let previous = blocklist.hosts().len() as i64;
    match body.get("mode") {
        Some(Bson::String(mode)) if mode == "off" => blocklist.clear(),
        Some(Bson::String(mode)) if mode == "alwaysOn" => {
            let hosts = match body.get_document("data").ok().and_then(|data| data.get("hosts")) {
                Some(Bson::Array(hosts)) => hosts
                    .iter()
                    .map(|host| host.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| CommandError::type_mismatch("blockMembers data.hosts must hold host:port strings"))?,
                _ => return Err(CommandError::bad_value("blockMembers requires data.hosts, an array of host:port strings")),
            };
            blocklist.block(hosts).map_err(|too_many| {
                CommandError::bad_value(format!(
                    "blockMembers names {} hosts; a replica set has at most {}",
                    too_many.0,
                    slipstream_repl::fault::BLOCKED_MEMBERS_MAX
                ))
            })?;
        }
        _ => return Err(CommandError::bad_value("blockMembers takes mode 'alwaysOn' (with data.hosts) or 'off'")),
    }
    ctx.state.log.info(
        "CONTROL",
        23830,
        &format!("conn{}", ctx.connection_id),
        "blockMembers fail point set",
        json!({"hosts": blocklist.hosts()}),
    );
    Ok(doc! {"count": previous})
}

/// Makes the journal's next fsync fail: the node logs the cause and
/// aborts, as on a failing disk (tests of what survives a restart).
const JOURNAL_FSYNC_FAIL_POINT: &str = "failJournalFsync";

fn configure_journal_fsync_fail_point(ctx: &CommandContext, body: &Document) -> CommandResult {
    let armed = match body.get("mode") {
        Some(Bson::String(mode)) if mode == "off" => false,
        Some(Bson::String(mode)) if mode == "alwaysOn" => true,
        Some(Bson::Document(mode)) if mode.get("times").and_then(as_count).is_some_and(|times| times > 0) => true,
        _ => return Err(CommandError::bad_value("failJournalFsync takes mode 'off', 'alwaysOn' or {times: n}")),
    };
    ctx.state.engine.fail_next_journal_fsync(armed);
    Ok(doc! {"count": 0_i64})
}

fn as_count(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(n) if n.fract() == 0.0 => Some(*n as i64),
        _ => None,
    }
}

pub async fn server_status(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    let state = &ctx.state;
    let uptime = state.started_at.elapsed();
    let stats = state.engine.stats();
    let resident_kb = proc_field_kb("/proc/self/status", "VmRSS:").unwrap_or(0);
    let virtual_kb = proc_field_kb("/proc/self/status", "VmSize:").unwrap_or(0);
    let mut status = doc! {
        "host": state.host_and_port(),
        "version": MONGODB_VERSION,
        "process": "slipstream",
        "pid": i64::from(std::process::id()),
        "uptime": uptime.as_secs_f64(),
        "uptimeMillis": uptime.as_millis() as i64,
        "uptimeEstimate": uptime.as_secs() as i64,
        "localTime": DateTime::now(),
        "connections": state.metrics.connections(state.options.max_connections),
        "opcounters": state.metrics.opcounters(),
        "network": state.metrics.network(),
        "metrics": {
            "ttl": state.metrics.ttl(),
            // MongoDB's `metrics.cursor` (pinned is always 0 here).
            "cursor": {
                "timedOut": state.cursors.timed_out_count() as i64,
                "open": {
                    "noTimeout": state.cursors.open_no_timeout_count() as i64,
                    "pinned": 0_i64,
                    "total": state.cursors.open_count() as i64,
                },
            },
        },
        "mem": {
            "bits": 64,
            "resident": (resident_kb / 1024) as i32,
            "virtual": (virtual_kb / 1024) as i32,
            "supported": true,
        },
        "storageEngine": {
            "name": "slipstream",
            "supportsCommittedReads": true,
            "supportsSnapshotReadConcern": true,
            "readOnly": false,
            "persistent": true,
            "backupCursorOpen": false,
        },
        "slipstream": {
            "journal": {
                "bytesWritten": stats.journal_bytes_written as i64,
                "fsyncs": stats.journal_fsyncs as i64,
                "entries": stats.journal_entries as i64,
                "oldestUnsyncedWriteAgeMillis": stats.oldest_unsynced_write_age_ms as i64,
                "preallocatedBytes": stats.journal_preallocated_bytes as i64,
                "sparesPrepared": stats.journal_spares_prepared as i64,
                "segmentsScannedAtOpen": stats.journal_segments_scanned_at_open as i64,
                "segmentsIndexedAtOpen": stats.journal_segments_indexed_at_open as i64,
                "indexFilesWritten": stats.journal_index_files_written as i64,
            },
            "checkpoint": {
                "count": stats.checkpoints as i64,
                "lastDurationMs": stats.last_checkpoint_ms as i64,
                "timestamp": stats.checkpoint_timestamp.to_bson(),
            },
            "oplog": {
                "first": stats.oplog_first.to_bson(),
                "last": stats.oplog_last.to_bson(),
                "sizeBytes": stats.oplog_size_bytes as i64,
            },
            "versionsInMemory": stats.versions_in_memory as i64,
            "history": history_section(&stats),
            "memory": crate::memory::server_status_section(
                state.options.cache_size_mb * 1024 * 1024,
                state.metrics.connections_current(),
                &stats,
                &crate::memory::InFlight {
                    requests: state.admission.stats(),
                    cursor_buffered_bytes: crate::exec::query::buffered_results_bytes(),
                },
            ),
            "compact": state.metrics.compactions(),
        },
        "flowControl": state.flow_control.server_status(&state.engine),
    };
    // MongoDB reports `repl` and `oplogTruncation` only on a replica set
    // member (a standalone has no oplog).
    if let Some(repl) = state.topology.server_status() {
        status.insert("repl", repl);
        // The journal finds its segments by reading them (the last one) and
        // their index files: MongoDB's "scanning", not its sampling.
        let mut truncation = doc! {
            "totalTimeProcessingMicros": stats.oplog_open_micros as i64,
            "processingMethod": "scanning",
            "totalTimeTruncatingMicros": stats.oplog_truncate_micros as i64,
            "truncateCount": stats.oplog_segments_truncated as i64,
        };
        if stats.oplog_min_retention_hours > 0.0 {
            truncation.insert("oplogMinRetentionHours", stats.oplog_min_retention_hours);
        }
        status.insert("oplogTruncation", truncation);
    }
    for (name, section) in state.topology.server_status_sections() {
        // A section the server has too (`metrics`) gains the topology's fields.
        match status.get_mut(name) {
            Some(Bson::Document(existing)) => existing.extend(section),
            _ => {
                status.insert(name, section);
            }
        }
    }
    let network = status
        .get_document_mut("metrics")
        .and_then(|metrics| metrics.get_document_mut("repl"))
        .and_then(|repl| repl.get_document_mut("network"));
    if let Ok(network) = network {
        network.insert("notPrimaryUnacknowledgedWrites", state.metrics.not_primary_unacknowledged_writes());
    }
    Ok(status)
}

/// The versions held above the checkpoint (memory) and the history kept on
/// disk while a member's checkpoint is past its commit point.
fn history_section(stats: &slipstream_storage::engine::EngineStats) -> Document {
    doc! {
        "bytesInMemory": stats.history_bytes_in_memory as i64,
        "bytesInMemoryMax": stats.history_bytes_max as i64,
        "versionsInMemory": stats.versions_in_memory as i64,
        "oldestTimestamp": stats.oldest_timestamp.to_bson(),
        "floor": stats.history_floor.map_or(Bson::Null, |floor| Bson::Timestamp(floor.to_bson())),
        "checkpointsPastStable": stats.checkpoints_past_stable as i64,
    }
}

/// A `Name:   1234 kB` field of a /proc file, in kB.
fn proc_field_kb(path: &str, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|line| line.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}
