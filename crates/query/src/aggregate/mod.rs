//! The aggregation pipeline: parsing stage documents once into `Stage`s,
//! then running documents through them.
//!
//! Execution pulls documents through a chain of iterators: streaming
//! stages (`$match`, `$project`, `$unwind`, `$limit`, ...) transform one
//! document at a time, so `$limit` stops reading its input early; blocking
//! stages (`$group`, `$sort`, `$facet`) gather their input first, within
//! `BLOCKING_STAGE_MEMORY_BYTES_MAX`, like MongoDB without `allowDiskUse`.
//!
//! Other collections (`$lookup`, `$graphLookup`, `$unionWith`) are read
//! through a `CollectionSource` the server implements over storage; the
//! pipeline itself does no I/O and reads no clock (`$$NOW` is passed in).
//!
//! Stages: `$match`, `$project`, `$addFields`/`$set`, `$unset`, `$sort`
//! (top-k when followed by `$limit`), `$limit`, `$skip`, `$group`,
//! `$count`, `$sortByCount`, `$bucket`, `$unwind`, `$lookup` (equality
//! and `let`/`pipeline` forms), `$graphLookup`, `$unionWith`,
//! `$replaceRoot`/`$replaceWith`, `$facet`, `$redact`,
//! `$setWindowFields` (`documents` windows), `$documents`, `$sample`. The stages in
//! `UNSUPPORTED_STAGES` answer CommandNotSupported (115) naming
//! themselves; any other name answers 40324.

mod accumulators;
mod active_stages;
mod bucket;
mod count;
mod documents;
mod facet;
mod fields;
mod graph_lookup;
mod group;
mod limit_skip;
mod lookup;
mod match_stage;
mod project;
mod redact;
mod replace_root;
mod sample;
mod select_accumulators;
mod sort_stage;
mod union_with;
mod unwind;
mod window;

use bson::{Bson, Document};

use crate::error::{codes, QueryError};
use crate::expr::Variables;

/// How much memory (approximate BSON bytes) one blocking stage may hold,
/// MongoDB's limit when `allowDiskUse` is off (100 MB).
pub const BLOCKING_STAGE_MEMORY_BYTES_MAX: usize = 100 * 1024 * 1024;

/// QueryExceededMemoryLimitNoDiskUseAllowed.
pub const MEMORY_LIMIT_CODE: i32 = 292;

/// How deeply sub-pipelines (`$facet`, `$lookup`, `$unionWith`) may nest.
const SUB_PIPELINE_DEPTH_MAX: usize = 20;

/// MaxSubPipelineDepthExceeded.
const MAX_SUB_PIPELINE_DEPTH_EXCEEDED: i32 = 232;

/// The most stages one pipeline may have (MongoDB's default limit).
const PIPELINE_STAGES_MAX: usize = 1000;

/// The most stages that may be running at once on one thread: a pipeline's
/// own, plus those of the sub-pipelines (`$lookup`, `$unionWith`,
/// `$facet`) and views it is reading through at that moment.
///
/// Stages are chained iterators: pulling one document from the last stage
/// calls into every stage before it, so each running stage holds a few
/// frames on the thread's stack, and a sub-pipeline's chain runs on top of
/// its parent's. Nesting limits alone do not bound that (20 levels of
/// sub-pipelines, or of views, of up to 1000 stages each would be 20,000
/// chained stages); this does, and `stage_stack` measures what it costs.
/// One maximum-length pipeline always fits, with room for sub-pipelines.
pub const ACTIVE_STAGES_MAX: usize = 2 * PIPELINE_STAGES_MAX;

/// How a pipeline reads other collections (`$lookup`, `$unionWith`).
pub trait CollectionSource {
    fn scan(&self, db: &str, collection: &str) -> Result<Vec<Document>, QueryError>;

