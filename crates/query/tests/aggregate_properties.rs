//! Property tests: pipeline stages against deliberately naive references.

use std::collections::BTreeMap;

use bson::{doc, Bson, DateTime, Document};
use proptest::prelude::*;
use slipstream_query::aggregate::{CollectionSource, Pipeline};
use slipstream_query::QueryError;

struct NoCollections;

impl CollectionSource for NoCollections {
    fn scan(&self, _: &str, _: &str) -> Result<Vec<Document>, QueryError> {
        Ok(Vec::new())
    }
}

fn run(stages: &[Document], input: &[Document]) -> Vec<Document> {
    let pipeline = Pipeline::parse(stages, "test").unwrap();
    pipeline.execute(Box::new(input.iter().cloned().map(Ok)), &NoCollections, DateTime::from_millis(0)).unwrap()
}

/// A value of a `$group` input: mostly small integers, sometimes values
/// `$sum` must ignore.
fn summand() -> impl Strategy<Value = Option<Bson>> {
    prop_oneof![
        6 => (-1000i32..1000).prop_map(|v| Some(Bson::Int32(v))),
        1 => Just(None),
        1 => Just(Some(Bson::String("seven".into()))),
        1 => Just(Some(Bson::Null)),
    ]
}

fn group_input() -> impl Strategy<Value = Vec<Document>> {
    prop::collection::vec((0i32..5, summand()), 0..60).prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (key, value))| {
                let mut d = doc! {"_id": i as i32, "k": key};
                if let Some(v) = value {
                    d.insert("v", v);
                }
                d
            })
            .collect()
    })
}

/// A sort key drawn from several BSON types, or absent.
fn sort_value() -> impl Strategy<Value = Option<Bson>> {
    prop_oneof![
        (-5i32..5).prop_map(|v| Some(Bson::Int32(v))),
        (-5i64..5).prop_map(|v| Some(Bson::Int64(v))),
        (-5.0f64..5.0).prop_map(|v| Some(Bson::Double(v))),
        "[a-c]{0,2}".prop_map(|s| Some(Bson::String(s))),
        Just(Some(Bson::Null)),
        Just(None),
        prop::collection::vec(-3i32..3, 0..3).prop_map(|v| Some(Bson::Array(v.into_iter().map(Bson::Int32).collect()))),
    ]
}

fn sort_input() -> impl Strategy<Value = Vec<Document>> {
    prop::collection::vec(sort_value(), 0..80).prop_map(|values| {
        values
            .into_iter()
            .enumerate()
            .map(|(i, value)| {
                let mut d = doc! {"_id": i as i32};
                if let Some(v) = value {
                    d.insert("s", v);
                }
                d
            })
            .collect()
    })
}

proptest! {
    /// `$group` with `$sum`/`$count`/`$push` matches a fold over a BTreeMap.
    #[test]
    fn group_sum_matches_a_naive_fold(input in group_input()) {
        let out = run(&[doc! {"$group": {"_id": "$k", "total": {"$sum": "$v"}, "n": {"$count": {}}, "ids": {"$push": "$_id"}}}], &input);
        let mut expected: BTreeMap<i32, (i64, i32, Vec<Bson>)> = BTreeMap::new();
        for d in &input {
            let entry = expected.entry(d.get_i32("k").unwrap()).or_default();
            if let Ok(v) = d.get_i32("v") {
                entry.0 += i64::from(v);
            }
            entry.1 += 1;
            entry.2.push(d.get("_id").unwrap().clone());
        }
        let expected: Vec<Document> = expected
            .into_iter()
            .map(|(k, (total, n, ids))| doc! {"_id": k, "total": i32::try_from(total).unwrap(), "n": n, "ids": ids})
            .collect();
        prop_assert_eq!(out, expected);
    }

    /// `$sort` then `$limit k` (a top-k sort) equals a full sort truncated.
    #[test]
    fn sort_then_limit_equals_full_sort_truncated(input in sort_input(), limit in 1usize..100, descending in any::<bool>()) {
        let direction = if descending { -1 } else { 1 };
        let top = run(&[doc! {"$sort": {"s": direction}}, doc! {"$limit": limit as i64}], &input);
        let mut full = run(&[doc! {"$sort": {"s": direction}}], &input);
        full.truncate(limit);
        prop_assert_eq!(top, full);
    }

    /// `$sort` outputs a permutation of its input in non-decreasing order.
    #[test]
    fn sort_outputs_an_ordered_permutation(input in sort_input()) {
        let out = run(&[doc! {"$sort": {"s": 1, "_id": 1}}], &input);
        prop_assert_eq!(out.len(), input.len());
        let spec = slipstream_query::sort::SortSpec::parse(&doc! {"s": 1, "_id": 1}).unwrap();
        for pair in out.windows(2) {
            prop_assert!(spec.compare(&pair[0], &pair[1]).is_le());
        }
    }

    /// `$skip n` then `$limit m` is slicing.
    #[test]
    fn skip_limit_is_slicing(input in sort_input(), skip in 0usize..100, limit in 1usize..100) {
        let out = run(&[doc! {"$skip": skip as i64}, doc! {"$limit": limit as i64}], &input);
        let expected: Vec<Document> = input.iter().skip(skip).take(limit).cloned().collect();
        prop_assert_eq!(out, expected);
    }

    /// `$unwind` emits one document per array element, and keeps non-array
    /// values whole.
    #[test]
    fn unwind_emits_one_document_per_element(input in sort_input()) {
        let out = run(&[doc! {"$unwind": "$s"}], &input);
        let expected: usize = input.iter().map(|d| match d.get("s") {
            Some(Bson::Array(items)) => items.len(),
            None | Some(Bson::Null) => 0,
            Some(_) => 1,
        }).sum();
        prop_assert_eq!(out.len(), expected);
        prop_assert!(out.iter().all(|d| !matches!(d.get("s"), Some(Bson::Array(_)))));
    }

    /// Running and sliding window sums equal naive folds over each
    /// partition sorted by `_id`.
    #[test]
    fn window_sums_match_naive_folds(input in group_input(), width in 0i64..4) {
        let out = run(&[doc! {"$setWindowFields": {
            "partitionBy": "$k",
            "sortBy": {"_id": 1},
            "output": {
                "running": {"$sum": "$v", "window": {"documents": ["unbounded", "current"]}},
                "sliding": {"$sum": "$v", "window": {"documents": [-width, width]}},
            },
        }}], &input);
        let mut partitions: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for d in &input {
            let value = d.get_i32("v").map(i64::from).unwrap_or(0);
            partitions.entry(d.get_i32("k").unwrap()).or_default().push((d.get_i32("_id").unwrap(), value));
        }
        let mut expected = Vec::new();
        for rows in partitions.values() {
            for (i, (id, _)) in rows.iter().enumerate() {
                let running: i64 = rows[..=i].iter().map(|r| r.1).sum();
                let lo = (i as i64 - width).max(0) as usize;
                let hi = ((i as i64 + width) as usize).min(rows.len() - 1);
                let sliding: i64 = rows[lo..=hi].iter().map(|r| r.1).sum();
                expected.push((*id, running, sliding));
            }
        }
        let actual: Vec<(i32, i64, i64)> = out
            .iter()
            .map(|d| (d.get_i32("_id").unwrap(), i64::from(d.get_i32("running").unwrap()), i64::from(d.get_i32("sliding").unwrap())))
            .collect();
        prop_assert_eq!(actual, expected);
    }
}
