//! Query filters (`find`, `update`, `delete`, `$match`): parsing a filter
//! document into a tree once, then matching documents against it.
//!
//! Semantics follow MongoDB 7.0: each predicate on a path holds when *any*
//! candidate value the path reaches satisfies it (see `crate::path`);
//! negations (`$ne`, `$nin`, `$not`, `$nor`, `$exists: false`) negate that
//! whole "any", so `{a: {$ne: 5}}` rejects `{a: [5, 6]}`.

mod bits;
mod eval;
mod parse;
mod predicate;

use bson::{Bson, Document};

use crate::collation::{contains_string, Collation, CollationRef};
use crate::error::QueryError;
use crate::expr::Variables;
use crate::path::FieldPath;

pub use bits::{BitTest, BitsPredicate};
pub use predicate::{CompareOp, InList, RegexMatcher, TypeSet};


/// A parsed filter: immutable and cheap to share between threads.
#[derive(Clone, Debug)]
pub struct Filter {
    root: Node,
    /// The filter as the client sent it, for explain output.
    source: Document,
    /// The collation its string comparisons use (`None`: simple).
    collation: CollationRef,
}

/// What a match found, for the positional `$` of updates and projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatchDetails {
    pub matched: bool,
    /// Position, in the outermost array of the path, of the element that
    /// satisfied a predicate on an array path.
    pub array_position: Option<usize>,
}

/// The filter tree. The planner reads it; only `parse` builds it.
#[derive(Clone, Debug)]
pub enum Node {
    /// Matches every document (`{}`, an empty `$and` never parses).
    True,
    /// Matches no document (`$in: []`, `$all: []`).
    False,
    And(Vec<Node>),
    Or(Vec<Node>),
    /// Neither child matches: `$nor`, and `$not`/`$ne`/`$nin` over a path.
    Nor(Vec<Node>),
    /// Some candidate of `path` satisfies `predicate`. An empty path means
    /// "the value under test itself" (inside `$elemMatch` on values).
    Field {
        path: FieldPath,
        predicate: Predicate,
    },
    /// `$expr`: an aggregation expression evaluated on the whole document.
    Expr(crate::filter::eval::ExprNode),
    /// `$jsonSchema`: the whole document satisfies the schema.
    Schema(std::sync::Arc<crate::json_schema::JsonSchema>),
}

/// A condition on one value.
#[derive(Clone, Debug)]
pub enum Predicate {
    /// `$eq` (and implicit equality). `null` also matches a missing field.
    Eq(Bson),
    /// `$gt`, `$gte`, `$lt`, `$lte`, with type bracketing.
    Compare(CompareOp, Bson),
    In(InList),
    /// Some candidate is present (the negated form is a `Nor`).
    Exists,
    Type(TypeSet),
    Regex(RegexMatcher),
    /// `$mod: [divisor, remainder]`.
    Mod {
        divisor: i64,
        remainder: i64,
    },
    /// `$size`: an array with exactly this many elements.
    Size(usize),
    /// `$bitsAllSet` and the other bit tests.
    Bits(BitsPredicate),
    /// `$elemMatch` with a query: some element (a document) matches.
    ElemMatchDocument(Box<Node>),
    /// `$elemMatch` with operators: some element itself satisfies them all.
    ElemMatchValue(Box<Node>),
    /// An `$eq`, comparison or `$in` on strings under a collation: its
    /// values are already collated (`Collation::collate`), and candidates
    /// are collated before the inner predicate tests them. Index keys built
    /// with the same collation hold the same collated values, so the
    /// planner bounds such an index by the inner predicate.
    Collated(Box<CollatedPredicate>),
}

/// A string comparison under a collation (see `Predicate::Collated`).
#[derive(Clone, Debug)]
pub struct CollatedPredicate {
    /// The predicate with its values collated.
    pub collated: Predicate,
    /// The predicate as written, for upserts (`{name: "a"}` inserts "a").
    pub original: Predicate,
    pub collation: std::sync::Arc<Collation>,
}

impl Filter {
    /// Parses a filter document. Errors carry MongoDB's codes and messages
    /// (`unknown operator: $x`, `unknown top level operator: $x`, ...).
    pub fn parse(filter: &Document) -> Result<Filter, QueryError> {
        Filter::parse_collated(filter, None)
    }

    /// Parses a filter whose string comparisons (`$eq`, `$gt`..., `$in`)
    /// follow `collation`; `$regex` never does, as in MongoDB.
    pub fn parse_collated(filter: &Document, collation: CollationRef) -> Result<Filter, QueryError> {
        let parsed = Filter {
            root: parse::parse_document(filter, 0)?,
            source: filter.clone(),
            collation: None,
        };
        Ok(parsed.with_collation(collation))
    }

    /// This filter (parsed without a collation) with its string
    /// comparisons under `collation`: how a collection's default collation
    /// reaches a filter parsed before the collection was looked up.
    pub fn with_collation(mut self, collation: CollationRef) -> Filter {
        assert!(self.collation.is_none(), "a filter is collated once");
        if let Some(collation) = &collation {
            collate_node(&mut self.root, collation);
        }
        self.collation = collation;
        self
    }

    /// The collation of the filter's string comparisons (`None`: simple).
    pub fn collation(&self) -> Option<&Collation> {
        self.collation.as_deref()
    }

    /// The collation, shared (for the expressions of the same query).
    pub fn collation_ref(&self) -> CollationRef {
        self.collation.clone()
    }

