//! Index commands: `createIndexes`, `listIndexes`, `dropIndexes`.
//!
//! Only btree indexes exist (single and compound, ascending/descending,
//! unique, sparse, multikey); every other index type or option answers a
//! clear error naming it (CannotCreateIndex 67, or
//! InvalidIndexSpecificationOption 197 for unknown fields) rather than
//! building an index that would behave differently from MongoDB's.

use bson::{doc, Bson, Document};
use slipstream_query::index_key::KeyPattern;
use slipstream_repl::concern::{WriteConcern, W};
use slipstream_storage::index_spec::{verdict, Verdict, EXPIRE_AFTER_SECONDS_MAX};
use slipstream_storage::IndexSpec;

use super::{CommandContext, CommandRequest, CommandResult};
use crate::cursor::Cursor;
use crate::error::CommandError;
use crate::exec::args::{self, check_writable, get_array, namespace};
use crate::exec::batch::BatchLimits;
use crate::exec::cursor_body::{BatchTiming, CursorBody};
use crate::exec::off_async_workers;
use crate::exec::plan::key_patterns_equal;
use crate::exec::query::BufferedResults;
use crate::exec::scan::ID_INDEX_NAME;

/// Index options that exist in MongoDB but not in Slipstream.
const UNSUPPORTED_OPTIONS: &[&str] = &[
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
    "bucketSize",
    "wildcardProjection",
    "clustered",
    "prepareUnique",
    "columnstoreProjection",
];

/// Fields of an index specification that are accepted and have no effect.
const IGNORED_OPTIONS: &[&str] = &["background", "ns", "storageEngine", "dropDups"];

fn cannot_create(message: impl Into<String>) -> CommandError {
    CommandError::new(67, message)
}

/// Parses one entry of `indexes`; an index without its own `collation`
/// takes `default_collation` (the collection's, as a full document).
fn parse_index_spec(
    value: &Bson,
    default_collation: &Option<Document>,
    ignore_unknown_options: bool,
) -> Result<IndexSpec, CommandError> {
    let Bson::Document(spec) = value else {
        return Err(CommandError::new(
            14,
            "each index specification must be an object",
        ));
    };
    let key = match spec.get("key") {
        Some(Bson::Document(key)) => key.clone(),
        Some(_) => {
            return Err(CommandError::new(
                14,
                "The 'key' field of an index specification must be an object",
            ))
        }
        None => {
            return Err(CommandError::new(
                9,
                "The 'key' field is a required property of an index specification",
            ))
        }
    };
    KeyPattern::parse(&key)?;
    let name = match spec.get("name") {
        Some(Bson::String(name)) if !name.is_empty() => name.clone(),
        Some(Bson::String(_)) => return Err(cannot_create("index name cannot be empty")),
        Some(_) => {
            return Err(CommandError::new(
                14,
                "The 'name' field of an index specification must be a string",
            ))
        }
        None => {
            return Err(CommandError::new(
                9,
                "The 'name' field is a required property of an index specification",
            ))
        }
    };
    let mut unique = false;
    let mut sparse = false;
    let mut hidden = false;
    let mut collation = default_collation.clone();
    let mut expire_after_seconds = None;
    let mut partial_filter_expression = None;
    for (field, value) in spec {
        match field.as_str() {
            "key" | "name" => {}
            "collation" => {
                let requested = args::get_document(spec, "createIndexes.indexes", "collation")?;
                collation = crate::exec::collation::for_index(requested, None)?;
            }
            "unique" => unique = args::get_bool(spec, "createIndexes.indexes", "unique")?.unwrap_or(false),
            "sparse" => sparse = args::get_bool(spec, "createIndexes.indexes", "sparse")?.unwrap_or(false),
            "hidden" => hidden = args::get_bool(spec, "createIndexes.indexes", "hidden")?.unwrap_or(false),
            "expireAfterSeconds" => expire_after_seconds = Some(parse_expire_after_seconds(spec, &key, value)?),
            "partialFilterExpression" => partial_filter_expression = Some(parse_partial_filter(value)?),
            "v" => match value {
                Bson::Int32(1 | 2) | Bson::Int64(1 | 2) => {}
                Bson::Double(v) if *v == 1.0 || *v == 2.0 => {}
                _ => return Err(cannot_create(format!("index version {value} is not supported"))),
            },
            field if UNSUPPORTED_OPTIONS.contains(&field) => {
                return Err(cannot_create(format!(
                    "index option '{field}' is not supported by Slipstream (index '{name}')"
                )));
            }
            field if IGNORED_OPTIONS.contains(&field) => {}
            // `ignoreUnknownIndexOptions: true`: MongoDB drops them.
            _ if ignore_unknown_options => {}
            field => {
                return Err(CommandError::new(
                    197,
                    format!("The field '{field}' is not valid for an index specification. Specification: {spec}"),
                ))
            }
        }
    }
    if name == ID_INDEX_NAME && !key_patterns_equal(&key, &doc! {"_id": 1}) {
        return Err(cannot_create(
            "the index name '_id_' is reserved for the _id index",
        ));
    }
    if sparse && partial_filter_expression.is_some() {
        return Err(cannot_create(format!(
            "Error in specification {spec} :: caused by :: cannot mix \"partialFilterExpression\" and \"sparse\" options"
        )));
    }
    if name == ID_INDEX_NAME && hidden {
        return Err(CommandError::bad_value("can't hide _id index"));
    }
    if key_patterns_equal(&key, &doc! {"_id": 1}) && (sparse || unique) && name == ID_INDEX_NAME {
        return Err(CommandError::new(
            67,
            "The _id index cannot be sparse, and is always unique",
        ));
    }
    Ok(IndexSpec {
        key,
        unique,
        sparse,
        hidden,
        // The _id index keys records by their bytes (record keys), so it
        // stays simple whatever the collection's default.
        collation: if name == ID_INDEX_NAME { None } else { collation },
        name,
        expire_after_seconds,
        partial_filter_expression,
    })
}

