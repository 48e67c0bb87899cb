//! The history on disk: every version of every key changed since the
//! history floor, kept in the checkpoint store when a checkpoint goes past
//! the stable timestamp (the commit point), so that memory stays bounded
//! while the commit point stalls and a rollback to it still works.
//!
//! Layout, in the same key-value store and committed in the same batch as
//! the checkpoint it belongs to (so both always agree):
//! - `HISTORY_PREFIX ++ store key` -> the key's versions in timestamp
//!   order: first its value at the floor (a tombstone when it had none),
//!   then each version above the floor up to the checkpoint timestamp.
//!   Store keys begin with a table id below `u32::MAX`, so the prefix sorts
//!   after every table and no table range reaches it.
//! - metadata `history_floor`: the floor (absent or empty: no history).
//! - metadata `history_catalogs`: the catalog at the floor and each catalog
//!   version above it up to the checkpoint.
//!
//! A key without a history record did not change between the floor and the
//! checkpoint: its checkpoint value is its value at every timestamp there.
//! A read at `T` in `[floor, checkpoint)` therefore takes the newest version
//! `<= T` of the key's record, or else the checkpoint's value.

use std::ops::Bound;
use std::sync::Arc;

use crate::catalog::Catalog;
use crate::kv::{KvIter, KvSnapshot, Result};
use crate::{StorageError, Timestamp};

/// The first four bytes of every history key (`u32::MAX`, never a table id).
pub const HISTORY_PREFIX: [u8; 4] = [0xFF; 4];
/// Metadata slot: the history floor (8 bytes), empty when there is none.
pub const META_HISTORY_FLOOR: &str = "history_floor";
/// Metadata slot: the catalogs from the floor to the checkpoint.
pub const META_HISTORY_CATALOGS: &str = "history_catalogs";
/// Most versions one key's record may hold: a key rewritten this often
/// while the commit point stalls makes the record too costly to rewrite at
/// each checkpoint; past it the checkpoint stays where it is (memory grows
/// again, which the operator sees in `serverStatus`).
pub const VERSIONS_PER_KEY_MAX: usize = 1 << 16;

/// One version as stored: its timestamp and value (None = no document).
pub type StoredVersion = (Timestamp, Option<Vec<u8>>);

/// Version tags in a record.
const TAG_ABSENT: u8 = 0;
const TAG_PRESENT: u8 = 1;

pub fn history_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HISTORY_PREFIX.len() + key.len());
    out.extend_from_slice(&HISTORY_PREFIX);
    out.extend_from_slice(key);
    out
}

/// The key range `[start, end)` holding every history record.
pub fn history_range() -> (Vec<u8>, Vec<u8>) {
    (HISTORY_PREFIX.to_vec(), [0xFF; 8].to_vec())
}

fn corrupt(what: &str) -> StorageError {
    StorageError::Corruption(format!("history record: {what}"))
}

pub fn encode_versions(versions: &[StoredVersion]) -> Vec<u8> {
    assert!(
        !versions.is_empty(),
        "a history record holds at least the value at the floor"
    );
    let size: usize = versions.iter().map(|(_, v)| 13 + v.as_ref().map_or(0, Vec::len)).sum();
    let mut out = Vec::with_capacity(size);
    for (ts, value) in versions {
        out.extend_from_slice(&ts.as_u64().to_be_bytes());
        match value {
            None => out.push(TAG_ABSENT),
            Some(value) => {
                out.push(TAG_PRESENT);
                let len = u32::try_from(value.len()).expect("a value fits in u32 bytes");
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(value);
            }
        }
    }
    out
}

pub fn decode_versions(mut bytes: &[u8]) -> Result<Vec<StoredVersion>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (ts, rest) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("short timestamp"))?;
        let ts = Timestamp::from_u64(u64::from_be_bytes(*ts));
        let (tag, rest) = rest.split_first().ok_or_else(|| corrupt("missing tag"))?;
        if let Some((last, _)) = out.last() {
            if *last >= ts {
                return Err(corrupt("versions out of order"));
            }
        }
        match *tag {
            TAG_ABSENT => {
                out.push((ts, None));
                bytes = rest;
            }
            TAG_PRESENT => {
                let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(|| corrupt("short length"))?;
                let len = u32::from_be_bytes(*len) as usize;
                if rest.len() < len {
                    return Err(corrupt("short value"));
                }
                out.push((ts, Some(rest[..len].to_vec())));
                bytes = &rest[len..];
            }
            _ => return Err(corrupt("unknown tag")),
        }
    }
    if out.is_empty() {
        return Err(corrupt("empty"));
    }
    Ok(out)
}

