//! The planner's index bounds never lose a matching document: for random
//! documents, filters and indexes, the documents an index scan returns
//! (a key of the document, computed by `index_key::index_keys`, lies in a
//! plan interval), filtered, equal the documents a collection scan
//! matches. When a plan claims to provide the sort, the scan order must be
//! the sort order. Every index is also tried through `hint`.

use std::cmp::Ordering;
use std::ops::Bound;

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::filter::Filter;
use slipstream_query::index_key::{index_keys, KeyPattern};
use slipstream_query::planner::{plan, IndexCandidate, Plan};
use slipstream_query::sort::SortSpec;

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        16 => (0i32..2).prop_map(Bson::Int32),
        1 => prop::sample::select(vec![-0.5f64, 1.5, 2.0, f64::NAN]).prop_map(Bson::Double),
        1 => (0i64..3).prop_map(Bson::Int64),
        2 => prop::sample::select(vec!["", "a", "ab", "b"]).prop_map(|s| Bson::String(s.to_string())),
        1 => Just(Bson::Null),
        1 => any::<bool>().prop_map(Bson::Boolean),
        1 => prop::sample::select(vec![Bson::MinKey, Bson::MaxKey, Bson::Undefined]),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec((prop::sample::select(vec!["a", "b"]), inner), 0..3).prop_map(
                |f| Bson::Document(f.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            ),
        ]
    })
}

/// Values shaped like the paths the filters use (`a`, `a.b`): scalars,
/// arrays of scalars, `{b: ...}` documents and arrays of them, some empty.
fn shaped() -> impl Strategy<Value = Bson> {
    let sub = prop_oneof![
        2 => scalar().prop_map(|v| Bson::Document(doc! {"b": v})),
        2 => (scalar(), scalar()).prop_map(|(x, y)| Bson::Document(doc! {"b": x, "a": y})),
        1 => Just(Bson::Document(doc! {})),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(|vs| Bson::Document(doc! {"b": vs})),
        1 => scalar(),
    ];
    prop_oneof![
        3 => scalar(),
        2 => prop::collection::vec(scalar(), 0..4).prop_map(Bson::Array),
        2 => sub.clone(),
        2 => prop::collection::vec(sub, 0..3).prop_map(Bson::Array),
        1 => value(),
    ]
}

fn documents() -> impl Strategy<Value = Vec<Document>> {
    let field = prop_oneof![3 => Just("a"), 2 => Just("b"), 1 => Just("c")];
    prop::collection::vec(prop::collection::vec((field, shaped()), 0..3), 4..20).prop_map(|docs| {
        docs.into_iter()
            .enumerate()
            .map(|(i, fields)| {
                let mut d = doc! {"_id": i as i32};
                for (k, v) in fields {
                    d.insert(k, v);
                }
                d
            })
            .collect()
    })
}

fn path() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        6 => prop::sample::select(vec!["a", "a.b", "b", "a.a"]),
        1 => prop::sample::select(vec!["c", "_id", "a.0"]),
    ]
}

/// Mostly scalars, so that predicates often select something.
fn operand() -> impl Strategy<Value = Bson> {
    prop_oneof![4 => scalar(), 1 => value()]
}

fn predicate() -> impl Strategy<Value = Bson> {
    prop_oneof![
        3 => operand(),
        1 => Just(Bson::Null),
        3 => (prop::sample::select(vec!["$eq", "$gt", "$gte", "$lt", "$lte", "$ne"]), operand())
            .prop_map(|(op, v)| { let mut d = Document::new(); d.insert(op, v); Bson::Document(d) }),
        1 => prop::collection::vec(operand(), 0..3).prop_map(|vs| Bson::Document(doc! {"$in": vs})),
        1 => (prop::sample::select(vec!["^a", "b", "^", "^ab"]), prop::sample::select(vec!["", "i"]))
            .prop_map(|(p, o)| Bson::Document(doc! {"$regex": p, "$options": o})),
        1 => prop::sample::select(vec!["number", "string", "null", "array", "bool", "object", "minKey", "undefined"])
            .prop_map(|t| Bson::Document(doc! {"$type": t})),
        1 => any::<bool>().prop_map(|b| Bson::Document(doc! {"$exists": b})),
        1 => value().prop_map(|v| Bson::Document(doc! {"$elemMatch": {"$eq": v}})),
        1 => (scalar(), scalar()).prop_map(|(lo, hi)| Bson::Document(doc! {"$elemMatch": {"$gte": lo, "$lte": hi}})),
        1 => (operand(), operand()).prop_map(|(b, a)| Bson::Document(doc! {"$elemMatch": {"b": b, "a": {"$ne": a}}})),
        1 => (scalar(), scalar()).prop_map(|(lo, hi)| Bson::Document(doc! {"$gte": lo, "$lte": hi})),
    ]
}

