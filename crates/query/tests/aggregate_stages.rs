//! Pipeline stages against MongoDB's documented examples; outputs are
//! checked exactly (field order included).

use std::collections::HashMap;

use bson::{doc, Bson, DateTime, Document};
use slipstream_query::aggregate::{CollectionSource, Pipeline};
use slipstream_query::QueryError;

/// Collections of one database, for `$lookup` and `$unionWith`.
#[derive(Default)]
struct Collections(HashMap<String, Vec<Document>>);

impl CollectionSource for Collections {
    fn scan(&self, db: &str, collection: &str) -> Result<Vec<Document>, QueryError> {
        assert_eq!(db, "test");
        Ok(self.0.get(collection).cloned().unwrap_or_default())
    }
}

fn now() -> DateTime {
    DateTime::from_millis(1_700_000_000_000)
}

fn run_with(source: &Collections, stages: Vec<Document>, input: Vec<Document>) -> Result<Vec<Document>, QueryError> {
    let pipeline = Pipeline::parse(&stages, "test")?;
    pipeline.execute(Box::new(input.into_iter().map(Ok)), source, now())
}

fn run(stages: Vec<Document>, input: Vec<Document>) -> Result<Vec<Document>, QueryError> {
    run_with(&Collections::default(), stages, input)
}

fn date(text: &str) -> DateTime {
    DateTime::parse_rfc3339_str(text).unwrap()
}

fn sales() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "item": "abc", "price": 10, "quantity": 2, "date": date("2014-03-01T08:00:00Z")},
        doc! {"_id": 2, "item": "jkl", "price": 20, "quantity": 1, "date": date("2014-03-01T09:00:00Z")},
        doc! {"_id": 3, "item": "xyz", "price": 5, "quantity": 10, "date": date("2014-03-15T09:00:00Z")},
        doc! {"_id": 4, "item": "xyz", "price": 5, "quantity": 20, "date": date("2014-04-04T11:21:39.736Z")},
        doc! {"_id": 5, "item": "abc", "price": 10, "quantity": 10, "date": date("2014-04-04T21:23:13.331Z")},
        doc! {"_id": 6, "item": "def", "price": 7.5, "quantity": 5, "date": date("2015-06-04T05:08:13Z")},
        doc! {"_id": 7, "item": "def", "price": 7.5, "quantity": 10, "date": date("2015-09-10T08:43:00Z")},
        doc! {"_id": 8, "item": "abc", "price": 10, "quantity": 5, "date": date("2016-02-06T20:20:13Z")},
    ]
}

#[test]
fn group_by_item_with_sum_avg_count() {
    let out = run(
        vec![
            doc! {"$group": {"_id": "$item", "totalSaleAmount": {"$sum": {"$multiply": ["$price", "$quantity"]}}}},
            doc! {"$match": {"totalSaleAmount": {"$gte": 100}}},
        ],
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": "abc", "totalSaleAmount": 170},
        doc! {"_id": "def", "totalSaleAmount": 112.5},
        doc! {"_id": "xyz", "totalSaleAmount": 150},
    ]);
}

#[test]
fn group_by_null_computes_totals() {
    let out = run(
        vec![doc! {"$group": {
            "_id": null,
            "totalSaleAmount": {"$sum": {"$multiply": ["$price", "$quantity"]}},
            "averageQuantity": {"$avg": "$quantity"},
            "count": {"$sum": 1},
            "n": {"$count": {}},
        }}],
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": null, "totalSaleAmount": 452.5, "averageQuantity": 7.875, "count": 8, "n": 8}]);
}

#[test]
fn group_by_date_string_with_accumulators() {
    let out = run(
        vec![
            doc! {"$match": {"date": {"$gte": date("2014-01-01T00:00:00Z"), "$lt": date("2015-01-01T00:00:00Z")}}},
            doc! {"$group": {
                "_id": {"$dateToString": {"format": "%Y-%m-%d", "date": "$date"}},
                "items": {"$addToSet": "$item"},
                "quantities": {"$push": "$quantity"},
                "first": {"$first": "$_id"},
                "last": {"$last": "$_id"},
                "min": {"$min": "$quantity"},
                "max": {"$max": "$quantity"},
            }},
            doc! {"$sort": {"_id": -1}},
        ],
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": "2014-04-04", "items": ["xyz", "abc"], "quantities": [20, 10], "first": 4, "last": 5, "min": 10, "max": 20},
        doc! {"_id": "2014-03-15", "items": ["xyz"], "quantities": [10], "first": 3, "last": 3, "min": 10, "max": 10},
        doc! {"_id": "2014-03-01", "items": ["abc", "jkl"], "quantities": [2, 1], "first": 1, "last": 2, "min": 1, "max": 2},
    ]);
}

#[test]
fn group_keys_compare_numerically_and_by_document() {
    let input = vec![
        doc! {"k": 1, "v": 1}, doc! {"k": 1.0, "v": 2}, doc! {"k": 1i64, "v": 3},
        doc! {"v": 4}, doc! {"k": null, "v": 5},
    ];
    let out = run(vec![doc! {"$group": {"_id": {"key": "$k"}, "total": {"$sum": "$v"}}}], input).unwrap();
    // A missing `k` leaves `key` out of the _id document: {} sorts first.
    assert_eq!(out, vec![
        doc! {"_id": {}, "total": 4},
        doc! {"_id": {"key": null}, "total": 5},
        doc! {"_id": {"key": 1}, "total": 6},
    ]);
}

#[test]
fn group_accumulators_ignore_what_mongodb_ignores() {
    let input = vec![
        doc! {"x": 1, "o": {"a": 1}}, doc! {"x": "text", "o": null}, doc! {"x": null, "o": {"b": 2}},
        doc! {"x": [5], "o": {"a": 3}}, doc! {},
    ];
    let out = run(
        vec![doc! {"$group": {
            "_id": 0,
            "sum": {"$sum": "$x"},
            "avg": {"$avg": "$x"},
            "min": {"$min": "$x"},
            "max": {"$max": "$x"},
            "pushed": {"$push": "$x"},
            "merged": {"$mergeObjects": "$o"},
            "first": {"$first": "$missing"},
        }}],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {
        "_id": 0, "sum": 1, "avg": 1.0, "min": 1, "max": [5],
        "pushed": [1, "text", null, [5]], "merged": {"a": 3, "b": 2}, "first": null,
    }]);
}

