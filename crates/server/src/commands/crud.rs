//! The write commands: `insert`, `update`, `delete`, `findAndModify`.
//!
//! Each statement of a batch takes the engine's `Writer` for itself only,
//! so writes of other connections interleave between statements; within a
//! statement the read-modify-write goes through that one `Writer` (its
//! reader sees every write so far), so it is atomic. Multi-statement
//! batches are ordered (stop at the first error) or unordered (go on), and
//! per-statement failures are reported in `writeErrors` with the reply
//! still `ok: 1`, as MongoDB does.

pub(crate) mod command_let;
mod documents;

use std::sync::Arc;

use bson::{doc, oid::ObjectId, Bson, Document};
use slipstream_query::collation::CollationRef;
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;
use slipstream_query::sort::SortSpec;
use slipstream_query::update::{oplog_update, upsert_seed, Update, UpdateContext};
use slipstream_storage::{Engine, OpTime, RetryImage, StatementSession, Writer};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{self, check_writable, get_array, get_bool, get_document, namespace};
use crate::exec::limits::WRITE_BATCH_STATEMENTS_MAX;
use crate::exec::off_async_workers;
use crate::exec::plan::{plan_query, PlannedQuery, QueryShape};
use crate::exec::query::collect_matches;
use crate::exec::stored_document::check_updated;
use crate::exec::validation::Validation;
use crate::sessions::retryable::{self, RetryableWrite};
use command_let::CommandLet;
use documents::{prepare_insert, with_id_first};

/// One entry of `writeErrors`.
fn write_error(index: usize, error: CommandError) -> Document {
    let mut entry = doc! {"index": index as i32, "code": error.code, "errmsg": error.message};
    for (key, value) in error.extra {
        entry.insert(key, value);
    }
    entry
}

/// The statements array of a write command (`documents`, `updates`,
/// `deletes`), with MongoDB's checks on its presence and size.
fn statements<'a>(body: &'a Document, command: &str, field: &str) -> Result<&'a Vec<Bson>, CommandError> {
    let items = get_array(body, command, field)?.ok_or_else(|| {
        CommandError::new(
            40414,
            format!("BSON field '{command}.{field}' is missing but a required field"),
        )
    })?;
    if items.is_empty() || items.len() > WRITE_BATCH_STATEMENTS_MAX {
        return Err(CommandError::new(
            16,
            format!(
                "Write batch sizes must be between 1 and {WRITE_BATCH_STATEMENTS_MAX}. Got {} operations.",
                items.len()
            ),
        ));
    }
    Ok(items)
}

/// `c` (statement-level constants of update statements) is not supported
/// yet, so it is refused rather than ignored; the command-level `let` is
/// (`CommandLet`).
fn refuse_constants(spec: &Document) -> Result<(), CommandError> {
    for field in ["c"] {
        if let Some(Bson::Document(variables)) = spec.get(field) {
            if !variables.is_empty() {
                return Err(CommandError::new(
                    115,
                    format!("'{field}' variables are not supported by Slipstream"),
                ));
            }
        }
    }
    Ok(())
}

/// The target of a write command, checked.
fn write_target(req: &CommandRequest, command: &str) -> Result<(String, String), CommandError> {
    let collection = args::collection_name(&req.body, command)?;
    check_writable(&req.db, &collection)?;
    Ok((collection.clone(), namespace(&req.db, &collection)))
}

/// The fields of MongoDB 7.0's `WriteCommandRequestBase`
/// (`write_ops.idl`), which `insert`, `update` and `delete` share.
/// `isTimeseriesNamespace` is left out: mongos sets it on the commands it
/// sends to shards (`stability: internal`).
const WRITE_COMMAND_BASE_FIELDS: &[&str] = &[
    "bypassDocumentValidation",
    "ordered",
    "stmtIds",
    "collectionUUID",
    "encryptionInformation",
    "bypassEmptyTsReplacement",
];

/// The top-level fields of `insert`, `update` and `delete` besides the
/// generic arguments: each command's own, then the shared ones.
pub(crate) const INSERT_FIELDS: &[&[&str]] = &[&["insert", "documents"], WRITE_COMMAND_BASE_FIELDS];
pub(crate) const UPDATE_FIELDS: &[&[&str]] =
    &[&["update", "updates", "let", "runtimeConstants"], WRITE_COMMAND_BASE_FIELDS];
pub(crate) const DELETE_FIELDS: &[&[&str]] =
    &[&["delete", "deletes", "let", "runtimeConstants"], WRITE_COMMAND_BASE_FIELDS];

/// Codes of statement errors after which this node can write nothing more
/// (it stopped being primary, or is shutting down).
const BATCH_ENDING_CODES: [i32; 5] = [10107, 11602, 189, 11600, 91];

/// Fails the whole command when a statement met a batch-ending error, as
/// MongoDB fails a batch that a stepdown or shutdown interrupted: a
/// top-level error (labelled `RetryableWriteError` for a retryable write)
/// is what drivers retry on the new primary, where the statements that
/// did run are answered from history; a per-statement write error would
/// reach the application.
fn check_batch_not_interrupted(write_errors: &[Document]) -> Result<(), CommandError> {
    let ending = write_errors
        .iter()
        .find(|error| error.get_i32("code").is_ok_and(|code| BATCH_ENDING_CODES.contains(&code)));
    match ending {
        Some(error) => Err(CommandError::new(
            error.get_i32("code").unwrap_or(10107),
            error.get_str("errmsg").unwrap_or("not primary"),
        )),
        None => Ok(()),
    }
}

