//! One test per update operator, mostly MongoDB's documented examples,
//! plus the error codes drivers and users see.

use bson::{doc, Bson, Document};
use slipstream_query::update::{upsert_seed, Update, UpdateContext};

fn ctx() -> UpdateContext {
    UpdateContext {
        positional: None,
        now: bson::DateTime::from_millis(1_700_000_000_123),
        is_upsert_insert: false,
    }
}

fn apply_with(
    doc: Document,
    update: Document,
    filters: Option<&[Document]>,
    ctx: &UpdateContext,
) -> Document {
    let parsed = Update::parse(&Bson::Document(update), filters).unwrap();
    parsed.apply(&doc, ctx).unwrap().document
}

fn apply(doc: Document, update: Document) -> Document {
    apply_with(doc, update, None, &ctx())
}

fn error(doc: Document, update: Document) -> i32 {
    match Update::parse(&Bson::Document(update), None) {
        Err(e) => e.code,
        Ok(parsed) => parsed.apply(&doc, &ctx()).unwrap_err().code,
    }
}

/// Byte-for-byte comparison, so that field order is checked too.
fn assert_doc(actual: Document, expected: Document) {
    assert_eq!(
        actual.to_vec().unwrap(),
        expected.to_vec().unwrap(),
        "\n got {actual}\nwant {expected}"
    );
}

#[test]
fn set_keeps_position_and_appends_new_fields_in_name_order() {
    assert_doc(
        apply(
            doc! {"_id": 1, "b": 1, "a": 1},
            doc! {"$set": {"z": 1, "c": 2, "b": 5}},
        ),
        doc! {"_id": 1, "b": 5, "a": 1, "c": 2, "z": 1},
    );
    assert_doc(
        apply(doc! {"_id": 1}, doc! {"$set": {"a.b.c": 1, "x": [1]}}),
        doc! {"_id": 1, "a": {"b": {"c": 1}}, "x": [1]},
    );
}

#[test]
fn numeric_field_names_apply_in_numeric_order() {
    assert_doc(
        apply(doc! {"a": {}}, doc! {"$set": {"a.10": 1, "a.2": 2}}),
        doc! {"a": {"2": 2, "10": 1}},
    );
    // With "a.10" first, "a.2" would be an implicit null that $bit rejects.
    assert_doc(
        apply(
            doc! {"a": []},
            doc! {"$set": {"a.10": 1}, "$bit": {"a.2": {"or": 1}}},
        ),
        doc! {"a": [Bson::Null, Bson::Null, 1, Bson::Null, Bson::Null, Bson::Null, Bson::Null, Bson::Null, Bson::Null, Bson::Null, 1]},
    );
}

#[test]
fn set_into_arrays_pads_with_null() {
    assert_doc(
        apply(doc! {"a": [1]}, doc! {"$set": {"a.2": 3}}),
        doc! {"a": [1, Bson::Null, 3]},
    );
    assert_doc(
        apply(doc! {"a": [{"b": 1}]}, doc! {"$set": {"a.0.b": 2}}),
        doc! {"a": [{"b": 2}]},
    );
    // Padding is bounded; numeric names in documents are plain names.
    assert_eq!(error(doc! {"a": []}, doc! {"$set": {"a.2000000": 1}}), 2);
    assert_doc(
        apply(doc! {"a": {}}, doc! {"$set": {"a.2000000": 1}}),
        doc! {"a": {"2000000": 1}},
    );
}

#[test]
fn unset_removes_fields_and_nulls_array_elements() {
    assert_doc(
        apply(
            doc! {"a": 1, "b": 2, "c": 3},
            doc! {"$unset": {"b": "", "zz": 1}},
        ),
        doc! {"a": 1, "c": 3},
    );
    assert_doc(
        apply(doc! {"a": [1, 2]}, doc! {"$unset": {"a.0": 1}}),
        doc! {"a": [Bson::Null, 2]},
    );
}

