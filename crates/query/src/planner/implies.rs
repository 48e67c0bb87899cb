//! Whether a query implies a partial index's filter: only then may the
//! planner answer the query from that index, which holds no entry for the
//! documents its filter rejects.
//!
//! The test is conservative (false when unsure), as MongoDB's
//! `expression::isSubsetOf` is: the filter's conjuncts must each follow
//! from one conjunct of the query on the same path, or from every branch of
//! a query `$or`. A predicate on a path holds when some value the path
//! reaches satisfies it, so a value-level implication (every value that
//! satisfies the query's predicate satisfies the filter's) carries over to
//! arrays.

use bson::Bson;

use crate::collation::contains_string;
use crate::compare::{canonical_type_rank, compare_values, values_equal};
use crate::filter::{CompareOp, Node, Predicate};

/// True when every document `query` matches, `partial` matches too.
pub fn filter_implies(query: &Node, partial: &Node) -> bool {
    match partial {
        Node::True => true,
        Node::And(children) => children.iter().all(|child| filter_implies(query, child)),
        Node::Or(children) if children.iter().any(|child| filter_implies(query, child)) => true,
        _ => query_implies_one(query, partial),
    }
}

/// `partial` (not an `$and`) follows from `query`.
fn query_implies_one(query: &Node, partial: &Node) -> bool {
    match query {
        Node::False => true,
        Node::And(children) => children.iter().any(|child| query_implies_one(child, partial)),
        Node::Or(branches) => !branches.is_empty() && branches.iter().all(|branch| filter_implies(branch, partial)),
        Node::Field { path, predicate } => match partial {
            Node::Field {
                path: partial_path,
                predicate: partial_predicate,
            } => path.dotted() == partial_path.dotted() && predicate_implies(predicate, partial_predicate),
            Node::Or(children) => children.iter().any(|child| query_implies_one(query, child)),
            _ => false,
        },
        _ => false,
    }
}

/// Every value satisfying `query` satisfies `partial`.
fn predicate_implies(query: &Predicate, partial: &Predicate) -> bool {
    // Collated values (sort keys) compare only with values collated the
    // same way; a plain string beside a collated one proves nothing.
    match (query, partial) {
        (Predicate::Collated(query), Predicate::Collated(partial)) => {
            return *query.collation == *partial.collation && predicate_implies(&query.collated, &partial.collated)
        }
        (Predicate::Collated(query), partial) => {
            return !mentions_string(partial) && predicate_implies(&query.collated, partial)
        }
        (query, Predicate::Collated(partial)) => {
            return !mentions_string(query) && predicate_implies(query, &partial.collated)
        }
        _ => {}
    }
    match query {
        Predicate::Eq(value) => value_satisfies(value, partial),
        Predicate::In(list) => {
            list.regexes.is_empty()
                && !list.values.is_empty()
                && list.values.iter().all(|value| value_satisfies(value, partial))
        }
        Predicate::Compare(op, bound) => range_implies(*op, bound, partial),
        Predicate::Exists => matches!(partial, Predicate::Exists),
        Predicate::Type(types) => match partial {
            Predicate::Exists => true,
            Predicate::Type(partial_types) => types.codes.iter().all(|code| partial_types.codes.contains(code)),
            _ => false,
        },
        _ => false,
    }
}

/// Whether a predicate compares with a string.
fn mentions_string(predicate: &Predicate) -> bool {
    match predicate {
        Predicate::Eq(value) | Predicate::Compare(_, value) => contains_string(value),
        Predicate::In(list) => list.values.iter().any(contains_string),
        _ => false,
    }
}

/// `value` (one value of the path, never missing) satisfies `partial`.
fn value_satisfies(value: &Bson, partial: &Predicate) -> bool {
    if matches!(value, Bson::Null | Bson::Undefined) {
        // A query for null also matches a missing field, which no
        // predicate of a partial filter but `{$eq: null}` admits.
        return matches!(partial, Predicate::Eq(Bson::Null));
    }
    match partial {
        Predicate::Exists => true,
        Predicate::Eq(target) => same_type(value, target) && values_equal(value, target),
        Predicate::Compare(op, target) => same_type(value, target) && accepts(*op, compare_values(value, target)),
        Predicate::In(list) => {
            list.regexes.is_empty()
                && list
                    .values
                    .iter()
                    .any(|target| same_type(value, target) && values_equal(value, target))
        }
        Predicate::Type(types) => types.matches(Some(value)),
        _ => false,
    }
}

