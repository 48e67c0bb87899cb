//! Whether a document may be stored, by MongoDB 7.0's rules.
//!
//! Two entry points, because MongoDB checks inserted documents and the
//! results of updates in two places with different codes:
//!
//! - `validate_storable_document`, for documents given to `insert` (and an
//!   upsert's replacement document inserted as is): MongoDB's
//!   `fixDocumentForInsert`. `_id` may not be an array, a regular
//!   expression or `undefined` (BadValue, 2: "can't use an array for
//!   _id"); an `_id` document may not hold a `$`-prefixed field, except
//!   the DBRef form `{$ref, $id, $db}` (DollarPrefixedFieldName, 52); no
//!   more than `STORED_DEPTH_MAX` levels of non-empty nesting (Overflow,
//!   15). Other top-level `$`-prefixed field names are allowed since
//!   MongoDB 5.0. (MongoDB also refuses two `_id` fields, BadValue "can't
//!   have multiple _id fields in one document"; a `Document` holds one
//!   value per key, so the server must check that on the raw BSON.)
//! - `validate_updated_document`, for the document an update or a
//!   replacement produced: MongoDB's `storage_validation::storageValid`.
//!   The `_id` types are InvalidIdField (53, "The '_id' value cannot be of
//!   type array"); a `$`-prefixed field in `_id` is 52 with the prefix
//!   "_id fields may not contain '$'-prefixed fields: "; too deep is 15.
//!
//! Size limits (16 MB) are the server's to check: it holds the encoded
//! bytes already.

use bson::{Bson, Document};

use crate::error::{codes, QueryError};

/// How deeply documents and arrays may nest in a stored document, the root
/// counting as the first level (MongoDB's `maxDepthForUserStorage`). Empty
/// documents and arrays do not count.
pub const STORED_DEPTH_MAX: usize = 100;

/// Overflow.
const OVERFLOW: i32 = 15;

/// InvalidIdField.
const INVALID_ID_FIELD: i32 = 53;

/// Checks a document about to be inserted. See the module comment.
pub fn validate_storable_document(doc: &Document) -> Result<(), QueryError> {
    check_inserted_depth(doc)?;
    match doc.get("_id") {
        Some(Bson::RegularExpression(_)) => Err(QueryError::bad_value("can't use a regex for _id")),
        Some(Bson::Undefined) => Err(QueryError::bad_value("can't use a undefined for _id")),
        Some(Bson::Array(_)) => Err(QueryError::bad_value("can't use an array for _id")),
        Some(Bson::Document(inner)) => check_id_fields(inner),
        _ => Ok(()),
    }
}

/// Checks the document an update or replacement produced. See the module
/// comment.
pub fn validate_updated_document(doc: &Document) -> Result<(), QueryError> {
    check_updated_depth(doc)?;
    match doc.get("_id") {
        Some(Bson::RegularExpression(_)) => Err(invalid_id("regex")),
        Some(Bson::Undefined) => Err(invalid_id("undefined")),
        Some(Bson::Array(_)) => Err(invalid_id("array")),
        Some(Bson::Document(inner)) => check_id_fields(inner).map_err(|e| {
            QueryError::new(
                e.code,
                format!("_id fields may not contain '$'-prefixed fields: {}", e.message),
            )
        }),
        _ => Ok(()),
    }
}

/// The depth rule of `validate_storable_document` alone, for callers that
/// check it before anything else walks the document.
pub fn check_inserted_depth(doc: &Document) -> Result<(), QueryError> {
    if exceeds_depth(doc) {
        return Err(QueryError::new(
            OVERFLOW,
            format!("cannot insert document because it exceeds {STORED_DEPTH_MAX} levels of nesting"),
        ));
    }
    Ok(())
}

/// The depth rule of `validate_updated_document` alone: `Update::apply`
/// checks it as soon as a result exists, before anything else walks it.
pub fn check_updated_depth(doc: &Document) -> Result<(), QueryError> {
    if exceeds_depth(doc) {
        return Err(QueryError::new(
            OVERFLOW,
            format!("Document exceeds maximum nesting depth of {STORED_DEPTH_MAX}"),
        ));
    }
    Ok(())
}

fn invalid_id(type_name: &str) -> QueryError {
    QueryError::new(INVALID_ID_FIELD, format!("The '_id' value cannot be of type {type_name}"))
}

