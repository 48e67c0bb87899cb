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
    let decoded = generated.keys.iter().map(|k| decode_key(k, &p).unwrap()).collect();
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
    assert_eq!(keys(doc! {"b": 1}, doc! {"a": 1}, true).0, Vec::<Document>::new());
    // A compound sparse index keeps a document with at least one field.
    assert_eq!(keys(doc! {"b": 1}, doc! {"a": 1, "b": 1}, true).0, vec![doc! {"a": Bson::Null, "b": 1}]);
    // An explicit null is not missing.
    assert_eq!(keys(doc! {"a": Bson::Null}, doc! {"a": 1}, true).0, vec![doc! {"a": Bson::Null}]);
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
    let (k, multikey) = keys(doc! {"a": [{"b": 2}, {"b": 1}, 5, {"c": 1}]}, doc! {"a.b": 1}, false);
    assert!(multikey);
    assert_eq!(k, vec![doc! {"a.b": Bson::Null}, doc! {"a.b": 1}, doc! {"a.b": 2}]);
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
    let (k, _) = keys(doc! {"a": [{"b": [1, 2]}, {"b": 3}]}, doc! {"a.b": 1}, false);
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
    let generated = index_keys(&doc! {"a": [{"b": 1, "c": 2}, {"b": 3, "c": 4}]}, &shared, false).unwrap();
    // The keys of one array element stay together.
    let decoded: Vec<Document> = generated.keys.iter().map(|k| decode_key(k, &shared).unwrap()).collect();
    assert_eq!(decoded, vec![doc! {"a.b": 1, "a.c": 2}, doc! {"a.b": 3, "a.c": 4}]);
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
