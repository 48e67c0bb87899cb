//! `collMod`: changes a collection's or an index's options after creation.
//!
//! Only an index's `hidden` flag can change today; every other `collMod`
//! option MongoDB knows answers 115 CommandNotSupported naming it, so that a
//! client never believes a validator or a TTL was changed when it was not.

use bson::{doc, Bson, Document};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{self, check_writable, namespace};
use crate::exec::off_async_workers;
use crate::exec::plan::key_patterns_equal;
use crate::exec::scan::ID_INDEX_NAME;

/// `collMod` options MongoDB accepts that Slipstream does not implement yet.
const UNSUPPORTED_OPTIONS: &[&str] = &[
    "validator",
    "validationLevel",
    "validationAction",
    "viewOn",
    "pipeline",
    "expireAfterSeconds",
    "timeseries",
    "changeStreamPreAndPostImages",
    "clusteredIndex",
    "cappedSize",
    "cappedMax",
    "recordPreImages",
];

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

/// The index `collMod` names, by name or key pattern, and the new `hidden`.
fn index_change(index: &Document, indexes: &[slipstream_storage::IndexSpec]) -> Result<(String, bool), CommandError> {
    for field in index.keys() {
        match field.as_str() {
            "name" | "keyPattern" | "hidden" => {}
            "expireAfterSeconds" | "unique" | "prepareUnique" => {
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
    let hidden = args::get_bool(index, "collMod.index", "hidden")?
        .ok_or_else(|| CommandError::new(72, "no expireAfterSeconds, hidden, prepareUnique or unique field"))?;
    let found = match (index.get("name"), index.get("keyPattern")) {
        (Some(Bson::String(name)), None) => indexes.iter().find(|spec| &spec.name == name),
        (None, Some(Bson::Document(pattern))) => indexes.iter().find(|spec| key_patterns_equal(&spec.key, pattern)),
        _ => return Err(CommandError::new(72, "must specify either index name or key pattern")),
    };
    let spec = found.ok_or_else(|| CommandError::new(27, format!("cannot find index {index}")))?;
    if spec.name == ID_INDEX_NAME {
        return Err(CommandError::bad_value("can't hide _id index"));
    }
    Ok((spec.name.clone(), hidden))
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
        if field != "index" && !GENERIC_FIELDS.contains(&field.as_str()) && !field.starts_with('$') {
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
    let Some(index) = args::get_document(&req.body, COMMAND, "index")? else {
        return Ok(Document::new());
    };
    let (name, hidden) = index_change(index, &info.indexes)?;
    let (before, optime) = off_async_workers(|| engine.set_index_hidden(&ns, &name, hidden))?;
    ctx.note_write(optime);
    if before == hidden {
        return Ok(Document::new());
    }
    Ok(doc! {"hidden_old": before, "hidden_new": hidden})
}