    /// Reads `collection` for a stage running under `collation`: a view's
    /// stages run under it. With `view_must_match` (`$lookup`,
    /// `$graphLookup`) a view whose own collation differs is refused, as
    /// MongoDB refuses it (167); `$unionWith` reads any view under the
    /// operation's collation. Sources without views just `scan`.
    fn scan_collated(
        &self,
        db: &str,
        collection: &str,
        collation: &crate::collation::CollationRef,
        view_must_match: bool,
    ) -> Result<Vec<Document>, QueryError> {
        let _ = (collation, view_must_match);
        self.scan(db, collection)
    }
}

/// A stream of documents between stages.
pub(crate) type DocStream<'a> = Box<dyn Iterator<Item = Result<Document, QueryError>> + 'a>;

/// What stages may use while running.
pub(crate) struct ExecContext<'a> {
    pub source: &'a dyn CollectionSource,
    pub db: &'a str,
    /// `$$NOW` is bound here; `$$ROOT` is each evaluated document.
    pub vars: Variables,
    /// The memory each blocking stage may use.
    pub memory_limit_bytes: usize,
}

/// One parsed stage.
pub(crate) trait Stage: std::fmt::Debug + Send + Sync {
    /// Transforms the input stream. Errors travel inside the stream.
    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a>;

    /// Whether an output document may nest deeper than its input (computed
    /// fields, accumulators, joined documents, created paths). Such output
    /// is checked against `depth::BSON_DEPTH_MAX` before the next stage
    /// sees it, so that no chain of stages can build a document deeper than
    /// every later walk over it can follow. Stages that only select, order
    /// or trim documents say no.
    fn may_deepen(&self) -> bool {
        true
    }

    /// Puts the stage's string comparisons (`$match`, `$sort`, `$group`
    /// keys) under the command's collation; stages that compare no
    /// strings keep this default.
    fn set_collation(&mut self, _collation: &std::sync::Arc<crate::collation::Collation>) {}
}

/// A parsed pipeline.
#[derive(Debug)]
pub struct Pipeline {
    stages: Vec<Box<dyn Stage>>,
    leading_match: Option<Document>,
    /// The database `$lookup`/`$unionWith` read collections from.
    db: String,
    /// The memory each blocking stage may use; see `with_memory_limit`.
    memory_limit_bytes: usize,
    /// The collation every stage and expression compares strings by
    /// (`None`: simple); sub-pipelines get the same one.
    collation: crate::collation::CollationRef,
}

/// Stages MongoDB has that Slipstream answers with CommandNotSupported.
const UNSUPPORTED_STAGES: &[&str] = &[
    "$out", "$merge", "$geoNear", "$search", "$searchMeta", "$vectorSearch", "$changeStream",
    "$collStats", "$indexStats", "$currentOp", "$listSessions", "$listLocalSessions",
    "$planCacheStats", "$bucketAuto", "$densify", "$fill", "$listSearchIndexes",
    "$shardedDataDistribution", "$changeStreamSplitLargeEvent", "$listSampledQueries",
];

impl Pipeline {
    /// Parses the stages of an `aggregate` command for database `db`.
    pub fn parse(stages: &[Document], db: &str) -> Result<Pipeline, QueryError> {
        parse_at_depth(stages, db, 0)
    }

    /// The filter of a leading `$match` stage, which the server may push
    /// into the index planner (execution still applies it). A top-level
    /// `$expr` is left out: the planner may use the result only to narrow
    /// the input, never to decide the output.
    pub fn leading_match(&self) -> Option<&Document> {
        self.leading_match.as_ref()
    }

    /// The pipeline with its string comparisons under `collation` (the
    /// command's, or the collection's default); `None` leaves it simple.
    pub fn with_collation(mut self, collation: crate::collation::CollationRef) -> Pipeline {
        if let Some(collation) = &collation {
            self.set_collation(collation);
        }
        self
    }

