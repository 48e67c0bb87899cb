//! Resumable scans over a storage `Reader`: a collection scan in record-key
//! order, or an index scan over a list of key intervals. A scan's position
//! names the last record it handed out, so a cursor resumes on a fresh
//! reader (each `getMore` reads the latest state, as MongoDB's yields do)
//! without holding results or a snapshot between batches.

use std::collections::HashSet;
use std::ops::Bound;

use bson::Document;
use slipstream_storage::{IndexEntry, Reader, StorageError};

use super::limits::MULTIKEY_SEEN_RECORDS_MAX;
use crate::error::CommandError;

/// One interval of index keys, in ascending key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyInterval {
    pub start: Bound<Vec<u8>>,
    pub end: Bound<Vec<u8>>,
}

impl KeyInterval {
    pub fn all() -> Self {
        KeyInterval {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }
}

/// How a scan reaches its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Every record in record-key (`_id`) order, or its reverse.
    Collection { reverse: bool },
    /// Index entries within `intervals` (visited in list order; each in
    /// key order, or reversed). `multikey`: a record may appear under
    /// several keys, so records already returned are skipped.
    Index {
        name: String,
        intervals: Vec<KeyInterval>,
        reverse: bool,
        multikey: bool,
    },
}

/// Where a scan stands: after which record (and index entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    Start,
    /// After this record key (collection scans).
    AfterRecord(Vec<u8>),
    /// In interval `interval`, after the index entry `(index key, record
    /// key)`, or at its start.
    AfterIndexEntry {
        interval: usize,
        after: Option<(Vec<u8>, Vec<u8>)>,
    },
    /// Nothing is left.
    Done,
}

/// One record a scan produced, with the position just after it.
#[derive(Debug)]
pub struct ScanItem {
    pub record_key: Vec<u8>,
    pub document: Document,
    pub after: Position,
}

/// Work counters for `explain`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub keys_examined: u64,
    pub docs_examined: u64,
}

/// The `_id` index, which storage keeps as the record table itself.
pub const ID_INDEX_NAME: &str = "_id_";

/// Scans the `_id_` index: the record table, whose keys (record keys) are
/// the `_id` index keys.
fn scan_id_index(
    reader: &Reader,
    ns: &str,
    bounds: &KeyInterval,
    reverse: bool,
    after: Option<(Vec<u8>, Vec<u8>)>,
    limit: usize,
) -> Result<Vec<IndexEntry>, StorageError> {
    let (mut start, mut end) = (bounds.start.clone(), bounds.end.clone());
    if let Some((_, record_key)) = after {
        if reverse {
            end = Bound::Excluded(record_key);
        } else {
            start = Bound::Excluded(record_key);
        }
    }
    let records = reader.scan(ns, start, end, reverse, limit)?;
    Ok(records
        .into_iter()
        .map(|(record_key, document)| IndexEntry {
            index_key: record_key.clone(),
            record_key,
            document,
        })
        .collect())
}

/// A resumable scan of one collection.
#[derive(Debug)]
pub struct Scan {
    ns: String,
    access: Access,
    position: Position,
    /// Record keys already handed out by a multikey index scan.
    seen: HashSet<Vec<u8>>,
    pub stats: ScanStats,
}

/// A chunk of records read by `Scan::fetch`.
pub struct Fetched {
    pub items: Vec<ScanItem>,
    /// The scan has nothing beyond these items.
    pub reached_end: bool,
}

impl Scan {
    pub fn new(ns: impl Into<String>, access: Access) -> Self {
        Scan {
            ns: ns.into(),
            access,
            position: Position::Start,
            seen: HashSet::new(),
            stats: ScanStats::default(),
        }
    }

