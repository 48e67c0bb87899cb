//! A collection's running totals: its document count, the BSON bytes of its
//! documents and the key count of each secondary index, kept in step with
//! every write so that `collStats`, `dbStats`, `listDatabases` and a count
//! without a filter answer without reading a single document (MongoDB's
//! "fast counts", which WiredTiger keeps in its size storer).
//!
//! They live in the collection's stats table (`CollectionMeta::stats_table`)
//! under one key, `TOTALS_KEY`, whose value is (all big-endian):
//! `count (u64) ++ bytes (u64) ++ n × (index table id (u32) ++ keys (u64))`,
//! the index pairs sorted by table id. No key means all zero (a collection
//! nothing was written to yet).
//!
//! The key is an ordinary versioned key, written by the applier at the
//! timestamp of the entry whose writes it counts, so it is journaled (by
//! replaying the entry), checkpointed, recovered, rolled back, bulk-loaded
//! and read at a snapshot exactly as the records are; the table is dropped
//! and renamed with the collection. Writes to the store are serialised by
//! the engine's write lock and each applier starts from the newest state,
//! so the newest totals plus this applier's changes are exact.

use std::collections::BTreeMap;

use crate::apply::record_store_key;
use crate::mvcc::{ReadView, Value, VersionedStore};
use crate::StorageError;

/// The one key of a stats table (after the table id).
const TOTALS_KEY: u8 = 0;
/// Bytes of the count and the BSON bytes.
const HEADER_BYTES: usize = 16;
/// Bytes of one index's table id and key count.
const INDEX_PAIR_BYTES: usize = 12;
/// Most secondary indexes a value counts: MongoDB's 64 indexes per
/// collection, `_id_` included, with room to spare for a corrupt length to
/// be caught rather than trusted.
const INDEXES_MAX: usize = 64;

/// What a collection holds, as its totals count it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectionTotals {
    pub count: u64,
    pub bytes: u64,
    /// Keys per secondary index, by index table id.
    pub index_keys: BTreeMap<u32, u64>,
}

/// What one document write changes in the totals.
#[derive(Clone, Debug, Default)]
pub(crate) struct TotalsDelta {
    /// BSON bytes of the document before (None: it was absent).
    pub old_bytes: Option<usize>,
    /// BSON bytes of the document after (None: it is deleted).
    pub new_bytes: Option<usize>,
    /// (index table, keys removed, keys added) per secondary index.
    pub index_keys: Vec<(u32, u64, u64)>,
}

impl CollectionTotals {
    /// Applies one document write. A count or size that would go below zero
    /// means the totals no longer match the records: a bug, never data.
    pub(crate) fn apply(&mut self, delta: &TotalsDelta) {
        if let Some(old) = delta.old_bytes {
            assert!(self.count >= 1, "collection totals: a removal from a count of zero");
            assert!(
                self.bytes >= old as u64,
                "collection totals: {old} bytes removed from {}",
                self.bytes
            );
            self.count -= 1;
            self.bytes -= old as u64;
        }
        if let Some(new) = delta.new_bytes {
            self.count += 1;
            self.bytes += new as u64;
        }
        for &(table, removed, added) in &delta.index_keys {
            let keys = self.index_keys.entry(table).or_default();
            assert!(
                *keys >= removed,
                "collection totals: {removed} keys removed from {keys} in table {table}"
            );
            *keys = *keys - removed + added;
        }
    }

    pub(crate) fn to_value(&self) -> Value {
        assert!(
            self.index_keys.len() <= INDEXES_MAX,
            "collection totals: {} indexes",
            self.index_keys.len()
        );
        let mut bytes = Vec::with_capacity(HEADER_BYTES + INDEX_PAIR_BYTES * self.index_keys.len());
        bytes.extend_from_slice(&self.count.to_be_bytes());
        bytes.extend_from_slice(&self.bytes.to_be_bytes());
        for (table, keys) in &self.index_keys {
            bytes.extend_from_slice(&table.to_be_bytes());
            bytes.extend_from_slice(&keys.to_be_bytes());
        }
        Value::from(bytes)
    }

    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<CollectionTotals, StorageError> {
        let pairs_bytes = bytes
            .len()
            .checked_sub(HEADER_BYTES)
            .filter(|rest| rest % INDEX_PAIR_BYTES == 0);
        let Some(pairs_bytes) = pairs_bytes.filter(|rest| rest / INDEX_PAIR_BYTES <= INDEXES_MAX) else {
            return Err(StorageError::Corruption(format!(
                "collection totals of {} bytes",
                bytes.len()
            )));
        };
        let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
        let mut totals = CollectionTotals {
            count: u64_at(0),
            bytes: u64_at(8),
            index_keys: BTreeMap::new(),
        };
        for at in (HEADER_BYTES..HEADER_BYTES + pairs_bytes).step_by(INDEX_PAIR_BYTES) {
            let table = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("four bytes"));
            totals.index_keys.insert(table, u64_at(at + 4));
        }
        Ok(totals)
    }
}

/// The store key of a stats table's totals.
pub(crate) fn totals_key(stats_table: u32) -> Vec<u8> {
    record_store_key(stats_table, &[TOTALS_KEY])
}

/// The totals of the collection whose stats table is `stats_table`, as
/// `view` sees them.
pub(crate) fn read(
    store: &VersionedStore,
    view: &ReadView,
    stats_table: u32,
) -> Result<CollectionTotals, StorageError> {
    match store.get(view, &totals_key(stats_table))? {
        Some(bytes) => CollectionTotals::from_bytes(bytes.as_ref()),
        None => Ok(CollectionTotals::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_round_trips_and_refuses_bad_lengths() {
        let totals = CollectionTotals {
            count: 3,
            bytes: 700,
            index_keys: BTreeMap::from([(4, 3), (9, 5)]),
        };
        let value = totals.to_value();
        assert_eq!(value.len(), HEADER_BYTES + 2 * INDEX_PAIR_BYTES);
        assert_eq!(CollectionTotals::from_bytes(&value).unwrap(), totals);
        assert!(CollectionTotals::from_bytes(&value[..HEADER_BYTES + 5]).is_err());
        assert!(CollectionTotals::from_bytes(&value[..7]).is_err());
    }

    #[test]
    fn deltas_add_replace_and_remove() {
        let mut totals = CollectionTotals::default();
        totals.apply(&TotalsDelta {
            old_bytes: None,
            new_bytes: Some(40),
            index_keys: vec![(5, 0, 2)],
        });
        totals.apply(&TotalsDelta {
            old_bytes: None,
            new_bytes: Some(60),
            index_keys: vec![(5, 0, 1)],
        });
        totals.apply(&TotalsDelta {
            old_bytes: Some(40),
            new_bytes: Some(45),
            index_keys: vec![(5, 2, 1)],
        });
        assert_eq!(
            totals,
            CollectionTotals {
                count: 2,
                bytes: 105,
                index_keys: BTreeMap::from([(5, 2)])
            }
        );
        totals.apply(&TotalsDelta {
            old_bytes: Some(60),
            new_bytes: None,
            index_keys: vec![(5, 1, 0)],
        });
        assert_eq!(
            totals,
            CollectionTotals {
                count: 1,
                bytes: 45,
                index_keys: BTreeMap::from([(5, 1)])
            }
        );
    }
}
