//! The filter matcher checked against a deliberately naive reference
//! (etcd-io/raft `quorum/quick_test.go` style): random small documents and
//! random filters, the matcher's answer must equal the reference's.
//!
//! The reference is written from MongoDB 7.0's documented rules, as
//! plainly as possible, over a small value domain (null, small numbers,
//! two strings, booleans, documents, arrays) with its own comparison:
//! - A path reaches "leaf" values: through a document by field name (a
//!   missing field or a scalar in the way gives *missing*); through an array
//!   by applying the same path to each element that is a document, and by
//!   position to the element whose index the next component spells
//!   (jstests/core/null2.js: scalars and empty arrays give nothing).
//! - Value predicates ($eq, ranges, $in, $type, $regex, $mod) hold if some
//!   leaf, or some element of a leaf array, satisfies them; $size and
//!   $elemMatch look only at leaves. Null equals missing.
//! - $ne, $nin, $not, $nor negate the whole "some".

use std::cmp::Ordering;

use bson::{Bson, Document};
use proptest::prelude::*;
use slipstream_query::filter::Filter;

// ---------------------------------------------------------------- reference

fn rank(v: &Bson) -> u8 {
    match v {
        Bson::Null => 1,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => 2,
        Bson::String(_) => 3,
        Bson::Document(_) => 4,
        Bson::Array(_) => 5,
        Bson::Boolean(_) => 6,
        other => panic!("value outside the reference domain: {other:?}"),
    }
}

fn number(v: &Bson) -> f64 {
    match v {
        Bson::Int32(n) => f64::from(*n),
        Bson::Int64(n) => *n as f64,
        Bson::Double(f) => *f,
        _ => unreachable!(),
    }
}

/// BSON order over the reference domain: type rank first, then value;
/// documents by (rank, key, value) per field, arrays by element.
fn ref_compare(a: &Bson, b: &Bson) -> Ordering {
    if rank(a) != rank(b) {
        return rank(a).cmp(&rank(b));
    }
    match (a, b) {
        (Bson::Null, Bson::Null) => Ordering::Equal,
        (Bson::String(x), Bson::String(y)) => x.cmp(y),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::Document(x), Bson::Document(y)) => {
            let xs: Vec<_> = x.iter().collect();
            let ys: Vec<_> = y.iter().collect();
            for i in 0..xs.len().min(ys.len()) {
                let order = rank(xs[i].1)
                    .cmp(&rank(ys[i].1))
                    .then(xs[i].0.cmp(ys[i].0))
                    .then(ref_compare(xs[i].1, ys[i].1));
                if order != Ordering::Equal {
                    return order;
                }
            }
            xs.len().cmp(&ys.len())
        }
        (Bson::Array(x), Bson::Array(y)) => {
            for i in 0..x.len().min(y.len()) {
                let order = ref_compare(&x[i], &y[i]);
                if order != Ordering::Equal {
                    return order;
                }
            }
            x.len().cmp(&y.len())
        }
        _ => number(a).partial_cmp(&number(b)).unwrap(),
    }
}

/// The leaf values a path reaches (`None` = missing), without expanding
/// arrays found at the end.
fn leaves(value: &Bson, parts: &[&str]) -> Vec<Option<Bson>> {
    if parts.is_empty() {
        return vec![Some(value.clone())];
    }
    match value {
        Bson::Document(d) => match d.get(parts[0]) {
            None => vec![None],
            Some(inner) => leaves(inner, &parts[1..]),
        },
        Bson::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if parts[0] == i.to_string() {
                    out.extend(leaves(item, &parts[1..]));
                } else if matches!(item, Bson::Document(_)) {
                    out.extend(leaves(item, parts));
                }
            }
            out
        }
        _ => vec![None],
    }
}

/// Leaves plus the elements of leaf arrays.
fn expanded(leaves: &[Option<Bson>]) -> Vec<Option<Bson>> {
    let mut out = Vec::new();
    for leaf in leaves {
        out.push(leaf.clone());
        if let Some(Bson::Array(items)) = leaf {
            out.extend(items.iter().cloned().map(Some));
        }
    }
    out
}