    /// A filter that matches every document.
    pub fn match_all() -> Filter {
        Filter {
            root: Node::True,
            source: Document::new(),
            collation: None,
        }
    }

    pub fn matches(&self, doc: &Document) -> bool {
        eval::matches_document(&self.root, doc).is_some()
    }

    pub fn matches_with_details(&self, doc: &Document) -> MatchDetails {
        match eval::matches_document(&self.root, doc) {
            Some(array_position) => MatchDetails {
                matched: true,
                array_position,
            },
            None => MatchDetails {
                matched: false,
                array_position: None,
            },
        }
    }

    /// Like `matches_with_details`, but an `$expr` that fails to evaluate
    /// (`$divide` by zero, ...) is an error, as MongoDB fails the query;
    /// `matches` treats such a document as not matching.
    pub fn try_matches_with_details(&self, doc: &Document) -> Result<MatchDetails, QueryError> {
        self.matches_with_variables(doc, &Variables::empty())
    }

    /// Matches with the variables a command gives `$expr`: `$$NOW` and the
    /// command's `let` constants (see `Variables::with_let`). An `$expr`
    /// that fails to evaluate, or names an undefined variable, is an error,
    /// as MongoDB fails the whole command. The server's `find`, `update`,
    /// `delete`, `findAndModify` and `count` should call this.
    pub fn matches_with_variables(
        &self,
        doc: &Document,
        vars: &Variables,
    ) -> Result<MatchDetails, QueryError> {
        let mut error = None;
        predicate::clear_match_failure();
        let outcome = eval::matches_document_checked(&self.root, doc, vars, &mut error);
        if let Some(error) = predicate::take_match_failure().or(error) {
            return Err(error);
        }
        Ok(match outcome {
            Some(array_position) => MatchDetails {
                matched: true,
                array_position,
            },
            None => MatchDetails {
                matched: false,
                array_position: None,
            },
        })
    }

    /// Top-level equality conditions, in filter order: `{a: 5}`,
    /// `{a: {$eq: 5}}`, and those inside a top-level `$and`.
    pub fn equality_fields(&self) -> Vec<(String, Bson)> {
        let mut out = Vec::new();
        collect_equalities(&self.root, &mut out);
        out
    }

    /// True when the filter matches every document without looking at it.
    pub fn is_empty(&self) -> bool {
        matches!(self.root, Node::True)
    }

    /// The parsed tree, for the planner.
    pub fn root(&self) -> &Node {
        &self.root
    }

    /// The filter document this was parsed from.
    pub fn source(&self) -> &Document {
        &self.source
    }
}

impl Predicate {
    /// Whether a missing field satisfies this predicate (`null` equality,
    /// `$gte: null`, `$lt: MaxKey`, ...). The planner may only use a sparse
    /// index, or bounds that leave out null, when it does not.
    pub fn matches_missing(&self) -> bool {
        eval::predicate_matches_missing(self)
    }
}

/// Wraps every string comparison of the tree in `Predicate::Collated`.
fn collate_node(node: &mut Node, collation: &std::sync::Arc<Collation>) {
    match node {
        Node::And(children) | Node::Or(children) | Node::Nor(children) => {
            children.iter_mut().for_each(|child| collate_node(child, collation))
        }
        Node::Field { predicate, .. } => collate_predicate(predicate, collation),
        Node::Expr(expr) => expr.collation = Some(collation.clone()),
        Node::True | Node::False | Node::Schema(_) => {}
    }
}

fn collate_predicate(predicate: &mut Predicate, collation: &std::sync::Arc<Collation>) {
    let collated = match predicate {
        Predicate::ElemMatchDocument(node) | Predicate::ElemMatchValue(node) => {
            collate_node(node, collation);
            return;
        }
        Predicate::Eq(value) if contains_string(value) => Predicate::Eq(collation.collate(value).into_owned()),
        Predicate::Compare(op, value) if contains_string(value) => {
            Predicate::Compare(*op, collation.collate(value).into_owned())
        }
        // Wrapped so that index bounds know the keys are sort keys; the
        // pattern still matches the text itself.
        Predicate::Regex(_) => predicate.clone(),
        Predicate::In(list) if !list.regexes.is_empty() || list.values.iter().any(contains_string) => {
            let mut list = list.clone();
            list.values = list.values.iter().map(|value| collation.collate(value).into_owned()).collect();
            Predicate::In(list)
        }
        _ => return,
    };
    let original = std::mem::replace(predicate, Predicate::Exists);
    *predicate = Predicate::Collated(Box::new(CollatedPredicate {
        collated,
        original,
        collation: collation.clone(),
    }));
}

fn collect_equalities(node: &Node, out: &mut Vec<(String, Bson)>) {
    match node {
        Node::And(children) => children
            .iter()
            .for_each(|child| collect_equalities(child, out)),
        Node::Field {
            path,
            predicate: Predicate::Eq(value),
        } if !path.is_empty() => {
            out.push((path.dotted().to_string(), value.clone()));
        }
        Node::Field {
            path,
            predicate: Predicate::Collated(collated),
        } if !path.is_empty() => {
            if let Predicate::Eq(value) = &collated.original {
                out.push((path.dotted().to_string(), value.clone()));
            }
        }
        _ => {}
    }
}

/// A parsed filter is shared by cursors across threads.
#[allow(dead_code)]
fn assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Filter>();
}
