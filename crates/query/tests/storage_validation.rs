//! MongoDB 7.0's rules for documents being stored: inserted documents
//! (`fixDocumentForInsert`) and update results (`storage_validation`).
//! Cases from pymongo's unified CRUD tests ("Inserting document with
//! dollar-prefixed key in _id yields server-side error", "Inserting
//! document with top-level dollar-prefixed key") and MongoDB's
//! jstests/core/write/insert/insert_id_undefined.js and dbref tests.

use bson::{doc, Bson, Document, Regex};
use slipstream_query::validate::{validate_storable_document, validate_updated_document, STORED_DEPTH_MAX};

fn insert_error(doc: Document) -> (i32, String) {
    let e = validate_storable_document(&doc).unwrap_err();
    (e.code, e.message)
}

fn update_error(doc: Document) -> (i32, String) {
    let e = validate_updated_document(&doc).unwrap_err();
    (e.code, e.message)
}

fn regex() -> Bson {
    Bson::RegularExpression(Regex { pattern: "a".to_string().try_into().unwrap(), options: String::new().try_into().unwrap() })
}

#[test]
fn top_level_dollar_prefixed_fields_are_storable() {
    for doc in [doc! {"_id": 1, "$a": 1}, doc! {"$set": {"x": 1}}, doc! {"a": {"$b": 1}, "c.d": 2}] {
        validate_storable_document(&doc).unwrap();
        validate_updated_document(&doc).unwrap();
    }
}

#[test]
fn id_types_refused_on_insert() {
    assert_eq!(insert_error(doc! {"_id": [1, 2]}), (2, "can't use an array for _id".into()));
    assert_eq!(insert_error(doc! {"_id": regex()}), (2, "can't use a regex for _id".into()));
    assert_eq!(insert_error(doc! {"_id": Bson::Undefined}), (2, "can't use a undefined for _id".into()));
    for ok in [doc! {"_id": null}, doc! {"_id": {"a": [1, 2]}}, doc! {"_id": Bson::MinKey}, doc! {}] {
        validate_storable_document(&ok).unwrap();
    }
}

#[test]
fn id_types_refused_after_update() {
    assert_eq!(update_error(doc! {"_id": [1]}), (53, "The '_id' value cannot be of type array".into()));
    assert_eq!(update_error(doc! {"_id": regex()}), (53, "The '_id' value cannot be of type regex".into()));
    assert_eq!(update_error(doc! {"_id": Bson::Undefined}).0, 53);
}

#[test]
fn dollar_prefixed_fields_in_id_are_refused() {
    assert_eq!(insert_error(doc! {"_id": {"$a": 1}}), (52, "$a is not valid for storage.".into()));
    // At any depth of the _id value, arrays included.
    assert_eq!(insert_error(doc! {"_id": {"a": {"$b": 1}}}).0, 52);
    assert_eq!(insert_error(doc! {"_id": {"a": [{"$b": 1}]}}).0, 52);
    assert_eq!(
        update_error(doc! {"_id": {"$a": 1}}),
        (52, "_id fields may not contain '$'-prefixed fields: $a is not valid for storage.".into())
    );
    // A DBRef is the one allowed form.
    validate_storable_document(&doc! {"_id": {"$ref": "c", "$id": 1, "$db": "d", "x": 1}}).unwrap();
    validate_storable_document(&doc! {"_id": {"$ref": "c", "$id": 1}}).unwrap();
    validate_storable_document(&doc! {"_id": {"$ref": "c", "$id": {"$x": 1}}}).unwrap();
    assert_eq!(insert_error(doc! {"_id": {"$ref": "c", "$id": 1, "y": {"$x": 1}}}).0, 52);
    assert_eq!(insert_error(doc! {"_id": {"$ref": "c", "$id": 1, "$db": 1}}).0, 52);
    assert_eq!(insert_error(doc! {"_id": {"$ref": "c", "$id": 1, "$x": 1}}).0, 52);
    assert_eq!(insert_error(doc! {"_id": {"$id": 1, "$ref": "c"}}).0, 52);
    // Dollar names elsewhere than _id stay storable.
    validate_storable_document(&doc! {"_id": 1, "a": {"$b": 1}}).unwrap();
}

fn nested(levels: usize) -> Document {
    let mut value = Bson::Int32(1);
    for _ in 1..levels {
        value = Bson::Document(doc! {"a": value});
    }
    doc! {"_id": 1, "a": value}
}

#[test]
fn nesting_deeper_than_the_limit_is_overflow() {
    validate_storable_document(&nested(STORED_DEPTH_MAX)).unwrap();
    validate_updated_document(&nested(STORED_DEPTH_MAX)).unwrap();
    assert_eq!(
        insert_error(nested(STORED_DEPTH_MAX + 1)),
        (15, "cannot insert document because it exceeds 100 levels of nesting".into())
    );
    assert_eq!(update_error(nested(STORED_DEPTH_MAX + 1)).0, 15);
    // Deep but empty at the bottom is fine; arrays count as levels.
    let mut at_limit = nested(STORED_DEPTH_MAX);
    at_limit.insert("b", Bson::Array(vec![Bson::Array(vec![])]));
    validate_storable_document(&at_limit).unwrap();
    let mut arrays = Bson::Int32(1);
    for _ in 0..STORED_DEPTH_MAX {
        arrays = Bson::Array(vec![arrays]);
    }
    assert_eq!(insert_error(doc! {"x": arrays}).0, 15);
}
