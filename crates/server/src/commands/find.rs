//! Reads and cursors: `find`, `getMore`, `killCursors`, `count`,
//! `distinct`.
//!
//! `find` parses its arguments into a `FindRequest`, opens the query
//! (`open_find`: plan, then a streaming body that keeps only its plan
//! position, a buffered body for in-memory sorts, or an oplog body), fills
//! the first batch and registers a cursor when results remain. `getMore`
//! checks the cursor out of the manager, fills one batch (a tailable
//! `awaitData` oplog cursor waits for new entries up to `maxTimeMS`), and
//! checks it back in.

mod index_bounds;
mod on_view;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use slipstream_storage::OpTime;
use slipstream_query::collation::{compare_with, Collation, CollationRef};
use slipstream_query::filter::Filter;
use slipstream_query::path::{any_candidate, FieldPath, LeafArrays};
use slipstream_query::projection::Projection;
use slipstream_query::sort::SortSpec;
use slipstream_storage::{CollectionInfo, Engine, ReadAt, Reader};
use slipstream_storage::TimestampBson;

use super::crud::command_let::CommandLet;
use super::{CommandContext, CommandRequest, CommandResult};
use crate::cursor::{Cursor, CursorManager};
use crate::error::CommandError;
use crate::exec::args::{self, get_document, get_i64, get_non_negative, namespace};
use crate::exec::batch::BatchLimits;
use crate::exec::capped::CappedTail;
use crate::exec::cursor_body::{BatchTiming, CursorBody};
use crate::exec::limits::{AWAIT_DATA_DEFAULT_WAIT_MS, REPLY_BATCH_BYTES_MAX};
use crate::exec::oplog::{is_oplog, read_newest, OplogQuery, TsBounds};
use crate::exec::plan::{natural_direction, plan_query, QueryShape};
use crate::exec::query::{
    collect_matches, count_matches, max_time_expired, run_sorted, BufferedResults, StreamingQuery,
};
use crate::exec::read_concern::ReadPoint;
use crate::exec::scan::ScanStats;
use crate::exec::size::value_size;
use crate::exec::source::OplogInput;

/// A parsed `find` (also the inner command of `explain`).
pub(crate) struct FindRequest {
    pub ns: String,
    pub is_oplog: bool,
    pub filter_document: Document,
    pub filter: Filter,
    pub sort_document: Option<Document>,
    pub sort: Option<SortSpec>,
    /// `sort: {$natural: ±1}`: record order, reversed when true.
    pub natural_reverse: Option<bool>,
    pub projection_document: Option<Document>,
    pub projection: Option<Projection>,
    pub hint: Option<Bson>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub batch_size: Option<usize>,
    pub single_batch: bool,
    pub tailable: bool,
    pub await_data: bool,
    pub max_time_ms: Option<u64>,
    pub no_cursor_timeout: bool,
    pub allow_disk_use: bool,
    /// Where the query reads: set from the command's read concern by the
    /// handler (`ReadPoint::LATEST` as parsed).
    pub read_point: ReadPoint,
    /// `min` / `max`: bounds on the hinted index (see `IndexBounds`).
    pub min: Option<Document>,
    pub max: Option<Document>,
    /// The command's `collation` (`None`: the collection default applies,
    /// see `resolve_collation`).
    pub collation: Option<CollationRef>,
}

/// Options MongoDB has that Slipstream refuses with a clear error when set.
fn refuse_unsupported(body: &Document) -> Result<(), CommandError> {
    for field in ["returnKey", "showRecordId", "tailableRetryOnAbort"] {
        if args::get_optional_bool(body, field)? == Some(true) {
            return Err(CommandError::new(
                115,
                format!("find option '{field}' is not supported by Slipstream"),
            ));
        }
    }
    Ok(())
}

/// The fields of `find` (MongoDB 7.0's `find_command.idl`) besides the
/// generic arguments.
const FIND_FIELDS: &[&str] = &[
    "find",
    "filter",
    "projection",
    "sort",
    "hint",
    "skip",
    "limit",
    "batchSize",
    "singleBatch",
    "max",
    "min",
    "returnKey",
    "showRecordId",
    "tailable",
    "oplogReplay",
    "noCursorTimeout",
    "awaitData",
    "allowPartialResults",
    "collation",
    "allowDiskUse",
    "let",
    "readOnce",
    "allowSpeculativeMajorityRead",
    "term",
    "tailableRetryOnAbort",
    "ntoreturn",
    "options",
    "runtimeConstants",
    "collectionUUID",
    "encryptionInformation",
];