    pub fn ns(&self) -> &str {
        &self.ns
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    pub fn is_done(&self) -> bool {
        self.position == Position::Done
    }

    /// Reads up to `max_records` records after the current position without
    /// moving it; the caller `consume`s the items it uses.
    pub fn fetch(&mut self, reader: &Reader, max_records: usize) -> Result<Fetched, StorageError> {
        assert!(max_records > 0);
        match (&self.access, &self.position) {
            (_, Position::Done) => Ok(Fetched {
                items: Vec::new(),
                reached_end: true,
            }),
            (Access::Collection { reverse }, position) => {
                let reverse = *reverse;
                let after = match position {
                    Position::AfterRecord(key) => Some(key.clone()),
                    _ => None,
                };
                let (start, end) = match (&after, reverse) {
                    (None, _) => (Bound::Unbounded, Bound::Unbounded),
                    (Some(key), false) => (Bound::Excluded(key.clone()), Bound::Unbounded),
                    (Some(key), true) => (Bound::Unbounded, Bound::Excluded(key.clone())),
                };
                // Insertion order for a capped collection, `_id` order otherwise.
                let records = reader.scan_natural(&self.ns, start, end, reverse, max_records)?;
                let reached_end = records.len() < max_records;
                self.stats.docs_examined += records.len() as u64;
                let items = records
                    .into_iter()
                    .map(|(record_key, document)| ScanItem {
                        after: Position::AfterRecord(record_key.clone()),
                        record_key,
                        document,
                    })
                    .collect();
                Ok(Fetched { items, reached_end })
            }
            (
                Access::Index {
                    name,
                    intervals,
                    reverse,
                    ..
                },
                position,
            ) => {
                let (mut interval, mut after) = match position {
                    Position::Start => (0, None),
                    Position::AfterIndexEntry { interval, after } => (*interval, after.clone()),
                    Position::AfterRecord(_) | Position::Done => unreachable!("index scans use index positions"),
                };
                let mut items = Vec::new();
                while interval < intervals.len() && items.len() < max_records {
                    let bounds = &intervals[interval];
                    let wanted = max_records - items.len();
                    let entries = if name == ID_INDEX_NAME {
                        scan_id_index(reader, &self.ns, bounds, *reverse, after.take(), wanted)?
                    } else {
                        reader.scan_index(
                            &self.ns,
                            name,
                            bounds.start.clone(),
                            bounds.end.clone(),
                            *reverse,
                            after.take(),
                            wanted,
                        )?
                    };
                    let interval_exhausted = entries.len() < wanted;
                    self.stats.keys_examined += entries.len() as u64;
                    self.stats.docs_examined += entries.len() as u64;
                    for entry in entries {
                        items.push(ScanItem {
                            after: Position::AfterIndexEntry {
                                interval,
                                after: Some((entry.index_key, entry.record_key.clone())),
                            },
                            record_key: entry.record_key,
                            document: entry.document,
                        });
                    }
                    if !interval_exhausted {
                        break;
                    }
                    interval += 1;
                    // The next interval starts from its beginning: record
                    // it so a consumer that takes every item resumes there.
                    if let Some(last) = items.last_mut() {
                        if interval < intervals.len() {
                            last.after = Position::AfterIndexEntry { interval, after: None };
                        }
                    }
                }
                Ok(Fetched {
                    items,
                    reached_end: interval >= intervals.len(),
                })
            }
        }
    }

    /// A multikey index scan already returned this record.
    pub fn is_duplicate(&self, item: &ScanItem) -> bool {
        matches!(self.access, Access::Index { multikey: true, .. }) && self.seen.contains(&item.record_key)
    }

    /// Moves the position past `item`; a multikey index scan remembers the
    /// record so that it is not returned twice.
    pub fn consume(&mut self, item: &ScanItem) -> Result<(), CommandError> {
        self.consume_at(&item.record_key, item.after.clone())
    }

    /// `consume` for an item already taken apart.
    pub fn consume_at(&mut self, record_key: &[u8], after: Position) -> Result<(), CommandError> {
        self.position = after;
        if !matches!(self.access, Access::Index { multikey: true, .. }) || self.seen.contains(record_key) {
            return Ok(());
        }
        if self.seen.len() >= MULTIKEY_SEEN_RECORDS_MAX {
            return Err(CommandError::new(
                96,
                format!("multikey index scan returned more than {MULTIKEY_SEEN_RECORDS_MAX} records; narrow the query"),
            ));
        }
        self.seen.insert(record_key.to_vec());
        Ok(())
    }

    /// Marks the scan finished (every fetched item consumed and nothing left).
    pub fn finish(&mut self) {
        self.position = Position::Done;
    }
}
