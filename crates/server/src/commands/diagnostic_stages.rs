//! The aggregation stages that read the node rather than a collection,
//! when they open a pipeline: `$currentOp` (`{aggregate: 1}` on admin:
//! the running operations, as the `currentOp` command shows them) and
//! `$collStats` (one document of a collection's statistics, as the
//! `collStats` command reports them). mongosh's `db.currentOp()`,
//! `db.c.stats()`, `dataSize()`, `storageSize()` and `totalSize()` use
//! them. The stages after the first run as any pipeline does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, DateTime, Document};
use slipstream_query::aggregate::Pipeline;

use super::{CommandContext, CommandRequest, CommandResult};
use crate::cursor::Cursor;
use crate::error::CommandError;
use crate::exec::args::{self, get_document, get_non_negative};
use crate::exec::batch::BatchLimits;
use crate::exec::cursor_body::{BatchTiming, CursorBody};
use crate::exec::query::BufferedResults;
use crate::exec::scan::ScanStats;
use crate::exec::source::StorageSource;

/// The options of `$currentOp` (MongoDB's); `localOps` and the idle kinds
/// are accepted, but only active operations are tracked, so idle
/// connections, sessions and cursors never appear.
const CURRENT_OP_OPTIONS: &[&str] = &[
    "allUsers",
    "idleConnections",
    "idleCursors",
    "idleSessions",
    "localOps",
    "truncateOps",
    "backtrace",
];

/// Runs the pipeline when its first stage is one of these; `None` leaves
/// the command to the ordinary `aggregate`.
pub async fn run(ctx: &CommandContext, req: &CommandRequest) -> Option<CommandResult> {
    let Some(Bson::Array(stages)) = req.body.get("pipeline") else {
        return None;
    };
    let Some(Bson::Document(first)) = stages.first() else {
        return None;
    };
    let name = first.keys().next()?.as_str();
    if !matches!(name, "$currentOp" | "$collStats") || req.body.get_bool("explain").unwrap_or(false) {
        return None;
    }
    Some(run_stage(ctx, req, name, first, &stages[1..]).await)
}

