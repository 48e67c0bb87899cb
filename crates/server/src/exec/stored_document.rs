//! The rules a document meets before it is stored, whichever command
//! stores it: `insert`, `update` and `findAndModify` (results and
//! upserts), and `$out` / `$merge`.
//!
//! Depth comes first: a document nested deeper than
//! `validate::STORED_DEPTH_MAX` is refused before anything else walks it
//! (size, `_id`, the oplog form of an update, index keys), so that every
//! stored document, and every document later read back, stays within the
//! depth the query code is proven to handle. MongoDB words the error one
//! way for inserted documents and another for update results.

use bson::{Bson, Document};
use slipstream_query::validate::{check_inserted_depth, check_updated_depth};

use super::limits::DOCUMENT_BYTES_MAX;
use super::size::document_size;
use crate::error::CommandError;

/// BSONObjectTooLarge (10334).
pub fn too_large(size: usize) -> CommandError {
    CommandError::new(
        10334,
        format!("object to insert too large. size in bytes: {size}, max size: {DOCUMENT_BYTES_MAX}"),
    )
}

/// Checks a document about to be inserted (`insert`, `$out`, `$merge`).
pub fn check_inserted(document: &Document) -> Result<(), CommandError> {
    check_inserted_depth(document)?;
    check_id_and_size(document)
}

/// Checks a document an update produced (an update's or findAndModify's
/// result, an upsert, `$merge`'s `whenMatched`).
pub fn check_updated(document: &Document) -> Result<(), CommandError> {
    check_updated_depth(document)?;
    check_id_and_size(document)
}

fn check_id_and_size(document: &Document) -> Result<(), CommandError> {
    if document.contains_key(slipstream_wire::DUPLICATE_ID_MARKER) {
        // The request's bytes held `_id` twice (see the wire decoder).
        return Err(CommandError::new(2, "can't have multiple _id fields in one document"));
    }
    if let Some(id) = document.get("_id") {
        match id {
            Bson::Array(_) => return Err(CommandError::new(53, "The '_id' value cannot be of type array")),
            Bson::RegularExpression(_) => return Err(CommandError::new(2, "can't use a regex for _id")),
            Bson::Undefined => return Err(CommandError::new(2, "can't use a undefined for _id")),
            _ => {}
        }
    }
    let size = document_size(document);
    if size > DOCUMENT_BYTES_MAX {
        return Err(too_large(size));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn nested(levels: usize) -> Document {
        let mut document = doc! {"a": 1};
        for _ in 1..levels {
            document = doc! {"a": document};
        }
        document
    }

    #[test]
    fn depth_is_refused_with_the_wording_of_each_path() {
        check_inserted(&nested(100)).unwrap();
        check_updated(&nested(100)).unwrap();
        let inserted = check_inserted(&nested(101)).unwrap_err();
        assert_eq!(
            (inserted.code, inserted.message.as_str()),
            (15, "cannot insert document because it exceeds 100 levels of nesting")
        );
        let updated = check_updated(&nested(101)).unwrap_err();
        assert_eq!((updated.code, updated.message.as_str()), (15, "Document exceeds maximum nesting depth of 100"));
    }
}
