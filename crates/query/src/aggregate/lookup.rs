//! `$lookup`: joins each input document with the documents of another
//! collection of the same database.
//!
//! The equality form (`localField`/`foreignField`) matches as MongoDB
//! does: an array local value matches any of its elements, a missing
//! local value matches foreign documents whose field is null or missing,
//! and foreign arrays match when any element is equal (the query
//! semantics of `{foreignField: {$in: [...]}}`). A `pipeline` runs over
//! the matched (or all) foreign documents, with the `let` variables
//! evaluated against the input document and bound for its expressions
//! (a top-level `$expr` of its `$match` stages sees them).

use bson::{doc, Bson, Document};

use super::fields::{set_path, split_path};
use super::{document_size, parse_sub_pipeline, DocStream, ExecContext, MemoryBudget, Pipeline, Stage};
use crate::error::{codes, QueryError};
use crate::expr::{lookup_path_in_document, validate_variable_name, Expr};
use crate::filter::Filter;

#[derive(Debug)]
pub(crate) struct LookupStage {
    /// `None`: the pipeline's leading `$documents` makes the foreign documents.
    from: Option<String>,
    /// `(localField, foreignField)` of the equality form.
    equality: Option<(Vec<String>, String)>,
    pipeline: Option<Pipeline>,
    /// `let: {name: <expr>}`, evaluated against each input document.
    let_vars: Vec<(String, Expr)>,
    as_path: Vec<String>,
}

fn string_option<'a>(options: &'a Document, key: &str) -> Result<Option<&'a str>, QueryError> {
    match options.get(key) {
        None => Ok(None),
        Some(Bson::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(QueryError::new(codes::FAILED_TO_PARSE, format!("$lookup argument '{key}' must be a string"))),
    }
}

