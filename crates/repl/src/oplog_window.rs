//! The oplog window: how far back this member's oplog reaches, in time and
//! bytes, for `replSetGetStatus.oplogWindow`, `serverStatus.oplog` and
//! `collStats` of `local.oplog.rs` (which mongosh's
//! `rs.printReplicationInfo()` reads). A member whose last entry is older
//! than a source's first entry cannot catch up from it.
//!
//! What the capped oplog keeps: the journal deletes whole old segments
//! once over its cap, but never an entry at or above the storage engine's
//! recovery floor (the checkpoint's timestamp, or its history floor when the
//! checkpoint went past a stalled commit point), which is never above the
//! commit point; so every entry a restart replays, and every entry a
//! rollback to the commit point needs, stays (`retainedFrom` is that floor).

use bson::{doc, Document};
use slipstream_storage::{bson_timestamp, Engine, Timestamp};

const SECONDS_PER_HOUR: f64 = 3_600.0;

/// The window's span in hours, from the first and last entries' timestamps
/// (their seconds are wall-clock seconds), to two decimals as mongosh
/// prints it.
pub fn window_hours(first: Timestamp, last: Timestamp) -> f64 {
    let seconds = f64::from(last.secs.saturating_sub(first.secs));
    (seconds / SECONDS_PER_HOUR * 100.0).round() / 100.0
}

/// `{earliestOptime, latestOptime, windowHours, sizeBytes, maxSizeBytes,
/// retainedFrom}`, and `initialSyncHeldFrom` while an initial sync reading
/// from this member holds older entries (`initial_sync/oplog_hold.rs`).
pub fn window_document(engine: &Engine) -> Document {
    let stats = engine.stats();
    let mut window = doc! {
        "earliestOptime": bson_timestamp(stats.oplog_first),
        "latestOptime": bson_timestamp(stats.oplog_last),
        "windowHours": window_hours(stats.oplog_first, stats.oplog_last),
        "sizeBytes": stats.oplog_size_bytes as i64,
        "maxSizeBytes": stats.oplog_size_cap_bytes as i64,
        "retainedFrom": bson_timestamp(stats.oldest_timestamp),
    };
    if let Some(held) = engine.oplog_hold_floor() {
        window.insert("initialSyncHeldFrom", bson_timestamp(held));
    }
    window
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hours_round_to_two_decimals() {
        assert_eq!(
            window_hours(Timestamp::new(1_000, 5), Timestamp::new(1_000 + 5_400, 1)),
            1.5
        );
        assert_eq!(window_hours(Timestamp::new(10, 0), Timestamp::new(10, 9)), 0.0);
        assert_eq!(window_hours(Timestamp::new(100, 0), Timestamp::new(10, 0)), 0.0);
        assert_eq!(window_hours(Timestamp::new(0, 0), Timestamp::new(36, 0)), 0.01);
    }
}
