//! A capped collection's order table: insertion order and running totals.
//!
//! Records are keyed by `_id`, which is not insertion order, so a capped
//! collection has one more table. Its keys (after the table id):
//! - `ORDER_PREFIX ++ seq (u64 BE) ++ record key` -> empty: natural order.
//!   `seq` is the timestamp of the insert's oplog entry, which every member
//!   applies with the same timestamp, so every member has the same order
//!   without anything added to the entry.
//! - `POSITION_PREFIX ++ record key` -> seq: where a record stands, so that
//!   its delete finds its order key.
//! - `TOTALS_KEY` -> count (u64 BE) ++ BSON bytes (u64 BE): what trimming
//!   compares with `size` and `max`, kept in step with every write (an
//!   applier handles one entry, so reading the newest totals is exact).
//!
//! The table changes only with the records, at the same timestamps, so it is
//! versioned, checkpointed and rolled back with them.

use std::collections::HashMap;

use bson::{Bson, Document};

use crate::apply::record_store_key;
use crate::mvcc::{ReadView, Value, VersionedStore};
use crate::{StorageError, Timestamp};

pub const ORDER_PREFIX: u8 = 0;
const POSITION_PREFIX: u8 = 1;
const TOTALS_KEY: u8 = 2;
/// Bytes of an order position: the sequence number then the record key.
const SEQ_BYTES: usize = 8;

/// A capped collection's limits, from its catalog options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CappedLimits {
    /// `size`: most BSON bytes kept.
    pub size: u64,
    /// `max`: most documents kept; None when unlimited.
    pub max: Option<u64>,
}

/// MongoDB's stand-in for "no `max`" (2^31 - 1, `adjustCappedMaxDocs`).
pub const UNLIMITED_MAX: i64 = 0x7fff_ffff;

pub fn is_capped(options: &Document) -> bool {
    matches!(options.get("capped"), Some(Bson::Boolean(true)))
}

fn option_i64(options: &Document, key: &str) -> Option<i64> {
    match options.get(key)? {
        Bson::Int32(value) => Some(i64::from(*value)),
        Bson::Int64(value) => Some(*value),
        Bson::Double(value) => Some(*value as i64),
        _ => None,
    }
}

/// The limits of a capped collection's options (None when not capped).
pub fn limits(options: &Document) -> Option<CappedLimits> {
    if !is_capped(options) {
        return None;
    }
    let size = option_i64(options, "size").unwrap_or(0);
    let max = option_i64(options, "max").filter(|max| *max > 0 && *max != UNLIMITED_MAX);
    Some(CappedLimits {
        size: u64::try_from(size).unwrap_or(0),
        max: max.map(|max| max as u64),
    })
}

/// Running totals of a capped collection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub count: u64,
    pub bytes: u64,
}

impl Totals {
    /// Over either limit: the oldest documents must go.
    pub fn exceeds(&self, limits: &CappedLimits) -> bool {
        self.bytes > limits.size || limits.max.is_some_and(|max| self.count > max)
    }
}

/// The table-local key of a natural-order position.
pub fn order_key(seq: u64, record_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + SEQ_BYTES + record_key.len());
    key.push(ORDER_PREFIX);
    key.extend_from_slice(&seq.to_be_bytes());
    key.extend_from_slice(record_key);
    key
}

/// A position as cursors hold it: the order key without its prefix.
pub fn split_position(position: &[u8]) -> Result<(u64, &[u8]), StorageError> {
    if position.len() < SEQ_BYTES {
        return Err(StorageError::Corruption(format!(
            "capped order position of {} bytes",
            position.len()
        )));
    }
    let (seq, record_key) = position.split_at(SEQ_BYTES);
    Ok((u64::from_be_bytes(seq.try_into().expect("eight bytes")), record_key))
}

fn position_key(record_key: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + record_key.len());
    key.push(POSITION_PREFIX);
    key.extend_from_slice(record_key);
    key
}

