//! Index key generation with MongoDB's semantics: missing fields, sparse
//! indexes, multikey arrays, parallel arrays, compound and descending keys.

use bson::{doc, Bson, Document};
use slipstream_query::index_key::{decode_key, index_keys, prefix_end, record_key, KeyPattern};

fn pattern(key: Document) -> KeyPattern {
    KeyPattern::parse(&key).unwrap()
}

/// The decoded keys, in key order.
fn keys(d: Document, key: Document, sparse: bool) -> (Vec<Document>, bool) {
    let p = pattern(key);
    let generated = index_keys(&d, &p, sparse).unwrap();
    let decoded = generated
        .keys
        .iter()
        .map(|k| decode_key(k, &p).unwrap())
        .collect();
    (decoded, generated.multikey)
}

#[test]
fn missing_field_indexes_null() {
    let (k, multikey) = keys(doc! {"_id": 1}, doc! {"a": 1}, false);
    assert_eq!(k, vec![doc! {"a": Bson::Null}]);
    assert!(!multikey);
}

#[test]
fn sparse_index_skips_documents_without_any_field() {
    assert_eq!(
        keys(doc! {"b": 1}, doc! {"a": 1}, true).0,
        Vec::<Document>::new()
    );
    // A compound sparse index keeps a document with at least one field.
    assert_eq!(
        keys(doc! {"b": 1}, doc! {"a": 1, "b": 1}, true).0,
        vec![doc! {"a": Bson::Null, "b": 1}]
    );
    // An explicit null is not missing.
    assert_eq!(
        keys(doc! {"a": Bson::Null}, doc! {"a": 1}, true).0,
        vec![doc! {"a": Bson::Null}]
    );
}

#[test]
fn arrays_give_one_key_per_element() {
    let (k, multikey) = keys(doc! {"a": [3, 1, 3, [2]]}, doc! {"a": 1}, false);
    assert!(multikey);
    assert_eq!(k, vec![doc! {"a": 1}, doc! {"a": 3}, doc! {"a": [2]}]);
}

#[test]
fn empty_array_indexes_undefined() {
    let (k, multikey) = keys(doc! {"a": []}, doc! {"a": 1}, false);
    assert!(multikey);
    assert_eq!(k, vec![doc! {"a": Bson::Undefined}]);
}

#[test]
fn dotted_paths_go_through_arrays_of_documents() {
    // Elements without the field (documents or not) index null, as in
    // MongoDB's jstests/core/indexv.js.
    let (k, multikey) = keys(
        doc! {"a": [{"b": 2}, {"b": 1}, 5, {"c": 1}]},
        doc! {"a.b": 1},
        false,
    );
    assert!(multikey);
    assert_eq!(
        k,
        vec![doc! {"a.b": Bson::Null}, doc! {"a.b": 1}, doc! {"a.b": 2}]
    );
    let (k, _) = keys(doc! {"a": [{}, {"b": 1}]}, doc! {"a.b": 1}, false);
    assert_eq!(k, vec![doc! {"a.b": Bson::Null}, doc! {"a.b": 1}]);
    // An empty array in the middle of a path is a missing field.
    let (k, multikey) = keys(doc! {"a": []}, doc! {"a.b": 1}, false);
    assert!(multikey);
    assert_eq!(k, vec![doc! {"a.b": Bson::Null}]);
    // Arrays directly inside arrays are not searched for fields.
    let (k, _) = keys(doc! {"a": [[{"b": 1}]]}, doc! {"a.b": 1}, false);
    assert_eq!(k, vec![doc! {"a.b": Bson::Null}]);
    // Arrays below arrays of documents expand too.
    let (k, _) = keys(
        doc! {"a": [{"b": [1, 2]}, {"b": 3}]},
        doc! {"a.b": 1},
        false,
    );
    assert_eq!(k, vec![doc! {"a.b": 1}, doc! {"a.b": 2}, doc! {"a.b": 3}]);
    // A numeric component addresses one element and is not multikey.
    let (k, multikey) = keys(doc! {"a": [{"b": 2}, {"b": 1}]}, doc! {"a.1.b": 1}, false);
    assert!(!multikey);
    assert_eq!(k, vec![doc! {"a.1.b": 1}]);
}

#[test]
fn parallel_arrays_are_rejected() {
    let p = pattern(doc! {"a": 1, "b": 1});
    let err = index_keys(&doc! {"a": [1, 2], "b": [3, 4]}, &p, false).unwrap_err();
    assert_eq!(err.code, 171);
    assert_eq!(err.message, "cannot index parallel arrays [b] [a]");
    let nested = pattern(doc! {"a.x": 1, "b": 1});
    let err = index_keys(&doc! {"a": {"x": [1]}, "b": [3]}, &nested, false).unwrap_err();
    assert_eq!(err.message, "cannot index parallel arrays [b] [x]");
    // One array is fine, and so are two paths below the same array.
    assert!(index_keys(&doc! {"a": [1, 2], "b": 3}, &p, false).is_ok());
    let shared = pattern(doc! {"a.b": 1, "a.c": 1});
    let generated = index_keys(
        &doc! {"a": [{"b": 1, "c": 2}, {"b": 3, "c": 4}]},
        &shared,
        false,
    )
    .unwrap();
    // The keys of one array element stay together.
    let decoded: Vec<Document> = generated
        .keys
        .iter()
        .map(|k| decode_key(k, &shared).unwrap())
        .collect();
    assert_eq!(
        decoded,
        vec![doc! {"a.b": 1, "a.c": 2}, doc! {"a.b": 3, "a.c": 4}]
    );
    // Nested arrays under one array are not parallel.
    let generated = index_keys(&doc! {"a": [{"b": [1, 2]}]}, &shared, false).unwrap();
    assert_eq!(generated.keys.len(), 2);
}

