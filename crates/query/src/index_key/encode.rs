//! Encoding values into order-preserving key bytes (the format the
//! module documentation describes).

use bson::{Bson, Document};

use crate::compare::{as_number, canonical_type_rank, Number};

/// Terminator of documents and arrays; below every type byte.
pub(super) const END: u8 = 0x00;
/// Added to the canonical type rank (minimum -1) so type bytes are >= 9.
pub(super) const TYPE_OFFSET: i32 = 10;
/// Number of bytes of a number's body: 8-byte order key, 2-byte tie-breaker.
const NUMBER_BODY_LEN: usize = 10;

fn type_byte(value: &Bson) -> u8 {
    let byte = canonical_type_rank(value) + TYPE_OFFSET;
    // Ranks are -1..=127, so the byte is 9..=137 and fits in u8.
    assert!((9..=255).contains(&byte), "type rank out of range");
    byte as u8
}

/// Appends the order-preserving encoding of one value: memcmp order of
/// encodings == compare_values order (reversed bytes-wise when
/// descending), values that compare equal (1, 1.0, NumberLong(1)) encode
/// identically, and encodings are self-delimiting so that concatenating
/// per-field encodings gives compound keys ordered field by field.
pub fn encode_value(out: &mut Vec<u8>, value: &Bson, descending: bool) {
    let start = out.len();
    encode_ascending(out, value);
    if descending {
        for byte in &mut out[start..] {
            *byte = !*byte;
        }
    }
}

/// Record key of a document: the encoding of its _id, ascending (the
/// `_id_` index and the record table share it).
pub fn record_key(id: &Bson) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_value(&mut out, id, false);
    out
}

/// Smallest byte string greater than every string that starts with
/// `prefix`; None if none exists (all 0xFF).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last != 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The byte range `[start, end)` that holds the encoding of every value
/// of `value`'s canonical type (all numbers, all strings, ...) in one key
/// field, for type-bracketed range bounds (`{$gt: 5}` covers numbers
/// only). Append the result after the encoded prefix fields of a
/// compound key.
pub fn type_range(value: &Bson, descending: bool) -> (Vec<u8>, Vec<u8>) {
    let tag = type_byte(value);
    let first = if descending { !tag } else { tag };
    // Type bytes are 9..=137, so neither byte here can overflow.
    (vec![first], vec![first + 1])
}

fn encode_ascending(out: &mut Vec<u8>, value: &Bson) {
    out.push(type_byte(value));
    match value {
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => {
            // as_number is Some for exactly these four variants.
            let number = as_number(value).expect("numeric variant");
            encode_number(out, number);
        }
        Bson::String(s) | Bson::Symbol(s) => encode_str(out, s.as_bytes()),
        Bson::Document(doc) => encode_document_body(out, doc),
        Bson::Array(items) => {
            for item in items {
                encode_ascending(out, item);
            }
            out.push(END);
        }
        Bson::Binary(bin) => {
            // compare_values orders binaries by length, subtype, then bytes;
            // lengths are capped by the 16 MB document limit, so u32 is enough.
            let len = u32::try_from(bin.bytes.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.push(u8::from(bin.subtype));
            out.extend_from_slice(&bin.bytes);
        }
        Bson::ObjectId(oid) => out.extend_from_slice(&oid.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(dt) => {
            let flipped = (dt.timestamp_millis() as u64) ^ (1u64 << 63);
            out.extend_from_slice(&flipped.to_be_bytes());
        }
        Bson::Timestamp(ts) => {
            out.extend_from_slice(&ts.time.to_be_bytes());
            out.extend_from_slice(&ts.increment.to_be_bytes());
        }
        Bson::RegularExpression(re) => {
            encode_str(out, re.pattern.as_str().as_bytes());
            encode_str(out, re.options.as_str().as_bytes());
        }
        Bson::DbPointer(p) => encode_str(out, format!("{p:?}").as_bytes()),
        Bson::JavaScriptCode(code) => encode_str(out, code.as_bytes()),
        Bson::JavaScriptCodeWithScope(cws) => {
            encode_str(out, cws.code.as_bytes());
            encode_document_body(out, &cws.scope);
        }
    }
}

fn encode_document_body(out: &mut Vec<u8>, doc: &Document) {
    for (name, value) in doc {
        out.push(type_byte(value));
        encode_str(out, name.as_bytes());
        encode_ascending(out, value);
    }
    out.push(END);
}

fn encode_str(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.push(0);
    out.push(0);
}

/// The order key of a non-NaN f64: bit pattern made memcmp-comparable.
fn float_order_key(f: f64) -> u64 {
    let f = if f == 0.0 { 0.0 } else { f };
    let bits = f.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1u64 << 63)
    }
}