#[test]
fn inc_promotes_types() {
    // MongoDB example: {$inc: {quantity: -2, "metrics.orders": 1}}.
    assert_doc(
        apply(
            doc! {"_id": 1, "sku": "abc123", "quantity": 10, "metrics": {"orders": 2, "ratings": 3.5}},
            doc! {"$inc": {"quantity": -2, "metrics.orders": 1}},
        ),
        doc! {"_id": 1, "sku": "abc123", "quantity": 8, "metrics": {"orders": 3, "ratings": 3.5}},
    );
    assert_doc(
        apply(doc! {"a": i32::MAX}, doc! {"$inc": {"a": 1}}),
        doc! {"a": i64::from(i32::MAX) + 1},
    );
    assert_doc(
        apply(doc! {"a": 1}, doc! {"$inc": {"a": 0.5}}),
        doc! {"a": 1.5},
    );
    assert_doc(
        apply(doc! {"a": 1_i64}, doc! {"$inc": {"a": 1}}),
        doc! {"a": 2_i64},
    );
    assert_doc(
        apply(doc! {}, doc! {"$inc": {"a": 5_i64}}),
        doc! {"a": 5_i64},
    );
    assert_eq!(error(doc! {"a": "x"}, doc! {"$inc": {"a": 1}}), 14);
    // An int64 overflow fails the write (MongoDB's SafeNum), it never wraps.
    let overflow = Update::parse(&Bson::Document(doc! {"$inc": {"a": 1}}), None)
        .unwrap()
        .apply(&doc! {"_id": 1, "a": i64::MAX}, &ctx())
        .unwrap_err();
    assert_eq!(overflow.code, 2);
    assert_eq!(
        overflow.message,
        "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 1}"
    );
    assert_eq!(error(doc! {"a": i64::MIN}, doc! {"$mul": {"a": -1}}), 2);
    assert_eq!(error(doc! {}, doc! {"$inc": {"a": "1"}}), 14);
}

#[test]
fn mul_sets_zero_when_missing() {
    assert_doc(
        apply(
            doc! {"p": 10.99, "q": 25},
            doc! {"$mul": {"p": 1.25, "q": 2}},
        ),
        doc! {"p": 10.99 * 1.25, "q": 50},
    );
    assert_doc(
        apply(doc! {"_id": 1}, doc! {"$mul": {"price": 100_i64}}),
        doc! {"_id": 1, "price": 0_i64},
    );
    assert_doc(
        apply(doc! {"a": 1}, doc! {"$mul": {"a": 1.0}}),
        doc! {"a": 1.0},
    );
}

#[test]
fn min_and_max_compare_in_bson_order() {
    assert_doc(
        apply(
            doc! {"lo": 200, "hi": 800},
            doc! {"$min": {"lo": 150, "hi": 900}},
        ),
        doc! {"lo": 150, "hi": 800},
    );
    assert_doc(
        apply(
            doc! {"lo": 200, "hi": 800},
            doc! {"$max": {"lo": 150, "hi": 950}},
        ),
        doc! {"lo": 200, "hi": 950},
    );
    // Strings sort above numbers.
    assert_doc(
        apply(doc! {"a": 5}, doc! {"$max": {"a": "x"}}),
        doc! {"a": "x"},
    );
    assert_doc(apply(doc! {}, doc! {"$min": {"a": 1}}), doc! {"a": 1});
}

