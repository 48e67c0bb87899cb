//! `explain` of `find`, `aggregate`, `count`, `distinct`, `update`,
//! `delete` and `findAndModify`: the plan the planner chose
//! (`queryPlanner.winningPlan`; Slipstream considers one plan, so
//! `rejectedPlans` is empty) and, for the `executionStats` and
//! `allPlansExecution` verbosities, what running it examined and returned.
//! Writes are never performed: their plans are run as reads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_query::sort::SortSpec;
use slipstream_repl::CommandAccess;
use slipstream_storage::{Engine, ReadAt};

use super::aggregate::{run_pipeline_blocking, AggregateRequest};
use super::find::{open_find, FindRequest};
use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{self, namespace};
use crate::exec::batch::BatchLimits;
use crate::exec::cursor_body::BatchTiming;
use crate::exec::plan::{plan_query, QueryShape};
use crate::exec::query::{collect_matches, count_matches};
use crate::exec::scan::ScanStats;

/// How much `explain` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verbosity {
    QueryPlanner,
    ExecutionStats,
    AllPlansExecution,
}

impl Verbosity {
    fn parse(body: &Document) -> Result<Verbosity, CommandError> {
        match body.get("verbosity") {
            None | Some(Bson::Null) => Ok(Verbosity::AllPlansExecution),
            Some(Bson::String(v)) if v == "queryPlanner" => Ok(Verbosity::QueryPlanner),
            Some(Bson::String(v)) if v == "executionStats" => Ok(Verbosity::ExecutionStats),
            Some(Bson::String(v)) if v == "allPlansExecution" => Ok(Verbosity::AllPlansExecution),
            Some(other) => Err(CommandError::bad_value(format!("verbosity string must be one of {{'queryPlanner', 'executionStats', 'allPlansExecution'}}, not {other}"))),
        }
    }

    fn from_name(name: &str) -> Verbosity {
        match name {
            "executionStats" => Verbosity::ExecutionStats,
            "allPlansExecution" => Verbosity::AllPlansExecution,
            _ => Verbosity::QueryPlanner,
        }
    }

    fn executes(self) -> bool {
        self != Verbosity::QueryPlanner
    }
}

fn query_planner(ns: &str, parsed_query: Document, winning_plan: Document) -> Document {
    doc! {
        "namespace": ns,
        "indexFilterSet": false,
        "parsedQuery": parsed_query,
        "winningPlan": winning_plan,
        "rejectedPlans": [],
    }
}

fn execution_stats(returned: u64, stats: ScanStats, elapsed: Duration, winning_plan: &Document) -> Document {
    let mut execution = doc! {
        "executionSuccess": true,
        "nReturned": returned as i64,
        "executionTimeMillis": elapsed.as_millis() as i64,
        "totalKeysExamined": stats.keys_examined as i64,
        "totalDocsExamined": stats.docs_examined as i64,
    };
    execution.insert("executionStages", winning_plan.clone());
    execution
}

fn reply(inner: &Document, planner: Document, execution: Option<Document>, verbosity: Verbosity) -> Document {
    let mut reply = doc! {"explainVersion": "1", "queryPlanner": planner};
    if let Some(mut execution) = execution {
        if verbosity == Verbosity::AllPlansExecution {
            execution.insert("allPlansExecution", Vec::<Bson>::new());
        }
        reply.insert("executionStats", execution);
    }
    reply.insert("command", inner.clone());
    reply
}

/// What an `explain` counts as: the explained command's access, as MongoDB
/// checks it (explaining an `insert` on a secondary is NotWritablePrimary),
/// although explaining writes nothing. An aggregate is a read whatever its
/// last stage: a secondary runs `$out` / `$merge` pipelines too (it hands
/// the write to the primary, `operation.rs`), and their explain writes
/// nothing anywhere (`explain_aggregate` runs the pipeline, never its
/// output stage).
pub fn access(body: &Document) -> CommandAccess {
    match body.get("explain") {
        Some(Bson::Document(inner)) => match inner.keys().next() {
            Some(name) if name == "aggregate" => CommandAccess::Read,
            Some(name) if name != "explain" => super::access_of(name, inner),
            _ => CommandAccess::Read,
        },
        _ => CommandAccess::Read,
    }
}

