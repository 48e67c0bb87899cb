//! Choosing how a query reaches its records: the collection scan, or an
//! index the query planner (`slipstream_query::planner`) picks for the
//! filter and sort, honouring `hint` and `$natural`. The result is the
//! scan to run, whether it already yields the requested order, and the
//! `winningPlan` document `explain` shows.

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_query::sort::SortSpec;
use slipstream_storage::{CollectionInfo, IndexSpec};

use slipstream_query::planner::{self, IndexCandidate};

use super::scan::{Access, KeyInterval, Scan, ID_INDEX_NAME};
use crate::error::CommandError;

/// What a query asks for, as the planner needs it.
pub struct QueryShape<'a> {
    pub filter_document: &'a Document,
    pub filter: &'a Filter,
    pub sort: Option<&'a SortSpec>,
    pub hint: Option<&'a Bson>,
    /// `sort: {$natural: 1 | -1}`: record order, reversed when true.
    pub natural_reverse: Option<bool>,
}

impl<'a> QueryShape<'a> {
    /// A filter alone: no sort, no hint, record order.
    pub fn filter_only(filter_document: &'a Document, filter: &'a Filter) -> Self {
        QueryShape { filter_document, filter, sort: None, hint: None, natural_reverse: None }
    }
}

/// The chosen plan.
#[derive(Debug)]
pub struct PlannedQuery {
    pub access: Access,
    /// The scan already yields the requested sort order.
    pub provides_sort: bool,
    /// The access stage as `explain` shows it (`COLLSCAN`, `IXSCAN` under
    /// `FETCH`, or `EOF` for a missing collection).
    pub winning_plan: Document,
    /// The collection does not exist: the plan returns nothing.
    pub eof: bool,
}

impl PlannedQuery {
    pub fn scan(&self, ns: &str) -> Scan {
        Scan::new(ns, self.access.clone())
    }
}

/// BadValue (2), as MongoDB words a hint naming no index.
fn bad_hint() -> CommandError {
    CommandError::bad_value("hint provided does not correspond to an existing index")
}

/// The index a hint names: an index name or a key pattern.
pub fn hinted_index<'a>(info: &'a CollectionInfo, hint: &Bson) -> Result<Option<&'a IndexSpec>, CommandError> {
    match hint {
        // A hidden index cannot be hinted: the planner does not know it.
        Bson::String(name) => info
            .indexes
            .iter()
            .find(|index| &index.name == name && !index.hidden)
            .map(Some)
            .ok_or_else(bad_hint),
        Bson::Document(pattern) if pattern.contains_key("$natural") => Ok(None),
        Bson::Document(pattern) => info
            .indexes
            .iter()
            .find(|index| key_patterns_equal(&index.key, pattern) && !index.hidden)
            .map(Some)
            .ok_or_else(bad_hint),
        _ => Err(CommandError::bad_value("hint must be a string or an object")),
    }
}

/// Key patterns are equal when they list the same fields in the same order
/// with numerically equal directions (`{a: 1}` equals `{a: 1.0}`).
pub fn key_patterns_equal(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter().zip(b.iter()).all(|((ka, va), (kb, vb))| {
            ka == kb && slipstream_query::compare::compare_values(va, vb) == std::cmp::Ordering::Equal
        })
}

/// `{$natural: 1 | -1}` in a hint: the direction, reversed when true.
fn natural_hint(hint: Option<&Bson>) -> Result<Option<bool>, CommandError> {
    match hint {
        Some(Bson::Document(pattern)) if pattern.contains_key("$natural") => {
            Ok(Some(natural_direction(pattern.get("$natural").unwrap_or(&Bson::Null))?))
        }
        _ => Ok(None),
    }
}

/// The direction of a `$natural` value: reversed when -1.
pub fn natural_direction(value: &Bson) -> Result<bool, CommandError> {
    let direction = match slipstream_query::compare::as_number(value) {
        Some(slipstream_query::compare::Number::Int(n)) => n as f64,
        Some(slipstream_query::compare::Number::Float(f)) => f,
        None => f64::NAN,
    };
    if direction == 1.0 {
        Ok(false)
    } else if direction == -1.0 {
        Ok(true)
    } else {
        Err(CommandError::bad_value("$natural must be 1 or -1"))
    }
}

fn collection_scan(shape: &QueryShape<'_>, reverse: bool) -> PlannedQuery {
    PlannedQuery {
        access: Access::Collection { reverse },
        provides_sort: shape.sort.is_none_or(|sort| sort.is_empty()),
        winning_plan: doc! {
            "stage": "COLLSCAN",
            "filter": shape.filter_document.clone(),
            "direction": if reverse { "backward" } else { "forward" },
        },
        eof: false,
    }
}