#[test]
fn std_dev_pop_and_samp() {
    let input = vec![doc! {"s": 62}, doc! {"s": 67}, doc! {"s": 72}];
    let out = run(vec![doc! {"$group": {"_id": null, "pop": {"$stdDevPop": "$s"}, "samp": {"$stdDevSamp": "$s"}}}], input).unwrap();
    let pop = out[0].get_f64("pop").unwrap();
    let samp = out[0].get_f64("samp").unwrap();
    assert!((pop - 4.08248290463863).abs() < 1e-9, "{pop}");
    assert!((samp - 5.0).abs() < 1e-9, "{samp}");
}

#[test]
fn sum_overflows_into_long_then_double() {
    let input = vec![doc! {"v": i32::MAX}, doc! {"v": 1}];
    let out = run(vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}], input).unwrap();
    assert_eq!(out[0].get("s"), Some(&Bson::Int64(i64::from(i32::MAX) + 1)));
    let input = vec![doc! {"v": i64::MAX}, doc! {"v": 1}];
    let out = run(vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}], input).unwrap();
    assert_eq!(out[0].get("s"), Some(&Bson::Double(i64::MAX as f64 + 1.0)));
}

fn inventory_sizes() -> Vec<Document> {
    vec![
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": ["S", "M", "L"]},
        doc! {"_id": 2, "item": "EFG", "price": 120, "sizes": []},
        doc! {"_id": 3, "item": "IJK", "price": 160, "sizes": "M"},
        doc! {"_id": 4, "item": "LMN", "price": 10},
        doc! {"_id": 5, "item": "XYZ", "price": 5.75, "sizes": null},
    ]
}

#[test]
fn unwind_string_form() {
    let out = run(vec![doc! {"$unwind": "$sizes"}], inventory_sizes()).unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "S"},
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "M"},
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "L"},
        doc! {"_id": 3, "item": "IJK", "price": 160, "sizes": "M"},
    ]);
}

#[test]
fn unwind_preserving_with_index() {
    let out = run(
        vec![doc! {"$unwind": {"path": "$sizes", "includeArrayIndex": "arrayIndex", "preserveNullAndEmptyArrays": true}}],
        inventory_sizes(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "S", "arrayIndex": 0i64},
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "M", "arrayIndex": 1i64},
        doc! {"_id": 1, "item": "ABC", "price": 80, "sizes": "L", "arrayIndex": 2i64},
        doc! {"_id": 2, "item": "EFG", "price": 120, "arrayIndex": null},
        doc! {"_id": 3, "item": "IJK", "price": 160, "sizes": "M", "arrayIndex": null},
        doc! {"_id": 4, "item": "LMN", "price": 10, "arrayIndex": null},
        doc! {"_id": 5, "item": "XYZ", "price": 5.75, "sizes": null, "arrayIndex": null},
    ]);
}

#[test]
fn unwind_nested_path_and_errors() {
    let out = run(vec![doc! {"$unwind": "$a.b"}], vec![doc! {"a": {"b": [1, 2], "c": 3}}]).unwrap();
    assert_eq!(out, vec![doc! {"a": {"b": 1, "c": 3}}, doc! {"a": {"b": 2, "c": 3}}]);
    assert_eq!(run(vec![doc! {"$unwind": "sizes"}], vec![]).unwrap_err().code, 28818);
    assert_eq!(run(vec![doc! {"$unwind": {"path": "$a", "bogus": 1}}], vec![]).unwrap_err().code, 28811);
}

fn lookup_source() -> Collections {
    let mut source = Collections::default();
    source.0.insert("inventory".into(), vec![
        doc! {"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120},
        doc! {"_id": 2, "sku": "bread", "description": "product 2", "instock": 80},
        doc! {"_id": 3, "sku": "cashews", "description": "product 3", "instock": 60},
        doc! {"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70},
        doc! {"_id": 5, "sku": null, "description": "Incomplete"},
        doc! {"_id": 6},
    ]);
    source
}

#[test]
fn lookup_equality_matches_null_and_missing() {
    let orders = vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2},
        doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1},
        doc! {"_id": 3},
    ];
    let out = run_with(
        &lookup_source(),
        vec![doc! {"$lookup": {"from": "inventory", "localField": "item", "foreignField": "sku", "as": "inventory_docs"}}],
        orders,
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "quantity": 2, "inventory_docs": [
            {"_id": 1, "sku": "almonds", "description": "product 1", "instock": 120}]},
        doc! {"_id": 2, "item": "pecans", "price": 20, "quantity": 1, "inventory_docs": [
            {"_id": 4, "sku": "pecans", "description": "product 4", "instock": 70}]},
        doc! {"_id": 3, "inventory_docs": [
            {"_id": 5, "sku": null, "description": "Incomplete"}, {"_id": 6}]},
    ]);
}

#[test]
fn lookup_with_array_local_and_foreign_fields() {
    let mut source = Collections::default();
    source.0.insert("members".into(), vec![
        doc! {"_id": 1, "name": "artie", "tags": ["a", "b"]},
        doc! {"_id": 2, "name": "giraffe"},
        doc! {"_id": 3, "name": "pandabear", "tags": ["c"]},
    ]);
    let classes = vec![doc! {"_id": 1, "enrollmentlist": ["giraffe", "pandabear", "zebra"]}, doc! {"_id": 2, "want": "b"}];
    let out = run_with(
        &source,
        vec![
            doc! {"$lookup": {"from": "members", "localField": "enrollmentlist", "foreignField": "name", "as": "enrollee_info"}},
            doc! {"$lookup": {"from": "members", "localField": "want", "foreignField": "tags", "as": "tagged",
                "pipeline": [{"$project": {"name": 1, "_id": 0}}]}},
        ],
        classes,
    )
    .unwrap();
    assert_eq!(out[0].get_array("enrollee_info").unwrap(), &vec![
        Bson::Document(doc! {"_id": 2, "name": "giraffe"}),
        Bson::Document(doc! {"_id": 3, "name": "pandabear", "tags": ["c"]}),
    ]);
    assert_eq!(out[1].get_array("tagged").unwrap(), &vec![Bson::Document(doc! {"name": "artie"})]);
}

