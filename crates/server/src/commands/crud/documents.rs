//! Checking a document before it is stored: `_id` first (generated when
//! missing), no `$`-prefixed fields inside `_id`, the 16 MiB limit.

use bson::{oid::ObjectId, Bson, Document};

use crate::error::CommandError;
use crate::exec::limits::DOCUMENT_BYTES_MAX;
use crate::exec::size::document_size;

/// BSONObjectTooLarge (10334).
pub fn too_large(size: usize) -> CommandError {
    CommandError::new(
        10334,
        format!("object to insert too large. size in bytes: {size}, max size: {DOCUMENT_BYTES_MAX}"),
    )
}

/// Checks a document that is about to be stored (inserted, or the result of
/// an update): `_id` valid, size within the limit.
pub fn check_stored(document: &Document) -> Result<(), CommandError> {
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

/// A document to insert: `_id` moved (or generated) to the front, then
/// checked.
pub fn prepare_insert(value: &Bson) -> Result<Document, CommandError> {
    let Bson::Document(document) = value else {
        return Err(CommandError::new(14, "documents to insert must be objects"));
    };
    // MongoDB 5.0+ stores `$`-prefixed and dotted field names anywhere
    // except inside `_id`.
    if let Some(Bson::Document(id)) = document.get("_id") {
        if let Some(key) = id.keys().find(|key| key.starts_with('$')) {
            return Err(CommandError::new(
                52,
                format!("_id fields may not contain '$'-prefixed fields: {key} is not valid for storage."),
            ));
        }
    }
    let prepared = with_id_first(document, || Bson::ObjectId(ObjectId::new()));
    check_stored(&prepared)?;
    Ok(prepared)
}

/// `document` with `_id` as its first field; `make_id` supplies one when
/// it has none.
pub fn with_id_first(document: &Document, make_id: impl FnOnce() -> Bson) -> Document {
    if document.keys().next().map(String::as_str) == Some("_id") {
        return document.clone();
    }
    let mut out = Document::new();
    out.insert("_id", document.get("_id").cloned().unwrap_or_else(make_id));
    for (key, value) in document {
        if key != "_id" {
            out.insert(key.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn id_is_generated_first() {
        let prepared = prepare_insert(&Bson::Document(doc! {"x": 1})).unwrap();
        assert_eq!(prepared.keys().next().unwrap(), "_id");
        assert!(matches!(prepared.get("_id"), Some(Bson::ObjectId(_))));
    }

    #[test]
    fn existing_id_moves_to_the_front() {
        let prepared = prepare_insert(&Bson::Document(doc! {"x": 1, "_id": 5})).unwrap();
        assert_eq!(prepared, doc! {"_id": 5, "x": 1});
        assert_eq!(prepared.keys().collect::<Vec<_>>(), ["_id", "x"]);
    }

    #[test]
    fn bad_documents_are_refused() {
        assert_eq!(prepare_insert(&Bson::Document(doc! {"_id": [1]})).unwrap_err().code, 53);
        assert_eq!(
            prepare_insert(&Bson::Document(doc! {"_id": {"$a": 1}}))
                .unwrap_err()
                .code,
            52
        );
        assert!(prepare_insert(&Bson::Document(doc! {"_id": 1, "$a": 1, "b.c": 2})).is_ok());
        let big = doc! {"s": "x".repeat(DOCUMENT_BYTES_MAX)};
        assert_eq!(prepare_insert(&Bson::Document(big)).unwrap_err().code, 10334);
    }
}
