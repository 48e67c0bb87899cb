//! Capped collections through the engine: reading in natural order, and the
//! primary's trimming, which deletes the oldest documents with ordinary
//! delete entries (as MongoDB 5.0+ replicates capped deletes), so members
//! never trim on their own and stay identical.

use std::ops::Bound;

use bson::{Bson, Document};

use super::{Reader, Writer};
use crate::apply::{parse_document, record_store_key, table_prefix, Result};
use crate::capped::{limits, read_totals, split_position, Totals, ORDER_PREFIX};
use crate::{OpTime, StorageError};

/// Oldest documents read per step of a trim.
const TRIM_BATCH_MAX: usize = 256;

/// The store key of a table-local order key.
fn order_store_key(table: u32, position: &[u8]) -> Vec<u8> {
    let mut local = Vec::with_capacity(1 + position.len());
    local.push(ORDER_PREFIX);
    local.extend_from_slice(position);
    record_store_key(table, &local)
}

fn order_lower(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(position) => Bound::Included(order_store_key(table, &position)),
        Bound::Excluded(position) => Bound::Excluded(order_store_key(table, &position)),
        Bound::Unbounded => Bound::Included(order_store_key(table, &[])),
    }
}

fn order_upper(table: u32, bound: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(position) => Bound::Included(order_store_key(table, &position)),
        Bound::Excluded(position) => Bound::Excluded(order_store_key(table, &position)),
        Bound::Unbounded => {
            let mut end = table_prefix(table).to_vec();
            end.push(ORDER_PREFIX + 1);
            Bound::Excluded(end)
        }
    }
}

impl Reader {
    /// Documents in natural order: insertion order for a capped collection
    /// (positions are `seq ++ record key`, see `capped.rs`), record-key order
    /// otherwise (positions are record keys, as `scan`). Bounds are positions.
    pub fn scan_natural(
        &self,
        ns: &str,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Document)>> {
        let Some(collection) = self.collection(ns) else {
            return self.scan(ns, start, end, reverse, limit);
        };
        let Some(table) = collection.order_table else {
            return self.scan(ns, start, end, reverse, limit);
        };
        let keys = self.inner.store.scan(
            &self.view,
            order_lower(table, start),
            order_upper(table, end),
            reverse,
            limit,
        )?;
        let mut out = Vec::with_capacity(keys.len());
        for (key, _) in keys {
            // Table id, then the order prefix.
            let position = key[5..].to_vec();
            let (_, record_key) = split_position(&position)?;
            let bytes = self
                .inner
                .store
                .get(&self.view, &record_store_key(collection.record_table, record_key))?;
            let bytes = bytes
                .ok_or_else(|| StorageError::Corruption(format!("the order table of {ns} names a missing document")))?;
            out.push((position, parse_document(bytes.as_ref())?));
        }
        Ok(out)
    }

    /// Whether a capped collection still holds the document at `position`
    /// (a tailable cursor's position; false once it was deleted).
    pub fn natural_position_exists(&self, ns: &str, position: &[u8]) -> Result<bool> {
        let Some(table) = self.collection(ns).and_then(|collection| collection.order_table) else {
            return Ok(false);
        };
        Ok(self
            .inner
            .store
            .get(&self.view, &order_store_key(table, position))?
            .is_some())
    }

    /// A capped collection's document count and BSON bytes (None when the
    /// collection is not capped).
    pub fn capped_totals(&self, ns: &str) -> Result<Option<Totals>> {
        let Some(table) = self.collection(ns).and_then(|collection| collection.order_table) else {
            return Ok(None);
        };
        Ok(Some(read_totals(&self.inner.store, &self.view, table)?))
    }
}

impl Writer<'_> {
    /// Refuses a document a capped collection could never hold (BadValue,
    /// as MongoDB's "object to insert exceeds cappedMaxSize").
    pub(super) fn check_capped_insert(&self, options: &Document, bytes: usize) -> Result<()> {
        match limits(options) {
            Some(limits) if bytes as u64 > limits.size => Err(StorageError::InvalidDocument(
                "object to insert exceeds cappedMaxSize".to_string(),
            )),
            _ => Ok(()),
        }
    }

    /// Deletes the oldest documents of capped `ns` while it is over its
    /// `size` or `max`, each with its own delete entry. The deletes belong to
    /// no client statement (no session, no retry image). Returns the last
    /// delete's optime, if any.
    pub(super) fn trim_capped(&mut self, ns: &str) -> Result<Option<OpTime>> {
        let session = self.session.take();
        let retry_image = self.retry_image.take();
        let result = self.trim_capped_unattributed(ns);
        self.session = session;
        self.retry_image = retry_image;
        result
    }

    fn trim_capped_unattributed(&mut self, ns: &str) -> Result<Option<OpTime>> {
        let mut last = None;
        loop {
            let reader = self.reader();
            let Some(collection) = reader.collection(ns) else {
                return Ok(last);
            };
            let Some(limits) = limits(&collection.options) else {
                return Ok(last);
            };
            let Some(mut totals) = reader.capped_totals(ns)? else {
                return Ok(last);
            };
            if !totals.exceeds(&limits) {
                return Ok(last);
            }
            let oldest = reader.scan_natural(ns, Bound::Unbounded, Bound::Unbounded, false, TRIM_BATCH_MAX)?;
            if oldest.is_empty() {
                return Err(StorageError::Corruption(format!(
                    "{ns} is over its cap with no documents"
                )));
            }
            for (_, document) in oldest {
                if !totals.exceeds(&limits) {
                    return Ok(last);
                }
                let id = document.get("_id").cloned().unwrap_or(Bson::Null);
                let size = document
                    .to_vec()
                    .map_err(|e| StorageError::InvalidDocument(e.to_string()))?
                    .len();
                last = Some(self.delete(ns, &id)?);
                totals = Totals {
                    count: totals.count.saturating_sub(1),
                    bytes: totals.bytes.saturating_sub(size as u64),
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capped::order_key;

    #[test]
    fn positions_sort_by_insert_order_then_record_key() {
        let early = order_key(5, &[9, 9]);
        let late = order_key(6, &[0]);
        assert!(early < late);
        assert_eq!(split_position(&early[1..]).unwrap(), (5, &[9u8, 9][..]));
        assert_eq!(order_store_key(3, &early[1..]), record_store_key(3, &early));
    }
}
