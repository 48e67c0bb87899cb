//! Preparing a document for `insert`: `_id` first (generated when
//! missing), no `$`-prefixed fields inside `_id`, then the rules of
//! `exec::stored_document`.

use bson::{oid::ObjectId, Bson, Document};

use crate::error::CommandError;
use crate::exec::stored_document::check_inserted;

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
    // Depth first: nothing else walks a document deeper than may be stored.
    slipstream_query::validate::check_inserted_depth(document)?;
    let prepared = with_id_first(document, || Bson::ObjectId(ObjectId::new()));
    check_inserted(&prepared)?;
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
        let big = doc! {"s": "x".repeat(crate::exec::limits::DOCUMENT_BYTES_MAX)};
        assert_eq!(prepare_insert(&Bson::Document(big)).unwrap_err().code, 10334);
        let mut deep = doc! {"a": 1};
        for _ in 0..slipstream_query::validate::STORED_DEPTH_MAX {
            deep = doc! {"a": deep};
        }
        assert_eq!(prepare_insert(&Bson::Document(deep)).unwrap_err().code, 15);
    }
}
