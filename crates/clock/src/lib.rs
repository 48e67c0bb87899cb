//! Time in a Slipstream replica set: the one definition of `Timestamp`,
//! `OpTime` and `ClusterTime`, shared by storage (which hands timestamps
//! out, through its oplog clock) and the consensus core (which only
//! compares them).
//!
//! - A `Timestamp` is MongoDB's BSON Timestamp: wall-clock seconds and an
//!   increment within that second (seed 001, A1.2). It orders by seconds,
//!   then increment.
//! - An `OpTime` pairs a timestamp with the term of the primary that wrote
//!   the entry and orders by term first (seed 000, 3.1).
//! - A `ClusterTime` is the cluster-wide logical clock's value: the greatest
//!   timestamp a node has seen, gossiped in `$clusterTime` (seed 001, A1.3).
//!
//! This crate depends on nothing, not even bson: conversions to BSON live
//! in the storage crate. It reads no clock; callers pass wall time in.

use std::fmt;

/// A BSON timestamp `(seconds, increment)`, ordered lexicographically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: u32,
    pub inc: u32,
}

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp { secs: 0, inc: 0 };
    pub const MAX: Timestamp = Timestamp {
        secs: u32::MAX,
        inc: u32::MAX,
    };

    pub const fn new(secs: u32, inc: u32) -> Self {
        Timestamp { secs, inc }
    }

    /// The timestamp as one u64 (seconds in the high half): the same order.
    pub const fn as_u64(self) -> u64 {
        ((self.secs as u64) << 32) | self.inc as u64
    }

    pub const fn from_u64(value: u64) -> Self {
        Timestamp {
            secs: (value >> 32) as u32,
            inc: value as u32,
        }
    }

    pub fn is_zero(self) -> bool {
        self == Timestamp::ZERO
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}, {})", self.secs, self.inc)
    }
}

/// The term written into oplog entries that no elected primary wrote (a
/// standalone node's entries), as MongoDB's uninitialized term.
pub const UNINITIALIZED_TERM: i64 = -1;

/// The position of an oplog entry: `(term, timestamp)`, ordered by term
/// first, then timestamp. Field order matters: `Ord` is derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpTime {
    pub term: i64,
    pub ts: Timestamp,
}

impl OpTime {
    /// The position before the first entry of any oplog (MongoDB's null
    /// OpTime `{ts: Timestamp(0, 0), t: -1}`): it sorts before every entry.
    pub const NULL: OpTime = OpTime {
        term: UNINITIALIZED_TERM,
        ts: Timestamp::ZERO,
    };

    /// The one constructor: timestamp first, then term (MongoDB's order).
    pub const fn new(ts: Timestamp, term: i64) -> Self {
        OpTime { term, ts }
    }

    /// True for the position before any entry.
    pub fn is_null(&self) -> bool {
        self.ts.is_zero()
    }
}

impl Default for OpTime {
    fn default() -> Self {
        OpTime::NULL
    }
}

impl fmt::Display for OpTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{ts: {}, t: {}}}", self.ts, self.term)
    }
}

/// How far past the wall clock a received cluster time may be before it is
/// refused (MongoDB's `maxAcceptableLogicalClockDriftSecs`, one year): the
/// rate limit of seed 001 A1.5, which keeps a wrong clock or a bad client
/// from pushing the oplog's timestamps to the end of time.
pub const MAX_ACCEPTABLE_CLOCK_DRIFT_SECS: u32 = 365 * 24 * 60 * 60;

/// The cluster-wide logical clock's value (seed 001 A1): ticks only with
/// writes to a primary's oplog, is advanced by gossip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterTime(pub Timestamp);

/// Why a received cluster time was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterTimeDrift {
    pub received: Timestamp,
    pub wall_secs: u32,
}

impl fmt::Display for ClusterTimeDrift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limiter does not allow advancing the cluster time to {}: it is more than {} seconds ahead of the wall clock ({})",
            self.received, MAX_ACCEPTABLE_CLOCK_DRIFT_SECS, self.wall_secs
        )
    }
}

impl ClusterTime {
    /// Checks a cluster time received from outside against the drift limit.
    pub fn check_drift(received: Timestamp, wall_secs: u32) -> Result<ClusterTime, ClusterTimeDrift> {
        let limit = wall_secs.saturating_add(MAX_ACCEPTABLE_CLOCK_DRIFT_SECS);
        if received.secs > limit {
            return Err(ClusterTimeDrift { received, wall_secs });
        }
        Ok(ClusterTime(received))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optime_orders_by_term_first() {
        let older_term = OpTime::new(Timestamp::new(200, 1), 1);
        let newer_term = OpTime::new(Timestamp::new(100, 1), 2);
        assert!(older_term < newer_term);
        assert!(OpTime::new(Timestamp::new(1, 1), 1) < OpTime::new(Timestamp::new(1, 2), 1));
    }

    #[test]
    fn null_sorts_before_every_entry() {
        let standalone_entry = OpTime::new(Timestamp::new(1, 1), UNINITIALIZED_TERM);
        assert!(OpTime::NULL < standalone_entry);
        assert!(OpTime::NULL < OpTime::new(Timestamp::new(0, 1), 0));
        assert!(OpTime::NULL.is_null());
        assert!(!standalone_entry.is_null());
        assert_eq!(OpTime::default(), OpTime::NULL);
    }

    #[test]
    fn u64_form_keeps_the_order() {
        let a = Timestamp::new(5, u32::MAX);
        let b = Timestamp::new(6, 0);
        assert!(a < b);
        assert!(a.as_u64() < b.as_u64());
        assert_eq!(Timestamp::from_u64(a.as_u64()), a);
    }

    #[test]
    fn drift_limit_refuses_far_future_times() {
        let wall = 1_700_000_000;
        assert!(ClusterTime::check_drift(Timestamp::new(wall + 10, 1), wall).is_ok());
        let limit = wall + MAX_ACCEPTABLE_CLOCK_DRIFT_SECS;
        assert!(ClusterTime::check_drift(Timestamp::new(limit, u32::MAX), wall).is_ok());
        let err = ClusterTime::check_drift(Timestamp::new(limit + 1, 0), wall).unwrap_err();
        assert_eq!(err.received, Timestamp::new(limit + 1, 0));
        assert!(
            ClusterTime::check_drift(Timestamp::MAX, u32::MAX).is_ok(),
            "no overflow at the top"
        );
    }
}