#[test]
fn lookup_with_let_and_pipeline() {
    let mut source = Collections::default();
    source.0.insert("warehouses".into(), vec![
        doc! {"_id": 1, "stock_item": "almonds", "warehouse": "A", "instock": 120},
        doc! {"_id": 2, "stock_item": "pecans", "warehouse": "A", "instock": 80},
        doc! {"_id": 3, "stock_item": "almonds", "warehouse": "B", "instock": 60},
        doc! {"_id": 4, "stock_item": "cookies", "warehouse": "B", "instock": 40},
        doc! {"_id": 5, "stock_item": "cookies", "warehouse": "A", "instock": 80},
    ]);
    let orders = vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "ordered": 2},
        doc! {"_id": 2, "item": "pecans", "price": 20, "ordered": 1},
        doc! {"_id": 3, "item": "cookies", "price": 10, "ordered": 60},
    ];
    let out = run_with(
        &source,
        vec![doc! {"$lookup": {
            "from": "warehouses",
            "let": {"order_item": "$item", "order_qty": "$ordered"},
            "pipeline": [
                {"$match": {"$expr": {"$and": [{"$eq": ["$stock_item", "$$order_item"]}, {"$gte": ["$instock", "$$order_qty"]}]}}},
                {"$project": {"stock_item": 0, "_id": 0}},
            ],
            "as": "stockdata",
        }}],
        orders,
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 1, "item": "almonds", "price": 12, "ordered": 2, "stockdata": [{"warehouse": "A", "instock": 120}, {"warehouse": "B", "instock": 60}]},
        doc! {"_id": 2, "item": "pecans", "price": 20, "ordered": 1, "stockdata": [{"warehouse": "A", "instock": 80}]},
        doc! {"_id": 3, "item": "cookies", "price": 10, "ordered": 60, "stockdata": [{"warehouse": "A", "instock": 80}]},
    ]);
}

#[test]
fn match_expr_sees_variables_and_reports_errors() {
    let input = vec![doc! {"_id": 1, "t": DateTime::from_millis(0), "a": 1, "b": 0}, doc! {"_id": 2, "t": DateTime::from_millis(i64::MAX)}];
    let out = run(vec![doc! {"$match": {"$expr": {"$lt": ["$t", "$$NOW"]}}}], input.clone()).unwrap();
    assert_eq!(out, vec![input[0].clone()]);
    let err = run(vec![doc! {"$match": {"$expr": {"$divide": ["$a", "$b"]}}}], input.clone()).unwrap_err();
    assert_eq!((err.code, err.message.as_str()), (2, "can't $divide by zero"));
    // An $expr below the top level sees the same variables.
    let out = run(vec![doc! {"$match": {"$or": [{"$expr": {"$lt": ["$t", "$$NOW"]}}, {"a": 2}]}}], input.clone()).unwrap();
    assert_eq!(out, vec![input[0].clone()]);
    let err = run(vec![doc! {"$match": {"$or": [{"a": 2}, {"$expr": {"$eq": ["$a", "$$undefinedName"]}}]}}], input).unwrap_err();
    assert_eq!(err.code, 17276);
    // The planner gets the leading filter without its $expr.
    let pipeline = Pipeline::parse(&[doc! {"$match": {"a": 1, "$expr": {"$gt": ["$a", 0]}}}], "test").unwrap();
    assert_eq!(pipeline.leading_match(), Some(&doc! {"a": 1}));
}

#[test]
fn project_inclusion_with_computed_fields() {
    let books = vec![doc! {"_id": 1, "title": "abc123", "isbn": "0001122223334", "author": {"last": "zzz", "first": "aaa"}, "copies": 5}];
    let out = run(
        vec![doc! {"$project": {
            "title": 1,
            "isbn": {"prefix": {"$substr": ["$isbn", 0, 3]}, "group": {"$substr": ["$isbn", 3, 2]}},
            "lastName": "$author.last",
            "copiesSold": "$copies",
        }}],
        books.clone(),
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "title": "abc123", "isbn": {"prefix": "000", "group": "11"}, "lastName": "zzz", "copiesSold": 5}]);
    let out = run(vec![doc! {"$project": {"author.first": 1, "_id": 0, "n": "$nothing"}}], books).unwrap();
    assert_eq!(out, vec![doc! {"author": {"first": "aaa"}}]);
}

#[test]
fn project_exclusion_and_nested_arrays() {
    let input = vec![doc! {"_id": 1, "a": [{"b": 1, "c": 2}, {"b": 3}, 7], "d": {"e": 1, "f": 2}}];
    let out = run(vec![doc! {"$project": {"a.b": 0, "d.e": 0}}], input.clone()).unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "a": [{"c": 2}, {}, 7], "d": {"f": 2}}]);
    let out = run(vec![doc! {"$project": {"a.b": 1}}], input.clone()).unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "a": [{"b": 1}, {"b": 3}]}]);
    let out = run(vec![doc! {"$project": {"_id": 0}}], input).unwrap();
    assert_eq!(out, vec![doc! {"a": [{"b": 1, "c": 2}, {"b": 3}, 7], "d": {"e": 1, "f": 2}}]);
}

