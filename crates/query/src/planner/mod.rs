//! Plan selection: a collection scan, or one index scan over byte ranges
//! of index keys, possibly walked backwards to provide a sort.
//!
//! The executor applies the full filter to every document an index scan
//! returns, so bounds only need to be a superset of the keys of matching
//! documents. The planner therefore reasons only about the top-level
//! conjunction of field predicates and ignores everything else (`$or`,
//! `$nor`, `$expr`), which can only make bounds wider.
//!
//! Rules that keep bounds safe (each has a test in `tests/planner_*.rs`):
//! 1. A field's bounds come from predicates on exactly that path; on a
//!    multikey index two predicates on one field are not intersected
//!    (different array elements may satisfy them), one of them is used.
//! 2. Compound bounds: equality points on leading fields, then a range on
//!    the next field; later fields are unbounded.
//! 3. A sparse index is used only when some predicate on one of its fields
//!    cannot match a missing field (or when hinted).
//! 4. Indexes with a numeric path component (`a.0`) are only used when
//!    hinted, and then as a full scan that never provides a sort: the
//!    matcher and the sort read `0` both as a position and as a field
//!    name, the key generator only as a position.
//! 5. Null equality also covers `undefined` and missing fields, which the
//!    key generator stores as null, including for array elements that
//!    lack the field (`{a: [{}, {b: 1}]}` has keys null and 1 on `a.b`,
//!    as in MongoDB, so `{"a.b": null}` may use the index).
//! 6. A multikey index never provides a sort.
//! 7. On a multikey index, a field whose path shares its first component
//!    with an earlier field (`a.b` after `a.c`) ends the compound bounds:
//!    the key generator correlates such fields per array element, while
//!    the filter may be satisfied by two different elements.
//! 8. On a sparse multikey index, predicates that a missing field satisfies
//!    do not bound a field: array elements lacking every indexed field get
//!    no key (`{a: [{a: 0}, {}]}` has only the key 0 on a sparse `a.a`),
//!    yet `{"a.a": {$gte: null}}` matches the document through `{}`.

mod bounds;
mod implies;

use std::ops::Bound;

use bson::{doc, Bson, Document};

use crate::error::QueryError;
use crate::filter::{Filter, Node, Predicate};
use crate::path::array_offset;
use crate::sort::SortSpec;
pub use bounds::{ByteRange, Edge, ValueInterval};
pub use implies::filter_implies;

/// An index the planner may use.
#[derive(Clone, Debug)]
pub struct IndexCandidate {
    pub name: String,
    pub key: Document,
    pub multikey: bool,
    pub unique: bool,
    pub sparse: bool,
}

/// A range of encoded index keys (lower, upper).
pub type KeyInterval = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The chosen plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// `None` = collection scan. `"_id_"` scans the record table, whose keys
    /// are `index_key::record_key(_id)`.
    pub index: Option<String>,
    /// Index-key byte ranges, ascending and disjoint; empty with
    /// `Some(index)` means a full index scan.
    pub intervals: Vec<KeyInterval>,
    /// Walk the index backwards (for a descending sort).
    pub reverse: bool,
    /// The index order satisfies the requested sort.
    pub provides_sort: bool,
    /// MongoDB-style `winningPlan`.
    pub explain: Document,
}

/// A compound index may expand `$in` lists on several fields into the
/// cartesian product of their points; beyond this many ranges the planner
/// stops adding fields to the prefix (the bounds just get wider).
const INTERVALS_MAX: usize = 512;

/// One index field as the planner sees it.
struct KeyField {
    path: String,
    descending: bool,
}

fn key_fields(key: &Document) -> Result<Vec<KeyField>, QueryError> {
    let pattern = crate::index_key::KeyPattern::parse(key)?;
    Ok(pattern
        .fields
        .into_iter()
        .map(|f| KeyField {
            path: f.path,
            descending: f.descending,
        })
        .collect())
}

/// A necessary condition on the values of one path, as the planner reads
/// it from the filter.
#[derive(Clone, Copy)]
enum Condition<'a> {
    /// Some value (or array element) at the path satisfies the predicate.
    One(&'a Predicate),
    /// One array element at the path satisfies every predicate
    /// (`$elemMatch` on values): their bounds may be intersected even on a
    /// multikey index, because a single key must satisfy all of them.
    SameElement(&'a Node),
}

impl Condition<'_> {
    fn matches_missing(&self) -> bool {
        match self {
            Condition::One(predicate) => predicate.matches_missing(),
            // `$elemMatch` needs an array.
            Condition::SameElement(_) => false,
        }
    }
}

