//! `validate`: every document's index keys are in every index, and every
//! index holds no other entries.

use std::ops::Bound;


use crate::apply::{index_store_key, parse_document, table_range};
use crate::catalog::CollectionMeta;
use crate::mvcc::{ReadView, VersionedStore};
use crate::StorageError;

use super::ValidateReport;

/// Keys read per batch.
const VALIDATE_BATCH_MAX: usize = 1024;

/// Number of keys in a table as `view` sees it.
fn count_keys(store: &VersionedStore, view: &ReadView, table: u32) -> Result<u64, StorageError> {
    let (start, end) = table_range(table);
    let mut from = Bound::Included(start);
    let mut count = 0u64;
    loop {
        let batch = store.scan(view, from, Bound::Excluded(end.clone()), false, VALIDATE_BATCH_MAX)?;
        count += batch.len() as u64;
        match batch.last() {
            Some((last, _)) if batch.len() == VALIDATE_BATCH_MAX => from = Bound::Excluded(last.clone()),
            _ => return Ok(count),
        }
    }
}

pub(crate) fn validate_collection(store: &VersionedStore, view: &ReadView, collection: &CollectionMeta) -> Result<ValidateReport, StorageError> {
    let mut report = ValidateReport { valid: true, ..ValidateReport::default() };
    let mut expected_keys = vec![0u64; collection.indexes.len()];
    let (start, end) = table_range(collection.record_table);
    let mut from = Bound::Included(start);
    loop {
        let batch = store.scan(view, from, Bound::Excluded(end.clone()), false, VALIDATE_BATCH_MAX)?;
        for (key, bytes) in &batch {
            report.records += 1;
            let record_key = &key[4..];
            let document = match parse_document(bytes.as_ref()) {
                Ok(document) => document,
                Err(err) => {
                    report.errors.push(format!("record {record_key:?}: {err}"));
                    continue;
                }
            };
            for (position, index) in collection.indexes.iter().enumerate() {
                let keys = match index.keys_of(&document) {
                    Ok(keys) => keys,
                    Err(err) => {
                        report.errors.push(format!("index {}: {err}", index.spec.name));
                        continue;
                    }
                };
                expected_keys[position] += keys.keys.len() as u64;
                for index_key in &keys.keys {
                    if store.get(view, &index_store_key(index.table, index_key, record_key))?.is_none() {
                        report.errors.push(format!("index {} lacks a key of document {}", index.spec.name, document.get("_id").cloned().unwrap_or(bson::Bson::Null)));
                    }
                }
            }
        }
        match batch.last() {
            Some((last, _)) if batch.len() == VALIDATE_BATCH_MAX => from = Bound::Excluded(last.clone()),
            _ => break,
        }
    }
    report.keys_per_index.push(("_id_".to_string(), report.records));
    for (position, index) in collection.indexes.iter().enumerate() {
        let found = count_keys(store, view, index.table)?;
        if found != expected_keys[position] {
            report.errors.push(format!("index {} holds {found} keys, the documents have {}", index.spec.name, expected_keys[position]));
        }
        report.keys_per_index.push((index.spec.name.clone(), found));
    }
    report.valid = report.errors.is_empty();
    Ok(report)
}
