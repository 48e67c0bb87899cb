//! Projection cases from MongoDB 7.0's "Project Fields to Return from
//! Query" page and the `$slice`, `$elemMatch` and `$` projection pages.

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;

fn project(spec: Document, doc: Document) -> Document {
    Projection::parse(&spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .apply(&doc, None)
        .unwrap()
}

fn inventory() -> Document {
    doc! {"_id": 1, "item": "journal", "status": "A", "size": {"h": 14, "w": 21, "uom": "cm"}, "instock": [{"warehouse": "A", "qty": 5}, {"warehouse": "C", "qty": 15}]}
}

#[test]
fn inclusion_keeps_id_by_default() {
    assert_eq!(
        project(doc! {"item": 1, "status": 1}, inventory()),
        doc! {"_id": 1, "item": "journal", "status": "A"}
    );
    assert_eq!(
        project(doc! {"item": 1, "_id": 0}, inventory()),
        doc! {"item": "journal"}
    );
    assert_eq!(project(doc! {"_id": 1}, inventory()), doc! {"_id": 1});
}

#[test]
fn inclusion_keeps_document_order() {
    assert_eq!(
        project(doc! {"status": true, "item": 1}, inventory()),
        doc! {"_id": 1, "item": "journal", "status": "A"}
    );
}

#[test]
fn exclusion_returns_all_other_fields() {
    assert_eq!(
        project(doc! {"status": 0, "instock": 0}, inventory()),
        doc! {"_id": 1, "item": "journal", "size": {"h": 14, "w": 21, "uom": "cm"}}
    );
    let mut without_id = inventory();
    without_id.remove("_id");
    assert_eq!(project(doc! {"_id": 0}, inventory()), without_id);
}

#[test]
fn embedded_fields_by_dotted_path_and_nested_form() {
    let expected = doc! {"_id": 1, "item": "journal", "status": "A", "size": {"uom": "cm"}};
    assert_eq!(
        project(doc! {"item": 1, "status": 1, "size.uom": 1}, inventory()),
        expected
    );
    assert_eq!(
        project(
            doc! {"item": 1, "status": 1, "size": {"uom": 1}},
            inventory()
        ),
        expected
    );
    assert_eq!(
        project(doc! {"size.uom": 0}, inventory())
            .get_document("size")
            .unwrap(),
        &doc! {"h": 14, "w": 21}
    );
}

#[test]
fn paths_through_arrays_project_each_element() {
    // docs: {"instock.qty": 1} returns instock: [{qty: 5}, {qty: 15}]; scalars in the array are dropped.
    assert_eq!(
        project(doc! {"instock.qty": 1, "_id": 0}, inventory()),
        doc! {"instock": [{"qty": 5}, {"qty": 15}]}
    );
    assert_eq!(
        project(
            doc! {"a.b": 1, "_id": 0},
            doc! {"a": [{"b": 1, "c": 2}, 5, {"c": 3}, [{"b": 4}]]}
        ),
        doc! {"a": [{"b": 1}, {}, [{"b": 4}]]}
    );
    assert_eq!(
        project(doc! {"a.b": 0}, doc! {"a": [{"b": 1, "c": 2}, 5]}),
        doc! {"a": [{"c": 2}, 5]}
    );
    // A scalar where the path continues is left out of an inclusion.
    assert_eq!(project(doc! {"a.b": 1, "_id": 0}, doc! {"a": 5}), doc! {});
}

#[test]
fn slice_alone_keeps_other_fields() {
    // docs "$slice (projection)": {comments: {$slice: 2}} returns all fields, comments limited.
    let d = doc! {"_id": 1, "title": "t", "comments": [1, 2, 3, 4]};
    assert_eq!(
        project(doc! {"comments": {"$slice": 2}}, d.clone()),
        doc! {"_id": 1, "title": "t", "comments": [1, 2]}
    );
    assert_eq!(
        project(doc! {"comments": {"$slice": -1}}, d.clone()),
        doc! {"_id": 1, "title": "t", "comments": [4]}
    );
    assert_eq!(
        project(doc! {"comments": {"$slice": [1, 2]}}, d.clone()),
        doc! {"_id": 1, "title": "t", "comments": [2, 3]}
    );
    assert_eq!(
        project(doc! {"comments": {"$slice": 1}, "title": 1}, d.clone()),
        doc! {"_id": 1, "title": "t", "comments": [1]}
    );
    assert_eq!(
        project(doc! {"title": {"$slice": 1}}, d),
        doc! {"_id": 1, "title": "t", "comments": [1, 2, 3, 4]}
    );
}

#[test]
fn elem_match_keeps_the_first_matching_element() {
    // docs "$elemMatch (projection)": returns _id and the first matching element only.
    let d = doc! {"_id": 1, "zipcode": "63109", "students": [{"name": "john", "school": 102}, {"name": "jess", "school": 102}, {"name": "jeff", "school": 108}]};
    assert_eq!(
        project(
            doc! {"students": {"$elemMatch": {"school": 102}}},
            d.clone()
        ),
        doc! {"_id": 1, "students": [{"name": "john", "school": 102}]}
    );
    assert_eq!(
        project(doc! {"students": {"$elemMatch": {"school": 999}}}, d),
        doc! {"_id": 1}
    );
    assert_eq!(
        Projection::parse(&doc! {"a.b": {"$elemMatch": {"x": 1}}})
            .unwrap_err()
            .code,
        31275
    );
}

#[test]
fn positional_projection_uses_the_query_match() {
    // docs "$ (projection)": find({grades: {$gte: 85}}, {"grades.$": 1}) returns the first matching grade.
    let d = doc! {"_id": 1, "semester": 1, "grades": [70, 87, 90]};
    let filter = Filter::parse(&doc! {"semester": 1, "grades": {"$gte": 85}}).unwrap();
    let details = filter.matches_with_details(&d);
    let projection = Projection::parse(&doc! {"grades.$": 1}).unwrap();
    assert_eq!(
        projection.apply(&d, Some(&details)).unwrap(),
        doc! {"_id": 1, "grades": [87]}
    );
    assert_eq!(projection.apply(&d, None).unwrap_err().code, 51246);
}

#[test]
fn computed_fields_use_expressions_and_literals() {
    // MongoDB 4.4+: find projections accept aggregation expressions.
    let d = doc! {"_id": 1, "a": 2, "b": {"c": 3}};
    assert_eq!(
        project(doc! {"x": "$b.c", "_id": 0}, d.clone()),
        doc! {"x": 3}
    );
    assert_eq!(
        project(doc! {"a": 1, "x": {"$literal": 1}}, d.clone()),
        doc! {"_id": 1, "a": 2, "x": 1}
    );
    assert_eq!(
        project(doc! {"x": "lit", "_id": 0}, d.clone()),
        doc! {"x": "lit"}
    );
    assert_eq!(project(doc! {"x": "$missing", "_id": 0}, d), doc! {});
}

#[test]
fn mixing_inclusion_and_exclusion_is_an_error() {
    assert_eq!(
        Projection::parse(&doc! {"a": 1, "b": 0}).unwrap_err().code,
        31254
    );
    assert_eq!(
        Projection::parse(&doc! {"a": 0, "b": 1}).unwrap_err().code,
        31253
    );
    assert_eq!(
        Projection::parse(&doc! {"a": 0, "b": "$x"})
            .unwrap_err()
            .code,
        31253
    );
    assert!(Projection::parse(&doc! {"a": 1, "_id": 0}).is_ok());
    assert!(Projection::parse(&doc! {"a": 0, "_id": 1}).is_ok());
    assert_eq!(Projection::parse(&doc! {"a": {}}).unwrap_err().code, 51270);
    assert_eq!(
        Projection::parse(&doc! {"a.$": 1, "b": {"$elemMatch": {"x": 1}}})
            .unwrap_err()
            .code,
        2
    );
    assert_eq!(
        Projection::parse(&doc! {"a.$": 1, "b.$": 1})
            .unwrap_err()
            .code,
        2
    );
    assert!(Projection::parse(&doc! {"a": {"$meta": "textScore"}})
        .unwrap_err()
        .message
        .contains("$meta"));
}

fn small_doc() -> impl Strategy<Value = Document> {
    let leaf = prop_oneof![
        (-3i32..3).prop_map(Bson::Int32),
        "[xy]".prop_map(Bson::String)
    ];
    let value = leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec((prop::sample::select(vec!["a", "b", "c"]), inner), 0..3)
                .prop_map(|f| Bson::Document(
                    f.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
        ]
    });
    prop::collection::vec((prop::sample::select(vec!["a", "b", "c"]), value), 0..4)
        .prop_map(|f| f.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Including a set of top-level fields and excluding the rest give the
    /// same document (MongoDB: the two forms are complements).
    #[test]
    fn inclusion_and_exclusion_of_top_level_fields_are_complements(doc in small_doc(), kept in 1u8..8) {
        // `{_id: 0}` alone is an exclusion projection, so keep at least one field (a nonzero bit mask).
        let keep: Vec<bool> = (0..3).map(|bit| kept & (1 << bit) != 0).collect();
        let names = ["a", "b", "c"];
        let mut include = doc! {"_id": 0};
        let mut exclude = doc! {"_id": 0};
        for (name, kept) in names.iter().zip(&keep) {
            if *kept { include.insert(*name, 1); } else { exclude.insert(*name, 0); }
        }
        let included = Projection::parse(&include).unwrap().apply(&doc, None).unwrap();
        let excluded = Projection::parse(&exclude).unwrap().apply(&doc, None).unwrap();
        prop_assert_eq!(included, excluded);
    }

    /// `{"a.b": 1}` then `{"a.b": 0}` partition the subfields of `a` that are documents.
    #[test]
    fn nested_inclusion_never_invents_values(doc in small_doc()) {
        let included = Projection::parse(&doc! {"a.b": 1, "_id": 0}).unwrap().apply(&doc, None).unwrap();
        // Every value that survives is found at the same path in the input.
        let filter = Filter::parse(&doc! {"a.b": {"$exists": true}}).unwrap();
        prop_assert_eq!(filter.matches(&included), filter.matches(&doc));
    }
}
