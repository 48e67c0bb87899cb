//! The encoded size of BSON values, computed without encoding them, so that
//! reply batches can be cut at the 16 MiB cap without serializing every
//! document twice.

use bson::{Bson, Document};

/// The size in bytes of `document` encoded as BSON.
pub fn document_size(document: &Document) -> usize {
    // int32 length + elements + trailing NUL.
    4 + document
        .iter()
        .map(|(key, value)| element_size(key.len(), value))
        .sum::<usize>()
        + 1
}

fn element_size(key_len: usize, value: &Bson) -> usize {
    // type byte + key cstring + value.
    1 + key_len + 1 + value_size(value)
}

fn string_size(s: &str) -> usize {
    4 + s.len() + 1
}

/// The size in bytes of `value`'s encoding (without type byte and key).
pub fn value_size(value: &Bson) -> usize {
    match value {
        Bson::Double(_) | Bson::Int64(_) | Bson::DateTime(_) | Bson::Timestamp(_) => 8,
        Bson::Int32(_) => 4,
        Bson::Decimal128(_) => 16,
        Bson::ObjectId(_) => 12,
        Bson::Boolean(_) => 1,
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => 0,
        Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => string_size(s),
        Bson::Document(d) => document_size(d),
        Bson::Array(items) => {
            let elements: usize = items
                .iter()
                .enumerate()
                .map(|(index, item)| element_size(decimal_digits(index), item))
                .sum();
            4 + elements + 1
        }
        Bson::Binary(binary) => {
            // The old binary subtype repeats the length inside the payload.
            let old_subtype_extra = if binary.subtype == bson::spec::BinarySubtype::BinaryOld {
                4
            } else {
                0
            };
            4 + 1 + old_subtype_extra + binary.bytes.len()
        }
        Bson::RegularExpression(regex) => regex.pattern.as_str().len() + 1 + regex.options.as_str().len() + 1,
        // Rare types whose parts are not all public: measure an encoding.
        Bson::JavaScriptCodeWithScope(_) | Bson::DbPointer(_) => measured_value_size(value),
    }
}

fn measured_value_size(value: &Bson) -> usize {
    let mut wrapper = Document::new();
    wrapper.insert("x", value.clone());
    // 4 (length) + 1 (type) + 2 ("x\0") + value + 1 (NUL).
    wrapper.to_vec().map(|bytes| bytes.len() - 8).unwrap_or(0)
}

/// The number of decimal digits of `n`: the length of an array element's
/// key ("0", "1", ...).
pub(crate) fn decimal_digits(mut n: usize) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, Binary, DateTime, Decimal128, Regex, Timestamp};

    #[test]
    fn document_size_matches_the_encoder_for_every_common_type() {
        let items: Vec<Bson> = (0..25).map(Bson::Int32).collect();
        let document = doc! {
            "_id": ObjectId::new(),
            "d": 1.5,
            "s": "hello",
            "n": Bson::Null,
            "b": true,
            "i": 7,
            "l": 7i64,
            "t": Timestamp { time: 1, increment: 2 },
            "dt": DateTime::from_millis(5),
            "dec": Decimal128::from_bytes([0; 16]),
            "bin": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "re": Regex { pattern: "a.*".to_string().try_into().unwrap(), options: "i".to_string().try_into().unwrap() },
            "arr": items,
            "sub": { "x": [ { "y": "z" } ], "min": Bson::MinKey },
            "code": Bson::JavaScriptCode("f()".into()),
        };
        assert_eq!(document_size(&document), document.to_vec().unwrap().len());
    }

    #[test]
    fn empty_document_is_five_bytes() {
        assert_eq!(document_size(&Document::new()), 5);
    }
}
