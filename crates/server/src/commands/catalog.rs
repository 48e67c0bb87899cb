//! Catalog commands: `listDatabases`, `listCollections`, `create`, `drop`,
//! `dropDatabase`, `renameCollection`, `collStats`, `dbStats`, `dbHash`,
//! `validate`. Each checks its arguments before it touches the engine.

use std::time::Instant;

use bson::{doc, Bson, Document};
use md5::{Digest, Md5};
use slipstream_query::collation::same_collation;
use slipstream_query::filter::Filter;
use slipstream_storage::{CollectionInfo, OpTime, StorageError};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::plan::key_patterns_equal;
use crate::exec::{args, off_async_workers, views};
use slipstream_storage::Engine;

/// The longest namespace (`db.collection`) MongoDB accepts.
pub const NAMESPACE_LENGTH_MAX: usize = 255;
/// The longest database name MongoDB accepts.
pub const DATABASE_NAME_LENGTH_MAX: usize = 63;

/// `create` options that would change what a collection does and that
/// Slipstream does not implement: refusing them is better than silently
/// ignoring them.
const UNSUPPORTED_CREATE_OPTIONS: &[&str] = &[
    "timeseries",
    "clusteredIndex",
    "changeStreamPreAndPostImages",
    "expireAfterSeconds",
    "encryptedFields",
];

/// `create` options that are accepted and stored but change nothing here.
const INERT_CREATE_OPTIONS: &[&str] = &["storageEngine", "indexOptionDefaults", "autoIndexId", "idIndex", "flags"];

pub fn validate_database_name(db: &str) -> Result<(), CommandError> {
    let bad = db.is_empty()
        || db.len() > DATABASE_NAME_LENGTH_MAX
        || db.chars().any(|c| matches!(c, '/' | '\\' | '.' | ' ' | '"' | '$' | '*' | '<' | '>' | ':' | '|' | '?' | '\0'));
    if bad {
        return Err(CommandError::new(73, format!("Invalid database name: '{db}'")));
    }
    Ok(())
}

/// `db.collection` for a collection name given as the command's value.
pub fn namespace(db: &str, collection: &str) -> Result<String, CommandError> {
    validate_database_name(db)?;
    if collection.is_empty() || collection.contains('\0') || collection.starts_with('.') {
        return Err(CommandError::new(73, format!("Invalid collection name: '{collection}'")));
    }
    if collection.contains('$') {
        return Err(CommandError::new(73, format!("Invalid collection name: '{collection}': '$' is not allowed")));
    }
    let ns = format!("{db}.{collection}");
    if ns.len() > NAMESPACE_LENGTH_MAX {
        return Err(CommandError::new(73, format!("Fully qualified namespace is too long: {ns}")));
    }
    Ok(ns)
}

/// The collection named by the command's first field (`{drop: "c"}`).
fn target_namespace(req: &CommandRequest) -> Result<String, CommandError> {
    match req.body.get(&req.name) {
        Some(Bson::String(collection)) => namespace(&req.db, collection),
        _ => Err(CommandError::new(
            73,
            format!("collection name has invalid type {}", req.body.get(&req.name).map_or("missing".to_owned(), |v| format!("{:?}", v.element_type()))),
        )),
    }
}

/// The part of a namespace after the database.
fn collection_name(ns: &str) -> &str {
    ns.split_once('.').map_or(ns, |(_, collection)| collection)
}

fn scale_of(body: &Document) -> Result<i64, CommandError> {
    let scale = match body.get("scale") {
        None => 1,
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(n)) => *n as i64,
        Some(_) => return Err(CommandError::type_mismatch("scale has to be a number")),
    };
    if scale < 1 {
        return Err(CommandError::bad_value("scale has to be >= 1"));
    }
    Ok(scale)
}

/// The reply of a catalog write, noting its OpTime (if it wrote) for the
/// write concern `operation::execute` waits for afterwards.
fn acknowledge(ctx: &CommandContext, last_write: Option<OpTime>, reply: Document) -> CommandResult {
    ctx.note_write(last_write);
    Ok(reply)
}