impl FindRequest {
    pub fn parse(db: &str, body: &Document) -> Result<FindRequest, CommandError> {
        const COMMAND: &str = "find";
        args::refuse_unknown_fields(body, COMMAND, FIND_FIELDS)?;
        let collection = args::collection_name(body, COMMAND)?;
        args::check_database_name(db)?;
        let collation = crate::exec::collation::requested(body, COMMAND)?;
        refuse_unsupported(body)?;
        // `let` constants reach the filter's `$expr` (see `CommandLet`).
        // Flags read nowhere else are still checked, as MongoDB's parser does.
        for flag in ["allowPartialResults", "readOnce", "allowSpeculativeMajorityRead"] {
            args::get_optional_bool(body, flag)?;
        }
        let lets = CommandLet::parse(body, COMMAND, bson::DateTime::now())?;
        let filter_document = lets.bind_filter(get_document(body, COMMAND, "filter")?.cloned().unwrap_or_default());
        let filter = Filter::parse(&filter_document)?;
        let (sort_document, sort, natural_reverse) = match get_document(body, COMMAND, "sort")? {
            None => (None, None, None),
            Some(sort) if sort.is_empty() => (None, None, None),
            Some(sort) if sort.contains_key("$natural") => {
                if sort.len() != 1 {
                    return Err(CommandError::bad_value(
                        "$natural cannot be combined with other sort fields",
                    ));
                }
                let reverse = natural_direction(sort.get("$natural").unwrap_or(&Bson::Null))?;
                (Some(sort.clone()), None, Some(reverse))
            }
            Some(sort) => (Some(sort.clone()), Some(SortSpec::parse(sort)?), None),
        };
        let projection_document = get_document(body, COMMAND, "projection")?
            .filter(|p| !p.is_empty())
            .cloned();
        let projection = projection_document.as_ref().map(Projection::parse).transpose()?;
        let hint = match body.get("hint") {
            None | Some(Bson::Null) => None,
            Some(Bson::Document(hint)) if hint.is_empty() => None,
            Some(hint) => Some(hint.clone()),
        };
        let skip = get_non_negative(body, COMMAND, "skip")?.unwrap_or(0);
        let mut single_batch = args::get_optional_bool(body, "singleBatch")?.unwrap_or(false);
        let limit = match get_i64(body, COMMAND, "limit")? {
            None | Some(0) => None,
            Some(n) if n < 0 => {
                // A negative limit is the legacy "one batch of at most n".
                single_batch = true;
                Some(n.unsigned_abs())
            }
            Some(n) => Some(n as u64),
        };
        let batch_size =
            get_non_negative(body, COMMAND, "batchSize")?.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let tailable = args::get_optional_bool(body, "tailable")?.unwrap_or(false);
        let await_data = args::get_optional_bool(body, "awaitData")?.unwrap_or(false);
        if await_data && !tailable {
            return Err(CommandError::bad_value(
                "Cannot set 'awaitData' without also setting 'tailable'",
            ));
        }
        if tailable && (sort.is_some() || natural_reverse == Some(true)) {
            return Err(CommandError::bad_value(
                "cannot use tailable option with a sort other than {$natural: 1}",
            ));
        }
        if tailable && single_batch {
            return Err(CommandError::bad_value(
                "cannot use tailable option with singleBatch or a negative limit",
            ));
        }
        let max_time_ms = args::get_max_time_ms(body, COMMAND)?.filter(|ms| *ms > 0);
        Ok(FindRequest {
            is_oplog: is_oplog(db, &collection),
            ns: namespace(db, &collection),
            filter_document,
            filter,
            sort_document,
            sort,
            natural_reverse,
            projection_document,
            projection,
            hint,
            skip,
            limit,
            batch_size,
            single_batch,
            tailable,
            await_data,
            max_time_ms,
            no_cursor_timeout: args::get_optional_bool(body, "noCursorTimeout")?.unwrap_or(false),
            allow_disk_use: args::get_optional_bool(body, "allowDiskUse")?.unwrap_or(false),
            read_point: ReadPoint::LATEST,
            min: get_document(body, COMMAND, "min")?
                .filter(|bound| !bound.is_empty())
                .cloned(),
            max: get_document(body, COMMAND, "max")?
                .filter(|bound| !bound.is_empty())
                .cloned(),
            collation: None,
        }
        .with_collation(collation))
    }

    /// Puts the filter's and sort's string comparisons under `collation`
    /// (`None`: keep the request as it is).
    fn with_collation(mut self, collation: Option<CollationRef>) -> FindRequest {
        if let Some(collation) = collation {
            let filter = std::mem::replace(&mut self.filter, Filter::match_all());
            self.filter = filter.with_collation(collation.clone());
            self.sort = self.sort.take().map(|sort| sort.with_collation(collation.clone()));
            self.collation = Some(collation);
        }
        self
    }

    /// A request without its own `collation` takes the collection's default.
    pub fn resolve_collation(self, engine: &Engine) -> Result<FindRequest, CommandError> {
        if self.collation.is_some() || self.is_oplog {
            return Ok(self);
        }
        let default = crate::exec::collation::collection_default(engine.collection_info(&self.ns).as_ref())?;
        Ok(self.with_collation(Some(default)))
    }

    pub fn deadline(&self, start: Instant) -> Option<Instant> {
        self.max_time_ms.map(|ms| start + Duration::from_millis(ms))
    }
}

/// A query opened for its first batch.
pub(crate) struct OpenedFind {
    pub body: CursorBody,
    /// The plan as `explain` shows it.
    pub winning_plan: Document,
    /// The timestamp a `snapshot` read reads at, reported as `atClusterTime`.
    pub snapshot_ts: Option<slipstream_storage::Timestamp>,
    /// The reader the plan was made with, for the first batch.
    pub reader: Option<Reader>,
}

/// Wraps the access stage of a plan in the stages `explain` shows above
/// it: in-memory SORT, SKIP, LIMIT, PROJECTION.
fn describe_plan(request: &FindRequest, access: Document, in_memory_sort: bool) -> Document {
    let mut plan = access;
    if in_memory_sort {
        let mut sort = doc! {
            "stage": "SORT",
            "sortPattern": request.sort_document.clone().unwrap_or_default(),
            "memLimit": crate::exec::limits::BLOCKING_SORT_MEMORY_BYTES_MAX as i64,
            "type": "simple",
        };
        if let Some(limit) = request.limit {
            sort.insert("limitAmount", request.skip.saturating_add(limit) as i64);
        }
        sort.insert("inputStage", plan);
        plan = sort;
    } else {
        if let Some(limit) = request.limit {
            plan =
                doc! {"stage": "LIMIT", "limitAmount": request.skip.saturating_add(limit) as i64, "inputStage": plan};
        }
    }
    if request.skip > 0 {
        plan = doc! {"stage": "SKIP", "skipAmount": request.skip as i64, "inputStage": plan};
    }
    if let Some(projection) = &request.projection_document {
        plan = doc! {"stage": "PROJECTION_DEFAULT", "transformBy": projection.clone(), "inputStage": plan};
    }
    plan
}

fn collection_scan_stage(request: &FindRequest, reverse: bool) -> Document {
    doc! {
        "stage": "COLLSCAN",
        "filter": request.filter_document.clone(),
        "direction": if reverse { "backward" } else { "forward" },
    }
}

