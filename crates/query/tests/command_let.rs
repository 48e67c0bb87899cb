//! A command's `let` option (MongoDB 5.0+ find, aggregate, update, delete,
//! findAndModify): constants evaluated once and seen as `$$name` by the
//! filter's `$expr`, pipeline-style updates and aggregation stages. Cases
//! follow jstests/core/command_let_variables.js and MongoDB 7.0's
//! `Variables::seedVariablesWithLetParameters`.

use std::collections::HashMap;

use bson::{doc, Bson, DateTime, Document};
use slipstream_query::aggregate::{CollectionSource, Pipeline};
use slipstream_query::expr::Variables;
use slipstream_query::filter::Filter;
use slipstream_query::update::{Update, UpdateContext};
use slipstream_query::QueryError;

fn now() -> DateTime {
    DateTime::from_millis(1_700_000_000_000)
}

fn vars(let_doc: Document) -> Variables {
    Variables::with_let(&let_doc, now()).unwrap()
}

fn let_error(let_doc: Document) -> i32 {
    Variables::with_let(&let_doc, now()).unwrap_err().code
}

#[derive(Default)]
struct Collections(HashMap<String, Vec<Document>>);

impl CollectionSource for Collections {
    fn scan(&self, _db: &str, collection: &str) -> Result<Vec<Document>, QueryError> {
        Ok(self.0.get(collection).cloned().unwrap_or_default())
    }
}

#[test]
fn let_values_are_constants_evaluated_once() {
    let v = vars(doc! {
        "target": {"$add": [2, 3]},
        "when": "$$NOW",
        "twice": {"$multiply": ["$$target", 2]},
        "shape": {"a": "$$target", "b": [1, "$$target"]},
        "text": {"$literal": "$notAFieldPath"},
    });
    let filter = Filter::parse(&doc! {"$expr": {"$and": [
        {"$eq": ["$a", "$$target"]},
        {"$eq": ["$t", "$$when"]},
        {"$eq": ["$d", "$$twice"]},
        {"$eq": ["$s", "$$shape"]},
        {"$eq": ["$x", "$$text"]},
    ]}})
    .unwrap();
    let matching = doc! {"a": 5, "t": now(), "d": 10, "s": {"a": 5, "b": [1, 5]}, "x": "$notAFieldPath"};
    assert!(filter.matches_with_variables(&matching, &v).unwrap().matched);
    let mut other = matching.clone();
    other.insert("a", 6);
    assert!(!filter.matches_with_variables(&other, &v).unwrap().matched);
}

#[test]
fn invalid_let_parameters_are_refused_with_mongodb_codes() {
    // User variable names start with a lowercase letter or a non-ASCII character.
    assert_eq!(let_error(doc! {"Upper": 1}), 9);
    assert_eq!(let_error(doc! {"_x": 1}), 9);
    assert_eq!(let_error(doc! {"a-b": 1}), 9);
    assert!(Variables::with_let(&doc! {"é": 1}, now()).is_ok());
    // System constants may only be set by internal clients; other
    // upper-case names are invalid user variable names.
    assert_eq!(let_error(doc! {"NOW": 1}), 4738901);
    assert_eq!(let_error(doc! {"CLUSTER_TIME": 1}), 4738901);
    assert_eq!(let_error(doc! {"ROOT": 1}), 9);
    assert_eq!(let_error(doc! {"": 1}), 9);
    // Let expressions run before any document is read.
    assert_eq!(let_error(doc! {"x": "$a"}), 4890500);
    assert_eq!(let_error(doc! {"x": {"$add": ["$a", 1]}}), 4890500);
    assert_eq!(let_error(doc! {"x": "$$ROOT"}), 4890500);
    assert_eq!(let_error(doc! {"x": "$$CURRENT.a"}), 4890500);
    // A later parameter cannot see one that comes after it.
    assert_eq!(let_error(doc! {"x": "$$y", "y": 1}), 17276);
    // Evaluation errors surface.
    assert_eq!(let_error(doc! {"x": {"$divide": [1, 0]}}), 2);
}

#[test]
fn find_filters_see_let_variables_and_now_and_report_errors() {
    let v = vars(doc! {"limit": 3});
    let filter = Filter::parse(&doc! {"b": 1, "$expr": {"$lt": ["$a", "$$limit"]}}).unwrap();
    assert!(filter.matches_with_variables(&doc! {"a": 2, "b": 1}, &v).unwrap().matched);
    assert!(!filter.matches_with_variables(&doc! {"a": 4, "b": 1}, &v).unwrap().matched);
    // `$$NOW` is set even without `let`.
    let empty = vars(doc! {});
    let recent = Filter::parse(&doc! {"$expr": {"$lt": ["$t", "$$NOW"]}}).unwrap();
    assert!(recent.matches_with_variables(&doc! {"t": DateTime::from_millis(0)}, &empty).unwrap().matched);
    // Nested under $or too.
    let nested = Filter::parse(&doc! {"$or": [{"z": 1}, {"$expr": {"$eq": ["$a", "$$limit"]}}]}).unwrap();
    assert!(nested.matches_with_variables(&doc! {"a": 3}, &v).unwrap().matched);
    // An undefined variable or a failing expression fails the command.
    assert_eq!(nested.matches_with_variables(&doc! {"a": 3}, &empty).unwrap_err().code, 17276);
    let divide = Filter::parse(&doc! {"$expr": {"$divide": ["$a", "$b"]}}).unwrap();
    assert_eq!(divide.matches_with_variables(&doc! {"a": 1, "b": 0}, &empty).unwrap_err().code, 2);
    // The older entry points keep their behaviour: no match, no error.
    assert!(!divide.matches(&doc! {"a": 1, "b": 0}));
    assert!(!nested.matches(&doc! {"a": 3}));
}