/// Nesting of `$and` / `$or` a partial filter may have (MongoDB 7.0
/// refuses deeper filters with 67 as well).
const PARTIAL_FILTER_DEPTH_MAX: usize = 4;

/// `partialFilterExpression`: a filter built only of what MongoDB 7.0
/// allows there (`$eq`, `$exists: true`, `$gt`, `$gte`, `$lt`, `$lte`,
/// `$type`, `$in`, `$and`, `$or`); anything else is 67.
fn parse_partial_filter(value: &Bson) -> Result<Document, CommandError> {
    let Bson::Document(filter) = value else {
        return Err(CommandError::new(14, "'partialFilterExpression' for an index must be a document"));
    };
    slipstream_query::filter::Filter::parse(filter)?;
    check_partial_filter(filter, 0)?;
    Ok(filter.clone())
}

fn unsupported_in_partial(what: impl std::fmt::Display) -> CommandError {
    cannot_create(format!("unsupported expression in partial index: {what}"))
}

fn check_partial_filter(filter: &Document, depth: usize) -> Result<(), CommandError> {
    for (field, value) in filter {
        match field.as_str() {
            "$and" | "$or" => {
                if depth >= PARTIAL_FILTER_DEPTH_MAX {
                    return Err(unsupported_in_partial(format!("{field} nested more than {PARTIAL_FILTER_DEPTH_MAX} deep")));
                }
                for branch in value.as_array().into_iter().flatten() {
                    if let Bson::Document(branch) = branch {
                        check_partial_filter(branch, depth + 1)?;
                    }
                }
            }
            operator if operator.starts_with('$') => return Err(unsupported_in_partial(operator)),
            path => check_partial_predicate(path, value)?,
        }
    }
    Ok(())
}

