//! `ReplMetrics`: counters the replication runtime bumps as it works, read
//! by `serverStatus` and the Prometheus endpoint.
//!
//! Every field is a relaxed `AtomicU64`: bumping one costs an atomic add on
//! the hot path (applier, fetcher, write-concern waiters) and no lock.
//! Readers may see two counters from slightly different instants; each
//! counter on its own is exact and never goes back. Gauges (buffer, waiter
//! count) are stored, not added.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bson::{doc, Document};
use slipstream_consensus::{CatchUpOutcome, ElectionReason};

use super::{append_number, counter};

/// Upper bounds (ms) of the write-concern wait histogram's buckets; one
/// more bucket counts everything above the last. Spans a loopback majority
/// round (sub-ms) up to a typical `wtimeout`.
pub const WRITE_CONCERN_WAIT_BUCKETS_MS: [u64; 14] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000];

/// Buckets including the overflow one.
const WAIT_BUCKET_SLOTS: usize = WRITE_CONCERN_WAIT_BUCKETS_MS.len() + 1;

/// The election reasons MongoDB counts separately in `electionMetrics`
/// (the two step-up reasons share `stepUpCmd`).
const ELECTION_COUNTER_NAMES: [&str; 5] = [
    "stepUpCmd",
    "priorityTakeover",
    "catchUpTakeover",
    "electionTimeout",
    "freezeTimeout",
];

/// How a sync source selection ended (`metrics.repl.syncSource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSourceSelection {
    /// A different member than before.
    ChoseDifferent,
    /// The same member as before.
    ChoseSame,
    /// No eligible member.
    CouldNotFind,
}

/// An election counter pair: attempts and wins.
#[derive(Debug, Default)]
struct ElectionCounter {
    called: AtomicU64,
    successful: AtomicU64,
}

/// A latency histogram with fixed buckets, in microseconds.
#[derive(Debug, Default)]
struct WaitHistogram {
    /// Observations per bucket (not cumulative); the last is the overflow.
    buckets: [AtomicU64; WAIT_BUCKET_SLOTS],
    /// Sum of all observations, in µs.
    sum_micros: AtomicU64,
}

/// A consistent-enough reading of a `WaitHistogram`: cumulative counts per
/// bound, and a total equal to the last cumulative count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistogramReading {
    /// `(upper bound in ms, observations at or below it)`, then the total
    /// under `None` (the `+Inf` bucket).
    pub cumulative: Vec<(Option<u64>, u64)>,
    /// Number of observations.
    pub count: u64,
    /// Sum of observations, in µs.
    pub sum_micros: u64,
}

/// The replication runtime's counters (see the module doc). Shared as an
/// `Arc<ReplMetrics>`; every method takes `&self`.
#[derive(Debug, Default)]
pub struct ReplMetrics {
    apply_batches: AtomicU64,
    apply_micros: AtomicU64,
    apply_ops: AtomicU64,
    getmores: AtomicU64,
    getmore_micros: AtomicU64,
    getmore_empty_batches: AtomicU64,
    network_ops: AtomicU64,
    network_bytes: AtomicU64,
    buffer_count: AtomicU64,
    buffer_size_bytes: AtomicU64,
    buffer_max_size_bytes: AtomicU64,
    update_positions_sent: AtomicU64,
    sync_source_chose_different: AtomicU64,
    sync_source_chose_same: AtomicU64,
    sync_source_not_found: AtomicU64,
    write_concern_waits: WaitHistogram,
    write_concern_timeouts: AtomicU64,
    write_concern_waiters: AtomicU64,
    /// Majority waiters on a primary, which wait on the commit point
    /// themselves (`ReplicaSet::wait_majority_as_primary`).
    majority_waiters: AtomicU64,
    elections: [ElectionCounter; ELECTION_COUNTER_NAMES.len()],
    step_downs_for_higher_term: AtomicU64,
    catch_ups: [AtomicU64; 4],
}

fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}

fn load(value: &AtomicU64) -> u64 {
    value.load(Ordering::Relaxed)
}

fn bump(value: &AtomicU64, by: u64) {
    value.fetch_add(by, Ordering::Relaxed);
}