/// MongoDB's `storageValidEmbedded`: no `$`-prefixed field names at any
/// level of the `_id` value, except a DBRef's leading `$ref` (a string),
/// `$id` and optional `$db` (a string).
fn check_id_fields(doc: &Document) -> Result<(), QueryError> {
    let names: Vec<&String> = doc.keys().collect();
    let dbref_fields = dbref_prefix_len(doc);
    for (position, name) in names.iter().enumerate() {
        if name.starts_with('$') && position >= dbref_fields {
            return Err(QueryError::new(
                codes::DOLLAR_PREFIXED_FIELD_NAME,
                format!("{name} is not valid for storage."),
            ));
        }
    }
    // MongoDB does not look inside a DBRef's `$ref` and `$id` values.
    for value in doc.values().skip(dbref_fields.min(2)) {
        check_id_value(value)?;
    }
    Ok(())
}

fn check_id_value(value: &Bson) -> Result<(), QueryError> {
    match value {
        Bson::Document(inner) => check_id_fields(inner),
        Bson::Array(items) => items.iter().try_for_each(check_id_value),
        Bson::JavaScriptCodeWithScope(code) => check_id_fields(&code.scope),
        _ => Ok(()),
    }
}

/// How many leading fields form a DBRef: `$ref` (a string) then `$id`,
/// then optionally `$db` (a string); 0 when the document is no DBRef.
fn dbref_prefix_len(doc: &Document) -> usize {
    let mut fields = doc.iter();
    match (fields.next(), fields.next()) {
        (Some((r, Bson::String(_))), Some((i, _))) if r == "$ref" && i == "$id" => {
            match fields.next() {
                Some((d, Bson::String(_))) if d == "$db" => 3,
                _ => 2,
            }
        }
        _ => 0,
    }
}

/// Whether non-empty documents or arrays nest deeper than
/// `STORED_DEPTH_MAX` levels (the root being level 1). Walks with an
/// explicit stack, so that a hostile document cannot overflow ours.
fn exceeds_depth(doc: &Document) -> bool {
    // Each entry is a value and the level of the container holding it.
    let mut stack: Vec<(&Bson, usize)> = doc.values().map(|v| (v, 1)).collect();
    while let Some((value, level)) = stack.pop() {
        let children: Vec<&Bson> = match value {
            Bson::Document(inner) => inner.values().collect(),
            Bson::Array(items) => items.iter().collect(),
            _ => continue,
        };
        if children.is_empty() {
            continue;
        }
        if level == STORED_DEPTH_MAX {
            return true;
        }
        stack.extend(children.into_iter().map(|child| (child, level + 1)));
    }
    false
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    /// `levels` nested non-empty documents under the root.
    fn nested(levels: usize, innermost: Bson) -> Document {
        let mut value = innermost;
        for _ in 0..levels {
            value = Bson::Document(doc! {"a": value});
        }
        match value {
            Bson::Document(d) => d,
            other => doc! {"a": other},
        }
    }

    #[test]
    fn depth_counts_non_empty_levels_from_the_root() {
        // The root plus 99 nested documents holding a scalar: 100 levels.
        assert!(!exceeds_depth(&nested(100, Bson::Int32(1))));
        assert!(exceeds_depth(&nested(101, Bson::Int32(1))));
        // An empty document at level 101 does not count.
        assert!(!exceeds_depth(&nested(100, Bson::Document(doc! {}))));
        assert!(!exceeds_depth(&nested(100, Bson::Array(vec![]))));
        assert!(exceeds_depth(&nested(100, Bson::Array(vec![Bson::Int32(1)]))));
    }

    #[test]
    fn dbref_prefixes() {
        assert_eq!(dbref_prefix_len(&doc! {"$ref": "c", "$id": 1}), 2);
        assert_eq!(dbref_prefix_len(&doc! {"$ref": "c", "$id": 1, "$db": "d"}), 3);
        assert_eq!(dbref_prefix_len(&doc! {"$ref": "c", "$id": 1, "$db": 5}), 2);
        assert_eq!(dbref_prefix_len(&doc! {"$ref": 1, "$id": 1}), 0);
        assert_eq!(dbref_prefix_len(&doc! {"$id": 1, "$ref": "c"}), 0);
    }
}