#[test]
fn rename_moves_values() {
    assert_doc(
        apply(
            doc! {"_id": 1, "nickname": "B", "name": {"first": "A", "last": "C"}},
            doc! {"$rename": {"nickname": "alias", "name.last": "name.lname"}},
        ),
        doc! {"_id": 1, "name": {"first": "A", "lname": "C"}, "alias": "B"},
    );
    assert_doc(
        apply(doc! {"a": 1}, doc! {"$rename": {"missing": "b"}}),
        doc! {"a": 1},
    );
    assert_doc(
        apply(doc! {"a": 1, "b": 2, "c": 3}, doc! {"$rename": {"a": "c"}}),
        doc! {"b": 2, "c": 1},
    );
    assert_eq!(error(doc! {"a": 1}, doc! {"$rename": {"a": "a"}}), 2);
    assert_eq!(error(doc! {"a": 1}, doc! {"$rename": {"a": "a.b"}}), 2);
    // Through an array element: refused; through a scalar or a named
    // field of an array: not viable.
    assert_eq!(
        error(doc! {"a": [{"b": 1}]}, doc! {"$rename": {"a.0.b": "c"}}),
        2
    );
    assert_eq!(
        error(doc! {"a": [{"b": 1}]}, doc! {"$rename": {"a.b": "c"}}),
        28
    );
    assert_eq!(error(doc! {"a": 5}, doc! {"$rename": {"a.b": "c"}}), 28);
    assert_doc(
        apply(doc! {"a": [1]}, doc! {"$rename": {"a.3.b": "c"}}),
        doc! {"a": [1]},
    );
    assert_eq!(
        error(doc! {"a": 1, "c": []}, doc! {"$rename": {"a": "c.d"}}),
        2
    );
    assert_eq!(error(doc! {"_id": 1}, doc! {"$rename": {"_id": "x"}}), 66);
}

#[test]
fn current_date_sets_date_or_timestamp() {
    let result = apply(
        doc! {},
        doc! {"$currentDate": {"d": true, "t": {"$type": "timestamp"}, "e": {"$type": "date"}}},
    );
    assert_eq!(
        result.get("d"),
        Some(&Bson::DateTime(bson::DateTime::from_millis(
            1_700_000_000_123
        )))
    );
    assert_eq!(result.get("e"), result.get("d"));
    assert_eq!(
        result.get("t"),
        Some(&Bson::Timestamp(bson::Timestamp {
            time: 1_700_000_000,
            increment: 1
        }))
    );
    assert_eq!(
        error(doc! {}, doc! {"$currentDate": {"d": {"$type": "x"}}}),
        2
    );
}

#[test]
fn set_on_insert_only_on_upsert_insert() {
    let update = doc! {"$set": {"a": 1}, "$setOnInsert": {"b.c": 2}};
    assert_doc(
        apply(doc! {"_id": 1}, update.clone()),
        doc! {"_id": 1, "a": 1},
    );
    let insert = UpdateContext {
        is_upsert_insert: true,
        ..ctx()
    };
    assert_doc(
        apply_with(doc! {"_id": 1}, update, None, &insert),
        doc! {"_id": 1, "a": 1, "b": {"c": 2}},
    );
}

