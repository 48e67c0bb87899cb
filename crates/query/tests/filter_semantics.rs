//! Filter matching cases taken from MongoDB 7.0's documented behaviour and
//! its jstests; each case names where the behaviour comes from.

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;

fn regex(pattern: &str) -> Bson {
    Bson::RegularExpression(bson::Regex {
        pattern: pattern.to_string().try_into().unwrap(),
        options: String::new().try_into().unwrap(),
    })
}

fn matches(filter: Document, doc: Document) -> bool {
    Filter::parse(&filter)
        .unwrap_or_else(|e| panic!("{filter}: {e}"))
        .matches(&doc)
}

fn check(filter: Document, yes: &[Document], no: &[Document]) {
    for d in yes {
        assert!(
            matches(filter.clone(), d.clone()),
            "{filter} should match {d}"
        );
    }
    for d in no {
        assert!(
            !matches(filter.clone(), d.clone()),
            "{filter} should not match {d}"
        );
    }
}

fn error_code(filter: Document) -> (i32, String) {
    let err = Filter::parse(&filter).expect_err("filter should be rejected");
    (err.code, err.message)
}

#[test]
fn null2_js_null_matches_missing_fields_of_array_elements() {
    // jstests/core/null2.js: {"a.b": null} and {"a.b": {$in: [null]}} match ids 2 and 4.
    let docs = [
        doc! {"_id": 1, "a": [{"b": 5}]},
        doc! {"_id": 2, "a": [{}]},
        doc! {"_id": 3, "a": []},
        doc! {"_id": 4, "a": [{}, {"b": 5}]},
        doc! {"_id": 5, "a": [5, {"b": 5}]},
    ];
    for filter in [doc! {"a.b": null}, doc! {"a.b": {"$in": [null]}}] {
        let f = Filter::parse(&filter).unwrap();
        let ids: Vec<i32> = docs
            .iter()
            .filter(|d| f.matches(d))
            .map(|d| d.get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, vec![2, 4], "{filter}");
    }
}

#[test]
fn null_query_semantics_js_eq_null() {
    // jstests/core/null_query_semantics.js (7.0): {a: {$eq: null}} matches null, undefined and missing.
    check(
        doc! {"a": {"$eq": null}},
        &[
            doc! {"a": null},
            doc! {"a": Bson::Undefined},
            doc! {},
            doc! {"a": [1, null]},
        ],
        &[
            doc! {"a": {}},
            doc! {"a": 4},
            doc! {"a": {"b": null}},
            doc! {"a": []},
        ],
    );
    check(
        doc! {"a.b": null},
        &[
            doc! {"a": 4},
            doc! {"a": {}},
            doc! {"a": {"b": null}},
            doc! {},
        ],
        &[doc! {"a": {"b": 1}}],
    );
    check(
        doc! {"a": {"$ne": null}},
        &[doc! {"a": 4}, doc! {"a": []}],
        &[doc! {}, doc! {"a": [1, null]}],
    );
}

#[test]
fn equality_matches_an_element_or_the_whole_array() {
    // docs "Query an Array": {tags: "red"} matches arrays containing "red"; an array literal matches the exact array.
    check(
        doc! {"tags": "red"},
        &[doc! {"tags": ["blue", "red"]}, doc! {"tags": "red"}],
        &[doc! {"tags": [["red"]]}],
    );
    check(
        doc! {"tags": ["red", "blank"]},
        &[
            doc! {"tags": ["red", "blank"]},
            doc! {"tags": [["red", "blank"], 1]},
        ],
        &[
            doc! {"tags": ["blank", "red"]},
            doc! {"tags": ["red", "blank", "x"]},
        ],
    );
}

#[test]
fn numbers_compare_across_representations() {
    check(
        doc! {"a": 1},
        &[doc! {"a": 1.0}, doc! {"a": 1_i64}],
        &[doc! {"a": "1"}, doc! {"a": true}],
    );
}

#[test]
fn embedded_document_equality_is_exact_and_ordered() {
    // docs "Query on Embedded/Nested Documents": field order matters.
    check(
        doc! {"size": {"h": 14, "w": 21}},
        &[doc! {"size": {"h": 14, "w": 21}}],
        &[doc! {"size": {"w": 21, "h": 14}}, doc! {"size": {"h": 14}}],
    );
}