/// Plans `request` and prepares its cursor body. In-memory sorts (and
/// newest-first oplog reads) run here, to the end.
pub(crate) async fn open_find(
    engine: &Arc<Engine>,
    request: &FindRequest,
    deadline: Option<Instant>,
) -> Result<OpenedFind, CommandError> {
    if request.is_oplog {
        return open_oplog_find(engine, request, deadline);
    }
    let info = engine.collection_info(&request.ns);
    if request.tailable {
        return open_capped_tail(request, info.as_ref());
    }
    let shape = QueryShape {
        filter_document: &request.filter_document,
        filter: &request.filter,
        sort: request.sort.as_ref(),
        hint: request.hint.as_ref(),
        natural_reverse: request.natural_reverse,
    };
    let plan = plan_query(info.as_ref(), &shape)?;
    let bounds = index_bounds::IndexBounds::resolve(
        info.as_ref(),
        request.hint.as_ref(),
        request.min.as_ref(),
        request.max.as_ref(),
    )?;
    if plan.eof {
        let winning_plan = describe_plan(request, plan.winning_plan, false);
        return Ok(OpenedFind {
            body: CursorBody::Buffered(BufferedResults::default()),
            winning_plan,
            snapshot_ts: None,
            reader: None,
        });
    }
    let reader = engine.reader(request.read_point.at)?;
    let snapshot_ts = request.read_point.pinned.then(|| reader.read_timestamp());
    let read_at = request.read_point.kept_by_cursor(reader.read_timestamp());
    if let Some(bounds) = bounds {
        return open_bounded_find(request, plan, bounds, reader, snapshot_ts).await;
    }
    match &request.sort {
        Some(sort) if !plan.provides_sort => {
            // The sort reads its whole input: keep it off the async workers.
            let scan = plan.scan(&request.ns);
            let (filter, sort, projection) = (request.filter.clone(), sort.clone(), request.projection.clone());
            let (skip, limit, allow_disk_use) = (request.skip, request.limit, request.allow_disk_use);
            let (documents, stats) = crate::operations::spawn_blocking(move || {
                run_sorted(
                    scan,
                    &reader,
                    &filter,
                    &sort,
                    projection.as_ref(),
                    skip,
                    limit,
                    allow_disk_use,
                    deadline,
                )
            })
            .await
            .map_err(|join_error| CommandError::internal(format!("sort failed: {join_error}")))??;
            Ok(OpenedFind {
                body: CursorBody::Buffered(BufferedResults::new(documents, stats)),
                winning_plan: describe_plan(request, plan.winning_plan, true),
                snapshot_ts,
                reader: None,
            })
        }
        _ => {
            let query = StreamingQuery::new(
                plan.scan(&request.ns),
                request.filter.clone(),
                request.projection.clone(),
                request.skip,
                request.limit,
            );
            Ok(OpenedFind {
                body: CursorBody::Streaming {
                    query,
                    read_at,
                    follows_commit_point: request.read_point.follows_commit_point(),
                },
                winning_plan: describe_plan(request, plan.winning_plan, false),
                snapshot_ts,
                reader: Some(reader),
            })
        }
    }
}

/// A tailable cursor: only on a capped collection (BadValue otherwise, as
/// MongoDB 7.0), read in natural order from its start.
fn open_capped_tail(request: &FindRequest, info: Option<&CollectionInfo>) -> Result<OpenedFind, CommandError> {
    if !info.is_some_and(|info| slipstream_storage::capped::is_capped(&info.options)) {
        return Err(CommandError::bad_value(format!(
            "error processing query: ns={} tailable cursor requested on non capped collection",
            request.ns
        )));
    }
    let tail = CappedTail::new(
        request.ns.clone(),
        request.filter.clone(),
        request.projection.clone(),
        request.skip,
        request.limit,
        request.await_data,
    );
    Ok(OpenedFind {
        body: CursorBody::Capped(tail),
        winning_plan: describe_plan(request, collection_scan_stage(request, false), false),
        snapshot_ts: None,
        reader: None,
    })
}

fn open_oplog_find(
    engine: &Engine,
    request: &FindRequest,
    deadline: Option<Instant>,
) -> Result<OpenedFind, CommandError> {
    // The oplog is in `ts` order, so a sort on `ts` alone is its natural
    // order (`sort({ts: -1}).limit(1)`, the usual way to read its newest
    // entry); other sorts are not implemented.
    let natural_reverse = match request.sort_document.as_ref().filter(|_| request.sort.is_some()) {
        None => request.natural_reverse,
        Some(sort) => match ts_sort_direction(sort) {
            Some(reverse) => Some(reverse),
            None => {
                return Err(CommandError::new(
                    115,
                    "local.oplog.rs can only be sorted by ts or $natural (1 or -1)",
                ))
            }
        },
    };
    if !request.read_point.is_latest() {
        return Err(CommandError::new(
            115,
            "local.oplog.rs is only read at its newest state (readConcern local)",
        ));
    }
    let bounds = TsBounds::from_filter(&request.filter_document);
    if natural_reverse == Some(true) {
        let (documents, examined) = read_newest(
            engine,
            &request.filter,
            bounds,
            request.projection.as_ref(),
            request.skip,
            request.limit,
            deadline,
        )?;
        let stats = ScanStats {
            keys_examined: 0,
            docs_examined: examined,
        };
        return Ok(OpenedFind {
            body: CursorBody::Buffered(BufferedResults::new(documents, stats)),
            winning_plan: describe_plan(request, collection_scan_stage(request, true), false),
            snapshot_ts: None,
            reader: None,
        });
    }
    let query = OplogQuery::new(
        request.filter.clone(),
        bounds,
        request.projection.clone(),
        request.skip,
        request.limit,
        request.tailable,
        request.await_data,
    );
    Ok(OpenedFind {
        body: CursorBody::Oplog(query),
        winning_plan: describe_plan(request, collection_scan_stage(request, false), false),
        snapshot_ts: None,
        reader: None,
    })
}

