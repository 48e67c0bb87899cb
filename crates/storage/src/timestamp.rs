//! Oplog timestamps and OpTimes: the types are `slipstream_clock`'s (one
//! definition for storage and consensus); this module adds their BSON form
//! and the oplog clock, the only thing in a node that hands out timestamps.

pub use slipstream_clock::{OpTime, Timestamp, UNINITIALIZED_TERM};

/// BSON conversions of a `Timestamp` (the clock crate knows nothing of BSON).
pub trait TimestampBson: Sized {
    fn to_bson(self) -> bson::Timestamp;
    fn from_bson(ts: bson::Timestamp) -> Self;
}

impl TimestampBson for Timestamp {
    fn to_bson(self) -> bson::Timestamp {
        bson::Timestamp { time: self.secs, increment: self.inc }
    }

    fn from_bson(ts: bson::Timestamp) -> Self {
        Timestamp { secs: ts.time, inc: ts.increment }
    }
}

/// `ts` as a BSON Timestamp.
pub fn bson_timestamp(ts: Timestamp) -> bson::Timestamp {
    ts.to_bson()
}

/// A BSON Timestamp as a `Timestamp`.
pub fn from_bson_timestamp(ts: bson::Timestamp) -> Timestamp {
    Timestamp::from_bson(ts)
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

    /// The next timestamp given the wall clock's current seconds. An
    /// increment at its maximum (a gossiped cluster time can put it there:
    /// it is not signed yet) carries into the next second, rather than
    /// stopping every write until the wall clock passes that second.
    pub fn tick(&mut self, wall_secs: u32) -> Timestamp {
        let next = if wall_secs > self.last.secs {
            Timestamp::new(wall_secs, 1)
        } else if self.last.inc < u32::MAX {
            Timestamp::new(self.last.secs, self.last.inc + 1)
        } else {
            assert!(self.last.secs < u32::MAX, "oplog clock at the end of time");
            Timestamp::new(self.last.secs + 1, 1)
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
        let mut full = OplogClock::new(Timestamp::new(200, u32::MAX));
        assert_eq!(full.tick(100), Timestamp::new(201, 1));
    }

    #[test]
    fn bson_round_trip() {
        let ts = Timestamp::new(1_700_000_000, 7);
        assert_eq!(from_bson_timestamp(bson_timestamp(ts)), ts);
        assert_eq!(bson_timestamp(ts), bson::Timestamp { time: 1_700_000_000, increment: 7 });
    }
}