impl ReplMetrics {
    /// Counters at zero; `buffer_max_size_bytes` is the fetcher's bound.
    pub fn new(buffer_max_size_bytes: u64) -> ReplMetrics {
        let metrics = ReplMetrics::default();
        metrics
            .buffer_max_size_bytes
            .store(buffer_max_size_bytes, Ordering::Relaxed);
        metrics
    }

    /// The applier applied one batch of `ops` entries in `elapsed`.
    pub fn record_apply_batch(&self, ops: u64, elapsed: Duration) {
        bump(&self.apply_batches, 1);
        bump(&self.apply_micros, micros(elapsed));
        bump(&self.apply_ops, ops);
    }

    /// The fetcher got an answer to a `find` / `getMore` on the sync
    /// source's oplog: `ops` entries, `bytes` of them, after `elapsed`.
    pub fn record_getmore(&self, ops: u64, bytes: u64, elapsed: Duration) {
        bump(&self.getmores, 1);
        bump(&self.getmore_micros, micros(elapsed));
        if ops == 0 {
            bump(&self.getmore_empty_batches, 1);
        }
        bump(&self.network_ops, ops);
        bump(&self.network_bytes, bytes);
    }

    /// What the fetcher holds for the applier now (a gauge).
    pub fn set_buffer(&self, count: u64, size_bytes: u64) {
        self.buffer_count.store(count, Ordering::Relaxed);
        self.buffer_size_bytes.store(size_bytes, Ordering::Relaxed);
    }

    /// A `replSetUpdatePosition` left for the sync source.
    pub fn record_update_position_sent(&self) {
        bump(&self.update_positions_sent, 1);
    }

    /// The core chose (or failed to choose) a sync source.
    pub fn record_sync_source_selection(&self, selection: SyncSourceSelection) {
        let counter = match selection {
            SyncSourceSelection::ChoseDifferent => &self.sync_source_chose_different,
            SyncSourceSelection::ChoseSame => &self.sync_source_chose_same,
            SyncSourceSelection::CouldNotFind => &self.sync_source_not_found,
        };
        bump(counter, 1);
    }

    /// A write-concern wait ended after `elapsed` (`timed_out`: by its
    /// `wtimeout`).
    pub fn record_write_concern_wait(&self, elapsed: Duration, timed_out: bool) {
        let elapsed_micros = micros(elapsed);
        let slot = WRITE_CONCERN_WAIT_BUCKETS_MS
            .iter()
            .position(|&bound_ms| elapsed_micros <= bound_ms * 1_000)
            .unwrap_or(WRITE_CONCERN_WAIT_BUCKETS_MS.len());
        bump(&self.write_concern_waits.buckets[slot], 1);
        bump(&self.write_concern_waits.sum_micros, elapsed_micros);
        if timed_out {
            bump(&self.write_concern_timeouts, 1);
        }
    }

    /// How many write-concern waiters are registered now (a gauge).
    pub fn set_write_concern_waiters(&self, waiters: u64) {
        self.write_concern_waiters.store(waiters, Ordering::Relaxed);
    }