#[test]
fn project_remove_and_conditional_exclusion() {
    let input = vec![doc! {"_id": 1, "author": {"first": "a", "middle": ""}}, doc! {"_id": 2, "author": {"first": "b", "middle": "m"}}];
    let out = run(
        vec![doc! {"$project": {"author.first": 1, "author.middle": {"$cond": {"if": {"$eq": ["", "$author.middle"]}, "then": "$$REMOVE", "else": "$author.middle"}}}}],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "author": {"first": "a"}}, doc! {"_id": 2, "author": {"first": "b", "middle": "m"}}]);
}

#[test]
fn project_errors() {
    assert_eq!(run(vec![doc! {"$project": {"a": 1, "b": 0}}], vec![]).unwrap_err().code, 31254);
    assert_eq!(run(vec![doc! {"$project": {"a": 0, "b": "$x"}}], vec![]).unwrap_err().code, 31254);
    assert_eq!(run(vec![doc! {"$project": {"a": 1, "a.b": 1}}], vec![]).unwrap_err().code, 31250);
    assert_eq!(run(vec![doc! {"$project": {}}], vec![]).unwrap_err().code, 51272);
    assert_eq!(run(vec![doc! {"$project": {"a": {"$bogus": 1}}}], vec![]).unwrap_err().code, 168);
}

#[test]
fn add_fields_set_and_unset() {
    let input = vec![doc! {"_id": 1, "student": "Maya", "homework": [10, 5, 10], "quiz": [10, 8], "extraCredit": 0, "specs": {"doors": 4}}];
    let out = run(
        vec![
            doc! {"$addFields": {"totalHomework": {"$sum": "$homework"}, "totalQuiz": {"$sum": "$quiz"}}},
            doc! {"$set": {"totalScore": {"$add": ["$totalHomework", "$totalQuiz", "$extraCredit"]}, "specs.fuel_type": "unleaded", "extraCredit": "$$REMOVE"}},
            doc! {"$unset": ["homework", "quiz"]},
        ],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "student": "Maya", "specs": {"doors": 4, "fuel_type": "unleaded"}, "totalHomework": 25, "totalQuiz": 18, "totalScore": 43}]);
}

#[test]
fn add_fields_reaches_into_arrays_and_replaces_scalars() {
    let out = run(vec![doc! {"$addFields": {"a.b": 1, "c": {"d": true}}}], vec![doc! {"a": [{"x": 1}, 2], "c": 5}]).unwrap();
    assert_eq!(out, vec![doc! {"a": [{"x": 1, "b": 1}, {"b": 1}], "c": {"d": true}}]);
}

#[test]
fn sort_skip_limit() {
    let out = run(
        vec![doc! {"$sort": {"price": -1, "_id": 1}}, doc! {"$skip": 1}, doc! {"$limit": 3}, doc! {"$project": {"_id": 1}}],
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1}, doc! {"_id": 5}, doc! {"_id": 8}]);
    assert_eq!(run(vec![doc! {"$limit": 0}], vec![]).unwrap_err().code, 15958);
    assert_eq!(run(vec![doc! {"$skip": -1}], vec![]).unwrap_err().code, 15956);
    assert_eq!(run(vec![doc! {"$sort": {}}], vec![]).unwrap_err().code, 15976);
}

#[test]
fn sort_is_stable_for_ties() {
    let input: Vec<Document> = (0..10).map(|i| doc! {"_id": i, "k": i % 2}).collect();
    let out = run(vec![doc! {"$sort": {"k": 1}}, doc! {"$limit": 4}], input).unwrap();
    let ids: Vec<i32> = out.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    assert_eq!(ids, vec![0, 2, 4, 6]);
}

#[test]
fn count_and_sort_by_count() {
    let scores = vec![doc! {"score": 10}, doc! {"score": 65}, doc! {"score": 85}, doc! {"score": 95}];
    let out = run(vec![doc! {"$match": {"score": {"$gt": 80}}}, doc! {"$count": "passing_scores"}], scores).unwrap();
    assert_eq!(out, vec![doc! {"passing_scores": 2}]);
    assert_eq!(run(vec![doc! {"$count": "n"}], vec![]).unwrap(), Vec::<Document>::new());
    assert_eq!(run(vec![doc! {"$count": "$n"}], vec![]).unwrap_err().code, 40158);
    let tags = vec![doc! {"tags": ["a", "b"]}, doc! {"tags": ["b", "c"]}, doc! {"tags": ["b", "a"]}];
    let out = run(vec![doc! {"$unwind": "$tags"}, doc! {"$sortByCount": "$tags"}], tags).unwrap();
    assert_eq!(out, vec![doc! {"_id": "b", "count": 3}, doc! {"_id": "a", "count": 2}, doc! {"_id": "c", "count": 1}]);
}

#[test]
fn replace_root_and_replace_with() {
    let input = vec![doc! {"_id": 1, "name": {"first": "John", "last": "Backus"}}, doc! {"_id": 2, "name": {"first": "Ada"}}];
    let out = run(vec![doc! {"$replaceRoot": {"newRoot": "$name"}}], input.clone()).unwrap();
    assert_eq!(out, vec![doc! {"first": "John", "last": "Backus"}, doc! {"first": "Ada"}]);
    let out = run(vec![doc! {"$replaceWith": {"$mergeObjects": [{"_id": "$_id", "last": "?"}, "$name"]}}], input.clone()).unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "last": "Backus", "first": "John"}, doc! {"_id": 2, "last": "?", "first": "Ada"}]);
    let err = run(vec![doc! {"$replaceRoot": {"newRoot": "$nothing"}}], input).unwrap_err();
    assert_eq!(err.code, 40228);
}

#[test]
fn facet_runs_sub_pipelines_over_the_same_input() {
    let out = run(
        vec![doc! {"$facet": {
            "byItem": [{"$sortByCount": "$item"}, {"$limit": 1}],
            "cheap": [{"$match": {"price": {"$lt": 8}}}, {"$count": "n"}],
            "none": [{"$match": {"price": {"$gt": 1000}}}],
        }}],
        sales(),
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"byItem": [{"_id": "abc", "count": 3}], "cheap": [{"n": 4}], "none": []}]);
    assert_eq!(run(vec![doc! {"$facet": {"x": [{"$facet": {"y": [{"$limit": 1}]}}]}}], vec![]).unwrap_err().code, 40600);
}

