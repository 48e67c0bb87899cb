//! `$match`: keeps the documents a query filter matches.

use bson::Bson;

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;
use crate::filter::Filter;

#[derive(Debug)]
pub(crate) struct MatchStage {
    filter: Filter,
}

impl MatchStage {
    pub(crate) fn parse(spec: &Bson) -> Result<MatchStage, QueryError> {
        let Bson::Document(filter) = spec else {
            return Err(QueryError::new(15959, "the match filter must be an expression in an object"));
        };
        Ok(MatchStage { filter: Filter::parse(filter)? })
    }
}

impl Stage for MatchStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, _: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.filter(move |item| match item {
            Ok(doc) => self.filter.matches(doc),
            // Errors pass through so that the caller sees them.
            Err(_) => true,
        }))
    }
}