#[test]
fn comparison_is_type_bracketed() {
    // docs "Comparison/Sort Order": $gt only selects values of the same BSON type class.
    check(
        doc! {"a": {"$gt": 5}},
        &[doc! {"a": 6}, doc! {"a": 5.5}, doc! {"a": [1, 7]}],
        &[
            doc! {"a": "z"},
            doc! {"a": 5},
            doc! {},
            doc! {"a": null},
            doc! {"a": true},
        ],
    );
    check(
        doc! {"a": {"$lt": "b"}},
        &[doc! {"a": "a"}],
        &[doc! {"a": 1}, doc! {"a": null}],
    );
    check(
        doc! {"a": {"$gte": null}},
        &[doc! {}, doc! {"a": null}],
        &[doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$gt": null}},
        &[],
        &[doc! {}, doc! {"a": null}, doc! {"a": 1}],
    );
}

#[test]
fn min_key_and_max_key_bound_every_type() {
    check(
        doc! {"a": {"$lt": Bson::MaxKey}},
        &[doc! {"a": 1}, doc! {"a": "x"}, doc! {"a": {}}],
        &[doc! {"a": Bson::MaxKey}],
    );
    check(
        doc! {"a": {"$gt": Bson::MinKey}},
        &[doc! {"a": 1}, doc! {"a": null}],
        &[doc! {"a": Bson::MinKey}],
    );
}

#[test]
fn nan_only_equals_itself() {
    // jstests/core/nan.js: NaN is $eq/$gte/$lte NaN, never $gt/$lt anything.
    check(
        doc! {"a": f64::NAN},
        &[doc! {"a": f64::NAN}],
        &[doc! {"a": 0}],
    );
    check(
        doc! {"a": {"$lt": 0}},
        &[doc! {"a": -1}],
        &[doc! {"a": f64::NAN}],
    );
    check(
        doc! {"a": {"$gte": f64::NAN}},
        &[doc! {"a": f64::NAN}],
        &[doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$gt": f64::NAN}},
        &[],
        &[doc! {"a": f64::NAN}, doc! {"a": 1}],
    );
}

#[test]
fn range_conditions_on_arrays_may_be_met_by_different_elements() {
    // docs "Query an Array": {dim: {$gt: 15, $lt: 20}} matches [10, 25] (one element each); $elemMatch needs one element.
    check(
        doc! {"dim": {"$gt": 15, "$lt": 20}},
        &[doc! {"dim": [10, 25]}, doc! {"dim": 17}],
        &[doc! {"dim": [30, 40]}, doc! {"dim": [1, 2]}],
    );
    check(
        doc! {"dim": {"$elemMatch": {"$gt": 15, "$lt": 20}}},
        &[doc! {"dim": [10, 17]}],
        &[doc! {"dim": [10, 25]}, doc! {"dim": 17}],
    );
}

#[test]
fn ne_and_nin_reject_arrays_containing_the_value() {
    // docs "$ne": documents whose array field contains the value are not selected.
    check(
        doc! {"a": {"$ne": 5}},
        &[doc! {"a": [6, 7]}, doc! {}, doc! {"a": "5"}],
        &[doc! {"a": [5, 6]}, doc! {"a": 5}],
    );
    check(
        doc! {"a": {"$nin": [5, 6]}},
        &[doc! {"a": [7]}, doc! {}],
        &[doc! {"a": [1, 6]}],
    );
    check(doc! {"a": {"$nin": []}}, &[doc! {"a": 1}, doc! {}], &[]);
    check(doc! {"a": {"$in": []}}, &[], &[doc! {"a": 1}, doc! {}]);
}

#[test]
fn in_accepts_regexes() {
    // docs "$in": {tags: {$in: [/^be/, /^st/]}}.
    let filter = doc! {"tags": {"$in": [regex("^be"), "x"]}};
    check(
        filter,
        &[doc! {"tags": ["best"]}, doc! {"tags": "x"}],
        &[doc! {"tags": "abe"}],
    );
}

#[test]
fn numeric_path_components_are_offsets_and_field_names() {
    // docs "Query an Array": {"dim_cm.1": {$gt: 25}} addresses position 1.
    check(
        doc! {"a.1": {"$gt": 25}},
        &[doc! {"a": [1, 30]}],
        &[doc! {"a": [30, 1]}],
    );
    check(
        doc! {"a.0.b": 1},
        &[doc! {"a": [{"b": 1}]}, doc! {"a": {"0": {"b": 1}}}],
        &[doc! {"a": [{"b": 2}, {"b": 1}]}],
    );
    check(
        doc! {"a.0": 8},
        &[doc! {"a": [{"0": 7}, {"0": 8}]}],
        &[doc! {"a": [{"0": 8}, 9]}],
    );
}

#[test]
fn nested_arrays_are_not_traversed_by_field_names() {
    check(
        doc! {"a.b": 1},
        &[doc! {"a": [{"b": 1}]}, doc! {"a": [{"b": [1]}]}],
        &[doc! {"a": [[{"b": 1}]]}],
    );
}

#[test]
fn exists_semantics() {
    // docs "$exists": {qty: {$exists: true}} includes documents where qty is null.
    check(
        doc! {"a": {"$exists": true}},
        &[doc! {"a": null}, doc! {"a": []}],
        &[doc! {}],
    );
    check(
        doc! {"a.b": {"$exists": false}},
        &[doc! {"a": [1]}, doc! {"a": []}, doc! {}],
        &[doc! {"a": [{"b": null}]}],
    );
    check(doc! {"a": {"$exists": 0}}, &[doc! {}], &[doc! {"a": 1}]);
}

#[test]
fn type_semantics() {
    // docs "$type": "number" covers all numeric types; arrays match "array" and by element type.
    check(
        doc! {"a": {"$type": "number"}},
        &[
            doc! {"a": 1},
            doc! {"a": 1.5},
            doc! {"a": 2_i64},
            doc! {"a": ["x", 3]},
        ],
        &[doc! {"a": "1"}],
    );
    check(
        doc! {"a": {"$type": "array"}},
        &[doc! {"a": []}, doc! {"a": [1]}],
        &[doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$type": [2, "bool"]}},
        &[doc! {"a": "x"}, doc! {"a": false}],
        &[doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$type": "null"}},
        &[doc! {"a": null}],
        &[doc! {}],
    );
    assert_eq!(error_code(doc! {"a": {"$type": "nope"}}).0, 2);
}

#[test]
fn regex_semantics() {
    // docs "$regex": options i, m, s, x; regex literals; $not with a regex.
    check(
        doc! {"a": {"$regex": "^ab", "$options": "i"}},
        &[doc! {"a": "ABc"}, doc! {"a": ["x", "abx"]}],
        &[doc! {"a": "cab"}, doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$regex": "^b", "$options": "m"}},
        &[doc! {"a": "a\nb"}],
        &[doc! {"a": "a b"}],
    );
    check(
        doc! {"a": {"$regex": "a.b", "$options": "s"}},
        &[doc! {"a": "a\nb"}],
        &[],
    );
    check(
        doc! {"a": {"$regex": "a b # comment", "$options": "x"}},
        &[doc! {"a": "ab"}],
        &[],
    );
    check(
        doc! {"a": regex("x$")},
        &[doc! {"a": "ax"}],
        &[doc! {"a": "xa"}],
    );
    check(
        doc! {"a": {"$not": regex("^a")}},
        &[doc! {"a": "b"}, doc! {}],
        &[doc! {"a": "ab"}],
    );
    assert_eq!(error_code(doc! {"a": {"$options": "i"}}).0, 2);
    assert_eq!(
        error_code(doc! {"a": {"$regex": "a", "$options": "q"}}).0,
        51108
    );
}

#[test]
fn elem_match_query_and_value_forms() {
    // docs "$elemMatch (query)": both conditions on the same element.
    let f = doc! {"results": {"$elemMatch": {"product": "xyz", "score": {"$gte": 8}}}};
    check(
        f,
        &[doc! {"results": [{"product": "abc", "score": 10}, {"product": "xyz", "score": 8}]}],
        &[
            doc! {"results": [{"product": "abc", "score": 10}, {"product": "xyz", "score": 5}]},
            doc! {"results": {"product": "xyz", "score": 9}},
        ],
    );
    check(
        doc! {"a": {"$elemMatch": {"$not": {"$gt": 5}}}},
        &[doc! {"a": [6, 1]}],
        &[doc! {"a": [6, 7]}],
    );
    check(
        doc! {"a": {"$elemMatch": {"$elemMatch": {"$eq": 1}}}},
        &[doc! {"a": [[2, 1]]}],
        &[doc! {"a": [1]}],
    );
}

#[test]
fn size_and_all() {
    // docs "$size" / "$all": $size does not look inside nested arrays; $all is an $and of equalities.
    check(
        doc! {"a": {"$size": 2}},
        &[doc! {"a": [1, [2, 3]]}],
        &[doc! {"a": [[1, 2]]}, doc! {"a": 2}],
    );
    check(
        doc! {"a.b": {"$size": 1}},
        &[doc! {"a": [{"b": [1]}, {"b": 2}]}],
        &[],
    );
    check(
        doc! {"a": {"$all": [1, 2]}},
        &[doc! {"a": [2, 3, 1]}],
        &[doc! {"a": [1]}, doc! {"a": 1}],
    );
    check(
        doc! {"a": {"$all": [[1, 2]]}},
        &[doc! {"a": [1, 2]}, doc! {"a": [[1, 2], 3]}],
        &[doc! {"a": [2, 1]}],
    );
    check(doc! {"a": {"$all": []}}, &[], &[doc! {"a": []}]);
    let all_elem = doc! {"a": {"$all": [{"$elemMatch": {"x": 1}}, {"$elemMatch": {"y": 2}}]}};
    check(
        all_elem,
        &[doc! {"a": [{"x": 1}, {"y": 2}]}],
        &[doc! {"a": [{"x": 1}]}],
    );
    assert_eq!(
        error_code(doc! {"a": {"$all": [{"$elemMatch": {"x": 1}}, 3]}}).0,
        2
    );
}

#[test]
fn mod_semantics() {
    // docs "$mod": values are truncated towards zero; 0 divisor and bad arity are errors.
    check(
        doc! {"a": {"$mod": [4, 0]}},
        &[doc! {"a": 8}, doc! {"a": 8.9}, doc! {"a": [1, 12]}],
        &[doc! {"a": 7}, doc! {"a": "8"}],
    );
    check(
        doc! {"a": {"$mod": [4, -1]}},
        &[doc! {"a": -5}],
        &[doc! {"a": 3}],
    );
    assert_eq!(error_code(doc! {"a": {"$mod": [0, 1]}}).0, 2);
    assert!(error_code(doc! {"a": {"$mod": [1]}})
        .1
        .contains("not enough elements"));
    assert!(error_code(doc! {"a": {"$mod": [1, 2, 3]}})
        .1
        .contains("too many elements"));
}

#[test]
fn logical_operators() {
    check(
        doc! {"$or": [{"a": 1}, {"b": 2}]},
        &[doc! {"a": 1}, doc! {"b": 2}],
        &[doc! {"a": 2}],
    );
    check(
        doc! {"$nor": [{"a": 1}, {"b": 2}]},
        &[doc! {"a": 2}, doc! {}],
        &[doc! {"b": 2}],
    );
    check(
        doc! {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 3}}]},
        &[doc! {"a": 2}, doc! {"a": [0, 5]}],
        &[doc! {"a": 0}],
    );
    check(
        doc! {"a": {"$not": {"$gt": 1, "$lt": 3}}},
        &[doc! {"a": 5}, doc! {}],
        &[doc! {"a": 2}],
    );
    check(
        doc! {"$comment": "ignored", "a": 1},
        &[doc! {"a": 1}],
        &[doc! {"a": 2}],
    );
}

#[test]
fn expr_compares_fields_of_the_same_document() {
    // docs "$expr": {$expr: {$gt: ["$spent", "$budget"]}}.
    check(
        doc! {"$expr": {"$gt": ["$spent", "$budget"]}},
        &[doc! {"spent": 5, "budget": 3}],
        &[doc! {"spent": 1, "budget": 3}],
    );
}

#[test]
fn errors_name_the_operator() {
    assert_eq!(
        error_code(doc! {"$foo": 1}),
        (2, "unknown top level operator: $foo".to_string())
    );
    assert_eq!(
        error_code(doc! {"a": {"$foo": 1}}),
        (2, "unknown operator: $foo".to_string())
    );
    assert_eq!(
        error_code(doc! {"a": {"$gt": 1, "b": 1}}),
        (2, "unknown operator: b".to_string())
    );
    let (code, message) = error_code(doc! {"$where": "this.a"});
    assert!(code == 6108304 && message.contains("$where"), "MongoDB 7.0 without JavaScript");
    let (code, message) = error_code(doc! {"loc": {"$near": [0, 0]}});
    assert!(code == 115 && message.contains("$near"));
    assert_eq!(error_code(doc! {"$or": []}).0, 2);
    assert_eq!(error_code(doc! {"$and": [1]}).0, 2);
    assert_eq!(error_code(doc! {"a": {"$in": 1}}).0, 2);
    assert_eq!(error_code(doc! {"a": {"$not": 1}}).0, 2);
    assert_eq!(error_code(doc! {"a": {"$size": -1}}).0, 2);
    assert_eq!(error_code(doc! {"a": {"$elemMatch": 1}}).0, 2);
}

#[test]
fn operator_detection_looks_at_the_first_field() {
    // A document value whose first field is not an operator is an equality (MongoDB's isExpressionDocument).
    check(
        doc! {"a": {"b": 1, "$c": 2}},
        &[doc! {"a": {"b": 1, "$c": 2}}],
        &[doc! {"a": {"b": 1}}],
    );
}

#[test]
fn details_report_the_matching_array_position() {
    // Positional $ (docs "$ (projection)"): the element of grades that matched.
    let f = Filter::parse(&doc! {"grades": {"$gte": 85}}).unwrap();
    let d = f.matches_with_details(&doc! {"grades": [80, 85, 90]});
    assert!(d.matched);
    assert_eq!(d.array_position, Some(1));
    let f = Filter::parse(&doc! {"a.b": 2}).unwrap();
    assert_eq!(
        f.matches_with_details(&doc! {"a": [{"b": 1}, {"b": 2}]})
            .array_position,
        Some(1)
    );
    let f = Filter::parse(&doc! {"a": {"$elemMatch": {"b": 2}}}).unwrap();
    assert_eq!(
        f.matches_with_details(&doc! {"a": [{"b": 1}, {"b": 2}]})
            .array_position,
        Some(1)
    );
    assert!(!f.matches_with_details(&doc! {"a": 1}).matched);
}

#[test]
fn equality_fields_for_upsert_seeds() {
    let f = Filter::parse(
        &doc! {"a": 1, "b": {"$eq": "x"}, "c": {"$gt": 1}, "$and": [{"d.e": 2}], "$or": [{"f": 1}]},
    )
    .unwrap();
    assert_eq!(
        f.equality_fields(),
        vec![
            ("a".to_string(), Bson::Int32(1)),
            ("b".to_string(), Bson::String("x".into())),
            ("d.e".to_string(), Bson::Int32(2))
        ]
    );
    assert!(Filter::parse(&doc! {}).unwrap().is_empty());
    assert!(Filter::parse(&doc! {"$comment": "x"}).unwrap().is_empty());
    assert!(!Filter::parse(&doc! {"a": 1}).unwrap().is_empty());
}

#[test]
fn expr_errors_fail_the_query_and_expr_is_top_level_only() {
    // MongoDB fails a find whose $expr cannot be evaluated (e.g. $divide by zero).
    let f = Filter::parse(&doc! {"$expr": {"$divide": [1, "$zero"]}}).unwrap();
    assert!(f.try_matches_with_details(&doc! {"zero": 0}).is_err());
    assert!(!f.matches(&doc! {"zero": 0}));
    assert!(
        f.try_matches_with_details(&doc! {"zero": 2})
            .unwrap()
            .matched
    );
    // $expr inside $elemMatch: QueryFeatureNotAllowed (224).
    assert_eq!(
        error_code(doc! {"a": {"$elemMatch": {"$expr": {"$eq": [1, 1]}}}}).0,
        224
    );
}

#[test]
fn empty_field_names_are_ordinary_fields() {
    // BSON allows "" as a field name and MongoDB matches it like any other.
    check(doc! {"": 1}, &[doc! {"": 1}], &[doc! {"a": 1}]);
}

#[test]
fn elem_match_queries_see_array_elements_as_documents() {
    // MongoDB's ElemMatchObjectMatchExpression tests every element that is
    // a BSON object, arrays included (keyed "0", "1", ...); the shrunk case
    // is saved in filter_reference.proptest-regressions.
    check(
        doc! {"b": {"$elemMatch": {"a": {"$ne": 0}}}},
        &[doc! {"b": [[]]}, doc! {"b": [{"a": 1}]}],
        &[doc! {"b": [1, 2]}, doc! {"b": [{"a": 0}]}],
    );
    check(doc! {"b": {"$elemMatch": {"0": 5}}}, &[doc! {"b": [[5, 6]]}], &[doc! {"b": [[6, 5]]}, doc! {"b": [5]}]);
}