#[test]
fn push_with_modifiers() {
    assert_doc(
        apply(doc! {"s": [1]}, doc! {"$push": {"s": 2}}),
        doc! {"s": [1, 2]},
    );
    assert_doc(
        apply(doc! {}, doc! {"$push": {"s": [1]}}),
        doc! {"s": [[1]]},
    );
    assert_doc(
        apply(doc! {"s": [1]}, doc! {"$push": {"s": {"$each": [2, 3]}}}),
        doc! {"s": [1, 2, 3]},
    );
    // MongoDB example: $each + $sort by field + $slice.
    let quizzes = doc! {"q": [{"wk": 1, "score": 10}, {"wk": 2, "score": 8}, {"wk": 3, "score": 5}, {"wk": 4, "score": 6}]};
    assert_doc(
        apply(
            quizzes,
            doc! {"$push": {"q": {"$each": [{"wk": 5, "score": 8}, {"wk": 6, "score": 7}, {"wk": 7, "score": 6}], "$sort": {"score": -1}, "$slice": 3}}},
        ),
        doc! {"q": [{"wk": 1, "score": 10}, {"wk": 2, "score": 8}, {"wk": 5, "score": 8}]},
    );
    assert_doc(
        apply(
            doc! {"s": [1, 2]},
            doc! {"$push": {"s": {"$each": [9], "$position": 0}}},
        ),
        doc! {"s": [9, 1, 2]},
    );
    assert_doc(
        apply(
            doc! {"s": [1, 2]},
            doc! {"$push": {"s": {"$each": [9], "$position": -1}}},
        ),
        doc! {"s": [1, 9, 2]},
    );
    assert_doc(
        apply(
            doc! {"s": [3, 1]},
            doc! {"$push": {"s": {"$each": [2], "$sort": 1, "$slice": -2}}},
        ),
        doc! {"s": [2, 3]},
    );
    assert_doc(
        apply(
            doc! {"s": [3, 1]},
            doc! {"$push": {"s": {"$each": [], "$slice": 0}}},
        ),
        doc! {"s": []},
    );
    // Sorting by a field: non-documents sort as null, arrays compare whole.
    assert_doc(
        apply(
            doc! {"s": [{"v": [3]}, {"v": 2}, 5]},
            doc! {"$push": {"s": {"$each": [{"v": "x"}], "$sort": {"v": 1}}}},
        ),
        doc! {"s": [5, {"v": 2}, {"v": "x"}, {"v": [3]}]},
    );
    assert_eq!(error(doc! {"s": 1}, doc! {"$push": {"s": 2}}), 2);
    assert_eq!(error(doc! {}, doc! {"$push": {"s": {"$each": 1}}}), 2);
    assert_eq!(
        error(doc! {}, doc! {"$push": {"s": {"$each": [1], "$bogus": 1}}}),
        2
    );
}

#[test]
fn add_to_set_skips_equal_values() {
    assert_doc(
        apply(doc! {"t": ["a", "b"]}, doc! {"$addToSet": {"t": "c"}}),
        doc! {"t": ["a", "b", "c"]},
    );
    assert_doc(
        apply(doc! {"t": [1]}, doc! {"$addToSet": {"t": 1.0}}),
        doc! {"t": [1]},
    );
    assert_doc(
        apply(
            doc! {"t": ["a"]},
            doc! {"$addToSet": {"t": {"$each": ["a", "b", "b"]}}},
        ),
        doc! {"t": ["a", "b"]},
    );
    assert_doc(
        apply(doc! {}, doc! {"$addToSet": {"t": [1]}}),
        doc! {"t": [[1]]},
    );
}

#[test]
fn pop_removes_first_or_last() {
    assert_doc(
        apply(doc! {"s": [8, 9, 10]}, doc! {"$pop": {"s": -1}}),
        doc! {"s": [9, 10]},
    );
    assert_doc(
        apply(doc! {"s": [9, 10]}, doc! {"$pop": {"s": 1}}),
        doc! {"s": [9]},
    );
    assert_doc(
        apply(doc! {"s": []}, doc! {"$pop": {"s": 1}}),
        doc! {"s": []},
    );
    assert_eq!(error(doc! {"s": [1]}, doc! {"$pop": {"s": 2}}), 9);
    assert_eq!(error(doc! {"s": 1}, doc! {"$pop": {"s": 1}}), 14);
}

#[test]
fn pull_by_value_and_by_condition() {
    // MongoDB examples.
    assert_doc(
        apply(
            doc! {"fruits": ["apples", "pears", "oranges", "grapes"], "veg": ["carrots", "celery"]},
            doc! {"$pull": {"fruits": {"$in": ["apples", "oranges"]}, "veg": "carrots"}},
        ),
        doc! {"fruits": ["pears", "grapes"], "veg": ["celery"]},
    );
    assert_doc(
        apply(
            doc! {"votes": [3, 5, 6, 7, 7, 8]},
            doc! {"$pull": {"votes": {"$gte": 6}}},
        ),
        doc! {"votes": [3, 5]},
    );
    assert_doc(
        apply(
            doc! {"r": [{"item": "A", "score": 5}, {"item": "B", "score": 8, "x": 1}]},
            doc! {"$pull": {"r": {"score": 8, "item": "B"}}},
        ),
        doc! {"r": [{"item": "A", "score": 5}]},
    );
    assert_doc(
        apply(doc! {"a": [1, 1.0, 2]}, doc! {"$pull": {"a": 1}}),
        doc! {"a": [2]},
    );
    assert_eq!(error(doc! {"a": 1}, doc! {"$pull": {"a": 1}}), 2);
}