/// `Some(reverse)` for a sort on `ts` alone (`{ts: 1}` or `{ts: -1}`).
fn ts_sort_direction(sort: &Document) -> Option<bool> {
    let (key, direction) = sort.iter().next().filter(|_| sort.len() == 1)?;
    if key != "ts" {
        return None;
    }
    match direction {
        Bson::Int32(n) => Some(*n < 0),
        Bson::Int64(n) => Some(*n < 0),
        Bson::Double(n) => Some(*n < 0.0),
        _ => None,
    }
}

fn cursor_reply(id: i64, ns: &str, batch_field: &str, documents: Vec<Document>) -> Document {
    doc! {"cursor": {batch_field: documents, "id": Bson::Int64(id), "ns": ns}}
}

/// The `_id` of a `find` that returns at most the one document with that
/// `_id` and asks for nothing a plan or a cursor gives (sort, skip, hint,
/// min/max, an empty first batch, a pinned read timestamp, the oplog):
/// such a read is answered by one lookup, without planning or a cursor.
/// Only scalar `_id` types whose equality is exactly equality of their
/// record keys.
fn point_read_id(request: &FindRequest) -> Option<&Bson> {
    if request.is_oplog
        || request.tailable
        || request.sort_document.is_some()
        || request.hint.is_some()
        || request.min.is_some()
        || request.max.is_some()
        || request.skip > 0
        || request.batch_size == Some(0)
        || !request.read_point.is_latest()
        || request.filter_document.len() != 1
        || request.filter.collation().is_some()
    {
        return None;
    }
    match request.filter_document.get("_id")? {
        id @ (Bson::Int32(_) | Bson::Int64(_) | Bson::String(_) | Bson::ObjectId(_)) => Some(id),
        id @ Bson::Double(value) if !value.is_nan() => Some(id),
        _ => None,
    }
}

/// Answers a point read (see `point_read_id`): the document if it exists
/// and matches, in the first batch of a cursor that is already closed.
fn point_read(ctx: &CommandContext, request: &FindRequest, id: &Bson) -> CommandResult {
    let reader = ctx.state.engine.reader(ReadAt::Latest)?;
    let mut documents = Vec::new();
    if let Some(document) = reader.get(&request.ns, id)? {
        // The lookup found the record key; the filter still decides, as
        // it does after an index scan.
        if request.filter.matches(&document) {
            documents.push(crate::exec::query::project(
                request.projection.as_ref(),
                &request.filter,
                document,
            )?);
        }
    }
    Ok(cursor_reply(0, &request.ns, "firstBatch", documents))
}

pub async fn find(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let start = Instant::now();
    let mut request = FindRequest::parse(&req.db, &req.body)?.resolve_collation(&ctx.state.engine)?;
    args::check_collection_uuid(&ctx.state.engine, &request.ns, &req.body, "find")?;
    request.read_point = ctx.read_point();
    ctx.state.metrics.count_query();
    let collection = request.ns.split_once('.').map_or("", |(_, collection)| collection);
    if !request.is_oplog && crate::exec::views::resolve(&ctx.state.engine, &req.db, collection)?.is_some() {
        return on_view::find(ctx, &req.db, request, &req.body).await;
    }
    if let Some(id) = point_read_id(&request) {
        return point_read(ctx, &request, id);
    }
    let deadline = request.deadline(start);
    let engine = &ctx.state.engine;
    let mut opened = open_find(engine, &request, deadline).await?;
    let limits = BatchLimits::first_batch(request.batch_size, None);
    // The first batch of a tailable cursor never waits (MongoDB's find
    // returns at once; getMore waits).
    let timing = BatchTiming {
        deadline,
        await_data_wait: Duration::ZERO,
    };
    let (documents, finished) = opened
        .body
        .next_batch_on(engine, opened.reader.take(), limits, timing)
        .await?;
    let keep_open = !finished && !request.single_batch;
    let id = if keep_open {
        // A tailable cursor's getMore waits for data instead (maxTimeMS
        // there is the wait), so only other cursors carry the limit on.
        let time_left = match opened.body.is_tailable() {
            true => None,
            false => deadline.map(|deadline| deadline.saturating_duration_since(Instant::now())),
        };
        let cursor = Cursor {
            ns: request.ns.clone(),
            no_cursor_timeout: request.no_cursor_timeout,
            time_left,
            body: opened.body,
            lsid: None,
            linearizable: false,
            collection: None,
        };
        register_cursor(ctx, cursor)?
    } else {
        0
    };
    let mut reply = cursor_reply(id, &request.ns, "firstBatch", documents);
    if let Some(ts) = opened.snapshot_ts {
        if let Ok(cursor) = reply.get_document_mut("cursor") {
            cursor.insert("atClusterTime", ts.to_bson());
        }
    }
    Ok(reply)
}

/// A cursor checked out for one `getMore`. If the command is abandoned
/// while it waits (the connection closed during an awaitData wait), the
/// cursor goes back to the manager unchanged rather than staying marked
/// in use forever: batches are filled synchronously, so at an await point
/// its state is consistent.
struct CheckedOut<'a> {
    cursors: &'a CursorManager,
    id: i64,
    cursor: Option<Cursor<CursorBody>>,
}

impl Drop for CheckedOut<'_> {
    fn drop(&mut self) {
        if let Some(cursor) = self.cursor.take() {
            self.cursors.check_in(self.id, cursor, Instant::now());
        }
    }
}

