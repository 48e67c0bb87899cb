//! The local documents as readers see them: each one the only document of
//! a read-only collection `local.<name>`, so that `find` on
//! `local.system.replset` (or `replset.election`) answers as on MongoDB.
//! Such a collection has the `_id_` index only and a UUID derived from its
//! name. When a catalog collection has the same namespace (a standalone's
//! clients may write to `local`), the local document wins: a member's
//! `local` is the store's.

use std::ops::Bound;

use bson::{Bson, Document};
use slipstream_query::index_key::record_key;

use crate::catalog::id_index_spec;
use crate::engine::CollectionInfo;
use crate::local_store::LocalDocuments;
use crate::Timestamp;

const LOCAL_PREFIX: &str = "local.";

/// Whether `ns` is in the `local` database (a cheap test before looking
/// at the documents).
pub(crate) fn is_local_namespace(ns: &str) -> bool {
    ns.starts_with(LOCAL_PREFIX)
}

/// The local document `ns` names, if any.
pub(crate) fn local_document<'a>(documents: &'a LocalDocuments, ns: &str) -> Option<&'a Document> {
    ns.strip_prefix(LOCAL_PREFIX).and_then(|name| documents.get(name))
}

/// The collection of one local document.
pub(crate) fn local_collection_info(ns: &str) -> CollectionInfo {
    CollectionInfo {
        ns: ns.to_string(),
        uuid: crate::session::derived_collection_uuid(ns, Timestamp::ZERO),
        options: Document::new(),
        indexes: vec![id_index_spec()],
        multikey_indexes: Vec::new(),
    }
}

/// The namespaces of the local documents.
pub(crate) fn local_namespaces(documents: &LocalDocuments) -> impl Iterator<Item = String> + '_ {
    documents.keys().map(|name| format!("{LOCAL_PREFIX}{name}"))
}

fn document_record_key(document: &Document) -> Vec<u8> {
    record_key(document.get("_id").unwrap_or(&Bson::Null))
}

fn within(key: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let above = match start {
        Bound::Included(start) => key >= start.as_slice(),
        Bound::Excluded(start) => key > start.as_slice(),
        Bound::Unbounded => true,
    };
    let below = match end {
        Bound::Included(end) => key <= end.as_slice(),
        Bound::Excluded(end) => key < end.as_slice(),
        Bound::Unbounded => true,
    };
    above && below
}

/// `Reader::scan` over the one document: it, when its record key is
/// within the bounds.
pub(crate) fn local_scan(
    document: &Document,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
    limit: usize,
) -> Vec<(Vec<u8>, Document)> {
    let key = document_record_key(document);
    if limit == 0 || !within(&key, start, end) {
        return Vec::new();
    }
    vec![(key, document.clone())]
}

/// `Reader::get` of the one document.
pub(crate) fn local_get(document: &Document, id: &Bson) -> Option<Document> {
    (document_record_key(document) == record_key(id)).then(|| document.clone())
}
