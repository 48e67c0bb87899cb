//! The key encoding must order exactly as `compare_values` does: checked
//! on random BSON values (mixed numeric types, nested documents and
//! arrays, strings with zero bytes), descending, and compound.

use std::cmp::Ordering;

use bson::{Bson, Document};
use proptest::prelude::*;
use slipstream_query::compare::compare_values;
use slipstream_query::index_key::{decode_key, encode_value, KeyPattern};

fn number() -> impl Strategy<Value = Bson> {
    prop_oneof![
        any::<i32>().prop_map(Bson::Int32),
        (-5i32..5).prop_map(Bson::Int32),
        any::<i64>().prop_map(Bson::Int64),
        // Integers near 2^53 and 2^63, where f64 loses precision.
        (-3i64..3).prop_map(|d| Bson::Int64((1i64 << 53) + d)),
        (0i64..3000).prop_map(|d| Bson::Int64(i64::MAX - d)),
        (0i64..3000).prop_map(|d| Bson::Int64(i64::MIN + d)),
        (-3i64..3).prop_map(|d| Bson::Double(((1i64 << 53) + d) as f64)),
        Just(Bson::Double(2f64.powi(63))),
        Just(Bson::Double(-(2f64.powi(63)))),
        (-5i32..5).prop_map(|x| Bson::Double(f64::from(x) / 2.0)),
        any::<f64>().prop_map(Bson::Double),
        Just(Bson::Double(f64::NAN)),
        Just(Bson::Double(f64::INFINITY)),
        Just(Bson::Double(f64::NEG_INFINITY)),
        Just(Bson::Double(-0.0)),
    ]
}

fn scalar() -> impl Strategy<Value = Bson> {
    prop_oneof![
        number(),
        "[a-c\u{0}]{0,4}".prop_map(Bson::String),
        "[a-c\u{0}]{0,3}".prop_map(Bson::Symbol),
        Just(Bson::Null),
        Just(Bson::Undefined),
        Just(Bson::MinKey),
        Just(Bson::MaxKey),
        any::<bool>().prop_map(Bson::Boolean),
        any::<i64>().prop_map(|m| Bson::DateTime(bson::DateTime::from_millis(m))),
        (any::<u32>(), 0u32..3)
            .prop_map(|(time, increment)| Bson::Timestamp(bson::Timestamp { time, increment })),
        prop::array::uniform12(0u8..3)
            .prop_map(|b| Bson::ObjectId(bson::oid::ObjectId::from_bytes(b))),
        (prop::collection::vec(0u8..3, 0..3), 0u8..2).prop_map(|(bytes, sub)| Bson::Binary(
            bson::Binary {
                subtype: sub.into(),
                bytes
            }
        )),
        ("[ab]{0,2}", "[im]{0,1}").prop_map(|(p, o)| Bson::RegularExpression(bson::Regex {
            pattern: p.try_into().unwrap(),
            options: o.try_into().unwrap()
        })),
        "[ab]{0,2}".prop_map(Bson::JavaScriptCode),
    ]
}

fn value() -> impl Strategy<Value = Bson> {
    scalar().prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
            prop::collection::vec(("[ab]{1,2}", inner), 0..3).prop_map(|fields| {
                let mut doc = Document::new();
                for (k, v) in fields {
                    doc.insert(k, v);
                }
                Bson::Document(doc)
            }),
        ]
    })
}

fn enc(v: &Bson, descending: bool) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, v, descending);
    out
}

/// Equal values need not be the same bytes only when compare_values
/// says they are equal; everything else must agree exactly.
fn check_pair(a: &Bson, b: &Bson) -> Result<(), TestCaseError> {
    let expected = compare_values(a, b);
    prop_assert_eq!(
        enc(a, false).cmp(&enc(b, false)),
        expected,
        "asc {:?} vs {:?}",
        a,
        b
    );
    prop_assert_eq!(
        enc(a, true).cmp(&enc(b, true)),
        expected.reverse(),
        "desc {:?} vs {:?}",
        a,
        b
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn encoding_orders_like_compare_values(a in value(), b in value()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn numbers_order_exactly(a in number(), b in number()) {
        check_pair(&a, &b)?;
    }

    #[test]
    fn compound_keys_order_field_by_field(
        a1 in value(), a2 in value(), b1 in value(), b2 in value(), desc1 in any::<bool>(), desc2 in any::<bool>()
    ) {
        let key = |x: &Bson, y: &Bson| {
            let mut out = Vec::new();
            encode_value(&mut out, x, desc1);
            encode_value(&mut out, y, desc2);
            out
        };
        let first = compare_values(&a1, &b1);
        let first = if desc1 { first.reverse() } else { first };
        let second = compare_values(&a2, &b2);
        let second = if desc2 { second.reverse() } else { second };
        prop_assert_eq!(key(&a1, &a2).cmp(&key(&b1, &b2)), first.then(second));
    }

    #[test]
    fn decode_gives_an_equal_value(a in value(), b in value(), desc in any::<bool>()) {
        let pattern = KeyPattern::parse(&bson::doc! {"x": 1, "y": if desc { -1 } else { 1 }}).unwrap();
        let mut key = Vec::new();
        encode_value(&mut key, &a, false);
        encode_value(&mut key, &b, desc);
        let decoded = decode_key(&key, &pattern).unwrap();
        // DbPointer is not generated here, so decoding is exact up to
        // numeric normalisation: the decoded values compare equal.
        prop_assert_eq!(compare_values(decoded.get("x").unwrap(), &a), Ordering::Equal);
        prop_assert_eq!(compare_values(decoded.get("y").unwrap(), &b), Ordering::Equal);
    }
}
