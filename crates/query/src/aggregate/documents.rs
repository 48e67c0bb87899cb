//! `$documents: <expr>`: a source stage producing the documents of an
//! array expression (`{aggregate: 1, pipeline: [{$documents: [...]}]}`).
//! It must come first; the input it replaces is ignored.

use bson::Bson;

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;
use crate::expr::{type_name, Expr};

#[derive(Debug)]
pub(crate) struct DocumentsStage {
    documents: Expr,
}

impl DocumentsStage {
    pub(crate) fn parse(spec: &Bson, position: usize) -> Result<DocumentsStage, QueryError> {
        if position != 0 {
            return Err(QueryError::new(40602, "$documents is only valid as the first stage in a pipeline"));
        }
        Ok(DocumentsStage { documents: Expr::parse(spec)? })
    }

    fn produce(&self, cx: &ExecContext<'_>) -> Result<Vec<bson::Document>, QueryError> {
        let value = self.documents.evaluate_optional(&bson::Document::new(), &cx.vars)?;
        let Some(Bson::Array(items)) = value else {
            return Err(QueryError::new(5858203, format!("error during $documents evaluation: expected an array, found {}", type_name(&value))));
        };
        items
            .into_iter()
            .map(|item| match item {
                Bson::Document(d) => Ok(d),
                other => Err(QueryError::new(
                    5858203,
                    format!("error during $documents evaluation: each element must be an object, found {}", type_name(&Some(other))),
                )),
            })
            .collect()
    }
}

impl Stage for DocumentsStage {
    fn apply<'a>(&'a self, _input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.produce(cx) {
            Ok(docs) => Box::new(docs.into_iter().map(Ok)),
            Err(error) => super::error_stream(error),
        }
    }
}