async fn run_stage(
    ctx: &CommandContext,
    req: &CommandRequest,
    name: &str,
    first: &Document,
    rest: &[Bson],
) -> CommandResult {
    let spec = match first.get(name) {
        Some(Bson::Document(spec)) => spec,
        _ => {
            return Err(CommandError::new(
                9,
                format!("{name} stage requires an object as its argument"),
            ))
        }
    };
    let (input, ns) = match name {
        "$currentOp" => (current_op_input(ctx, req, spec)?, format!("{}.$cmd.aggregate", req.db)),
        _ => coll_stats_input(ctx, req, spec).await?,
    };
    let stages = rest
        .iter()
        .map(|stage| match stage {
            Bson::Document(stage) => Ok(stage.clone()),
            _ => Err(CommandError::new(
                14,
                "Each element of the 'pipeline' array must be an object",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pipeline = Pipeline::parse(&stages, &req.db)?;
    let source = StorageSource {
        engine: Arc::clone(&ctx.state.engine),
        read_at: ctx.read_point().at,
    };
    let documents = pipeline.execute(Box::new(input.into_iter().map(Ok)), &source, DateTime::now())?;
    reply_with_cursor(ctx, &req.body, &ns, documents).await
}

/// The first batch, and a cursor over the rest, as `aggregate` replies.
async fn reply_with_cursor(ctx: &CommandContext, body: &Document, ns: &str, documents: Vec<Document>) -> CommandResult {
    let cursor = get_document(body, "aggregate", "cursor")?.ok_or_else(|| {
        CommandError::new(
            9,
            "The 'cursor' option is required, except for aggregate with the explain argument",
        )
    })?;
    let batch_size =
        get_non_negative(cursor, "aggregate.cursor", "batchSize")?.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut results = CursorBody::Buffered(BufferedResults::new(documents, ScanStats::default()));
    let timing = BatchTiming {
        deadline: None,
        await_data_wait: Duration::ZERO,
    };
    let limits = BatchLimits::first_batch(batch_size, None);
    let (first_batch, finished) = results.next_batch(&ctx.state.engine, limits, timing).await?;
    let id = if finished {
        0
    } else {
        let cursor = Cursor {
            ns: ns.to_owned(),
            no_cursor_timeout: false,
            time_left: None,
            body: results,
            lsid: None,
            linearizable: false,
            collection: None,
        };
        super::find::register_cursor(ctx, cursor)?
    };
    Ok(doc! {"cursor": {"firstBatch": first_batch, "id": Bson::Int64(id), "ns": ns}})
}

fn current_op_input(
    ctx: &CommandContext,
    req: &CommandRequest,
    spec: &Document,
) -> Result<Vec<Document>, CommandError> {
    let collectionless = req
        .body
        .get("aggregate")
        .and_then(slipstream_query::compare::as_number)
        .is_some();
    if req.db != "admin" || !collectionless {
        return Err(CommandError::new(
            73,
            "$currentOp must be run against the 'admin' database with {aggregate: 1}",
        ));
    }
    for (key, value) in spec {
        if !CURRENT_OP_OPTIONS.contains(&key.as_str()) {
            return Err(CommandError::new(
                9,
                format!("Unrecognized option '{key}' in $currentOp stage."),
            ));
        }
        if !matches!(value, Bson::Boolean(_)) {
            return Err(CommandError::new(
                9,
                format!(
                    "The '{key}' parameter of the $currentOp stage must be a boolean value, but found: {}",
                    args::type_name(value)
                ),
            ));
        }
    }
    let host = ctx.state.host_and_port();
    let now = Instant::now();
    Ok(ctx
        .state
        .operations
        .snapshot()
        .iter()
        .map(|operation| operation.describe(&host, now))
        .collect())
}

/// `$collStats` with `storageStats` and `count`; `latencyStats` and
/// `queryExecStats` need counters the node does not keep (115).
async fn coll_stats_input(
    ctx: &CommandContext,
    req: &CommandRequest,
    spec: &Document,
) -> Result<(Vec<Document>, String), CommandError> {
    let collection = match req.body.get("aggregate") {
        Some(Bson::String(_)) => args::collection_name(&req.body, "aggregate")?,
        _ => return Err(CommandError::new(73, "$collStats must be run against a collection")),
    };
    let ns = args::namespace(&req.db, &collection);
    let mut output = doc! {"ns": ns.clone(), "host": ctx.state.host_and_port(), "localTime": DateTime::now()};
    for (key, value) in spec {
        match (key.as_str(), value) {
            ("storageStats" | "count", Bson::Document(_)) => {}
            ("latencyStats" | "queryExecStats", Bson::Document(_)) => {
                return Err(CommandError::new(
                    115,
                    format!("$collStats '{key}' is not supported by Slipstream: it keeps no per-collection latency or query counters"),
                ))
            }
            ("storageStats" | "count" | "latencyStats" | "queryExecStats", other) => {
                return Err(CommandError::new(
                    14,
                    format!("BSON field '$collStats.{key}' is the wrong type '{}', expected type 'object'", args::type_name(other)),
                ))
            }
            _ => return Err(CommandError::new(40415, format!("BSON field '$collStats.{key}' is an unknown field."))),
        }
    }
    let scale = spec
        .get_document("storageStats")
        .ok()
        .and_then(|options| options.get("scale").cloned());
    let mut stats_body = doc! {"collStats": collection};
    if let Some(scale) = scale {
        stats_body.insert("scale", scale);
    }
    let stats_request = CommandRequest {
        db: req.db.clone(),
        name: "collStats".into(),
        body: stats_body,
        secondary_ok: req.secondary_ok,
    };
    let stats = super::catalog::coll_stats(ctx, &stats_request).await.map_err(|error| {
        CommandError::new(
            error.code,
            format!(
                "Unable to retrieve storageStats in $collStats stage :: caused by :: {}",
                error.message
            ),
        )
    })?;
    if spec.contains_key("storageStats") {
        output.insert("storageStats", stats.clone());
    }
    if spec.contains_key("count") {
        output.insert("count", stats.get("count").cloned().unwrap_or(Bson::Int64(0)));
    }
    Ok((vec![output], ns))
}