/// A find with `min`/`max`: the hinted index's matches (sorted if asked),
/// kept when in the bounds, then skip, limit and projection. Runs to the
/// end off the async workers and buffers its results.
async fn open_bounded_find(
    request: &FindRequest,
    plan: crate::exec::plan::PlannedQuery,
    bounds: index_bounds::IndexBounds,
    reader: Reader,
    snapshot_ts: Option<slipstream_storage::Timestamp>,
) -> Result<OpenedFind, CommandError> {
    let winning_plan = describe_plan(request, plan.winning_plan.clone(), request.sort.is_some());
    let ns = request.ns.clone();
    let (filter, sort, projection) = (request.filter.clone(), request.sort.clone(), request.projection.clone());
    let (skip, limit) = (request.skip, request.limit);
    let documents = crate::operations::spawn_blocking(move || -> Result<Vec<Document>, CommandError> {
        let matches = collect_matches(&reader, &ns, &plan, &filter, sort.as_ref(), None)?;
        let mut documents = Vec::new();
        let mut skipped = 0;
        for document in matches {
            if limit.is_some_and(|limit| documents.len() as u64 >= limit) {
                break;
            }
            if !bounds.contains(&document)? {
                continue;
            }
            if skipped < skip {
                skipped += 1;
                continue;
            }
            documents.push(crate::exec::query::project(projection.as_ref(), &filter, document)?);
        }
        Ok(documents)
    })
    .await
    .map_err(|join_error| CommandError::internal(format!("find failed: {join_error}")))??;
    Ok(OpenedFind {
        body: CursorBody::Buffered(BufferedResults::new(documents, ScanStats::default())),
        winning_plan,
        snapshot_ts,
        reader: None,
    })
}

/// Opens a cursor for a later `getMore`; the first one opened starts the
/// node's periodic cursor reaper.
pub(crate) fn register_cursor(ctx: &CommandContext, mut cursor: Cursor<CursorBody>) -> Result<i64, CommandError> {
    // A cursor belongs to the session that opened it, and keeps its read
    // concern's proof of linearizability.
    cursor.lsid = ctx.session_lsid();
    cursor.linearizable = ctx.operation.lock().linearizable;
    cursor.collection = collection_uuid(ctx, &cursor.ns);
    ctx.state
        .cursors
        .start_reaper(Arc::downgrade(&ctx.state), |state| &state.cursors);
    ctx.state.cursors.register(cursor, Instant::now())
}

/// The UUID of the collection `ns` names now (none in `local`, whose
/// cursors tail the oplog or read the member's own documents).
fn collection_uuid(ctx: &CommandContext, ns: &str) -> Option<bson::Uuid> {
    if ns.starts_with("local.") {
        return None;
    }
    ctx.state.engine.collection_uuid(ns)
}

pub async fn get_more(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let arguments = GetMoreArguments::parse(&req.db, &req.body)?;
    let (id, ns, batch_size, max_time_ms) = (arguments.id, arguments.ns, arguments.batch_size, arguments.max_time_ms);
    ctx.state.metrics.count_getmore();
    let start = Instant::now();
    let cursors = &ctx.state.cursors;
    cursors.check_session(id, ctx.session_lsid().as_ref())?;
    let cursor = cursors.check_out(id, &ns, start)?;
    ctx.operation.lock().linearizable = cursor.linearizable;
    if cursor.collection.is_some() && collection_uuid(ctx, &cursor.ns) != cursor.collection {
        cursors.release(id);
        return Err(CommandError::new(
            175,
            format!("PlanExecutor error during getMore :: caused by :: collection {} was dropped or replaced", ns),
        ));
    }
    if max_time_ms.is_some() && !cursor.body.is_await_data() {
        // Checked after the cursor is found, as MongoDB does; the cursor
        // stays open.
        cursors.check_in(id, cursor, start);
        return Err(CommandError::bad_value(
            "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
        ));
    }
    let mut checked_out = CheckedOut {
        cursors,
        id,
        cursor: Some(cursor),
    };
    let checked = checked_out.cursor.as_mut().expect("just checked out");
    let time_left = checked.time_left;
    let body = &mut checked.body;
    if time_left.is_some() && ctx.state.options.enable_test_commands && ctx.state.fail_points.max_time_fires() {
        // The opening command's maxTimeMS covers this getMore too, so the
        // `maxTimeAlwaysTimeOut` fail point reaches it.
        checked_out.cursor.take();
        cursors.release(id);
        return Err(max_time_expired());
    }
    let timing = if body.is_tailable() {
        // For awaitData cursors maxTimeMS is how long to wait for data.
        let wait_ms = max_time_ms.filter(|ms| *ms > 0).unwrap_or(AWAIT_DATA_DEFAULT_WAIT_MS);
        BatchTiming {
            deadline: None,
            await_data_wait: Duration::from_millis(wait_ms),
        }
    } else {
        let requested = max_time_ms.filter(|ms| *ms > 0).map(Duration::from_millis);
        let limit = match (requested, time_left) {
            (Some(requested), Some(left)) => Some(requested.min(left)),
            (requested, left) => requested.or(left),
        };
        let deadline = limit.map(|limit| start + limit);
        BatchTiming {
            deadline,
            await_data_wait: Duration::ZERO,
        }
    };
    // Another member's oplog fetcher: its wait also ends, with an empty
    // batch, when this member's commit point passes the one it knows, so
    // that it learns a new commit point within a round trip.
    let commit_moved = match arguments.last_known_committed {
        Some(known) if matches!(body, CursorBody::Oplog(_)) && body.is_await_data() => {
            Some(ctx.state.topology.commit_point_passed(known))
        }
        _ => None,
    };
    let batch = body.next_batch(&ctx.state.engine, BatchLimits::get_more(batch_size, None), timing);
    let result = match commit_moved {
        // An empty fill leaves the cursor where it was; the wait is the
        // only await point, so giving it up loses nothing.
        Some(commit_moved) => tokio::select! {
            biased;
            result = batch => result,
            () = commit_moved => Ok((Vec::new(), false)),
        },
        None => batch.await,
    };
    let mut cursor = checked_out.cursor.take().expect("still checked out");
    cursor.time_left = time_left.map(|left| left.saturating_sub(start.elapsed()));
    let (documents, finished) = match result {
        Ok(batch) => batch,
        Err(error) => {
            // An error kills the cursor, as in MongoDB.
            cursors.release(id);
            return Err(error);
        }
    };
    let id_out = if finished {
        cursors.release(id);
        0
    } else if cursors.check_in(id, cursor, Instant::now()) {
        id
    } else {
        // Killed while this getMore ran.
        0
    };
    Ok(cursor_reply(id_out, &ns, "nextBatch", documents))
}

