//! `find`, `count` and `distinct` on a view: each becomes a pipeline over
//! the view's backing collection (the views' stages, then the command's
//! `$match`, `$sort`, `$skip`, `$limit`), run like `aggregate`. A find's
//! projection is applied to the pipeline's results with find's own
//! projection semantics, so positional and `$elemMatch` projections mean
//! what they mean on a collection.

use std::time::Duration;

use bson::{doc, Bson, Document};
use slipstream_query::collation::CollationRef;

use super::super::aggregate::{parse_resolving_views, run_pipeline_blocking};
use super::super::CommandContext;
use super::{cursor_reply, number, register_cursor, FindRequest};
use crate::cursor::Cursor;
use crate::error::CommandError;
use crate::exec::batch::BatchLimits;
use crate::exec::cursor_body::{BatchTiming, CursorBody};
use crate::exec::query::{project, BufferedResults};

/// The command options a view's pipeline passes on to `aggregate`.
const PASSED_ON: &[&str] = &["maxTimeMS", "allowDiskUse", "hint", "collation"];

/// Runs `stages` over view `view` (in `db`) and returns its documents and
/// the collation they ran under (the view's).
async fn run_over_view(
    ctx: &CommandContext,
    db: &str,
    view: &str,
    stages: Vec<Document>,
    body: &Document,
) -> Result<(Vec<Document>, CollationRef), CommandError> {
    let mut aggregate = doc! {"aggregate": view, "pipeline": stages, "cursor": {}};
    for field in PASSED_ON {
        if let Some(value) = body.get(*field) {
            aggregate.insert(*field, value.clone());
        }
    }
    let mut request = parse_resolving_views(&ctx.state.engine, db, &aggregate)?;
    // The view's pipeline reads where the command's read concern said.
    request.read_point = ctx.read_point();
    let collation = request.collation.clone();
    let (_, run) = run_pipeline_blocking(&ctx.state.engine, request).await?;
    Ok((run.documents, collation))
}

fn view_name(ns: &str) -> &str {
    ns.split_once('.').map_or(ns, |(_, collection)| collection)
}

pub(super) async fn find(
    ctx: &CommandContext,
    db: &str,
    request: FindRequest,
    body: &Document,
) -> Result<Document, CommandError> {
    if request.tailable {
        return Err(CommandError::new(
            166,
            format!(
                "Namespace {} is a view; tailable cursors are not supported on views",
                request.ns
            ),
        ));
    }
    if request.min.is_some() || request.max.is_some() {
        return Err(CommandError::new(
            166,
            format!("Namespace {} is a view; min/max are not supported on views", request.ns),
        ));
    }
    if request.natural_reverse.is_some() {
        return Err(CommandError::new(
            115,
            "a $natural sort on a view is not supported by Slipstream",
        ));
    }
    let mut stages = Vec::new();
    if !request.filter_document.is_empty() {
        stages.push(doc! {"$match": request.filter_document.clone()});
    }
    if let Some(sort) = &request.sort_document {
        stages.push(doc! {"$sort": sort.clone()});
    }
    if request.skip > 0 {
        stages.push(doc! {"$skip": i64::try_from(request.skip).unwrap_or(i64::MAX)});
    }
    if let Some(limit) = request.limit {
        stages.push(doc! {"$limit": i64::try_from(limit).unwrap_or(i64::MAX)});
    }
    let (documents, _) = run_over_view(ctx, db, view_name(&request.ns), stages, body).await?;
    let documents = documents
        .into_iter()
        .map(|document| project(request.projection.as_ref(), &request.filter, document))
        .collect::<Result<Vec<_>, _>>()?;
    let mut cursor_body = CursorBody::Buffered(BufferedResults::new(documents, Default::default()));
    let limits = BatchLimits::first_batch(request.batch_size, None);
    let timing = BatchTiming {
        deadline: None,
        await_data_wait: Duration::ZERO,
    };
    let (first_batch, finished) = cursor_body.next_batch(&ctx.state.engine, limits, timing).await?;
    let id = if finished || request.single_batch {
        0
    } else {
        register_cursor(
            ctx,
            Cursor {
                ns: request.ns.clone(),
                no_cursor_timeout: request.no_cursor_timeout,
                time_left: None,
                body: cursor_body,
                lsid: None,
                linearizable: false,
                collection: None,
            },
        )?
    };
    Ok(cursor_reply(id, &request.ns, "firstBatch", first_batch))
}

pub(super) async fn count(
    ctx: &CommandContext,
    db: &str,
    view: &str,
    filter_document: Document,
    skip: u64,
    limit: Option<u64>,
    body: &Document,
) -> Result<Document, CommandError> {
    let mut stages = vec![doc! {"$match": filter_document}];
    if skip > 0 {
        stages.push(doc! {"$skip": i64::try_from(skip).unwrap_or(i64::MAX)});
    }
    if let Some(limit) = limit {
        stages.push(doc! {"$limit": i64::try_from(limit).unwrap_or(i64::MAX)});
    }
    stages.push(doc! {"$count": "n"});
    let (documents, _) = run_over_view(ctx, db, view, stages, body).await?;
    let n = match documents.first().and_then(|counted| counted.get("n")) {
        None => 0,
        Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
        Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
        Some(other) => return Err(CommandError::internal(format!("$count gave {other}"))),
    };
    Ok(doc! {"n": number(n)})
}

pub(super) async fn distinct(
    ctx: &CommandContext,
    db: &str,
    view: &str,
    key: &str,
    filter_document: Document,
    body: &Document,
) -> Result<Document, CommandError> {
    let (documents, collation) = run_over_view(ctx, db, view, vec![doc! {"$match": filter_document}], body).await?;
    let values = super::distinct_values_collated(&documents, key, collation.as_deref())?;
    Ok(doc! {"values": values})
}