/// The explained command's own fields, for the commands whose parser is
/// not run by `explain` itself (`find`'s is): MongoDB parses the explained
/// command with its own parser, so an unknown field is refused there too.
fn inner_fields(command: &str) -> Option<(&'static str, &'static [&'static [&'static str]])> {
    match command {
        "aggregate" => Some(("aggregate", &[super::aggregate::AGGREGATE_FIELDS])),
        "count" => Some(("count", &[super::find::COUNT_FIELDS])),
        "distinct" => Some(("distinct", &[super::find::DISTINCT_FIELDS])),
        "update" => Some(("update", super::crud::UPDATE_FIELDS)),
        "delete" => Some(("delete", super::crud::DELETE_FIELDS)),
        "findAndModify" | "findandmodify" => Some(("findAndModify", &[super::crud::FIND_AND_MODIFY_FIELDS])),
        _ => None,
    }
}

/// The fields of `explain` (MongoDB 7.0's `explain.idl`) besides the
/// generic arguments.
const EXPLAIN_FIELDS: &[&str] = &["explain", "verbosity"];

pub async fn explain(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let mut reply = explain_command(ctx, req).await?;
    // Which member answered, as MongoDB's explain says (an operator's way
    // to see where a read preference sent the query).
    reply.insert(
        "serverInfo",
        doc! {
            "host": ctx.state.host_name.clone(),
            "port": i32::from(ctx.state.options.port),
            "version": super::admin::MONGODB_VERSION,
            "gitVersion": "slipstream",
        },
    );
    Ok(reply)
}

async fn explain_command(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "explain", EXPLAIN_FIELDS)?;
    let inner = match req.body.get("explain") {
        Some(Bson::Document(inner)) => inner.clone(),
        _ => return Err(CommandError::new(14, "explain command requires a nested object")),
    };
    let verbosity = Verbosity::parse(&req.body)?;
    let command = inner.keys().next().cloned().unwrap_or_default();
    if let Some((name, fields)) = inner_fields(&command) {
        args::refuse_unknown_fields_of(&inner, name, fields)?;
    }
    if let Some(Bson::String(collection)) = inner.get(&command) {
        let is_view = crate::exec::views::resolve(&ctx.state.engine, &req.db, collection)?.is_some();
        if is_view && command != "aggregate" {
            return Err(CommandError::new(
                115,
                format!("explain of {command} on a view is not supported by Slipstream (explain the aggregate)"),
            ));
        }
    }
    match command.as_str() {
        "find" => explain_find(ctx, &req.db, &inner, verbosity).await,
        "aggregate" => {
            let request = super::aggregate::parse_resolving_views(&ctx.state.engine, &req.db, &inner)?;
            let name = match verbosity {
                Verbosity::QueryPlanner => "queryPlanner",
                Verbosity::ExecutionStats => "executionStats",
                Verbosity::AllPlansExecution => "allPlansExecution",
            };
            explain_aggregate(ctx, request, name).await
        }
        "count" => {
            let filter = args::get_document(&inner, "count", "query")?
                .cloned()
                .unwrap_or_default();
            explain_filter(ctx, &req.db, &inner, "count", filter, None, verbosity, "COUNT")
        }
        "distinct" => {
            let filter = args::get_document(&inner, "distinct", "query")?
                .cloned()
                .unwrap_or_default();
            explain_filter(ctx, &req.db, &inner, "distinct", filter, None, verbosity, "DISTINCT")
        }
        "update" | "delete" => {
            let field = if command == "update" { "updates" } else { "deletes" };
            let first = match args::get_array(&inner, &command, field)?.and_then(|items| items.first()) {
                Some(Bson::Document(statement)) => statement.clone(),
                _ => {
                    return Err(CommandError::bad_value(format!(
                        "explain of {command} needs one statement in '{field}'"
                    )))
                }
            };
            let filter = args::get_document(&first, &command, "q")?.cloned().unwrap_or_default();
            let stage = if command == "update" { "UPDATE" } else { "DELETE" };
            explain_filter(ctx, &req.db, &inner, &command, filter, None, verbosity, stage)
        }
        "findAndModify" | "findandmodify" => {
            let filter = args::get_document(&inner, &command, "query")?
                .cloned()
                .unwrap_or_default();
            let sort = args::get_document(&inner, &command, "sort")?.cloned();
            let stage = if args::get_bool(&inner, &command, "remove")? == Some(true) {
                "DELETE"
            } else {
                "UPDATE"
            };
            explain_filter(ctx, &req.db, &inner, &command, filter, sort, verbosity, stage)
        }
        other => Err(CommandError::new(
            59,
            format!("Explain failed due to unknown command: {other}"),
        )),
    }
}

