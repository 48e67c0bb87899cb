//! `$facet`: runs several sub-pipelines over the same input and outputs
//! one document with each sub-pipeline's results as an array.

use bson::{Bson, Document};

use super::{document_size, error_stream, parse_at_depth, DocStream, ExecContext, MemoryBudget, Pipeline, Stage};
use crate::error::{codes, QueryError};

/// Stages a `$facet` sub-pipeline may not contain.
const FORBIDDEN_IN_FACET: &[&str] = &["$facet", "$out", "$merge", "$geoNear", "$indexStats", "$collStats", "$changeStream"];

#[derive(Debug)]
pub(crate) struct FacetStage {
    facets: Vec<(String, Pipeline)>,
}

impl FacetStage {
    pub(crate) fn parse(spec: &Bson, db: &str, depth: usize) -> Result<FacetStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(15946, "the $facet specification must be a non-empty object"));
        };
        if spec.is_empty() {
            return Err(QueryError::new(40169, "the $facet specification must be a non-empty object"));
        }
        let mut facets = Vec::with_capacity(spec.len());
        for (name, stages) in spec {
            if name.is_empty() || name.starts_with('$') || name.contains('.') {
                return Err(QueryError::new(40353, format!("$facet: invalid output field name '{name}'")));
            }
            let Bson::Array(stages) = stages else {
                return Err(QueryError::new(40170, format!("arguments to $facet must be arrays, {name} is type {}", crate::expr::type_name(&Some(stages.clone())))));
            };
            if stages.is_empty() {
                return Err(QueryError::new(40171, format!("sub-pipeline in $facet stage cannot be empty: {name}")));
            }
            let mut documents = Vec::with_capacity(stages.len());
            for stage in stages {
                let Bson::Document(stage) = stage else {
                    return Err(QueryError::new(40171, format!("subpipeline in $facet stage must contain only objects: {name}")));
                };
                if let Some(forbidden) = stage.keys().find(|k| FORBIDDEN_IN_FACET.contains(&k.as_str())) {
                    return Err(QueryError::new(40600, format!("{forbidden} is not allowed to be used within a $facet stage")));
                }
                documents.push(stage.clone());
            }
            facets.push((name.clone(), parse_at_depth(&documents, db, depth + 1)?));
        }
        if facets.is_empty() {
            return Err(QueryError::new(codes::BAD_VALUE, "the $facet specification must be a non-empty object"));
        }
        Ok(FacetStage { facets })
    }

    fn run_all(&self, input: DocStream<'_>, cx: &ExecContext<'_>) -> Result<Document, QueryError> {
        let mut budget = MemoryBudget::new("$facet", cx.memory_limit_bytes);
        let mut docs = Vec::new();
        for item in input {
            let doc = item?;
            budget.charge(document_size(&doc))?;
            docs.push(doc);
        }
        let mut out = Document::new();
        for (name, pipeline) in &self.facets {
            let stream: DocStream<'_> = Box::new(docs.iter().cloned().map(Ok));
            let results = pipeline.run(stream, cx).collect::<Result<Vec<_>, _>>()?;
            let mut output_budget = MemoryBudget::new("$facet", cx.memory_limit_bytes);
            for result in &results {
                output_budget.charge(document_size(result))?;
            }
            out.insert(name.clone(), Bson::Array(results.into_iter().map(Bson::Document).collect()));
        }
        Ok(out)
    }
}

impl Stage for FacetStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        self.facets.iter_mut().for_each(|(_, pipeline)| pipeline.set_collation(collation));
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.run_all(input, cx) {
            Ok(doc) => Box::new(std::iter::once(Ok(doc))),
            Err(error) => error_stream(error),
        }
    }
}
