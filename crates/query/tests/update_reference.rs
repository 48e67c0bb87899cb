//! Update operators against a deliberately naive reference: documents of
//! at most two levels, paths of one or two plain field names, a subset of
//! operators, each written out in the most direct way. Results (field
//! order included) and error codes must agree.

use std::cmp::Ordering;

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::compare::{compare_values, values_equal};
use slipstream_query::update::{Update, UpdateContext};

const OPS: [&str; 11] = [
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$push",
    "$addToSet",
    "$pop",
    "$pullAll",
    "$rename",
];
const PATHS: [&str; 7] = ["a", "b", "c", "a.x", "a.y", "b.x", "c.z"];

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (-3i32..3).prop_map(Bson::Int32),
        (-3i64..3).prop_map(Bson::Int64),
        Just(Bson::Int32(i32::MAX)),
        Just(Bson::Int64(i64::MAX)),
        (-2i32..2).prop_map(|x| Bson::Double(f64::from(x) + 0.5)),
        prop_oneof![Just("x"), Just("y")].prop_map(|s| Bson::String(s.into())),
        Just(Bson::Null),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    prop_oneof![
        4 => scalar(),
        1 => prop::collection::vec(scalar(), 0..3).prop_map(Bson::Array),
        1 => (scalar(), scalar()).prop_map(|(x, y)| Bson::Document(doc! {"x": x, "y": y})),
    ]
}

fn document() -> impl Strategy<Value = Document> {
    prop::collection::vec(
        (prop::sample::select(vec!["a", "b", "c", "d"]), value()),
        0..4,
    )
    .prop_map(|fields| {
        let mut d = doc! {"_id": 1};
        for (k, v) in fields {
            d.insert(k, v);
        }
        d
    })
}

fn update() -> impl Strategy<Value = Document> {
    let item = (
        prop::sample::select(OPS.to_vec()),
        prop::sample::select(PATHS.to_vec()),
        value(),
        prop::bool::ANY,
        prop::sample::select(PATHS.to_vec()),
    );
    prop::collection::vec(item, 1..4).prop_map(|items| {
        let mut u = Document::new();
        for (op, path, arg, flag, other_path) in items {
            let arg = match op {
                "$rename" => Bson::String(other_path.to_string()),
                "$unset" => Bson::String(String::new()),
                "$pop" => Bson::Int32(if flag { 1 } else { -1 }),
                "$pullAll" => match arg {
                    Bson::Array(a) => Bson::Array(a),
                    other => Bson::Array(vec![other]),
                },
                "$inc" | "$mul" => match arg {
                    n @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) => n,
                    _ => Bson::Int32(1),
                },
                _ => arg,
            };
            let entry = u
                .entry(op.to_string())
                .or_insert_with(|| Bson::Document(Document::new()));
            if let Bson::Document(fields) = entry {
                fields.insert(path, arg);
            }
        }
        u
    })
}

/// Naive numeric addition with MongoDB's promotion rules.
fn add(a: &Bson, b: &Bson) -> Option<Bson> {
    let float = |v: &Bson| match v {
        Bson::Int32(x) => Some(f64::from(*x)),
        Bson::Int64(x) => Some(*x as f64),
        Bson::Double(x) => Some(*x),
        _ => None,
    };
    let int = |v: &Bson| match v {
        Bson::Int32(x) => Some(i128::from(*x)),
        Bson::Int64(x) => Some(i128::from(*x)),
        _ => None,
    };
    match (a, b) {
        (Bson::Double(_), _) | (_, Bson::Double(_)) => Some(Bson::Double(float(a)? + float(b)?)),
        (Bson::Int32(x), Bson::Int32(y)) => {
            let sum = i64::from(*x) + i64::from(*y);
            Some(
                i32::try_from(sum)
                    .map(Bson::Int32)
                    .unwrap_or(Bson::Int64(sum)),
            )
        }
        _ => {
            let sum = int(a)? + int(b)?;
            // An int64 overflow is an error (BadValue), not a double.
            i64::try_from(sum).ok().map(Bson::Int64)
        }
    }
}

