//! A command's `let` option (find, aggregate, update, delete,
//! findAndModify; MongoDB 5.0+): constants evaluated once, before any
//! document is read, and visible as `$$name` to the filter's `$expr`, to
//! pipeline-style updates and to every aggregation stage.
//!
//! Pipelines and updates take the evaluated `Variables` directly. Filters
//! are matched by scan code that has no variables to pass, so a filter is
//! bound instead: each `$expr` operand `E` becomes
//! `{$let: {vars: {name: {$literal: value}, ...}, in: E}}`. The expression
//! engine's own `$let` scoping then gives the constants exactly the
//! visibility MongoDB gives them (an inner `$let`/`$map` may still shadow
//! a name), and the values are the ones evaluated here once, so a `$rand`
//! constant is the same in the filter and in the pipeline.

use bson::{doc, Bson, Document};
use slipstream_query::expr::{Expr, Variables};

use crate::error::CommandError;

/// The evaluated `let` constants of one command.
#[derive(Clone, Debug)]
pub(crate) struct CommandLet {
    /// Each constant with its value, in `let` order.
    constants: Document,
    /// The same constants (and `$$NOW`) for pipelines and updates.
    variables: Variables,
}

impl CommandLet {
    /// Reads `body.let` (absent or null: no constants) and evaluates it at
    /// `now`. Names and expressions are checked as MongoDB 7.0 checks them
    /// (`Variables::with_let`): an invalid name fails with 9, a system
    /// constant with 4738901, a field reference with 4890500.
    pub(crate) fn parse(body: &Document, command: &str, now: bson::DateTime) -> Result<CommandLet, CommandError> {
        let let_doc = match body.get("let") {
            None | Some(Bson::Null) => return Ok(CommandLet::none(now)),
            Some(Bson::Document(let_doc)) => let_doc,
            Some(other) => {
                return Err(CommandError::new(
                    14,
                    format!(
                        "BSON field '{command}.let' is the wrong type '{}', expected type 'object'",
                        crate::exec::args::type_name(other)
                    ),
                ))
            }
        };
        // Validation (names, system constants, field references) is the
        // query layer's; its evaluated bindings are not readable from here,
        // so the constants are evaluated below in the same order and scope.
        Variables::with_let(let_doc, now)?;
        let mut variables = Variables::empty().with_now(now);
        let mut constants = Document::new();
        for (name, value) in let_doc {
            let expr = Expr::parse(value)?;
            let value = expr.evaluate_optional(&Document::new(), &variables)?.ok_or_else(|| {
                CommandError::new(
                    115,
                    format!("'let' constant '{name}' evaluates to a missing value, which Slipstream does not support"),
                )
            })?;
            variables.bind(name.clone(), value.clone());
            constants.insert(name.clone(), value);
        }
        Ok(CommandLet { constants, variables })
    }

    /// No constants; `$$NOW` is `now`.
    pub(crate) fn none(now: bson::DateTime) -> CommandLet {
        CommandLet {
            constants: Document::new(),
            variables: Variables::empty().with_now(now),
        }
    }

    pub(crate) fn variables(&self) -> &Variables {
        &self.variables
    }

    /// `filter` with every `$expr` (at the top level and inside `$and`,
    /// `$or`, `$nor`, where MongoDB allows it) seeing the constants.
    /// Takes the filter by value so that the common case, a command
    /// without `let`, costs no copy.
    pub(crate) fn bind_filter(&self, filter: Document) -> Document {
        if self.constants.is_empty() {
            return filter;
        }
        let mut bound = Document::new();
        for (key, value) in filter {
            let value = match (key.as_str(), value) {
                ("$expr", expr) => self.bind_expr(expr),
                ("$and" | "$or" | "$nor", Bson::Array(clauses)) => Bson::Array(
                    clauses
                        .into_iter()
                        .map(|clause| match clause {
                            Bson::Document(clause) => Bson::Document(self.bind_filter(clause)),
                            other => other,
                        })
                        .collect(),
                ),
                (_, value) => value,
            };
            bound.insert(key, value);
        }
        bound
    }

    fn bind_expr(&self, expr: Bson) -> Bson {
        let vars: Document = self
            .constants
            .iter()
            .map(|(name, value)| (name.clone(), Bson::Document(doc! {"$literal": value.clone()})))
            .collect();
        Bson::Document(doc! {"$let": {"vars": vars, "in": expr}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_query::filter::Filter;

    fn now() -> bson::DateTime {
        bson::DateTime::from_millis(1_700_000_000_000)
    }

    #[test]
    fn bound_filters_see_the_constants_in_nested_clauses() {
        let lets = CommandLet::parse(
            &doc! {"let": {"id": 2, "twice": {"$multiply": ["$$id", 2]}}},
            "find",
            now(),
        )
        .unwrap();
        let filter = doc! {"$or": [{"$expr": {"$eq": ["$_id", "$$twice"]}}, {"a": 1}]};
        let filter = Filter::parse(&lets.bind_filter(filter)).unwrap();
        assert!(filter.matches(&doc! {"_id": 4}));
        assert!(!filter.matches(&doc! {"_id": 2}));
        assert!(filter.matches(&doc! {"_id": 9, "a": 1}));
    }

    #[test]
    fn constants_that_read_documents_or_bad_names_are_refused() {
        let error = CommandLet::parse(&doc! {"let": {"x": "$a"}}, "find", now()).unwrap_err();
        assert_eq!(error.code, 4890500);
        let error = CommandLet::parse(&doc! {"let": {"Bad": 1}}, "find", now()).unwrap_err();
        assert_eq!(error.code, 9);
    }

    #[test]
    fn without_let_the_filter_is_unchanged() {
        let lets = CommandLet::parse(&doc! {}, "find", now()).unwrap();
        let filter = doc! {"$expr": {"$eq": ["$a", 1]}};
        assert_eq!(lets.bind_filter(filter.clone()), filter);
    }
}