pub(crate) fn read_totals(store: &VersionedStore, view: &ReadView, table: u32) -> Result<Totals, StorageError> {
    let Some(bytes) = store.get(view, &record_store_key(table, &[TOTALS_KEY]))? else {
        return Ok(Totals::default());
    };
    let bytes = bytes.as_ref();
    if bytes.len() != 16 {
        return Err(StorageError::Corruption(format!(
            "capped totals of {} bytes",
            bytes.len()
        )));
    }
    let count = u64::from_be_bytes(bytes[..8].try_into().expect("eight bytes"));
    let size = u64::from_be_bytes(bytes[8..].try_into().expect("eight bytes"));
    Ok(Totals { count, bytes: size })
}

fn totals_value(totals: Totals) -> Value {
    let mut bytes = Vec::with_capacity(16);
    bytes.extend_from_slice(&totals.count.to_be_bytes());
    bytes.extend_from_slice(&totals.bytes.to_be_bytes());
    Value::from(bytes)
}

/// One document write as the order table sees it: the BSON sizes before
/// and after (None: absent).
pub(crate) struct RecordChange<'a> {
    pub record_key: &'a [u8],
    pub old_bytes: Option<usize>,
    pub new_bytes: Option<usize>,
    /// An inserted record's place in the order.
    pub place: OrderPlace,
}

/// Where an inserted record goes in a capped collection's order.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OrderPlace {
    /// At its oplog entry's timestamp: every member puts it in the same place.
    At(Timestamp),
    /// After every record the collection holds: an initial sync's bulk load,
    /// which copies in the source's natural order, has no entry timestamps
    /// and deletes nothing, so the count is a fresh sequence number below
    /// every entry timestamp applied later.
    AfterLast,
}

/// The order-table changes of one document write.
pub(crate) fn changes(
    store: &VersionedStore,
    view: &ReadView,
    table: u32,
    change: &RecordChange<'_>,
    pending: &mut HashMap<u32, Totals>,
) -> Result<Vec<(Vec<u8>, Option<Value>)>, StorageError> {
    let mut out = Vec::new();
    // The totals as this applier's earlier writes left them (several writes
    // to one collection before the commit), else as stored.
    let mut totals = match pending.get(&table) {
        Some(totals) => *totals,
        None => read_totals(store, view, table)?,
    };
    match (change.old_bytes, change.new_bytes) {
        (None, Some(new)) => {
            let seq = match change.place {
                OrderPlace::At(ts) => {
                    assert!(ts != Timestamp::ZERO, "a capped insert needs its entry's timestamp");
                    ts.as_u64()
                }
                OrderPlace::AfterLast => totals.count + 1,
            };
            out.push((
                record_store_key(table, &order_key(seq, change.record_key)),
                Some(Value::from(Vec::new())),
            ));
            let position = Value::from(seq.to_be_bytes().to_vec());
            out.push((
                record_store_key(table, &position_key(change.record_key)),
                Some(position),
            ));
            totals.count += 1;
            totals.bytes += new as u64;
        }
        (Some(old), Some(new)) => {
            // An update keeps its place (MongoDB 7.0 lets it change size).
            totals.bytes = (totals.bytes + new as u64).saturating_sub(old as u64);
        }
        (Some(old), None) => {
            let key = record_store_key(table, &position_key(change.record_key));
            if let Some(seq) = store.get(view, &key)? {
                let seq = u64::from_be_bytes(
                    seq.as_ref()
                        .try_into()
                        .map_err(|_| StorageError::Corruption("capped position".into()))?,
                );
                out.push((record_store_key(table, &order_key(seq, change.record_key)), None));
                out.push((key, None));
            }
            totals.count = totals.count.saturating_sub(1);
            totals.bytes = totals.bytes.saturating_sub(old as u64);
        }
        (None, None) => return Ok(out),
    }
    pending.insert(table, totals);
    out.push((record_store_key(table, &[TOTALS_KEY]), Some(totals_value(totals))));
    Ok(out)
}
