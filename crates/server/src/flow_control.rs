//! Flow control: client writes wait while the storage engine's versions in
//! memory are far past their bound, i.e. while checkpoints (which go past a
//! stalled commit point to empty memory, `storage/src/checkpoint.rs`) fall
//! behind the writes. A write waits at most `WAIT_PER_WRITE_MAX` and then
//! goes on: a `w: 1` write is slowed, never refused, and nothing committed
//! is lost. MongoDB's flow control throttles on majority lag instead; here
//! the lag needs no throttle (the history goes to disk), so memory is what
//! decides. `serverStatus.flowControl` reports it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::{doc, Document};
use slipstream_storage::Engine;

/// Writes wait while the versions in memory cost more than this many times
/// their bound: below it the checkpoint thread keeps up on its own.
pub const THROTTLE_FACTOR: u64 = 2;
/// Longest one write waits for memory to come back under the threshold.
pub const WAIT_PER_WRITE_MAX: Duration = Duration::from_secs(1);
/// How often a waiting write looks at memory again.
const WAIT_STEP: Duration = Duration::from_millis(5);
/// MongoDB's `flowControlTargetLagSeconds`: the majority lag reported as
/// `isLagged`.
pub const TARGET_LAG_SECS: u32 = 10;
/// `targetRateLimit` when nothing is held back (MongoDB's value then).
const NO_RATE_LIMIT: i64 = 1_000_000_000;

/// Counters for `serverStatus.flowControl` (atomics: any connection counts).
#[derive(Debug, Default)]
pub struct FlowControl {
    /// Microseconds client writes spent waiting here, in total.
    time_acquiring_micros: AtomicU64,
    /// Writes that had to wait.
    throttled_writes: AtomicU64,
    /// Whether the last write that looked found memory past the threshold.
    throttling: AtomicBool,
}

/// Whether the engine's versions in memory are past the threshold.
fn over_threshold(engine: &Engine) -> bool {
    let (bytes, max) = engine.history_pressure();
    bytes > max.saturating_mul(THROTTLE_FACTOR)
}

impl FlowControl {
    /// Lets one client write go on, after waiting while memory is past the
    /// threshold (at most `WAIT_PER_WRITE_MAX`, and never past `deadline`,
    /// the command's `maxTimeMS`).
    pub async fn admit(&self, engine: &Engine, deadline: Option<Instant>) {
        if !over_threshold(engine) {
            self.throttling.store(false, Ordering::Relaxed);
            return;
        }
        self.throttling.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let mut until = started + WAIT_PER_WRITE_MAX;
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        while Instant::now() < until && over_threshold(engine) {
            tokio::time::sleep(WAIT_STEP).await;
        }
        let waited = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.time_acquiring_micros.fetch_add(waited, Ordering::Relaxed);
        self.throttled_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// MongoDB's `flowControl` section, with the memory it acts on and the
    /// majority lag (newest entry's seconds minus the stable timestamp's).
    pub fn server_status(&self, engine: &Engine) -> Document {
        let lag_secs = match engine.stable_timestamp() {
            Some(stable) => engine.last_applied().ts.secs.saturating_sub(stable.secs),
            None => 0,
        };
        let (bytes, max) = engine.history_pressure();
        let throttling = self.throttling.load(Ordering::Relaxed);
        doc! {
            "enabled": true,
            // MongoDB's field: no ticket rate is computed here (writes wait
            // on memory, not on tickets; `isThrottling` says when), so it
            // reads as MongoDB's "unlimited".
            "targetRateLimit": NO_RATE_LIMIT,
            "timeAcquiringMicros": self.time_acquiring_micros.load(Ordering::Relaxed) as i64,
            "isLagged": lag_secs > TARGET_LAG_SECS,
            "majorityLagSeconds": i64::from(lag_secs),
            "isThrottling": throttling,
            "throttledWrites": self.throttled_writes.load(Ordering::Relaxed) as i64,
            "historyBytesInMemory": bytes as i64,
            "historyBytesThreshold": max.saturating_mul(THROTTLE_FACTOR) as i64,
        }
    }
}
