//! Matching a document against a parsed filter tree.
//!
//! Every function returns `Option<Option<usize>>`: `None` when the node does
//! not match, `Some(position)` when it does, with the array position that
//! satisfied it (if any) for the positional `$` operator.

use bson::{Bson, Document};

use super::predicate::{compare_matches, eq_matches, mod_matches};
use super::{Node, Predicate};
use crate::error::QueryError;
use crate::expr::{is_truthy, Expr, Variables};
use crate::path::{any_candidate, LeafArrays};

type Outcome = Option<Option<usize>>;

/// A parsed `$expr`.
#[derive(Clone, Debug)]
pub struct ExprNode {
    pub expr: Expr,
    /// The filter's collation, which the expression's comparisons follow
    /// when the caller's variables carry none (`find`'s `$expr`).
    pub collation: crate::collation::CollationRef,
}

impl ExprNode {
    /// An expression that fails at run time (`$divide` by zero) does not
    /// match; the first such error is kept in `error` so that callers that
    /// follow MongoDB (which fails the query) can report it.
    fn holds(&self, doc: &Document, vars: &Variables, error: &mut Option<QueryError>) -> bool {
        let result = match (&self.collation, vars.collation()) {
            (Some(collation), None) => {
                self.expr.evaluate(doc, &vars.clone().with_collation(Some(collation.clone())))
            }
            _ => self.expr.evaluate(doc, vars),
        };
        match result {
            Ok(value) => is_truthy(&value),
            Err(e) => {
                error.get_or_insert(e);
                false
            }
        }
    }
}

/// `$expr` only appears at the top level of a filter (never inside
/// `$elemMatch`), so only this walk can meet evaluation errors.
pub fn matches_document(node: &Node, doc: &Document) -> Outcome {
    matches_document_checked(node, doc, &Variables::empty(), &mut None)
}

/// `vars` are what a top-level `$expr` sees (`$$NOW`, a command's `let`).
pub fn matches_document_checked(
    node: &Node,
    doc: &Document,
    vars: &Variables,
    error: &mut Option<QueryError>,
) -> Outcome {
    match node {
        Node::True => Some(None),
        Node::False => None,
        Node::And(children) => {
            let mut position = None;
            for child in children {
                let found = matches_document_checked(child, doc, vars, error)?;
                position = position.or(found);
            }
            Some(position)
        }
        Node::Or(children) => children
            .iter()
            .find_map(|child| matches_document_checked(child, doc, vars, error)),
        Node::Nor(children) => match children
            .iter()
            .any(|child| matches_document_checked(child, doc, vars, error).is_some())
        {
            true => None,
            false => Some(None),
        },
        Node::Field { path, predicate } => {
            let mut found = None;
            let leaf = leaf_mode(predicate);
            any_candidate(doc, path, leaf, &mut |candidate| match satisfies(
                predicate,
                candidate.value,
            ) {
                Some(element) => {
                    found = Some(candidate.array_position.or(element));
                    true
                }
                None => false,
            });
            found
        }
        Node::Expr(expr) => expr.holds(doc, vars, error).then_some(None),
        Node::Schema(schema) => schema.matches(doc).then_some(None),
    }
}

/// Matching inside `$elemMatch` on values: every field node has the empty
/// path and tests the element itself, without expanding arrays.
pub fn matches_value(node: &Node, value: &Bson) -> bool {
    match node {
        Node::True => true,
        Node::False => false,
        Node::And(children) => children.iter().all(|child| matches_value(child, value)),
        Node::Or(children) => children.iter().any(|child| matches_value(child, value)),
        Node::Nor(children) => !children.iter().any(|child| matches_value(child, value)),
        Node::Field { path, predicate } if path.is_empty() => {
            satisfies(predicate, Some(value)).is_some()
        }
        Node::Field { .. } | Node::Expr(_) | Node::Schema(_) => match value {
            Bson::Document(doc) => matches_document(node, doc).is_some(),
            _ => false,
        },
    }
}

pub fn predicate_matches_missing(predicate: &Predicate) -> bool {
    satisfies(predicate, None).is_some()
}

fn leaf_mode(predicate: &Predicate) -> LeafArrays {
    match predicate {
        Predicate::Size(_) | Predicate::ElemMatchDocument(_) | Predicate::ElemMatchValue(_) => {
            LeafArrays::Whole
        }
        _ => LeafArrays::WholeAndElements,
    }
}

/// Whether one candidate satisfies the predicate; for `$elemMatch`, also
/// which element did (MongoDB reports it to the positional operator).
fn satisfies(predicate: &Predicate, candidate: Option<&Bson>) -> Option<Option<usize>> {
    let element = match (predicate, candidate) {
        (Predicate::ElemMatchDocument(query), Some(Bson::Array(items))) => items
            .iter()
            .position(|item| element_matches_query(query, item)),
        (Predicate::ElemMatchValue(conditions), Some(Bson::Array(items))) => items
            .iter()
            .position(|item| matches_value(conditions, item)),
        _ => return satisfies_value(predicate, candidate).then_some(None),
    };
    element.map(Some)
}

fn satisfies_value(predicate: &Predicate, candidate: Option<&Bson>) -> bool {
    match predicate {
        Predicate::Eq(target) => eq_matches(candidate, target),
        Predicate::Compare(op, target) => compare_matches(*op, candidate, target),
        Predicate::In(list) => list.matches(candidate),
        Predicate::Exists => candidate.is_some(),
        Predicate::Type(types) => types.matches(candidate),
        Predicate::Regex(regex) => regex.matches(candidate),
        Predicate::Mod { divisor, remainder } => mod_matches(candidate, *divisor, *remainder),
        Predicate::Bits(bits) => bits.matches(candidate),
        Predicate::Size(size) => {
            matches!(candidate, Some(Bson::Array(items)) if items.len() == *size)
        }
        // Arrays were handled by `satisfies`; anything else is no array.
        Predicate::ElemMatchDocument(_) | Predicate::ElemMatchValue(_) => false,
        Predicate::Collated(collated) => {
            let value = candidate.map(|value| collated.collation.collate(value));
            match &collated.collated {
                // Regexes of an `$in` match the text itself, not its sort key.
                Predicate::In(list) => {
                    list.values.iter().any(|target| eq_matches(value.as_deref(), target))
                        || list.regexes.iter().any(|regex| regex.matches(candidate))
                }
                Predicate::Regex(regex) => regex.matches(candidate),
                inner => satisfies_value(inner, value.as_deref()),
            }
        }
    }
}

/// `$elemMatch` with a query applies it to elements that are documents or
/// arrays (an array is seen as a document keyed "0", "1", ...).
fn element_matches_query(query: &Node, item: &Bson) -> bool {
    match item {
        Bson::Document(doc) => matches_document(query, doc).is_some(),
        Bson::Array(items) => {
            let as_doc: Document = items
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), v.clone()))
                .collect();
            matches_document(query, &as_doc).is_some()
        }
        _ => false,
    }
}
