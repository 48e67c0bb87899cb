//! `aggregate`: parses the pipeline (`slipstream_query::aggregate`), plans
//! the leading `$match` like a find so that an index can feed the
//! pipeline, runs it on a blocking thread (it may sort and group the whole
//! input), and returns the results through a cursor.

mod output;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use slipstream_query::aggregate::Pipeline;
use slipstream_query::collation::CollationRef;
use slipstream_query::filter::Filter;
use slipstream_repl::CommandAccess;
use slipstream_storage::Engine;

use super::crud::command_let::CommandLet;
use super::{CommandContext, CommandRequest, CommandResult};
use crate::cursor::Cursor;
use crate::error::CommandError;
use crate::exec::args::{self, get_bool, get_document, get_non_negative, namespace};
use crate::exec::batch::BatchLimits;
use crate::exec::cursor_body::{BatchTiming, CursorBody};
use crate::exec::limits::BLOCKING_SORT_ALLOW_DISK_USE_MEMORY_BYTES_MAX;
use crate::exec::off_async_workers;
use crate::exec::oplog::{is_oplog, TsBounds};
use crate::exec::plan::{plan_query, QueryShape};
use crate::exec::query::BufferedResults;
use crate::exec::read_concern::ReadPoint;
use slipstream_storage::TimestampBson;
use crate::exec::scan::ScanStats;
use crate::exec::source::{OplogInput, ScanInput, StorageSource};
use output::OutputStage;

/// A parsed `aggregate`.
pub(crate) struct AggregateRequest {
    /// `None` for `{aggregate: 1}` (collectionless).
    pub collection: Option<String>,
    pub ns: String,
    pub stages: Vec<Document>,
    pub pipeline: Pipeline,
    pub batch_size: Option<usize>,
    pub explain: bool,
    pub hint: Option<Bson>,
    /// Where the pipeline reads: set from the command's read concern by
    /// the handler (`ReadPoint::LATEST` as parsed).
    pub read_point: ReadPoint,
    pub max_time_ms: Option<u64>,
    /// The command's `let` constants, evaluated once at parse time.
    pub lets: CommandLet,
    /// A final `$out` or `$merge`, split off `stages`.
    pub output: Option<OutputStage>,
    /// The namespace the reply and its cursor name: `ns`, or the view
    /// the command named when `ns` is the view's backing collection.
    pub cursor_ns: String,
    /// The command's `collation` (`None`: none given, see `resolve_collation`).
    pub requested_collation: Option<CollationRef>,
    /// The collation the pipeline runs under.
    pub collation: CollationRef,
}

/// The fields of `aggregate` (MongoDB 7.0's `aggregate_command.idl`)
/// besides the generic arguments (and `$`-prefixed fields, which are all
/// internal). Left out, so refused: `needsMerge`, `fromMongos` and
/// `exchange`, which mongos sends to shards (the first two marked
/// `stability: internal`, the last "not expected from users or drivers").
pub(crate) const AGGREGATE_FIELDS: &[&str] = &[
    "aggregate",
    "pipeline",
    "explain",
    "allowDiskUse",
    "cursor",
    "bypassDocumentValidation",
    "collation",
    "hint",
    "let",
    "runtimeConstants",
    "isMapReduceCommand",
    "collectionUUID",
    "encryptionInformation",
    "sampleId",
];

