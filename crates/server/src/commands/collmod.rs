//! `collMod`: changes a collection's or an index's options after creation.
//!
//! An index's `hidden` flag and `expireAfterSeconds` can change; every other
//! `collMod` option MongoDB knows and Slipstream does not implement answers
//! 115 CommandNotSupported naming it, so that a client never believes an
//! option was changed when it was not.

use bson::{Bson, Document};

use super::{CommandContext, CommandRequest, CommandResult};
use slipstream_storage::index_spec::{IndexModification, EXPIRE_AFTER_SECONDS_MAX};

use crate::error::CommandError;
use crate::exec::args::{self, check_writable, namespace};
use crate::exec::off_async_workers;
use crate::exec::plan::key_patterns_equal;
use crate::exec::scan::ID_INDEX_NAME;

/// `collMod` options MongoDB accepts that Slipstream does not implement yet.
const UNSUPPORTED_OPTIONS: &[&str] = &[
    "viewOn",
    "pipeline",
    // The collection-level option (clustered and time series collections).
    "expireAfterSeconds",
    "timeseries",
    "changeStreamPreAndPostImages",
    "clusteredIndex",
    "recordPreImages",
];

/// Collection options `collMod` changes in the catalog.
const VALIDATION_OPTIONS: &[&str] = &["validator", "validationLevel", "validationAction"];

/// A capped collection's limits (`exec::capped::coll_mod_changes`).
const CAPPED_OPTIONS: &[&str] = &["cappedSize", "cappedMax"];

/// Fields every command may carry (generic arguments), not options.
const GENERIC_FIELDS: &[&str] = &[
    "collMod",
    "writeConcern",
    "comment",
    "$db",
    "lsid",
    "$clusterTime",
    "txnNumber",
];

/// The index `collMod` names, by name or key pattern, and what changes.
fn index_change(
    index: &Document,
    indexes: &[slipstream_storage::IndexSpec],
) -> Result<(String, IndexModification), CommandError> {
    for field in index.keys() {
        match field.as_str() {
            "name" | "keyPattern" | "hidden" | "expireAfterSeconds" => {}
            "unique" | "prepareUnique" => {
                return Err(CommandError::new(
                    115,
                    format!("collMod index option '{field}' is not supported by Slipstream"),
                ))
            }
            other => {
                return Err(CommandError::new(
                    40415,
                    format!("BSON field 'collMod.index.{other}' is an unknown field."),
                ))
            }
        }
    }
    let modification = IndexModification {
        hidden: args::get_bool(index, "collMod.index", "hidden")?,
        expire_after_seconds: expire_after_seconds(index)?,
    };
    if modification.is_empty() {
        return Err(CommandError::new(72, "no expireAfterSeconds, hidden, prepareUnique or unique field"));
    }
    let found = match (index.get("name"), index.get("keyPattern")) {
        (Some(Bson::String(name)), None) => indexes.iter().find(|spec| &spec.name == name),
        (None, Some(Bson::Document(pattern))) => indexes.iter().find(|spec| key_patterns_equal(&spec.key, pattern)),
        _ => return Err(CommandError::new(72, "must specify either index name or key pattern")),
    };
    let spec = found.ok_or_else(|| CommandError::new(27, format!("cannot find index {index}")))?;
    if spec.name == ID_INDEX_NAME && modification.hidden.is_some() {
        return Err(CommandError::bad_value("can't hide _id index"));
    }
    if modification.expire_after_seconds.is_some() && spec.expire_after_seconds.is_none() {
        // Turning an index into a TTL index, as MongoDB 7.0 allows for a
        // single field other than `_id`.
        if spec.name == ID_INDEX_NAME {
            return Err(CommandError::new(72, "the _id field does not support TTL indexes"));
        }
        if spec.key.len() != 1 {
            return Err(CommandError::new(
                72,
                "TTL indexes are single-field indexes, compound indexes do not support TTL",
            ));
        }
    }
    Ok((spec.name.clone(), modification))
}

