//! Nesting no single input spells out (issue 6): long dotted paths, loops
//! and stage after stage that wrap a value deeper, sub-pipelines within
//! sub-pipelines. Each hits a named limit with MongoDB's error instead of
//! a walk deeper than the stack can hold.

use bson::{doc, Bson, DateTime, Document};
use slipstream_query::aggregate::{CollectionSource, Pipeline, ACTIVE_STAGES_MAX};
use slipstream_query::depth::{BSON_DEPTH_MAX, FIELD_PATH_PARTS_MAX};
use slipstream_query::expr::{Expr, Variables};
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;
use slipstream_query::sort::SortSpec;
use slipstream_query::update::{Update, UpdateContext};
use slipstream_query::validate::STORED_DEPTH_MAX;
use slipstream_query::QueryError;

/// One collection `c` holding `{_id: 1, x: 1}`.
struct OneCollection;

impl CollectionSource for OneCollection {
    fn scan(&self, _db: &str, _collection: &str) -> Result<Vec<Document>, QueryError> {
        Ok(vec![doc! {"_id": 1, "x": 1}])
    }
}

fn run(stages: Vec<Document>) -> Result<Vec<Document>, QueryError> {
    let pipeline = Pipeline::parse(&stages, "test")?;
    pipeline.execute(Box::new(std::iter::once(Ok(doc! {"_id": 1, "x": 1}))), &OneCollection, DateTime::from_millis(0))
}

fn path(parts: usize) -> String {
    vec!["a"; parts].join(".")
}

fn overflow(result: Result<impl std::fmt::Debug, QueryError>, message: &str) {
    let error = result.expect_err("refused");
    assert_eq!((error.code, error.message.as_str()), (15, message));
}

#[test]
fn field_paths_longer_than_maxbsondepth_are_refused_everywhere() {
    let longest = path(FIELD_PATH_PARTS_MAX);
    let too_long = path(FIELD_PATH_PARTS_MAX + 1);
    let too_long_value = Bson::String(format!("${too_long}"));
    // Aggregation expressions and stage arguments.
    Expr::parse(&Bson::String(format!("${longest}"))).unwrap();
    overflow(Expr::parse(&too_long_value), "FieldPath is too long");
    overflow(Expr::parse(&Bson::String(format!("$$ROOT.{too_long}"))), "FieldPath is too long");
    run(vec![doc! {"$addFields": {longest.clone(): 1}}]).unwrap();
    overflow(run(vec![doc! {"$addFields": {too_long.clone(): 1}}]), "FieldPath is too long");
    overflow(run(vec![doc! {"$project": {too_long.clone(): 1}}]), "FieldPath is too long");
    overflow(run(vec![doc! {"$unset": too_long.clone()}]), "FieldPath is too long");
    overflow(run(vec![doc! {"$unwind": too_long_value.clone()}]), "FieldPath is too long");
    overflow(
        run(vec![doc! {"$lookup": {"from": "c", "localField": "x", "foreignField": "x", "as": too_long.clone()}}]),
        "FieldPath is too long",
    );
    overflow(run(vec![doc! {"$sort": {too_long.clone(): 1}}]), "FieldPath is too long");
    // A nested specification spells one path over several levels.
    let mut nested = doc! {"a": 1};
    for _ in 0..FIELD_PATH_PARTS_MAX {
        nested = doc! {"a": nested};
    }
    overflow(run(vec![doc! {"$project": nested.clone()}]), "FieldPath is too long");
    // find projections and sorts, update paths.
    overflow(Projection::parse(&doc! {too_long.clone(): 1}), "FieldPath is too long");
    overflow(Projection::parse(&nested), "FieldPath is too long");
    overflow(SortSpec::parse(&doc! {too_long.clone(): 1}), "FieldPath is too long");
    overflow(Update::parse(&Bson::Document(doc! {"$set": {too_long.clone(): 1}}), None), "FieldPath is too long");
    overflow(Update::parse(&Bson::Document(doc! {"$rename": {"x": too_long.clone()}}), None), "FieldPath is too long");
    // A filter's path may not be longer than any stored document is deep.
    Filter::parse(&doc! {path(STORED_DEPTH_MAX): 1}).unwrap();
    let error = Filter::parse(&doc! {path(STORED_DEPTH_MAX + 1): 1}).unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (5729100, "FieldPath is too long"));
}

