//! Positions in the oplog: `Timestamp`, `OpTime` and member identifiers.

use std::fmt;

/// A member's `_id` in the replica set configuration.
pub type MemberId = u32;

/// A point in time as seen by one member, in milliseconds. The I/O layer
/// reads its clock and passes the value in; this crate never reads a clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(pub u64);

impl Millis {
    /// The instant `ms` milliseconds after this one (saturating).
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// Milliseconds elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// The oplog timestamp: a logical clock in milliseconds that orders
/// entries. A primary assigns `max(previous + 1, now)`, so timestamps follow
/// the primary's clock and stay unique when writes come faster than one per
/// millisecond. Lag and freshness rules (`maxSyncSourceLag`, priority
/// takeover) compare them as milliseconds. The `repl` layer shows one as
/// MongoDB's `Timestamp(secs, inc)` with `secs = ts / 1000` and
/// `inc = ts % 1000`, which keeps the order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

/// An oplog entry's identity: the primary's term and the entry's timestamp,
/// compared lexicographically (seed 000 section 3.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpTime {
    /// Term of the primary that wrote the entry.
    pub term: u64,
    /// Timestamp of the entry.
    pub timestamp: Timestamp,
}

impl OpTime {
    /// The position before the first entry of any oplog.
    pub const NULL: OpTime = OpTime { term: 0, timestamp: Timestamp(0) };

    /// Builds an OpTime from a term and a raw timestamp.
    pub const fn new(term: u64, timestamp: u64) -> OpTime {
        OpTime { term, timestamp: Timestamp(timestamp) }
    }

    /// True for the position before any entry.
    pub fn is_null(&self) -> bool {
        *self == OpTime::NULL
    }
}

impl fmt::Display for OpTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.term, self.timestamp.0)
    }
}