#[derive(Clone, Debug)]
enum Op {
    Eq(Bson),
    Ne(Bson),
    Cmp(&'static str, Bson),
    In(Vec<Bson>),
    Nin(Vec<Bson>),
    Exists(bool),
    Type(&'static str),
    Size(usize),
    All(Vec<Bson>),
    Mod(i64, i64),
    Regex(&'static str),
    Not(Vec<Op>),
    ElemMatchValue(Vec<Op>),
    ElemMatchDocument(Box<F>),
}

#[derive(Clone, Debug)]
enum F {
    And(Vec<F>),
    Or(Vec<F>),
    Nor(Vec<F>),
    /// `{path: value}`.
    Implicit(&'static str, Bson),
    /// `{path: {$op: ..., ...}}` (operator names distinct).
    Ops(&'static str, Vec<Op>),
}

fn ref_eq(candidate: &Option<Bson>, target: &Bson) -> bool {
    match (candidate, target) {
        (None, Bson::Null) => true,
        (None, _) => false,
        (Some(v), t) => ref_compare(v, t) == Ordering::Equal,
    }
}

fn ref_cmp(op: &str, candidate: &Option<Bson>, target: &Bson) -> bool {
    let value = candidate.clone().unwrap_or(Bson::Null);
    if rank(&value) != rank(target) {
        return false;
    }
    let order = ref_compare(&value, target);
    match op {
        "$gt" => order == Ordering::Greater,
        "$gte" => order != Ordering::Less,
        "$lt" => order == Ordering::Less,
        _ => order != Ordering::Greater,
    }
}

fn ref_type(alias: &str, value: &Bson) -> bool {
    match alias {
        "number" => rank(value) == 2,
        "double" => matches!(value, Bson::Double(_)),
        "int" => matches!(value, Bson::Int32(_)),
        "string" => matches!(value, Bson::String(_)),
        "object" => matches!(value, Bson::Document(_)),
        "array" => matches!(value, Bson::Array(_)),
        "null" => matches!(value, Bson::Null),
        "bool" => matches!(value, Bson::Boolean(_)),
        _ => unreachable!(),
    }
}

fn ref_regex(pattern: &str, value: &Bson) -> bool {
    let s = match value {
        Bson::String(s) => s,
        _ => return false,
    };
    match pattern {
        "^x" => s.starts_with('x'),
        "y" => s.contains('y'),
        "^$" => s.is_empty(),
        _ => unreachable!(),
    }
}

fn ref_mod(value: &Bson, divisor: i64, remainder: i64) -> bool {
    rank(value) == 2 && (number(value).trunc() as i64) % divisor == remainder
}

/// One operator over a path's leaves.
fn ref_op(op: &Op, leaves: &[Option<Bson>]) -> bool {
    let all = expanded(leaves);
    let some = |test: &dyn Fn(&Option<Bson>) -> bool| all.iter().any(test);
    match op {
        Op::Eq(t) => some(&|c| ref_eq(c, t)),
        Op::Ne(t) => !some(&|c| ref_eq(c, t)),
        Op::Cmp(name, t) => some(&|c| ref_cmp(name, c, t)),
        Op::In(ts) => some(&|c| ts.iter().any(|t| ref_eq(c, t))),
        Op::Nin(ts) => !some(&|c| ts.iter().any(|t| ref_eq(c, t))),
        Op::Exists(want) => leaves.iter().any(Option::is_some) == *want,
        Op::Type(alias) => some(&|c| c.as_ref().is_some_and(|v| ref_type(alias, v))),
        Op::Size(n) => leaves
            .iter()
            .any(|l| matches!(l, Some(Bson::Array(items)) if items.len() == *n)),
        Op::All(ts) => !ts.is_empty() && ts.iter().all(|t| some(&|c| ref_eq(c, t))),
        Op::Mod(d, r) => some(&|c| c.as_ref().is_some_and(|v| ref_mod(v, *d, *r))),
        Op::Regex(p) => some(&|c| c.as_ref().is_some_and(|v| ref_regex(p, v))),
        Op::Not(ops) => !ops.iter().all(|inner| ref_op(inner, leaves)),
        Op::ElemMatchValue(ops) => leaves.iter().any(|l| match l {
            Some(Bson::Array(items)) => items
                .iter()
                .any(|item| ops.iter().all(|o| ref_value_op(o, item))),
            _ => false,
        }),
        Op::ElemMatchDocument(f) => leaves.iter().any(|l| match l {
            // MongoDB's ElemMatchObjectMatchExpression tests every element
            // that is a BSON object, and an array is one (keyed "0", "1", ...).
            Some(Bson::Array(items)) => items.iter().any(|item| match item {
                Bson::Document(d) => ref_matches(f, d),
                Bson::Array(inner) => {
                    let as_doc: Document = inner.iter().enumerate().map(|(i, v)| (i.to_string(), v.clone())).collect();
                    ref_matches(f, &as_doc)
                }
                _ => false,
            }),
            _ => false,
        }),
    }
}

/// One operator applied to a single value (inside `$elemMatch` on values):
/// no path, no array expansion.
fn ref_value_op(op: &Op, value: &Bson) -> bool {
    let c = Some(value.clone());
    match op {
        Op::Eq(t) => ref_eq(&c, t),
        Op::Ne(t) => !ref_eq(&c, t),
        Op::Cmp(name, t) => ref_cmp(name, &c, t),
        Op::In(ts) => ts.iter().any(|t| ref_eq(&c, t)),
        Op::Nin(ts) => !ts.iter().any(|t| ref_eq(&c, t)),
        Op::Type(alias) => ref_type(alias, value),
        Op::Size(n) => matches!(value, Bson::Array(items) if items.len() == *n),
        Op::Mod(d, r) => ref_mod(value, *d, *r),
        Op::Regex(p) => ref_regex(p, value),
        Op::Not(ops) => !ops.iter().all(|o| ref_value_op(o, value)),
        Op::ElemMatchValue(ops) => match value {
            Bson::Array(items) => items
                .iter()
                .any(|item| ops.iter().all(|o| ref_value_op(o, item))),
            _ => false,
        },
        Op::Exists(_) | Op::All(_) | Op::ElemMatchDocument(_) => {
            unreachable!("not generated inside $elemMatch on values")
        }
    }
}

fn ref_matches(f: &F, doc: &Document) -> bool {
    let root = Bson::Document(doc.clone());
    let path_leaves = |path: &str| leaves(&root, &path.split('.').collect::<Vec<_>>());
    match f {
        F::And(fs) => fs.iter().all(|g| ref_matches(g, doc)),
        F::Or(fs) => fs.iter().any(|g| ref_matches(g, doc)),
        F::Nor(fs) => !fs.iter().any(|g| ref_matches(g, doc)),
        F::Implicit(path, value) => ref_op(&Op::Eq(value.clone()), &path_leaves(path)),
        F::Ops(path, ops) => {
            let ls = path_leaves(path);
            ops.iter().all(|op| ref_op(op, &ls))
        }
    }
}

// ---------------------------------------------------------------- to BSON

fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Eq(_) => "$eq",
        Op::Ne(_) => "$ne",
        Op::Cmp(name, _) => name,
        Op::In(_) => "$in",
        Op::Nin(_) => "$nin",
        Op::Exists(_) => "$exists",
        Op::Type(_) => "$type",
        Op::Size(_) => "$size",
        Op::All(_) => "$all",
        Op::Mod(..) => "$mod",
        Op::Regex(_) => "$regex",
        Op::Not(_) => "$not",
        Op::ElemMatchValue(_) | Op::ElemMatchDocument(_) => "$elemMatch",
    }
}

fn ops_to_bson(ops: &[Op]) -> Document {
    let mut out = Document::new();
    for op in ops {
        let argument = match op {
            Op::Eq(v) | Op::Ne(v) | Op::Cmp(_, v) => v.clone(),
            Op::In(vs) | Op::Nin(vs) | Op::All(vs) => Bson::Array(vs.clone()),
            Op::Exists(b) => Bson::Boolean(*b),
            Op::Type(alias) => Bson::String(alias.to_string()),
            Op::Size(n) => Bson::Int64(*n as i64),
            Op::Mod(d, r) => Bson::Array(vec![Bson::Int64(*d), Bson::Int64(*r)]),
            Op::Regex(p) => Bson::String(p.to_string()),
            Op::Not(inner) | Op::ElemMatchValue(inner) => Bson::Document(ops_to_bson(inner)),
            Op::ElemMatchDocument(f) => Bson::Document(to_bson(f)),
        };
        out.insert(op_name(op), argument);
    }
    out
}

fn to_bson(f: &F) -> Document {
    let mut out = Document::new();
    match f {
        F::And(fs) | F::Or(fs) | F::Nor(fs) => {
            let name = match f {
                F::And(_) => "$and",
                F::Or(_) => "$or",
                _ => "$nor",
            };
            out.insert(
                name,
                Bson::Array(fs.iter().map(|g| Bson::Document(to_bson(g))).collect()),
            );
        }
        F::Implicit(path, value) => {
            out.insert(*path, value.clone());
        }
        F::Ops(path, ops) => {
            out.insert(*path, Bson::Document(ops_to_bson(ops)));
        }
    }
    out
}

// ---------------------------------------------------------------- generators

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        Just(Bson::Null),
        (-2i32..3).prop_map(Bson::Int32),
        prop::sample::select(vec![-1.5f64, 0.5, 2.0]).prop_map(Bson::Double),
        prop::sample::select(vec!["x", "xy", "y", ""]).prop_map(|s| Bson::String(s.to_string())),
        any::<bool>().prop_map(Bson::Boolean),
    ]
}

fn key() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["a", "b", "c", "0", "1"])
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Bson::Array),
            prop::collection::vec((key(), inner), 0..3).prop_map(|fields| Bson::Document(
                fields
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect()
            )),
        ]
    })
}

