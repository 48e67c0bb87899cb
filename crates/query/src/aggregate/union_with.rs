//! `$unionWith: "coll"` or `{coll, pipeline}`: the input, followed by the
//! documents of another collection of the same database (after its own
//! pipeline, if any). Without `coll`, the pipeline must begin with
//! `$documents`, which then makes the documents (MongoDB 6.0+).

use bson::Bson;

use super::{parse_sub_pipeline, sub_pipeline_starts_with_documents, DocStream, ExecContext, Pipeline, Stage};
use crate::error::{codes, QueryError};

const WITHOUT_COLLECTION: &str =
    "$unionWith stage without explicit collection must have a pipeline with $documents as first stage";
const COLL_NOT_A_STRING: &str = "$unionWith requires a string 'coll' argument";

#[derive(Debug)]
pub(crate) struct UnionWithStage {
    /// `None`: the pipeline's leading `$documents` makes the documents.
    collection: Option<String>,
    pipeline: Option<Pipeline>,
}

impl UnionWithStage {
    pub(crate) fn parse(spec: &Bson, db: &str, depth: usize) -> Result<UnionWithStage, QueryError> {
        match spec {
            Bson::String(collection) => Ok(UnionWithStage { collection: Some(collection.clone()), pipeline: None }),
            Bson::Document(options) => {
                let collection = match options.get("coll") {
                    Some(Bson::String(c)) => Some(c.clone()),
                    None if sub_pipeline_starts_with_documents(options) => None,
                    None => return Err(QueryError::new(codes::FAILED_TO_PARSE, WITHOUT_COLLECTION)),
                    Some(_) => return Err(QueryError::new(codes::FAILED_TO_PARSE, COLL_NOT_A_STRING)),
                };
                if let Some(other) = options.keys().find(|k| *k != "coll" && *k != "pipeline") {
                    return Err(QueryError::new(40415, format!("BSON field '$unionWith.{other}' is an unknown field.")));
                }
                let pipeline = parse_sub_pipeline("$unionWith", options.get("pipeline"), db, depth)?;
                Ok(UnionWithStage { collection, pipeline })
            }
            _ => Err(QueryError::new(codes::FAILED_TO_PARSE, "the $unionWith stage specification must be an object or string")),
        }
    }
}

impl Stage for UnionWithStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        if let Some(pipeline) = &mut self.pipeline {
            pipeline.set_collation(collation);
        }
    }

    /// Adds stored documents, or a sub-pipeline's (whose own stages check theirs).
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        // The other collection is read only once the input is exhausted.
        let other = std::iter::once(()).flat_map(move |()| -> DocStream<'a> {
            let Some(collection) = &self.collection else {
                let pipeline = self.pipeline.as_ref().expect("a $unionWith without a collection has a pipeline");
                return pipeline.run(Box::new(std::iter::empty()), cx);
            };
            match cx.source.scan_collated(cx.db, collection, &cx.vars.collation_ref(), false) {
                Ok(docs) => {
                    let stream: DocStream<'a> = Box::new(docs.into_iter().map(Ok));
                    match &self.pipeline {
                        Some(pipeline) => pipeline.run(stream, cx),
                        None => stream,
                    }
                }
                Err(error) => super::error_stream(error),
            }
        });
        Box::new(input.chain(other))
    }
}