/// The arguments of a `getMore`, checked in MongoDB's order: unknown
/// fields, then each field's type, then the values.
struct GetMoreArguments {
    id: i64,
    ns: String,
    /// `None` (or 0, which MongoDB 7.0 takes as "no batch size"): as many
    /// as fit in a reply.
    batch_size: Option<usize>,
    max_time_ms: Option<u64>,
    /// `lastKnownCommittedOpTime` of a member's oplog fetcher.
    last_known_committed: Option<OpTime>,
}

/// The fields of `getMore` besides the generic arguments.
const GET_MORE_FIELDS: &[&str] = &["getMore", "collection", "batchSize", "maxTimeMS", "term", "lastKnownCommittedOpTime"];

impl GetMoreArguments {
    fn parse(db: &str, body: &Document) -> Result<GetMoreArguments, CommandError> {
        const COMMAND: &str = "getMore";
        args::refuse_unknown_fields(body, COMMAND, GET_MORE_FIELDS)?;
        let id = match body.get(COMMAND) {
            Some(Bson::Int64(id)) => *id,
            Some(Bson::Int32(id)) => i64::from(*id),
            Some(other) => {
                return Err(CommandError::new(
                    14,
                    format!(
                        "BSON field 'getMore.getMore' is the wrong type '{}', expected type 'long'",
                        args::type_name(other)
                    ),
                ))
            }
            None => {
                return Err(CommandError::new(
                    40414,
                    "BSON field 'getMore.getMore' is missing but a required field",
                ))
            }
        };
        let collection = match body.get("collection") {
            Some(Bson::String(collection)) => collection.clone(),
            Some(other) => {
                return Err(CommandError::new(
                    14,
                    format!(
                        "BSON field 'getMore.collection' is the wrong type '{}', expected type 'string'",
                        args::type_name(other)
                    ),
                ))
            }
            None => {
                return Err(CommandError::new(
                    40414,
                    "BSON field 'getMore.collection' is missing but a required field",
                ))
            }
        };
        let batch_size = get_non_negative(body, COMMAND, "batchSize")?
            .filter(|n| *n > 0)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let max_time_ms = args::get_max_time_ms(body, COMMAND)?;
        if let Some(term) = body.get("term") {
            if !matches!(term, Bson::Int64(_) | Bson::Int32(_)) {
                return Err(CommandError::new(
                    14,
                    format!("BSON field 'getMore.term' is the wrong type '{}', expected type 'long'", args::type_name(term)),
                ));
            }
        }
        let last_known_committed = match body.get("lastKnownCommittedOpTime") {
            None => None,
            Some(value) => Some(value.as_document().and_then(slipstream_storage::session::parse_optime).ok_or_else(|| {
                CommandError::new(
                    14,
                    "BSON field 'getMore.lastKnownCommittedOpTime' must be an object {ts: <timestamp>, t: <long>}",
                )
            })?),
        };
        args::check_collection_name(&collection)?;
        Ok(GetMoreArguments {
            id,
            ns: namespace(db, &collection),
            batch_size,
            max_time_ms,
            last_known_committed,
        })
    }
}

pub async fn kill_cursors(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "killCursors";
    args::refuse_unknown_fields(&req.body, COMMAND, &["killCursors", "cursors"])?;
    let collection = args::collection_name(&req.body, COMMAND)?;
    let ns = namespace(&req.db, &collection);
    let items = args::get_array(&req.body, COMMAND, "cursors")?.ok_or_else(|| {
        CommandError::new(
            40414,
            "BSON field 'killCursors.cursors' is missing but a required field",
        )
    })?;
    let mut ids = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Bson::Int64(id) => ids.push(*id),
            Bson::Int32(id) => ids.push(i64::from(*id)),
            other => {
                return Err(CommandError::new(
                    14,
                    format!(
                        "BSON field 'killCursors.cursors' holds a '{}', expected type 'long'",
                        args::type_name(other)
                    ),
                ))
            }
        }
    }
    let report = ctx.state.cursors.kill(&ns, &ids, Instant::now());
    let longs = |ids: Vec<i64>| ids.into_iter().map(Bson::Int64).collect::<Vec<_>>();
    Ok(doc! {
        "cursorsKilled": longs(report.killed),
        "cursorsNotFound": longs(report.not_found),
        "cursorsAlive": longs(report.alive),
        "cursorsUnknown": longs(report.unknown),
    })
}

/// A count or length as MongoDB sends it: int32 when it fits.
fn number(n: u64) -> Bson {
    match i32::try_from(n) {
        Ok(small) => Bson::Int32(small),
        Err(_) => Bson::Int64(n as i64),
    }
}

/// `local.oplog.rs`, which the catalog does not list: it is the journal.
const OPLOG_NAMESPACE: &str = "local.oplog.rs";

/// The oplog entries matching `filter`, read within the filter's `ts`
/// bounds; each is handed to `visit` (so that `count` holds none of them).
fn visit_oplog_matches(
    engine: &Arc<Engine>,
    filter_document: &Document,
    filter: &Filter,
    mut visit: impl FnMut(Document),
) -> Result<(), CommandError> {
    let input = OplogInput::new(Arc::clone(engine), TsBounds::from_filter(filter_document), None);
    for entry in input {
        let entry = entry.map_err(CommandError::from)?;
        if filter.matches(&entry) {
            visit(entry);
        }
    }
    Ok(())
}

/// Counts the documents matching a `count` filter, on a blocking thread.
async fn count_documents(
    engine: &Arc<Engine>,
    ns: String,
    filter_document: Document,
    filter: Filter,
    hint: Option<Bson>,
    read_at: ReadAt,
) -> Result<u64, CommandError> {
    let engine = Arc::clone(engine);
    crate::operations::spawn_blocking(move || {
        if ns == OPLOG_NAMESPACE {
            let mut count = 0u64;
            visit_oplog_matches(&engine, &filter_document, &filter, |_| count += 1)?;
            return Ok(count);
        }
        let info = engine.collection_info(&ns);
        let shape = QueryShape {
            filter_document: &filter_document,
            filter: &filter,
            sort: None,
            hint: hint.as_ref(),
            natural_reverse: None,
        };
        let plan = plan_query(info.as_ref(), &shape)?;
        let reader = engine.reader(read_at)?;
        Ok(count_matches(&reader, &ns, &plan, &filter)?.0)
    })
    .await
    .map_err(|join_error| CommandError::internal(format!("count failed: {join_error}")))?
}

