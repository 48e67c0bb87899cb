//! The node's position in its oplog: the newest visible entry's timestamp,
//! term and wall date, read together without a lock.
//!
//! The engine publishes a new position after every write and after every
//! applied batch; readers (`hello`, heartbeats, write-concern waits,
//! `serverStatus`) must never see the timestamp of one entry with the term
//! of another: an OpTime made of two entries orders wrongly in an
//! election. A mutex would put a lock on the commit path for every entry,
//! so the three values sit behind a sequence counter instead (a seqlock):
//! the one writer (whoever holds the engine's write lock) makes the counter
//! odd, stores, makes it even again; a reader retries while the counter is
//! odd or moved during its read.

use std::sync::atomic::{fence, AtomicI64, AtomicU64, Ordering};

use crate::{OpTime, Timestamp};

/// An oplog position with the `wall` date (milliseconds since the epoch)
/// of the entry at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub optime: OpTime,
    pub wall_ms: i64,
}

impl Position {
    pub fn new(optime: OpTime, wall_ms: i64) -> Position {
        Position { optime, wall_ms }
    }
}

/// How many times a reader retries before it yields the CPU: a writer
/// holds the counter odd for a few stores only.
const SPINS_BEFORE_YIELD: u32 = 64;

/// A `Position` written by one writer at a time and read by anyone.
pub struct PositionCell {
    /// Odd while a store is in progress.
    sequence: AtomicU64,
    /// The timestamp, readable on its own (`visible_ts`): readers that only
    /// need the visible timestamp load it with Acquire and skip the counter.
    ts: AtomicU64,
    term: AtomicI64,
    wall_ms: AtomicI64,
}

impl PositionCell {
    pub fn new(position: Position) -> PositionCell {
        PositionCell {
            sequence: AtomicU64::new(0),
            ts: AtomicU64::new(position.optime.ts.as_u64()),
            term: AtomicI64::new(position.optime.term),
            wall_ms: AtomicI64::new(position.wall_ms),
        }
    }

    /// The timestamp alone. The store of the timestamp is a Release, so a
    /// reader that sees it also sees every change the writer made before
    /// it (the versions of the entry).
    pub fn ts(&self) -> Timestamp {
        Timestamp::from_u64(self.ts.load(Ordering::Acquire))
    }

    /// Stores a new position. Callers serialize stores (the engine's write
    /// lock); two concurrent stores would break the counter's parity.
    pub fn store(&self, position: Position) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        assert!(sequence.is_multiple_of(2), "a position store is already in progress");
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        // The odd counter must be visible before any of the new values.
        fence(Ordering::Release);
        self.term.store(position.optime.term, Ordering::Relaxed);
        self.wall_ms.store(position.wall_ms, Ordering::Relaxed);
        self.ts.store(position.optime.ts.as_u64(), Ordering::Release);
        self.sequence.store(sequence + 2, Ordering::Release);
    }

    /// The three values of one store.
    pub fn load(&self) -> Position {
        let mut spins = 0u32;
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            if before.is_multiple_of(2) {
                let ts = self.ts.load(Ordering::Acquire);
                let term = self.term.load(Ordering::Relaxed);
                let wall_ms = self.wall_ms.load(Ordering::Relaxed);
                // The loads above must complete before the counter is read
                // again.
                fence(Ordering::Acquire);
                if self.sequence.load(Ordering::Relaxed) == before {
                    return Position::new(OpTime::new(Timestamp::from_u64(ts), term), wall_ms);
                }
            }
            spins += 1;
            if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::Arc;

    use super::*;

    /// Each store writes `ts = (n, n)`, `term = n`, `wall = n`: a reader
    /// must never see values of two different stores. The writer keeps
    /// storing until every reader has read many times while it writes (an
    /// optimized build's writer could finish before a reader ran at all).
    #[test]
    fn readers_never_see_a_mix_of_two_stores() {
        const STORES_MIN: i64 = 200_000;
        const READS_MIN: u64 = 10_000;
        let cell = Arc::new(PositionCell::new(Position::new(OpTime::new(Timestamp::ZERO, 0), 0)));
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let readers: Vec<_> = counts
            .iter()
            .map(|count| {
                let (cell, stop, count) = (cell.clone(), stop.clone(), count.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let position = cell.load();
                        let n = position.optime.term;
                        assert_eq!(position.optime.ts, Timestamp::new(n as u32, n as u32));
                        assert_eq!(position.wall_ms, n);
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut n = 0i64;
        while n < STORES_MIN || counts.iter().any(|c| c.load(Ordering::Relaxed) < READS_MIN) {
            n += 1;
            assert!(n < u32::MAX as i64);
            cell.store(Position::new(OpTime::new(Timestamp::new(n as u32, n as u32), n), n));
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            reader.join().unwrap();
        }
        assert_eq!(cell.ts(), Timestamp::new(n as u32, n as u32));
    }
}
