//! The replica set's reporting surface: what a member tells drivers,
//! operators and monitoring about itself, in MongoDB 7.0's shapes.
//!
//! Everything here except `metrics_http` is a pure function of a
//! `ReplSnapshot` (captured from the consensus node plus the I/O layer's
//! extras) and of the `ReplMetrics` counters the runtime bumps:
//!
//! - `hello_fields`: the topology fields of `hello` / `isMaster`;
//! - `status_document`: `replSetGetStatus` (mongosh's `rs.status()`);
//! - `server_status_repl`: `serverStatus.repl`;
//! - `metrics_repl_document`, `election_metrics_document`,
//!   `get_last_error_document`: `serverStatus.metrics.repl`,
//!   `serverStatus.electionMetrics`, `serverStatus.metrics.getLastError`;
//! - `prometheus_text`: the same numbers in Prometheus' text format, served
//!   by `metrics_http::serve`.
//!
//! Dates: the core counts monotonic `Millis`; a snapshot carries one
//! (`now`, `now_wall_ms`) pair taken together, and every date derived from
//! a `Millis` goes through it (`ReplSnapshot::wall_ms_at`).

pub mod hello;
pub mod metrics;
pub mod metrics_http;
pub mod prometheus;
pub mod server_status;
pub mod snapshot;
pub mod status;

pub use hello::{election_id, hello_fields};
pub use metrics::{
    election_metrics_document, get_last_error_document, metrics_repl_document, ReplMetrics, SyncSourceSelection,
    WRITE_CONCERN_WAIT_BUCKETS_MS,
};
pub use prometheus::prometheus_text;
pub use server_status::server_status_repl;
pub use snapshot::{MemberExtras, ReplSnapshot, SetView, SnapshotExtras};
pub use status::status_document;

use bson::{doc, Bson, DateTime, Document};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_storage::bson_timestamp;

/// `{ts, t}` as MongoDB's `OpTime::append` writes it (`t` a BSON long).
pub(crate) fn op_time_document(op: OpTime) -> Document {
    doc! {"ts": bson_timestamp(op.ts), "t": op.term}
}

/// A BSON date from ms since the epoch.
pub(crate) fn date(wall_ms: i64) -> Bson {
    Bson::DateTime(DateTime::from_millis(wall_ms))
}

/// The date MongoDB derives from a timestamp: its seconds, whole
/// (`optimeDate`, `electionDate`, `lastWrite.lastWriteDate`).
pub(crate) fn timestamp_date(ts: Timestamp) -> Bson {
    date(i64::from(ts.secs) * 1000)
}

/// A number as MongoDB's `BSONObjBuilder::appendNumber(long long)` writes
/// it: an int strictly within +-2^30, a double strictly within +-2^40, a
/// long beyond (`configVersion`, `TimerStats`' `num` / `totalMillis`).
pub(crate) fn append_number(value: i64) -> Bson {
    const INT_LIMIT: u64 = 1 << 30;
    const DOUBLE_LIMIT: u64 = 1 << 40;
    if value.unsigned_abs() < INT_LIMIT {
        Bson::Int32(value as i32)
    } else if value.unsigned_abs() < DOUBLE_LIMIT {
        Bson::Double(value as f64)
    } else {
        Bson::Int64(value)
    }
}

/// A counter as MongoDB's `Counter64` metrics write it: always a long,
/// saturating at `i64::MAX` (a u64 counter never wraps to negative).
pub(crate) fn counter(value: u64) -> Bson {
    Bson::Int64(i64::try_from(value).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_number_uses_int_then_double_then_long() {
        assert_eq!(append_number(1), Bson::Int32(1));
        assert_eq!(append_number(-1), Bson::Int32(-1));
        assert_eq!(append_number((1 << 30) - 1), Bson::Int32((1 << 30) - 1));
        assert_eq!(append_number(1 << 30), Bson::Double((1u64 << 30) as f64));
        assert_eq!(append_number(-(1 << 30)), Bson::Double(-((1u64 << 30) as f64)));
        assert_eq!(append_number((1 << 40) - 1), Bson::Double(((1u64 << 40) - 1) as f64));
        assert_eq!(append_number(1 << 40), Bson::Int64(1 << 40));
        assert_eq!(append_number(i64::MIN), Bson::Int64(i64::MIN));
        assert_eq!(counter(u64::MAX), Bson::Int64(i64::MAX));
    }

    #[test]
    fn timestamp_dates_are_whole_seconds() {
        let ts = Timestamp::new(1_705_985_113, 5);
        assert_eq!(
            timestamp_date(ts),
            Bson::DateTime(DateTime::from_millis(1_705_985_113_000))
        );
        let op = op_time_document(OpTime::new(ts, 3));
        assert_eq!(op.get_i64("t").ok(), Some(3));
        assert_eq!(
            op.get_timestamp("ts").ok().map(|t| (t.time, t.increment)),
            Some((1_705_985_113, 5))
        );
    }
}
