//! One failover trial as the clients saw it: acknowledged writes per 100 ms
//! (the throughput timeline) and the write-unavailability window.
//!
//! The window, precisely:
//! - A write is *failed* when its reply is not a full success (an error, a
//!   write error, a write concern error) or its connection breaks or it
//!   times out.
//! - A write is *stalled* when it is acknowledged but took longer than the
//!   stall threshold: `STALL_FACTOR` times the p99 latency of the writes
//!   acknowledged in the steady period before the fault, and at least
//!   `STALL_FLOOR`.
//! - A write is *disrupted* when it failed or stalled and completed at or
//!   after the fault instant (the moment the bench sent SIGKILL or
//!   `replSetStepDown`).
//! - The window opens at the send time of the earliest disrupted write (the
//!   moment its client stopped making progress; possibly just before the
//!   fault, for a write already in flight) and closes when the first write
//!   sent to a member other than the old primary is acknowledged with
//!   `w: "majority"` (every write of the load is). With no disrupted write
//!   sent before that acknowledgement the window is zero.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench::driver::{Observer, Outcome};
use crate::bench::histogram::Histogram;
use crate::bench::summary::{ordered_json, rounded};

/// Width of one timeline bucket.
pub const BUCKET: Duration = Duration::from_millis(100);
/// The most buckets one trial records (two minutes); later completions are
/// left out of the timeline.
pub const TIMELINE_BUCKETS_MAX: usize = 1200;
/// A write slower than this many steady-state p99s is stalled.
pub const STALL_FACTOR: u32 = 5;
/// ... and never a write faster than this.
pub const STALL_FLOOR: Duration = Duration::from_millis(100);

/// What the controller did, and when.
#[derive(Debug, Clone)]
pub struct Fault {
    pub at: Instant,
    pub old_primary: String,
    pub stall_threshold: Duration,
}

/// Everything but the timeline, under one lock (at most some thousands of
/// writes a second take it).
#[derive(Default)]
struct Events {
    /// Set once, by the controller, at the fault.
    fault: Option<Fault>,
    /// Latencies (us) of the writes acknowledged before the fault.
    steady: Histogram,
    /// Writes that failed before the fault (a healthy set has none).
    errors_before_fault: u64,
    failed: u64,
    stalled: u64,
    first_disrupted_sent: Option<Instant>,
    /// The first acknowledgement from a member other than the old primary:
    /// when, and which member.
    first_new_primary_ack: Option<(Instant, String)>,
    restart_at: Option<Instant>,
}

pub struct Trial {
    origin: Instant,
    /// Acknowledged writes per `BUCKET` since `origin`, by completion time.
    buckets: Vec<AtomicU64>,
    events: Mutex<Events>,
}

/// The trial's outcome, ready to print.
#[derive(Debug, Clone)]
pub struct TrialReport {
    pub trial: usize,
    pub kind: &'static str,
    pub old_primary: String,
    pub new_primary: Option<String>,
    /// Offset of the fault in the timeline.
    pub fault_ms: f64,
    /// The unavailability window; `None` when no new primary acknowledged
    /// a write before the trial gave up.
    pub window_ms: Option<f64>,
    /// Window bounds relative to the fault.
    pub window_start_ms: Option<f64>,
    pub window_end_ms: Option<f64>,
    pub failed: u64,
    pub stalled: u64,
    pub errors_before_fault: u64,
    pub stall_threshold_ms: f64,
    pub steady_p99_us: u64,
    pub steady_ops_per_sec: f64,
    /// Offset of the old primary's restart in the timeline (kill only).
    pub restart_ms: Option<f64>,
    /// What the fault command answered (`ok`, or its error).
    pub fault_result: String,
    /// Acknowledged writes per `BUCKET`, from the trial's start.
    pub timeline: Vec<u64>,
}

fn millis(duration: Duration) -> f64 {
    duration.as_nanos() as f64 / 1e6
}

/// `later - earlier` in milliseconds, negative when `later` is earlier.
fn signed_ms(later: Instant, earlier: Instant) -> f64 {
    match later.checked_duration_since(earlier) {
        Some(after) => millis(after),
        None => -millis(earlier.duration_since(later)),
    }
}