/// `index.expireAfterSeconds`: a number (MongoDB's safeInt64, fractions
/// truncated) in 0 to 2^31 - 1 (InvalidOptions otherwise).
fn expire_after_seconds(index: &Document) -> Result<Option<i64>, CommandError> {
    let seconds = match index.get("expireAfterSeconds") {
        None => return Ok(None),
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(n)) if n.is_finite() => *n as i64,
        Some(other) => {
            return Err(CommandError::new(
                14,
                format!(
                    "BSON field 'collMod.index.expireAfterSeconds' is the wrong type '{}', expected types '[long, int, \
                     decimal, double]'",
                    args::type_name(other)
                ),
            ))
        }
    };
    if seconds < 0 {
        return Err(CommandError::new(72, "TTL index 'expireAfterSeconds' option cannot be less than 0"));
    }
    if seconds > EXPIRE_AFTER_SECONDS_MAX {
        return Err(CommandError::new(
            72,
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a lower number",
        ));
    }
    Ok(Some(seconds))
}

pub async fn coll_mod(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "collMod";
    let collection = args::collection_name(&req.body, COMMAND)?;
    check_writable(&req.db, &collection)?;
    let ns = namespace(&req.db, &collection);
    for field in req.body.keys() {
        if UNSUPPORTED_OPTIONS.contains(&field.as_str()) {
            return Err(CommandError::new(
                115,
                format!("collMod option '{field}' is not supported by Slipstream"),
            ));
        }
        if VALIDATION_OPTIONS.contains(&field.as_str()) {
            crate::exec::validation::check_option(field, &req.body[field])?;
            continue;
        }
        if field != "index" && !CAPPED_OPTIONS.contains(&field.as_str()) && !GENERIC_FIELDS.contains(&field.as_str()) && !field.starts_with('$') {
            return Err(CommandError::new(
                40415,
                format!("BSON field 'collMod.{field}' is an unknown field."),
            ));
        }
    }
    let engine = &ctx.state.engine;
    let info = engine
        .collection_info(&ns)
        .ok_or_else(|| CommandError::new(26, format!("ns does not exist: {ns}")))?;
    if let Some(capped) = crate::exec::capped::coll_mod_changes(&req.body)? {
        // The new limits take effect at the next insert, as in MongoDB 7.0.
        if !slipstream_storage::capped::is_capped(&info.options) {
            return Err(CommandError::new(
                72,
                format!("collMod cappedSize and cappedMax apply only to capped collections, and {ns} is not capped"),
            ));
        }
        let (_, optime) = off_async_workers(|| engine.modify_collection_options(&ns, capped))?;
        ctx.note_write(Some(optime));
    }
    let mut changes = Document::new();
    for field in VALIDATION_OPTIONS {
        if let Some(value) = req.body.get(*field) {
            changes.insert(*field, value.clone());
        }
    }
    if !changes.is_empty() {
        crate::exec::views::refuse_view(engine, &ns, &req.name)?;
        let (_, optime) = off_async_workers(|| engine.modify_collection_options(&ns, changes))?;
        ctx.note_write(Some(optime));
    }
    let Some(index) = args::get_document(&req.body, COMMAND, "index")? else {
        return Ok(Document::new());
    };
    let (name, modification) = index_change(index, &info.indexes)?;
    let (before, optime) = off_async_workers(|| engine.modify_index(&ns, &name, &modification))?;
    ctx.note_write(optime);
    let mut reply = Document::new();
    if let Some(seconds) = modification.expire_after_seconds {
        if let Some(old) = before.expire_after_seconds {
            reply.insert("expireAfterSeconds_old", old);
        }
        reply.insert("expireAfterSeconds_new", seconds);
    }
    if let Some(hidden) = modification.hidden.filter(|hidden| *hidden != before.hidden) {
        reply.insert("hidden_old", before.hidden);
        reply.insert("hidden_new", hidden);
    }
    Ok(reply)
}
