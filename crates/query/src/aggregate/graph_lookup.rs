//! `$graphLookup`: a breadth-first search through another collection.
//!
//! Starting from the `startWith` values, each round finds the foreign
//! documents whose `connectToField` equals one of the current values
//! (with `$lookup`'s equality rules), records each document once with its
//! depth, and continues from their `connectFromField` values, until no
//! new document is found or `maxDepth` is reached.

use bson::{Bson, Document};

use super::fields::{set_path, split_path};
use super::lookup::equality_filter;
use super::{document_size, DocStream, ExecContext, MemoryBudget, Stage};
use crate::collation::{compare_with, Collation};
use crate::error::{codes, QueryError};
use crate::expr::{lookup_path_in_document, Expr};
use crate::filter::Filter;

#[derive(Debug)]
pub(crate) struct GraphLookupStage {
    from: String,
    start_with: Expr,
    connect_from: Vec<String>,
    connect_to: String,
    as_path: Vec<String>,
    max_depth: Option<u64>,
    depth_field: Option<Vec<String>>,
    restrict: Option<Document>,
}

fn required_string<'a>(options: &'a Document, key: &str) -> Result<&'a str, QueryError> {
    match options.get(key) {
        Some(Bson::String(s)) => Ok(s),
        Some(_) => Err(QueryError::new(40103, format!("expected a string as the '{key}' argument to $graphLookup"))),
        None => Err(QueryError::new(40105, format!("$graphLookup requires a '{key}' field"))),
    }
}

impl GraphLookupStage {
    pub(crate) fn parse(spec: &Bson) -> Result<GraphLookupStage, QueryError> {
        let Bson::Document(options) = spec else {
            return Err(QueryError::new(codes::FAILED_TO_PARSE, "the $graphLookup specification must be an object"));
        };
        const KNOWN: &[&str] = &["from", "startWith", "connectFromField", "connectToField", "as", "maxDepth", "depthField", "restrictSearchWithMatch"];
        if let Some(unknown) = options.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(QueryError::new(40104, format!("Unknown argument to $graphLookup: {unknown}")));
        }
        let start_with = options.get("startWith").ok_or_else(|| QueryError::new(40105, "$graphLookup requires a 'startWith' field"))?;
        let max_depth = match options.get("maxDepth") {
            None => None,
            Some(value) => match crate::compare::as_number(value) {
                Some(crate::compare::Number::Int(n)) if n >= 0 => Some(n as u64),
                Some(crate::compare::Number::Float(f)) if f >= 0.0 && f.fract() == 0.0 => Some(f as u64),
                _ => return Err(QueryError::new(40101, "maxDepth requires a nonnegative argument")),
            },
        };
        let depth_field = match options.get("depthField") {
            None => None,
            Some(Bson::String(s)) => Some(split_path("$graphLookup", s)?),
            Some(_) => return Err(QueryError::new(40103, "expected a string as the 'depthField' argument to $graphLookup")),
        };
        let restrict = match options.get("restrictSearchWithMatch") {
            None => None,
            Some(Bson::Document(filter)) => {
                Filter::parse(filter)?;
                Some(filter.clone())
            }
            Some(_) => return Err(QueryError::new(40185, "restrictSearchWithMatch must be an object")),
        };
        let connect_to = required_string(options, "connectToField")?;
        split_path("$graphLookup", connect_to)?;
        Ok(GraphLookupStage {
            from: required_string(options, "from")?.to_string(),
            start_with: Expr::parse(start_with)?,
            connect_from: split_path("$graphLookup", required_string(options, "connectFromField")?)?,
            connect_to: connect_to.to_string(),
            as_path: split_path("$graphLookup", required_string(options, "as")?)?,
            max_depth,
            depth_field,
            restrict,
        })
    }

    /// The values a round continues from: arrays contribute their elements,
    /// each once (equal under the operation's collation).
    fn spread(value: Option<Bson>, into: &mut Vec<Bson>, collation: Option<&Collation>) {
        let known = |into: &[Bson], v: &Bson| into.iter().any(|existing| compare_with(collation, existing, v).is_eq());
        match value {
            Some(Bson::Array(items)) => {
                for item in items {
                    if !known(into, &item) {
                        into.push(item);
                    }
                }
            }
            Some(v) if !known(into, &v) => into.push(v),
            Some(_) | None => {}
        }
    }

    fn search(&self, doc: &Document, foreign: &[Document], cx: &ExecContext<'_>) -> Result<Vec<Bson>, QueryError> {
        let mut frontier = Vec::new();
        Self::spread(Some(self.start_with.evaluate(doc, &cx.vars)?), &mut frontier, cx.vars.collation());
        let mut visited = vec![false; foreign.len()];
        let mut found = Vec::new();
        let mut budget = MemoryBudget::new("$graphLookup", cx.memory_limit_bytes);
        let mut depth: u64 = 0;
        while !frontier.is_empty() && self.max_depth.is_none_or(|max| depth <= max) {
            let mut filter = equality_filter(&self.connect_to, std::mem::take(&mut frontier));
            if let Some(restrict) = &self.restrict {
                filter = bson::doc! {"$and": [filter, restrict.clone()]};
            }
            let filter = Filter::parse_collated(&filter, cx.vars.collation_ref())?;
            for (index, candidate) in foreign.iter().enumerate() {
                if visited[index] || !filter.matches(candidate) {
                    continue;
                }
                visited[index] = true;
                let next = lookup_path_in_document(candidate, &self.connect_from);
                Self::spread(next, &mut frontier, cx.vars.collation());
                let mut result = candidate.clone();
                if let Some(path) = &self.depth_field {
                    set_path(&mut result, path, Bson::Int64(depth as i64));
                }
                budget.charge(document_size(&result))?;
                found.push(Bson::Document(result));
            }
            depth += 1;
        }
        Ok(found)
    }
}

impl Stage for GraphLookupStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        let mut foreign: Option<Vec<Document>> = None;
        Box::new(input.map(move |item| {
            let mut doc = item?;
            if foreign.is_none() {
                let docs = cx.source.scan_collated(cx.db, &self.from, &cx.vars.collation_ref(), true)?;
                let mut budget = MemoryBudget::new("$graphLookup", cx.memory_limit_bytes);
                for d in &docs {
                    budget.charge(document_size(d))?;
                }
                foreign = Some(docs);
            }
            let found = self.search(&doc, foreign.as_deref().expect("loaded above"), cx)?;
            set_path(&mut doc, &self.as_path, Bson::Array(found));
            Ok(doc)
        }))
    }
}
