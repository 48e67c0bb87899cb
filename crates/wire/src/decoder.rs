//! Raw BSON to `Document` without recursion.
//!
//! The `bson` crate's own conversion (`Document::try_from(&RawDocument)`)
//! recurses once per level and copies every embedded document's bytes
//! into a buffer of its own before converting it, so a document nested
//! `d` deep costs `d` large stack frames (several KiB each in a debug
//! build) and `d²` copied bytes. This decoder keeps the open documents
//! and arrays on a heap stack instead; scalars still go through the
//! crate's conversion, so every value decodes exactly as it would there
//! (duplicate keys included: a later value replaces an earlier one in its
//! position, as `Document::insert` does).
//!
//! Callers bound the depth first (`check_nesting_depth`): the heap stack
//! is then at most `MAX_BSON_DEPTH + 1` frames.

use bson::raw::{RawBsonRef, RawIter};
use bson::{Bson, Document, RawDocument};

use crate::WireError;

/// A document or array being filled, the iterator over its raw elements,
/// and the key it goes under in its parent.
struct Frame<'a> {
    elements: RawIter<'a>,
    built: Built,
    key: String,
}

enum Built {
    Document(Document),
    Array(Vec<Bson>),
}

/// Decodes `raw` into a `Document`.
pub fn decode_document(raw: &RawDocument) -> Result<Document, WireError> {
    let root = Frame { elements: raw.iter_elements(), built: Built::Document(Document::new()), key: String::new() };
    let mut stack = vec![root];
    loop {
        let frame = stack.last_mut().expect("the root frame stays until the end");
        let Some(element) = frame.elements.next() else {
            let done = stack.pop().expect("a frame is open");
            let value = match done.built {
                Built::Document(document) => Bson::Document(document),
                Built::Array(items) => Bson::Array(items),
            };
            match stack.last_mut() {
                Some(parent) => parent.built.add(done.key, value),
                None => match value {
                    Bson::Document(document) => return Ok(document),
                    _ => unreachable!("the root frame is a document"),
                },
            }
            continue;
        };
        let element = element.map_err(invalid)?;
        let key = element.key().as_str().to_owned();
        match element.value().map_err(invalid)? {
            RawBsonRef::Document(inner) => {
                stack.push(Frame { elements: inner.iter_elements(), built: Built::Document(Document::new()), key });
            }
            RawBsonRef::Array(inner) => {
                stack.push(Frame { elements: inner.iter_elements(), built: Built::Array(Vec::new()), key });
            }
            scalar => frame.built.add(key, Bson::try_from(scalar).map_err(invalid)?),
        }
    }
}

impl Built {
    fn add(&mut self, key: String, value: Bson) {
        match self {
            Built::Document(document) => {
                document.insert(key, value);
            }
            // An array's keys are its positions; the crate ignores them too.
            Built::Array(items) => items.push(value),
        }
    }
}

fn invalid(error: impl std::fmt::Display) -> WireError {
    WireError::InvalidBson(error.to_string())
}

#[cfg(test)]
mod tests {
    use bson::{doc, rawdoc, Binary, JavaScriptCodeWithScope, Regex};

    use super::*;

    #[test]
    fn decodes_as_the_bson_crate_does() {
        let document = doc! {
            "a": 1, "b": {"c": [1, {"d": "x"}, [2, [3]]], "e": {}}, "f": [], "g": null,
            "h": Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2] },
            "i": Regex { pattern: "p".to_string().try_into().unwrap(), options: "i".to_string().try_into().unwrap() },
            "j": JavaScriptCodeWithScope { code: "f()".into(), scope: doc! {"k": [1]} },
            "l": 2.5, "m": bson::Timestamp { time: 1, increment: 2 }, "n": i64::MAX,
        };
        let bytes = document.to_vec().unwrap();
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        let decoded = decode_document(raw).unwrap();
        assert_eq!(decoded, Document::try_from(raw).unwrap());
        assert_eq!(decoded.to_vec().unwrap(), bytes, "same fields in the same order");
    }

    #[test]
    fn duplicate_keys_keep_the_first_position_and_the_last_value() {
        let raw = rawdoc! {"a": 1, "b": 2, "a": 3};
        let decoded = decode_document(&raw).unwrap();
        assert_eq!(decoded, Document::try_from(raw.as_ref()).unwrap());
        assert_eq!(decoded.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(decoded.get_i32("a").unwrap(), 3);
    }

    #[test]
    fn malformed_elements_are_invalid_bson() {
        let mut bytes = doc! {"a": {"b": "text"}}.to_vec().unwrap();
        let string_at = bytes.len() - 8;
        bytes[string_at] = 0xff; // the string's length, now past its end
        let raw = RawDocument::from_bytes(&bytes).unwrap();
        assert!(matches!(decode_document(raw), Err(WireError::InvalidBson(_))));
    }
}