/// Naive numeric multiplication with MongoDB's promotion rules.
fn multiply(a: &Bson, b: &Bson) -> Option<Bson> {
    let float = |v: &Bson| match v {
        Bson::Int32(x) => Some(f64::from(*x)),
        Bson::Int64(x) => Some(*x as f64),
        Bson::Double(x) => Some(*x),
        _ => None,
    };
    let int = |v: &Bson| match v {
        Bson::Int32(x) => Some(i128::from(*x)),
        Bson::Int64(x) => Some(i128::from(*x)),
        _ => None,
    };
    match (a, b) {
        (Bson::Double(_), _) | (_, Bson::Double(_)) => Some(Bson::Double(float(a)? * float(b)?)),
        (Bson::Int32(x), Bson::Int32(y)) => {
            let product = i64::from(*x) * i64::from(*y);
            Some(
                i32::try_from(product)
                    .map(Bson::Int32)
                    .unwrap_or(Bson::Int64(product)),
            )
        }
        _ => i64::try_from(int(a)? * int(b)?).ok().map(Bson::Int64),
    }
}

/// `$rename` done the plain way on documents of at most two levels.
fn rename(doc: &mut Document, from: &str, to: &str) -> Result<(), i32> {
    let from_parts: Vec<&str> = from.split('.').collect();
    let value = match from_parts.as_slice() {
        [top] => doc.get(*top).cloned(),
        [top, leaf] => match doc.get(*top) {
            Some(Bson::Document(inner)) => inner.get(*leaf).cloned(),
            // Generated names are not numeric: a named field of an array
            // or of a scalar is not a viable path.
            Some(_) => return Err(28),
            None => None,
        },
        _ => unreachable!(),
    };
    let Some(value) = value else { return Ok(()) };
    let to_parts: Vec<&str> = to.split('.').collect();
    if let [top, _] = to_parts.as_slice() {
        match doc.get(*top) {
            None | Some(Bson::Document(_)) => {}
            Some(Bson::Array(_)) => return Err(2),
            Some(_) => return Err(28),
        }
    }
    match from_parts.as_slice() {
        [top] => {
            doc.remove(*top);
        }
        [top, leaf] => {
            if let Some(Bson::Document(inner)) = doc.get_mut(*top) {
                inner.remove(*leaf);
            }
        }
        _ => unreachable!(),
    }
    match to_parts.as_slice() {
        [top] => {
            doc.insert(*top, value);
        }
        [top, leaf] => {
            if doc.get(*top).is_none() {
                doc.insert(*top, Document::new());
            }
            if let Some(Bson::Document(inner)) = doc.get_mut(*top) {
                inner.insert(*leaf, value);
            }
        }
        _ => unreachable!(),
    }
    Ok(())
}

fn is_prefix(short: &str, long: &str) -> bool {
    short == long || (long.starts_with(short) && long.as_bytes()[short.len()] == b'.')
}

