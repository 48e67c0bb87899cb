//! Views (`create` with `viewOn` and `pipeline`): read-only collections
//! whose contents are a pipeline over another collection or view.
//!
//! A view is a catalog entry whose stored options hold `viewOn` and
//! `pipeline` (so that `create` is logged, replicated and recovered like
//! any collection); it never holds documents, because every write and
//! index command refuses a view (CommandNotSupportedOnView, 166). Reads
//! resolve the view down to its backing collection and run the views'
//! pipelines, innermost first, in front of what the reader asked for:
//! `find`, `count`, `distinct` and `aggregate` become pipelines, and
//! `$lookup`/`$unionWith` read a view the same way.

use bson::{Bson, Document};
use slipstream_query::collation::{same_collation, CollationRef};
use slipstream_storage::{CollectionInfo, Engine};

use crate::error::CommandError;

/// How many views may stack on one another (MongoDB's limit).
pub const VIEW_DEPTH_MAX: usize = 20;

/// A view resolved down to its backing collection.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedView {
    /// The backing collection's name (same database as the view).
    pub collection: String,
    /// The stacked views' pipelines, innermost view first.
    pub pipeline: Vec<Document>,
}

/// The view definition of a catalog entry: `(viewOn, pipeline)`.
pub fn definition(info: &CollectionInfo) -> Option<(String, Vec<Document>)> {
    let Some(Bson::String(view_on)) = info.options.get("viewOn") else {
        return None;
    };
    let pipeline = match info.options.get("pipeline") {
        Some(Bson::Array(stages)) => stages.iter().filter_map(|stage| stage.as_document().cloned()).collect(),
        _ => Vec::new(),
    };
    Some((view_on.clone(), pipeline))
}

/// Resolves `db.collection` when it is a view; `None` for a collection
/// (or nothing). A cycle or a stack deeper than `VIEW_DEPTH_MAX` is an
/// error (which `create` checks before storing a view, so a stored view
/// always resolves).
pub fn resolve(engine: &Engine, db: &str, collection: &str) -> Result<Option<ResolvedView>, CommandError> {
    let mut current = collection.to_owned();
    let mut pipeline: Vec<Document> = Vec::new();
    let mut seen = vec![current.clone()];
    loop {
        let info = engine.collection_info(&format!("{db}.{current}"));
        let Some((view_on, stages)) = info.as_ref().and_then(definition) else {
            break;
        };
        // The outer view's stages run after those of the view it reads.
        pipeline.splice(0..0, stages);
        if seen.contains(&view_on) {
            return Err(CommandError::new(
                5,
                format!("View cycle detected: {}", seen.join(" -> ")),
            ));
        }
        if seen.len() > VIEW_DEPTH_MAX {
            return Err(CommandError::new(
                12,
                format!("View depth too deep or view cycle detected. Maximum depth is {VIEW_DEPTH_MAX}"),
            ));
        }
        seen.push(view_on.clone());
        current = view_on;
    }
    if seen.len() == 1 {
        return Ok(None);
    }
    Ok(Some(ResolvedView {
        collection: current,
        pipeline,
    }))
}

/// OptionNotSupportedOnView.
pub const OPTION_NOT_SUPPORTED_ON_VIEW: i32 = 167;

/// A view's default collation: the one given at `create` (simple when none
/// was, never the backing collection's, as in MongoDB).
pub fn collation(engine: &Engine, db: &str, view: &str) -> Result<CollationRef, CommandError> {
    crate::exec::collation::collection_default(engine.collection_info(&format!("{db}.{view}")).as_ref())
}

/// The collation an operation on view `view` runs under: the view's own.
/// An operation that names another one is refused (167), as MongoDB
/// refuses to override a view's default collation.
pub fn operation_collation(
    engine: &Engine,
    db: &str,
    view: &str,
    requested: Option<&CollationRef>,
) -> Result<CollationRef, CommandError> {
    let own = collation(engine, db, view)?;
    match requested {
        Some(requested) if !same_collation(requested.as_deref(), own.as_deref()) => Err(CommandError::new(
            OPTION_NOT_SUPPORTED_ON_VIEW,
            "Cannot override a view's default collation",
        )),
        _ => Ok(own),
    }
}

/// Adds to `into` the collections a pipeline stage reads (`$lookup`,
/// `$graphLookup`, `$unionWith`, and those of its sub-pipelines, `$facet`'s
/// included), for the view collation check.
pub fn collections_read(stage: &Document, into: &mut Vec<String>) {
    let sub_pipeline = |value: Option<&Bson>, into: &mut Vec<String>| {
        if let Some(Bson::Array(stages)) = value {
            stages.iter().filter_map(Bson::as_document).for_each(|stage| collections_read(stage, into));
        }
    };
    for (name, spec) in stage {
        match (name.as_str(), spec) {
            ("$lookup" | "$graphLookup", Bson::Document(spec)) => {
                if let Some(Bson::String(from)) = spec.get("from") {
                    into.push(from.clone());
                }
                sub_pipeline(spec.get("pipeline"), into);
            }
            ("$unionWith", Bson::String(coll)) => into.push(coll.clone()),
            ("$unionWith", Bson::Document(spec)) => {
                if let Some(Bson::String(coll)) = spec.get("coll") {
                    into.push(coll.clone());
                }
                sub_pipeline(spec.get("pipeline"), into);
            }
            ("$facet", Bson::Document(facets)) => facets.values().for_each(|stages| sub_pipeline(Some(stages), into)),
            _ => {}
        }
    }
}

/// CommandNotSupportedOnView (166) when `ns` is a view.
pub fn refuse_view(engine: &Engine, ns: &str, command: &str) -> Result<(), CommandError> {
    match engine.collection_info(ns) {
        Some(info) if definition(&info).is_some() => Err(CommandError::new(
            166,
            format!("Namespace {ns} is a view, not a collection ({command} is not supported on views)"),
        )),
        _ => Ok(()),
    }
}