/// One path's condition: an equality to a value, or allowed operators.
fn check_partial_predicate(path: &str, value: &Bson) -> Result<(), CommandError> {
    match value {
        Bson::RegularExpression(_) => Err(unsupported_in_partial(format!("{path} regex"))),
        Bson::Document(operators) if operators.keys().next().is_some_and(|key| key.starts_with('$')) => {
            for (operator, argument) in operators {
                match operator.as_str() {
                    "$eq" | "$gt" | "$gte" | "$lt" | "$lte" | "$type" | "$in" => {}
                    "$exists" if slipstream_query::expr::is_truthy(argument) => {}
                    "$exists" => return Err(unsupported_in_partial(format!("$not {path} exists"))),
                    other => return Err(unsupported_in_partial(format!("{path} {other}"))),
                }
                let regex_in_list =
                    matches!(argument, Bson::Array(items) if items.iter().any(|item| matches!(item, Bson::RegularExpression(_))));
                if matches!(argument, Bson::RegularExpression(_)) || regex_in_list {
                    return Err(unsupported_in_partial(format!("{path} regex")));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `expireAfterSeconds` of a new index, checked as MongoDB 7.0's
/// `validateIndexSpecTTL` does: a number (fractions truncated), not
/// negative, within 2^31 - 1, on a single field that is not `_id`.
fn parse_expire_after_seconds(spec: &Document, key: &Document, value: &Bson) -> Result<i64, CommandError> {
    if key_patterns_equal(key, &doc! {"_id": 1}) {
        return Err(CommandError::new(
            197,
            format!("The field 'expireAfterSeconds' is not valid for an _id index specification. Specification: {spec}"),
        ));
    }
    let seconds = match value {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        Bson::Double(n) if n.is_nan() => {
            return Err(cannot_create(format!(
                "TTL index 'expireAfterSeconds' option must not be NaN. Index spec: {spec}"
            )))
        }
        // Saturating, as MongoDB's safeNumberLong.
        Bson::Double(n) => *n as i64,
        Bson::Decimal128(_) => {
            return Err(cannot_create(format!(
                "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number. \
                 Index spec: {spec}"
            )))
        }
        other => {
            return Err(cannot_create(format!(
                "TTL index 'expireAfterSeconds' option must be numeric, but received a type of '{}'. Index spec: {spec}",
                args::type_name(other)
            )))
        }
    };
    if seconds < 0 {
        return Err(cannot_create(format!(
            "TTL index 'expireAfterSeconds' option cannot be less than 0. Index spec: {spec}"
        )));
    }
    if seconds > EXPIRE_AFTER_SECONDS_MAX {
        return Err(cannot_create(format!(
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number. \
             Index spec: {spec}"
        )));
    }
    if key.len() != 1 {
        return Err(cannot_create(format!(
            "TTL indexes are single-field indexes, compound indexes do not support TTL. Index spec: {spec}"
        )));
    }
    Ok(seconds)
}

/// Compares a requested index with the existing ones and with those asked
/// for earlier in the same command: already there (`Ok(true)`), new
/// (`Ok(false)`), or conflicting (85/86). A second spec in one command with
/// the name of the first but another key is the conflict it would be had
/// the first been created by an earlier command, never silently dropped.
fn already_exists<'a>(
    existing: impl IntoIterator<Item = &'a IndexSpec>,
    wanted: &IndexSpec,
) -> Result<bool, CommandError> {
    for index in existing {
        match verdict(index, wanted) {
            Verdict::Unrelated => {}
            Verdict::AlreadyExists => return Ok(true),
            Verdict::Conflict { code, message } => return Err(CommandError::new(code, message)),
        }
    }
    Ok(false)
}

/// The fields of `createIndexes` (MongoDB 7.0's `create_indexes.idl`)
/// besides the generic arguments; `isTimeseriesNamespace`, which mongos
/// sets for shards (`stability: internal`), is left out.
const CREATE_INDEXES_FIELDS: &[&str] = &[
    "createIndexes",
    "v",
    "indexes",
    "ignoreUnknownIndexOptions",
    "commitQuorum",
    "returnOnStart",
    "collectionUUID",
];

pub async fn create_indexes(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "createIndexes";
    args::refuse_unknown_fields(&req.body, COMMAND, CREATE_INDEXES_FIELDS)?;
    let collection = args::collection_name(&req.body, COMMAND)?;
    check_writable(&req.db, &collection)?;
    let ns = namespace(&req.db, &collection);
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    args::check_collection_uuid(&ctx.state.engine, &ns, &req.body, COMMAND)?;
    let items = get_array(&req.body, COMMAND, "indexes")?.ok_or_else(|| {
        CommandError::new(
            40414,
            "BSON field 'createIndexes.indexes' is missing but a required field",
        )
    })?;
    if items.is_empty() {
        return Err(CommandError::bad_value(
            "Must specify at least one index to create",
        ));
    }
    let ignore_unknown_options = args::get_bool(&req.body, COMMAND, "ignoreUnknownIndexOptions")?.unwrap_or(false);
    let commit_quorum = commit_quorum(ctx, &req.body).await?;
    let engine = &ctx.state.engine;
    let info = engine.collection_info(&ns);
    let default_collation = crate::exec::collation::for_index(None, info.as_ref())?;
    let specs = items
        .iter()
        .map(|item| parse_index_spec(item, &default_collation, ignore_unknown_options))
        .collect::<Result<Vec<_>, _>>()?;
    let created_automatically = info.is_none();
    let existing = info.map(|info| info.indexes).unwrap_or_default();
    let mut new_specs: Vec<IndexSpec> = Vec::new();
    for spec in specs {
        if !already_exists(existing.iter().chain(&new_specs), &spec)? {
            new_specs.push(spec);
        }
    }
    if new_specs.is_empty() && !created_automatically {
        let count = existing.len() as i32;
        return Ok(doc! {
            "numIndexesBefore": count,
            "numIndexesAfter": count,
            "note": "all indexes already exist",
            "createdCollectionAutomatically": false,
        });
    }
    // Building an index reads the whole collection.
    let (before, after, optime) = off_async_workers(|| engine.create_indexes(&ns, new_specs))?;
    ctx.note_write(optime);
    // 0 or 1: the primary's own build is the quorum.
    let quorum = commit_quorum.filter(|quorum| !matches!(quorum, W::Nodes(0 | 1)));
    if let (Some(quorum), Some(optime)) = (quorum, optime) {
        // The build is done here and replayed by each member from the
        // oplog: the quorum holds once that many members applied it.
        let concern = WriteConcern { w: quorum, journal: None, wtimeout_ms: 0, implicit: false };
        // Bounded by maxTimeMS; past it the index stays, and the command
        // run again answers that it exists.
        let deadline = crate::operation::max_time_deadline(&req.body);
        crate::operation::wait_for_write_concern_until(&*ctx.state.topology, optime, &concern, deadline).await?;
    }
    Ok(doc! {
        "numIndexesBefore": before as i32,
        "numIndexesAfter": after as i32,
        "createdCollectionAutomatically": created_automatically,
    })
}

/// `commitQuorum` as the members that must hold a new index before the
/// command answers: `"votingMembers"` (every data-bearing voter),
/// `"majority"`, or a number of data-bearing members. A standalone refuses
/// it (BadValue), as MongoDB does; a quorum the configuration cannot meet,
/// a custom mode among them (none exist here), answers
/// UnsatisfiableCommitQuorum before anything is built.
async fn commit_quorum(ctx: &CommandContext, body: &Document) -> Result<Option<W>, CommandError> {
    let value = match body.get("commitQuorum") {
        None | Some(Bson::Null) => return Ok(None),
        Some(value) => value,
    };
    if !ctx.state.topology.is_replica_set() {
        return Err(CommandError::bad_value("Standalones can't specify commitQuorum"));
    }
    let voters = data_bearing_voters(ctx).await?;
    let unsatisfiable = || {
        CommandError::new(
            278,
            format!("Commit quorum cannot be satisfied with the current replica set configuration: {value}"),
        )
    };
    let quorum = match value {
        Bson::String(mode) if mode == "votingMembers" => W::Nodes(voters),
        Bson::String(mode) if mode == "majority" => W::Majority,
        Bson::String(_) => return Err(unsatisfiable()),
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => {
            match args::get_i64(body, "createIndexes", "commitQuorum")? {
                Some(n) if n < 0 => return Err(CommandError::bad_value("commitQuorum must be a non-negative number")),
                Some(n) if n > i64::from(voters) => return Err(unsatisfiable()),
                Some(n) => W::Nodes(n as u32),
                None => return Err(CommandError::bad_value("commitQuorum must be an integer")),
            }
        }
        other => {
            return Err(CommandError::type_mismatch(format!(
                "commitQuorum must be a number or a string, not {}",
                args::type_name(other)
            )))
        }
    };
    Ok(Some(quorum))
}

/// How many members of the set's configuration vote and hold data.
async fn data_bearing_voters(ctx: &CommandContext) -> Result<u32, CommandError> {
    let reply = ctx.state.topology.run_command("replSetGetConfig", &doc! {"replSetGetConfig": 1}).await?;
    let members = reply.get_document("config").and_then(|config| config.get_array("members"));
    let members = members.map_err(|_| CommandError::internal("replSetGetConfig answered without members"))?;
    let count = members
        .iter()
        .filter_map(|member| member.as_document())
        .filter(|member| !member.get_bool("arbiterOnly").unwrap_or(false))
        .filter(|member| !matches!(member.get("votes"), Some(Bson::Int32(0) | Bson::Int64(0))))
        .count();
    Ok(count as u32)
}

/// An index as `listIndexes` shows it.
fn describe_index(index: &IndexSpec) -> Document {
    let mut entry = doc! {"v": 2, "key": index.key.clone(), "name": index.name.clone()};
    if index.unique && index.name != ID_INDEX_NAME {
        entry.insert("unique", true);
    }
    if index.sparse {
        entry.insert("sparse", true);
    }
    if index.hidden {
        entry.insert("hidden", true);
    }
    if let Some(collation) = &index.collation {
        entry.insert("collation", collation.clone());
        }
    if let Some(seconds) = index.expire_after_seconds {
        entry.insert("expireAfterSeconds", seconds as i32);
    }
    if let Some(filter) = &index.partial_filter_expression {
        entry.insert("partialFilterExpression", filter.clone());
    }
    entry
}

/// The fields of `listIndexes` (MongoDB 7.0's `list_indexes.idl`) besides
/// the generic arguments; `isTimeseriesNamespace`, which mongos sets for
/// shards (`stability: internal`), is left out.
const LIST_INDEXES_FIELDS: &[&str] = &["listIndexes", "cursor", "includeBuildUUIDs", "includeIndexBuildInfo"];

pub async fn list_indexes(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "listIndexes";
    args::refuse_unknown_fields(&req.body, COMMAND, LIST_INDEXES_FIELDS)?;
    let collection = args::collection_name(&req.body, COMMAND)?;
    let ns = namespace(&req.db, &collection);
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let batch_size = match args::get_document(&req.body, COMMAND, "cursor")? {
        Some(cursor) => {
            args::get_non_negative(cursor, "listIndexes.cursor", "batchSize")?.map(|n| n as usize)
        }
        None => None,
    };
    // Index builds here finish within their createIndexes, so no index is
    // ever in progress: `includeBuildUUIDs` changes nothing (it adds the
    // build's UUID to in-progress ones only), `includeIndexBuildInfo`
    // wraps each ready index's spec as `{spec}`, as MongoDB 7.0 does.
    let build_uuids = args::get_bool(&req.body, COMMAND, "includeBuildUUIDs")?.unwrap_or(false);
    let build_info = args::get_bool(&req.body, COMMAND, "includeIndexBuildInfo")?.unwrap_or(false);
    if build_uuids && build_info {
        return Err(CommandError::new(
            72,
            "The includeBuildUUIDs flag and includeIndexBuildInfo flag cannot both be set to true",
        ));
    }
    let info = ctx
        .state
        .engine
        .collection_info(&ns)
        .ok_or_else(|| CommandError::new(26, format!("ns does not exist: {ns}")))?;
    let documents: Vec<Document> = info
        .indexes
        .iter()
        .map(describe_index)
        .map(|spec| if build_info { doc! {"spec": spec} } else { spec })
        .collect();
    let mut body = CursorBody::Buffered(BufferedResults::new(documents, Default::default()));
    let timing = BatchTiming {
        deadline: None,
        await_data_wait: std::time::Duration::ZERO,
    };
    let limits = BatchLimits::first_batch(Some(batch_size.unwrap_or(usize::MAX)), None);
    let (first_batch, finished) = body.next_batch(&ctx.state.engine, limits, timing).await?;
    let id = if finished {
        0
    } else {
        super::find::register_cursor(
            ctx,
            Cursor {
                ns: ns.clone(),
                no_cursor_timeout: false,
                time_left: None,
                body,
                lsid: None,
                linearizable: false,
                collection: None,
            },
        )?
    };
    Ok(doc! {"cursor": {"id": Bson::Int64(id), "ns": ns, "firstBatch": first_batch}})
}

/// The fields of `dropIndexes` (MongoDB 7.0's `drop_indexes.idl`; the
/// command answers to `deleteIndexes` too) besides the generic arguments;
/// `isTimeseriesNamespace`, which mongos sets for shards (`stability:
/// internal`), is left out.
const DROP_INDEXES_FIELDS: &[&str] = &["dropIndexes", "deleteIndexes", "index", "collectionUUID"];

pub async fn drop_indexes(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    args::refuse_unknown_fields(&req.body, "dropIndexes", DROP_INDEXES_FIELDS)?;
    let command = req.name.as_str();
    let collection = args::collection_name(&req.body, command)?;
    check_writable(&req.db, &collection)?;
    let ns = namespace(&req.db, &collection);
    crate::exec::views::refuse_view(&ctx.state.engine, &ns, &req.name)?;
    let engine = &ctx.state.engine;
    args::check_collection_uuid(engine, &ns, &req.body, "dropIndexes")?;
    let info = engine
        .collection_info(&ns)
        .ok_or_else(|| CommandError::new(26, format!("ns not found {ns}")))?;
    let cannot_drop_id = || CommandError::new(72, "cannot drop _id index");
    let names: Vec<String> = match req.body.get("index") {
        Some(Bson::String(name)) if name == "*" => info
            .indexes
            .iter()
            .filter(|index| index.name != ID_INDEX_NAME)
            .map(|index| index.name.clone())
            .collect(),
        Some(Bson::String(name)) => vec![name.clone()],
        Some(Bson::Array(items)) => items
            .iter()
            .map(|item| match item {
                Bson::String(name) if name == "*" => Err(CommandError::bad_value(
                    "'*' cannot be listed with other index names",
                )),
                Bson::String(name) => Ok(name.clone()),
                _ => Err(CommandError::new(14, "dropIndexes names must be strings")),
            })
            .collect::<Result<_, _>>()?,
        Some(Bson::Document(key)) => {
            let index = info
                .indexes
                .iter()
                .find(|index| key_patterns_equal(&index.key, key))
                .ok_or_else(|| {
                    CommandError::new(27, format!("can't find index with key: {key}"))
                })?;
            vec![index.name.clone()]
        }
        Some(_) => {
            return Err(CommandError::new(
                14,
                "dropIndexes 'index' must be a string, an array of strings or an object",
            ))
        }
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field 'dropIndexes.index' is missing but a required field",
            ))
        }
    };
    for name in &names {
        if name == ID_INDEX_NAME {
            return Err(cannot_drop_id());
        }
        if !info.indexes.iter().any(|index| &index.name == name) {
            return Err(CommandError::new(
                27,
                format!("index not found with name [{name}]"),
            ));
        }
    }
    if names.is_empty() {
        return Ok(
            doc! {"nIndexesWas": info.indexes.len() as i32, "msg": "non-_id indexes dropped for collection"},
        );
    }
    let (before, optime) = off_async_workers(|| engine.drop_indexes(&ns, &names))?;
    ctx.note_write(Some(optime));
    Ok(doc! {"nIndexesWas": before as i32})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: Document) -> Result<IndexSpec, CommandError> {
        parse_index_spec(&Bson::Document(value), &None, false)
    }

    #[test]
    fn btree_specs_parse() {
        let parsed = spec(
            doc! {"key": {"a": 1, "b": -1}, "name": "a_1_b_-1", "unique": true, "background": true},
        )
        .unwrap();
        assert_eq!(parsed.name, "a_1_b_-1");
        assert!(parsed.unique && !parsed.sparse);
    }

    #[test]
    fn unsupported_types_and_options_are_named() {
        let error = spec(doc! {"key": {"loc": "2dsphere"}, "name": "loc_2dsphere"}).unwrap_err();
        assert_eq!(error.code, 67);
        assert!(error.message.contains("2dsphere"));
        let error = spec(doc! {"key": {"a": 1}, "name": "a_1", "weights": {"a": 1}}).unwrap_err();
        assert_eq!(error.code, 67);
        assert!(error.message.contains("weights"));
        assert_eq!(
            spec(doc! {"key": {"a": 1}, "name": "a_1", "frob": 1})
                .unwrap_err()
                .code,
            197
        );
        assert_eq!(spec(doc! {"key": {"a": 1}}).unwrap_err().code, 9);
    }

    #[test]
    fn a_command_conflicting_with_itself_is_refused() {
        let first = spec(doc! {"key": {"a": 1}, "name": "a_1"}).unwrap();
        let same = spec(doc! {"key": {"a": 1.0}, "name": "a_1"}).unwrap();
        let rekeyed = spec(doc! {"key": {"b": 1}, "name": "a_1"}).unwrap();
        assert!(already_exists([&first], &same).unwrap());
        assert_eq!(already_exists([&first], &rekeyed).unwrap_err().code, 86);
        assert!(!already_exists([], &rekeyed).unwrap());
    }
}
