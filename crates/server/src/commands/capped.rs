//! `cloneCollectionAsCapped` and `convertToCapped`, made of ordinary
//! replicated steps as MongoDB makes them: a `create` of the capped
//! collection, one insert per copied document (in the source's natural
//! order; trimming keeps the newest that fit), and for `convertToCapped` a
//! `renameCollection` with `dropTarget` of the temporary copy over the
//! source. Members apply those entries like any others, so nothing is
//! specific to capped collections on a member.

use std::ops::Bound;
use std::sync::Arc;

use bson::oid::ObjectId;
use bson::{Bson, Document};
use slipstream_storage::{Engine, OpTime, ReadAt};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{self, check_writable, namespace};
use crate::exec::capped::{command_size, number, round_size};
use crate::exec::off_async_workers;

/// Documents copied per read of the source.
const COPY_BATCH_MAX: usize = 512;

/// The capped collection's options: the source's (validator, collation, a
/// capped source's `max`), with `capped` and the new `size` first.
fn capped_options(source: &Document, size: i64) -> Document {
    let mut options = bson::doc! {"capped": true, "size": number(round_size(size))};
    if let Some(max) = source.get("max") {
        options.insert("max", max.clone());
    }
    for (key, value) in source {
        if !matches!(key.as_str(), "capped" | "size" | "max") {
            options.insert(key.clone(), value.clone());
        }
    }
    options
}

/// Creates capped `to` and copies `from` into it; returns the last write.
fn copy_into_capped(engine: &Arc<Engine>, from: &str, to: &str, size: i64) -> Result<OpTime, CommandError> {
    let reader = engine.reader(ReadAt::Latest)?;
    let source = reader
        .collection_info(from)
        .ok_or_else(|| CommandError::new(26, format!("source collection {from} does not exist")))?;
    let mut last = engine.create_collection(to, capped_options(&source.options, size))?;
    let mut after = Bound::Unbounded;
    loop {
        let documents = reader.scan_natural(from, after.clone(), Bound::Unbounded, false, COPY_BATCH_MAX)?;
        let Some((position, _)) = documents.last() else {
            return Ok(last);
        };
        after = Bound::Excluded(position.clone());
        for (_, document) in documents {
            last = engine.writer().insert(to, document)?;
        }
    }
}

/// The source of either command: a collection (166 on a view, 26 when
/// missing).
fn check_source(engine: &Engine, ns: &str, command: &str) -> Result<(), CommandError> {
    crate::exec::views::refuse_view(engine, ns, command)?;
    if engine.collection_info(ns).is_none() {
        return Err(CommandError::new(26, format!("source collection {ns} does not exist")));
    }
    Ok(())
}

pub async fn clone_collection_as_capped(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "cloneCollectionAsCapped";
    let from = args::collection_name(&req.body, COMMAND)?;
    let to = match req.body.get("toCollection") {
        Some(Bson::String(to)) => to.clone(),
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field '{COMMAND}.toCollection' is the wrong type '{}', expected type 'string'",
                args::type_name(other)
            )))
        }
        None => {
            return Err(CommandError::new(
                40414,
                format!("BSON field '{COMMAND}.toCollection' is missing but a required field"),
            ))
        }
    };
    let size = command_size(&req.body, COMMAND)?;
    args::check_collection_name(&to)?;
    check_writable(&req.db, &to)?;
    let (from_ns, to_ns) = (namespace(&req.db, &from), namespace(&req.db, &to));
    let engine = &ctx.state.engine;
    check_source(engine, &from_ns, COMMAND)?;
    if engine.collection_info(&to_ns).is_some() {
        return Err(CommandError::new(
            48,
            format!(
                "cloneCollectionAsCapped failed - destination collection {to_ns} already exists. source collection: {from_ns}"
            ),
        ));
    }
    let last = off_async_workers(|| copy_into_capped(engine, &from_ns, &to_ns, size))?;
    ctx.note_write(Some(last));
    Ok(Document::new())
}

pub async fn convert_to_capped(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    const COMMAND: &str = "convertToCapped";
    let collection = args::collection_name(&req.body, COMMAND)?;
    let size = command_size(&req.body, COMMAND)?;
    check_writable(&req.db, &collection)?;
    let ns = namespace(&req.db, &collection);
    let engine = &ctx.state.engine;
    check_source(engine, &ns, COMMAND)?;
    // MongoDB's temporary name: a random part, then the source's name.
    let random = ObjectId::new().to_hex();
    let temp = namespace(
        &req.db,
        &format!("tmp{}.convertToCapped.{collection}", &random[random.len() - 5..]),
    );
    let converted = off_async_workers(|| -> Result<OpTime, CommandError> {
        copy_into_capped(engine, &ns, &temp, size)?;
        Ok(engine.rename_collection(&temp, &ns, true)?)
    });
    let last = match converted {
        Ok(last) => last,
        Err(error) => {
            // The source is untouched; the partial copy goes (a failure to
            // drop it is secondary to the error reported).
            let _ = off_async_workers(|| engine.drop_collection(&temp));
            return Err(error);
        }
    };
    ctx.state.cursors.kill_namespaces(|cursor_ns| cursor_ns == ns);
    ctx.note_write(Some(last));
    Ok(Document::new())
}
