//! BSON comparison order (compare.rs) and sort specifications (sort.rs).
//!
//! MongoDB docs "Comparison/Sort Order": MinKey < Null < Numbers < Symbol,
//! String < Object < Array < BinData < ObjectId < Boolean < Date <
//! Timestamp < Regular Expression < MaxKey; numbers compare by value across
//! representations; an array field sorts by its smallest element ascending
//! and its largest descending; a missing field sorts as null.

use std::cmp::Ordering;

use bson::{doc, oid::ObjectId, Bson, Document};
use proptest::prelude::*;
use slipstream_query::compare::{compare_values, values_equal};
use slipstream_query::sort::SortSpec;

fn any_value() -> impl Strategy<Value = Bson> {
    let scalar = prop_oneof![
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        Just(Bson::Null),
        any::<i32>().prop_map(Bson::Int32),
        (-5i64..5).prop_map(Bson::Int64),
        any::<i64>().prop_map(Bson::Int64),
        prop::sample::select(vec![
            f64::NAN,
            -0.0,
            0.0,
            1.5,
            -2.5,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9.3e18,
            -9.3e18
        ])
        .prop_map(Bson::Double),
        (-5i32..5).prop_map(|n| Bson::Double(f64::from(n))),
        "[ab]{0,2}".prop_map(Bson::String),
        any::<bool>().prop_map(Bson::Boolean),
        any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
        (-3i64..3).prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
        (0u32..3, 0u32..3)
            .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
    ];
    scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec(("[ab]", inner), 0..3)
                .prop_map(|fields| Bson::Document(fields.into_iter().collect::<Document>())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn comparison_is_antisymmetric_and_reflexive(a in any_value(), b in any_value()) {
        prop_assert_eq!(compare_values(&a, &a), Ordering::Equal);
        prop_assert_eq!(compare_values(&a, &b), compare_values(&b, &a).reverse());
    }

    #[test]
    fn comparison_is_transitive(mut values in prop::collection::vec(any_value(), 3..8)) {
        values.sort_by(compare_values);
        for i in 0..values.len() {
            for j in i + 1..values.len() {
                prop_assert_ne!(compare_values(&values[i], &values[j]), Ordering::Greater, "{:?} vs {:?}", values[i], values[j]);
            }
        }
    }

    #[test]
    fn integers_and_doubles_compare_by_exact_value(x in -(1i64 << 53)..(1i64 << 53), y in -1e16f64..1e16) {
        // Within 2^53 every integer is an exact double, so f64 comparison is the truth.
        let expected = (x as f64).partial_cmp(&y).unwrap();
        prop_assert_eq!(compare_values(&Bson::Int64(x), &Bson::Double(y)), expected);
        prop_assert_eq!(compare_values(&Bson::Double(y), &Bson::Int64(x)), expected.reverse());
    }

    #[test]
    fn large_integers_are_not_rounded_through_doubles(x in any::<i64>()) {
        // MongoDB compares NumberLong exactly against doubles: 2^63-1 < 2^63 (as double).
        prop_assert_eq!(compare_values(&Bson::Int64(x), &Bson::Double(9_223_372_036_854_775_808.0)), Ordering::Less);
        prop_assert!(values_equal(&Bson::Int64(x), &Bson::Int64(x)));
    }
}

#[test]
fn canonical_type_order_from_mongodb_docs() {
    let ascending = [
        Bson::MinKey,
        Bson::Null,
        Bson::Double(f64::NAN),
        Bson::Double(f64::NEG_INFINITY),
        Bson::Int32(1),
        Bson::Double(1.5),
        Bson::Int64(2),
        Bson::String(String::new()),
        Bson::String("a".into()),
        Bson::Document(doc! {}),
        Bson::Document(doc! {"a": 1}),
        Bson::Array(vec![]),
        Bson::Array(vec![Bson::Int32(1)]),
        Bson::ObjectId(ObjectId::from_bytes([0; 12])),
        Bson::Boolean(false),
        Bson::Boolean(true),
        Bson::DateTime(bson::DateTime::from_millis(-1)),
        Bson::DateTime(bson::DateTime::from_millis(0)),
        Bson::Timestamp(bson::Timestamp {
            time: 0,
            increment: 1,
        }),
        Bson::MaxKey,
    ];
    for pair in ascending.windows(2) {
        assert_eq!(
            compare_values(&pair[0], &pair[1]),
            Ordering::Less,
            "{:?} < {:?}",
            pair[0],
            pair[1]
        );
    }
}

// ---------------------------------------------------------------- sort

fn sorted_ids(spec: Document, mut docs: Vec<Document>) -> Vec<i32> {
    let spec = SortSpec::parse(&spec).unwrap();
    docs.sort_by(|a, b| spec.compare(a, b));
    docs.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

#[test]
fn arrays_sort_by_min_ascending_and_max_descending() {
    // MongoDB docs "sort": "ascending sort compares the smallest element of arrays; descending the largest".
    let docs = vec![
        doc! {"_id": 1, "a": [1, 10]},
        doc! {"_id": 2, "a": 5},
        doc! {"_id": 3, "a": [0, 6]},
    ];
    assert_eq!(sorted_ids(doc! {"a": 1}, docs.clone()), vec![3, 1, 2]);
    assert_eq!(sorted_ids(doc! {"a": -1}, docs), vec![1, 3, 2]);
}

#[test]
fn missing_sorts_as_null_and_empty_array_before_null() {
    let docs = vec![
        doc! {"_id": 1, "a": 1},
        doc! {"_id": 2},
        doc! {"_id": 3, "a": []},
        doc! {"_id": 4, "a": null},
    ];
    // Stable sort: the missing field and null tie, keeping input order.
    assert_eq!(sorted_ids(doc! {"a": 1}, docs), vec![3, 2, 4, 1]);
}

#[test]
fn dotted_paths_and_multiple_keys() {
    let docs = vec![
        doc! {"_id": 1, "a": {"b": 2}, "c": 1},
        doc! {"_id": 2, "a": [{"b": 1}, {"b": 3}], "c": 2},
        doc! {"_id": 3, "a": {"b": 2}, "c": 0},
    ];
    assert_eq!(
        sorted_ids(doc! {"a.b": 1, "c": -1}, docs.clone()),
        vec![2, 1, 3]
    );
    assert_eq!(sorted_ids(doc! {"a.b": -1, "c": 1}, docs), vec![2, 3, 1]);
}

#[test]
fn sort_errors_name_the_problem() {
    assert_eq!(SortSpec::parse(&doc! {"a": 0}).unwrap_err().code, 15975);
    assert!(SortSpec::parse(&doc! {"a": {"$meta": "textScore"}})
        .unwrap_err()
        .message
        .contains("$meta"));
    assert!(SortSpec::parse(&doc! {}).unwrap().is_empty());
}

/// Naive sort key: every value the path reaches with leaf arrays replaced
/// by their elements (an empty array counts as undefined, a missing field
/// as null); the minimum ascending, the maximum descending.
fn reference_key(doc: &Document, path: &str, descending: bool) -> Bson {
    fn reach(value: &Bson, parts: &[&str], out: &mut Vec<Bson>) {
        if parts.is_empty() {
            match value {
                Bson::Array(items) if items.is_empty() => out.push(Bson::Undefined),
                Bson::Array(items) => out.extend(items.iter().cloned()),
                other => out.push(other.clone()),
            }
            return;
        }
        match value {
            Bson::Document(d) => match d.get(parts[0]) {
                Some(inner) => reach(inner, &parts[1..], out),
                None => out.push(Bson::Null),
            },
            Bson::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if parts[0] == i.to_string() {
                        reach(item, &parts[1..], out);
                    } else if matches!(item, Bson::Document(_)) {
                        reach(item, parts, out);
                    }
                }
            }
            _ => out.push(Bson::Null),
        }
    }
    let mut values = Vec::new();
    reach(
        &Bson::Document(doc.clone()),
        &path.split('.').collect::<Vec<_>>(),
        &mut values,
    );
    let chosen = if descending {
        values.iter().max_by(|a, b| compare_values(a, b))
    } else {
        values.iter().min_by(|a, b| compare_values(a, b))
    };
    chosen.cloned().unwrap_or(Bson::Null)
}

fn small_doc() -> impl Strategy<Value = Document> {
    let leaf = prop_oneof![
        Just(Bson::Null),
        (-3i32..3).prop_map(Bson::Int32),
        "[xy]".prop_map(Bson::String)
    ];
    let value = leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec((prop::sample::select(vec!["a", "b"]), inner), 0..2).prop_map(
                |f| Bson::Document(f.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    });
    prop::collection::vec((prop::sample::select(vec!["a", "b"]), value), 0..3)
        .prop_map(|f| f.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn sort_compare_agrees_with_naive_keys(
        a in small_doc(),
        b in small_doc(),
        path in prop::sample::select(vec!["a", "a.b", "a.0", "b.a"]),
        descending in any::<bool>(),
    ) {
        let mut spec = Document::new();
        spec.insert(path, if descending { -1 } else { 1 });
        let spec = SortSpec::parse(&spec).unwrap();
        let expected = compare_values(&reference_key(&a, path, descending), &reference_key(&b, path, descending));
        let expected = if descending { expected.reverse() } else { expected };
        prop_assert_eq!(spec.compare(&a, &b), expected);
    }
}
