//! `$[]` and `$[<id>]` with arrayFilters against a naive reference: an
//! array of numbers and `{x: number}` documents, one operator applied to
//! every element or to the elements an array filter selects.

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::update::{Update, UpdateContext};

fn element() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-3i32..4).prop_map(Bson::Int32),
        (-3i32..4).prop_map(|x| Bson::Document(doc! {"x": x})),
        Just(Bson::Document(doc! {"y": 1})),
    ]
}

#[derive(Clone, Debug)]
enum Target {
    /// `a.$[]`
    All,
    /// `a.$[]`'s elements' field: `a.$[].x`
    AllField,
    /// `a.$[e]` with `{e: {$gt: k}}`
    Filtered(i32),
    /// `a.$[e].x` with `{"e.x": {$gt: k}}`
    FilteredField(i32),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        Just(Target::All),
        Just(Target::AllField),
        (-3i32..4).prop_map(Target::Filtered),
        (-3i32..4).prop_map(Target::FilteredField),
    ]
}

fn operator() -> impl Strategy<Value = (&'static str, Bson)> {
    prop_oneof![
        (-2i32..3).prop_map(|v| ("$set", Bson::Int32(v))),
        (-2i32..3).prop_map(|v| ("$inc", Bson::Int32(v))),
        Just(("$unset", Bson::String(String::new()))),
        (-2i32..3).prop_map(|v| ("$max", Bson::Int32(v))),
    ]
}

fn number(value: &Bson) -> Option<i32> {
    match value {
        Bson::Int32(x) => Some(*x),
        _ => None,
    }
}

/// The naive reference: returns the new array or an error code.
fn reference(items: &[Bson], target: &Target, op: &str, arg: &Bson) -> Result<Vec<Bson>, i32> {
    let mut out = items.to_vec();
    for item in out.iter_mut() {
        let (selected, field) = match target {
            Target::All => (true, false),
            Target::AllField => (true, true),
            Target::Filtered(k) => (number(item).is_some_and(|v| v > *k), false),
            Target::FilteredField(k) => {
                let x = match item {
                    Bson::Document(d) => d.get("x").and_then(number),
                    _ => None,
                };
                (x.is_some_and(|v| v > *k), true)
            }
        };
        if !selected {
            continue;
        }
        // The slot the operator acts on: the element, or its field x.
        let current: Option<Bson> = if field {
            match item {
                Bson::Document(d) => d.get("x").cloned(),
                // Creating a field inside a number is not viable.
                _ if op != "$unset" => return Err(28),
                _ => continue,
            }
        } else {
            Some(item.clone())
        };
        let new = match op {
            "$set" => Some(arg.clone()),
            "$unset" => None,
            "$inc" => match &current {
                None => Some(arg.clone()),
                Some(Bson::Int32(v)) => Some(Bson::Int32(v + number(arg).unwrap())),
                Some(_) => return Err(14),
            },
            "$max" => match &current {
                // Documents sort above numbers, so $max keeps them.
                Some(Bson::Document(_)) => current.clone(),
                Some(Bson::Int32(v)) if *v >= number(arg).unwrap() => current.clone(),
                _ => Some(arg.clone()),
            },
            other => panic!("{other} not generated"),
        };
        if field {
            let Bson::Document(d) = item else {
                unreachable!()
            };
            match new {
                Some(v) => {
                    d.insert("x", v);
                }
                None => {
                    d.remove("x");
                }
            }
        } else {
            // $unset of an array element leaves null in its place.
            *item = new.unwrap_or(Bson::Null);
        }
    }
    Ok(out)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn all_and_filtered_positional_agree_with_the_reference(
        items in prop::collection::vec(element(), 0..5),
        target in target(),
        (op, arg) in operator(),
    ) {
        let (path, filters) = match &target {
            Target::All => ("a.$[]", None),
            Target::AllField => ("a.$[].x", None),
            Target::Filtered(k) => ("a.$[e]", Some(vec![doc! {"e": {"$gt": *k}}])),
            Target::FilteredField(k) => ("a.$[e].x", Some(vec![doc! {"e.x": {"$gt": *k}}])),
        };
        let mut ops = Document::new();
        ops.insert(path, arg.clone());
        let update = doc! {op: ops};
        let original = doc! {"_id": 1, "a": items.clone()};
        let ctx = UpdateContext { positional: None, now: bson::DateTime::from_millis(0), is_upsert_insert: false };
        let actual = Update::parse(&Bson::Document(update.clone()), filters.as_deref()).unwrap().apply(&original, &ctx);
        match (actual, reference(&items, &target, op, &arg)) {
            (Ok(outcome), Ok(expected)) => {
                let expected = doc! {"_id": 1, "a": expected};
                prop_assert_eq!(outcome.document.to_vec().unwrap(), expected.to_vec().unwrap(), "{} on {}: got {}", update, original, outcome.document);
            }
            (Err(e), Err(code)) => prop_assert_eq!(e.code, code, "{}", e.message),
            (actual, expected) => prop_assert!(false, "{} on {}: got {:?}, want {:?}", update, original, actual, expected),
        }
    }
}