#[test]
fn union_with_appends_another_collection() {
    let mut source = Collections::default();
    source.0.insert("other".into(), vec![doc! {"_id": 10, "x": 1}, doc! {"_id": 11, "x": 2}]);
    let out = run_with(
        &source,
        vec![doc! {"$unionWith": {"coll": "other", "pipeline": [{"$match": {"x": 2}}]}}, doc! {"$project": {"_id": 1}}],
        vec![doc! {"_id": 1}],
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1}, doc! {"_id": 11}]);
}

#[test]
fn now_variable_comes_from_the_caller() {
    let out = run(vec![doc! {"$project": {"_id": 0, "t": "$$NOW"}}], vec![doc! {}]).unwrap();
    assert_eq!(out, vec![doc! {"t": now()}]);
}

#[test]
fn unknown_and_unsupported_stages() {
    let err = run(vec![doc! {"$foo": {}}], vec![]).unwrap_err();
    assert_eq!((err.code, err.message.as_str()), (40324, "Unrecognized pipeline stage name: '$foo'"));
    for stage in ["$out", "$merge", "$bucketAuto", "$geoNear", "$changeStream", "$collStats", "$indexStats", "$currentOp", "$search"] {
        let err = run(vec![doc! {stage: {}}], vec![]).unwrap_err();
        assert_eq!(err.code, 115, "{stage}");
        assert!(err.message.contains(stage), "{}", err.message);
    }
    assert_eq!(run(vec![doc! {"$match": {}, "$limit": 1}], vec![]).unwrap_err().code, 40323);
    assert_eq!(run(vec![doc! {"$group": {"_id": null, "x": {"$foo": 1}}}], vec![]).unwrap_err().code, 15952);
    assert_eq!(run(vec![doc! {"$group": {"x": {"$sum": 1}}}], vec![]).unwrap_err().code, 15955);
}

#[test]
fn leading_match_is_exposed() {
    let pipeline = Pipeline::parse(&[doc! {"$match": {"a": 1}}, doc! {"$limit": 1}], "test").unwrap();
    assert_eq!(pipeline.leading_match(), Some(&doc! {"a": 1}));
    let pipeline = Pipeline::parse(&[doc! {"$limit": 1}, doc! {"$match": {"a": 1}}], "test").unwrap();
    assert_eq!(pipeline.leading_match(), None);
}

#[test]
fn blocking_stages_enforce_the_memory_limit() {
    let input: Vec<Document> = (0..100).map(|i| doc! {"_id": i, "pad": "x".repeat(1000)}).collect();
    for stage in [doc! {"$sort": {"_id": -1}}, doc! {"$group": {"_id": "$_id", "p": {"$push": "$pad"}}}] {
        let pipeline = Pipeline::parse(std::slice::from_ref(&stage), "test").unwrap().with_memory_limit(50_000);
        let err = pipeline.execute(Box::new(input.clone().into_iter().map(Ok)), &Collections::default(), now()).unwrap_err();
        assert_eq!(err.code, 292, "{stage}");
    }
    // A sort followed by a limit keeps only the top documents, within the limit.
    let pipeline = Pipeline::parse(&[doc! {"$sort": {"_id": -1}}, doc! {"$limit": 3}], "test").unwrap().with_memory_limit(200_000);
    let out = pipeline.execute(Box::new(input.clone().into_iter().map(Ok)), &Collections::default(), now()).unwrap();
    assert_eq!(out.iter().map(|d| d.get_i32("_id").unwrap()).collect::<Vec<_>>(), vec![99, 98, 97]);
    // Even when fewer documents than the trim threshold pass the limit
    // (a few large ones): the top ones are kept, not a 292.
    let top_one = [doc! {"$sort": {"_id": -1}}, doc! {"$limit": 1}];
    let pipeline = Pipeline::parse(&top_one, "test").unwrap().with_memory_limit(5_000);
    let out = pipeline.execute(Box::new(input.into_iter().take(20).map(Ok)), &Collections::default(), now()).unwrap();
    assert_eq!(out.iter().map(|d| d.get_i32("_id").unwrap()).collect::<Vec<_>>(), vec![19]);
}

#[test]
fn errors_in_the_input_reach_the_caller() {
    let pipeline = Pipeline::parse(&[doc! {"$match": {"a": 1}}, doc! {"$skip": 5}], "test").unwrap();
    let input = vec![Err(QueryError::new(8, "storage failed"))];
    let err = pipeline.execute(Box::new(input.into_iter()), &Collections::default(), now()).unwrap_err();
    assert_eq!(err.code, 8);
}

#[test]
fn bucket_by_year_born() {
    let artists = vec![
        doc! {"_id": 1, "last_name": "Bernard", "first_name": "Emil", "year_born": 1868},
        doc! {"_id": 2, "last_name": "Rippl-Ronai", "first_name": "Joszef", "year_born": 1861},
        doc! {"_id": 3, "last_name": "Ostroumova", "first_name": "Anna", "year_born": 1871},
        doc! {"_id": 4, "last_name": "Van Gogh", "first_name": "Vincent", "year_born": 1853},
        doc! {"_id": 5, "last_name": "Maurer", "first_name": "Alfred", "year_born": 1868},
        doc! {"_id": 6, "last_name": "Munch", "first_name": "Edvard", "year_born": 1863},
        doc! {"_id": 7, "last_name": "Redon", "first_name": "Odilon", "year_born": 1840},
        doc! {"_id": 8, "last_name": "Diriks", "first_name": "Edvard", "year_born": 1855},
        doc! {"_id": 9, "last_name": "Nobody"},
    ];
    let out = run(
        vec![doc! {"$bucket": {
            "groupBy": "$year_born",
            "boundaries": [1840, 1850, 1860, 1870, 1880],
            "default": "Other",
            "output": {"count": {"$sum": 1}, "artists": {"$push": {"name": {"$concat": ["$first_name", " ", "$last_name"]}, "year_born": "$year_born"}}},
        }}],
        artists,
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 1840, "count": 1, "artists": [{"name": "Odilon Redon", "year_born": 1840}]},
        doc! {"_id": 1850, "count": 2, "artists": [{"name": "Vincent Van Gogh", "year_born": 1853}, {"name": "Edvard Diriks", "year_born": 1855}]},
        doc! {"_id": 1860, "count": 4, "artists": [
            {"name": "Emil Bernard", "year_born": 1868}, {"name": "Joszef Rippl-Ronai", "year_born": 1861},
            {"name": "Alfred Maurer", "year_born": 1868}, {"name": "Edvard Munch", "year_born": 1863}]},
        doc! {"_id": 1870, "count": 1, "artists": [{"name": "Anna Ostroumova", "year_born": 1871}]},
        doc! {"_id": "Other", "count": 1, "artists": [{"name": null}]},
    ]);
}

