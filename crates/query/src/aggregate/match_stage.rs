//! `$match`: keeps the documents a query filter matches.
//!
//! `$expr` (at any level of the filter) sees the pipeline's variables
//! (`$$NOW`, the command's `let`, `$lookup`'s `let`), and its evaluation
//! errors fail the pipeline, as in MongoDB.

use bson::{Bson, Document};

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
        if mentions_where(filter) {
            return Err(QueryError::bad_value("$where is not allowed in this context"));
        }
        Ok(MatchStage { filter: Filter::parse(filter)? })
    }

    fn matches(&self, doc: &Document, cx: &ExecContext<'_>) -> Result<bool, QueryError> {
        Ok(self.filter.matches_with_variables(doc, &cx.vars)?.matched)
    }
}

/// `$where` at the top of a `$match` filter or in its `$and`/`$or`/`$nor`
/// clauses: refused in a pipeline before the filter is parsed, as MongoDB
/// does (its pipelines never run JavaScript predicates).
fn mentions_where(filter: &Document) -> bool {
    filter.iter().any(|(key, value)| match (key.as_str(), value) {
        ("$where", _) => true,
        ("$and" | "$or" | "$nor", Bson::Array(clauses)) => {
            clauses.iter().any(|clause| matches!(clause, Bson::Document(clause) if mentions_where(clause)))
        }
        _ => false,
    })
}

/// The filter without its top-level `$expr`, and that `$expr`.
pub(crate) fn split_top_level_expr(filter: &Document) -> (Document, Option<&Bson>) {
    let mut rest = filter.clone();
    rest.remove("$expr");
    (rest, filter.get("$expr"))
}

impl Stage for MatchStage {
    /// Passes documents through unchanged.
    fn may_deepen(&self) -> bool {
        false
    }

    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        let filter = std::mem::replace(&mut self.filter, Filter::match_all());
        self.filter = filter.with_collation(Some(collation.clone()));
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.filter_map(move |item| match item {
            Ok(doc) => match self.matches(&doc, cx) {
                Ok(true) => Some(Ok(doc)),
                Ok(false) => None,
                Err(error) => Some(Err(error)),
            },
            // Errors pass through so that the caller sees them.
            Err(error) => Some(Err(error)),
        }))
    }
}