/// The fields of `listDatabases` (MongoDB 7.0's `list_databases.idl`)
/// besides the generic arguments.
const LIST_DATABASES_FIELDS: &[&str] = &["listDatabases", "nameOnly", "authorizedDatabases", "filter"];

pub async fn list_databases(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "listDatabases", LIST_DATABASES_FIELDS)?;
    if req.db != "admin" {
        return Err(CommandError::new(13, "listDatabases may only be run against the admin database."));
    }
    let name_only = req.body.get_bool("nameOnly").unwrap_or(false);
    let filter = parse_filter(&req.body)?;
    let engine = &ctx.state.engine;
    let mut databases = Vec::new();
    let mut total_size: i64 = 0;
    for db in engine.list_databases() {
        // With `nameOnly` the filter sees only the name, as on MongoDB, and
        // no size is computed: sizes scan every collection's documents.
        if name_only {
            let entry = doc! {"name": db};
            if filter.matches(&entry) {
                databases.push(Bson::Document(entry));
            }
            continue;
        }
        let mut size: i64 = 0;
        for info in engine.list_collections(&db) {
            size += off_async_workers(|| collection_size(ctx, &info.ns))?;
        }
        let entry = doc! {"name": db.clone(), "sizeOnDisk": size, "empty": size == 0};
        if !filter.matches(&entry) {
            continue;
        }
        total_size += size;
        databases.push(Bson::Document(entry));
    }
    if name_only {
        return Ok(doc! {"databases": databases});
    }
    Ok(doc! {"databases": databases, "totalSize": total_size, "totalSizeMb": total_size / (1024 * 1024)})
}

/// Data plus estimated index bytes of one collection.
fn collection_size(ctx: &CommandContext, ns: &str) -> Result<i64, CommandError> {
    match ctx.state.engine.collection_stats(ns) {
        Ok(stats) => Ok(stats.data_size_bytes as i64 + index_bytes_estimate(&stats.index_key_counts)),
        Err(StorageError::NamespaceNotFound(_)) => Ok(0),
        Err(err) => Err(err.into()),
    }
}

/// Bytes the index entries of one index take, estimated: the engine counts
/// keys, not bytes, so `collStats` reports this estimate (16 bytes of key
/// and record id per entry) as MongoDB's own sizes are also storage
/// estimates.
const INDEX_ENTRY_BYTES_ESTIMATE: i64 = 16;

fn index_bytes_estimate(index_key_counts: &[(String, u64)]) -> i64 {
    index_key_counts.iter().map(|(_, keys)| *keys as i64 * INDEX_ENTRY_BYTES_ESTIMATE).sum()
}

fn parse_filter(body: &Document) -> Result<Filter, CommandError> {
    match body.get("filter") {
        None | Some(Bson::Null) => Ok(Filter::match_all()),
        Some(Bson::Document(filter)) => Ok(Filter::parse(filter)?),
        Some(_) => Err(CommandError::type_mismatch("filter must be an object")),
    }
}

fn collection_entry(info: &CollectionInfo) -> Document {
    if views::definition(info).is_some() {
        return doc! {
            "name": collection_name(&info.ns),
            "type": "view",
            "options": info.options.clone(),
            "info": {"readOnly": true},
        };
    }
    doc! {
        "name": collection_name(&info.ns),
        "type": "collection",
        "options": info.options.clone(),
        "info": {"readOnly": false, "uuid": info.uuid},
        "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
    }
}

/// The fields of `listCollections` (MongoDB 7.0's `list_collections.idl`)
/// besides the generic arguments.
const LIST_COLLECTIONS_FIELDS: &[&str] =
    &["listCollections", "cursor", "filter", "nameOnly", "authorizedCollections", "includePendingDrops"];