/// Plans a query on collection `info` (`None`: the collection does not
/// exist, and the plan is EOF).
pub fn plan_query(info: Option<&CollectionInfo>, shape: &QueryShape<'_>) -> Result<PlannedQuery, CommandError> {
    let Some(info) = info else {
        return Ok(PlannedQuery {
            access: Access::Collection { reverse: false },
            provides_sort: true,
            winning_plan: doc! {"stage": "EOF"},
            eof: true,
        });
    };
    if let Some(reverse) = shape.natural_reverse {
        return Ok(collection_scan(shape, reverse));
    }
    if let Some(reverse) = natural_hint(shape.hint)? {
        return Ok(collection_scan(shape, reverse));
    }
    let hinted = match shape.hint {
        Some(hint) => hinted_index(info, hint)?,
        None => None,
    };
    // A partial index lacks the documents its filter rejects: hinting it
    // for a query that does not imply the filter is refused, as MongoDB 7.0
    // does, rather than answered with a part of the result.
    if hinted.is_some_and(|index| !partial_usable(index, shape.filter)) {
        return Err(bad_hint());
    }
    index_plan(info, shape, hinted)
}

/// A hinted index whose collation differs from the query's: scanned whole,
/// in key order that is not the query's; the filter does the selecting.
fn mismatched_hint(info: &CollectionInfo, shape: &QueryShape<'_>, index: &IndexSpec) -> Result<PlannedQuery, CommandError> {
    let candidate = IndexCandidate {
        name: index.name.clone(),
        key: index.key.clone(),
        multikey: info.multikey_indexes.contains(&index.name),
        unique: index.unique,
        sparse: index.sparse,
    };
    let hint = Bson::String(index.name.clone());
    let plan = planner::plan(&Filter::match_all(), None, &[candidate], Some(&hint))?;
    Ok(PlannedQuery {
        access: Access::Index {
            name: index.name.clone(),
            intervals: vec![KeyInterval::all()],
            reverse: false,
            multikey: info.multikey_indexes.contains(&index.name),
        },
        provides_sort: shape.sort.is_none_or(|sort| sort.is_empty()),
        winning_plan: plan.explain,
        eof: false,
    })
}

/// An index without a partial filter, or one the query implies.
fn partial_usable(index: &IndexSpec, filter: &Filter) -> bool {
    let Some(partial) = &index.partial_filter_expression else {
        return true;
    };
    // The filter was checked when the index was created; its strings
    // compare under the index's collation.
    let Ok(pattern) = index.pattern() else {
        return false;
    };
    Filter::parse_collated(partial, pattern.collation)
        .is_ok_and(|partial| planner::filter_implies(filter.root(), partial.root()))
}

/// Asks the query planner for a plan over the collection's indexes.
fn index_plan(
    info: &CollectionInfo,
    shape: &QueryShape<'_>,
    hinted: Option<&IndexSpec>,
) -> Result<PlannedQuery, CommandError> {
    // Index keys of strings are the index collation's sort keys: only an
    // index with the query's collation can bound or order by them.
    let collation = shape.filter.collation().map(|collation| collation.to_document());
    // `_id_` is the record table, keyed by the `_id` bytes whatever
    // collation its uniqueness follows (`CollectionMeta::id_collated`).
    let same_collation = |index: &IndexSpec| match index.is_id_index() {
        true => collation.is_none(),
        false => index.collation == collation,
    };
    if let Some(index) = hinted.filter(|index| !same_collation(index)) {
        return mismatched_hint(info, shape, index);
    }
    let candidates: Vec<IndexCandidate> = info
        .indexes
        .iter()
        .filter(|index| !index.hidden && same_collation(index) && partial_usable(index, shape.filter))
        .map(|index| IndexCandidate {
            name: index.name.clone(),
            key: index.key.clone(),
            multikey: info.multikey_indexes.contains(&index.name),
            unique: index.unique || index.name == ID_INDEX_NAME,
            sparse: index.sparse,
        })
        .collect();
    // A hint was resolved to an index above (a key pattern may have named
    // it); the planner takes it by name.
    let hint = hinted.map(|index| Bson::String(index.name.clone()));
    let plan = planner::plan(shape.filter, shape.sort, &candidates, hint.as_ref())?;
    let access = match &plan.index {
        None => Access::Collection { reverse: plan.reverse },
        Some(name) => {
            let intervals = if plan.intervals.is_empty() {
                vec![KeyInterval::all()]
            } else {
                plan.intervals
                    .iter()
                    .map(|(start, end)| KeyInterval {
                        start: start.clone(),
                        end: end.clone(),
                    })
                    .collect()
            };
            // A reverse walk visits the intervals from the last one.
            let intervals = if plan.reverse {
                intervals.into_iter().rev().collect()
            } else {
                intervals
            };
            Access::Index {
                name: name.clone(),
                intervals,
                reverse: plan.reverse,
                multikey: info.multikey_indexes.contains(name),
            }
        }
    };
    let no_sort = shape.sort.is_none_or(|sort| sort.is_empty());
    Ok(PlannedQuery {
        access,
        provides_sort: no_sort || plan.provides_sort,
        winning_plan: plan.explain,
        eof: false,
    })
}