/// The value a record gives at `ts`: the newest version `<= ts`. Every
/// readable `ts` is at or above the floor, so one always exists.
fn value_at(versions: Vec<StoredVersion>, ts: Timestamp) -> Result<Option<Vec<u8>>> {
    let found = versions.into_iter().rev().find(|(version_ts, _)| *version_ts <= ts);
    found
        .map(|(_, value)| value)
        .ok_or_else(|| corrupt(&format!("no version at or below {ts}")))
}

/// The value of `key` at `ts` (below the checkpoint, at or above the floor).
pub fn get_at(kv: &dyn KvSnapshot, key: &[u8], ts: Timestamp) -> Result<Option<Vec<u8>>> {
    match kv.get(&history_key(key))? {
        Some(record) => value_at(decode_versions(&record)?, ts),
        None => kv.get(key),
    }
}

fn prefixed(bound: Bound<&[u8]>, unbounded: Bound<Vec<u8>>) -> Bound<Vec<u8>> {
    match bound {
        Bound::Included(key) => Bound::Included(history_key(key)),
        Bound::Excluded(key) => Bound::Excluded(history_key(key)),
        Bound::Unbounded => unbounded,
    }
}

fn as_ref_bound(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key.as_slice()),
        Bound::Excluded(key) => Bound::Excluded(key.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Pairs within the bounds as they were at `ts`, ascending (descending when
/// `reverse`), at most `limit`: the checkpoint's pairs merged with the
/// history records of the same range, a record deciding its key.
pub fn scan_at(
    kv: &dyn KvSnapshot,
    ts: Timestamp,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    reverse: bool,
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    // Data keys stop before the history records, whatever the bounds say.
    let data_end = match end {
        Bound::Unbounded => Bound::Excluded(HISTORY_PREFIX.as_slice()),
        other => other,
    };
    let history_start = prefixed(start, Bound::Included(HISTORY_PREFIX.to_vec()));
    let history_end = prefixed(end, Bound::Excluded(history_range().1));
    let mut data: KvIter<'_> = kv.range(start, data_end, reverse)?;
    let mut records: KvIter<'_> = kv.range(as_ref_bound(&history_start), as_ref_bound(&history_end), reverse)?;
    let mut data_next = data.next().transpose()?;
    let mut record_next = records.next().transpose()?;
    let mut out = Vec::new();
    while out.len() < limit {
        let take_record = match (&data_next, &record_next) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((data_key, _)), Some((record_key, _))) => {
                let order = data_key.as_slice().cmp(&record_key[HISTORY_PREFIX.len()..]);
                let order = if reverse { order.reverse() } else { order };
                if order == std::cmp::Ordering::Equal {
                    // The record decides: drop the checkpoint's pair.
                    data_next = data.next().transpose()?;
                }
                order != std::cmp::Ordering::Less
            }
        };
        if take_record {
            let (record_key, record) = record_next.take().expect("picked a record");
            if let Some(value) = value_at(decode_versions(&record)?, ts)? {
                out.push((record_key[HISTORY_PREFIX.len()..].to_vec(), value));
            }
            record_next = records.next().transpose()?;
        } else {
            out.push(data_next.take().expect("picked a data pair"));
            data_next = data.next().transpose()?;
        }
    }
    Ok(out)
}

/// The history floor stored with a checkpoint, if any.
pub fn read_floor(kv: &dyn KvSnapshot) -> Result<Option<Timestamp>> {
    match kv.metadata(META_HISTORY_FLOOR)? {
        None => Ok(None),
        Some(bytes) if bytes.is_empty() => Ok(None),
        Some(bytes) => {
            let bytes: [u8; 8] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| corrupt("floor is not 8 bytes"))?;
            Ok(Some(Timestamp::from_u64(u64::from_be_bytes(bytes))))
        }
    }
}