#[test]
fn compound_descending_keys_sort_by_pattern() {
    let p = pattern(doc! {"a": 1, "b": -1});
    let key_of = |d: Document| index_keys(&d, &p, false).unwrap().keys.remove(0);
    let k1 = key_of(doc! {"a": 1, "b": 9});
    let k2 = key_of(doc! {"a": 1, "b": 2});
    let k3 = key_of(doc! {"a": 2, "b": 100});
    assert!(k1 < k2 && k2 < k3);
}

#[test]
fn equal_numbers_of_different_types_give_the_same_key() {
    let p = pattern(doc! {"a": 1});
    let k = |v: Bson| index_keys(&doc! {"a": v}, &p, false).unwrap().keys;
    assert_eq!(k(Bson::Int32(7)), k(Bson::Double(7.0)));
    assert_eq!(k(Bson::Int64(7)), k(Bson::Double(7.0)));
    assert_eq!(record_key(&Bson::Int32(7)), record_key(&Bson::Int64(7)));
}

#[test]
fn key_patterns_reject_special_index_types() {
    for kind in ["text", "2dsphere", "2d", "hashed"] {
        let err = KeyPattern::parse(&doc! {"a": kind}).unwrap_err();
        assert_eq!(err.code, 67);
        assert!(err.message.contains(kind), "{}", err.message);
    }
    assert_eq!(KeyPattern::parse(&doc! {"$**": 1}).unwrap_err().code, 67);
    assert_eq!(KeyPattern::parse(&doc! {}).unwrap_err().code, 67);
    assert_eq!(KeyPattern::parse(&doc! {"a": 0}).unwrap_err().code, 67);
    assert_eq!(KeyPattern::parse(&doc! {"a": true}).unwrap_err().code, 67);
    let p = KeyPattern::parse(&doc! {"a": 1.5, "b": -0.5, "c": Bson::Int64(-1)}).unwrap();
    let directions: Vec<bool> = p.fields.iter().map(|f| f.descending).collect();
    assert_eq!(directions, vec![false, true, true]);
}

#[test]
fn prefix_end_bounds_every_extension() {
    let prefix = record_key(&Bson::String("ab".into()));
    let end = prefix_end(&prefix).unwrap();
    let mut longer = prefix.clone();
    longer.extend_from_slice(&[0xFF, 0xFF, 0xFF]);
    assert!(prefix < end && longer < end);
}

mod naive {
    //! Index keys against a naive reference for the common shapes: a
    //! compound index over top-level fields holding scalars, at most one
    //! of them an array of scalars.

    use super::*;
    use proptest::prelude::*;
    use slipstream_query::compare::compare_values;

    fn scalar() -> impl Strategy<Value = Bson> {
        prop_oneof![
            (-3i32..3).prop_map(Bson::Int32),
            (-3i32..3).prop_map(|x| Bson::Double(f64::from(x))),
            prop_oneof![Just("x"), Just("y")].prop_map(|s| Bson::String(s.into())),
            Just(Bson::Null),
        ]
    }

    fn field_value() -> impl Strategy<Value = Option<Bson>> {
        prop_oneof![
            1 => Just(None),
            3 => scalar().prop_map(Some),
            1 => prop::collection::vec(scalar(), 0..4).prop_map(|v| Some(Bson::Array(v))),
        ]
    }

    /// The values a field contributes: its elements, undefined for an
    /// empty array, null when missing.
    fn values_of(value: &Option<Bson>) -> Vec<Bson> {
        match value {
            None => vec![Bson::Null],
            Some(Bson::Array(items)) if items.is_empty() => vec![Bson::Undefined],
            Some(Bson::Array(items)) => items.clone(),
            Some(other) => vec![other.clone()],
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn keys_match_the_naive_reference(
            a in field_value(), b in field_value(), desc_a in any::<bool>(), desc_b in any::<bool>(), sparse in any::<bool>()
        ) {
            let mut d = doc! {"_id": 1};
            if let Some(v) = &a { d.insert("a", v.clone()); }
            if let Some(v) = &b { d.insert("b", v.clone()); }
            let p = pattern(doc! {"a": if desc_a { -1 } else { 1 }, "b": if desc_b { -1 } else { 1 }});
            let arrays = [&a, &b].iter().filter(|v| matches!(v, Some(Bson::Array(_)))).count();
            let result = index_keys(&d, &p, sparse);
            if arrays == 2 {
                prop_assert_eq!(result.unwrap_err().code, 171);
                return Ok(());
            }
            let generated = result.unwrap();
            // Reference: the product of the fields' values, as decoded
            // documents, sorted in index order and deduplicated.
            let mut expected: Vec<(Bson, Bson)> = Vec::new();
            if !(sparse && a.is_none() && b.is_none()) {
                for x in values_of(&a) {
                    for y in values_of(&b) {
                        expected.push((x.clone(), y.clone()));
                    }
                }
            }
            let order = |l: &(Bson, Bson), r: &(Bson, Bson)| {
                let first = compare_values(&l.0, &r.0);
                let second = compare_values(&l.1, &r.1);
                (if desc_a { first.reverse() } else { first }).then(if desc_b { second.reverse() } else { second })
            };
            expected.sort_by(order);
            expected.dedup_by(|l, r| order(l, r).is_eq());
            prop_assert_eq!(generated.keys.len(), expected.len());
            for (key, (x, y)) in generated.keys.iter().zip(&expected) {
                let decoded = decode_key(key, &p).unwrap();
                prop_assert!(compare_values(decoded.get("a").unwrap(), x).is_eq());
                prop_assert!(compare_values(decoded.get("b").unwrap(), y).is_eq());
            }
            prop_assert_eq!(generated.multikey, arrays == 1);
        }
    }
}