/// Every value `op bound` admits satisfies `partial`: the filter must be a
/// range in the same direction over the same type, no tighter.
fn range_implies(op: CompareOp, bound: &Bson, partial: &Predicate) -> bool {
    if matches!(bound, Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey) {
        return false;
    }
    match partial {
        Predicate::Exists => true,
        Predicate::Compare(partial_op, target) if same_type(bound, target) => {
            let order = compare_values(bound, target);
            match (op, partial_op) {
                (CompareOp::Gt | CompareOp::Gte, CompareOp::Gte) => order != std::cmp::Ordering::Less,
                (CompareOp::Gt, CompareOp::Gt) => order != std::cmp::Ordering::Less,
                (CompareOp::Gte, CompareOp::Gt) => order == std::cmp::Ordering::Greater,
                (CompareOp::Lt | CompareOp::Lte, CompareOp::Lte) => order != std::cmp::Ordering::Greater,
                (CompareOp::Lt, CompareOp::Lt) => order != std::cmp::Ordering::Greater,
                (CompareOp::Lte, CompareOp::Lt) => order == std::cmp::Ordering::Less,
                _ => false,
            }
        }
        _ => false,
    }
}

fn same_type(a: &Bson, b: &Bson) -> bool {
    canonical_type_rank(a) == canonical_type_rank(b)
}

fn accepts(op: CompareOp, order: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    match op {
        CompareOp::Gt => order == Greater,
        CompareOp::Gte => order != Less,
        CompareOp::Lt => order == Less,
        CompareOp::Lte => order != Greater,
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::filter::Filter;

    fn implies(query: bson::Document, partial: bson::Document) -> bool {
        let query = Filter::parse(&query).unwrap();
        let partial = Filter::parse(&partial).unwrap();
        filter_implies(query.root(), partial.root())
    }

    #[test]
    fn ranges_and_equalities() {
        let partial = doc! {"a": {"$gt": 5}};
        assert!(implies(doc! {"a": 7}, partial.clone()));
        assert!(implies(doc! {"a": 7.5, "b": 1}, partial.clone()));
        assert!(implies(doc! {"a": {"$gt": 5}}, partial.clone()));
        assert!(implies(doc! {"a": {"$gte": 6}}, partial.clone()));
        assert!(implies(doc! {"a": {"$in": [6, 9]}}, partial.clone()));
        assert!(!implies(doc! {"a": {"$gte": 5}}, partial.clone()));
        assert!(!implies(doc! {"a": 5}, partial.clone()));
        assert!(!implies(doc! {"a": "7"}, partial.clone()));
        assert!(!implies(doc! {"a": {"$lt": 9}}, partial.clone()));
        assert!(!implies(doc! {"b": 7}, partial.clone()));
        assert!(!implies(doc! {"a": {"$in": [6, 4]}}, partial));
    }

    #[test]
    fn exists_type_in_and_compound_filters() {
        assert!(implies(doc! {"a": 1}, doc! {"a": {"$exists": true}}));
        assert!(!implies(doc! {"a": null}, doc! {"a": {"$exists": true}}));
        assert!(implies(doc! {"a": "x"}, doc! {"a": {"$type": "string"}}));
        assert!(implies(doc! {"s": "on"}, doc! {"s": {"$in": ["on", "paused"]}}));
        assert!(!implies(doc! {"s": "off"}, doc! {"s": {"$in": ["on", "paused"]}}));
        let partial = doc! {"$and": [{"a": {"$gte": 1}}, {"b": "x"}]};
        assert!(implies(doc! {"a": 3, "b": "x", "c": 0}, partial.clone()));
        assert!(!implies(doc! {"a": 3}, partial));
        let either = doc! {"$or": [{"a": 1}, {"b": 1}]};
        assert!(implies(doc! {"b": 1}, either.clone()));
        assert!(implies(doc! {"$or": [{"a": 1}, {"b": 1, "c": 2}]}, either.clone()));
        assert!(!implies(doc! {"c": 1}, either));
    }
}
