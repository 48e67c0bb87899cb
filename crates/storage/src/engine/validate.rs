//! `validate`: every document's index keys are in every index, every
//! index holds no other entries, and the collection's running totals
//! (`collection_totals.rs`) match its records and indexes.

use std::ops::Bound;


use crate::apply::{index_store_key, parse_document, table_range};
use crate::catalog::CollectionMeta;
use crate::collection_totals::{self, CollectionTotals};
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
    let mut record_bytes = 0u64;
    let (start, end) = table_range(collection.record_table);
    let mut from = Bound::Included(start);
    loop {
        let batch = store.scan(view, from, Bound::Excluded(end.clone()), false, VALIDATE_BATCH_MAX)?;
        for (key, bytes) in &batch {
            report.records += 1;
            record_bytes += bytes.as_ref().len() as u64;
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
    if let Some(stats_table) = collection.stats_table {
        let totals = collection_totals::read(store, view, stats_table)?;
        let errors = totals_errors(&totals, collection, report.records, record_bytes, &report.keys_per_index);
        report.errors.extend(errors);
    }
    report.valid = report.errors.is_empty();
    Ok(report)
}

/// Where a collection's running totals disagree with what the scan found
/// (`keys_per_index`: `_id_` first, then the secondary indexes in order).
fn totals_errors(
    totals: &CollectionTotals,
    collection: &CollectionMeta,
    records: u64,
    record_bytes: u64,
    keys_per_index: &[(String, u64)],
) -> Vec<String> {
    let mut errors = Vec::new();
    if (totals.count, totals.bytes) != (records, record_bytes) {
        errors.push(format!(
            "the collection totals count {} documents of {} bytes, the records are {records} of {record_bytes} bytes",
            totals.count, totals.bytes
        ));
    }
    for (index, (name, found)) in collection.indexes.iter().zip(keys_per_index.iter().skip(1)) {
        let counted = totals.index_keys.get(&index.table).copied();
        if counted != Some(*found) {
            errors.push(format!("the collection totals count {counted:?} keys in index {name}, it holds {found}"));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bson::doc;

    use super::*;
    use crate::apply::record_store_key;
    use crate::kv::{KvBatch, KvEngine};
    use crate::mvcc::BaseView;
    use crate::redb_engine::RedbEngine;
    use crate::Timestamp;

    /// Totals that disagree with the records are reported, and totals that
    /// agree are not.
    #[test]
    fn totals_that_drift_from_the_records_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (kv, _) = RedbEngine::open(&dir.path().join("kv.redb"), &crate::io::StdIo::new()).unwrap();
        kv.commit(KvBatch::default()).unwrap();
        let store = VersionedStore::new(BaseView { kv: kv.snapshot().unwrap(), ts: Timestamp::new(1, 0), floor: None });
        let collection = CollectionMeta {
            ns: "db.c".into(),
            uuid: bson::Uuid::new(),
            options: doc! {},
            record_table: 1,
            indexes: Vec::new(),
            order_table: None,
            id_collated: None,
            stats_table: Some(2),
        };
        let document = doc! {"_id": 1};
        let bytes = document.to_vec().unwrap();
        let record = record_store_key(1, &slipstream_query::index_key::record_key(&bson::Bson::Int32(1)));
        let right = CollectionTotals { count: 1, bytes: bytes.len() as u64, ..CollectionTotals::default() };
        let wrong = CollectionTotals { count: 2, ..right.clone() };
        let totals_key = collection_totals::totals_key(2);
        store.write(
            Timestamp::new(2, 0),
            vec![(record, Some(Arc::from(bytes))), (totals_key.clone(), Some(right.to_value()))],
        );
        store.write(Timestamp::new(3, 0), vec![(totals_key, Some(wrong.to_value()))]);
        let valid = validate_collection(&store, &store.view(Timestamp::new(2, 0)).unwrap(), &collection).unwrap();
        assert!(valid.valid, "{:?}", valid.errors);
        let drifted = validate_collection(&store, &store.view(Timestamp::new(3, 0)).unwrap(), &collection).unwrap();
        assert!(!drifted.valid);
        assert_eq!(drifted.errors.len(), 1, "{:?}", drifted.errors);
        assert!(drifted.errors[0].contains("count 2 documents"), "{:?}", drifted.errors);
    }
}