#[test]
fn pull_all_removes_every_listed_value() {
    assert_doc(
        apply(
            doc! {"s": [0, 2, 5, 5, 1, 0]},
            doc! {"$pullAll": {"s": [0, 5]}},
        ),
        doc! {"s": [2, 1]},
    );
    assert_eq!(error(doc! {"s": [1]}, doc! {"$pullAll": {"s": 1}}), 2);
}

#[test]
fn bit_operations() {
    assert_doc(
        apply(doc! {"e": 13}, doc! {"$bit": {"e": {"and": 10}}}),
        doc! {"e": 8},
    );
    assert_doc(
        apply(doc! {"e": 3_i64}, doc! {"$bit": {"e": {"or": 5}}}),
        doc! {"e": 7_i64},
    );
    assert_doc(
        apply(doc! {"e": 1}, doc! {"$bit": {"e": {"xor": 5}}}),
        doc! {"e": 4},
    );
    assert_eq!(error(doc! {"e": 1}, doc! {"$bit": {"e": {"nand": 5}}}), 2);
}

#[test]
fn positional_operator_uses_the_query_match() {
    let at = UpdateContext {
        positional: Some(1),
        ..ctx()
    };
    assert_doc(
        apply_with(
            doc! {"g": [80, 85, 90]},
            doc! {"$set": {"g.$": 82}},
            None,
            &at,
        ),
        doc! {"g": [80, 82, 90]},
    );
    assert_doc(
        apply_with(
            doc! {"g": [{"v": 1}, {"v": 2}]},
            doc! {"$inc": {"g.$.v": 10}},
            None,
            &at,
        ),
        doc! {"g": [{"v": 1}, {"v": 12}]},
    );
    assert_eq!(error(doc! {"g": [1]}, doc! {"$set": {"g.$": 1}}), 2);
}