#[test]
fn reduce_cannot_wrap_its_value_past_maxbsondepth() {
    let reduce = |rounds: i32| {
        Expr::parse(&Bson::Document(doc! {"$reduce": {
            "input": {"$range": [0, rounds]}, "initialValue": {}, "in": {"a": "$$value"},
        }}))
        .unwrap()
        .evaluate(&doc! {}, &Variables::empty())
    };
    // The result sits at level 1 of whatever holds it: BSON_DEPTH_MAX
    // levels of documents, the innermost one empty.
    reduce(BSON_DEPTH_MAX as i32 - 1).unwrap();
    overflow(reduce(BSON_DEPTH_MAX as i32), "$reduce accumulated value exceeded max allowable BSON depth");
    overflow(reduce(100_000), "$reduce accumulated value exceeded max allowable BSON depth");
}

#[test]
fn stage_after_stage_cannot_build_past_maxbsondepth() {
    let too_deep = "cannot convert document to BSON because it exceeds the limit of 200 levels of nesting";
    // Each stage wraps `x` one level deeper.
    let wrap = doc! {"$addFields": {"x": {"a": "$x"}}};
    run(vec![wrap.clone(); BSON_DEPTH_MAX]).unwrap();
    overflow(run(vec![wrap; BSON_DEPTH_MAX + 1]), too_deep);
    // Each `$group` pushes the documents one array and one document deeper.
    let push = doc! {"$group": {"_id": null, "x": {"$push": "$$ROOT"}}};
    overflow(run(vec![push; BSON_DEPTH_MAX]), too_deep);
    // `$lookup` embeds its own input, and `$replaceRoot` another level.
    let embed = doc! {"$lookup": {"from": "c", "let": {"r": "$$ROOT"}, "as": "j",
    "pipeline": [{"$replaceRoot": {"newRoot": {"r": "$$r"}}}]}};
    overflow(run(vec![embed; BSON_DEPTH_MAX]), too_deep);
}

#[test]
fn update_results_deeper_than_storage_allows_are_refused_before_anything_walks_them() {
    let mut value = Bson::Int32(1);
    for _ in 0..STORED_DEPTH_MAX {
        value = Bson::Document(doc! {"a": value});
    }
    let update = Update::parse(&Bson::Document(doc! {"$set": {"deep": value}}), None).unwrap();
    let context = UpdateContext { positional: None, now: DateTime::from_millis(0), is_upsert_insert: false };
    overflow(update.apply(&doc! {"_id": 1}, &context), "Document exceeds maximum nesting depth of 100");
    // A dotted path creates its levels too: one of 100 components makes
    // 99 documents below the top level, 100 levels in all.
    let update = Update::parse(&Bson::Document(doc! {"$set": {path(STORED_DEPTH_MAX + 1): 1}}), None).unwrap();
    overflow(update.apply(&doc! {"_id": 1}, &context), "Document exceeds maximum nesting depth of 100");
    let update = Update::parse(&Bson::Document(doc! {"$set": {path(STORED_DEPTH_MAX): 1}}), None).unwrap();
    update.apply(&doc! {"_id": 1}, &context).unwrap();
}

/// A pipeline of `width` stages whose first is a `$lookup` running `inner`.
fn lookup_around(inner: Vec<Bson>, width: usize) -> Vec<Bson> {
    let mut stages = vec![Bson::Document(doc! {"$lookup": {"from": "c", "as": "j", "pipeline": inner}})];
    stages.extend(std::iter::repeat_n(Bson::Document(doc! {"$match": {}}), width - 1));
    stages
}

fn documents(stages: Vec<Bson>) -> Vec<Document> {
    stages.into_iter().map(|stage| stage.as_document().cloned().unwrap()).collect()
}

#[test]
fn stages_running_nested_at_once_are_bounded() {
    // One pipeline of the longest length with a sub-pipeline of the same:
    // every stage of both chains is on the stack while the inner one runs.
    let half = ACTIVE_STAGES_MAX / 2;
    let inner = vec![Bson::Document(doc! {"$match": {}}); half];
    run(documents(lookup_around(inner.clone(), half))).unwrap();
    // One level more does not fit, however few stages each level has.
    let nested = lookup_around(lookup_around(inner, half - 1), 2);
    let error = run(documents(nested)).unwrap_err();
    assert_eq!(error.code, 232, "{}", error.message);
    // Sub-pipelines may nest 20 deep, as in MongoDB.
    let mut pipeline = vec![Bson::Document(doc! {"$match": {}})];
    for _ in 0..20 {
        pipeline = lookup_around(pipeline, 1);
    }
    run(documents(pipeline.clone())).unwrap();
    let error = run(documents(lookup_around(pipeline, 1))).unwrap_err();
    assert_eq!(
        (error.code, error.message.as_str()),
        (232, "Maximum number of nested sub-pipelines exceeded. Limit is 20")
    );
}