pub(super) fn float_from_order_key(key: u64) -> f64 {
    if key >> 63 == 1 {
        f64::from_bits(key ^ (1u64 << 63))
    } else {
        f64::from_bits(!key)
    }
}

/// The largest f64 that is not above `x`, and the exact difference.
fn split_int(x: i64) -> (f64, u16) {
    let mut f = x as f64;
    if f as i128 > i128::from(x) {
        // Rounded up: step to the next float towards -infinity. f is not
        // zero here (0 is exact), so stepping the bits is well defined.
        f = if f > 0.0 {
            f64::from_bits(f.to_bits() - 1)
        } else {
            f64::from_bits(f.to_bits() + 1)
        };
    }
    let diff = i128::from(x) - f as i128;
    // Floats near 2^63 are 1024 apart, so the difference is below 2048.
    assert!((0..2048).contains(&diff), "tie-breaker out of range");
    (f, diff as u16)
}

fn encode_number(out: &mut Vec<u8>, number: Number) {
    let (f, d) = match number {
        Number::Int(x) => split_int(x),
        Number::Float(f) => {
            if f.is_nan() {
                out.extend_from_slice(&[0u8; NUMBER_BODY_LEN]);
                return;
            }
            (f, 0)
        }
    };
    out.extend_from_slice(&float_order_key(f).to_be_bytes());
    out.extend_from_slice(&d.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index_key::{decode_key, index_keys, KeyPattern};
    use bson::doc;

    fn enc(v: &Bson) -> Vec<u8> {
        record_key(v)
    }

    #[test]
    fn equal_numbers_share_an_encoding() {
        assert_eq!(enc(&Bson::Int32(1)), enc(&Bson::Double(1.0)));
        assert_eq!(enc(&Bson::Int64(1)), enc(&Bson::Double(1.0)));
        assert_eq!(enc(&Bson::Double(-0.0)), enc(&Bson::Int32(0)));
    }

    #[test]
    fn large_int64_orders_against_doubles() {
        let big = (1i64 << 53) + 1;
        assert!(enc(&Bson::Int64(big)) > enc(&Bson::Double((1i64 << 53) as f64)));
        assert!(enc(&Bson::Int64(big)) < enc(&Bson::Double(((1i64 << 53) + 2) as f64)));
        assert!(enc(&Bson::Int64(i64::MAX)) < enc(&Bson::Double(9.3e18)));
        assert!(enc(&Bson::Int64(i64::MIN)) > enc(&Bson::Double(f64::NEG_INFINITY)));
        assert!(enc(&Bson::Double(f64::NAN)) < enc(&Bson::Double(f64::NEG_INFINITY)));
    }

    #[test]
    fn type_range_holds_exactly_one_type() {
        for descending in [false, true] {
            let (start, end) = type_range(&Bson::Int32(0), descending);
            let mut inside = Vec::new();
            for v in [
                Bson::Double(f64::NAN),
                Bson::Double(f64::INFINITY),
                Bson::Int64(i64::MIN),
            ] {
                encode_value(&mut inside, &v, descending);
                assert!(start <= inside && inside < end);
                inside.clear();
            }
            for v in [
                Bson::Null,
                Bson::String(String::new()),
                Bson::MinKey,
                Bson::MaxKey,
            ] {
                encode_value(&mut inside, &v, descending);
                assert!(inside < start || inside >= end, "{v:?}");
                inside.clear();
            }
        }
    }

    #[test]
    fn prefix_end_increments_last_non_ff_byte() {
        assert_eq!(prefix_end(&[1, 2, 0xFF]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_end(&[]), None);
    }

    #[test]
    fn decode_round_trips() {
        let pattern = KeyPattern::parse(&doc! {"a": 1, "b": -1}).unwrap();
        let keys = index_keys(
            &doc! {"a": "x\u{0}y", "b": {"c": [1, 2.5]}},
            &pattern,
            false,
        )
        .unwrap();
        let decoded = decode_key(&keys.keys[0], &pattern).unwrap();
        assert_eq!(decoded, doc! {"a": "x\u{0}y", "b": {"c": [1, 2.5]}});
    }
}