fn filter() -> impl Strategy<Value = Document> {
    let clause = (path(), predicate())
        .prop_map(|(p, v)| {
            let mut d = Document::new();
            d.insert(p, v);
            d
        })
        .boxed();
    prop_oneof![
        3 => prop::collection::vec(clause.clone(), 1..4).prop_map(|cs| {
            let mut d = Document::new();
            for c in cs {
                for (k, v) in c {
                    d.insert(k, v);
                }
            }
            d
        }),
        1 => prop::collection::vec(clause.clone(), 1..3).prop_map(|cs| doc! {"$and": cs}),
        1 => prop::collection::vec(clause, 1..3).prop_map(|cs| doc! {"$or": cs}),
    ]
}

fn index_spec() -> impl Strategy<Value = (Document, bool)> {
    (
        prop::collection::vec((path(), any::<bool>()), 1..4),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(fields, sparse)| {
            let mut key = Document::new();
            for (p, descending) in fields {
                if !key.contains_key(p) {
                    key.insert(p, if descending { -1 } else { 1 });
                }
            }
            (key, sparse)
        })
}

fn sort_spec() -> impl Strategy<Value = Option<Document>> {
    prop::option::of(
        prop::collection::vec((path(), any::<bool>()), 1..3).prop_map(|fields| {
            let mut spec = Document::new();
            for (p, descending) in fields {
                if !spec.contains_key(p) {
                    spec.insert(p, if descending { -1 } else { 1 });
                }
            }
            spec
        }),
    )
}