    /// Puts every stage, sub-pipelines included, under `collation`, as
    /// MongoDB runs `$lookup`, `$facet`, `$unionWith` and `$graphLookup`
    /// under the operation's collation.
    pub(crate) fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        assert!(self.collation.is_none(), "a pipeline is collated once");
        self.stages.iter_mut().for_each(|stage| stage.set_collation(collation));
        self.collation = Some(collation.clone());
    }

    /// Lowers (or raises) the memory a blocking stage may use, which is
    /// `BLOCKING_STAGE_MEMORY_BYTES_MAX` by default.
    pub fn with_memory_limit(mut self, bytes: usize) -> Pipeline {
        self.memory_limit_bytes = bytes;
        self
    }

    /// Runs the pipeline over `input`.
    pub fn execute(
        &self,
        input: Box<dyn Iterator<Item = Result<Document, QueryError>> + '_>,
        source: &dyn CollectionSource,
        now: bson::DateTime,
    ) -> Result<Vec<Document>, QueryError> {
        self.execute_with_variables(input, source, &Variables::empty().with_now(now))
    }

    /// Runs the pipeline over `input` with a command's variables, built by
    /// `Variables::with_let(let, now)` (which also sets `$$NOW`): the
    /// `aggregate` command's `let` constants are visible as `$$name` in
    /// every stage, `$lookup`/`$facet`/`$unionWith` sub-pipelines included.
    pub fn execute_with_variables(
        &self,
        input: Box<dyn Iterator<Item = Result<Document, QueryError>> + '_>,
        source: &dyn CollectionSource,
        vars: &Variables,
    ) -> Result<Vec<Document>, QueryError> {
        // Expressions find the collation in their variables; a pipeline
        // parsed without one (an update's) keeps the caller's.
        let vars = match &self.collation {
            Some(collation) => vars.clone().with_collation(Some(collation.clone())),
            None => vars.clone(),
        };
        let cx = ExecContext { source, db: &self.db, vars, memory_limit_bytes: self.memory_limit_bytes };
        self.run(input, &cx).collect()
    }

    /// Chains every stage onto `input`; the chain counts its stages
    /// against `ACTIVE_STAGES_MAX` whenever it is pulled.
    pub(crate) fn run<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        let mut stream = input;
        for stage in &self.stages {
            stream = stage.apply(stream, cx);
            if stage.may_deepen() {
                stream = Box::new(stream.map(|item| item.and_then(checked_output)));
            }
        }
        Box::new(active_stages::Counted::new(stream, self.stages.len()))
    }
}

/// A stage's output, refused when it nests deeper than
/// `depth::BSON_DEPTH_MAX` (MongoDB fails such a pipeline when it converts
/// the document to BSON).
fn checked_output(document: Document) -> Result<Document, QueryError> {
    crate::depth::check_built_document(&document)?;
    Ok(document)
}

/// Parses a pipeline nested `depth` sub-pipelines deep.
/// Parses the optional `pipeline` argument of a stage that runs a
/// sub-pipeline (`$lookup`, `$unionWith`), one nesting level deeper.
/// Whether a stage's `pipeline` option begins with `$documents`: then the
/// stage needs no collection (MongoDB 6.0+: `$unionWith` without `coll`,
/// `$lookup` without `from`).
pub(crate) fn sub_pipeline_starts_with_documents(options: &Document) -> bool {
    let Some(Bson::Array(stages)) = options.get("pipeline") else {
        return false;
    };
    let first_name = stages.first().and_then(Bson::as_document).and_then(|first| first.keys().next());
    first_name.is_some_and(|name| name == "$documents")
}

