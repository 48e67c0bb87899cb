//! The oplog form of an update must reproduce the new document byte for
//! byte, be idempotent (replaying it gives the same document, seed 000
//! 4.2), and never log a non-idempotent operator.

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::update::{apply_oplog_update, oplog_update, Update, UpdateContext};

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-2i32..3).prop_map(Bson::Int32),
        (-2i64..3).prop_map(Bson::Int64),
        (-2i32..3).prop_map(|x| Bson::Double(f64::from(x))),
        prop_oneof![Just("x"), Just("y")].prop_map(|s| Bson::String(s.into())),
        Just(Bson::Null),
        Just(Bson::Boolean(true)),
    ]
}

fn plain_key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(str::to_string)
}

fn key() -> impl Strategy<Value = String> {
    // A few awkward names: numeric, dotted and dollar-prefixed names
    // cannot be addressed by a dotted $set path.
    prop_oneof![
        8 => plain_key(),
        1 => Just("0".to_string()),
        1 => Just("e.f".to_string()),
        1 => Just("$g".to_string()),
    ]
}

fn plain_value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec((plain_key(), inner), 0..4).prop_map(|fields| {
                let mut d = Document::new();
                for (k, v) in fields {
                    d.insert(k, v);
                }
                Bson::Document(d)
            }),
        ]
    })
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec((key(), inner), 0..4).prop_map(|fields| {
                let mut d = Document::new();
                for (k, v) in fields {
                    d.insert(k, v);
                }
                Bson::Document(d)
            }),
        ]
    })
}

fn document() -> impl Strategy<Value = Document> {
    prop::collection::vec((key(), value()), 0..5).prop_map(|fields| {
        let mut d = doc! {"_id": 1};
        for (k, v) in fields {
            d.insert(k, v);
        }
        d
    })
}