    /// A majority waiter that waits on its own started (`begin`) or ended.
    pub fn majority_waiter(&self, begin: bool) {
        if begin {
            self.majority_waiters.fetch_add(1, Ordering::Relaxed);
        } else {
            self.majority_waiters.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// An election attempt ended (one call per `ElectionFinished` action).
    pub fn record_election(&self, reason: ElectionReason, won: bool) {
        let counter = &self.elections[election_slot(reason)];
        bump(&counter.called, 1);
        if won {
            bump(&counter.successful, 1);
        }
    }

    /// The primary stepped down because it saw a higher term.
    pub fn record_step_down_for_higher_term(&self) {
        bump(&self.step_downs_for_higher_term, 1);
    }

    /// A new primary's catch-up ended.
    pub fn record_catch_up(&self, outcome: CatchUpOutcome) {
        bump(&self.catch_ups[catch_up_slot(outcome)], 1);
    }

    /// The write-concern wait histogram as it stands.
    pub fn write_concern_wait_reading(&self) -> HistogramReading {
        let histogram = &self.write_concern_waits;
        let mut cumulative = Vec::with_capacity(WAIT_BUCKET_SLOTS);
        let mut running = 0u64;
        for (slot, bucket) in histogram.buckets.iter().enumerate() {
            running = running.saturating_add(load(bucket));
            cumulative.push((WRITE_CONCERN_WAIT_BUCKETS_MS.get(slot).copied(), running));
        }
        HistogramReading {
            cumulative,
            count: running,
            sum_micros: load(&histogram.sum_micros),
        }
    }

    /// Write-concern waits that hit their `wtimeout`.
    pub fn write_concern_timeouts(&self) -> u64 {
        load(&self.write_concern_timeouts)
    }

    /// `(batches, ops, total µs)` applied.
    pub fn apply_totals(&self) -> (u64, u64, u64) {
        (
            load(&self.apply_batches),
            load(&self.apply_ops),
            load(&self.apply_micros),
        )
    }

    /// `(getMores, ops, bytes)` fetched.
    pub fn network_totals(&self) -> (u64, u64, u64) {
        (load(&self.getmores), load(&self.network_ops), load(&self.network_bytes))
    }

    /// `(count, size bytes)` buffered.
    pub fn buffer(&self) -> (u64, u64) {
        (load(&self.buffer_count), load(&self.buffer_size_bytes))
    }

    /// Write-concern waiters registered now.
    pub fn write_concern_waiters(&self) -> u64 {
        load(&self.write_concern_waiters) + load(&self.majority_waiters)
    }

    /// Times the sync source changed to a different member.
    pub fn sync_source_changes(&self) -> u64 {
        load(&self.sync_source_chose_different)
    }

    /// `(MongoDB counter name, called, successful)` per election reason.
    pub fn elections(&self) -> Vec<(&'static str, u64, u64)> {
        ELECTION_COUNTER_NAMES
            .iter()
            .zip(&self.elections)
            .map(|(name, c)| (*name, load(&c.called), load(&c.successful)))
            .collect()
    }
}

fn election_slot(reason: ElectionReason) -> usize {
    match reason {
        ElectionReason::StepUpRequest | ElectionReason::StepUpHandoff => 0,
        ElectionReason::PriorityTakeover => 1,
        ElectionReason::CatchUpTakeover => 2,
        ElectionReason::ElectionTimeout => 3,
        // MongoDB counts the prompt election of a lone voter under
        // freezeTimeout (it follows an unfreeze or the end of a stepdown).
        ElectionReason::SingleNode => 4,
    }
}

fn catch_up_slot(outcome: CatchUpOutcome) -> usize {
    match outcome {
        CatchUpOutcome::Succeeded => 0,
        CatchUpOutcome::AlreadyCaughtUp => 1,
        CatchUpOutcome::Skipped => 2,
        CatchUpOutcome::TimedOut => 3,
    }
}

/// `{num, totalMillis}` as MongoDB's `TimerStats` reports it.
fn timer(num: u64, total_micros: u64) -> Document {
    let total_millis = total_micros / 1_000;
    doc! {
        "num": append_number(i64::try_from(num).unwrap_or(i64::MAX)),
        "totalMillis": append_number(i64::try_from(total_millis).unwrap_or(i64::MAX)),
    }
}

/// `serverStatus.metrics.repl`: the parts of MongoDB's section this
/// runtime measures (apply, buffer, network, syncSource, waiters).
pub fn metrics_repl_document(metrics: &ReplMetrics) -> Document {
    let m = metrics;
    doc! {
        "apply": {
            "batchSize": counter(load(&m.apply_ops)),
            "batches": timer(load(&m.apply_batches), load(&m.apply_micros)),
            "ops": counter(load(&m.apply_ops)),
        },
        "buffer": {
            "count": counter(load(&m.buffer_count)),
            "maxSizeBytes": counter(load(&m.buffer_max_size_bytes)),
            "sizeBytes": counter(load(&m.buffer_size_bytes)),
        },
        "network": {
            "bytes": counter(load(&m.network_bytes)),
            "getmores": {
                "num": append_number(i64::try_from(load(&m.getmores)).unwrap_or(i64::MAX)),
                "totalMillis": append_number(i64::try_from(load(&m.getmore_micros) / 1_000).unwrap_or(i64::MAX)),
                "numEmptyBatches": counter(load(&m.getmore_empty_batches)),
            },
            "ops": counter(load(&m.network_ops)),
            "replSetUpdatePosition": {"num": counter(load(&m.update_positions_sent))},
        },
        "syncSource": {
            "numSelections": counter(
                load(&m.sync_source_chose_different) + load(&m.sync_source_chose_same) + load(&m.sync_source_not_found),
            ),
            "numTimesChoseDifferent": counter(load(&m.sync_source_chose_different)),
            "numTimesChoseSame": counter(load(&m.sync_source_chose_same)),
            "numTimesCouldNotFind": counter(load(&m.sync_source_not_found)),
        },
        "waiters": {"replication": counter(load(&m.write_concern_waiters))},
    }
}

/// `serverStatus.electionMetrics`: elections called and won per reason,
/// stepdowns forced by a higher term, and how catch-ups ended.
pub fn election_metrics_document(metrics: &ReplMetrics) -> Document {
    let mut out = Document::new();
    for (name, called, successful) in metrics.elections() {
        out.insert(
            name,
            doc! {"called": counter(called), "successful": counter(successful)},
        );
    }
    out.insert(
        "numStepDownsCausedByHigherTerm",
        counter(load(&metrics.step_downs_for_higher_term)),
    );
    let catch_ups: Vec<u64> = metrics.catch_ups.iter().map(load).collect();
    out.insert("numCatchUps", counter(catch_ups.iter().sum()));
    out.insert("numCatchUpsSucceeded", counter(catch_ups[0]));
    out.insert("numCatchUpsAlreadyCaughtUp", counter(catch_ups[1]));
    out.insert("numCatchUpsSkipped", counter(catch_ups[2]));
    out.insert("numCatchUpsTimedOut", counter(catch_ups[3]));
    out
}

/// `serverStatus.metrics.getLastError`: time spent waiting for write
/// concerns (`wtime`) and how many waits hit `wtimeout`.
pub fn get_last_error_document(metrics: &ReplMetrics) -> Document {
    let reading = metrics.write_concern_wait_reading();
    doc! {
        "wtime": timer(reading.count, reading.sum_micros),
        "wtimeouts": counter(metrics.write_concern_timeouts()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::Bson;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn apply_and_network_counters_reach_metrics_repl() {
        let metrics = ReplMetrics::new(256 << 20);
        metrics.record_apply_batch(10, ms(3));
        metrics.record_apply_batch(5, Duration::from_micros(2_500));
        metrics.record_getmore(15, 4_096, ms(7));
        metrics.record_getmore(0, 0, ms(1_000));
        metrics.set_buffer(2, 512);
        metrics.record_update_position_sent();
        metrics.record_sync_source_selection(SyncSourceSelection::ChoseDifferent);
        metrics.record_sync_source_selection(SyncSourceSelection::CouldNotFind);
        metrics.set_write_concern_waiters(4);
        let doc = metrics_repl_document(&metrics);
        let apply = doc.get_document("apply").expect("apply");
        assert_eq!(apply.get("ops"), Some(&Bson::Int64(15)));
        let batches = apply.get_document("batches").expect("batches");
        assert_eq!(batches.get("num"), Some(&Bson::Int32(2)));
        assert_eq!(batches.get("totalMillis"), Some(&Bson::Int32(5)));
        let buffer = doc.get_document("buffer").expect("buffer");
        assert_eq!(buffer.get("count"), Some(&Bson::Int64(2)));
        assert_eq!(buffer.get("sizeBytes"), Some(&Bson::Int64(512)));
        assert_eq!(buffer.get("maxSizeBytes"), Some(&Bson::Int64(256 << 20)));
        let network = doc.get_document("network").expect("network");
        assert_eq!(network.get("bytes"), Some(&Bson::Int64(4_096)));
        assert_eq!(network.get("ops"), Some(&Bson::Int64(15)));
        let getmores = network.get_document("getmores").expect("getmores");
        assert_eq!(getmores.get("num"), Some(&Bson::Int32(2)));
        assert_eq!(getmores.get("totalMillis"), Some(&Bson::Int32(1_007)));
        assert_eq!(getmores.get("numEmptyBatches"), Some(&Bson::Int64(1)));
        let positions = network.get_document("replSetUpdatePosition").expect("updatePosition");
        assert_eq!(positions.get("num"), Some(&Bson::Int64(1)));
        let sync_source = doc.get_document("syncSource").expect("syncSource");
        assert_eq!(sync_source.get("numSelections"), Some(&Bson::Int64(2)));
        assert_eq!(sync_source.get("numTimesChoseDifferent"), Some(&Bson::Int64(1)));
        assert_eq!(sync_source.get("numTimesCouldNotFind"), Some(&Bson::Int64(1)));
        let waiters = doc.get_document("waiters").expect("waiters");
        assert_eq!(waiters.get("replication"), Some(&Bson::Int64(4)));
    }

    #[test]
    fn write_concern_waits_fall_in_the_first_bucket_that_holds_them() {
        let metrics = ReplMetrics::new(0);
        metrics.record_write_concern_wait(Duration::from_micros(300), false);
        metrics.record_write_concern_wait(ms(1), false); // on the bound: that bucket
        metrics.record_write_concern_wait(Duration::from_micros(1_001), false);
        metrics.record_write_concern_wait(ms(60_000), true);
        let reading = metrics.write_concern_wait_reading();
        assert_eq!(reading.count, 4);
        assert_eq!(reading.sum_micros, 300 + 1_000 + 1_001 + 60_000_000);
        assert_eq!(reading.cumulative[0], (Some(1), 2));
        assert_eq!(reading.cumulative[1], (Some(2), 3));
        assert_eq!(reading.cumulative[13], (Some(30_000), 3));
        assert_eq!(reading.cumulative[14], (None, 4));
        let gle = get_last_error_document(&metrics);
        assert_eq!(gle.get("wtimeouts"), Some(&Bson::Int64(1)));
        let wtime = gle.get_document("wtime").expect("wtime");
        assert_eq!(wtime.get("num"), Some(&Bson::Int32(4)));
        assert_eq!(wtime.get("totalMillis"), Some(&Bson::Int32(60_002)));
    }

    #[test]
    fn elections_are_counted_per_mongodb_reason() {
        let metrics = ReplMetrics::new(0);
        metrics.record_election(ElectionReason::ElectionTimeout, false);
        metrics.record_election(ElectionReason::ElectionTimeout, true);
        metrics.record_election(ElectionReason::StepUpHandoff, true);
        metrics.record_election(ElectionReason::StepUpRequest, false);
        metrics.record_election(ElectionReason::SingleNode, true);
        metrics.record_step_down_for_higher_term();
        metrics.record_catch_up(CatchUpOutcome::AlreadyCaughtUp);
        metrics.record_catch_up(CatchUpOutcome::TimedOut);
        let doc = election_metrics_document(&metrics);
        let pair = |name: &str| {
            let d = doc.get_document(name).expect(name);
            (
                d.get_i64("called").expect("called"),
                d.get_i64("successful").expect("successful"),
            )
        };
        assert_eq!(pair("electionTimeout"), (2, 1));
        assert_eq!(pair("stepUpCmd"), (2, 1));
        assert_eq!(pair("freezeTimeout"), (1, 1));
        assert_eq!(pair("priorityTakeover"), (0, 0));
        assert_eq!(doc.get("numStepDownsCausedByHigherTerm"), Some(&Bson::Int64(1)));
        assert_eq!(doc.get("numCatchUps"), Some(&Bson::Int64(2)));
        assert_eq!(doc.get("numCatchUpsAlreadyCaughtUp"), Some(&Bson::Int64(1)));
        assert_eq!(doc.get("numCatchUpsTimedOut"), Some(&Bson::Int64(1)));
        assert_eq!(doc.get("numCatchUpsSucceeded"), Some(&Bson::Int64(0)));
    }

    #[test]
    fn counters_are_safe_to_bump_from_many_threads() {
        let metrics = std::sync::Arc::new(ReplMetrics::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let metrics = metrics.clone();
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        metrics.record_apply_batch(2, Duration::from_micros(10));
                        metrics.record_write_concern_wait(Duration::from_micros(10), false);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert_eq!(metrics.apply_totals(), (4_000, 8_000, 40_000));
        assert_eq!(metrics.write_concern_wait_reading().count, 4_000);
    }
}