async fn explain_find(ctx: &CommandContext, db: &str, inner: &Document, verbosity: Verbosity) -> CommandResult {
    let start = Instant::now();
    let engine = &ctx.state.engine;
    let request = FindRequest::parse(db, inner)?.resolve_collation(engine)?;
    let deadline = request.deadline(start);
    let mut opened = open_find(engine, &request, deadline).await?;
    let planner = query_planner(
        &request.ns,
        request.filter_document.clone(),
        opened.winning_plan.clone(),
    );
    let mut execution = None;
    if verbosity.executes() {
        let timing = BatchTiming {
            deadline,
            await_data_wait: Duration::ZERO,
        };
        let mut returned = 0u64;
        let mut first = true;
        loop {
            let limits = if first {
                BatchLimits::first_batch(Some(usize::MAX), None)
            } else {
                BatchLimits::get_more(None, None)
            };
            first = false;
            let (documents, finished) = opened.body.next_batch(engine, limits, timing).await?;
            returned += documents.len() as u64;
            // A tailable cursor never finishes: one batch shows what is there.
            if finished || request.single_batch || opened.body.is_tailable() || documents.is_empty() {
                break;
            }
        }
        execution = Some(execution_stats(
            returned,
            opened.body.stats(),
            start.elapsed(),
            &opened.winning_plan,
        ));
    }
    Ok(reply(inner, planner, execution, verbosity))
}

/// Explains a command that reads through one filter (count, distinct, and
/// the read half of writes).
#[allow(clippy::too_many_arguments)]
fn explain_filter(
    ctx: &CommandContext,
    db: &str,
    inner: &Document,
    command: &str,
    filter_document: Document,
    sort_document: Option<Document>,
    verbosity: Verbosity,
    stage: &str,
) -> CommandResult {
    let start = Instant::now();
    let collection = args::collection_name(inner, command)?;
    let ns = namespace(db, &collection);
    let filter = Filter::parse(&filter_document)?;
    let sort = sort_document
        .as_ref()
        .filter(|s| !s.is_empty())
        .map(SortSpec::parse)
        .transpose()?;
    let engine: &Arc<Engine> = &ctx.state.engine;
    let info = engine.collection_info(&ns);
    let shape = QueryShape {
        filter_document: &filter_document,
        filter: &filter,
        sort: sort.as_ref(),
        hint: inner.get("hint"),
        natural_reverse: None,
    };
    let plan = plan_query(info.as_ref(), &shape)?;
    let winning_plan = doc! {"stage": stage, "inputStage": plan.winning_plan.clone()};
    let planner = query_planner(&ns, filter_document.clone(), winning_plan.clone());
    let mut execution = None;
    if verbosity.executes() {
        let reader = engine.reader(ReadAt::Latest)?;
        let (returned, stats) = match &sort {
            // A sorted findAndModify returns at most one document.
            Some(sort) => {
                let found = collect_matches(&reader, &ns, &plan, &filter, Some(sort), Some(1))?;
                (found.len() as u64, ScanStats { keys_examined: 0, docs_examined: found.len() as u64 })
            }
            None => count_matches(&reader, &ns, &plan, &filter)?,
        };
        execution = Some(execution_stats(returned, stats, start.elapsed(), &winning_plan));
    }
    Ok(reply(inner, planner, execution, verbosity))
}

/// `aggregate` with `explain: true`, or `explain: {aggregate: ...}`.
pub(crate) async fn explain_aggregate(
    ctx: &CommandContext,
    request: AggregateRequest,
    verbosity: &str,
) -> CommandResult {
    let verbosity = Verbosity::from_name(verbosity);
    let start = Instant::now();
    let ns = request.ns.clone();
    let stages = request.stages.clone();
    let leading = request.pipeline.leading_match().cloned().unwrap_or_default();
    let (_, run) = run_pipeline_blocking(&ctx.state.engine, request).await?;
    let planner = query_planner(&ns, leading, run.input_plan.clone());
    let mut cursor_stage = doc! {"queryPlanner": planner.clone()};
    let execution = verbosity
        .executes()
        .then(|| execution_stats(run.documents.len() as u64, run.stats, start.elapsed(), &run.input_plan));
    if let Some(execution) = &execution {
        cursor_stage.insert("executionStats", execution.clone());
    }
    let mut explained_stages: Vec<Bson> = vec![Bson::Document(doc! {"$cursor": cursor_stage})];
    explained_stages.extend(stages.into_iter().map(Bson::Document));
    let mut reply = reply(&doc! {"aggregate": ns.clone()}, planner, execution, verbosity);
    reply.insert("stages", explained_stages);
    Ok(reply)
}