#[test]
fn bucket_errors() {
    let bad = |spec: Document| run(vec![doc! {"$bucket": spec}], vec![]).unwrap_err().code;
    assert_eq!(bad(doc! {"groupBy": "$x", "boundaries": [1]}), 40192);
    assert_eq!(bad(doc! {"groupBy": "$x", "boundaries": [2, 1]}), 40194);
    assert_eq!(bad(doc! {"groupBy": "$x", "boundaries": [1, "a"]}), 40193);
    assert_eq!(bad(doc! {"groupBy": "x", "boundaries": [1, 2]}), 40202);
    assert_eq!(bad(doc! {"groupBy": "$x", "boundaries": [1, 5], "default": 3}), 40199);
    let err = run(vec![doc! {"$bucket": {"groupBy": "$x", "boundaries": [1, 2]}}], vec![doc! {"x": 7}]).unwrap_err();
    assert_eq!(err.code, 40066);
}

#[test]
fn parsed_values_are_shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pipeline>();
    assert_send_sync::<slipstream_query::expr::Expr>();
}

/// MongoDB's jstests/aggregation/bugs/server6184.js: nested and dotted
/// fields with common prefixes; computed fields in specification order.
#[test]
fn project_mixes_nested_and_dotted_paths() {
    let input = vec![doc! {"a": "missing", "b": {"c": "bar", "a": "baz", "z": "not there"}}];
    for spec in [doc! {"_id": 0, "b": {"a": 1}, "b.c": 1}, doc! {"_id": 0, "b.c": 1, "b": {"a": 1}}] {
        assert_eq!(run(vec![doc! {"$project": spec}], input.clone()).unwrap(), vec![doc! {"b": {"c": "bar", "a": "baz"}}]);
    }
    let one = doc! {"$add": [1]};
    let spec = doc! {"_id": 0, "A.Z": one.clone(), "A": {"Y": one.clone(), "A": one.clone()}, "A.B": one};
    assert_eq!(run(vec![doc! {"$project": spec}], input).unwrap(), vec![doc! {"A": {"Z": 1, "Y": 1, "A": 1, "B": 1}}]);
}

#[test]
fn project_computed_sub_fields_replace_scalars_and_fill_arrays() {
    let input = vec![doc! {"_id": 1, "a": [1, {"b": 2}, [3, {"b": 4}]], "s": 7}];
    let out = run(vec![doc! {"$project": {"_id": 0, "a.c": {"$literal": 5}, "s.t": {"$literal": 6}}}], input.clone()).unwrap();
    assert_eq!(out, vec![doc! {"a": [{"c": 5}, {"c": 5}, [{"c": 5}, {"c": 5}]], "s": {"t": 6}}]);
    let out = run(vec![doc! {"$project": {"_id": 0, "a.b": 1}}], input).unwrap();
    assert_eq!(out, vec![doc! {"a": [{"b": 2}, [{"b": 4}]]}]);
}

#[test]
fn lookup_compares_regexes_by_equality_and_empty_arrays_as_null() {
    let mut source = Collections::default();
    let pattern = Bson::RegularExpression(bson::Regex { pattern: "^a".try_into().unwrap(), options: "".try_into().unwrap() });
    source.0.insert("f".into(), vec![
        doc! {"_id": 1, "v": "abc"},
        doc! {"_id": 2, "v": pattern.clone()},
        doc! {"_id": 3, "v": null},
        doc! {"_id": 4},
    ]);
    let input = vec![doc! {"_id": "r", "l": pattern}, doc! {"_id": "e", "l": []}];
    let out = run_with(
        &source,
        vec![
            doc! {"$lookup": {"from": "f", "localField": "l", "foreignField": "v", "as": "m"}},
            doc! {"$project": {"ids": "$m._id"}},
        ],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"_id": "r", "ids": [2]}, doc! {"_id": "e", "ids": [3, 4]}]);
}

fn game_scores() -> Vec<Document> {
    vec![
        doc! {"playerId": "PlayerA", "gameId": "G1", "score": 31},
        doc! {"playerId": "PlayerB", "gameId": "G1", "score": 33},
        doc! {"playerId": "PlayerC", "gameId": "G1", "score": 99},
        doc! {"playerId": "PlayerD", "gameId": "G1", "score": 1},
        doc! {"playerId": "PlayerA", "gameId": "G2", "score": 10},
        doc! {"playerId": "PlayerB", "gameId": "G2", "score": 14},
        doc! {"playerId": "PlayerC", "gameId": "G2", "score": 66},
        doc! {"playerId": "PlayerD", "gameId": "G2", "score": 80},
    ]
}