impl AggregateRequest {
    pub fn parse(db: &str, body: &Document) -> Result<AggregateRequest, CommandError> {
        const COMMAND: &str = "aggregate";
        args::check_database_name(db)?;
        let collection = match body.get(COMMAND) {
            Some(Bson::String(_)) => Some(args::collection_name(body, COMMAND)?),
            Some(value) if slipstream_query::compare::as_number(value).is_some() => None,
            _ => {
                return Err(CommandError::new(
                    73,
                    "Invalid command format: the aggregate field must specify a collection name or 1",
                ))
            }
        };
        let requested_collation = crate::exec::collation::requested(body, COMMAND)?;
        let lets = CommandLet::parse(body, COMMAND, bson::DateTime::now())?;
        let items = args::get_array(body, COMMAND, "pipeline")?.ok_or_else(|| {
            CommandError::new(40414, "BSON field 'aggregate.pipeline' is missing but a required field")
        })?;
        let mut stages = items
            .iter()
            .map(|stage| match stage {
                Bson::Document(stage) => Ok(stage.clone()),
                _ => Err(CommandError::new(
                    14,
                    "Each element of the 'pipeline' array must be an object",
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let explain = get_bool(body, COMMAND, "explain")?.unwrap_or(false);
        let batch_size = match get_document(body, COMMAND, "cursor")? {
            Some(cursor) => get_non_negative(cursor, "aggregate.cursor", "batchSize")?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            None if explain => None,
            None => {
                return Err(CommandError::new(
                    9,
                    "The 'cursor' option is required, except for aggregate with the explain argument",
                ))
            }
        };
        let output = OutputStage::split(&mut stages, db)?;
        if let Some(output) = &output {
            refuse_linearizable_output(body, output)?;
        }
        let collation = requested_collation.clone().flatten();
        let mut pipeline = Pipeline::parse(&stages, db)?.with_collation(collation.clone());
        if get_bool(body, COMMAND, "allowDiskUse")?.unwrap_or(false) {
            pipeline = pipeline.with_memory_limit(BLOCKING_SORT_ALLOW_DISK_USE_MEMORY_BYTES_MAX);
        }
        let ns = match &collection {
            Some(collection) => namespace(db, collection),
            None => format!("{db}.$cmd.aggregate"),
        };
        let hint = match body.get("hint") {
            None | Some(Bson::Null) => None,
            Some(Bson::Document(hint)) if hint.is_empty() => None,
            Some(hint) => Some(hint.clone()),
        };
        Ok(AggregateRequest {
            collection,
            cursor_ns: ns.clone(),
            ns,
            stages,
            pipeline,
            batch_size,
            explain,
            hint,
            read_point: ReadPoint::LATEST,
            max_time_ms: get_non_negative(body, COMMAND, "maxTimeMS")?.filter(|ms| *ms > 0),
            lets,
            output,
            requested_collation,
            collation,
        })
    }

    /// A pipeline without its own `collation` runs under the collection's
    /// default.
    fn resolve_collation(mut self, engine: &Engine) -> Result<AggregateRequest, CommandError> {
        if self.requested_collation.is_some() || self.collection.is_none() {
            return Ok(self);
        }
        let default = crate::exec::collation::collection_default(engine.collection_info(&self.ns).as_ref())?;
        self.pipeline = self.pipeline.with_collation(default.clone());
        self.collation = default;
        Ok(self)
    }
}

/// MongoDB's `$out` and `$merge` refuse a linearizable read concern (72):
/// a linearizable read is a primary's read followed by a majority no-op,
/// which says nothing of the writes the stage makes.
fn refuse_linearizable_output(body: &Document, output: &OutputStage) -> Result<(), CommandError> {
    let level = body.get_document("readConcern").ok().and_then(|concern| concern.get_str("level").ok());
    if level == Some("linearizable") {
        return Err(CommandError::new(
            72,
            format!("{} cannot be used with a 'linearizable' read concern level", output.stage_name()),
        ));
    }
    Ok(())
}

/// What running a pipeline produced.
pub(crate) struct PipelineRun {
    pub documents: Vec<Document>,
    pub stats: ScanStats,
    /// The plan of the pipeline's input, as `explain` shows it.
    pub input_plan: Document,
}

/// Plans the pipeline's input and runs the pipeline to the end.
pub(crate) fn run_pipeline(
    engine: &Arc<Engine>,
    request: &AggregateRequest,
    start: Instant,
) -> Result<PipelineRun, CommandError> {
    let deadline = request.max_time_ms.map(|ms| start + Duration::from_millis(ms));
    let source = StorageSource {
        engine: Arc::clone(engine),
        read_at: request.read_point.at,
    };
    let variables = request.lets.variables();
    let starts_with_documents = request
        .stages
        .first()
        .is_some_and(|stage| stage.contains_key("$documents"));
    if request.collection.is_some() && starts_with_documents {
        // MongoDB 7.0 runs `$documents` only as a collectionless source.
        return Err(CommandError::new(73, "'$documents' can only be run with {aggregate: 1}"));
    }
    if request.collection.is_none() && starts_with_documents {
        // `{aggregate: 1, pipeline: [{$documents: [...]}, ...]}`: the
        // documents are the pipeline's whole input.
        let documents = request
            .pipeline
            .execute_with_variables(Box::new(std::iter::empty()), &source, variables)?;
        return Ok(PipelineRun {
            documents,
            stats: ScanStats::default(),
            input_plan: doc! {"stage": "QUEUED_DATA"},
        });
    }
    let Some(collection) = &request.collection else {
        // A pipeline that parsed but has no collectionless source stage.
        let first = request
            .stages
            .first()
            .and_then(|stage| stage.keys().next().cloned())
            .unwrap_or_default();
        return Err(CommandError::new(
            73,
            format!("{{aggregate: 1}} is not valid for '{first}'; a collection is required."),
        ));
    };
    let read_at = request.read_point.at;
    // The leading `$match` also filters the scan, so it sees the constants.
    let leading = request
        .lets
        .bind_filter(request.pipeline.leading_match().cloned().unwrap_or_default());
    let db = request.ns.split('.').next().unwrap_or_default();
    if is_oplog(db, collection) {
        let mut input = OplogInput::new(Arc::clone(engine), TsBounds::from_filter(&leading), deadline);
        let documents = request
            .pipeline
            .execute_with_variables(Box::new(&mut input), &source, variables)?;
        let stats = ScanStats {
            keys_examined: 0,
            docs_examined: input.examined,
        };
        let input_plan = doc! {"stage": "COLLSCAN", "filter": leading, "direction": "forward"};
        return Ok(PipelineRun {
            documents,
            stats,
            input_plan,
        });
    }
    let filter = Filter::parse_collated(&leading, request.collation.clone())?;
    let info = engine.collection_info(&request.ns);
    let shape = QueryShape {
        filter_document: &leading,
        filter: &filter,
        sort: None,
        hint: request.hint.as_ref(),
        natural_reverse: None,
    };
    let plan = plan_query(info.as_ref(), &shape)?;
    if plan.eof {
        let documents = request
            .pipeline
            .execute_with_variables(Box::new(std::iter::empty()), &source, variables)?;
        return Ok(PipelineRun {
            documents,
            stats: ScanStats::default(),
            input_plan: plan.winning_plan,
        });
    }
    let reader = engine.reader(read_at)?;
    let mut input = ScanInput::new(plan.scan(&request.ns), reader, filter, deadline);
    let documents = request
        .pipeline
        .execute_with_variables(Box::new(&mut input), &source, variables)?;
    Ok(PipelineRun {
        documents,
        stats: input.stats(),
        input_plan: plan.winning_plan,
    })
}

/// Runs the pipeline on a blocking thread: it may sort and group its whole
/// input, which must not stall the connections served by async workers.
pub(crate) async fn run_pipeline_blocking(
    engine: &Arc<Engine>,
    request: AggregateRequest,
) -> Result<(AggregateRequest, PipelineRun), CommandError> {
    let engine = Arc::clone(engine);
    let start = Instant::now();
    crate::operations::spawn_blocking(move || {
        let run = run_pipeline(&engine, &request, start);
        run.map(|run| (request, run))
    })
    .await
    .map_err(|join_error| CommandError::internal(format!("aggregate failed: {join_error}")))?
}

/// Parses an `aggregate`; on a view, the pipeline runs over the view's
/// backing collection behind the views' own stages.
pub(crate) fn parse_resolving_views(
    engine: &Engine,
    db: &str,
    body: &Document,
) -> Result<AggregateRequest, CommandError> {
    let view = match body.get("aggregate") {
        Some(Bson::String(collection)) => {
            crate::exec::views::resolve(engine, db, collection)?.map(|view| (collection.clone(), view))
        }
        _ => None,
    };
    let Some((view_name, view)) = view else {
        return AggregateRequest::parse(db, body)?.resolve_collation(engine);
    };
    let mut resolved = body.clone();
    resolved.insert("aggregate", view.collection);
    let mut pipeline: Vec<Bson> = view.pipeline.into_iter().map(Bson::Document).collect();
    if let Some(Bson::Array(stages)) = body.get("pipeline") {
        pipeline.extend(stages.iter().cloned());
    }
    resolved.insert("pipeline", pipeline);
    let mut request = AggregateRequest::parse(db, &resolved)?;
    request.cursor_ns = namespace(db, &view_name);
    // The view's stages and the reader's run under the view's collation.
    let collation =
        crate::exec::views::operation_collation(engine, db, &view_name, request.requested_collation.as_ref())?;
    if request.requested_collation.is_none() {
        request.pipeline = request.pipeline.with_collation(collation.clone());
        request.collation = collation;
    }
    Ok(request)
}

/// A change stream needs an oplog that a majority has: MongoDB refuses it
/// on a standalone with 40573 before looking at anything else of the
/// pipeline. (A replica set member answers CommandNotSupported for now,
/// from the pipeline parser.)
fn refuse_change_stream_on_standalone(ctx: &CommandContext, body: &Document) -> Result<(), CommandError> {
    let first_stage = match body.get("pipeline") {
        Some(Bson::Array(stages)) => stages.first(),
        _ => None,
    };
    let opens_change_stream =
        matches!(first_stage, Some(Bson::Document(stage)) if stage.keys().next().is_some_and(|name| name == "$changeStream"));
    if opens_change_stream && !ctx.state.topology.is_replica_set() {
        return Err(CommandError::new(40573, "The $changeStream stage is only supported on replica sets"));
    }
    Ok(())
}

/// What an `aggregate` does to data: a pipeline ending in `$out` or
/// `$merge` writes (a primary only), any other reads.
pub fn access(body: &Document) -> CommandAccess {
    let last_stage = match body.get("pipeline") {
        Some(Bson::Array(stages)) => stages.last(),
        _ => None,
    };
    let writes = match last_stage {
        Some(Bson::Document(stage)) => stage.keys().next().is_some_and(|name| name == "$out" || name == "$merge"),
        _ => false,
    };
    if writes {
        CommandAccess::Write
    } else {
        CommandAccess::Read
    }
}

pub async fn aggregate(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    // Before anything else, as MongoDB's parse of the command: the
    // diagnostic stages and the change stream check come later.
    args::refuse_unknown_fields(&req.body, "aggregate", AGGREGATE_FIELDS)?;
    if let Some(Bson::String(collection)) = req.body.get("aggregate") {
        args::check_collection_uuid(&ctx.state.engine, &args::namespace(&req.db, collection), &req.body, "aggregate")?;
    }
    refuse_change_stream_on_standalone(ctx, &req.body)?;
    if let Some(result) = super::diagnostic_stages::run(ctx, req).await {
        return result;
    }
    // `$listLocalSessions` becomes `$documents` of the node's sessions.
    let expanded = crate::sessions::commands::expand_list_local_sessions(ctx, req)?;
    let body = expanded.as_ref().unwrap_or(&req.body);
    let mut request = parse_resolving_views(&ctx.state.engine, &req.db, body)?;
    request.read_point = ctx.read_point();
    if request.explain {
        return super::explain::explain_aggregate(ctx, request, "queryPlanner").await;
    }
    let engine = &ctx.state.engine;
    let (request, run) = run_pipeline_blocking(engine, request).await?;
    if let Some(output) = &request.output {
        // A write stage returns no documents: the cursor is empty and
        // closed, whatever the batch size.
        let last_write = off_async_workers(|| output.write(engine, run.documents))?;
        if let OutputStage::Out(_) = output {
            // `$out` renamed a new collection over the target, so cursors
            // that read the old target are closed, as after a rename.
            let target = output.target_ns();
            ctx.state.cursors.kill_namespaces(|ns| ns == target);
        }
        ctx.note_write(last_write);
        return Ok(doc! {"cursor": {"firstBatch": [], "id": Bson::Int64(0), "ns": request.cursor_ns}});
    }
    let mut body = CursorBody::Buffered(BufferedResults::new(run.documents, run.stats));
    let limits = BatchLimits::first_batch(request.batch_size, None);
    let timing = BatchTiming {
        deadline: None,
        await_data_wait: Duration::ZERO,
    };
    let (first_batch, finished) = body.next_batch(engine, limits, timing).await?;
    let id = if finished {
        0
    } else {
        let cursor = Cursor {
            ns: request.cursor_ns.clone(),
            no_cursor_timeout: false,
            time_left: None,
            body,
            lsid: None,
            linearizable: false,
            collection: None,
        };
        super::find::register_cursor(ctx, cursor)?
    };
    let mut cursor = doc! {"firstBatch": first_batch, "id": Bson::Int64(id), "ns": request.cursor_ns};
    if let Some(ts) = request.read_point.chosen_snapshot() {
        cursor.insert("atClusterTime", ts.to_bson());
    }
    Ok(doc! {"cursor": cursor})
}