/// Documents matching a count/distinct filter, found on a blocking thread
/// (the filter may have to scan the whole collection).
async fn matching_documents(
    engine: &Arc<Engine>,
    ns: String,
    filter_document: Document,
    filter: Filter,
    hint: Option<Bson>,
    read_at: ReadAt,
) -> Result<Vec<Document>, CommandError> {
    let engine = Arc::clone(engine);
    crate::operations::spawn_blocking(move || {
        if ns == OPLOG_NAMESPACE {
            let mut matches = Vec::new();
            visit_oplog_matches(&engine, &filter_document, &filter, |entry| matches.push(entry))?;
            return Ok(matches);
        }
        let info = engine.collection_info(&ns);
        let shape = QueryShape {
            filter_document: &filter_document,
            filter: &filter,
            sort: None,
            hint: hint.as_ref(),
            natural_reverse: None,
        };
        let plan = plan_query(info.as_ref(), &shape)?;
        if plan.eof {
            return Ok(Vec::new());
        }
        let reader = engine.reader(read_at)?;
        collect_matches(&reader, &ns, &plan, &filter, None, None)
    })
    .await
    .map_err(|join_error| CommandError::internal(format!("query failed: {join_error}")))?
}

/// The fields of `count` (MongoDB 7.0's `count_command.idl`) besides the
/// generic arguments.
pub(crate) const COUNT_FIELDS: &[&str] =
    &["count", "query", "limit", "skip", "hint", "collation", "fields", "mirrored", "sampleId", "encryptionInformation"];

/// The fields of `distinct` (MongoDB 7.0's `distinct_command.idl`).
pub(crate) const DISTINCT_FIELDS: &[&str] = &["distinct", "key", "query", "collation", "hint", "mirrored", "sampleId"];

pub async fn count(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "count";
    args::refuse_unknown_fields(&req.body, COMMAND, COUNT_FIELDS)?;
    let collection = args::collection_name(&req.body, COMMAND)?;
    let ns = namespace(&req.db, &collection);
    let collation = crate::exec::collation::requested(&req.body, COMMAND)?;
    let filter_document = get_document(&req.body, COMMAND, "query")?.cloned().unwrap_or_default();
    let collation =
        crate::exec::collation::effective(collation.as_ref(), ctx.state.engine.collection_info(&ns).as_ref())?;
    let filter = Filter::parse_collated(&filter_document, collation)?;
    let skip = get_non_negative(&req.body, COMMAND, "skip")?.unwrap_or(0);
    // A negative limit counts like its absolute value.
    let limit = get_i64(&req.body, COMMAND, "limit")?
        .map(i64::unsigned_abs)
        .filter(|n| *n > 0);
    let hint = req.body.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
    let read_at = ctx.read_point().at;
    let engine = &ctx.state.engine;
    if crate::exec::views::resolve(engine, &req.db, &collection)?.is_some() {
        return on_view::count(ctx, &req.db, &collection, filter_document, skip, limit, &req.body).await;
    }
    let total = if filter.is_empty() && hint.is_none() && ns != OPLOG_NAMESPACE {
        match engine.collection_info(&ns) {
            None => 0,
            Some(_) => engine.reader(read_at)?.count(&ns)?,
        }
    } else {
        count_documents(engine, ns.clone(), filter_document, filter, hint, read_at).await?
    };
    let after_skip = total.saturating_sub(skip);
    let n = limit.map_or(after_skip, |limit| after_skip.min(limit));
    Ok(doc! {"n": number(n)})
}

pub async fn distinct(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "distinct";
    args::refuse_unknown_fields(&req.body, COMMAND, DISTINCT_FIELDS)?;
    let collection = args::collection_name(&req.body, COMMAND)?;
    let ns = namespace(&req.db, &collection);
    let collation = crate::exec::collation::requested(&req.body, COMMAND)?;
    let key = match req.body.get("key") {
        Some(Bson::String(key)) if !key.is_empty() => key.clone(),
        Some(Bson::String(_)) => return Err(CommandError::bad_value("distinct key cannot be empty")),
        Some(other) => {
            return Err(CommandError::new(
                14,
                format!(
                    "BSON field 'distinct.key' is the wrong type '{}', expected type 'string'",
                    args::type_name(other)
                ),
            ))
        }
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field 'distinct.key' is missing but a required field",
            ))
        }
    };
    let filter_document = get_document(&req.body, COMMAND, "query")?.cloned().unwrap_or_default();
    let collation =
        crate::exec::collation::effective(collation.as_ref(), ctx.state.engine.collection_info(&ns).as_ref())?;
    let filter = Filter::parse_collated(&filter_document, collation.clone())?;
    let hint = req.body.get("hint").filter(|hint| !matches!(hint, Bson::Null)).cloned();
    let read_at = ctx.read_point().at;
    if crate::exec::views::resolve(&ctx.state.engine, &req.db, &collection)?.is_some() {
        return on_view::distinct(ctx, &req.db, &collection, &key, filter_document, &req.body).await;
    }
    let documents = matching_documents(&ctx.state.engine, ns, filter_document, filter, hint, read_at).await?;
    let values = distinct_values_collated(&documents, &key, collation.as_deref())?;
    let mut reply = doc! {"values": values};
    if let Some(ts) = ctx.read_point().chosen_snapshot() {
        reply.insert("atClusterTime", ts.to_bson());
    }
    Ok(reply)
}

/// The distinct values `key` reaches in `documents`: arrays along and at
/// the end of the path contribute their elements; values are distinct by
/// BSON comparison (so 1 and 1.0 are one value) and returned in BSON order.
#[cfg(test)]
pub(crate) fn distinct_values(documents: &[Document], key: &str) -> Result<Vec<Bson>, CommandError> {
    distinct_values_collated(documents, key, None)
}