fn in_interval(key: &[u8], interval: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> bool {
    let above = match &interval.0 {
        Bound::Unbounded => true,
        Bound::Included(low) => key >= low.as_slice(),
        Bound::Excluded(low) => key > low.as_slice(),
    };
    let below = match &interval.1 {
        Bound::Unbounded => true,
        Bound::Included(high) => key <= high.as_slice(),
        Bound::Excluded(high) => key < high.as_slice(),
    };
    above && below
}

/// The documents the plan's scan visits, in scan order, each once.
fn scan(plan: &Plan, index: &IndexCandidate, docs: &[Document]) -> Vec<Document> {
    let pattern = KeyPattern::parse(&index.key).unwrap();
    let mut entries: Vec<(Vec<u8>, usize)> = Vec::new();
    for (position, doc) in docs.iter().enumerate() {
        for key in index_keys(doc, &pattern, index.sparse).unwrap().keys {
            if plan.intervals.is_empty() || plan.intervals.iter().any(|i| in_interval(&key, i)) {
                entries.push((key, position));
            }
        }
    }
    entries.sort();
    if plan.reverse {
        entries.reverse();
    }
    let mut seen = vec![false; docs.len()];
    let mut out = Vec::new();
    for (_, position) in entries {
        if !seen[position] {
            seen[position] = true;
            out.push(docs[position].clone());
        }
    }
    out
}

fn check_plan(
    plan: &Plan,
    filter: &Filter,
    sort: Option<&SortSpec>,
    indexes: &[IndexCandidate],
    docs: &[Document],
) -> Result<(), TestCaseError> {
    let Some(name) = &plan.index else {
        return Ok(());
    };
    let index = indexes
        .iter()
        .find(|i| &i.name == name)
        .expect("plan names a candidate");
    for pair in plan.intervals.windows(2) {
        prop_assert!(
            matches!((&pair[0].1, &pair[1].0), (Bound::Excluded(a) | Bound::Included(a), Bound::Included(b) | Bound::Excluded(b)) if a <= b),
            "intervals not ascending: {:?}",
            plan.intervals
        );
    }
    let scanned: Vec<Document> = scan(plan, index, docs)
        .into_iter()
        .filter(|d| filter.matches(d))
        .collect();
    let mut scanned_ids: Vec<i32> = scanned.iter().map(|d| d.get_i32("_id").unwrap()).collect();
    let mut expected_ids: Vec<i32> = docs
        .iter()
        .filter(|d| filter.matches(d))
        .map(|d| d.get_i32("_id").unwrap())
        .collect();
    if plan.provides_sort {
        let sort = sort.expect("provides_sort without a sort");
        for pair in scanned.windows(2) {
            prop_assert_ne!(
                sort.compare(&pair[0], &pair[1]),
                Ordering::Greater,
                "scan order breaks the sort: {} before {}",
                pair[0],
                pair[1]
            );
        }
    }
    scanned_ids.sort();
    expected_ids.sort();
    if index.sparse && !index_is_safe_for_sparse(plan) {
        // A hinted sparse index may miss documents, as in MongoDB.
        prop_assert!(scanned_ids.iter().all(|id| expected_ids.contains(id)));
        return Ok(());
    }
    prop_assert_eq!(
        scanned_ids,
        expected_ids,
        "plan {} lost or invented documents",
        plan.explain
    );
    Ok(())
}

/// The plan chose the sparse index by itself (not through a hint).
fn index_is_safe_for_sparse(plan: &Plan) -> bool {
    plan.explain.get_str("hinted").is_err()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn index_scans_find_exactly_what_collection_scans_find(
        docs in documents(),
        filter_docs in prop::collection::vec(filter(), 1..8),
        specs in prop::collection::vec(index_spec(), 1..3),
        sort_doc in sort_spec(),
    ) {
        let mut indexes = vec![IndexCandidate { name: "_id_".into(), key: doc! {"_id": 1}, multikey: false, unique: true, sparse: false }];
        let mut docs = docs;
        for (n, (key, sparse)) in specs.into_iter().enumerate() {
            let pattern = KeyPattern::parse(&key).unwrap();
            // Documents with parallel arrays cannot be inserted.
            docs.retain(|d| index_keys(d, &pattern, sparse).is_ok());
            indexes.push(IndexCandidate { name: format!("ix{n}"), key, multikey: false, unique: false, sparse });
        }
        for index in &mut indexes {
            let pattern = KeyPattern::parse(&index.key).unwrap();
            index.multikey = docs.iter().any(|d| index_keys(d, &pattern, index.sparse).unwrap().multikey);
        }
        let sort = sort_doc.as_ref().map(|s| SortSpec::parse(s).unwrap());
        for filter_doc in &filter_docs {
            let filter = Filter::parse(filter_doc).map_err(|e| TestCaseError::fail(format!("{filter_doc}: {e}")))?;
            let chosen = plan(&filter, sort.as_ref(), &indexes, None).unwrap();
            check_plan(&chosen, &filter, sort.as_ref(), &indexes, &docs)?;
            for index in &indexes {
                let mut hinted = plan(&filter, sort.as_ref(), &indexes, Some(&Bson::String(index.name.clone()))).unwrap();
                hinted.explain.insert("hinted", "yes");
                check_plan(&hinted, &filter, sort.as_ref(), &indexes, &docs)?;
            }
        }
    }
}

// ---------------------------------------------------------------- examples

fn candidates() -> Vec<IndexCandidate> {
    vec![
        IndexCandidate {
            name: "_id_".into(),
            key: doc! {"_id": 1},
            multikey: false,
            unique: true,
            sparse: false,
        },
        IndexCandidate {
            name: "a_1".into(),
            key: doc! {"a": 1},
            multikey: false,
            unique: false,
            sparse: false,
        },
        IndexCandidate {
            name: "b_1_c_-1".into(),
            key: doc! {"b": 1, "c": -1},
            multikey: false,
            unique: false,
            sparse: false,
        },
        IndexCandidate {
            name: "s_1".into(),
            key: doc! {"s": 1},
            multikey: false,
            unique: false,
            sparse: true,
        },
    ]
}

fn chosen(filter: Document, sort: Option<Document>) -> Plan {
    let sort = sort.map(|s| SortSpec::parse(&s).unwrap());
    plan(
        &Filter::parse(&filter).unwrap(),
        sort.as_ref(),
        &candidates(),
        None,
    )
    .unwrap()
}

#[test]
fn equality_on_id_uses_the_record_table() {
    let p = chosen(doc! {"_id": 5}, None);
    assert_eq!(p.index.as_deref(), Some("_id_"));
    assert_eq!(p.intervals.len(), 1);
    let key = slipstream_query::index_key::record_key(&Bson::Int32(5));
    assert!(in_interval(&key, &p.intervals[0]));
    assert!(!in_interval(
        &slipstream_query::index_key::record_key(&Bson::Int32(6)),
        &p.intervals[0]
    ));
    assert_eq!(p.explain.get_str("stage").unwrap(), "FETCH");
    assert_eq!(
        p.explain
            .get_document("inputStage")
            .unwrap()
            .get_str("indexName")
            .unwrap(),
        "_id_"
    );
}

#[test]
fn unindexed_filters_scan_the_collection() {
    let p = chosen(doc! {"z": 1}, None);
    assert_eq!(p.index, None);
    assert_eq!(p.explain.get_str("stage").unwrap(), "COLLSCAN");
}

#[test]
fn compound_prefix_equality_then_range() {
    let p = chosen(doc! {"b": 1, "c": {"$gt": 5}}, None);
    assert_eq!(p.index.as_deref(), Some("b_1_c_-1"));
    assert_eq!(p.intervals.len(), 1);
    let bounds = p
        .explain
        .get_document("inputStage")
        .unwrap()
        .get_document("indexBounds")
        .unwrap();
    assert_eq!(
        bounds.get_array("b").unwrap(),
        &vec![Bson::String("[1, 1]".into())]
    );
}

#[test]
fn sort_only_use_of_an_index_and_reverse_walks() {
    // MongoDB uses an index to provide a sort even without a filter on it.
    let p = chosen(doc! {}, Some(doc! {"a": -1}));
    assert_eq!(p.index.as_deref(), Some("a_1"));
    assert!(p.intervals.is_empty() && p.reverse && p.provides_sort);
    // Equality on the prefix, sort on the next field, in the index's opposite directions.
    let p = chosen(doc! {"b": 2}, Some(doc! {"c": 1}));
    assert_eq!(p.index.as_deref(), Some("b_1_c_-1"));
    assert!(p.reverse && p.provides_sort);
    let p = chosen(doc! {}, Some(doc! {"b": 1, "c": 1}));
    assert!(!p.provides_sort);
}

#[test]
fn sparse_index_only_when_missing_fields_cannot_match() {
    // MongoDB docs "Sparse Indexes": a sparse index is not used for queries that would miss documents.
    assert_eq!(chosen(doc! {"s": 1}, None).index.as_deref(), Some("s_1"));
    assert_eq!(chosen(doc! {"s": null}, None).index, None);
    assert_eq!(chosen(doc! {"s": {"$ne": 1}}, None).index, None);
    assert_eq!(chosen(doc! {}, Some(doc! {"s": 1})).index, None);
}

#[test]
fn hints_choose_the_index_or_the_collection() {
    let f = Filter::parse(&doc! {"a": 1}).unwrap();
    let p = plan(
        &f,
        None,
        &candidates(),
        Some(&Bson::Document(doc! {"$natural": -1})),
    )
    .unwrap();
    assert!(p.index.is_none() && p.reverse);
    let p = plan(
        &f,
        None,
        &candidates(),
        Some(&Bson::Document(doc! {"b": 1, "c": -1})),
    )
    .unwrap();
    assert_eq!(p.index.as_deref(), Some("b_1_c_-1"));
    assert!(p.intervals.is_empty());
    assert_eq!(
        plan(&f, None, &candidates(), Some(&Bson::String("nope".into())))
            .unwrap_err()
            .code,
        2
    );
}

/// One non-unique index named "ix".
fn one_index(key: Document, multikey: bool, sparse: bool) -> Vec<IndexCandidate> {
    vec![IndexCandidate { name: "ix".into(), key, multikey, unique: false, sparse }]
}

/// Runs the same check as the property on one fixed case.
fn check_case(docs: Vec<Document>, filter: Document, key: Document, multikey: bool) {
    let filter = Filter::parse(&filter).unwrap();
    let indexes = vec![IndexCandidate {
        name: "ix".into(),
        key,
        multikey,
        unique: false,
        sparse: false,
    }];
    let chosen = plan(&filter, None, &indexes, Some(&Bson::String("ix".into()))).unwrap();
    check_plan(&chosen, &filter, None, &indexes, &docs).unwrap();
}

#[test]
fn null_on_a_dotted_multikey_path_finds_elements_missing_the_field() {
    // jstests/core/null2.js with an index on "a.b": {a: [{}, {b: 5}]} matches {"a.b": null}.
    check_case(
        vec![doc! {"_id": 0, "a": [{}, {"b": 1}]}],
        doc! {"a.b": null},
        doc! {"a.b": 1},
        true,
    );
}

#[test]
fn ranges_on_a_multikey_field_are_not_intersected() {
    // MongoDB docs "Multikey Index Bounds": {a: {$gte: 3, $lte: 5}} may be met by different elements.
    check_case(
        vec![doc! {"_id": 0, "a": [0, 10]}],
        doc! {"a": {"$gte": 3, "$lte": 5}},
        doc! {"a": 1},
        true,
    );
}

#[test]
fn missing_matching_predicates_do_not_bound_a_sparse_multikey_index() {
    // {a: [{a: 0}, {}]} has only the key 0 on a sparse "a.a", yet {} meets `$gte: null` and {a: 0}
    // meets `$lte: 0`: the scan must come from `$lte: 0`, not from `[undefined, null]`.
    let docs = vec![doc! {"_id": 0}, doc! {"_id": 1, "a": [{"b": 0, "a": 0}, {}]}];
    for filter in [
        doc! {"a.a": {"$gte": null, "$lte": 0}},
        doc! {"a.a": {"$exists": false, "$lte": 0}},
        doc! {"a.a": {"$ne": 0, "$lte": 0}},
        doc! {"$and": [{"a.a": null}, {"a.a": {"$gte": -5}}]},
    ] {
        let filter = Filter::parse(&filter).unwrap();
        let indexes = one_index(doc! {"a.a": 1}, true, true);
        let chosen = plan(&filter, None, &indexes, None).unwrap();
        assert_eq!(chosen.explain.get_str("stage").unwrap(), "FETCH", "{}", chosen.explain);
        check_plan(&chosen, &filter, None, &indexes, &docs).unwrap();
    }
}

#[test]
fn a_hinted_index_on_a_numeric_path_never_provides_the_sort() {
    // The sort reads "a.0" of [{b: 0}, {b: 0}] as the element {b: 0} and as the missing field "0"
    // of each element (null, which sorts first); the index holds only the key {b: 0}.
    let docs = vec![doc! {"_id": 0, "a": [0]}, doc! {"_id": 1, "a": [{"b": 0}, {"b": 0}]}];
    let filter = Filter::parse(&doc! {"_id": {"$exists": true}}).unwrap();
    let sort = SortSpec::parse(&doc! {"a.0": 1}).unwrap();
    let indexes = one_index(doc! {"a.0": 1}, false, false);
    let chosen = plan(&filter, Some(&sort), &indexes, Some(&Bson::String("ix".into()))).unwrap();
    assert!(!chosen.provides_sort, "{}", chosen.explain);
    check_plan(&chosen, &filter, Some(&sort), &indexes, &docs).unwrap();
}

#[test]
fn elem_match_bounds_intersect_on_one_element() {
    // MongoDB docs "Multikey Index Bounds": $elemMatch lets the bounds be intersected.
    let filter = Filter::parse(&doc! {"a": {"$elemMatch": {"$gte": 3, "$lte": 5}}}).unwrap();
    let indexes = vec![IndexCandidate {
        name: "a_1".into(),
        key: doc! {"a": 1},
        multikey: true,
        unique: false,
        sparse: false,
    }];
    let p = plan(&filter, None, &indexes, None).unwrap();
    assert_eq!(p.index.as_deref(), Some("a_1"));
    let bounds = p
        .explain
        .get_document("inputStage")
        .unwrap()
        .get_document("indexBounds")
        .unwrap();
    assert!(!bounds.get_array("a").unwrap().is_empty());
    check_case(
        vec![doc! {"_id": 0, "a": [0, 4]}, doc! {"_id": 1, "a": [0, 10]}],
        doc! {"a": {"$elemMatch": {"$gte": 3, "$lte": 5}}},
        doc! {"a": 1},
        true,
    );
    check_case(
        vec![doc! {"_id": 0, "a": [{"b": 1}, {"b": 2}]}],
        doc! {"a": {"$elemMatch": {"b": 2}}},
        doc! {"a.b": 1},
        true,
    );
}

#[test]
fn whole_array_equality_scans_for_the_first_element() {
    check_case(
        vec![doc! {"_id": 0, "a": [2, 1]}, doc! {"_id": 1, "a": []}],
        doc! {"a": {"$in": [[2, 1], []]}},
        doc! {"a": -1},
        true,
    );
}

#[test]
fn compound_fields_through_one_array_are_not_both_bounded() {
    // MongoDB docs "Multikey Index Bounds" (compound bounds): {"a.b": 1, "a.c": 4} may be met by two elements.
    let docs = vec![doc! {"_id": 0, "a": [{"b": 1, "c": 2}, {"b": 3, "c": 4}]}];
    check_case(
        docs.clone(),
        doc! {"a.b": 1, "a.c": 4},
        doc! {"a.b": 1, "a.c": 1},
        true,
    );
    check_case(
        docs,
        doc! {"a.b": 1, "a.c": {"$gt": 3}},
        doc! {"a.b": 1, "a.c": -1},
        true,
    );
}

#[test]
fn compound_array_and_its_subfield_are_not_both_bounded() {
    let docs = vec![doc! {"_id": 0, "a": [{"b": 1}, 2]}];
    check_case(docs, doc! {"a": 2, "a.b": 1}, doc! {"a": 1, "a.b": 1}, true);
}

fn tiny() -> impl Strategy<Value = Bson> {
    prop_oneof![4 => (0i32..3).prop_map(Bson::Int32), 1 => Just(Bson::Null)]
}

/// Arrays of small documents under `a`, so that compound indexes over
/// `a.b`, `a.c` and `a` are multikey through one shared array.
fn array_documents() -> impl Strategy<Value = Vec<Document>> {
    let element = prop_oneof![
        3 => (tiny(), tiny()).prop_map(|(b, c)| Bson::Document(doc! {"b": b, "c": c})),
        1 => tiny().prop_map(|b| Bson::Document(doc! {"b": b})),
        1 => tiny(),
    ];
    prop::collection::vec(prop_oneof![3 => prop::collection::vec(element.clone(), 0..4).prop_map(Bson::Array), 1 => element], 1..10).prop_map(|values| {
        values.into_iter().enumerate().map(|(i, a)| doc! {"_id": i as i32, "a": a}).collect()
    })
}

/// Two different fields of the index, in either order (drawn as a pair, so that no case is rejected).
const ORDERED_FIELD_PAIRS: [(&str, &str); 6] =
    [("a.b", "a.c"), ("a.c", "a.b"), ("a.b", "a"), ("a", "a.b"), ("a.c", "a"), ("a", "a.c")];

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn compound_multikey_bounds_never_lose_documents(
        docs in array_documents(),
        (first, second) in prop::sample::select(ORDERED_FIELD_PAIRS.to_vec()),
        descending in any::<bool>(),
        x in tiny(),
        y in tiny(),
        op in prop::sample::select(vec!["$eq", "$gte", "$lte", "$gt", "$lt"]),
    ) {
        let mut key = doc! {first: 1};
        key.insert(second, if descending { -1 } else { 1 });
        let mut filter = doc! {first: x};
        filter.insert(second, doc! {op: y});
        let pattern = KeyPattern::parse(&key).unwrap();
        let multikey = docs.iter().any(|d| index_keys(d, &pattern, false).map(|k| k.multikey).unwrap_or(false));
        let docs: Vec<Document> = docs.into_iter().filter(|d| index_keys(d, &pattern, false).is_ok()).collect();
        let filter = Filter::parse(&filter).unwrap();
        let indexes = vec![IndexCandidate { name: "ix".into(), key, multikey, unique: false, sparse: false }];
        let chosen = plan(&filter, None, &indexes, None).unwrap();
        check_plan(&chosen, &filter, None, &indexes, &docs)?;
    }
}