pub async fn list_collections(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "listCollections", LIST_COLLECTIONS_FIELDS)?;
    validate_database_name(&req.db)?;
    let name_only = req.body.get_bool("nameOnly").unwrap_or(false);
    let filter = parse_filter(&req.body)?;
    let mut first_batch = Vec::new();
    let mut entries: Vec<Document> = ctx.state.engine.list_collections(&req.db).iter().map(collection_entry).collect();
    if req.db == "local" && ctx.state.topology.is_replica_set() {
        entries.push(super::oplog_collection::list_entry(&ctx.state.engine));
    }
    for entry in entries {
        if !filter.matches(&entry) {
            continue;
        }
        let entry = if name_only {
            doc! {"name": entry.get_str("name").unwrap_or_default(), "type": entry.get_str("type").unwrap_or("collection")}
        } else {
            entry
        };
        first_batch.push(Bson::Document(entry));
    }
    // Every entry fits the first batch: a database's catalog is small, and
    // returning cursor id 0 means no server-side cursor is left open.
    Ok(doc! {
        "cursor": {
            "id": 0_i64,
            "ns": format!("{}.$cmd.listCollections", req.db),
            "firstBatch": first_batch,
        }
    })
}

/// `create`'s options kept by `exec::capped::create_options`.
const CAPPED_CREATE_OPTIONS: &[&str] = &["capped", "size", "max"];

/// `autoIndexId` and `idIndex` are kept only where they ask for what
/// every collection here has, an `_id` index `{_id: 1}` named `_id_`:
/// `autoIndexId: false` answers as MongoDB 4.0+ does outside `local`
/// (50001), and an `idIndex` of another shape (a collation, another name)
/// 115 rather than a default index the caller did not ask for.
fn check_id_index_options(ns: &str, body: &Document) -> Result<(), CommandError> {
    if args::get_bool(body, "create", "autoIndexId")? == Some(false) {
        return Err(CommandError::new(
            50001,
            format!("autoIndexId:false is not allowed for collection {ns} because it can be replicated"),
        ));
    }
    let Some(value) = body.get("idIndex") else {
        return Ok(());
    };
    let default = match value {
        Bson::Document(spec) => spec.iter().all(|(field, value)| match field.as_str() {
            "key" => matches!(value, Bson::Document(key) if key_patterns_equal(key, &doc! {"_id": 1})),
            "name" => matches!(value, Bson::String(name) if name == "_id_"),
            "v" => matches!(value, Bson::Int32(2) | Bson::Int64(2)) || value.as_f64() == Some(2.0),
            "ns" => true,
            _ => false,
        }),
        _ => false,
    };
    if default {
        return Ok(());
    }
    Err(CommandError::new(
        115,
        format!("create option 'idIndex' other than {{key: {{_id: 1}}, name: \"_id_\"}} is not supported: {value}"),
    ))
}

pub async fn create(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let ns = target_namespace(req)?;
    // MongoDB keeps the capped options first, rounded and adjusted.
    let mut options = crate::exec::capped::create_options(&req.body)?;
    if !options.is_empty() && req.body.contains_key("viewOn") {
        return Err(CommandError::new(72, "'capped' is not a valid option for a view"));
    }
    check_id_index_options(&ns, &req.body)?;
    for (key, value) in req.body.iter().skip(1) {
        if super::admin::is_generic_argument(key) || CAPPED_CREATE_OPTIONS.contains(&key.as_str()) {
            continue;
        }
        if key == "collation" {
            // Kept as MongoDB fills it in (every field); simple is no default.
            if let Some(collation) = crate::exec::collation::for_index(args_collation(&req.body)?, None)? {
                options.insert("collation", collation);
            }
            continue;
        }
        if UNSUPPORTED_CREATE_OPTIONS.contains(&key.as_str()) {
            return Err(CommandError::new(115, format!("create option '{key}' is not supported by Slipstream")));
        }
        let validation_option = crate::exec::validation::check_option(key, value)?;
        if !validation_option && !INERT_CREATE_OPTIONS.contains(&key.as_str()) && key != "viewOn" && key != "pipeline" {
            return Err(CommandError::new(40415, format!("BSON field 'create.{key}' is an unknown field.")));
        }
        options.insert(key.clone(), value.clone());
    }
    let engine = &ctx.state.engine;
    check_view_definition(engine, &req.db, collection_name(&ns), &options)?;
    if let Some(existing) = engine.collection_info(&ns) {
        // MongoDB 7.0 answers a repeated create with identical options
        // with success.
        if existing.options == options {
            return acknowledge(ctx, None, Document::new());
        }
        return Err(CommandError::new(48, format!("Collection {ns} already exists with different options.")));
    }
    let op_time = engine.create_collection(&ns, options)?;
    acknowledge(ctx, Some(op_time), Document::new())
}