impl LookupStage {
    pub(crate) fn parse(spec: &Bson, db: &str, depth: usize) -> Result<LookupStage, QueryError> {
        let Bson::Document(options) = spec else {
            return Err(QueryError::new(codes::FAILED_TO_PARSE, "the $lookup specification must be an Object"));
        };
        for key in options.keys() {
            if !matches!(key.as_str(), "from" | "localField" | "foreignField" | "as" | "pipeline" | "let") {
                return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("unknown argument to $lookup: {key}")));
            }
        }
        let from = match options.get("from") {
            Some(Bson::String(s)) => Some(s.clone()),
            // MongoDB 6.0+: the pipeline's leading `$documents` makes the
            // foreign documents.
            None if super::sub_pipeline_starts_with_documents(options) => None,
            Some(Bson::Document(_)) => {
                return Err(QueryError::new(codes::COMMAND_NOT_SUPPORTED, "$lookup from another database is not supported by Slipstream"))
            }
            _ => return Err(QueryError::new(codes::FAILED_TO_PARSE, "$lookup requires a string 'from' argument")),
        };
        let as_path = match string_option(options, "as")? {
            Some(path) => split_path("$lookup", path)?,
            None => return Err(QueryError::new(codes::FAILED_TO_PARSE, "must specify 'as' field for a $lookup")),
        };
        let local = string_option(options, "localField")?;
        let foreign = string_option(options, "foreignField")?;
        let equality = match (local, foreign) {
            (Some(local), Some(foreign)) => {
                split_path("$lookup", foreign)?;
                Some((split_path("$lookup", local)?, foreign.to_string()))
            }
            (None, None) => None,
            _ => {
                return Err(QueryError::new(
                    codes::FAILED_TO_PARSE,
                    "$lookup requires both or neither of 'localField' and 'foreignField' to be specified",
                ))
            }
        };
        let pipeline = parse_sub_pipeline("$lookup", options.get("pipeline"), db, depth)?;
        if from.is_none() && equality.is_some() {
            // MongoDB matches the fields against what `$documents` makes;
            // here the match runs before the pipeline.
            return Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                "$lookup without 'from' and with 'localField' / 'foreignField' is not supported by Slipstream",
            ));
        }
        if equality.is_none() && pipeline.is_none() {
            return Err(QueryError::new(
                codes::FAILED_TO_PARSE,
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
            ));
        }
        let let_vars = match options.get("let") {
            None => Vec::new(),
            Some(_) if pipeline.is_none() => {
                return Err(QueryError::new(codes::FAILED_TO_PARSE, "$lookup with 'let' must also specify 'pipeline'"))
            }
            Some(Bson::Document(vars)) => vars
                .iter()
                .map(|(name, value)| {
                    validate_variable_name(name, false)?;
                    Ok((name.clone(), Expr::parse(value)?))
                })
                .collect::<Result<Vec<_>, QueryError>>()?,
            Some(_) => return Err(QueryError::new(codes::FAILED_TO_PARSE, "$lookup argument 'let' must be an object")),
        };
        Ok(LookupStage { from, equality, pipeline, let_vars, as_path })
    }

    /// Reads the foreign collection once per execution, within the
    /// blocking-stage memory limit.
    fn load_foreign(&self, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let Some(from) = &self.from else {
            // The pipeline's `$documents` makes them, per input document.
            return Ok(Vec::new());
        };
        let docs = cx.source.scan_collated(cx.db, from, &cx.vars.collation_ref(), true)?;
        let mut budget = MemoryBudget::new("$lookup", cx.memory_limit_bytes);
        for doc in &docs {
            budget.charge(document_size(doc))?;
        }
        Ok(docs)
    }

    fn join(&self, mut doc: Document, foreign: &[Document], cx: &ExecContext<'_>) -> Result<Document, QueryError> {
        let matched: Vec<Document> = match &self.equality {
            Some((local, foreign_field)) => {
                let values = match lookup_path_in_document(&doc, local) {
                    Some(Bson::Array(items)) => items,
                    Some(value) => vec![value],
                    None => Vec::new(),
                };
                let filter = Filter::parse_collated(&equality_filter(foreign_field, values), cx.vars.collation_ref())?;
                foreign.iter().filter(|f| filter.matches(f)).cloned().collect()
            }
            None => foreign.to_vec(),
        };
        let joined = match &self.pipeline {
            Some(pipeline) => {
                let mut vars = cx.vars.clone();
                for (name, expr) in &self.let_vars {
                    vars.bind(name.clone(), expr.evaluate(&doc, &cx.vars)?);
                }
                let inner = ExecContext { source: cx.source, db: cx.db, vars, memory_limit_bytes: cx.memory_limit_bytes };
                let stream: DocStream<'_> = Box::new(matched.into_iter().map(Ok));
                pipeline.run(stream, &inner).collect::<Result<Vec<_>, _>>()?
            }
            None => matched,
        };
        set_path(&mut doc, &self.as_path, Bson::Array(joined.into_iter().map(Bson::Document).collect()));
        Ok(doc)
    }
}

/// The query MongoDB builds for one input document: `$in` of the local
/// values (null when there are none), except that regexes compare by
/// equality (`$eq`), never as patterns.
pub(crate) fn equality_filter(foreign_field: &str, values: Vec<Bson>) -> Document {
    let values = if values.is_empty() { vec![Bson::Null] } else { values };
    let (regexes, plain): (Vec<Bson>, Vec<Bson>) =
        values.into_iter().partition(|v| matches!(v, Bson::RegularExpression(_)));
    if regexes.is_empty() {
        return doc! {foreign_field: {"$in": plain}};
    }
    let mut branches: Vec<Bson> = regexes
        .into_iter()
        .map(|regex| Bson::Document(doc! {foreign_field: {"$eq": regex}}))
        .collect();
    branches.push(Bson::Document(doc! {foreign_field: {"$in": plain}}));
    doc! {"$or": branches}
}

impl Stage for LookupStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        if let Some(pipeline) = &mut self.pipeline {
            pipeline.set_collation(collation);
        }
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        let mut foreign: Option<Vec<Document>> = None;
        Box::new(input.map(move |item| {
            let doc = item?;
            if foreign.is_none() {
                foreign = Some(self.load_foreign(cx)?);
            }
            self.join(doc, foreign.as_deref().expect("loaded above"), cx)
        }))
    }
}