#[test]
fn all_positional_and_filtered_positional() {
    assert_doc(
        apply(doc! {"g": [1, 2, 3]}, doc! {"$inc": {"g.$[]": 10}}),
        doc! {"g": [11, 12, 13]},
    );
    let filters = [doc! {"e": {"$gte": 100}}];
    assert_doc(
        apply_with(
            doc! {"g": [95, 102, 90, 150]},
            doc! {"$set": {"g.$[e]": 100}},
            Some(&filters),
            &ctx(),
        ),
        doc! {"g": [95, 100, 90, 100]},
    );
    let filters = [doc! {"e.grade": {"$gte": 85}}];
    assert_doc(
        apply_with(
            doc! {"g": [{"grade": 80, "mean": 75}, {"grade": 85, "mean": 90}, {"grade": 85, "mean": 85}]},
            doc! {"$set": {"g.$[e].mean": 100}},
            Some(&filters),
            &ctx(),
        ),
        doc! {"g": [{"grade": 80, "mean": 75}, {"grade": 85, "mean": 100}, {"grade": 85, "mean": 100}]},
    );
    // Nested: every element's inner array, filtered.
    let filters = [doc! {"x": {"$gt": 1}}];
    assert_doc(
        apply_with(
            doc! {"a": [{"b": [1, 2]}, {"b": [3]}]},
            doc! {"$inc": {"a.$[].b.$[x]": 1}},
            Some(&filters),
            &ctx(),
        ),
        doc! {"a": [{"b": [1, 3]}, {"b": [4]}]},
    );
    // Two positional paths reaching one element are refused, not applied
    // one over the other; reaching different elements is fine.
    let filters = [doc! {"x": {"$gt": 1}}];
    let conflicting = Update::parse(
        &Bson::Document(doc! {"$set": {"a.$[]": 0, "a.$[x]": 9}}),
        Some(&filters),
    )
    .unwrap();
    let err = conflicting.apply(&doc! {"a": [1, 2]}, &ctx()).unwrap_err();
    assert_eq!(err.code, 40);
    assert_eq!(err.message, "Update created a conflict at 'a.1'");
    assert_doc(
        conflicting
            .apply(&doc! {"a": [1, 0]}, &ctx())
            .unwrap()
            .document,
        doc! {"a": [0, 0]},
    );
    let filters = [doc! {"x": 2}];
    assert_eq!(
        Update::parse(
            &Bson::Document(doc! {"$set": {"a.1": 5}, "$inc": {"a.$[x]": 1}}),
            Some(&filters)
        )
        .unwrap()
        .apply(&doc! {"a": [1, 2]}, &ctx())
        .unwrap_err()
        .code,
        40
    );
    // An unused or a missing filter is an error.
    assert_eq!(
        Update::parse(
            &Bson::Document(doc! {"$set": {"a": 1}}),
            Some(&[doc! {"x": 1}])
        )
        .unwrap_err()
        .code,
        9
    );
    assert_eq!(
        Update::parse(&Bson::Document(doc! {"$set": {"a.$[y]": 1}}), None)
            .unwrap_err()
            .code,
        2
    );
    assert_eq!(error(doc! {}, doc! {"$set": {"a.$[]": 1}}), 2);
}

#[test]
fn conflicting_paths_are_rejected() {
    let err = Update::parse(
        &Bson::Document(doc! {"$set": {"a": 1}, "$inc": {"a.b": 1}}),
        None,
    )
    .unwrap_err();
    assert_eq!(err.code, 40);
    assert_eq!(
        err.message,
        "Updating the path 'a.b' would create a conflict at 'a'"
    );
    assert_eq!(
        error(doc! {}, doc! {"$set": {"a": 1}, "$unset": {"a": 1}}),
        40
    );
    assert_eq!(
        error(doc! {}, doc! {"$rename": {"a": "b"}, "$set": {"b": 1}}),
        40
    );
    // Sibling paths with a shared prefix are fine.
    assert_doc(
        apply(doc! {}, doc! {"$set": {"a.b": 1, "a.c": 2}}),
        doc! {"a": {"b": 1, "c": 2}},
    );
}

#[test]
fn immutable_id() {
    let err = Update::parse(&Bson::Document(doc! {"$set": {"_id": 2}}), None)
        .unwrap()
        .apply(&doc! {"_id": 1}, &ctx())
        .unwrap_err();
    assert_eq!(err.code, 66);
    assert_eq!(
        err.message,
        "Performing an update on the path '_id' would modify the immutable field '_id'"
    );
    assert_eq!(error(doc! {"_id": 1}, doc! {"$unset": {"_id": 1}}), 66);
    assert_eq!(
        error(doc! {"_id": {"a": 1}}, doc! {"$set": {"_id.a": 2}}),
        66
    );
    // Setting the same value is allowed and changes nothing.
    let outcome = Update::parse(&Bson::Document(doc! {"$set": {"_id": 1}}), None)
        .unwrap()
        .apply(&doc! {"_id": 1}, &ctx())
        .unwrap();
    assert!(!outcome.modified);
    assert_eq!(error(doc! {"_id": 1}, doc! {"_id": 2, "a": 1}), 66);
}