/// Adds `writeErrors` to a write reply (the write concern, and its
/// `writeConcernError`, are `operation::execute`'s).
fn finish_reply(mut reply: Document, write_errors: Vec<Document>) -> Document {
    if !write_errors.is_empty() {
        reply.insert("writeErrors", write_errors);
    }
    reply
}

fn parse_filter(
    value: Option<&Bson>,
    command: &str,
    field: &str,
    lets: &CommandLet,
) -> Result<(Document, Filter), CommandError> {
    let document = match value {
        None | Some(Bson::Null) => Document::new(),
        Some(Bson::Document(document)) => lets.bind_filter(document.clone()),
        Some(other) => {
            return Err(CommandError::new(
                14,
                format!(
                    "BSON field '{command}.{field}' is the wrong type '{}', expected type 'object'",
                    args::type_name(other)
                ),
            ))
        }
    };
    let filter = Filter::parse(&document)?;
    Ok((document, filter))
}

/// Plans the filter of one write statement.
fn plan_write(
    engine: &Engine,
    ns: &str,
    filter_document: &Document,
    filter: &Filter,
    sort: Option<&SortSpec>,
    hint: Option<&Bson>,
) -> Result<PlannedQuery, CommandError> {
    let info = engine.collection_info(ns);
    let shape = QueryShape {
        filter_document,
        filter,
        sort,
        hint,
        natural_reverse: None,
    };
    plan_query(info.as_ref(), &shape)
}

// ---------------------------------------------------------------- insert

pub async fn insert(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields_of(&req.body, "insert", INSERT_FIELDS)?;
    let (_, ns) = write_target(req, "insert")?;
    args::check_collection_uuid(&ctx.state.engine, &ns, &req.body, "insert")?;
    let documents = statements(&req.body, "insert", "documents")?;
    let ordered = get_bool(&req.body, "insert", "ordered")?.unwrap_or(true);
    // Arguments first, then the catalog, in MongoDB's order.
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine = &ctx.state.engine;
    let validation = Validation::for_command(engine, &ns, &req.body, "insert")?;
    let bypass_empty_ts = get_bool(&req.body, "insert", "bypassEmptyTsReplacement")?.unwrap_or(false);
    let rules = &InsertRules { validation: &validation, fill_empty_timestamps: !bypass_empty_ts };
    // Even one insert may wait for the write lock behind a long statement
    // of another connection, so inserts run off the async workers, except
    // a single document that gets the lock without waiting: then the
    // hand-off of the worker (block_in_place) would cost more than the
    // insert itself.
    let retry = ctx.retryable_write();
    if let Some(retry) = &retry {
        retry.check_statement_count(documents.len())?;
    }
    let totals = match (&retry, documents.as_slice()) {
        (Some(retry), [value]) => insert_single_retryable(engine, &ns, value, retry, rules).await?,
        (None, [value]) => match insert_single_inline(engine, &ns, value, None, rules).await {
            Some(totals) => totals,
            None => off_async_workers(|| run_inserts(engine, &ns, documents, ordered, None, rules))?,
        },
        (retry, _) => {
            off_async_workers(|| run_inserts(engine, &ns, documents, ordered, retry.as_deref(), rules))?
        }
    };
    ctx.state.metrics.count_insert(totals.applied);
    ctx.note_write(totals.last_write);
    check_batch_not_interrupted(&totals.write_errors)?;
    let mut reply = doc! {"n": totals.applied as i32};
    if let Some(retry) = &retry {
        retry.add_retried_ids(&mut reply);
    }
    Ok(finish_reply(reply, totals.write_errors))
}

/// How one `insert` command stores its documents: checked against the
/// target's validator (unless bypassed), and with each top-level empty
/// timestamp but `_id`'s filled by the insert's own (MongoDB's insert
/// does so unless `bypassEmptyTsReplacement`).
struct InsertRules<'a> {
    validation: &'a Validation,
    fill_empty_timestamps: bool,
}

impl InsertRules<'_> {
    fn insert(&self, writer: &mut Writer<'_>, ns: &str, document: Document) -> Result<OpTime, CommandError> {
        Ok(if self.fill_empty_timestamps {
            writer.insert_filling_empty_timestamps(ns, document)?
        } else {
            writer.insert(ns, document)?
        })
    }
}

/// What a batch of write statements did.
#[derive(Default)]
struct WriteTotals {
    /// Documents inserted or deleted.
    applied: u64,
    last_write: Option<OpTime>,
    write_errors: Vec<Document>,
}

/// The statements of a batch; a retryable write's statements that already
/// ran are answered from history instead (IncompleteTransactionHistory
/// fails the command).
fn run_inserts(
    engine: &Engine,
    ns: &str,
    documents: &[Bson],
    ordered: bool,
    retry: Option<&RetryableWrite>,
    rules: &InsertRules<'_>,
) -> Result<WriteTotals, CommandError> {
    let mut totals = WriteTotals::default();
    for (index, value) in documents.iter().enumerate() {
        if let Some(retry) = retry {
            if let Some(entry) = retry.executed(retry.stmt_id(index))? {
                retryable::insert_outcome(entry)?;
                totals.applied += 1;
                continue;
            }
        }
        let session = retry.map(|retry| retry.statement(index)).transpose();
        match session.and_then(|session| insert_one(engine, ns, value, session, rules)) {
            Ok(optime) => {
                totals.applied += 1;
                totals.last_write = Some(optime);
            }
            Err(error) => {
                totals.write_errors.push(write_error(index, error));
                if ordered {
                    break;
                }
            }
        }
    }
    Ok(totals)
}