/// `distinct_values` with strings equal and ordered under `collation`
/// (the first of equal values is kept).
fn distinct_values_collated(
    documents: &[Document],
    key: &str,
    collation: Option<&Collation>,
) -> Result<Vec<Bson>, CommandError> {
    let path = FieldPath::new(key);
    let mut values: Vec<Bson> = Vec::new();
    for document in documents {
        any_candidate(document, &path, LeafArrays::ElementsOnly, &mut |candidate| {
            if let Some(value) = candidate.value {
                // An empty array yields `undefined` as a sort key; it has no
                // element to contribute to distinct.
                if !matches!(value, Bson::Undefined) {
                    values.push(value.clone());
                }
            }
            false
        });
    }
    // A stable sort keeps the first of equal values first, and dedup keeps it.
    values.sort_by(|a, b| compare_with(collation, a, b));
    values.dedup_by(|a, b| compare_with(collation, a, b) == std::cmp::Ordering::Equal);
    let bytes: usize = values.iter().map(value_size).sum();
    if bytes > REPLY_BATCH_BYTES_MAX {
        return Err(CommandError::new(
            17217,
            format!("distinct too big, {bytes} bytes; use aggregate with $group instead"),
        ));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_flattens_arrays_and_merges_equal_numbers() {
        let documents = vec![
            doc! {"a": [1, 2, [3]], "b": {"c": "x"}},
            doc! {"a": 1.0, "b": [{"c": "y"}, {"c": "x"}]},
            doc! {"a": [], "b": {}},
            doc! {"z": 1},
        ];
        let a = distinct_values(&documents, "a").unwrap();
        // 1 and 1.0 are one value; a nested array stays whole.
        assert_eq!(
            a,
            vec![Bson::Int32(1), Bson::Int32(2), Bson::Array(vec![Bson::Int32(3)])]
        );
        assert_eq!(
            distinct_values(&documents, "b.c").unwrap(),
            vec![Bson::from("x"), Bson::from("y")]
        );
    }

    #[test]
    fn abandoned_get_more_returns_its_cursor() {
        let cursors: CursorManager = CursorManager::new();
        let now = Instant::now();
        let body = CursorBody::Buffered(BufferedResults::default());
        let id = cursors
            .register(
                Cursor {
                    ns: "db.c".into(),
                    no_cursor_timeout: false,
                    time_left: None,
                    body,
                    lsid: None,
                    linearizable: false,
                    collection: None,
                },
                now,
            )
            .unwrap();
        let cursor = cursors.check_out(id, "db.c", now).unwrap();
        drop(CheckedOut {
            cursors: &cursors,
            id,
            cursor: Some(cursor),
        });
        assert!(cursors.check_out(id, "db.c", now).is_ok());
    }

    #[test]
    fn only_plain_reads_of_one_scalar_id_take_the_point_read() {
        let id_of = |body: Document| {
            let request = FindRequest::parse("db", &body).unwrap();
            point_read_id(&request).cloned()
        };
        assert_eq!(id_of(doc! {"find": "c", "filter": {"_id": 5}}), Some(Bson::Int32(5)));
        assert_eq!(
            id_of(doc! {"find": "c", "filter": {"_id": "k"}, "limit": 1, "singleBatch": true}),
            Some(Bson::String("k".into()))
        );
        assert_eq!(
            id_of(doc! {"find": "c", "filter": {"_id": 5}, "projection": {"a": 1}}),
            Some(Bson::Int32(5))
        );
        for body in [
            doc! {"find": "c", "filter": {"_id": {"$gt": 5}}},
            doc! {"find": "c", "filter": {"_id": 5, "a": 1}},
            doc! {"find": "c", "filter": {"_id": {"a": 1}}},
            doc! {"find": "c", "filter": {"_id": null}},
            doc! {"find": "c", "filter": {"_id": f64::NAN}},
            doc! {"find": "c", "filter": {"a": 5}},
            doc! {"find": "c", "filter": {"_id": 5}, "skip": 1},
            doc! {"find": "c", "filter": {"_id": 5}, "batchSize": 0},
            doc! {"find": "c", "filter": {"_id": 5}, "sort": {"a": 1}},
            doc! {"find": "c", "filter": {"_id": 5}, "hint": {"_id": 1}},
        ] {
            assert_eq!(id_of(body.clone()), None, "{body}");
        }
        // A pinned snapshot read needs a cursor's reader.
        let mut snapshot = FindRequest::parse("db", &doc! {"find": "c", "filter": {"_id": 5}}).unwrap();
        snapshot.read_point = ReadPoint { at: ReadAt::Latest, pinned: true };
        assert_eq!(point_read_id(&snapshot), None);
    }

    #[test]
    fn find_arguments_are_checked() {
        let parse = |body: Document| FindRequest::parse("db", &body);
        assert!(parse(doc! {"find": "c", "limit": -3}).unwrap().single_batch);
        assert_eq!(parse(doc! {"find": "c", "limit": -3}).unwrap().limit, Some(3));
        assert_eq!(parse(doc! {"find": "c", "awaitData": true}).err().unwrap().code, 2);
        assert_eq!(
            parse(doc! {"find": "c", "collation": {"locale": "xx"}})
                .err()
                .unwrap()
                .code,
            2
        );
        assert_eq!(parse(doc! {"find": "c", "min": {"a": 1}}).unwrap().min, Some(doc! {"a": 1}));
        assert_eq!(parse(doc! {"find": "c", "returnKey": true}).err().unwrap().code, 115);
        assert_eq!(parse(doc! {"find": "c", "skip": -1}).err().unwrap().code, 51024);
        assert_eq!(
            parse(doc! {"find": "c", "sort": {"$natural": -1}})
                .unwrap()
                .natural_reverse,
            Some(true)
        );
        assert!(parse(doc! {"find": "oplog.rs"}).is_ok());
        assert!(
            FindRequest::parse("local", &doc! {"find": "oplog.rs"})
                .unwrap()
                .is_oplog
        );
    }
}