/// The catalogs from the floor up, in timestamp order.
pub type CatalogVersions = Vec<(Timestamp, Arc<Catalog>)>;

pub fn encode_catalogs(catalogs: &[(Timestamp, Arc<Catalog>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ts, catalog) in catalogs {
        let bytes = catalog.to_bytes();
        out.extend_from_slice(&ts.as_u64().to_be_bytes());
        out.extend_from_slice(
            &u32::try_from(bytes.len())
                .expect("a catalog fits in u32 bytes")
                .to_be_bytes(),
        );
        out.extend_from_slice(&bytes);
    }
    out
}

pub fn read_catalogs(kv: &dyn KvSnapshot) -> Result<CatalogVersions> {
    let Some(bytes) = kv.metadata(META_HISTORY_CATALOGS)? else {
        return Ok(Vec::new());
    };
    let mut out: CatalogVersions = Vec::new();
    let mut rest: &[u8] = &bytes;
    while !rest.is_empty() {
        let (ts, tail) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("short catalog timestamp"))?;
        let (len, tail) = tail
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("short catalog length"))?;
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return Err(corrupt("short catalog"));
        }
        let ts = Timestamp::from_u64(u64::from_be_bytes(*ts));
        out.push((ts, Arc::new(Catalog::from_bytes(&tail[..len])?)));
        rest = &tail[len..];
    }
    Ok(out)
}

/// The catalog as of `ts` among `catalogs` (the newest at or below it).
pub fn catalog_at(catalogs: &[(Timestamp, Arc<Catalog>)], ts: Timestamp) -> Option<Arc<Catalog>> {
    catalogs
        .iter()
        .rev()
        .find(|(version_ts, _)| *version_ts <= ts)
        .map(|(_, catalog)| catalog.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvBatch, KvEngine};
    use crate::redb_engine::RedbEngine;

    fn ts(n: u32) -> Timestamp {
        Timestamp::new(n, 1)
    }

    #[test]
    fn records_round_trip_and_answer_reads_between_floor_and_checkpoint() {
        let versions = vec![
            (ts(1), None),
            (ts(2), Some(b"x2".to_vec())),
            (ts(4), Some(b"x4".to_vec())),
        ];
        assert_eq!(decode_versions(&encode_versions(&versions)).unwrap(), versions);
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = RedbEngine::open(&dir.path().join("kv.redb"), &crate::io::StdIo::new()).unwrap();
        let mut batch = KvBatch::default();
        // Checkpoint at 4: a0 unchanged since the floor, b deleted at 3, x created at 2.
        batch.put(b"a".to_vec(), b"a0".to_vec());
        batch.put(b"x".to_vec(), b"x4".to_vec());
        batch.put(
            history_key(b"b"),
            encode_versions(&[(ts(1), Some(b"b0".to_vec())), (ts(3), None)]),
        );
        batch.put(history_key(b"x"), encode_versions(&versions));
        engine.commit(batch).unwrap();
        let kv = engine.snapshot().unwrap();
        let scan = |at: u32, reverse: bool| {
            scan_at(&*kv, ts(at), Bound::Unbounded, Bound::Unbounded, reverse, usize::MAX)
                .unwrap()
                .into_iter()
                .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                .collect::<Vec<_>>()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(scan(1, false), vec![pair("a", "a0"), pair("b", "b0")]);
        assert_eq!(scan(2, false), vec![pair("a", "a0"), pair("b", "b0"), pair("x", "x2")]);
        assert_eq!(scan(3, true), vec![pair("x", "x2"), pair("a", "a0")]);
        assert_eq!(get_at(&*kv, b"x", ts(4)).unwrap(), Some(b"x4".to_vec()));
        assert_eq!(get_at(&*kv, b"b", ts(2)).unwrap(), Some(b"b0".to_vec()));
        assert_eq!(get_at(&*kv, b"a", ts(3)).unwrap(), Some(b"a0".to_vec()));
        let bounded = scan_at(&*kv, ts(2), Bound::Excluded(b"a"), Bound::Included(b"b"), false, 10).unwrap();
        assert_eq!(bounded, vec![(b"b".to_vec(), b"b0".to_vec())]);
    }
}