#[test]
fn match_details_keep_the_positional_element() {
    let v = vars(doc! {"x": 1});
    let filter = Filter::parse(&doc! {"arr": 7, "$expr": {"$eq": ["$x", "$$x"]}}).unwrap();
    let details = filter.matches_with_variables(&doc! {"arr": [5, 7], "x": 1}, &v).unwrap();
    assert!(details.matched);
    assert_eq!(details.array_position, Some(1));
}

#[test]
fn aggregation_stages_and_sub_pipelines_see_let_variables() {
    let v = vars(doc! {"bonus": 10, "name": "b"});
    let mut collections = Collections::default();
    collections.0.insert("other".into(), vec![doc! {"_id": 1, "n": "a"}, doc! {"_id": 2, "n": "b"}]);
    let pipeline = Pipeline::parse(
        &[
            doc! {"$match": {"$expr": {"$gt": ["$v", 0]}}},
            doc! {"$addFields": {"total": {"$add": ["$v", "$$bonus"]}}},
            doc! {"$lookup": {"from": "other", "pipeline": [{"$match": {"$expr": {"$eq": ["$n", "$$name"]}}}], "as": "found"}},
            doc! {"$facet": {"f": [{"$project": {"_id": 0, "b": "$$bonus"}}]}},
        ],
        "test",
    )
    .unwrap();
    let input = vec![doc! {"_id": 1, "v": 1}, doc! {"_id": 2, "v": 0}];
    let out = pipeline.execute_with_variables(Box::new(input.clone().into_iter().map(Ok)), &collections, &v).unwrap();
    assert_eq!(out, vec![doc! {"f": [{"b": 10}]}]);
    let without_facet = Pipeline::parse(
        &[
            doc! {"$addFields": {"total": {"$add": ["$v", "$$bonus"]}}},
            doc! {"$lookup": {"from": "other", "pipeline": [{"$match": {"$expr": {"$eq": ["$n", "$$name"]}}}], "as": "found"}},
        ],
        "test",
    )
    .unwrap();
    let out = without_facet
        .execute_with_variables(Box::new(input[..1].iter().cloned().map(Ok)), &collections, &v)
        .unwrap();
    assert_eq!(out, vec![doc! {"_id": 1, "v": 1, "total": 11, "found": [{"_id": 2, "n": "b"}]}]);
    // Without the variables the same pipeline names an undefined one.
    let err = without_facet.execute(Box::new(input.into_iter().map(Ok)), &collections, now()).unwrap_err();
    assert_eq!(err.code, 17276);
}

fn ctx() -> UpdateContext {
    UpdateContext { positional: None, now: DateTime::from_millis(42), is_upsert_insert: false }
}

#[test]
fn pipeline_updates_see_let_variables() {
    let update = Update::parse(&Bson::Array(vec![Bson::Document(doc! {"$set": {"b": "$$x", "c": {"$add": ["$a", "$$x"]}}})]), None).unwrap();
    let v = vars(doc! {"x": 5});
    let out = update.apply_with_variables(&doc! {"_id": 1, "a": 1}, &ctx(), &v).unwrap();
    assert_eq!(out.document, doc! {"_id": 1, "a": 1, "b": 5, "c": 6});
    assert!(out.modified);
    // Without them the variable is undefined.
    assert_eq!(update.apply(&doc! {"_id": 1, "a": 1}, &ctx()).unwrap_err().code, 17276);
}

#[test]
fn pipeline_updates_take_now_from_the_variables_or_the_context() {
    let update = Update::parse(&Bson::Array(vec![Bson::Document(doc! {"$set": {"t": "$$NOW"}})]), None).unwrap();
    let with_now = update.apply_with_variables(&doc! {"_id": 1}, &ctx(), &vars(doc! {})).unwrap();
    assert_eq!(with_now.document, doc! {"_id": 1, "t": now()});
    let from_ctx = update.apply_with_variables(&doc! {"_id": 1}, &ctx(), &Variables::empty()).unwrap();
    assert_eq!(from_ctx.document, doc! {"_id": 1, "t": DateTime::from_millis(42)});
    assert_eq!(update.apply(&doc! {"_id": 1}, &ctx()).unwrap().document, from_ctx.document);
}

#[test]
fn operator_updates_are_unaffected_by_variables() {
    let update = Update::parse(&Bson::Document(doc! {"$set": {"b": "$$x"}}), None).unwrap();
    let out = update.apply_with_variables(&doc! {"_id": 1}, &ctx(), &vars(doc! {"x": 5})).unwrap();
    // `$set` stores its operand as a literal, as in MongoDB.
    assert_eq!(out.document, doc! {"_id": 1, "b": "$$x"});
}

#[test]
fn find_projections_see_let_variables() {
    use slipstream_query::projection::Projection;
    let projection = Projection::parse(&doc! {"_id": 0, "total": {"$add": ["$a", "$$bonus"]}, "at": "$$NOW"}).unwrap();
    let out = projection.apply_with_variables(&doc! {"_id": 1, "a": 2}, None, &vars(doc! {"bonus": 3})).unwrap();
    assert_eq!(out, doc! {"total": 5, "at": now()});
    assert_eq!(projection.apply(&doc! {"_id": 1, "a": 2}, None).unwrap_err().code, 17276);
}
