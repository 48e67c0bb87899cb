//! The versioned store: one ordered map of version chains in memory,
//! layered over the newest checkpoint in the key-value engine.
//!
//! Keys are `table id (u32 big-endian) ++ table-local key`. Each key maps
//! to its versions above the checkpoint, oldest first:
//! `[(commit timestamp, Some(value) | None = tombstone)]`. A read at `T`
//! sees the newest version `<= T`, and falls through to the checkpoint
//! when the chain has none.
//!
//! Consistency between memory and checkpoint: every reader holds a
//! `ReadView`, the read timestamp plus the checkpoint view (`BaseView`,
//! a KV snapshot and its timestamp) that was current when the view was
//! made, taken under the memory lock. A view's timestamp is never below its
//! base's. Versions leave memory only when they are at or below the
//! timestamp of every base still held by a view (`prune`), so a reader
//! holding an old base still finds in memory every version its base lacks.
//!
//! A view below its base's timestamp (a snapshot or majority read while the
//! checkpoint is past the commit point) reads the base alone: its history
//! records (`history.rs`) hold every version down to the base's floor.
//!
//! Locking: one `RwLock` around the map. Readers hold it shared for one
//! bounded batch (`SCAN_STEPS_PER_LOCK_MAX` keys), writers exclusively
//! for the few keys of one write, the checkpoint shared in batches while
//! it copies and exclusively in batches while it prunes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Weak};

use parking_lot::RwLock;

use crate::history;
use crate::kv::{KvSnapshot, Result};
use crate::Timestamp;

/// A value in memory; shared, because readers copy it out under the lock.
pub type Value = Arc<[u8]>;

/// Most keys one scan batch visits while holding the memory lock.
pub const SCAN_STEPS_PER_LOCK_MAX: usize = 1024;
/// Most keys the checkpoint copies or prunes per lock acquisition.
pub const CHECKPOINT_KEYS_PER_LOCK_MAX: usize = 4096;

/// Pairs found by one scan batch, and the key to resume after.
type ScanBatch = (Vec<(Vec<u8>, Bytes)>, Option<Vec<u8>>);
/// Changes for a checkpoint batch (None = delete), and the key to resume after.
pub type CheckpointChanges = (Vec<(Vec<u8>, Option<Value>)>, Option<Vec<u8>>);

/// One key's change for a checkpoint: its newest value at the checkpoint,
/// and (when asked for) every version it took since the previous one.
pub struct KeyChange {
    pub key: Vec<u8>,
    pub value: Option<Value>,
    pub versions: Vec<(Timestamp, Option<Value>)>,
}

/// A value read back, from memory or from the checkpoint.
#[derive(Clone, Debug)]
pub enum Bytes {
    Memory(Value),
    Checkpoint(Vec<u8>),
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            Bytes::Memory(value) => value,
            Bytes::Checkpoint(value) => value,
        }
    }
}

#[derive(Clone, Debug)]
struct Version {
    ts: Timestamp,
    value: Option<Value>,
}

/// A checkpoint as readers see it.
pub struct BaseView {
    pub kv: Arc<dyn KvSnapshot>,
    /// The checkpoint timestamp of `kv`.
    pub ts: Timestamp,
    /// The history floor of `kv`: reads reach back to it (None: no history,
    /// reads reach back to `ts`).
    pub floor: Option<Timestamp>,
}

impl BaseView {
    /// The oldest timestamp a view over this base can read at.
    pub fn oldest_readable(&self) -> Timestamp {
        self.floor.unwrap_or(self.ts)
    }
}

/// Memory one version costs besides its key and value bytes: the version
/// itself, the value's `Arc` header, and a share of the chain and map node.
pub const VERSION_OVERHEAD_BYTES: u64 = 64;

fn version_bytes(key: &[u8], value: &Option<Value>) -> u64 {
    (key.len() + value.as_ref().map_or(0, |v| v.len())) as u64 + VERSION_OVERHEAD_BYTES
}

/// What one reader reads: versions `<= ts` over `base`.
#[derive(Clone)]
pub struct ReadView {
    pub ts: Timestamp,
    pub base: Arc<BaseView>,
}