fn document() -> impl Strategy<Value = Document> {
    prop::collection::vec((key(), value()), 0..4).prop_map(|fields| {
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    })
}

fn path() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "a", "b", "a.b", "a.0", "a.1", "a.b.c", "b.0.a", "a.0.b", "c.a",
    ])
}

fn small_values() -> impl Strategy<Value = Vec<Bson>> {
    prop::collection::vec(value(), 0..3)
}

/// Operators usable on one value (inside `$elemMatch` on values and `$not`).
fn value_op(depth: u32) -> BoxedStrategy<Op> {
    let leaf = prop_oneof![
        value().prop_map(Op::Eq),
        value().prop_map(Op::Ne),
        (
            prop::sample::select(vec!["$gt", "$gte", "$lt", "$lte"]),
            value()
        )
            .prop_map(|(n, v)| Op::Cmp(n, v)),
        small_values().prop_map(Op::In),
        small_values().prop_map(Op::Nin),
        prop::sample::select(vec![
            "number", "double", "int", "string", "object", "array", "null", "bool"
        ])
        .prop_map(Op::Type),
        (0usize..3).prop_map(Op::Size),
        ((1i64..4), (-1i64..2)).prop_map(|(d, r)| Op::Mod(d, r)),
        prop::sample::select(vec!["^x", "y", "^$"]).prop_map(Op::Regex),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        4 => leaf,
        1 => prop::collection::vec(value_op(depth - 1), 1..3).prop_map(|ops| Op::Not(dedupe(ops))),
        1 => prop::collection::vec(value_op(depth - 1), 1..3).prop_map(|ops| Op::ElemMatchValue(dedupe(ops))),
    ]
    .boxed()
}

