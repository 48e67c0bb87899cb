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
//! One exception: a document that may be one to store and holds two `_id`
//! fields also gets the field `DUPLICATE_ID_MARKER`, so that the commands
//! that store documents refuse it as MongoDB does ("can't have multiple
//! _id fields in one document") although the decoded form can hold only
//! one `_id`. Such documents are the decoded document itself (an OP_MSG
//! document sequence's element) and the elements of an array field of it
//! (`insert`'s `documents` in the command body); deeper documents may
//! repeat `_id` as MongoDB lets them (the later value is kept).
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
    let root = Frame {
        elements: raw.iter_elements(),
        built: Built::Document(Document::new()),
        key: String::new(),
    };
    let mut stack = vec![root];
    loop {
        let frame = stack.last_mut().expect("the root frame stays until the end");
        let Some(element) = frame.elements.next() else {
            let done = stack.pop().expect("a frame is open");
            let value = match done.built {
                Built::Document(document) => Bson::Document(document),
                Built::Array(items) => Bson::Array(items),
            };
            let mark = may_be_stored(&stack);
            match stack.last_mut() {
                Some(parent) => parent.built.add(done.key, value, mark),
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
                stack.push(Frame {
                    elements: inner.iter_elements(),
                    built: Built::Document(Document::new()),
                    key,
                });
            }
            RawBsonRef::Array(inner) => {
                stack.push(Frame {
                    elements: inner.iter_elements(),
                    built: Built::Array(Vec::new()),
                    key,
                });
            }
            scalar => {
                let value = Bson::try_from(scalar).map_err(invalid)?;
                let mark = may_be_stored(&stack);
                stack.last_mut().expect("the frame is open").built.add(key, value, mark);
            }
        }
    }
}

/// Whether the innermost open frame is a document that a command may
/// store: the root, or an element of an array field of the root.
fn may_be_stored(stack: &[Frame<'_>]) -> bool {
    matches!(
        stack,
        [_] | [
            _,
            Frame {
                built: Built::Array(_),
                ..
            },
            Frame {
                built: Built::Document(_),
                ..
            }
        ]
    )
}

/// The field a decoded document gets when its bytes held `_id` more than
/// once. Its name starts with a NUL byte, which no BSON field name can
/// hold, so a peer can neither send it nor have it stored: encoding a
/// document that still has it fails.
pub const DUPLICATE_ID_MARKER: &str = "\0duplicate _id";

impl Built {
    fn add(&mut self, key: String, value: Bson, mark_duplicate_id: bool) {
        match self {
            Built::Document(document) => {
                if mark_duplicate_id && key == "_id" && document.contains_key("_id") {
                    document.insert(DUPLICATE_ID_MARKER, true);
                }
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
    fn a_second_id_is_marked() {
        let raw = rawdoc! {"_id": 1, "x": {"_id": 2, "_id": 3}, "_id": 4};
        let decoded = decode_document(&raw).unwrap();
        assert_eq!(decoded.get_i32("_id").unwrap(), 4);
        assert!(decoded.get_bool(DUPLICATE_ID_MARKER).unwrap());
        // An embedded document may repeat `_id`, as in MongoDB.
        let inner = decoded.get_document("x").unwrap();
        assert!(!inner.contains_key(DUPLICATE_ID_MARKER));
        assert_eq!(inner.get_i32("_id").unwrap(), 3);
        // The elements of an array field of the root: `insert`'s documents.
        let command = rawdoc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2, "_id": 3}]};
        let decoded = decode_document(&command).unwrap();
        let documents = decoded.get_array("documents").unwrap();
        assert!(!documents[0].as_document().unwrap().contains_key(DUPLICATE_ID_MARKER));
        assert!(documents[1].as_document().unwrap().contains_key(DUPLICATE_ID_MARKER));
        let deeper = decode_document(&rawdoc! {"u": {"a": [{"_id": 1, "_id": 2}]}}).unwrap();
        assert!(!deeper.to_string().contains("duplicate"));
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