#[test]
fn top_and_bottom_accumulators() {
    let out = run(
        vec![doc! {"$group": {
            "_id": "$gameId",
            "top3": {"$topN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": 3}},
            "bottom3": {"$bottomN": {"output": ["$playerId", "$score"], "sortBy": {"score": -1}, "n": 3}},
            "top": {"$top": {"output": "$playerId", "sortBy": {"score": -1}}},
            "bottom": {"$bottom": {"output": "$playerId", "sortBy": {"score": -1}}},
        }}],
        game_scores(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": "G1", "top3": [["PlayerC", 99], ["PlayerB", 33], ["PlayerA", 31]],
              "bottom3": [["PlayerB", 33], ["PlayerA", 31], ["PlayerD", 1]], "top": "PlayerC", "bottom": "PlayerD"},
        doc! {"_id": "G2", "top3": [["PlayerD", 80], ["PlayerC", 66], ["PlayerB", 14]],
              "bottom3": [["PlayerC", 66], ["PlayerB", 14], ["PlayerA", 10]], "top": "PlayerD", "bottom": "PlayerA"},
    ]);
}

#[test]
fn first_last_max_min_n_accumulators() {
    let out = run(
        vec![doc! {"$group": {
            "_id": "$gameId",
            "first": {"$firstN": {"input": "$score", "n": 2}},
            "last": {"$lastN": {"input": "$score", "n": 2}},
            "max": {"$maxN": {"input": "$score", "n": 2}},
            "min": {"$minN": {"input": "$score", "n": {"$cond": [{"$eq": ["$gameId", "G2"]}, 1, 2]}}},
        }}],
        game_scores(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": "G1", "first": [31, 33], "last": [99, 1], "max": [99, 33], "min": [1, 31]},
        doc! {"_id": "G2", "first": [10, 14], "last": [66, 80], "max": [80, 66], "min": [10]},
    ]);
    let err = run(vec![doc! {"$group": {"_id": null, "x": {"$firstN": {"input": "$a", "n": 0}}}}], vec![doc! {}]).unwrap_err();
    assert_eq!(err.code, 5787908);
    let err = run(vec![doc! {"$group": {"_id": null, "x": {"$topN": {"output": "$a", "n": 2}}}}], vec![]).unwrap_err();
    assert_eq!(err.code, 5788604);
}

/// MongoDB's documented `$redact` example: keep the levels whose `tags`
/// intersect the user's access.
#[test]
fn redact_by_tags() {
    let input = vec![doc! {
        "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
        "subsections": [
            {"subtitle": "Section 1: Overview", "tags": ["SI", "G"], "content": "Section 1: This is the content of section 1."},
            {"subtitle": "Section 2: Analysis", "tags": ["STLW"], "content": "Section 2: This is the content of section 2."},
            {"subtitle": "Section 3: Budgeting", "tags": ["TK"], "content": {"text": "Section 3: This is the content of section 3.", "tags": ["HCS"]}},
        ],
    }];
    let out = run(
        vec![doc! {"$redact": {"$cond": {
            "if": {"$gt": [{"$size": {"$setIntersection": ["$tags", ["STLW", "G"]]}}, 0]},
            "then": "$$DESCEND",
            "else": "$$PRUNE",
        }}}],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![doc! {
        "_id": 1, "title": "123 Department Report", "tags": ["G", "STLW"], "year": 2014,
        "subsections": [
            {"subtitle": "Section 1: Overview", "tags": ["SI", "G"], "content": "Section 1: This is the content of section 1."},
            {"subtitle": "Section 2: Analysis", "tags": ["STLW"], "content": "Section 2: This is the content of section 2."},
        ],
    }]);
    let err = run(vec![doc! {"$redact": "nope"}], vec![doc! {}]).unwrap_err();
    assert_eq!(err.code, 17053);
}

/// MongoDB's documented `$graphLookup` example: the reporting hierarchy.
#[test]
fn graph_lookup_reporting_hierarchy() {
    let mut source = Collections::default();
    source.0.insert("employees".into(), vec![
        doc! {"_id": 1, "name": "Dev"},
        doc! {"_id": 2, "name": "Eliot", "reportsTo": "Dev"},
        doc! {"_id": 3, "name": "Ron", "reportsTo": "Eliot"},
        doc! {"_id": 4, "name": "Andrew", "reportsTo": "Eliot"},
        doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"},
        doc! {"_id": 6, "name": "Dan", "reportsTo": "Andrew"},
    ]);
    let input = vec![doc! {"_id": 5, "name": "Asya", "reportsTo": "Ron"}];
    let out = run_with(
        &source,
        vec![
            doc! {"$graphLookup": {"from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                "connectToField": "name", "as": "reportingHierarchy", "depthField": "depth"}},
            doc! {"$project": {"chain": "$reportingHierarchy.name", "depths": "$reportingHierarchy.depth"}},
        ],
        input.clone(),
    )
    .unwrap();
    // MongoDB leaves the order unspecified; Slipstream answers in search order.
    assert_eq!(out, vec![doc! {"_id": 5, "chain": ["Ron", "Eliot", "Dev"], "depths": [0i64, 1i64, 2i64]}]);
    let limited = run_with(
        &source,
        vec![
            doc! {"$graphLookup": {"from": "employees", "startWith": "$reportsTo", "connectFromField": "reportsTo",
                "connectToField": "name", "as": "h", "maxDepth": 0}},
            doc! {"$project": {"chain": "$h.name"}},
        ],
        input,
    )
    .unwrap();
    assert_eq!(limited, vec![doc! {"_id": 5, "chain": ["Ron"]}]);
}

#[test]
fn graph_lookup_stops_on_cycles() {
    let mut source = Collections::default();
    source.0.insert("g".into(), vec![doc! {"_id": "a", "next": "b"}, doc! {"_id": "b", "next": ["a", "c"]}, doc! {"_id": "c"}]);
    let out = run_with(
        &source,
        vec![doc! {"$graphLookup": {"from": "g", "startWith": "a", "connectFromField": "next", "connectToField": "_id", "as": "reach"}},
             doc! {"$project": {"_id": 0, "ids": "$reach._id"}}],
        vec![doc! {}],
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"ids": ["a", "b", "c"]}]);
}