#[test]
fn or_of_bounded_branches_unions_one_index() {
    let p = chosen(doc! {"$or": [{"a": 1}, {"a": {"$gt": 5}}]}, None);
    assert_eq!(p.index.as_deref(), Some("a_1"));
    assert_eq!(p.intervals.len(), 2);
    assert!(!p.provides_sort);
    assert_eq!(chosen(doc! {"$or": [{"a": 1}, {"z": 1}]}, None).index, None);
    assert_eq!(
        chosen(doc! {"$or": [{"s": 1}, {"s": null}]}, None).index,
        None
    );
}

#[test]
fn comparisons_with_min_and_max_key_keep_arrays_of_them() {
    // MinKey and MaxKey escape type bracketing: {b: {$gt: MinKey}} matches
    // the whole array [MinKey], whose only index key is MinKey (the
    // shrunk case saved in planner_equivalence.proptest-regressions).
    check_case(
        vec![doc! {"_id": 0, "b": [Bson::MinKey]}, doc! {"_id": 1}],
        doc! {"b": {"$gt": Bson::MinKey}},
        doc! {"b": 1},
        true,
    );
    check_case(
        vec![doc! {"_id": 0, "b": [Bson::MaxKey]}, doc! {"_id": 1, "b": 2}],
        doc! {"b": {"$lt": Bson::MaxKey}},
        doc! {"b": -1},
        true,
    );
}