/// Attempts at the write lock, with a yield to other tasks between them,
/// before a one-document insert moves off the async worker. The holder is
/// usually the other worker's insert, done by the next attempt; a long
/// statement holding the lock costs only these few yields.
const INLINE_INSERT_ATTEMPTS_MAX: usize = 8;

/// Inserts the only document of a one-document `insert` on the async
/// worker if the write lock can be had without blocking; `None` (nothing
/// done) when the lock stays taken.
async fn insert_single_inline(
    engine: &Engine,
    ns: &str,
    value: &Bson,
    session: Option<&StatementSession>,
    rules: &InsertRules<'_>,
) -> Option<WriteTotals> {
    for attempt in 0..INLINE_INSERT_ATTEMPTS_MAX {
        if attempt > 0 {
            tokio::task::yield_now().await;
        }
        if let Some(totals) = insert_if_unlocked(engine, ns, value, session, rules) {
            return Some(totals);
        }
    }
    None
}

/// The one statement of a one-document retryable `insert`: answered from
/// history, or inserted (inline when the write lock is free) with the
/// statement attached. The statement is looked up and prepared once, so
/// that the test-only fail point counts it once.
async fn insert_single_retryable(
    engine: &Engine,
    ns: &str,
    value: &Bson,
    retry: &RetryableWrite,
    rules: &InsertRules<'_>,
) -> Result<WriteTotals, CommandError> {
    let mut totals = WriteTotals::default();
    if let Some(entry) = retry.executed(retry.stmt_id(0))? {
        retryable::insert_outcome(entry)?;
        totals.applied = 1;
        return Ok(totals);
    }
    let session = match retry.statement(0) {
        Ok(session) => session,
        Err(error) => {
            totals.write_errors.push(write_error(0, error));
            return Ok(totals);
        }
    };
    if let Some(totals) = insert_single_inline(engine, ns, value, Some(&session), rules).await {
        return Ok(totals);
    }
    Ok(off_async_workers(|| {
        match insert_one(engine, ns, value, Some(session), rules) {
            Ok(optime) => {
                totals.applied = 1;
                totals.last_write = Some(optime);
            }
            Err(error) => totals.write_errors.push(write_error(0, error)),
        }
        totals
    }))
}

/// One attempt of `insert_single_inline` (synchronous, so that the write
/// lock's guard never lives across an await).
fn insert_if_unlocked(
    engine: &Engine,
    ns: &str,
    value: &Bson,
    session: Option<&StatementSession>,
    rules: &InsertRules<'_>,
) -> Option<WriteTotals> {
    let mut writer = engine.try_writer()?;
    writer.set_session(session.cloned());
    let mut totals = WriteTotals::default();
    let prepared =
        prepare_insert(value).and_then(|document| rules.validation.check_insert(&document).map(|_| document));
    match prepared.and_then(|document| rules.insert(&mut writer, ns, document)) {
        Ok(optime) => {
            totals.applied = 1;
            totals.last_write = Some(optime);
        }
        Err(error) => totals.write_errors.push(write_error(0, error)),
    }
    Some(totals)
}

fn insert_one(
    engine: &Engine,
    ns: &str,
    value: &Bson,
    session: Option<StatementSession>,
    rules: &InsertRules<'_>,
) -> Result<OpTime, CommandError> {
    let document = prepare_insert(value)?;
    rules.validation.check_insert(&document)?;
    let mut writer = engine.writer();
    writer.set_session(session);
    rules.insert(&mut writer, ns, document)
}

// ---------------------------------------------------------------- update

/// One parsed `updates` entry.
struct UpdateStatement {
    filter_document: Document,
    filter: Filter,
    update: Update,
    upsert: bool,
    multi: bool,
    hint: Option<Bson>,
    /// The command's `let` constants and `$$NOW`.
    variables: slipstream_query::expr::Variables,
}

impl UpdateStatement {
    fn parse(value: &Bson, lets: &CommandLet, default_collation: &CollationRef) -> Result<UpdateStatement, CommandError> {
        let Bson::Document(spec) = value else {
            return Err(CommandError::new(14, "update statements must be objects"));
        };
        refuse_constants(spec)?;
        let (filter_document, filter) = parse_filter(spec.get("q"), "update.updates", "q", lets)?;
        let array_filters = array_filters(spec, "update.updates")?;
        let update_spec = spec
            .get("u")
            .ok_or_else(|| CommandError::new(40414, "BSON field 'update.updates.u' is missing but a required field"))?;
        let update = Update::parse(update_spec, array_filters.as_deref())?;
        let upsert = get_bool(spec, "update.updates", "upsert")?.unwrap_or(false);
        let multi = get_bool(spec, "update.updates", "multi")?.unwrap_or(false);
        if multi && update.is_replacement() {
            return Err(CommandError::new(
                9,
                "multi update is not supported for replacement-style update",
            ));
        }
        let collation = crate::exec::collation::requested(spec, "update.updates")?;
        let collation = collation.unwrap_or_else(|| default_collation.clone());
        let filter = filter.with_collation(collation.clone());
        let update = update.with_collation(collation.clone());
        Ok(UpdateStatement {
            filter_document,
            filter,
            update,
            upsert,
            multi,
            hint: hint_of(spec),
            // A pipeline update's expressions compare under the collation.
            variables: lets.variables().clone().with_collation(collation),
        })
    }
}

