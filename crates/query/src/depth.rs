//! How deeply values nest, and the limits that keep nesting the query
//! language builds by itself within reach of a thread's stack.
//!
//! Nearly every walk over a value recurses once per level: this crate's
//! comparison, matching, projection and update code, and the `bson` crate's
//! own clone, drop, equality and encoding. What a client sends is bounded
//! before it arrives (the wire layer refuses a message nested deeper than
//! maxBSONDepth, 200), and stored documents are bounded by
//! `validate::STORED_DEPTH_MAX`. What is left is nesting that no single
//! input spells out, which this module bounds with MongoDB's errors:
//!
//! - a dotted path names as many levels as it has components, and writing
//!   to it creates them (`{$set: {"a.a.a...": 1}}`): a path may have at
//!   most `FIELD_PATH_PARTS_MAX` components (MongoDB's `FieldPath` limit);
//! - an expression loop can wrap its own result (`$reduce` with
//!   `in: {a: "$$value"}`), and stage after stage can wrap a field one level
//!   deeper each time: values a pipeline builds may nest at most
//!   `BSON_DEPTH_MAX` levels, checked where they are built.
//!
//! The walks here keep their own stack, so a value of any depth can be
//! measured without recursion.

use bson::{Bson, Document};

use crate::error::QueryError;

/// How deeply a value the query language builds may nest below the
/// document holding it: MongoDB's maxBSONDepth, the same limit the wire
/// layer applies to what clients send.
pub const BSON_DEPTH_MAX: usize = 200;

/// How many components a dotted field path may have (MongoDB's
/// `FieldPath` refuses more than maxBSONDepth).
pub const FIELD_PATH_PARTS_MAX: usize = 200;

/// Overflow.
pub const OVERFLOW: i32 = 15;

/// Whether `document` has a document or array more than `limit` levels
/// below it (its own fields' values are at level 1).
pub fn document_exceeds(document: &Document, limit: usize) -> bool {
    any_container_deeper(document.values().map(|value| (value, 1)).collect(), limit)
}

/// Whether `value` is, or holds, a document or array more than `limit`
/// levels deep, `value` itself being at level 1.
pub fn value_exceeds(value: &Bson, limit: usize) -> bool {
    any_container_deeper(vec![(value, 1)], limit)
}

/// The walk behind both: each entry is a value and its level. A
/// code-with-scope value counts two levels (itself and its scope
/// document), as MongoDB's validator and the wire layer count it.
fn any_container_deeper(mut stack: Vec<(&Bson, usize)>, limit: usize) -> bool {
    while let Some((value, level)) = stack.pop() {
        let (children, levels): (Box<dyn Iterator<Item = &Bson>>, usize) = match value {
            Bson::Document(inner) => (Box::new(inner.values()), 1),
            Bson::Array(items) => (Box::new(items.iter()), 1),
            Bson::JavaScriptCodeWithScope(code) => (Box::new(code.scope.values()), 2),
            _ => continue,
        };
        if level + levels - 1 > limit {
            return true;
        }
        stack.extend(children.map(|child| (child, level + levels)));
    }
    false
}

/// Refuses a document the query language built (a stage's output, an
/// update's result before the storage rules) that nests deeper than
/// `BSON_DEPTH_MAX`: MongoDB's error when such a document is converted to
/// BSON.
pub fn check_built_document(document: &Document) -> Result<(), QueryError> {
    if document_exceeds(document, BSON_DEPTH_MAX) {
        return Err(too_deep_to_convert());
    }
    Ok(())
}

/// Overflow (15): MongoDB's `Document::toBson` message.
pub fn too_deep_to_convert() -> QueryError {
    QueryError::new(
        OVERFLOW,
        format!("cannot convert document to BSON because it exceeds the limit of {BSON_DEPTH_MAX} levels of nesting"),
    )
}

/// Refuses a dotted path of more than `FIELD_PATH_PARTS_MAX` components,
/// counted without splitting the string.
pub fn check_field_path(path: &str) -> Result<(), QueryError> {
    if path_parts(path) > FIELD_PATH_PARTS_MAX {
        return Err(QueryError::new(OVERFLOW, "FieldPath is too long"));
    }
    Ok(())
}

/// How many components a dotted path has.
pub fn path_parts(path: &str) -> usize {
    path.bytes().filter(|&byte| byte == b'.').count() + 1
}

#[cfg(test)]
mod tests {
    use bson::{doc, JavaScriptCodeWithScope};

    use super::*;

    /// A document whose innermost container is `levels` below it.
    fn nested(levels: usize, array: bool) -> Document {
        let mut value = Bson::Int32(1);
        for _ in 0..levels {
            value = if array { Bson::Array(vec![value]) } else { Bson::Document(doc! {"a": value}) };
        }
        doc! {"a": value}
    }

    #[test]
    fn levels_count_from_the_fields_of_the_document() {
        for array in [false, true] {
            assert!(!document_exceeds(&nested(0, array), 0));
            assert!(document_exceeds(&nested(1, array), 0));
            assert!(!document_exceeds(&nested(BSON_DEPTH_MAX, array), BSON_DEPTH_MAX));
            assert!(document_exceeds(&nested(BSON_DEPTH_MAX + 1, array), BSON_DEPTH_MAX));
            let value = Bson::Document(nested(BSON_DEPTH_MAX - 1, array));
            assert!(!value_exceeds(&value, BSON_DEPTH_MAX));
            assert!(value_exceeds(&Bson::Array(vec![value]), BSON_DEPTH_MAX));
        }
        let scope =
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code: "f()".into(), scope: nested(1, false) });
        assert!(value_exceeds(&scope, 2));
        assert!(!value_exceeds(&scope, 3));
        assert!(check_built_document(&nested(BSON_DEPTH_MAX + 1, false)).is_err_and(|e| e.code == OVERFLOW));
    }

    #[test]
    fn measuring_never_recurses() {
        // Far deeper than any stack could follow recursively. Built and
        // torn down without recursion too (the `bson` crate's drop
        // recurses), by moving each level out of its parent.
        let mut value = Bson::Int32(1);
        for _ in 0..100_000 {
            value = Bson::Array(vec![value]);
        }
        assert!(value_exceeds(&value, BSON_DEPTH_MAX));
        while let Bson::Array(mut items) = value {
            value = items.pop().unwrap_or(Bson::Null);
        }
    }

    #[test]
    fn path_parts_are_counted_without_splitting() {
        assert_eq!(path_parts("a"), 1);
        assert_eq!(path_parts("a.b.c"), 3);
        check_field_path(&vec!["x"; FIELD_PATH_PARTS_MAX].join(".")).unwrap();
        assert!(check_field_path(&vec!["x"; FIELD_PATH_PARTS_MAX + 1].join(".")).is_err_and(|e| e.code == OVERFLOW));
    }
}