/// `create`'s `collation` argument, which must be a document.
fn args_collation(body: &Document) -> Result<Option<&Document>, CommandError> {
    crate::exec::args::get_document(body, "create", "collation")
}

/// A view's `viewOn` and `pipeline` (either alone is an error): `viewOn`
/// a collection name of the same database other than the view itself,
/// not stacking views deeper than `VIEW_DEPTH_MAX`; `pipeline` stages
/// that parse and do not write.
fn check_view_definition(engine: &Engine, db: &str, collection: &str, options: &Document) -> Result<(), CommandError> {
    let view_on = match options.get("viewOn") {
        None => {
            if options.contains_key("pipeline") {
                return Err(CommandError::new(9, "'pipeline' requires 'viewOn' to also be specified"));
            }
            return Ok(());
        }
        Some(Bson::String(view_on)) if !view_on.is_empty() => view_on,
        Some(Bson::String(_)) => return Err(CommandError::bad_value("'viewOn' cannot be empty")),
        Some(_) => return Err(CommandError::type_mismatch("'viewOn' must be a string")),
    };
    namespace(db, view_on)?;
    if view_on == collection {
        return Err(CommandError::new(5, format!("View cycle detected: {collection} -> {collection}")));
    }
    let stages = match options.get("pipeline") {
        None => Vec::new(),
        Some(Bson::Array(stages)) => stages
            .iter()
            .map(|stage| match stage {
                Bson::Document(stage) => Ok(stage.clone()),
                _ => Err(CommandError::type_mismatch("'pipeline' must be an array of objects")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(CommandError::type_mismatch("'pipeline' must be an array of objects")),
    };
    for stage in &stages {
        if let Some(name) = stage.keys().next().filter(|name| matches!(name.as_str(), "$out" | "$merge")) {
            return Err(CommandError::bad_value(format!("{name} cannot be used in a view definition")));
        }
    }
    slipstream_query::aggregate::Pipeline::parse(&stages, db)?;
    check_view_collations(engine, db, collection, view_on, &stages, options)?;
    let depth = views::resolve(engine, db, view_on)?.map_or(0, |_| {
        let mut depth = 0;
        let mut current = view_on.to_owned();
        while let Some((next, _)) = engine.collection_info(&format!("{db}.{current}")).as_ref().and_then(views::definition) {
            depth += 1;
            current = next;
        }
        depth
    });
    if depth + 1 > views::VIEW_DEPTH_MAX {
        return Err(CommandError::new(
            12,
            format!("View depth too deep or view cycle detected. Maximum depth is {}", views::VIEW_DEPTH_MAX),
        ));
    }
    Ok(())
}

/// A view reads other views (the one it is on, those its stages read) only
/// when they share its collation, as MongoDB's view catalog requires (167).
fn check_view_collations(
    engine: &Engine,
    db: &str,
    collection: &str,
    view_on: &str,
    stages: &[Document],
    options: &Document,
) -> Result<(), CommandError> {
    let own = crate::exec::collation::from_options(options)?;
    let mut read = vec![view_on.to_owned()];
    stages.iter().for_each(|stage| views::collections_read(stage, &mut read));
    let conflict = |name: &str| {
        CommandError::new(
            views::OPTION_NOT_SUPPORTED_ON_VIEW,
            format!("View {db}.{collection} has conflicting collation with view {db}.{name}"),
        )
    };
    for name in read {
        let is_view = engine.collection_info(&format!("{db}.{name}")).as_ref().and_then(views::definition).is_some();
        if is_view && !same_collation(views::collation(engine, db, &name)?.as_deref(), own.as_deref()) {
            return Err(conflict(&name));
        }
    }
    // Views already reading this name (created while it did not exist)
    // must share its collation too.
    for info in engine.list_collections(db) {
        let Some((view_on, stages)) = views::definition(&info) else { continue };
        let mut reads = vec![view_on];
        stages.iter().for_each(|stage| views::collections_read(stage, &mut reads));
        let theirs = crate::exec::collation::from_options(&info.options)?;
        if reads.iter().any(|name| name == collection) && !same_collation(theirs.as_deref(), own.as_deref()) {
            return Err(conflict(info.ns.split_once('.').map_or(info.ns.as_str(), |(_, name)| name)));
        }
    }
    Ok(())
}

/// The fields of `drop` (MongoDB 7.0's `drop.idl`) besides the generic
/// arguments.
const DROP_FIELDS: &[&str] = &["drop", "collectionUUID"];

pub async fn drop(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "drop", DROP_FIELDS)?;
    let ns = target_namespace(req)?;
    let engine = &ctx.state.engine;
    args::check_collection_uuid(engine, &ns, &req.body, "drop")?;
    let indexes_before = engine.collection_info(&ns).map(|info| info.indexes.len());
    match engine.drop_collection(&ns) {
        Ok(op_time) => {
            ctx.state.cursors.kill_namespaces(|cursor_ns| cursor_ns == ns);
            let reply = doc! {"nIndexesWas": indexes_before.unwrap_or(1) as i32, "ns": ns};
            acknowledge(ctx, Some(op_time), reply)
        }
        // MongoDB 7.0 treats dropping an absent collection as success.
        Err(StorageError::NamespaceNotFound(_)) => acknowledge(ctx, None, Document::new()),
        Err(err) => Err(err.into()),
    }
}

pub async fn drop_database(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    // MongoDB 7.0's `drop_database.idl` declares no field but the command's.
    args::refuse_unknown_fields(&req.body, "dropDatabase", &["dropDatabase"])?;
    validate_database_name(&req.db)?;
    if matches!(req.db.as_str(), "admin" | "local" | "config") {
        return Err(CommandError::new(20, format!("Dropping the '{}' database is prohibited.", req.db)));
    }
    let dropped = ctx.state.engine.drop_database(&req.db)?;
    let prefix = format!("{}.", req.db);
    ctx.state.cursors.kill_namespaces(|cursor_ns| cursor_ns.starts_with(&prefix));
    match dropped {
        Some(op_time) => acknowledge(ctx, Some(op_time), doc! {"dropped": req.db.clone()}),
        None => acknowledge(ctx, None, Document::new()),
    }
}

/// Splits a full namespace `db.collection` and validates both parts.
fn full_namespace(value: Option<&Bson>, field: &str) -> Result<String, CommandError> {
    let Some(Bson::String(ns)) = value else {
        return Err(CommandError::type_mismatch(format!("'{field}' must be of type String")));
    };
    let Some((db, collection)) = ns.split_once('.') else {
        return Err(CommandError::new(73, format!("Invalid namespace specified '{ns}'")));
    };
    namespace(db, collection)
}

/// The fields of `renameCollection` (MongoDB 7.0's
/// `rename_collection.idl`) besides the generic arguments.
const RENAME_COLLECTION_FIELDS: &[&str] = &["renameCollection", "to", "dropTarget", "stayTemp", "collectionUUID"];

pub async fn rename_collection(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "renameCollection", RENAME_COLLECTION_FIELDS)?;
    if req.db != "admin" {
        return Err(CommandError::new(13, "renameCollection may only be run against the admin database."));
    }
    let from = full_namespace(req.body.get(&req.name), &req.name)?;
    let to = full_namespace(req.body.get("to"), "to")?;
    let drop_target = match req.body.get("dropTarget") {
        None => false,
        Some(Bson::Boolean(drop)) => *drop,
        // MongoDB also accepts a UUID here (drop only that target); the
        // form is not supported.
        Some(_) => return Err(CommandError::new(115, "dropTarget must be a boolean (the UUID form is not supported)")),
    };
    if from == to {
        return Err(CommandError::new(20, "Can't rename a collection to itself"));
    }
    args::check_collection_uuid(&ctx.state.engine, &from, &req.body, "renameCollection")?;
    views::refuse_view(&ctx.state.engine, &from, "renameCollection")?;
    views::refuse_view(&ctx.state.engine, &to, "renameCollection")?;
    let op_time = ctx.state.engine.rename_collection(&from, &to, drop_target)?;
    // Cursors of the renamed collection and of a dropped target are closed.
    ctx.state.cursors.kill_namespaces(|cursor_ns| cursor_ns == from || cursor_ns == to);
    acknowledge(ctx, Some(op_time), Document::new())
}

pub async fn coll_stats(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let ns = target_namespace(req)?;
    views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let scale = scale_of(&req.body)?;
    let engine = &ctx.state.engine;
    if ns == super::oplog_collection::OPLOG_NS && ctx.state.topology.is_replica_set() {
        return Ok(super::oplog_collection::coll_stats(engine, scale));
    }
    let info = engine
        .collection_info(&ns)
        .ok_or_else(|| CommandError::new(26, format!("Collection [{ns}] not found.")))?;
    let stats = off_async_workers(|| engine.collection_stats(&ns))?;
    let count = stats.count as i64;
    let size = stats.data_size_bytes as i64;
    let mut index_sizes = Document::new();
    for (name, keys) in &stats.index_key_counts {
        index_sizes.insert(name.clone(), *keys as i64 * INDEX_ENTRY_BYTES_ESTIMATE / scale);
    }
    let total_index = index_bytes_estimate(&stats.index_key_counts);
    let mut reply = doc! {
        "ns": ns,
        "count": count,
        "size": size / scale,
        "avgObjSize": if count > 0 { size / count } else { 0 },
        "storageSize": size / scale,
        "freeStorageSize": 0_i64,
        "nindexes": info.indexes.len() as i32,
        "indexSizes": index_sizes,
        "totalIndexSize": total_index / scale,
        "totalSize": (size + total_index) / scale,
        "scaleFactor": scale,
    };
    insert_capped_stats(&mut reply, &info.options, scale);
    Ok(reply)
}

/// `capped`, and for a capped collection `max` and `maxSize`, as 7.0's
/// `collStats` reports them (`max` 0 when unset).
pub fn insert_capped_stats(reply: &mut Document, options: &Document, scale: i64) {
    let Some(limits) = slipstream_storage::capped::limits(options) else {
        reply.insert("capped", false);
        return;
    };
    reply.insert("capped", true);
    let max = match options.get("max") {
        Some(Bson::Int32(max)) => i64::from(*max),
        Some(Bson::Int64(max)) => *max,
        _ => 0,
    };
    reply.insert("max", max);
    reply.insert("maxSize", limits.size as i64 / scale);
}

/// The fields of `dbStats` (MongoDB 7.0's `dbcommands.idl`; the command
/// answers to `dbstats` too) besides the generic arguments.
const DB_STATS_FIELDS: &[&str] = &["dbStats", "dbstats", "scale", "freeStorage"];

pub async fn db_stats(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "dbStats", DB_STATS_FIELDS)?;
    validate_database_name(&req.db)?;
    let scale = scale_of(&req.body)?;
    let engine = &ctx.state.engine;
    let (mut collections, mut objects, mut data_size, mut indexes, mut index_size) = (0i64, 0i64, 0i64, 0i64, 0i64);
    let mut views = 0i64;
    for info in engine.list_collections(&req.db) {
        // A view is a catalog entry too; MongoDB counts it apart.
        if info.options.contains_key("viewOn") {
            views += 1;
            continue;
        }
        let stats = match off_async_workers(|| engine.collection_stats(&info.ns)) {
            Ok(stats) => stats,
            // Dropped between the listing and now.
            Err(StorageError::NamespaceNotFound(_)) => continue,
            Err(err) => return Err(err.into()),
        };
        collections += 1;
        objects += stats.count as i64;
        data_size += stats.data_size_bytes as i64;
        indexes += info.indexes.len() as i64;
        index_size += index_bytes_estimate(&stats.index_key_counts);
    }
    Ok(doc! {
        "db": req.db.clone(),
        "collections": collections,
        "views": views,
        "objects": objects,
        "avgObjSize": if objects > 0 { data_size as f64 / objects as f64 } else { 0.0 },
        "dataSize": data_size as f64 / scale as f64,
        "storageSize": data_size as f64 / scale as f64,
        "indexes": indexes,
        "indexSize": index_size as f64 / scale as f64,
        "totalSize": (data_size + index_size) as f64 / scale as f64,
        "scaleFactor": scale,
    })
}