#[test]
fn documents_is_a_first_stage_source() {
    let out = run(
        vec![doc! {"$documents": [{"x": 10}, {"x": 2}, {"x": 5}]}, doc! {"$sort": {"x": 1}}, doc! {"$limit": 2}],
        vec![doc! {"ignored": true}],
    )
    .unwrap();
    assert_eq!(out, vec![doc! {"x": 2}, doc! {"x": 5}]);
    assert_eq!(run(vec![doc! {"$limit": 1}, doc! {"$documents": []}], vec![]).unwrap_err().code, 40602);
    assert_eq!(run(vec![doc! {"$documents": [1]}], vec![]).unwrap_err().code, 5858203);
}

fn cake_sales() -> Vec<Document> {
    vec![
        doc! {"_id": 0, "type": "chocolate", "orderDate": date("2020-05-18T14:10:30Z"), "state": "CA", "price": 13, "quantity": 120},
        doc! {"_id": 1, "type": "chocolate", "orderDate": date("2021-03-20T11:30:05Z"), "state": "WA", "price": 14, "quantity": 140},
        doc! {"_id": 2, "type": "vanilla", "orderDate": date("2021-01-11T06:31:15Z"), "state": "CA", "price": 12, "quantity": 145},
        doc! {"_id": 3, "type": "vanilla", "orderDate": date("2020-02-08T13:13:23Z"), "state": "WA", "price": 13, "quantity": 104},
        doc! {"_id": 4, "type": "strawberry", "orderDate": date("2019-05-18T16:09:01Z"), "state": "CA", "price": 41, "quantity": 162},
        doc! {"_id": 5, "type": "strawberry", "orderDate": date("2019-01-08T06:12:03Z"), "state": "WA", "price": 43, "quantity": 134},
    ]
}

/// MongoDB's documented `$setWindowFields` examples (cumulative sum and
/// rank per state), plus a moving average and `$shift`.
#[test]
fn set_window_fields_documented_examples() {
    let out = run(
        vec![
            doc! {"$setWindowFields": {
                "partitionBy": "$state",
                "sortBy": {"orderDate": 1},
                "output": {
                    "cumulative": {"$sum": "$quantity", "window": {"documents": ["unbounded", "current"]}},
                    "moving": {"$avg": "$quantity", "window": {"documents": [-1, 0]}},
                    "total": {"$sum": "$quantity"},
                    "previous": {"$shift": {"output": "$_id", "by": -1, "default": "none"}},
                    "n": {"$documentNumber": {}},
                },
            }},
            doc! {"$project": {"state": 1, "cumulative": 1, "moving": 1, "total": 1, "previous": 1, "n": 1}},
        ],
        cake_sales(),
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"_id": 4, "state": "CA", "cumulative": 162, "moving": 162.0, "total": 427, "previous": "none", "n": 1},
        doc! {"_id": 0, "state": "CA", "cumulative": 282, "moving": 141.0, "total": 427, "previous": 4, "n": 2},
        doc! {"_id": 2, "state": "CA", "cumulative": 427, "moving": 132.5, "total": 427, "previous": 0, "n": 3},
        doc! {"_id": 5, "state": "WA", "cumulative": 134, "moving": 134.0, "total": 378, "previous": "none", "n": 1},
        doc! {"_id": 3, "state": "WA", "cumulative": 238, "moving": 119.0, "total": 378, "previous": 5, "n": 2},
        doc! {"_id": 1, "state": "WA", "cumulative": 378, "moving": 122.0, "total": 378, "previous": 3, "n": 3},
    ]);
    let ranked = run(
        vec![
            doc! {"$setWindowFields": {"partitionBy": "$state", "sortBy": {"quantity": -1}, "output": {"rank": {"$rank": {}}}}},
            doc! {"$project": {"rank": 1}},
        ],
        cake_sales(),
    )
    .unwrap();
    assert_eq!(ranked, vec![
        doc! {"_id": 4, "rank": 1}, doc! {"_id": 2, "rank": 2}, doc! {"_id": 0, "rank": 3},
        doc! {"_id": 1, "rank": 1}, doc! {"_id": 5, "rank": 2}, doc! {"_id": 3, "rank": 3},
    ]);
}

#[test]
fn set_window_fields_ranks_ties_and_refuses_range_windows() {
    let input: Vec<Document> = [5, 7, 7, 9].iter().enumerate().map(|(i, s)| doc! {"_id": i as i32, "s": s}).collect();
    let out = run(
        vec![
            doc! {"$setWindowFields": {"sortBy": {"s": 1}, "output": {"rank": {"$rank": {}}, "dense": {"$denseRank": {}}}}},
            doc! {"$project": {"_id": 0, "rank": 1, "dense": 1}},
        ],
        input,
    )
    .unwrap();
    assert_eq!(out, vec![
        doc! {"rank": 1, "dense": 1}, doc! {"rank": 2, "dense": 2}, doc! {"rank": 2, "dense": 2}, doc! {"rank": 4, "dense": 3},
    ]);
    let range = doc! {"$setWindowFields": {"sortBy": {"s": 1}, "output": {"x": {"$sum": "$s", "window": {"range": [-1, 1]}}}}};
    assert_eq!(run(vec![range], vec![]).unwrap_err().code, 115);
    let unsorted_rank = doc! {"$setWindowFields": {"output": {"r": {"$rank": {}}}}};
    assert_eq!(run(vec![unsorted_rank], vec![]).unwrap_err().code, 5371602);
    let derivative = doc! {"$setWindowFields": {"sortBy": {"s": 1}, "output": {"d": {"$derivative": {"input": "$s"}}}}};
    assert_eq!(run(vec![derivative], vec![]).unwrap_err().code, 115);
}

#[test]
fn decimal_sums_are_refused_rather_than_approximated() {
    let decimal: bson::Decimal128 = "1.1".parse().unwrap();
    let input = vec![doc! {"v": decimal}];
    let err = run(vec![doc! {"$group": {"_id": null, "s": {"$sum": "$v"}}}], input.clone()).unwrap_err();
    assert_eq!(err.code, 115);
    let err = run(vec![doc! {"$project": {"s": {"$sum": ["$v", 1]}}}], input).unwrap_err();
    assert_eq!(err.code, 115);
}