/// Operators on a path.
fn path_op(depth: u32) -> BoxedStrategy<Op> {
    let extra = prop_oneof![
        any::<bool>().prop_map(Op::Exists),
        small_values().prop_map(Op::All),
    ];
    if depth == 0 {
        return prop_oneof![4 => value_op(0), 1 => extra].boxed();
    }
    prop_oneof![
        6 => value_op(depth),
        1 => extra,
        1 => filter(depth - 1).prop_map(|f| Op::ElemMatchDocument(Box::new(f))),
        1 => prop::collection::vec(path_op(depth - 1), 1..3).prop_map(|ops| {
            // `$not` takes operators on the same path, not `$elemMatch` with
            // a query (which is allowed too, but keep the reference simple).
            Op::Not(dedupe(ops))
        }),
    ]
    .boxed()
}

/// One operator per name, as a BSON document holds each key once.
fn dedupe(ops: Vec<Op>) -> Vec<Op> {
    let mut seen = Vec::new();
    ops.into_iter()
        .filter(|op| {
            let name = op_name(op);
            let fresh = !seen.contains(&name);
            seen.push(name);
            fresh
        })
        .collect()
}

fn filter(depth: u32) -> BoxedStrategy<F> {
    let leaf = prop_oneof![
        (path(), value()).prop_map(|(p, v)| F::Implicit(p, v)),
        (path(), prop::collection::vec(path_op(depth.min(1)), 1..3))
            .prop_map(|(p, ops)| F::Ops(p, dedupe(ops))),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        3 => leaf,
        1 => prop::collection::vec(filter(depth - 1), 1..3).prop_map(F::And),
        1 => prop::collection::vec(filter(depth - 1), 1..3).prop_map(F::Or),
        1 => prop::collection::vec(filter(depth - 1), 1..3).prop_map(F::Nor),
    ]
    .boxed()
}

// Implicit equality with a document value whose first key is an operator
// would parse as operators; the generators never produce `$` keys, so
// every generated filter is valid.
proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn matcher_agrees_with_naive_reference(f in filter(2), docs in prop::collection::vec(document(), 1..6)) {
        let bson_filter = to_bson(&f);
        let parsed = Filter::parse(&bson_filter).map_err(|e| TestCaseError::fail(format!("{bson_filter}: {e}")))?;
        for doc in &docs {
            let expected = ref_matches(&f, doc);
            prop_assert_eq!(parsed.matches(doc), expected, "filter {} on {}", bson_filter, doc);
            prop_assert_eq!(parsed.matches_with_details(doc).matched, expected);
        }
    }

    #[test]
    fn leaf_values_match_the_reference_walk(doc in document(), p in path()) {
        // Equality with each value the reference reaches must match (the
        // walk reaches it too), which pins the path walk itself.
        let root = Bson::Document(doc.clone());
        for leaf in expanded(&leaves(&root, &p.split('.').collect::<Vec<_>>())) {
            let target = leaf.unwrap_or(Bson::Null);
            let mut filter = Document::new();
            filter.insert(p, Bson::Document(bson::doc! {"$eq": target.clone()}));
            prop_assert!(Filter::parse(&filter).unwrap().matches(&doc), "{} should match {}", filter, doc);
        }
    }
}