/// The reference. Returns the new document or the error code.
fn reference(original: &Document, update: &Document) -> Result<Document, i32> {
    let mut mods: Vec<(String, String, Bson)> = Vec::new();
    for (op, fields) in update {
        let Bson::Document(fields) = fields else {
            panic!("generated updates are documents")
        };
        for (path, arg) in fields {
            mods.push((op.clone(), path.clone(), arg.clone()));
        }
    }
    // Argument errors of $rename come first, then conflicts between all
    // paths named (a rename names its source and its destination).
    let mut targets: Vec<String> = Vec::new();
    for (op, path, arg) in &mods {
        targets.push(path.clone());
        if op == "$rename" {
            let to = arg.as_str().unwrap();
            if is_prefix(path, to) || is_prefix(to, path) {
                return Err(2);
            }
            targets.push(to.to_string());
        }
    }
    for i in 0..targets.len() {
        for j in 0..i {
            if is_prefix(&targets[j], &targets[i]) || is_prefix(&targets[i], &targets[j]) {
                return Err(40);
            }
        }
    }
    // Paths apply in name order (every name here is non-numeric); a
    // rename is placed at its destination.
    let order_key = |m: &(String, String, Bson)| {
        if m.0 == "$rename" {
            m.2.as_str().unwrap().to_string()
        } else {
            m.1.clone()
        }
    };
    mods.sort_by(|x, y| order_key(x).split('.').cmp(order_key(y).split('.')));
    let mut doc = original.clone();
    for (op, path, arg) in mods {
        if op == "$rename" {
            rename(&mut doc, &path, arg.as_str().unwrap())?;
            continue;
        }
        let creates = !matches!(op.as_str(), "$unset" | "$pop" | "$pullAll");
        let parts: Vec<&str> = path.split('.').collect();
        let parent: &mut Document = if parts.len() == 1 {
            &mut doc
        } else {
            match doc.get(parts[0]) {
                None if creates => {
                    doc.insert(parts[0], Document::new());
                }
                None => continue,
                Some(Bson::Document(_)) => {}
                // Only $unset ignores a path it could not even create.
                Some(_) if op == "$unset" => continue,
                Some(_) => return Err(28),
            }
            match doc.get_mut(parts[0]) {
                Some(Bson::Document(inner)) => inner,
                _ => unreachable!(),
            }
        };
        let name = *parts.last().unwrap();
        let current = parent.get(name).cloned();
        match op.as_str() {
            "$set" => {
                parent.insert(name, arg);
            }
            "$unset" => {
                parent.remove(name);
            }
            "$inc" => match current {
                None => {
                    parent.insert(name, arg);
                }
                Some(c) => {
                    let numeric = matches!(c, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_));
                    let sum = add(&c, &arg).ok_or(if numeric { 2 } else { 14 })?;
                    parent.insert(name, sum);
                }
            },
            "$mul" => {
                let product = match &current {
                    None => Some(match arg {
                        Bson::Int32(_) => Bson::Int32(0),
                        Bson::Int64(_) => Bson::Int64(0),
                        _ => Bson::Double(0.0),
                    }),
                    Some(c) => {
                        let numeric =
                            matches!(c, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_));
                        Some(multiply(c, &arg).ok_or(if numeric { 2 } else { 14 })?)
                    }
                };
                parent.insert(name, product.unwrap());
            }
            "$min" | "$max" => {
                let wanted = if op == "$min" {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
                if current.is_none() || compare_values(&arg, current.as_ref().unwrap()) == wanted {
                    parent.insert(name, arg);
                }
            }
            "$push" | "$addToSet" => {
                let mut items = match current {
                    None => Vec::new(),
                    Some(Bson::Array(items)) => items,
                    Some(_) => return Err(2),
                };
                if op == "$push" || !items.iter().any(|x| values_equal(x, &arg)) {
                    items.push(arg);
                }
                parent.insert(name, items);
            }
            "$pop" => match current {
                None => {}
                Some(Bson::Array(mut items)) => {
                    if !items.is_empty() {
                        if arg == Bson::Int32(1) {
                            items.pop();
                        } else {
                            items.remove(0);
                        }
                    }
                    parent.insert(name, items);
                }
                Some(_) => return Err(14),
            },
            "$pullAll" => {
                let Bson::Array(remove) = arg else {
                    panic!("generated as array")
                };
                match current {
                    None => {}
                    Some(Bson::Array(items)) => {
                        let kept: Vec<Bson> = items
                            .into_iter()
                            .filter(|x| !remove.iter().any(|r| values_equal(x, r)))
                            .collect();
                        parent.insert(name, kept);
                    }
                    Some(_) => return Err(2),
                }
            }
            other => panic!("operator {other} not generated"),
        }
    }
    Ok(doc)
}

fn bytes(d: &Document) -> Vec<u8> {
    d.to_vec().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn operators_agree_with_the_naive_reference(original in document(), update in update()) {
        let ctx = UpdateContext { positional: None, now: bson::DateTime::from_millis(0), is_upsert_insert: false };
        let actual = Update::parse(&Bson::Document(update.clone()), None).and_then(|u| u.apply(&original, &ctx));
        let expected = reference(&original, &update);
        match (actual, expected) {
            (Ok(outcome), Ok(doc)) => {
                prop_assert_eq!(bytes(&outcome.document), bytes(&doc), "update {} on {}: got {} want {}", update, original, outcome.document, doc);
                prop_assert_eq!(outcome.modified, bytes(&doc) != bytes(&original));
            }
            (Err(e), Err(code)) => prop_assert_eq!(e.code, code, "update {} on {}: {}", update, original, e.message),
            (Ok(outcome), Err(code)) => prop_assert!(false, "update {} on {}: got {} want error {}", update, original, outcome.document, code),
            (Err(e), Ok(doc)) => prop_assert!(false, "update {} on {}: got error {:?} want {}", update, original, e, doc),
        }
    }
}