/// The BSON types a statement field may have.
#[derive(Clone, Copy)]
enum Shape {
    Object,
    ObjectOrArray,
    /// A boolean (numbers are accepted as booleans, as drivers may send them).
    Flag,
    Number,
    Array,
    StringOrObject,
    Any,
}

impl Shape {
    fn admits(self, value: &Bson) -> bool {
        match self {
            Shape::Object => matches!(value, Bson::Document(_)),
            Shape::ObjectOrArray => matches!(value, Bson::Document(_) | Bson::Array(_)),
            Shape::Flag => matches!(
                value,
                Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)
            ),
            Shape::Number => matches!(
                value,
                Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
            ),
            Shape::Array => matches!(value, Bson::Array(_)),
            Shape::StringOrObject => matches!(value, Bson::String(_) | Bson::Document(_)),
            Shape::Any => true,
        }
    }
}

/// One field of a statement: name, shape, required.
type FieldRule = (&'static str, Shape, bool);

const UPDATE_STATEMENT_FIELDS: &[FieldRule] = &[
    ("q", Shape::Object, true),
    ("u", Shape::ObjectOrArray, true),
    ("upsert", Shape::Flag, false),
    ("multi", Shape::Flag, false),
    ("arrayFilters", Shape::Array, false),
    ("hint", Shape::StringOrObject, false),
    ("collation", Shape::Object, false),
    ("c", Shape::Object, false),
    ("upsertSupplied", Shape::Flag, false),
    ("sampleId", Shape::Any, false),
];

const DELETE_STATEMENT_FIELDS: &[FieldRule] = &[
    ("q", Shape::Object, true),
    ("limit", Shape::Number, true),
    ("hint", Shape::StringOrObject, false),
    ("collation", Shape::Object, false),
    ("sampleId", Shape::Any, false),
];

/// Checks the shape of every statement before any runs: like MongoDB's
/// parse of the whole command, a missing, unknown or mistyped field fails
/// the command rather than one statement (so that, e.g., `sort` on an
/// update statement, which MongoDB 7.0 does not know, is an error rather
/// than silently ignored).
fn check_statement_shapes(statements: &[Bson], command: &str, rules: &[FieldRule]) -> Result<(), CommandError> {
    for statement in statements {
        let Bson::Document(spec) = statement else {
            return Err(CommandError::new(
                14,
                format!(
                    "BSON field '{command}' holds a '{}', expected type 'object'",
                    args::type_name(statement)
                ),
            ));
        };
        for (field, value) in spec {
            let Some((_, shape, _)) = rules.iter().find(|(name, _, _)| name == field) else {
                return Err(CommandError::new(
                    40415,
                    format!("BSON field '{command}.{field}' is an unknown field."),
                ));
            };
            if !shape.admits(value) && !matches!(value, Bson::Null) {
                return Err(CommandError::new(
                    14,
                    format!(
                        "BSON field '{command}.{field}' is the wrong type '{}'",
                        args::type_name(value)
                    ),
                ));
            }
        }
        if let Some((field, _, _)) = rules
            .iter()
            .find(|(field, _, required)| *required && !spec.contains_key(field))
        {
            return Err(CommandError::new(
                40414,
                format!("BSON field '{command}.{field}' is missing but a required field"),
            ));
        }
    }
    Ok(())
}

fn hint_of(spec: &Document) -> Option<Bson> {
    match spec.get("hint") {
        None | Some(Bson::Null) => None,
        Some(Bson::Document(hint)) if hint.is_empty() => None,
        Some(Bson::String(hint)) if hint.is_empty() => None,
        Some(hint) => Some(hint.clone()),
    }
}

fn array_filters(spec: &Document, command: &str) -> Result<Option<Vec<Document>>, CommandError> {
    let Some(items) = get_array(spec, command, "arrayFilters")? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|item| match item {
            Bson::Document(filter) => Ok(filter.clone()),
            _ => Err(CommandError::new(14, "arrayFilters entries must be objects")),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// What one update statement did.
#[derive(Default)]
struct UpdateOutcomeCounts {
    matched: u64,
    modified: u64,
    upserted_id: Option<Bson>,
    last_write: Option<OpTime>,
}

pub async fn update(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields_of(&req.body, "update", UPDATE_FIELDS)?;
    let (_, ns) = write_target(req, "update")?;
    args::check_collection_uuid(&ctx.state.engine, &ns, &req.body, "update")?;
    let updates = statements(&req.body, "update", "updates")?;
    check_statement_shapes(updates, "update.updates", UPDATE_STATEMENT_FIELDS)?;
    let ordered = get_bool(&req.body, "update", "ordered")?.unwrap_or(true);
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine = &ctx.state.engine;
    let statement_count = updates.len() as u64;
    let lets = CommandLet::parse(&req.body, "update", bson::DateTime::now())?;
    let retry = ctx.retryable_write();
    if let Some(retry) = &retry {
        retry.check_statement_count(updates.len())?;
    }
    let validation = Validation::for_command(engine, &ns, &req.body, "update")?;
    let totals =
        off_async_workers(|| run_updates(engine, &ns, updates, ordered, &lets, retry.as_deref(), &validation))?;
    ctx.state.metrics.count_update(statement_count);
    ctx.note_write(totals.last_write);
    check_batch_not_interrupted(&totals.write_errors)?;
    let mut reply = doc! {
        "n": (totals.matched + totals.upserted.len() as u64) as i32,
        "nModified": totals.modified as i32,
    };
    if !totals.upserted.is_empty() {
        reply.insert("upserted", totals.upserted);
    }
    if let Some(retry) = &retry {
        retry.add_retried_ids(&mut reply);
    }
    Ok(finish_reply(reply, totals.write_errors))
}

/// What the statements of one `update` command did.
#[derive(Default)]
struct UpdateTotals {
    matched: u64,
    modified: u64,
    upserted: Vec<Document>,
    last_write: Option<OpTime>,
    write_errors: Vec<Document>,
}

fn run_updates(
    engine: &Engine,
    ns: &str,
    updates: &[Bson],
    ordered: bool,
    lets: &CommandLet,
    retry: Option<&RetryableWrite>,
    validation: &Validation,
) -> Result<UpdateTotals, CommandError> {
    let mut totals = UpdateTotals::default();
    let default_collation = crate::exec::collation::collection_default(engine.collection_info(ns).as_ref())?;
    for (index, value) in updates.iter().enumerate() {
        if let Some(retry) = retry {
            if let Some(entry) = retry.executed(retry.stmt_id(index))? {
                match retryable::update_outcome(entry)? {
                    retryable::UpdateOutcome::Modified => {
                        totals.matched += 1;
                        totals.modified += 1;
                    }
                    retryable::UpdateOutcome::Upserted(id) => {
                        totals.upserted.push(doc! {"index": index as i32, "_id": id});
                    }
                }
                continue;
            }
        }
        let mut counts = UpdateOutcomeCounts::default();
        let session = retry.map(|retry| retry.statement(index)).transpose();
        let result = session.and_then(|session| {
            UpdateStatement::parse(value, lets, &default_collation)
                .and_then(|statement| run_update(engine, ns, &statement, session, &mut counts, validation))
        });
        // What a statement wrote before it failed still waits for the write
        // concern, but a failed statement counts in none of the totals
        // (MongoDB's `n` and `nModified` leave it out).
        totals.last_write = counts.last_write.or(totals.last_write);
        if result.is_ok() {
            totals.matched += counts.matched;
            totals.modified += counts.modified;
            if let Some(id) = counts.upserted_id {
                totals.upserted.push(doc! {"index": index as i32, "_id": id});
            }
        }
        if let Err(error) = result {
            totals.write_errors.push(write_error(index, error));
            if ordered {
                break;
            }
        }
    }
    Ok(totals)
}

/// Runs one update statement under one `Writer`. Matches are collected
/// first and then updated, so that a multi-update never meets a document
/// it already moved within an index.
fn run_update(
    engine: &Engine,
    ns: &str,
    statement: &UpdateStatement,
    session: Option<StatementSession>,
    counts: &mut UpdateOutcomeCounts,
    validation: &Validation,
) -> Result<(), CommandError> {
    if session.is_some() && statement.multi {
        return Err(CommandError::new(
            72,
            "Cannot use (or request) retryable writes with multi=true",
        ));
    }
    let plan = plan_write(
        engine,
        ns,
        &statement.filter_document,
        &statement.filter,
        None,
        statement.hint.as_ref(),
    )?;
    let now = bson::DateTime::now();
    let mut writer = engine.writer();
    writer.set_session(session);
    let max = if statement.multi { None } else { Some(1) };
    let matches = collect_matches(&writer.reader(), ns, &plan, &statement.filter, None, max)?;
    for old in matches {
        counts.matched += 1;
        let details = statement.filter.matches_with_details(&old);
        let context = UpdateContext {
            positional: details.array_position,
            now,
            is_upsert_insert: false,
        };
        let outcome = statement
            .update
            .apply_with_variables(&old, &context, &statement.variables)?;
        if !outcome.modified {
            continue;
        }
        check_updated(&outcome.document)?;
        validation.check_update(&old, &outcome.document)?;
        let id = old.get("_id").cloned().unwrap_or(Bson::Null);
        let oplog_form = oplog_update(&old, &outcome.document);
        counts.last_write = Some(writer.update(ns, &id, outcome.document, oplog_form)?);
        counts.modified += 1;
    }
    if counts.matched == 0 && statement.upsert {
        let document = upsert_document(&statement.filter, &statement.update, now, &statement.variables)?;
        validation.check_insert(&document)?;
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        counts.last_write = Some(writer.insert(ns, document)?);
        counts.upserted_id = Some(id);
    }
    Ok(())
}

/// The document an upsert inserts: the filter's equality fields, then the
/// update applied as an insert (`$setOnInsert` included), `_id` first.
fn upsert_document(
    filter: &Filter,
    update: &Update,
    now: bson::DateTime,
    variables: &slipstream_query::expr::Variables,
) -> Result<Document, CommandError> {
    let seed = upsert_seed(&filter.equality_fields())?;
    let context = UpdateContext {
        positional: None,
        now,
        is_upsert_insert: true,
    };
    let outcome = update.apply_with_variables(&seed, &context, variables)?;
    check_updated(&outcome.document)?;
    let document = with_id_first(&outcome.document, || Bson::ObjectId(ObjectId::new()));
    Ok(document)
}

// ---------------------------------------------------------------- delete

struct DeleteStatement {
    filter_document: Document,
    filter: Filter,
    /// `limit: 1`: delete only the first match.
    just_one: bool,
    hint: Option<Bson>,
}

impl DeleteStatement {
    fn parse(value: &Bson, lets: &CommandLet, default_collation: &CollationRef) -> Result<DeleteStatement, CommandError> {
        let Bson::Document(spec) = value else {
            return Err(CommandError::new(14, "delete statements must be objects"));
        };
        let (filter_document, filter) = parse_filter(spec.get("q"), "delete.deletes", "q", lets)?;
        let limit = args::get_i64(spec, "delete.deletes", "limit")?.ok_or_else(|| {
            CommandError::new(
                40414,
                "BSON field 'delete.deletes.limit' is missing but a required field",
            )
        })?;
        if limit != 0 && limit != 1 {
            return Err(CommandError::new(
                9,
                format!("The limit field in delete objects must be 0 or 1. Got {limit}"),
            ));
        }
        let collation = crate::exec::collation::requested(spec, "delete.deletes")?;
        let filter = filter.with_collation(collation.unwrap_or_else(|| default_collation.clone()));
        Ok(DeleteStatement {
            filter_document,
            filter,
            just_one: limit == 1,
            hint: hint_of(spec),
        })
    }
}

pub async fn delete(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields_of(&req.body, "delete", DELETE_FIELDS)?;
    let (_, ns) = write_target(req, "delete")?;
    args::check_collection_uuid(&ctx.state.engine, &ns, &req.body, "delete")?;
    let deletes = statements(&req.body, "delete", "deletes")?;
    check_statement_shapes(deletes, "delete.deletes", DELETE_STATEMENT_FIELDS)?;
    let ordered = get_bool(&req.body, "delete", "ordered")?.unwrap_or(true);
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine = &ctx.state.engine;
    let statement_count = deletes.len() as u64;
    let lets = CommandLet::parse(&req.body, "delete", bson::DateTime::now())?;
    let retry = ctx.retryable_write();
    if let Some(retry) = &retry {
        retry.check_statement_count(deletes.len())?;
    }
    let totals = off_async_workers(|| run_deletes(engine, &ns, deletes, ordered, &lets, retry.as_deref()))?;
    ctx.state.metrics.count_delete(statement_count);
    ctx.note_write(totals.last_write);
    check_batch_not_interrupted(&totals.write_errors)?;
    let mut reply = doc! {"n": totals.applied as i32};
    if let Some(retry) = &retry {
        retry.add_retried_ids(&mut reply);
    }
    Ok(finish_reply(reply, totals.write_errors))
}

fn run_deletes(
    engine: &Engine,
    ns: &str,
    deletes: &[Bson],
    ordered: bool,
    lets: &CommandLet,
    retry: Option<&RetryableWrite>,
) -> Result<WriteTotals, CommandError> {
    let mut totals = WriteTotals::default();
    let default_collation = crate::exec::collation::collection_default(engine.collection_info(ns).as_ref())?;
    for (index, value) in deletes.iter().enumerate() {
        if let Some(retry) = retry {
            if let Some(entry) = retry.executed(retry.stmt_id(index))? {
                retryable::delete_outcome(entry)?;
                totals.applied += 1;
                continue;
            }
        }
        let mut deleted = 0u64;
        let session = retry.map(|retry| retry.statement(index)).transpose();
        let result = session.and_then(|session| {
            DeleteStatement::parse(value, lets, &default_collation)
                .and_then(|statement| run_delete(engine, ns, &statement, session, &mut deleted, &mut totals.last_write))
        });
        // A failed statement counts in no total, as for update.
        if result.is_ok() {
            totals.applied += deleted;
        }
        if let Err(error) = result {
            totals.write_errors.push(write_error(index, error));
            if ordered {
                break;
            }
        }
    }
    Ok(totals)
}

fn run_delete(
    engine: &Engine,
    ns: &str,
    statement: &DeleteStatement,
    session: Option<StatementSession>,
    deleted: &mut u64,
    last_write: &mut Option<OpTime>,
) -> Result<(), CommandError> {
    if session.is_some() && !statement.just_one {
        return Err(CommandError::new(
            72,
            "Cannot use (or request) retryable writes with limit=0",
        ));
    }
    let plan = plan_write(
        engine,
        ns,
        &statement.filter_document,
        &statement.filter,
        None,
        statement.hint.as_ref(),
    )?;
    let mut writer = engine.writer();
    writer.set_session(session);
    let max = if statement.just_one { Some(1) } else { None };
    let matches = collect_matches(&writer.reader(), ns, &plan, &statement.filter, None, max)?;
    for document in matches {
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        *last_write = Some(writer.delete(ns, &id)?);
        *deleted += 1;
    }
    Ok(())
}

// ---------------------------------------------------------------- findAndModify

/// The fields of `findAndModify` (MongoDB 7.0's `write_ops.idl`; the
/// command answers to `findandmodify` too) besides the generic arguments.
/// `batchSize` and `singleBatch` are declared there although they do
/// nothing.
pub(crate) const FIND_AND_MODIFY_FIELDS: &[&str] = &[
    "findAndModify",
    "findandmodify",
    "query",
    "fields",
    "sort",
    "batchSize",
    "singleBatch",
    "hint",
    "collation",
    "arrayFilters",
    "remove",
    "update",
    "upsert",
    "new",
    "bypassDocumentValidation",
    "let",
    "runtimeConstants",
    "encryptionInformation",
    "bypassEmptyTsReplacement",
    "sampleId",
];

/// A parsed `findAndModify`.
struct FindAndModify {
    filter_document: Document,
    filter: Filter,
    sort: Option<SortSpec>,
    /// `None`: `remove: true`.
    update: Option<Update>,
    return_new: bool,
    upsert: bool,
    projection: Option<Projection>,
    hint: Option<Bson>,
    /// The command's `let` constants and `$$NOW`.
    variables: slipstream_query::expr::Variables,
}

impl FindAndModify {
    fn parse(body: &Document, default_collation: &CollationRef) -> Result<FindAndModify, CommandError> {
        const COMMAND: &str = "findAndModify";
        let lets = CommandLet::parse(body, COMMAND, bson::DateTime::now())?;
        let (filter_document, filter) = parse_filter(body.get("query"), COMMAND, "query", &lets)?;
        let sort = match get_document(body, COMMAND, "sort")? {
            Some(sort) if !sort.is_empty() => Some(SortSpec::parse(sort)?),
            _ => None,
        };
        let remove = get_bool(body, COMMAND, "remove")?.unwrap_or(false);
        let return_new = get_bool(body, COMMAND, "new")?.unwrap_or(false);
        let upsert = get_bool(body, COMMAND, "upsert")?.unwrap_or(false);
        let update_spec = body.get("update").filter(|value| !matches!(value, Bson::Null));
        let update = match (remove, update_spec) {
            (true, Some(_)) => return Err(CommandError::new(9, "Cannot specify both an update and remove=true")),
            (true, None) if upsert => {
                return Err(CommandError::new(9, "Cannot specify both upsert=true and remove=true"))
            }
            (true, None) if return_new => {
                return Err(CommandError::new(
                    9,
                    "Cannot specify both new=true and remove=true; 'remove' always returns the deleted document",
                ))
            }
            (true, None) => None,
            (false, None) => {
                return Err(CommandError::new(
                    9,
                    "Either an update or remove=true must be specified",
                ))
            }
            (false, Some(spec)) => {
                let filters = array_filters(body, COMMAND)?;
                Some(Update::parse(spec, filters.as_deref())?)
            }
        };
        let projection = match get_document(body, COMMAND, "fields")? {
            Some(fields) if !fields.is_empty() => Some(Projection::parse(fields)?),
            _ => None,
        };
        let collation = crate::exec::collation::requested(body, COMMAND)?;
        let collation = collation.unwrap_or_else(|| default_collation.clone());
        let filter = filter.with_collation(collation.clone());
        let sort = sort.map(|sort| sort.with_collation(collation.clone()));
        let update = update.map(|update| update.with_collation(collation.clone()));
        Ok(FindAndModify {
            filter_document,
            filter,
            sort,
            update,
            return_new,
            upsert,
            projection,
            hint: hint_of(body),
            variables: lets.variables().clone().with_collation(collation),
        })
    }
}

pub async fn find_and_modify(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "findAndModify", FIND_AND_MODIFY_FIELDS)?;
    let command_name = req.name.as_str();
    let (_, ns) = write_target(req, command_name)?;
    let default_collation =
        crate::exec::collation::collection_default(ctx.state.engine.collection_info(&ns).as_ref())?;
    let request = FindAndModify::parse(&req.body, &default_collation)?;
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine: &Arc<Engine> = &ctx.state.engine;
    let is_update = request.update.is_some();
    let retry = ctx.retryable_write();
    if let Some(retry) = &retry {
        if let Some(reply) = off_async_workers(|| retried_find_and_modify(engine, &request, retry))? {
            return Ok(reply);
        }
    }
    let session = retry.as_ref().map(|retry| retry.statement(0)).transpose()?;
    let validation = Validation::for_command(engine, &ns, &req.body, command_name)?;
    let (reply, last_write) =
        off_async_workers(|| run_find_and_modify(engine, &ns, &request, session, &validation))?;
    if is_update {
        ctx.state.metrics.count_update(1);
    } else {
        ctx.state.metrics.count_delete(1);
    }
    ctx.note_write(last_write);
    Ok(finish_reply(reply, Vec::new()))
}

/// The first outcome of a findAndModify that already ran in this
/// retryable write (`None`: it has not), with `retriedStmtId`.
fn retried_find_and_modify(
    engine: &Arc<Engine>,
    request: &FindAndModify,
    retry: &RetryableWrite,
) -> Result<Option<Document>, CommandError> {
    let stmt_id = retry.stmt_id(0);
    let Some(entry) = retry.executed(stmt_id)? else {
        return Ok(None);
    };
    let image = engine
        .reader(slipstream_storage::ReadAt::Latest)?
        .retry_image(retry.lsid())?;
    let shape = retryable::FindAndModifyShape {
        remove: request.update.is_none(),
        upsert: request.upsert,
        return_new: request.return_new,
    };
    let (last_error, value) = retryable::find_and_modify_outcome(shape, entry, image.as_ref())?;
    let value = match value {
        Some(document) => project_value(request, &document)?,
        None => Bson::Null,
    };
    Ok(Some(
        doc! {"lastErrorObject": last_error, "value": value, "retriedStmtId": stmt_id},
    ))
}

/// `fields` applied to a document findAndModify returns.
fn project_value(request: &FindAndModify, document: &Document) -> Result<Bson, CommandError> {
    match &request.projection {
        None => Ok(Bson::Document(document.clone())),
        Some(projection) => {
            let details = request.filter.matches_with_details(document);
            Ok(Bson::Document(projection.apply(document, Some(&details))?))
        }
    }
}

/// Runs a findAndModify; as a statement of a retryable write (`session`),
/// its update or delete keeps the image a retry answers with.
fn run_find_and_modify(
    engine: &Engine,
    ns: &str,
    request: &FindAndModify,
    session: Option<StatementSession>,
    validation: &Validation,
) -> Result<(Document, Option<OpTime>), CommandError> {
    let plan = plan_write(
        engine,
        ns,
        &request.filter_document,
        &request.filter,
        request.sort.as_ref(),
        request.hint.as_ref(),
    )?;
    let now = bson::DateTime::now();
    let mut writer = engine.writer();
    if session.is_some() {
        let image = if request.update.is_some() && request.return_new {
            RetryImage::Post
        } else {
            RetryImage::Pre
        };
        writer.set_retry_image(Some(image));
    }
    writer.set_session(session);
    let found = collect_matches(
        &writer.reader(),
        ns,
        &plan,
        &request.filter,
        request.sort.as_ref(),
        Some(1),
    )?
    .pop();
    let project = |document: &Document| project_value(request, document);
    let Some(update) = &request.update else {
        // remove: true
        let Some(old) = found else {
            return Ok((doc! {"lastErrorObject": {"n": 0}, "value": Bson::Null}, None));
        };
        let id = old.get("_id").cloned().unwrap_or(Bson::Null);
        let optime = writer.delete(ns, &id)?;
        return Ok((
            doc! {"lastErrorObject": {"n": 1}, "value": project(&old)?},
            Some(optime),
        ));
    };
    match found {
        Some(old) => {
            let details = request.filter.matches_with_details(&old);
            let context = UpdateContext {
                positional: details.array_position,
                now,
                is_upsert_insert: false,
            };
            let outcome = update.apply_with_variables(&old, &context, &request.variables)?;
            let mut last_write = None;
            if outcome.modified {
                check_updated(&outcome.document)?;
                validation.check_update(&old, &outcome.document)?;
                let id = old.get("_id").cloned().unwrap_or(Bson::Null);
                let oplog_form = oplog_update(&old, &outcome.document);
                last_write = Some(writer.update(ns, &id, outcome.document.clone(), oplog_form)?);
            }
            let value = if request.return_new {
                project(&outcome.document)?
            } else {
                project(&old)?
            };
            Ok((
                doc! {"lastErrorObject": {"n": 1, "updatedExisting": true}, "value": value},
                last_write,
            ))
        }
        None if request.upsert => {
            let document = upsert_document(&request.filter, update, now, &request.variables)?;
            validation.check_insert(&document)?;
            let id = document.get("_id").cloned().unwrap_or(Bson::Null);
            let value = if request.return_new {
                project(&document)?
            } else {
                Bson::Null
            };
            let optime = writer.insert(ns, document)?;
            Ok((
                doc! {"lastErrorObject": {"n": 1, "updatedExisting": false, "upserted": id}, "value": value},
                Some(optime),
            ))
        }
        None => Ok((
            doc! {"lastErrorObject": {"n": 0, "updatedExisting": false}, "value": Bson::Null},
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stepdown_fails_the_whole_batch() {
        let duplicate = write_error(0, CommandError::new(11000, "dup"));
        assert!(check_batch_not_interrupted(std::slice::from_ref(&duplicate)).is_ok());
        let stepped_down = write_error(1, CommandError::new(10107, "not primary"));
        let error = check_batch_not_interrupted(&[duplicate, stepped_down]).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (10107, "not primary"));
    }

    #[test]
    fn statement_shapes_fail_the_command() {
        let ok = vec![Bson::Document(doc! {"q": {}, "u": {"$set": {"a": 1}}, "upsert": true})];
        assert!(check_statement_shapes(&ok, "update.updates", UPDATE_STATEMENT_FIELDS).is_ok());
        let sort = vec![Bson::Document(doc! {"q": {}, "u": {}, "sort": {"a": 1}})];
        assert_eq!(
            check_statement_shapes(&sort, "update.updates", UPDATE_STATEMENT_FIELDS)
                .unwrap_err()
                .code,
            40415
        );
        let mistyped = vec![Bson::Document(doc! {"q": 5, "limit": 0})];
        assert_eq!(
            check_statement_shapes(&mistyped, "delete.deletes", DELETE_STATEMENT_FIELDS)
                .unwrap_err()
                .code,
            14
        );
        let missing = vec![Bson::Document(doc! {"q": {}})];
        assert_eq!(
            check_statement_shapes(&missing, "delete.deletes", DELETE_STATEMENT_FIELDS)
                .unwrap_err()
                .code,
            40414
        );
    }
}