impl ReadView {
    /// Whether this view reads below its checkpoint, from the history on disk.
    fn reads_history(&self) -> bool {
        self.ts < self.base.ts
    }
}

struct Memory {
    /// Guarded by `VersionedStore::memory`.
    map: BTreeMap<Vec<u8>, Vec<Version>>,
    /// Number of versions in `map`.
    versions: u64,
    /// What the versions in `map` cost (`version_bytes` each).
    bytes: u64,
    /// What every version ever written here cost: only grows (the
    /// snapshot window's samples, `window_marks.rs`).
    written: u64,
    /// The current checkpoint; replaced by `install_base` after a commit.
    base: Arc<BaseView>,
    /// Older bases possibly still held by readers; `prune` may not remove
    /// versions above the lowest of them.
    old_bases: Vec<Weak<BaseView>>,
}

pub struct VersionedStore {
    memory: RwLock<Memory>,
}

/// The newest version `<= ts` of a chain: `None` when the chain has none
/// (fall through to the checkpoint), `Some(None)` for a tombstone.
fn visible(chain: &[Version], ts: Timestamp) -> Option<Option<&Value>> {
    chain.iter().rev().find(|v| v.ts <= ts).map(|v| v.value.as_ref())
}

fn bound_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key.as_slice()),
        Bound::Excluded(key) => Bound::Excluded(key.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// One step of a merged scan.
enum Pick {
    Memory,
    Checkpoint,
    Both,
}

impl VersionedStore {
    pub fn new(base: BaseView) -> VersionedStore {
        let memory = Memory {
            map: BTreeMap::new(),
            versions: 0,
            bytes: 0,
            written: 0,
            base: Arc::new(base),
            old_bases: Vec::new(),
        };
        VersionedStore { memory: RwLock::new(memory) }
    }

    /// A view at `ts` over the current checkpoint. Returns `None` when
    /// `ts` is below what the checkpoint can answer (its timestamp, or its
    /// history floor): the versions are gone.
    pub fn view(&self, ts: Timestamp) -> Option<ReadView> {
        let memory = self.memory.read();
        if ts < memory.base.oldest_readable() {
            return None;
        }
        Some(ReadView { ts, base: memory.base.clone() })
    }

    pub fn checkpoint_ts(&self) -> Timestamp {
        self.memory.read().base.ts
    }

    /// The current checkpoint's history floor (None: no history on disk).
    pub fn history_floor(&self) -> Option<Timestamp> {
        self.memory.read().base.floor
    }

    /// The current checkpoint (for its snapshot, timestamp and floor).
    pub fn base(&self) -> Arc<BaseView> {
        self.memory.read().base.clone()
    }

    pub fn versions_in_memory(&self) -> u64 {
        self.memory.read().versions
    }

    /// What the versions in memory cost, in bytes (`version_bytes`).
    pub fn bytes_in_memory(&self) -> u64 {
        self.memory.read().bytes
    }

    /// What every version ever written to memory cost, in bytes; only grows.
    pub fn bytes_written(&self) -> u64 {
        self.memory.read().written
    }

    /// Commits the changes of one oplog entry at `ts`. Timestamps of one
    /// key only grow; a second change of a key at the same timestamp
    /// replaces the first.
    pub fn write(&self, ts: Timestamp, changes: Vec<(Vec<u8>, Option<Value>)>) {
        let mut memory = self.memory.write();
        assert!(ts > memory.base.ts, "write at {ts} not above the checkpoint {}", memory.base.ts);
        let mut added = 0u64;
        let (mut bytes_added, mut bytes_removed) = (0u64, 0u64);
        for (key, value) in changes {
            let cost = version_bytes(&key, &value);
            let chain = memory.map.entry(key).or_default();
            bytes_added += cost;
            match chain.last_mut() {
                Some(last) if last.ts == ts => {
                    bytes_removed += cost - version_bytes(&[], &value) + version_bytes(&[], &last.value);
                    last.value = value;
                }
                Some(last) => {
                    assert!(last.ts < ts, "version at {ts} below the newest {}", last.ts);
                    chain.push(Version { ts, value });
                    added += 1;
                }
                None => {
                    chain.push(Version { ts, value });
                    added += 1;
                }
            }
        }
        memory.versions += added;
        memory.bytes = memory.bytes + bytes_added - bytes_removed;
        memory.written += bytes_added.saturating_sub(bytes_removed);
    }

    /// The value of `key` as `view` sees it.
    pub fn get(&self, view: &ReadView, key: &[u8]) -> Result<Option<Bytes>> {
        if view.reads_history() {
            return Ok(history::get_at(&*view.base.kv, key, view.ts)?.map(Bytes::Checkpoint));
        }
        {
            let memory = self.memory.read();
            if let Some(chain) = memory.map.get(key) {
                if let Some(value) = visible(chain, view.ts) {
                    return Ok(value.map(|v| Bytes::Memory(v.clone())));
                }
            }
        }
        Ok(view.base.kv.get(key)?.map(Bytes::Checkpoint))
    }

    /// Pairs within the bounds as `view` sees them, ascending (descending
    /// when `reverse`), at most `limit`. Works in batches so that the lock
    /// is held briefly however long the range.
    pub fn scan(
        &self,
        view: &ReadView,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Bytes)>> {
        // A range of exactly one key (a point read by `_id`) is a lookup:
        // cheaper than setting up the merged memory/checkpoint iteration.
        if let (Bound::Included(first), Bound::Included(last)) = (&start, &end) {
            if first == last {
                if limit == 0 {
                    return Ok(Vec::new());
                }
                return Ok(self.get(view, first)?.map(|value| (first.clone(), value)).into_iter().collect());
            }
        }
        if view.reads_history() {
            let pairs = history::scan_at(&*view.base.kv, view.ts, bound_ref(&start), bound_ref(&end), reverse, limit)?;
            return Ok(pairs.into_iter().map(|(key, value)| (key, Bytes::Checkpoint(value))).collect());
        }
        let mut out = Vec::new();
        let (mut start, mut end) = (start, end);
        while out.len() < limit {
            let wanted = limit - out.len();
            let (batch, resume) = self.scan_batch(view, bound_ref(&start), bound_ref(&end), reverse, wanted)?;
            out.extend(batch);
            match resume {
                None => break,
                Some(last) if reverse => end = Bound::Excluded(last),
                Some(last) => start = Bound::Excluded(last),
            }
        }
        Ok(out)
    }

    /// One batch of `scan`: returns the pairs found and, when the range
    /// may hold more, the last key examined (to resume after).
    fn scan_batch(
        &self,
        view: &ReadView,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        reverse: bool,
        wanted: usize,
    ) -> Result<ScanBatch> {
        let memory = self.memory.read();
        let range = memory.map.range::<[u8], _>((start, end));
        let mut mem_iter: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<Version>)>> =
            if reverse { Box::new(range.rev()) } else { Box::new(range) };
        let mut kv_iter = view.base.kv.range(start, end, reverse)?;
        let mut mem_next = mem_iter.next();
        let mut kv_next = kv_iter.next().transpose()?;
        let mut out = Vec::new();
        let mut steps = 0usize;
        let mut last_key: Option<Vec<u8>> = None;
        loop {
            if out.len() >= wanted || steps >= SCAN_STEPS_PER_LOCK_MAX {
                // The caller resumes strictly after the last key examined.
                return Ok((out, last_key));
            }
            let pick = match (&mem_next, &kv_next) {
                (None, None) => return Ok((out, None)),
                (Some(_), None) => Pick::Memory,
                (None, Some(_)) => Pick::Checkpoint,
                (Some((mem_key, _)), Some((kv_key, _))) => {
                    let order = mem_key.as_slice().cmp(kv_key.as_slice());
                    let order = if reverse { order.reverse() } else { order };
                    match order {
                        std::cmp::Ordering::Less => Pick::Memory,
                        std::cmp::Ordering::Greater => Pick::Checkpoint,
                        std::cmp::Ordering::Equal => Pick::Both,
                    }
                }
            };
            steps += 1;
            match pick {
                Pick::Checkpoint => {
                    let (key, value) = kv_next.take().expect("picked checkpoint");
                    last_key = Some(key.clone());
                    out.push((key, Bytes::Checkpoint(value)));
                    kv_next = kv_iter.next().transpose()?;
                }
                Pick::Memory | Pick::Both => {
                    let (key, chain) = mem_next.take().expect("picked memory");
                    last_key = Some(key.clone());
                    let checkpoint_value = if matches!(pick, Pick::Both) {
                        let pair = kv_next.take().expect("picked both");
                        kv_next = kv_iter.next().transpose()?;
                        Some(pair.1)
                    } else {
                        None
                    };
                    match visible(chain, view.ts) {
                        Some(Some(value)) => out.push((key.clone(), Bytes::Memory(value.clone()))),
                        Some(None) => {}
                        None => {
                            if let Some(value) = checkpoint_value {
                                out.push((key.clone(), Bytes::Checkpoint(value)));
                            }
                        }
                    }
                    mem_next = mem_iter.next();
                }
            }
        }
    }

    /// Discards every version above `ts` (rollback).
    pub fn rollback_to(&self, ts: Timestamp) {
        let mut memory = self.memory.write();
        assert!(ts >= memory.base.ts, "rollback to {ts} below the checkpoint {}", memory.base.ts);
        let mut removed = 0u64;
        let mut bytes_removed = 0u64;
        memory.map.retain(|key, chain| {
            let before = chain.len();
            bytes_removed += chain.iter().filter(|v| v.ts > ts).map(|v| version_bytes(key, &v.value)).sum::<u64>();
            chain.retain(|v| v.ts <= ts);
            removed += (before - chain.len()) as u64;
            !chain.is_empty()
        });
        memory.versions -= removed;
        memory.bytes -= bytes_removed;
    }

    /// Makes `base` (a checkpoint rolled back below the current one) the
    /// base of new views and drops every version in memory: all of them are
    /// above the current checkpoint, so above `base` too (a rollback redoes
    /// none of them). Readers holding older views keep their bases.
    pub fn reset(&self, base: BaseView) {
        let mut memory = self.memory.write();
        let old = std::mem::replace(&mut memory.base, Arc::new(base));
        memory.old_bases.push(Arc::downgrade(&old));
        memory.map.clear();
        memory.versions = 0;
        memory.bytes = 0;
    }

    /// Keys whose newest version `<= stable` is above `previous` (the
    /// current checkpoint, which already holds older ones), with that
    /// value, in key order, starting after `after`; at most
    /// `CHECKPOINT_KEYS_PER_LOCK_MAX` keys examined. Returns the batch and
    /// the key to continue after (None at the end).
    pub fn checkpoint_batch(
        &self,
        stable: Timestamp,
        previous: Timestamp,
        after: Option<&[u8]>,
    ) -> CheckpointChanges {
        let (changes, next) = self.checkpoint_batch_with_versions(stable, previous, after, false);
        (changes.into_iter().map(|change| (change.key, change.value)).collect(), next)
    }

    /// `checkpoint_batch` that also gives each key's versions in
    /// `(previous, stable]` when `with_versions` (a checkpoint past the
    /// commit point writes them to the history).
    pub fn checkpoint_batch_with_versions(
        &self,
        stable: Timestamp,
        previous: Timestamp,
        after: Option<&[u8]>,
        with_versions: bool,
    ) -> (Vec<KeyChange>, Option<Vec<u8>>) {
        let memory = self.memory.read();
        let start = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        let mut out = Vec::new();
        // The key to resume after is cloned once per batch, not per key.
        let mut last: Option<&Vec<u8>> = None;
        for (steps, (key, chain)) in memory.map.range::<[u8], _>((start, Bound::Unbounded)).enumerate() {
            if steps >= CHECKPOINT_KEYS_PER_LOCK_MAX {
                return (out, last.cloned());
            }
            if let Some(version) = chain.iter().rev().find(|v| v.ts <= stable) {
                if version.ts > previous {
                    let versions = if with_versions {
                        chain.iter().filter(|v| v.ts > previous && v.ts <= stable).map(|v| (v.ts, v.value.clone())).collect()
                    } else {
                        Vec::new()
                    };
                    out.push(KeyChange { key: key.clone(), value: version.value.clone(), versions });
                }
            }
            last = Some(key);
        }
        (out, None)
    }

    /// Makes a newly committed checkpoint the base of new views.
    pub fn install_base(&self, base: BaseView) {
        let mut memory = self.memory.write();
        assert!(base.ts >= memory.base.ts, "checkpoint moved backwards");
        let old = std::mem::replace(&mut memory.base, Arc::new(base));
        memory.old_bases.push(Arc::downgrade(&old));
    }

    /// The timestamp at or below which versions are in every base still
    /// held by a view.
    fn prune_horizon(&self) -> Timestamp {
        let mut memory = self.memory.write();
        memory.old_bases.retain(|weak| weak.strong_count() > 0);
        let mut horizon = memory.base.ts;
        for weak in &memory.old_bases {
            if let Some(base) = weak.upgrade() {
                horizon = horizon.min(base.ts);
            }
        }
        horizon
    }

    /// Removes the versions every base already holds. Returns the number
    /// removed.
    pub fn prune(&self) -> u64 {
        let horizon = self.prune_horizon();
        let mut removed_total = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut memory = self.memory.write();
            let start = match &after {
                Some(key) => Bound::Excluded(key.as_slice()),
                None => Bound::Unbounded,
            };
            let mut emptied = Vec::new();
            let mut removed = 0u64;
            let mut bytes_removed = 0u64;
            let mut resume = None;
            {
                // The key to resume after is cloned once per batch, not per key.
                let mut last: Option<&Vec<u8>> = None;
                for (steps, (key, chain)) in memory.map.range_mut::<[u8], _>((start, Bound::Unbounded)).enumerate() {
                    if steps >= CHECKPOINT_KEYS_PER_LOCK_MAX {
                        resume = last.cloned();
                        break;
                    }
                    // Versions are oldest first: only a chain that starts at
                    // or below the horizon has any to remove.
                    if chain.first().is_some_and(|v| v.ts <= horizon) {
                        let before = chain.len();
                        bytes_removed +=
                            chain.iter().filter(|v| v.ts <= horizon).map(|v| version_bytes(key, &v.value)).sum::<u64>();
                        chain.retain(|v| v.ts > horizon);
                        removed += (before - chain.len()) as u64;
                        if chain.is_empty() {
                            emptied.push(key.clone());
                        }
                    }
                    last = Some(key);
                }
            }
            let finished = resume.is_none();
            for key in emptied {
                memory.map.remove(&key);
            }
            memory.versions -= removed;
            memory.bytes -= bytes_removed;
            removed_total += removed;
            drop(memory);
            if finished {
                return removed_total;
            }
            after = resume;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvBatch, KvEngine};
    use crate::redb_engine::RedbEngine;

    fn ts(n: u32) -> Timestamp {
        Timestamp::new(n, 1)
    }

    fn val(s: &str) -> Option<Value> {
        Some(Arc::from(s.as_bytes()))
    }

    fn text(bytes: &Bytes) -> String {
        String::from_utf8(bytes.as_ref().to_vec()).unwrap()
    }

    fn setup() -> (tempfile::TempDir, RedbEngine, VersionedStore) {
        let dir = tempfile::tempdir().unwrap();
        let (engine, _) = RedbEngine::open(&dir.path().join("kv.redb"), &crate::io::StdIo::new()).unwrap();
        let mut batch = KvBatch::default();
        batch.put(b"a".to_vec(), b"a0".to_vec());
        batch.put(b"c".to_vec(), b"c0".to_vec());
        engine.commit(batch).unwrap();
        let store = VersionedStore::new(BaseView { kv: engine.snapshot().unwrap(), ts: ts(1), floor: None });
        (dir, engine, store)
    }

    fn scan_all(store: &VersionedStore, at: Timestamp, reverse: bool) -> Vec<(String, String)> {
        let view = store.view(at).unwrap();
        store
            .scan(&view, Bound::Unbounded, Bound::Unbounded, reverse, usize::MAX)
            .unwrap()
            .iter()
            .map(|(k, v)| (String::from_utf8(k.clone()).unwrap(), text(v)))
            .collect()
    }

    #[test]
    fn reads_see_newest_version_at_or_below_their_timestamp() {
        let (_dir, _engine, store) = setup();
        store.write(ts(2), vec![(b"b".to_vec(), val("b2")), (b"c".to_vec(), None)]);
        store.write(ts(3), vec![(b"a".to_vec(), val("a3")), (b"b".to_vec(), val("b3"))]);
        let at1 = store.view(ts(1)).unwrap();
        assert_eq!(text(&store.get(&at1, b"a").unwrap().unwrap()), "a0");
        assert!(store.get(&at1, b"b").unwrap().is_none());
        assert_eq!(scan_all(&store, ts(1), false), vec![("a".into(), "a0".into()), ("c".into(), "c0".into())]);
        assert_eq!(scan_all(&store, ts(2), false), vec![("a".into(), "a0".into()), ("b".into(), "b2".into())]);
        assert_eq!(scan_all(&store, ts(3), true), vec![("b".into(), "b3".into()), ("a".into(), "a3".into())]);
        assert!(store.view(Timestamp::new(0, 5)).is_none());
    }

    #[test]
    fn rollback_drops_versions_above() {
        let (_dir, _engine, store) = setup();
        store.write(ts(2), vec![(b"b".to_vec(), val("b2"))]);
        store.write(ts(3), vec![(b"b".to_vec(), None), (b"d".to_vec(), val("d3"))]);
        store.rollback_to(ts(2));
        assert_eq!(store.versions_in_memory(), 1);
        assert_eq!(
            scan_all(&store, Timestamp::MAX, false),
            vec![("a".into(), "a0".into()), ("b".into(), "b2".into()), ("c".into(), "c0".into())]
        );
    }

    #[test]
    fn prune_keeps_versions_an_old_reader_needs() {
        let (_dir, engine, store) = setup();
        store.write(ts(2), vec![(b"a".to_vec(), val("a2"))]);
        store.write(ts(3), vec![(b"a".to_vec(), val("a3"))]);
        let old_reader = store.view(ts(2)).unwrap();
        // Checkpoint at 3.
        let (changes, more) = store.checkpoint_batch(ts(3), ts(1), None);
        assert!(more.is_none());
        let mut batch = KvBatch::default();
        for (key, value) in changes {
            match value {
                Some(v) => batch.put(key, v.to_vec()),
                None => batch.delete(key),
            }
        }
        engine.commit(batch).unwrap();
        store.install_base(BaseView { kv: engine.snapshot().unwrap(), ts: ts(3), floor: None });
        assert_eq!(store.prune(), 0, "the old reader's base is at 1");
        assert_eq!(text(&store.get(&old_reader, b"a").unwrap().unwrap()), "a2");
        drop(old_reader);
        assert_eq!(store.prune(), 2);
        assert_eq!(scan_all(&store, ts(3), false), vec![("a".into(), "a3".into()), ("c".into(), "c0".into())]);
        assert!(store.view(ts(2)).is_none());
    }

    #[test]
    fn long_scans_resume_across_batches() {
        let (_dir, _engine, store) = setup();
        let changes: Vec<_> = (0..3000u32).map(|i| (format!("k{i:05}").into_bytes(), if i % 3 == 0 { None } else { val("v") })).collect();
        store.write(ts(2), changes);
        let view = store.view(ts(2)).unwrap();
        let all = store.scan(&view, Bound::Included(b"k".to_vec()), Bound::Excluded(b"l".to_vec()), false, usize::MAX).unwrap();
        assert_eq!(all.len(), 2000);
        let back = store.scan(&view, Bound::Included(b"k".to_vec()), Bound::Excluded(b"l".to_vec()), true, 1500).unwrap();
        assert_eq!(back.len(), 1500);
        assert_eq!(back[0].0, b"k02999".to_vec());
    }
}