pub(crate) fn parse_sub_pipeline(
    stage: &str,
    value: Option<&Bson>,
    db: &str,
    depth: usize,
) -> Result<Option<Pipeline>, QueryError> {
    let stages = match value {
        None => return Ok(None),
        Some(Bson::Array(stages)) => stages,
        Some(_) => return Err(QueryError::new(codes::TYPE_MISMATCH, format!("{stage} 'pipeline' must be an array"))),
    };
    let stages = stages
        .iter()
        .map(|s| match s {
            Bson::Document(d) => Ok(d.clone()),
            _ => Err(QueryError::new(codes::TYPE_MISMATCH, format!("{stage} pipeline stages must be objects"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(parse_at_depth(&stages, db, depth + 1)?))
}

pub(crate) fn parse_at_depth(stages: &[Document], db: &str, depth: usize) -> Result<Pipeline, QueryError> {
    if depth > SUB_PIPELINE_DEPTH_MAX {
        return Err(QueryError::new(
            MAX_SUB_PIPELINE_DEPTH_EXCEEDED,
            format!("Maximum number of nested sub-pipelines exceeded. Limit is {SUB_PIPELINE_DEPTH_MAX}"),
        ));
    }
    if stages.len() > PIPELINE_STAGES_MAX {
        return Err(QueryError::new(
            7749501,
            format!("Pipeline length must be no longer than {PIPELINE_STAGES_MAX} stages."),
        ));
    }
    let mut parsed: Vec<Box<dyn Stage>> = Vec::with_capacity(stages.len());
    let mut index = 0;
    while index < stages.len() {
        let (name, spec) = stage_name_and_spec(&stages[index])?;
        // `$sort` directly followed by `$limit` keeps only the top
        // documents, so its memory is bounded by the limit.
        let next = stages.get(index + 1).map(stage_name_and_spec).transpose()?;
        if let (Some(("$limit", limit_spec)), "$sort") = (next, name) {
            let limit = limit_skip::parse_limit(limit_spec)?;
            parsed.push(Box::new(sort_stage::SortStage::parse(spec, Some(limit))?));
            parsed.push(Box::new(limit_skip::LimitStage::new(limit)));
            index += 2;
            continue;
        }
        if name == "$documents" {
            parsed.push(Box::new(documents::DocumentsStage::parse(spec, index)?));
            index += 1;
            continue;
        }
        parsed.extend(parse_stage(name, spec, db, depth)?);
        index += 1;
    }
    // The planner gets the leading filter without its top-level `$expr`,
    // which only the pipeline can evaluate (it needs `$$NOW` and reports
    // errors); execution still applies the whole filter.
    // A `$sampleRate` draws anew each time it is evaluated: a scan that
    // applied it before the stage does would square the rate.
    let leading_match = match stages.first().and_then(|s| s.get("$match")) {
        Some(Bson::Document(filter)) if !names_operator(filter, "$sampleRate") => {
            Some(match_stage::split_top_level_expr(filter).0).filter(|f| !f.is_empty())
        }
        _ => None,
    };
    Ok(Pipeline {
        stages: parsed,
        leading_match,
        db: db.to_string(),
        memory_limit_bytes: BLOCKING_STAGE_MEMORY_BYTES_MAX,
        collation: None,
    })
}

/// Whether `operator` is a key anywhere in the filter's logical clauses.
fn names_operator(filter: &Document, operator: &str) -> bool {
    filter.iter().any(|(key, value)| {
        key == operator
            || matches!(value, Bson::Array(clauses) if clauses.iter().any(
                |clause| matches!(clause, Bson::Document(clause) if names_operator(clause, operator))))
    })
}

fn stage_name_and_spec(stage: &Document) -> Result<(&str, &Bson), QueryError> {
    if stage.len() != 1 {
        return Err(QueryError::new(
            40323,
            "A pipeline stage specification object must contain exactly one field.",
        ));
    }
    let (name, spec) = stage.iter().next().expect("one field checked above");
    Ok((name.as_str(), spec))
}

/// Parses one stage; some stages expand into several (`$sortByCount` is
/// a `$group` then a `$sort`).
fn parse_stage(name: &str, spec: &Bson, db: &str, depth: usize) -> Result<Vec<Box<dyn Stage>>, QueryError> {
    let stage: Box<dyn Stage> = match name {
        "$match" => Box::new(match_stage::MatchStage::parse(spec)?),
        "$project" => Box::new(project::ProjectStage::parse(spec)?),
        "$addFields" | "$set" => Box::new(project::AddFieldsStage::parse(name, spec)?),
        "$unset" => Box::new(project::ProjectStage::parse_unset(spec)?),
        "$sort" => Box::new(sort_stage::SortStage::parse(spec, None)?),
        "$limit" => Box::new(limit_skip::LimitStage::new(limit_skip::parse_limit(spec)?)),
        "$skip" => Box::new(limit_skip::SkipStage::parse(spec)?),
        "$group" => Box::new(group::GroupStage::parse(spec)?),
        "$count" => return count::parse_count(spec),
        "$sortByCount" => return count::parse_sort_by_count(spec),
        "$bucket" => return bucket::parse_bucket(spec),
        "$redact" => Box::new(redact::RedactStage::parse(spec)?),
        "$graphLookup" => Box::new(graph_lookup::GraphLookupStage::parse(spec)?),
        "$setWindowFields" => Box::new(window::SetWindowFieldsStage::parse(spec)?),
        "$unwind" => Box::new(unwind::UnwindStage::parse(spec)?),
        "$lookup" => Box::new(lookup::LookupStage::parse(spec, db, depth)?),
        "$replaceRoot" | "$replaceWith" => Box::new(replace_root::ReplaceRootStage::parse(name, spec)?),
        "$facet" => Box::new(facet::FacetStage::parse(spec, db, depth)?),
        "$unionWith" => Box::new(union_with::UnionWithStage::parse(spec, db, depth)?),
        "$sample" => Box::new(sample::SampleStage::parse(spec)?),
        unsupported if UNSUPPORTED_STAGES.contains(&unsupported) => {
            return Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                format!("{unsupported} is not supported by Slipstream"),
            ))
        }
        unknown => {
            return Err(QueryError::new(
                codes::UNRECOGNIZED_PIPELINE_STAGE,
                format!("Unrecognized pipeline stage name: '{unknown}'"),
            ))
        }
    };
    Ok(vec![stage])
}

/// A stream that yields one error (blocking stages report failures so).
pub(crate) fn error_stream<'a>(error: QueryError) -> DocStream<'a> {
    Box::new(std::iter::once(Err(error)))
}

/// Tracks the approximate bytes a blocking stage holds.
pub(crate) struct MemoryBudget {
    stage: &'static str,
    used_bytes: usize,
    limit_bytes: usize,
}

impl MemoryBudget {
    pub(crate) fn new(stage: &'static str, limit_bytes: usize) -> MemoryBudget {
        MemoryBudget { stage, used_bytes: 0, limit_bytes }
    }

    /// Charges `bytes`; fails once the total passes the limit.
    pub(crate) fn charge(&mut self, bytes: usize) -> Result<(), QueryError> {
        self.add(bytes);
        self.check()
    }

    /// Charges `bytes` without checking, for a stage that may give some
    /// back (`release`) before it `check`s.
    pub(crate) fn add(&mut self, bytes: usize) {
        self.used_bytes = self.used_bytes.saturating_add(bytes);
    }

    /// True while the total is past the limit.
    pub(crate) fn is_over(&self) -> bool {
        self.used_bytes > self.limit_bytes
    }

    /// Fails if the total is past the limit.
    pub(crate) fn check(&self) -> Result<(), QueryError> {
        if self.is_over() {
            return Err(QueryError::new(
                MEMORY_LIMIT_CODE,
                format!(
                    "Exceeded memory limit for {}, but didn't allow external sort. Pass allowDiskUse:true to opt in.",
                    self.stage
                ),
            ));
        }
        Ok(())
    }

    /// Returns `bytes` to the budget (a document was dropped).
    pub(crate) fn release(&mut self, bytes: usize) {
        self.used_bytes = self.used_bytes.saturating_sub(bytes);
    }
}

/// Approximate BSON size of a value, for memory accounting.
pub(crate) fn approximate_size(value: &Bson) -> usize {
    match value {
        Bson::Document(d) => document_size(d),
        Bson::Array(items) => 5 + items.iter().map(|v| 4 + approximate_size(v)).sum::<usize>(),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => 5 + s.len(),
        Bson::Binary(b) => 5 + b.bytes.len(),
        Bson::RegularExpression(r) => 2 + r.pattern.len() + r.options.len(),
        Bson::Decimal128(_) => 16,
        Bson::ObjectId(_) => 12,
        _ => 8,
    }
}

/// Approximate BSON size of a document.
pub(crate) fn document_size(doc: &Document) -> usize {
    5 + doc.iter().map(|(k, v)| 2 + k.len() + approximate_size(v)).sum::<usize>()
}
