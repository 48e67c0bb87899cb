//! `$match`: keeps the documents a query filter matches.
//!
//! A top-level `$expr` is evaluated here rather than by the query filter,
//! with the pipeline's variables (`$$NOW`, `$lookup`'s `let`) and with
//! evaluation errors reported to the caller, as MongoDB does. An `$expr`
//! nested under `$and`/`$or`/`$nor` is left to the query filter, which
//! sees no variables; one that names a variable is therefore refused
//! rather than silently matching nothing.

use bson::{Bson, Document};

use super::{DocStream, ExecContext, Stage};
use crate::error::{codes, QueryError};
use crate::expr::{is_truthy, Expr};
use crate::filter::Filter;

#[derive(Debug)]
pub(crate) struct MatchStage {
    filter: Filter,
    expr: Option<Expr>,
}

impl MatchStage {
    pub(crate) fn parse(spec: &Bson) -> Result<MatchStage, QueryError> {
        let Bson::Document(filter) = spec else {
            return Err(QueryError::new(15959, "the match filter must be an expression in an object"));
        };
        if nested_expr_uses_variables(filter, true) {
            return Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                "$match: an $expr that uses variables ($$name) is only supported at the top level of the filter, not inside $and/$or/$nor",
            ));
        }
        let (rest, expr) = split_top_level_expr(filter);
        let expr = expr.map(Expr::parse).transpose()?;
        Ok(MatchStage { filter: Filter::parse(&rest)?, expr })
    }

    fn matches(&self, doc: &Document, cx: &ExecContext<'_>) -> Result<bool, QueryError> {
        if !self.filter.matches(doc) {
            return Ok(false);
        }
        match &self.expr {
            Some(expr) => Ok(is_truthy(&expr.evaluate(doc, &cx.vars)?)),
            None => Ok(true),
        }
    }
}

/// The filter without its top-level `$expr`, and that `$expr`.
pub(crate) fn split_top_level_expr(filter: &Document) -> (Document, Option<&Bson>) {
    let mut rest = filter.clone();
    rest.remove("$expr");
    (rest, filter.get("$expr"))
}

/// Whether an `$expr` below the top level names a variable other than
/// `$$ROOT`/`$$CURRENT`.
fn nested_expr_uses_variables(filter: &Document, top: bool) -> bool {
    filter.iter().any(|(key, value)| {
        if key == "$expr" && !top {
            return mentions_variable(value);
        }
        match value {
            Bson::Document(inner) => nested_expr_uses_variables(inner, false),
            Bson::Array(items) => items.iter().any(|item| match item {
                Bson::Document(inner) => nested_expr_uses_variables(inner, false),
                _ => false,
            }),
            _ => false,
        }
    })
}

fn mentions_variable(value: &Bson) -> bool {
    match value {
        Bson::String(s) => {
            s.starts_with("$$") && !s.starts_with("$$ROOT") && !s.starts_with("$$CURRENT")
        }
        Bson::Document(d) => d.iter().any(|(k, v)| k == "$let" || mentions_variable(v)),
        Bson::Array(items) => items.iter().any(mentions_variable),
        _ => false,
    }
}

impl Stage for MatchStage {
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
