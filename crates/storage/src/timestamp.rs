//! Oplog timestamps and OpTimes.
//!
//! A `Timestamp` is MongoDB's BSON Timestamp: wall-clock seconds and an
//! increment within that second (seed 001, A1.2). It orders by seconds,
//! then increment. An `OpTime` pairs it with the term of the primary that
//! wrote the entry and orders by term first (seed 000, 3.1).

use std::fmt;

/// A BSON timestamp `(seconds, increment)`, ordered lexicographically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: u32,
    pub inc: u32,
}

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp { secs: 0, inc: 0 };
    pub const MAX: Timestamp = Timestamp { secs: u32::MAX, inc: u32::MAX };

    pub fn new(secs: u32, inc: u32) -> Self {
        Timestamp { secs, inc }
    }

    /// The timestamp as one u64 (seconds in the high half): the same order.
    pub fn as_u64(self) -> u64 {
        (u64::from(self.secs) << 32) | u64::from(self.inc)
    }

    pub fn from_u64(value: u64) -> Self {
        Timestamp { secs: (value >> 32) as u32, inc: value as u32 }
    }

    pub fn to_bson(self) -> bson::Timestamp {
        bson::Timestamp { time: self.secs, increment: self.inc }
    }

    pub fn from_bson(ts: bson::Timestamp) -> Self {
        Timestamp { secs: ts.time, inc: ts.increment }
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}, {})", self.secs, self.inc)
    }
}

/// The position of an oplog entry: `(term, timestamp)`, ordered by term
/// first, then timestamp.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpTime {
    pub term: i64,
    pub ts: Timestamp,
}

/// The term written into oplog entries before any election (a standalone
/// node), as MongoDB's uninitialized term.
pub const UNINITIALIZED_TERM: i64 = -1;

impl OpTime {
    pub fn new(ts: Timestamp, term: i64) -> Self {
        OpTime { term, ts }
    }
}

/// Ticks oplog timestamps: wall-clock seconds with an increment within the
/// second, strictly increasing even when the wall clock steps back (the
/// seconds then stay at the last value and the increment keeps counting).
#[derive(Debug)]
pub struct OplogClock {
    last: Timestamp,
}

impl OplogClock {
    pub fn new(last: Timestamp) -> Self {
        OplogClock { last }
    }

    pub fn last(&self) -> Timestamp {
        self.last
    }

    /// The next timestamp given the wall clock's current seconds.
    pub fn tick(&mut self, wall_secs: u32) -> Timestamp {
        let next = if wall_secs > self.last.secs {
            Timestamp::new(wall_secs, 1)
        } else {
            assert!(self.last.inc < u32::MAX, "oplog clock increment overflow");
            Timestamp::new(self.last.secs, self.last.inc + 1)
        };
        assert!(next > self.last);
        self.last = next;
        next
    }

    /// Move the clock forward to at least `ts` (an entry applied from
    /// elsewhere, or recovered from the journal).
    pub fn advance_to(&mut self, ts: Timestamp) {
        if ts > self.last {
            self.last = ts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_is_strictly_increasing_when_wall_clock_steps_back() {
        let mut clock = OplogClock::new(Timestamp::ZERO);
        let a = clock.tick(100);
        let b = clock.tick(100);
        let c = clock.tick(90);
        let d = clock.tick(101);
        assert_eq!(a, Timestamp::new(100, 1));
        assert_eq!(b, Timestamp::new(100, 2));
        assert_eq!(c, Timestamp::new(100, 3));
        assert_eq!(d, Timestamp::new(101, 1));
    }

    #[test]
    fn optime_orders_by_term_first() {
        let older_term = OpTime::new(Timestamp::new(200, 1), 1);
        let newer_term = OpTime::new(Timestamp::new(100, 1), 2);
        assert!(older_term < newer_term);
    }
}