/// The conditions of the top-level conjunction, by path. `$elemMatch` with
/// a query also contributes its own conjuncts under the array's path
/// (`{a: {$elemMatch: {b: 5}}}` implies a key 5 in an index on `a.b`).
fn conjuncts(node: &Node) -> Vec<(String, Condition<'_>)> {
    let mut out = Vec::new();
    collect_conjuncts(node, "", &mut out);
    out
}

fn collect_conjuncts<'a>(node: &'a Node, prefix: &str, out: &mut Vec<(String, Condition<'a>)>) {
    match node {
        Node::And(children) => children
            .iter()
            .for_each(|child| collect_conjuncts(child, prefix, out)),
        Node::Field { path, predicate } if !path.is_empty() => {
            let full = if prefix.is_empty() {
                path.dotted().to_string()
            } else {
                format!("{prefix}.{}", path.dotted())
            };
            match predicate {
                Predicate::ElemMatchValue(conditions) => {
                    out.push((full, Condition::SameElement(conditions)))
                }
                Predicate::ElemMatchDocument(query) => collect_conjuncts(query, &full, out),
                other => out.push((full, Condition::One(other))),
            }
        }
        _ => {}
    }
}

/// The normalized byte ranges of one predicate on a field; `None` when it
/// does not bound the field.
fn predicate_ranges(predicate: &Predicate, field: &KeyField) -> Option<Vec<ByteRange>> {
    let intervals = bounds::value_intervals(predicate)?;
    let ranges = intervals
        .iter()
        .filter_map(|interval| bounds::field_range(interval, field.descending))
        .collect();
    Some(bounds::normalize(ranges))
}

fn intersect_sets(left: &[ByteRange], right: &[ByteRange]) -> Vec<ByteRange> {
    let mut out = Vec::new();
    for a in left {
        for b in right {
            out.extend(a.intersect(b));
        }
    }
    bounds::normalize(out)
}

/// The ranges one condition allows on a field.
fn condition_ranges(condition: &Condition, field: &KeyField) -> Option<Vec<ByteRange>> {
    match condition {
        Condition::One(predicate) => predicate_ranges(predicate, field),
        Condition::SameElement(conditions) => {
            let children: Vec<&Node> = match conditions {
                Node::And(children) => children.iter().collect(),
                single => vec![single],
            };
            let mut current: Option<Vec<ByteRange>> = None;
            for child in children {
                let Node::Field { path, predicate } = child else {
                    continue;
                };
                if !path.is_empty() {
                    continue;
                }
                let Some(ranges) = predicate_ranges(predicate, field) else {
                    continue;
                };
                current = Some(match current {
                    None => ranges,
                    Some(existing) => intersect_sets(&existing, &ranges),
                });
            }
            current
        }
    }
}

fn describe_condition(condition: &Condition) -> Vec<Bson> {
    let predicates: Vec<&Predicate> = match condition {
        Condition::One(predicate) => vec![predicate],
        Condition::SameElement(Node::And(children)) => children
            .iter()
            .filter_map(|child| match child {
                Node::Field { predicate, .. } => Some(predicate),
                _ => None,
            })
            .collect(),
        Condition::SameElement(Node::Field { predicate, .. }) => vec![predicate],
        Condition::SameElement(_) => Vec::new(),
    };
    predicates
        .into_iter()
        .filter_map(bounds::value_intervals)
        .flatten()
        .map(|interval| Bson::String(interval.describe()))
        .collect()
}

/// Whether the filter can never match anything (`$in: []`).
fn filter_is_unsatisfiable(node: &Node) -> bool {
    match node {
        Node::False => true,
        Node::And(children) => children.iter().any(filter_is_unsatisfiable),
        _ => false,
    }
}

/// Whether two paths start with the same field (and so may run through
/// the same array).
fn same_root(left: &str, right: &str) -> bool {
    left.split('.').next() == right.split('.').next()
}

fn has_numeric_component(path: &str) -> bool {
    path.split('.').any(|part| array_offset(part).is_some())
}

/// Whether a condition may bound a field of `index`. On a sparse multikey
/// index an array element that lacks every indexed field has no key, so a
/// condition that a missing field satisfies (`$gte: null`, `$exists: false`,
/// `$ne`) may be met only through such an element: it cannot bound the scan
/// (rule 8).
fn may_bound(condition: &Condition, index: &IndexCandidate) -> bool {
    !(index.sparse && index.multikey && condition.matches_missing())
}

