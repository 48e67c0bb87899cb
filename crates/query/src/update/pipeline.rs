//! Pipeline-style updates (`update: [{$set: ...}, ...]`, MongoDB 4.2+):
//! the document runs through the stages MongoDB allows in an update, and
//! the result replaces it, keeping `_id`.

use std::sync::Arc;

use bson::{Bson, Document};

use crate::aggregate::{CollectionSource, Pipeline};
use crate::error::{codes, QueryError};
use crate::expr::Variables;

/// The stages MongoDB accepts in an update pipeline.
const UPDATE_STAGES: &[&str] = &[
    "$addFields",
    "$set",
    "$project",
    "$unset",
    "$replaceRoot",
    "$replaceWith",
];

/// A parsed update pipeline; shared because stages are not `Clone`.
#[derive(Clone, Debug)]
pub struct UpdatePipeline {
    pipeline: Arc<Pipeline>,
}

/// Update pipelines have no stage that reads another collection; this
/// source answers any attempt with an error instead of data.
struct NoCollections;

impl CollectionSource for NoCollections {
    fn scan(&self, _db: &str, collection: &str) -> Result<Vec<Document>, QueryError> {
        Err(QueryError::new(
            codes::INVALID_OPTIONS,
            format!("an update pipeline cannot read collection '{collection}'"),
        ))
    }
}

impl UpdatePipeline {
    pub fn parse(stages: &[Bson]) -> Result<UpdatePipeline, QueryError> {
        let mut documents = Vec::with_capacity(stages.len());
        for stage in stages {
            let Bson::Document(stage) = stage else {
                return Err(QueryError::failed_to_parse(
                    "Each element of the 'pipeline' array must be an object",
                ));
            };
            if let Some(name) = stage.keys().next() {
                if stage.len() == 1 && !UPDATE_STAGES.contains(&name.as_str()) {
                    return Err(QueryError::new(
                        codes::INVALID_OPTIONS,
                        format!("{name} is not allowed to be used within an update"),
                    ));
                }
            }
            documents.push(stage.clone());
        }
        // Update pipelines read no other collection, so no database is
        // needed to resolve one.
        let pipeline = Pipeline::parse(&documents, "")?;
        Ok(UpdatePipeline {
            pipeline: Arc::new(pipeline),
        })
    }

    /// Runs the document through the stages with a command's variables
    /// (`$$NOW`, the `let` constants); the result must be exactly one
    /// document.
    pub fn run_with_variables(&self, doc: &Document, vars: &Variables) -> Result<Document, QueryError> {
        let input = Box::new(std::iter::once(Ok(doc.clone())));
        let mut output = self.pipeline.execute_with_variables(input, &NoCollections, vars)?;
        if output.len() != 1 {
            return Err(QueryError::new(
                codes::INVALID_OPTIONS,
                format!(
                    "an update pipeline must produce exactly one document, produced {}",
                    output.len()
                ),
            ));
        }
        Ok(output.remove(0))
    }
}
