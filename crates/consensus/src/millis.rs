//! `Millis`: a member's monotonic time. Oplog positions (`OpTime`,
//! `Timestamp`) come from the `clock` crate; wall-clock dates of oplog
//! entries travel as plain `i64` milliseconds since the Unix epoch.

use slipstream_clock::OpTime;
use std::fmt;

/// A point in time as seen by one member, in milliseconds of its monotonic
/// clock. The I/O layer reads its clock and passes the value in; this crate
/// never reads a clock. Only differences between two `Millis` of the same
/// member mean anything.
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

/// An OpTime written compactly for traces and scenario scripts:
/// `term:secs.inc`, or `null` for `OpTime::NULL`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortOpTime(pub OpTime);

impl fmt::Display for ShortOpTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_null() {
            return f.write_str("null");
        }
        write!(f, "{}:{}.{}", self.0.term, self.0.ts.secs, self.0.ts.inc)
    }
}