/// Byte ranges of one field from the conditions on it, with the positions
/// of the conditions they came from; `None` when they do not bound it. An
/// empty vector of ranges means nothing can match.
fn field_ranges(
    field: &KeyField,
    conditions: &[Condition],
    index: &IndexCandidate,
) -> Option<(Vec<ByteRange>, Vec<usize>)> {
    let mut sets: Vec<(usize, Vec<ByteRange>)> = Vec::new();
    for (position, condition) in conditions.iter().enumerate() {
        if !may_bound(condition, index) {
            continue;
        }
        if let Some(ranges) = condition_ranges(condition, field) {
            sets.push((position, ranges));
        }
    }
    if sets.is_empty() {
        return None;
    }
    if index.multikey {
        // Rule 1: prefer an all-points set (equality), else the first.
        let chosen = sets
            .iter()
            .position(|(_, set)| set.iter().all(|r| r.point.is_some()))
            .unwrap_or(0);
        let (position, ranges) = sets.swap_remove(chosen);
        return Some((ranges, vec![position]));
    }
    let used = sets.iter().map(|(position, _)| *position).collect();
    let mut sets = sets.into_iter().map(|(_, set)| set);
    let mut current = sets.next().unwrap_or_default();
    for set in sets {
        current = intersect_sets(&current, &set);
    }
    Some((current, used))
}

/// Bounds of one index for the filter: ranges over whole keys, how many
/// leading fields are bounded, and how many of those are single points.
struct IndexBounds {
    ranges: Vec<ByteRange>,
    bounded_fields: usize,
    /// Fields bounded to exactly one point (a single equality).
    single_point_fields: usize,
    /// Per field, the explain text of its bounds.
    explain: Document,
    /// Every field is bounded by points: each range holds exactly one
    /// whole index key (encodings are self-delimiting, so no other key
    /// starts with it).
    whole_key_points: bool,
}

fn index_bounds(root: &Node, index: &IndexCandidate, fields: &[KeyField]) -> IndexBounds {
    let predicates = conjuncts(root);
    let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
    let mut final_ranges: Option<Vec<ByteRange>> = None;
    let mut bounded_fields = 0;
    let mut single_point_fields = 0;
    let mut explain = Document::new();
    let mut open = true;
    for (position, field) in fields.iter().enumerate() {
        if index.multikey
            && fields[..position]
                .iter()
                .any(|earlier| same_root(&earlier.path, &field.path))
        {
            // Rule 7.
            open = false;
        }
        let on_field: Vec<Condition> = predicates
            .iter()
            .filter(|(path, _)| *path == field.path)
            .map(|(_, c)| *c)
            .collect();
        let ranges = if open {
            field_ranges(field, &on_field, index)
        } else {
            None
        };
        let Some((ranges, used)) = ranges else {
            open = false;
            explain.insert(
                field.path.clone(),
                vec![Bson::String("[MinKey, MaxKey]".into())],
            );
            continue;
        };
        bounded_fields += 1;
        let texts: Vec<Bson> = used.iter().flat_map(|&i| describe_condition(&on_field[i])).collect();
        explain.insert(field.path.clone(), texts);
        let all_points = ranges.iter().all(|r| r.point.is_some());
        if all_points && !ranges.is_empty() && prefixes.len() * ranges.len() <= INTERVALS_MAX {
            if ranges.len() == 1 && single_point_fields + 1 == bounded_fields {
                single_point_fields += 1;
            }
            prefixes = prefixes
                .iter()
                .flat_map(|prefix| {
                    ranges.iter().map(move |r| {
                        [prefix.as_slice(), r.point.as_deref().unwrap_or(&[])].concat()
                    })
                })
                .collect();
            continue;
        }
        // Rule 2: a range (or an empty set) ends the prefix.
        let mut combined = Vec::new();
        for prefix in &prefixes {
            for range in &ranges {
                combined.extend(range.prefixed(prefix));
            }
        }
        final_ranges = Some(bounds::normalize(combined));
        open = false;
    }
    let whole_key_points = final_ranges.is_none() && bounded_fields == fields.len();
    let ranges = match final_ranges {
        Some(ranges) => ranges,
        None => {
            let whole = ByteRange::full();
            bounds::normalize(
                prefixes
                    .iter()
                    .filter_map(|prefix| whole.prefixed(prefix))
                    .collect(),
            )
        }
    };
    IndexBounds {
        ranges,
        bounded_fields,
        single_point_fields,
        explain,
        whole_key_points,
    }
}