#[test]
fn path_not_viable() {
    let err = Update::parse(&Bson::Document(doc! {"$set": {"a.b": 1}}), None)
        .unwrap()
        .apply(&doc! {"a": 5}, &ctx())
        .unwrap_err();
    assert_eq!(err.code, 28);
    assert_eq!(err.message, "Cannot create field 'b' in element {a: 5}");
    assert_eq!(error(doc! {"a": [1]}, doc! {"$set": {"a.b": 1}}), 28);
    // $unset through a scalar is a no-op rather than an error; the other
    // operators that never create fail on a path they could not create.
    assert_doc(
        apply(doc! {"a": 5}, doc! {"$unset": {"a.b": 1}}),
        doc! {"a": 5},
    );
    let err = Update::parse(&Bson::Document(doc! {"$pop": {"a.b": 1}}), None)
        .unwrap()
        .apply(&doc! {"a": 5}, &ctx())
        .unwrap_err();
    assert_eq!(err.code, 28);
    assert_eq!(
        err.message,
        "Cannot use the part (b) of (a.b) to traverse the element ({a: 5})"
    );
    assert_eq!(error(doc! {"a": [1]}, doc! {"$pull": {"a.b": 1}}), 28);
    assert_doc(
        apply(doc! {"a": [1]}, doc! {"$pop": {"a.5": 1}}),
        doc! {"a": [1]},
    );
    assert_doc(
        apply(doc! {"a": {}}, doc! {"$pullAll": {"a.b.c": [1]}}),
        doc! {"a": {}},
    );
    // Array updates need an existing array, whatever the operator.
    assert_eq!(error(doc! {}, doc! {"$unset": {"a.$[]": 1}}), 2);
    assert_eq!(error(doc! {"a": 1}, doc! {"$unset": {"a.$[]": 1}}), 2);
}

#[test]
fn parse_errors() {
    let parse = |u: Bson| Update::parse(&u, None).map(|_| ()).unwrap_err().code;
    assert_eq!(parse(Bson::Document(doc! {"$foo": {"a": 1}})), 9);
    assert_eq!(parse(Bson::Document(doc! {"$set": 1})), 9);
    assert_eq!(parse(Bson::Document(doc! {"$set": {"a": 1}, "b": 1})), 9);
    assert_eq!(parse(Bson::Document(doc! {"a": 1, "$set": {"b": 1}})), 52);
    assert_eq!(parse(Bson::Document(doc! {"$set": {"a..b": 1}})), 56);
    assert_eq!(parse(Bson::Document(doc! {"$set": {"$x": 1}})), 52);
    assert_eq!(
        parse(Bson::Array(vec![Bson::Document(
            doc! {"$group": {"_id": 1}}
        )])),
        72
    );
    assert_eq!(parse(Bson::Array(vec![Bson::Int32(1)])), 9);
    assert_eq!(parse(Bson::Int32(1)), 9);
}

#[test]
fn replacement_keeps_id() {
    let update = Update::parse(&Bson::Document(doc! {"b": 2, "a": 1}), None).unwrap();
    assert!(update.is_replacement());
    let outcome = update.apply(&doc! {"_id": 7, "x": 1}, &ctx()).unwrap();
    assert_doc(outcome.document, doc! {"_id": 7, "b": 2, "a": 1});
    assert!(outcome.modified);
    let empty = Update::parse(&Bson::Document(doc! {}), None).unwrap();
    assert_doc(
        empty
            .apply(&doc! {"_id": 7, "x": 1}, &ctx())
            .unwrap()
            .document,
        doc! {"_id": 7},
    );
}

#[test]
fn modified_is_false_for_no_op_updates() {
    let no_op = |doc: Document, update: Document| {
        !Update::parse(&Bson::Document(update), None)
            .unwrap()
            .apply(&doc, &ctx())
            .unwrap()
            .modified
    };
    assert!(no_op(doc! {"a": 1}, doc! {"$set": {"a": 1}}));
    assert!(no_op(doc! {"a": 1}, doc! {"$unset": {"b": 1}}));
    assert!(no_op(doc! {"a": [1]}, doc! {"$addToSet": {"a": 1}}));
    assert!(no_op(doc! {"a": 1}, doc! {"$set": {}}));
    // A type change is a change even when the values compare equal.
    assert!(!no_op(doc! {"a": 1}, doc! {"$set": {"a": 1.0}}));
}