pub async fn db_hash(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    validate_database_name(&req.db)?;
    let started = Instant::now();
    let only: Option<Vec<String>> = match req.body.get("collections") {
        None => None,
        Some(Bson::Array(names)) => Some(
            names
                .iter()
                .map(|name| match name {
                    Bson::String(name) => Ok(name.clone()),
                    _ => Err(CommandError::type_mismatch("collections must be an array of strings")),
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => return Err(CommandError::type_mismatch("collections must be an array")),
    };
    let mut hashes = off_async_workers(|| ctx.state.engine.db_hash(&req.db, only.as_deref()))?;
    // The overall hash covers each name and hash in name order, so
    // two members with the same data give the same md5 whatever order the
    // engine lists collections in.
    hashes.sort();
    let mut overall = Md5::new();
    let mut collections = Document::new();
    let mut capped = Vec::new();
    let mut uuids = Document::new();
    for (name, hash) in &hashes {
        let info = ctx.state.engine.collection_info(&format!("{}.{name}", req.db));
        if let Some(info) = &info {
            // As MongoDB's: a view holds no data and is not hashed.
            if views::definition(info).is_some() {
                continue;
            }
            if slipstream_storage::capped::is_capped(&info.options) {
                capped.push(Bson::String(name.clone()));
            }
            uuids.insert(name.clone(), info.uuid);
        }
        overall.update(name.as_bytes());
        overall.update([0u8]);
        overall.update(hash.as_bytes());
        collections.insert(name.clone(), hash.clone());
    }
    let md5: String = overall.finalize().iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(doc! {
        "host": ctx.state.host_and_port(),
        "collections": collections,
        "capped": capped,
        "uuids": uuids,
        "md5": md5,
        "timeMillis": started.elapsed().as_millis() as i64,
    })
}

/// `validate`'s option combinations MongoDB 7.0 refuses (InvalidOptions),
/// and `repair`, which nothing here does (115) rather than answering as if
/// there were nothing to repair. Every other run checks the whole
/// collection (`full` and `metadata` change nothing; `background` reads
/// from a snapshot anyway). Unknown fields are ignored, as MongoDB 7.0's
/// `validate` (a command without an IDL parser, `commands/validate.cpp`)
/// ignores them.
fn check_validate_options(body: &Document) -> Result<(), CommandError> {
    let flag = |name: &str| args::get_bool(body, "validate", name).map(|value| value.unwrap_or(false));
    for name in ["full", "repair", "enforceFastCount", "metadata", "scandata", "checkBSONConformance"] {
        flag(name)?;
    }
    let background = flag("background")?;
    for other in ["full", "repair", "enforceFastCount"] {
        if background && flag(other)? {
            return Err(CommandError::new(
                72,
                format!(
                    "Running the validate command with both {{ background: true }} and {{ {other}: true }} is not \
                     supported."
                ),
            ));
        }
    }
    if flag("repair")? {
        return Err(CommandError::new(115, "validate with { repair: true } is not supported by Slipstream"));
    }
    Ok(())
}

pub async fn validate(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let ns = target_namespace(req)?;
    check_validate_options(&req.body)?;
    views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine = &ctx.state.engine;
    let info = engine
        .collection_info(&ns)
        .ok_or_else(|| CommandError::new(26, format!("Collection '{ns}' does not exist to validate.")))?;
    let report = off_async_workers(|| engine.validate(&ns))?;
    let mut keys_per_index = Document::new();
    for (name, keys) in &report.keys_per_index {
        keys_per_index.insert(name.clone(), *keys as i64);
    }
    Ok(doc! {
        "ns": ns,
        "uuid": info.uuid,
        "nInvalidDocuments": 0_i64,
        "nNonCompliantDocuments": 0_i64,
        "nrecords": report.records as i64,
        "nIndexes": info.indexes.len() as i32,
        "keysPerIndex": keys_per_index,
        "valid": report.valid,
        "repaired": false,
        "errors": report.errors.clone(),
        "warnings": [],
        "advice": "",
    })
}