/// Rule 3: some predicate on an index field rejects documents that lack it.
fn sparse_usable(root: &Node, fields: &[KeyField]) -> bool {
    conjuncts(root).iter().any(|(path, condition)| {
        fields.iter().any(|f| &f.path == path) && !condition.matches_missing()
    })
}

/// Whether walking the index (forward or backward) yields documents in
/// sort order: after the leading single-point fields, the sort's fields
/// follow the index's, all in the same or all in the opposite direction.
fn sort_direction(
    sort: &SortSpec,
    fields: &[KeyField],
    single_point_fields: usize,
) -> Option<bool> {
    let mut index_fields = fields.iter().skip(single_point_fields);
    let mut reverse: Option<bool> = None;
    for wanted in &sort.fields {
        // A sort field fixed by an equality does not affect the order.
        if fields[..single_point_fields]
            .iter()
            .any(|f| f.path == wanted.path)
        {
            continue;
        }
        let field = index_fields.next()?;
        if field.path != wanted.path {
            return None;
        }
        let flipped = field.descending != wanted.descending;
        match reverse {
            None => reverse = Some(flipped),
            Some(r) if r != flipped => return None,
            Some(_) => {}
        }
    }
    Some(reverse.unwrap_or(false))
}

struct Candidate<'a> {
    index: &'a IndexCandidate,
    bounds: IndexBounds,
    sort: Option<bool>,
}

impl Candidate<'_> {
    /// Higher is better: a unique index fully pinned by equalities first,
    /// then more equality fields, then a bounded range, then sort.
    fn score(&self, fields: usize) -> (u8, usize, usize, bool, usize) {
        let unique_hit = self.index.unique && self.bounds.single_point_fields == fields;
        (
            u8::from(unique_hit),
            self.bounds.single_point_fields,
            self.bounds.bounded_fields,
            self.sort.is_some(),
            usize::MAX - self.bounds.ranges.len(),
        )
    }
}

/// Chooses a plan. `hint` is an index name, a key pattern, or
/// `{$natural: 1 | -1}` for a collection scan.
pub fn plan(
    filter: &Filter,
    sort: Option<&SortSpec>,
    indexes: &[IndexCandidate],
    hint: Option<&Bson>,
) -> Result<Plan, QueryError> {
    let sort = sort.filter(|s| !s.is_empty());
    if let Some(hint) = hint {
        return plan_hinted(filter, sort, indexes, hint);
    }
    let mut best: Option<(Candidate, usize)> = None;
    for index in indexes {
        let fields = key_fields(&index.key)?;
        if fields.iter().any(|f| has_numeric_component(&f.path)) {
            continue;
        }
        if index.sparse && !sparse_usable(filter.root(), &fields) {
            continue;
        }
        let bounds = index_bounds(filter.root(), index, &fields);
        let sort_dir = match sort {
            Some(sort) if !index.multikey => {
                sort_direction(sort, &fields, bounds.single_point_fields)
            }
            _ => None,
        };
        if bounds.bounded_fields == 0 && sort_dir.is_none() {
            continue;
        }
        let candidate = Candidate {
            index,
            bounds,
            sort: sort_dir,
        };
        let better = match &best {
            None => true,
            Some((current, current_fields)) => {
                candidate.score(fields.len()) > current.score(*current_fields)
            }
        };
        if better {
            best = Some((candidate, fields.len()));
        }
    }
    if let Some((candidate, _)) = best {
        return Ok(index_plan(filter, candidate));
    }
    if let Node::Or(branches) = filter.root() {
        if let Some(candidate) = or_union(branches, indexes)? {
            return Ok(index_plan(filter, candidate));
        }
    }
    Ok(collection_scan(filter, false))
}

