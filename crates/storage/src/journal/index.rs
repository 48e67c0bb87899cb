//! The in-memory index of the journal (timestamp -> where the frame is) and
//! the bounded cache of recent entries that serves tailing readers without
//! touching the files.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use crate::Timestamp;

/// Where one entry's frame sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub seq: u64,
    /// Offset of the frame header in the segment file.
    pub offset: u64,
    /// Payload length in bytes.
    pub len: u32,
}

/// Every entry in the journal, in timestamp order (timestamps strictly
/// increase, so a sorted deque with binary search is the whole index).
#[derive(Default)]
pub struct Index {
    entries: VecDeque<(Timestamp, Location)>,
}

impl Index {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the index holds (its capacity: the deque does not shrink as
    /// the oplog's front is cut).
    pub fn bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(Timestamp, Location)>()
    }

    pub fn first(&self) -> Option<Timestamp> {
        self.entries.front().map(|(ts, _)| *ts)
    }

    pub fn last(&self) -> Option<Timestamp> {
        self.entries.back().map(|(ts, _)| *ts)
    }

    pub fn get(&self, position: usize) -> (Timestamp, Location) {
        self.entries[position]
    }

    /// The index of `entries`, which recovery found in strictly increasing
    /// timestamp order (taken over without a copy).
    pub fn from_sorted(entries: Vec<(Timestamp, Location)>) -> Index {
        assert!(entries.windows(2).all(|pair| pair[0].0 < pair[1].0), "journal index out of order");
        Index { entries: VecDeque::from(entries) }
    }

    pub fn push(&mut self, ts: Timestamp, location: Location) {
        if let Some(last) = self.last() {
            assert!(ts > last, "journal index out of order: {ts} after {last}");
        }
        self.entries.push_back((ts, location));
    }

    /// The position of the first entry inside `from`.
    pub fn start_position(&self, from: Bound<Timestamp>) -> usize {
        match from {
            Bound::Unbounded => 0,
            Bound::Included(ts) => self.entries.partition_point(|(t, _)| *t < ts),
            Bound::Excluded(ts) => self.entries.partition_point(|(t, _)| *t <= ts),
        }
    }

    /// Removes every entry above `ts`; returns the first removed one.
    pub fn truncate_after(&mut self, ts: Timestamp) -> Option<(Timestamp, Location)> {
        let cut = self.entries.partition_point(|(t, _)| *t <= ts);
        let first_removed = self.entries.get(cut).copied();
        self.entries.truncate(cut);
        first_removed
    }

    /// Removes the entries of segment `seq`, which must be the oldest.
    pub fn remove_segment_front(&mut self, seq: u64) {
        while let Some((_, location)) = self.entries.front() {
            if location.seq != seq {
                assert!(location.seq > seq);
                break;
            }
            self.entries.pop_front();
        }
    }

    /// Every entry of segment `seq`: its timestamp and payload length.
    pub fn segment_entries(&self, seq: u64) -> Vec<(Timestamp, u32)> {
        let start = self.entries.partition_point(|(_, location)| location.seq < seq);
        let end = self.entries.partition_point(|(_, location)| location.seq <= seq);
        self.entries.range(start..end).map(|(ts, location)| (*ts, location.len)).collect()
    }

    /// The newest entry of segment `seq`, scanning back from the end.
    pub fn last_in_segment(&self, seq: u64) -> Option<Timestamp> {
        self.entries.iter().rev().find(|(_, location)| location.seq <= seq).filter(|(_, l)| l.seq == seq).map(|(ts, _)| *ts)
    }
}

/// Recent entries kept in memory, oldest first: always a suffix of the
/// index. Entries not yet written to their file are never evicted, so a
/// reader finds every entry either here or in a file.
pub struct RecentCache {
    entries: VecDeque<(Timestamp, Arc<[u8]>)>,
    bytes: usize,
    bytes_max: usize,
}

impl RecentCache {
    pub fn new(bytes_max: usize) -> RecentCache {
        RecentCache { entries: VecDeque::new(), bytes: 0, bytes_max }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn push(&mut self, ts: Timestamp, entry: Arc<[u8]>) {
        if let Some((last, _)) = self.entries.back() {
            assert!(ts > *last);
        }
        self.bytes += entry.len();
        self.entries.push_back((ts, entry));
    }

    pub fn get(&self, ts: Timestamp) -> Option<Arc<[u8]>> {
        let position = self.entries.partition_point(|(t, _)| *t < ts);
        match self.entries.get(position) {
            Some((found, entry)) if *found == ts => Some(entry.clone()),
            _ => None,
        }
    }

    /// Drops the oldest entries while over the byte budget, but only those
    /// already written to a file (timestamp <= `written_ts`).
    pub fn evict(&mut self, written_ts: Timestamp) {
        while self.bytes > self.bytes_max {
            match self.entries.front() {
                Some((ts, _)) if *ts <= written_ts => {
                    let (_, entry) = self.entries.pop_front().unwrap();
                    self.bytes -= entry.len();
                }
                _ => break,
            }
        }
    }

    pub fn truncate_after(&mut self, ts: Timestamp) {
        while let Some((last, _)) = self.entries.back() {
            if *last <= ts {
                break;
            }
            let (_, entry) = self.entries.pop_back().unwrap();
            self.bytes -= entry.len();
        }
    }

    /// Drops every entry at or below `ts` (their segment was deleted).
    pub fn remove_through(&mut self, ts: Timestamp) {
        while let Some((first, _)) = self.entries.front() {
            if *first > ts {
                break;
            }
            let (_, entry) = self.entries.pop_front().unwrap();
            self.bytes -= entry.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn location(seq: u64, offset: u64) -> Location {
        Location { seq, offset, len: 5 }
    }

    #[test]
    fn bounds_find_the_right_start() {
        let mut index = Index::default();
        for i in 1..=5 {
            index.push(Timestamp::new(i, 0), location(1, u64::from(i) * 100));
        }
        assert_eq!(index.start_position(Bound::Unbounded), 0);
        assert_eq!(index.start_position(Bound::Included(Timestamp::new(3, 0))), 2);
        assert_eq!(index.start_position(Bound::Excluded(Timestamp::new(3, 0))), 3);
        assert_eq!(index.start_position(Bound::Included(Timestamp::new(9, 0))), 5);
        assert_eq!(index.truncate_after(Timestamp::new(2, 5)), Some((Timestamp::new(3, 0), location(1, 300))));
        assert_eq!(index.last(), Some(Timestamp::new(2, 0)));
    }

    #[test]
    fn the_cache_keeps_unwritten_entries_over_budget() {
        let mut cache = RecentCache::new(10);
        for i in 1..=4 {
            cache.push(Timestamp::new(i, 0), Arc::from(vec![0u8; 5]));
        }
        cache.evict(Timestamp::new(1, 0));
        assert_eq!(cache.len(), 3);
        cache.evict(Timestamp::new(4, 0));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(Timestamp::new(4, 0)).is_some());
        assert!(cache.get(Timestamp::new(1, 0)).is_none());
        cache.truncate_after(Timestamp::new(3, 0));
        assert_eq!(cache.bytes(), 5);
    }
}