/// One edit of a document, applied at some depth of nested documents.
#[derive(Clone, Debug)]
enum Edit {
    Set(Vec<String>, Bson),
    Remove(Vec<String>),
    MoveToEnd(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let path = || prop::collection::vec(key(), 1..3);
    prop_oneof![
        (path(), value()).prop_map(|(p, v)| Edit::Set(p, v)),
        path().prop_map(Edit::Remove),
        key().prop_map(Edit::MoveToEnd),
    ]
}

fn apply_edit(doc: &mut Document, edit: &Edit) {
    match edit {
        Edit::Set(path, value) => {
            let (last, parents) = path.split_last().unwrap();
            let mut node = doc;
            for part in parents {
                if !matches!(node.get(part), Some(Bson::Document(_))) {
                    node.insert(part.clone(), Document::new());
                }
                node = match node.get_mut(part) {
                    Some(Bson::Document(d)) => d,
                    _ => unreachable!(),
                };
            }
            node.insert(last.clone(), value.clone());
        }
        Edit::Remove(path) => {
            let (last, parents) = path.split_last().unwrap();
            let mut node = doc;
            for part in parents {
                node = match node.get_mut(part) {
                    Some(Bson::Document(d)) => d,
                    _ => return,
                };
            }
            node.remove(last);
        }
        Edit::MoveToEnd(key) => {
            if let Some(v) = doc.remove(key) {
                doc.insert(key.clone(), v);
            }
        }
    }
}

fn bytes(d: &Document) -> Vec<u8> {
    d.to_vec().unwrap()
}

fn check_form(old: &Document, new: &Document) -> Result<(), TestCaseError> {
    let form = oplog_update(old, new);
    let once = apply_oplog_update(old, &form).unwrap();
    prop_assert_eq!(
        bytes(&once),
        bytes(new),
        "form {} from {} to {}",
        form,
        old,
        new
    );
    let twice = apply_oplog_update(&once, &form).unwrap();
    prop_assert_eq!(bytes(&twice), bytes(new), "form {} is not idempotent", form);
    // Only $set/$unset, or a whole document.
    if form.keys().next().is_some_and(|k| k.starts_with('$')) {
        prop_assert!(
            form.keys().all(|k| k == "$set" || k == "$unset"),
            "form {}",
            form
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn edited_documents_round_trip(old in document(), edits in prop::collection::vec(edit(), 0..4)) {
        let mut new = old.clone();
        for e in &edits {
            apply_edit(&mut new, e);
        }
        check_form(&old, &new)?;
    }

    /// Sets and removals of plain names are always expressible as a
    /// diff: the fallback to a whole document must not hide a weak diff.
    #[test]
    fn plain_edits_log_as_operators(
        fields in prop::collection::vec((plain_key(), plain_value()), 0..5),
        edits in prop::collection::vec(prop_oneof![
            (prop::collection::vec(plain_key(), 1..3), plain_value()).prop_map(|(p, v)| Edit::Set(p, v)),
            prop::collection::vec(plain_key(), 1..3).prop_map(Edit::Remove),
        ], 0..4),
    ) {
        let mut old = doc! {"_id": 1};
        for (k, v) in fields {
            old.insert(k, v);
        }
        // Removing a field and setting it again moves it to the end, which
        // no diff of $set/$unset expresses: removals come last here.
        let (sets, removes): (Vec<Edit>, Vec<Edit>) = edits.into_iter().partition(|e| matches!(e, Edit::Set(..)));
        let mut new = old.clone();
        for e in sets.iter().chain(&removes) {
            apply_edit(&mut new, e);
        }
        check_form(&old, &new)?;
        let form = oplog_update(&old, &new);
        prop_assert!(form.keys().next().is_some_and(|k| k.starts_with('$')), "form {} from {} to {}", form, old, new);
    }

    /// Seed 000 4.2: after a crash, recovery may replay entries whose
    /// effects the state already holds. Replaying the entries of a chain
    /// d0 -> d1 -> d2 -> d3 from any later state must end in d3.
    #[test]
    fn replaying_a_chain_from_a_later_state_ends_in_the_last_state(
        d0 in document(),
        e1 in prop::collection::vec(edit(), 0..3),
        e2 in prop::collection::vec(edit(), 0..3),
        e3 in prop::collection::vec(edit(), 0..3),
        start in 0usize..4,
    ) {
        let mut states = vec![d0];
        for edits in [&e1, &e2, &e3] {
            let mut next = states.last().unwrap().clone();
            for e in edits.iter() {
                apply_edit(&mut next, e);
            }
            states.push(next);
        }
        let forms: Vec<Document> = states.windows(2).map(|w| oplog_update(&w[0], &w[1])).collect();
        // Replay every entry from the first over the state after `start` of them.
        let mut replayed = states[start].clone();
        for form in &forms {
            replayed = apply_oplog_update(&replayed, form).unwrap();
        }
        prop_assert_eq!(bytes(&replayed), bytes(&states[3]), "from state {} with forms {:?}", start, forms);
    }

    #[test]
    fn unrelated_documents_round_trip(old in document(), new in document()) {
        check_form(&old, &new)?;
    }

    #[test]
    fn operator_updates_log_as_sets(old in document(), n in -2i32..3, path in prop::sample::select(vec!["a", "b.c", "z"])) {
        let update = Update::parse(&Bson::Document(doc! {"$inc": {path: n}}), None).unwrap();
        let ctx = UpdateContext { positional: None, now: bson::DateTime::from_millis(0), is_upsert_insert: false };
        if let Ok(outcome) = update.apply(&old, &ctx) {
            check_form(&old, &outcome.document)?;
        }
    }
}

#[test]
fn inc_becomes_the_set_of_the_computed_value() {
    let old = doc! {"_id": 1, "n": 5, "s": {"t": 1, "u": 2}};
    let new = doc! {"_id": 1, "n": 6, "s": {"t": 1}, "w": [1]};
    // The added field `w` is unset first, so that a replay over a state
    // that already holds it moves it to the end again.
    assert_eq!(
        oplog_update(&old, &new),
        doc! {"$unset": {"s.u": true, "w": true}, "$set": {"n": 6, "w": [1]}}
    );
}

#[test]
fn replayed_additions_keep_their_order() {
    // The shrunk cases saved in update_oplog_form.proptest-regressions:
    // {a, c} added, then b; replayed from the last state, which holds all.
    let d1 = doc! {"_id": 1};
    let d2 = doc! {"_id": 1, "a": 0, "c": 0};
    let d3 = doc! {"_id": 1, "a": 0, "c": 0, "b": 0};
    let f2 = oplog_update(&d1, &d2);
    let f3 = oplog_update(&d2, &d3);
    let replayed = apply_oplog_update(&apply_oplog_update(&d3, &f2).unwrap(), &f3).unwrap();
    assert_eq!(bytes(&replayed), bytes(&d3));
}

#[test]
fn reordered_fields_log_the_whole_document() {
    let old = doc! {"_id": 1, "a": 1, "b": 2};
    let new = doc! {"_id": 1, "b": 2, "a": 1};
    assert_eq!(oplog_update(&old, &new), new);
    // A nested reorder sets that subdocument whole.
    let old = doc! {"_id": 1, "s": {"a": 1, "b": 2}};
    let new = doc! {"_id": 1, "s": {"b": 2, "a": 1}};
    assert_eq!(
        oplog_update(&old, &new),
        doc! {"$set": {"s": {"b": 2, "a": 1}}}
    );
}

#[test]
fn no_change_logs_an_empty_set() {
    let d = doc! {"_id": 1, "a": 1};
    assert_eq!(oplog_update(&d, &d), doc! {"$set": {}});
    assert_eq!(apply_oplog_update(&d, &doc! {"$set": {}}).unwrap(), d);
}