/// A top-level `$or` whose every branch bounds one index: the union of the
/// branches' ranges over that index (MongoDB would also combine different
/// indexes; that needs a plan with several scans). The union does not
/// claim to provide a sort.
fn or_union<'a>(
    branches: &[Node],
    indexes: &'a [IndexCandidate],
) -> Result<Option<Candidate<'a>>, QueryError> {
    let mut best: Option<(Candidate<'a>, usize)> = None;
    'indexes: for index in indexes {
        let fields = key_fields(&index.key)?;
        if fields.iter().any(|f| has_numeric_component(&f.path)) {
            continue;
        }
        let mut ranges = Vec::new();
        let mut explain = Document::new();
        let mut points = 0;
        for branch in branches {
            if index.sparse && !sparse_usable(branch, &fields) {
                continue 'indexes;
            }
            let bounds = index_bounds(branch, index, &fields);
            if bounds.bounded_fields == 0 {
                continue 'indexes;
            }
            points += bounds.single_point_fields;
            ranges.extend(bounds.ranges);
            for (field, texts) in bounds.explain {
                let mut merged = explain.get_array(&field).cloned().unwrap_or_default();
                merged.extend(texts.as_array().cloned().unwrap_or_default());
                explain.insert(field, merged);
            }
        }
        let bounds = IndexBounds {
            ranges: bounds::normalize(ranges),
            bounded_fields: 1,
            single_point_fields: 0,
            explain,
            whole_key_points: false,
        };
        if best
            .as_ref()
            .is_none_or(|(_, best_points)| points > *best_points)
        {
            best = Some((
                Candidate {
                    index,
                    bounds,
                    sort: None,
                },
                points,
            ));
        }
    }
    Ok(best.map(|(candidate, _)| candidate))
}

fn plan_hinted(
    filter: &Filter,
    sort: Option<&SortSpec>,
    indexes: &[IndexCandidate],
    hint: &Bson,
) -> Result<Plan, QueryError> {
    let index = match hint {
        Bson::String(name) => indexes.iter().find(|i| &i.name == name),
        Bson::Document(spec) if spec.contains_key("$natural") => {
            let reverse = matches!(crate::compare::as_number(spec.get("$natural").unwrap_or(&Bson::Null)), Some(crate::compare::Number::Int(n)) if n < 0)
                || matches!(spec.get("$natural"), Some(Bson::Double(f)) if *f < 0.0);
            return Ok(collection_scan(filter, reverse));
        }
        Bson::Document(spec) => indexes.iter().find(|i| &i.key == spec),
        _ => {
            return Err(QueryError::failed_to_parse(
                "hint must be a string or an object",
            ))
        }
    };
    let index = index.ok_or_else(|| {
        QueryError::bad_value(format!("error processing query: planner returned error :: caused by :: hint provided does not correspond to an existing index: {hint}"))
    })?;
    let fields = key_fields(&index.key)?;
    let numeric_path = fields.iter().any(|f| has_numeric_component(&f.path));
    let bounds = if numeric_path {
        // Rule 4: a full scan of a non-sparse index still sees every document.
        IndexBounds {
            ranges: vec![ByteRange::full()],
            bounded_fields: 0,
            single_point_fields: 0,
            explain: Document::new(),
            whole_key_points: false,
        }
    } else {
        index_bounds(filter.root(), index, &fields)
    };
    let sort_dir = match sort {
        // Rule 4: nor does its order follow the sort's, which reads `0` as the matcher does.
        Some(sort) if !index.multikey && !numeric_path => sort_direction(sort, &fields, bounds.single_point_fields),
        _ => None,
    };
    Ok(index_plan(
        filter,
        Candidate {
            index,
            bounds,
            sort: sort_dir,
        },
    ))
}

fn index_plan(filter: &Filter, candidate: Candidate) -> Plan {
    let reverse = candidate.sort.unwrap_or(false);
    let empty_result = candidate.bounds.ranges.is_empty() || filter_is_unsatisfiable(filter.root());
    let whole_key_points = candidate.bounds.whole_key_points;
    let mut intervals: Vec<KeyInterval> = candidate
        .bounds
        .ranges
        .into_iter()
        .map(|r| {
            if whole_key_points {
                point_interval(r.low, r.high)
            } else {
                (r.low, r.high)
            }
        })
        .collect();
    if intervals.len() == 1 && intervals[0] == (Bound::Unbounded, Bound::Unbounded) {
        intervals.clear();
    }
    let mut ixscan = doc! {
        "stage": "IXSCAN",
        "keyPattern": candidate.index.key.clone(),
        "indexName": candidate.index.name.clone(),
        "isMultiKey": candidate.index.multikey,
        "isUnique": candidate.index.unique,
        "isSparse": candidate.index.sparse,
        "direction": if reverse { "backward" } else { "forward" },
        "indexBounds": candidate.bounds.explain,
    };
    if empty_result {
        // Bounds that hold nothing: scanning one impossible key range keeps
        // the "empty vector = full scan" convention unambiguous.
        intervals = vec![(Bound::Included(vec![0xFF]), Bound::Excluded(vec![0xFF]))];
        ixscan.insert("emptyBounds", true);
    }
    let mut fetch = doc! {"stage": "FETCH", "inputStage": ixscan};
    if !filter.is_empty() {
        fetch.insert("filter", filter.source().clone());
    }
    Plan {
        index: Some(candidate.index.name.clone()),
        intervals,
        reverse,
        provides_sort: candidate.sort.is_some(),
        explain: fetch,
    }
}