impl Trial {
    pub fn new(origin: Instant) -> Trial {
        Trial {
            origin,
            buckets: (0..TIMELINE_BUCKETS_MAX).map(|_| AtomicU64::new(0)).collect(),
            events: Mutex::new(Events::default()),
        }
    }

    pub fn observe(&self, outcome: &Outcome<'_>) {
        if outcome.acknowledged {
            if let Some(elapsed) = outcome.done.checked_duration_since(self.origin) {
                let bucket = (elapsed.as_micros() / BUCKET.as_micros()) as usize;
                if let Some(count) = self.buckets.get(bucket) {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let latency = outcome.done.duration_since(outcome.sent);
        let mut events = self.events.lock().unwrap();
        let fault = match &events.fault {
            Some(fault) if outcome.done >= fault.at => fault.clone(),
            _ => {
                if outcome.acknowledged {
                    events.steady.record(latency.as_micros() as u64);
                } else {
                    events.errors_before_fault += 1;
                }
                return;
            }
        };
        let disrupted = if !outcome.acknowledged {
            events.failed += 1;
            true
        } else if latency > fault.stall_threshold {
            events.stalled += 1;
            true
        } else {
            false
        };
        if disrupted && events.first_disrupted_sent.is_none_or(|first| outcome.sent < first) {
            events.first_disrupted_sent = Some(outcome.sent);
        }
        let new_primary = outcome.acknowledged && outcome.target != fault.old_primary;
        if new_primary && events.first_new_primary_ack.as_ref().is_none_or(|(first, _)| outcome.done < *first) {
            events.first_new_primary_ack = Some((outcome.done, outcome.target.to_owned()));
        }
    }

    /// Marks the fault, now, on `old_primary`; returns the stall threshold.
    pub fn mark_fault(&self, old_primary: &str, at: Instant) -> Duration {
        let mut events = self.events.lock().unwrap();
        assert!(events.fault.is_none(), "one fault per trial");
        let steady_p99 = Duration::from_micros(events.steady.quantile(0.99));
        let stall_threshold = (steady_p99 * STALL_FACTOR).max(STALL_FLOOR);
        events.fault = Some(Fault { at, old_primary: old_primary.to_owned(), stall_threshold });
        stall_threshold
    }

    pub fn mark_restart(&self, at: Instant) {
        self.events.lock().unwrap().restart_at = Some(at);
    }

    /// True once a member other than the old primary acknowledged a write
    /// after the fault.
    pub fn window_closed(&self) -> bool {
        self.events.lock().unwrap().first_new_primary_ack.is_some()
    }

    pub fn report(&self, trial: usize, kind: &'static str, fault_result: String, end: Instant) -> TrialReport {
        let events = self.events.lock().unwrap();
        let fault = events.fault.clone().expect("a trial reports after its fault");
        let end_ack = events.first_new_primary_ack.clone();
        let window_end = end_ack.as_ref().map(|(at, _)| *at);
        let window_start = match (events.first_disrupted_sent, window_end) {
            (Some(start), Some(end)) if start < end => Some(start),
            (_, Some(end)) => Some(end),
            (start, None) => start,
        };
        let steady_secs = fault.at.duration_since(self.origin).as_secs_f64();
        let buckets = (end.duration_since(self.origin).as_micros().div_ceil(BUCKET.as_micros()) as usize)
            .min(TIMELINE_BUCKETS_MAX);
        TrialReport {
            trial,
            kind,
            old_primary: fault.old_primary.clone(),
            new_primary: end_ack.map(|(_, member)| member),
            fault_ms: signed_ms(fault.at, self.origin),
            window_ms: window_end.zip(window_start).map(|(end, start)| signed_ms(end, start)),
            window_start_ms: window_start.map(|start| signed_ms(start, fault.at)),
            window_end_ms: window_end.map(|end| signed_ms(end, fault.at)),
            failed: events.failed,
            stalled: events.stalled,
            errors_before_fault: events.errors_before_fault,
            stall_threshold_ms: millis(fault.stall_threshold),
            steady_p99_us: events.steady.quantile(0.99),
            steady_ops_per_sec: events.steady.count() as f64 / steady_secs.max(f64::MIN_POSITIVE),
            restart_ms: events.restart_at.map(|at| signed_ms(at, self.origin)),
            fault_result,
            timeline: self.buckets[..buckets].iter().map(|count| count.load(Ordering::Relaxed)).collect(),
        }
    }
}

impl TrialReport {
    pub fn json_line(&self) -> String {
        let optional_ms = |value: Option<f64>| value.map_or(Value::Null, |ms| rounded(ms, 1));
        ordered_json(&[
            ("trial", self.trial.into()),
            ("kind", self.kind.into()),
            ("window_ms", optional_ms(self.window_ms)),
            ("window_start_ms", optional_ms(self.window_start_ms)),
            ("window_end_ms", optional_ms(self.window_end_ms)),
            ("old_primary", self.old_primary.clone().into()),
            ("new_primary", self.new_primary.clone().map_or(Value::Null, Value::from)),
            ("failed_writes", self.failed.into()),
            ("stalled_writes", self.stalled.into()),
            ("errors_before_fault", self.errors_before_fault.into()),
            ("stall_threshold_ms", rounded(self.stall_threshold_ms, 1)),
            ("steady_p99_us", self.steady_p99_us.into()),
            ("steady_ops_per_sec", rounded(self.steady_ops_per_sec, 1)),
            ("fault_result", self.fault_result.clone().into()),
            ("fault_ms", rounded(self.fault_ms, 1)),
            ("restart_ms", optional_ms(self.restart_ms)),
            ("bucket_ms", (BUCKET.as_millis() as u64).into()),
            ("timeline", self.timeline.clone().into()),
        ])
    }
}

/// Hands each completed write to the trial running now.
pub struct TrialObserver {
    current: RwLock<Arc<Trial>>,
}

impl TrialObserver {
    pub fn new(first: Arc<Trial>) -> TrialObserver {
        TrialObserver { current: RwLock::new(first) }
    }

    pub fn begin(&self, trial: Arc<Trial>) {
        *self.current.write().unwrap() = trial;
    }
}

impl Observer for TrialObserver {
    fn observe(&self, outcome: &Outcome<'_>) {
        let trial = self.current.read().unwrap().clone();
        trial.observe(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "127.0.0.1:1";
    const NEW: &str = "127.0.0.1:2";

    fn at(origin: Instant, ms: u64) -> Instant {
        origin + Duration::from_millis(ms)
    }

    fn write(trial: &Trial, sent: Instant, done: Instant, acknowledged: bool, target: &str) {
        trial.observe(&Outcome { sent, done, acknowledged, target });
    }

    /// A steady second of 1 ms writes, then a kill at 1000 ms: writes fail
    /// from 1000.5 ms, the new primary acknowledges at 2300 ms.
    #[test]
    fn the_window_runs_from_the_first_disrupted_send_to_the_first_new_primary_ack() {
        let origin = Instant::now();
        let trial = Trial::new(origin);
        for ms in 0..1000 {
            write(&trial, at(origin, ms), at(origin, ms + 1), true, OLD);
        }
        let threshold = trial.mark_fault(OLD, at(origin, 1000));
        assert_eq!(threshold, STALL_FLOOR, "5 x a 1 ms p99 is under the floor");
        assert!(!trial.window_closed());
        // In flight at the fault: sent at 999.5, fails at 1000.5.
        write(&trial, origin + Duration::from_micros(999_500), origin + Duration::from_micros(1_000_500), false, OLD);
        write(&trial, at(origin, 1001), at(origin, 1002), false, OLD);
        // A write acknowledged by the old primary after the fault, fast:
        // neither disrupted nor the end of the window.
        write(&trial, at(origin, 1000), at(origin, 1001), true, OLD);
        assert!(!trial.window_closed());
        write(&trial, at(origin, 2290), at(origin, 2300), true, NEW);
        write(&trial, at(origin, 2295), at(origin, 2301), true, NEW);
        assert!(trial.window_closed());
        let report = trial.report(1, "kill", "ok".into(), at(origin, 3000));
        assert_eq!(report.window_ms, Some(2300.0 - 999.5));
        assert_eq!(report.window_start_ms, Some(-0.5));
        assert_eq!(report.window_end_ms, Some(1300.0));
        assert_eq!(report.new_primary.as_deref(), Some(NEW));
        assert_eq!((report.failed, report.stalled, report.errors_before_fault), (2, 0, 0));
        assert_eq!(report.fault_ms, 1000.0);
        assert_eq!(report.timeline.len(), 30);
        assert_eq!(report.timeline[0], 99, "acks completing at 1..=99 ms");
        assert_eq!(report.timeline[1], 100, "one ack per ms in the steady period");
        assert_eq!(report.timeline[10], 2, "the steady ack at 1000 ms and the old primary's late one at 1001 ms");
        assert_eq!(report.timeline[22], 0);
        assert_eq!(report.timeline[23], 2);
        assert!((report.steady_ops_per_sec - 1000.0).abs() < 1.0);
        let parsed: serde_json::Value = serde_json::from_str(&report.json_line()).unwrap();
        assert_eq!(parsed["window_ms"], 1300.5);
        assert_eq!(parsed["timeline"].as_array().unwrap().len(), 30);
    }

    #[test]
    fn a_stalled_write_opens_the_window_at_its_send_time() {
        let origin = Instant::now();
        let trial = Trial::new(origin);
        for ms in 0..500 {
            // A steady p99 of 30 ms: the threshold is 150 ms.
            let latency = if ms % 10 == 0 { 30 } else { 2 };
            write(&trial, at(origin, ms), at(origin, ms + latency), true, OLD);
        }
        let threshold = trial.mark_fault(OLD, at(origin, 600));
        assert!(threshold >= Duration::from_millis(150) && threshold < Duration::from_millis(160), "{threshold:?}");
        // Sent before the stepdown, held 400 ms, then acknowledged: stalled.
        write(&trial, at(origin, 590), at(origin, 990), true, OLD);
        // 120 ms is under the threshold: not disrupted.
        write(&trial, at(origin, 595), at(origin, 715), true, OLD);
        write(&trial, at(origin, 995), at(origin, 1000), false, OLD);
        write(&trial, at(origin, 1100), at(origin, 1150), true, NEW);
        let report = trial.report(1, "stepdown", "ok".into(), at(origin, 1500));
        assert_eq!((report.failed, report.stalled), (1, 1));
        assert_eq!(report.window_ms, Some(1150.0 - 590.0));
    }

    #[test]
    fn no_disruption_before_the_new_primary_means_a_zero_window() {
        let origin = Instant::now();
        let trial = Trial::new(origin);
        trial.mark_fault(OLD, at(origin, 100));
        write(&trial, at(origin, 150), at(origin, 160), true, NEW);
        write(&trial, at(origin, 170), at(origin, 180), false, NEW);
        let report = trial.report(1, "stepdown", "ok".into(), at(origin, 200));
        assert_eq!(report.window_ms, Some(0.0));
        assert_eq!(report.failed, 1);
    }

    #[test]
    fn a_trial_without_a_new_primary_has_no_window() {
        let origin = Instant::now();
        let trial = Trial::new(origin);
        write(&trial, at(origin, 1), at(origin, 2), false, OLD);
        trial.mark_fault(OLD, at(origin, 100));
        write(&trial, at(origin, 100), at(origin, 101), false, OLD);
        let report = trial.report(1, "kill", "ok".into(), at(origin, 200));
        assert_eq!(report.window_ms, None);
        assert_eq!(report.window_start_ms, Some(0.0));
        assert_eq!(report.errors_before_fault, 1);
        let parsed: serde_json::Value = serde_json::from_str(&report.json_line()).unwrap();
        assert!(parsed["window_ms"].is_null());
        assert!(parsed["new_primary"].is_null());
    }

    #[test]
    fn the_timeline_is_bounded() {
        let origin = Instant::now();
        let trial = Trial::new(origin);
        let late = origin + BUCKET * (TIMELINE_BUCKETS_MAX as u32 + 5);
        write(&trial, late, late, true, OLD);
        trial.mark_fault(OLD, origin);
        let report = trial.report(1, "kill", "ok".into(), late);
        assert_eq!(report.timeline.len(), TIMELINE_BUCKETS_MAX);
        assert_eq!(report.timeline.iter().sum::<u64>(), 0);
    }
}