#[test]
fn upsert_seed_expands_equalities() {
    let seed = upsert_seed(&[
        ("a.b".to_string(), Bson::Int32(1)),
        ("_id".to_string(), Bson::Int32(5)),
        ("a.c".to_string(), Bson::String("x".into())),
    ])
    .unwrap();
    assert_doc(seed, doc! {"_id": 5, "a": {"b": 1, "c": "x"}});
    assert_eq!(
        upsert_seed(&[("a".into(), Bson::Int32(1)), ("a.b".into(), Bson::Int32(1))])
            .unwrap_err()
            .code,
        54
    );
    // The seed then goes through the update as an insert.
    let insert = UpdateContext {
        is_upsert_insert: true,
        ..ctx()
    };
    let seed = upsert_seed(&[("name".into(), Bson::String("x".into()))]).unwrap();
    assert_doc(
        apply_with(
            seed,
            doc! {"$inc": {"n": 1}, "$setOnInsert": {"created": true}},
            None,
            &insert,
        ),
        doc! {"name": "x", "created": true, "n": 1},
    );
}

#[test]
fn pipeline_updates_run_the_allowed_stages() {
    let stages = Bson::Array(vec![
        Bson::Document(doc! {"$set": {"b": {"$add": ["$a", 1]}, "now": "$$NOW"}}),
        Bson::Document(doc! {"$unset": "c"}),
    ]);
    let update = Update::parse(&stages, None).unwrap();
    assert!(!update.is_replacement());
    let outcome = update
        .apply(&doc! {"_id": 1, "a": 2, "c": 3}, &ctx())
        .unwrap();
    assert_doc(
        outcome.document,
        doc! {"_id": 1, "a": 2, "b": 3, "now": bson::DateTime::from_millis(1_700_000_000_123)},
    );
    // The result keeps _id even when a stage drops it, and may not change it.
    let project = Bson::Array(vec![Bson::Document(doc! {"$project": {"_id": 0, "a": 1}})]);
    let outcome = Update::parse(&project, None)
        .unwrap()
        .apply(&doc! {"_id": 1, "a": 2, "c": 3}, &ctx())
        .unwrap();
    assert_doc(outcome.document, doc! {"_id": 1, "a": 2});
    let change_id = Bson::Array(vec![Bson::Document(doc! {"$set": {"_id": 2}})]);
    let err = Update::parse(&change_id, None)
        .unwrap()
        .apply(&doc! {"_id": 1}, &ctx())
        .unwrap_err();
    assert_eq!(err.code, 66);
}

#[test]
fn parsed_updates_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync + Clone + std::fmt::Debug>() {}
    shareable::<Update>();
    shareable::<UpdateContext>();
}

#[test]
fn thousands_of_fields_in_one_update() {
    let mut fields = Document::new();
    for i in 0..5000 {
        fields.insert(format!("f{i}.x"), i);
    }
    let update = Update::parse(&Bson::Document(doc! {"$set": fields.clone()}), None).unwrap();
    let result = update.apply(&doc! {"_id": 1}, &ctx()).unwrap().document;
    assert_eq!(result.len(), 5001);
    assert_eq!(result.get_document("f4999").unwrap(), &doc! {"x": 4999});
    // A conflict among them is still found and named.
    fields.insert("f2500", 1);
    let err = Update::parse(&Bson::Document(doc! {"$set": fields}), None).unwrap_err();
    assert_eq!(
        err.message,
        "Updating the path 'f2500' would create a conflict at 'f2500'"
    );
}