/// `[k, prefix_end(k))` around one whole key `k` is `[k, k]`: said so,
/// the storage layer reads the key with one lookup instead of a range
/// scan (a point read by `_id`). Other shapes are returned unchanged.
fn point_interval(low: Bound<Vec<u8>>, high: Bound<Vec<u8>>) -> KeyInterval {
    if let Bound::Included(key) = &low {
        let end = crate::index_key::prefix_end(key);
        let is_point = match (&high, end) {
            (Bound::Excluded(high), Some(end)) => *high == end,
            (Bound::Unbounded, None) => true,
            _ => false,
        };
        if is_point {
            return (low.clone(), low);
        }
    }
    (low, high)
}

fn collection_scan(filter: &Filter, reverse: bool) -> Plan {
    Plan {
        index: None,
        intervals: Vec::new(),
        reverse,
        provides_sort: false,
        explain: doc! {
            "stage": "COLLSCAN",
            "filter": filter.source().clone(),
            "direction": if reverse { "backward" } else { "forward" },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_key::record_key;

    fn candidate(name: &str, key: Document, multikey: bool) -> IndexCandidate {
        IndexCandidate { name: name.into(), key, multikey, unique: false, sparse: false }
    }

    fn chosen(filter: Document, indexes: &[IndexCandidate]) -> Plan {
        plan(&Filter::parse(&filter).unwrap(), None, indexes, None).unwrap()
    }

    #[test]
    fn equality_on_every_index_field_gives_single_key_intervals() {
        let id = [candidate("_id_", doc! {"_id": 1}, false)];
        let p = chosen(doc! {"_id": 5}, &id);
        let key = record_key(&Bson::Int32(5));
        assert_eq!(p.intervals, vec![(Bound::Included(key.clone()), Bound::Included(key))]);
        let p = chosen(doc! {"_id": {"$in": [1, 2.0, 3]}}, &id);
        let keys: Vec<KeyInterval> = [1, 2, 3]
            .iter()
            .map(|n| record_key(&Bson::Int32(*n)))
            .map(|k| (Bound::Included(k.clone()), Bound::Included(k)))
            .collect();
        assert_eq!(p.intervals, keys);
        let compound = [candidate("a_1_b_-1", doc! {"a": 1, "b": -1}, false)];
        let p = chosen(doc! {"a": "x", "b": 2}, &compound);
        assert_eq!(p.intervals.len(), 1);
        assert!(matches!(&p.intervals[0], (Bound::Included(low), Bound::Included(high)) if low == high));
    }

    #[test]
    fn partial_or_range_bounds_stay_half_open() {
        let compound = [candidate("a_1_b_1", doc! {"a": 1, "b": 1}, false)];
        // Only the first field pinned: every key starting with it.
        let p = chosen(doc! {"a": 1}, &compound);
        assert!(matches!(&p.intervals[0], (Bound::Included(_), Bound::Excluded(_))));
        let id = [candidate("_id_", doc! {"_id": 1}, false)];
        let p = chosen(doc! {"_id": {"$gte": 5}}, &id);
        assert!(!matches!(&p.intervals[0], (Bound::Included(low), Bound::Included(high)) if low == high));
    }

    #[test]
    fn point_interval_only_rewrites_the_prefix_range_of_a_key() {
        let key = vec![20, 1, 2];
        let end = crate::index_key::prefix_end(&key).unwrap();
        assert_eq!(
            point_interval(Bound::Included(key.clone()), Bound::Excluded(end)),
            (Bound::Included(key.clone()), Bound::Included(key.clone()))
        );
        let wider = (Bound::Included(key.clone()), Bound::Excluded(vec![21]));
        assert_eq!(point_interval(wider.0.clone(), wider.1.clone()), wider);
        assert_eq!(
            point_interval(Bound::Unbounded, Bound::Unbounded),
            (Bound::Unbounded, Bound::Unbounded)
        );
    }
}
