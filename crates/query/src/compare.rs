//! BSON comparison order, as MongoDB defines it for sorts, range
//! predicates and index keys.
//!
//! Values of different types order by their *canonical type rank*
//! (MinKey < null < numbers < strings < objects < arrays < binary <
//! ObjectId < booleans < dates < timestamps < regexes < code < MaxKey);
//! numbers of different representations compare by numeric value.
//! Strings compare by bytes (no collation support yet).

use std::cmp::Ordering;

use bson::{Bson, Document};

/// The canonical rank of a value's type: values of different types whose
/// ranks differ compare by rank alone. Mirrors MongoDB's
/// `canonicalizeBSONType`.
pub fn canonical_type_rank(value: &Bson) -> i32 {
    match value {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
        Bson::Null => 5,
        Bson::Double(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// MongoDB's name of a value's type, as `$type` and error messages spell it.
pub fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Double(_) => "double",
        Bson::String(_) => "string",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::Binary(_) => "binData",
        Bson::Undefined => "undefined",
        Bson::ObjectId(_) => "objectId",
        Bson::Boolean(_) => "bool",
        Bson::DateTime(_) => "date",
        Bson::Null => "null",
        Bson::RegularExpression(_) => "regex",
        Bson::DbPointer(_) => "dbPointer",
        Bson::JavaScriptCode(_) => "javascript",
        Bson::Symbol(_) => "symbol",
        Bson::JavaScriptCodeWithScope(_) => "javascriptWithScope",
        Bson::Int32(_) => "int",
        Bson::Timestamp(_) => "timestamp",
        Bson::Int64(_) => "long",
        Bson::Decimal128(_) => "decimal",
        Bson::MinKey => "minKey",
        Bson::MaxKey => "maxKey",
    }
}

/// Total order over BSON values (MongoDB's `woCompare` without collation).
pub fn compare_values(a: &Bson, b: &Bson) -> Ordering {
    let rank = canonical_type_rank(a).cmp(&canonical_type_rank(b));
    if rank != Ordering::Equal {
        return rank;
    }
    match (a, b) {
        (Bson::String(x), Bson::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::String(x), Bson::Symbol(y))
        | (Bson::Symbol(x), Bson::String(y))
        | (Bson::Symbol(x), Bson::Symbol(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::Document(x), Bson::Document(y)) => compare_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => compare_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .cmp(y.pattern.as_str())
            .then_with(|| x.options.as_str().cmp(y.options.as_str())),
        (Bson::DbPointer(x), Bson::DbPointer(y)) => format!("{x:?}").cmp(&format!("{y:?}")),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .cmp(&y.code)
            .then_with(|| compare_documents(&x.scope, &y.scope)),
        _ => compare_numbers(a, b),
    }
}

/// Equality in the sense of `$eq` / `compare_values(a, b) == Equal`
/// (so `1 == 1.0 == NumberLong(1)`).
pub fn values_equal(a: &Bson, b: &Bson) -> bool {
    compare_values(a, b) == Ordering::Equal
}

/// Documents compare element by element: first the canonical type of the
/// values, then the field names, then the values; a prefix orders first.
pub fn compare_documents(a: &Document, b: &Document) -> Ordering {
    let mut left = a.iter();
    let mut right = b.iter();
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let order = canonical_type_rank(va)
                    .cmp(&canonical_type_rank(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| compare_values(va, vb));
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

/// Arrays compare like documents whose keys are "0", "1", ...: the keys of
/// equal positions are equal, so only types and values matter.
pub fn compare_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (va, vb) in a.iter().zip(b.iter()) {
        let order = canonical_type_rank(va)
            .cmp(&canonical_type_rank(vb))
            .then_with(|| compare_values(va, vb));
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// A number in a form that compares exactly across representations.
#[derive(Clone, Copy, Debug)]
pub enum Number {
    Int(i64),
    Float(f64),
}

/// The numeric value of a BSON number, `None` for any other type.
/// Decimal128 is converted through its string form (approximate for
/// values outside f64 precision).
pub fn as_number(value: &Bson) -> Option<Number> {
    match value {
        Bson::Int32(v) => Some(Number::Int(i64::from(*v))),
        Bson::Int64(v) => Some(Number::Int(*v)),
        Bson::Double(v) => Some(Number::Float(*v)),
        Bson::Decimal128(d) => Some(Number::Float(decimal_to_f64(d))),
        _ => None,
    }
}

/// Best-effort conversion of a Decimal128 to f64 (NaN when unparsable).
pub fn decimal_to_f64(d: &bson::Decimal128) -> f64 {
    let text = d.to_string();
    match text.as_str() {
        "Infinity" => f64::INFINITY,
        "-Infinity" => f64::NEG_INFINITY,
        _ => text.parse::<f64>().unwrap_or(f64::NAN),
    }
}

fn compare_numbers(a: &Bson, b: &Bson) -> Ordering {
    match (as_number(a), as_number(b)) {
        (Some(x), Some(y)) => compare_number_values(x, y),
        // Same canonical rank but not numbers: only Undefined/Null/MinKey/MaxKey
        // reach here, and each of those ranks holds a single value.
        _ => Ordering::Equal,
    }
}

/// Exact comparison of two numbers; NaN orders below every other number
/// and equal to itself, as in MongoDB.
pub fn compare_number_values(a: Number, b: Number) -> Ordering {
    match (a, b) {
        (Number::Int(x), Number::Int(y)) => x.cmp(&y),
        (Number::Float(x), Number::Float(y)) => compare_floats(x, y),
        (Number::Int(x), Number::Float(y)) => compare_int_float(x, y),
        (Number::Float(x), Number::Int(y)) => compare_int_float(y, x).reverse(),
    }
}

fn compare_floats(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // Neither is NaN, so partial_cmp is total here; -0.0 == 0.0.
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

fn compare_int_float(x: i64, y: f64) -> Ordering {
    if y.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 as f64 is exact; anything at or beyond it exceeds every i64.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if y >= TWO_POW_63 {
        return Ordering::Less;
    }
    if y < -TWO_POW_63 {
        return Ordering::Greater;
    }
    let floor = y.floor();
    // floor is now within i64 range and integral, so the cast is exact.
    let whole = floor as i64;
    match x.cmp(&whole) {
        Ordering::Equal if y > floor => Ordering::Less,
        order => order,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId};

    #[test]
    fn type_order_follows_mongodb() {
        let ascending = vec![
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(-5),
            Bson::Double(2.5),
            Bson::Int64(3),
            Bson::String("a".into()),
            Bson::Document(doc! {}),
            Bson::Array(vec![]),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(bson::DateTime::from_millis(0)),
            Bson::Timestamp(bson::Timestamp { time: 1, increment: 0 }),
            Bson::MaxKey,
        ];
        for pair in ascending.windows(2) {
            assert_eq!(compare_values(&pair[0], &pair[1]), Ordering::Less, "{pair:?}");
        }
    }

    #[test]
    fn numbers_compare_by_value_across_types() {
        assert!(values_equal(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(values_equal(&Bson::Int64(1), &Bson::Double(1.0)));
        assert_eq!(compare_values(&Bson::Int64(i64::MAX), &Bson::Double(9.3e18)), Ordering::Less);
        assert_eq!(compare_values(&Bson::Int64(3), &Bson::Double(3.5)), Ordering::Less);
        assert_eq!(compare_values(&Bson::Int64(-4), &Bson::Double(-3.5)), Ordering::Less);
        assert_eq!(compare_values(&Bson::Double(f64::NAN), &Bson::Int32(i32::MIN)), Ordering::Less);
        assert!(values_equal(&Bson::Double(f64::NAN), &Bson::Double(f64::NAN)));
    }

    #[test]
    fn documents_compare_field_by_field() {
        assert_eq!(compare_documents(&doc! {"a": 1}, &doc! {"a": 1, "b": 1}), Ordering::Less);
        assert_eq!(compare_documents(&doc! {"a": 2}, &doc! {"b": 1}), Ordering::Less);
        assert_eq!(compare_documents(&doc! {"a": "x"}, &doc! {"a": 5}), Ordering::Greater);
    }
}
