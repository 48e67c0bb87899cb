//! The bench's result: one JSON object on one line, its keys always present
//! and always in the order of `KEYS` (a serde map would sort them).

use serde_json::Value;

use super::histogram::Histogram;

/// Every key of the summary line, in order.
pub const KEYS: [&str; 20] = [
    "workload",
    "connections",
    "seconds",
    "ops",
    "errors",
    "ops_per_sec",
    "p50_us",
    "p99_us",
    "p999_us",
    "write_concern",
    "read_preference",
    "replica_set",
    "primary",
    "fdatasync_p50_us",
    "fdatasync_p99_us",
    "loopback_rtt_p50_us",
    "loopback_rtt_p99_us",
    "tcp_echo_rtt_p50_us",
    "tcp_echo_rtt_p99_us",
    "majority_p50_over_budget",
];

/// The probes' latencies in microseconds.
pub struct Probes {
    /// Append 1 KB + `fdatasync` on the data directory's disk.
    pub fdatasync: Histogram,
    /// `ping` to the primary: the loopback round trip through the server.
    pub ping: Histogram,
    /// Bare TCP round trip between two threads.
    pub tcp_echo: Histogram,
}

impl Probes {
    pub fn merge(&mut self, other: &Probes) {
        self.fdatasync.merge(&other.fdatasync);
        self.ping.merge(&other.ping);
        self.tcp_echo.merge(&other.tcp_echo);
    }

    /// What a `w: "majority"` write cannot beat on this machine: one
    /// journal commit plus two round trips (the secondary's oplog fetch
    /// answered, its position reported back), taken from medians.
    pub fn majority_budget_us(&self) -> u64 {
        self.fdatasync.quantile(0.5) + 2 * self.ping.quantile(0.5)
    }
}

pub struct Summary<'a> {
    pub workload: &'a str,
    pub connections: usize,
    pub seconds: u64,
    pub ops: u64,
    pub errors: u64,
    pub elapsed_secs: f64,
    /// `None` for read and scan, which write nothing.
    pub write_concern: Option<&'a str>,
    pub read_preference: &'a str,
    pub replica_set: Option<&'a str>,
    pub primary: &'a str,
    pub histogram: &'a Histogram,
    pub probes: &'a Probes,
}

/// One JSON object with its keys in the given order.
pub fn ordered_json(fields: &[(&str, Value)]) -> String {
    let fields: Vec<String> =
        fields.iter().map(|(key, value)| format!("{}:{value}", Value::String((*key).to_owned()))).collect();
    format!("{{{}}}", fields.join(","))
}

/// `value` rounded to `decimals` places (null if not finite).
pub fn rounded(value: f64, decimals: i32) -> Value {
    let scale = 10f64.powi(decimals);
    serde_json::Number::from_f64((value * scale).round() / scale).map_or(Value::Null, Value::Number)
}

impl Summary<'_> {
    pub fn json_line(&self) -> String {
        // No operation completed: no latency to report (null, never 0 µs).
        let quantile = |q: f64| match self.histogram.count() {
            0 => Value::Null,
            _ => self.histogram.quantile(q).into(),
        };
        let p50 = self.histogram.quantile(0.5);
        let over_budget = match self.write_concern {
            Some("majority") if self.histogram.count() > 0 => {
                rounded(p50 as f64 / self.probes.majority_budget_us().max(1) as f64, 2)
            }
            _ => Value::Null,
        };
        let values: [Value; KEYS.len()] = [
            self.workload.into(),
            self.connections.into(),
            self.seconds.into(),
            self.ops.into(),
            self.errors.into(),
            rounded(self.ops as f64 / self.elapsed_secs.max(f64::MIN_POSITIVE), 1),
            quantile(0.5),
            quantile(0.99),
            quantile(0.999),
            self.write_concern.map_or(Value::Null, Value::from),
            self.read_preference.into(),
            self.replica_set.map_or(Value::Null, Value::from),
            self.primary.into(),
            self.probes.fdatasync.quantile(0.5).into(),
            self.probes.fdatasync.quantile(0.99).into(),
            self.probes.ping.quantile(0.5).into(),
            self.probes.ping.quantile(0.99).into(),
            self.probes.tcp_echo.quantile(0.5).into(),
            self.probes.tcp_echo.quantile(0.99).into(),
            over_budget,
        ];
        let fields: Vec<(&str, Value)> = KEYS.into_iter().zip(values).collect();
        ordered_json(&fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram_of(values: impl IntoIterator<Item = u64>) -> Histogram {
        let mut histogram = Histogram::default();
        for value in values {
            histogram.record(value);
        }
        histogram
    }

    fn summary_line(write_concern: Option<&str>) -> String {
        let histogram = histogram_of(1..=1000);
        let probes = Probes {
            fdatasync: histogram_of([60; 10]),
            ping: histogram_of([30; 10]),
            tcp_echo: histogram_of([20; 10]),
        };
        let summary = Summary {
            workload: "insert",
            connections: 32,
            seconds: 10,
            ops: 1000,
            errors: 2,
            elapsed_secs: 10.0,
            write_concern,
            read_preference: "primary",
            replica_set: Some("rs0"),
            primary: "127.0.0.1:27017",
            histogram: &histogram,
            probes: &probes,
        };
        summary.json_line()
    }

    #[test]
    fn summary_is_one_json_object_with_every_key_in_order() {
        let line = summary_line(Some("majority"));
        assert!(line.starts_with("{\"workload\":\"insert\","), "{line}");
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        let mut at = 0;
        for key in KEYS {
            assert!(parsed.get(key).is_some(), "{key} missing from {line}");
            let found = line.find(&format!("\"{key}\":")).unwrap();
            assert!(found >= at, "{key} out of order in {line}");
            at = found;
        }
        assert_eq!(parsed.as_object().unwrap().len(), KEYS.len());
        assert_eq!(parsed["ops_per_sec"], 100.0);
        assert!(parsed["p50_us"].as_u64().unwrap() >= 500);
        // Values under 64 us are recorded exactly.
        assert_eq!(parsed["fdatasync_p50_us"], 60);
        assert_eq!(parsed["loopback_rtt_p50_us"], 30);
        assert_eq!(parsed["tcp_echo_rtt_p50_us"], 20);
        // p50 of 1..=1000 is 500 (its bucket reports 503); the budget is
        // 60 + 2 x 30.
        assert_eq!(parsed["p50_us"], 503);
        assert_eq!(parsed["majority_p50_over_budget"], 4.19);
    }

    #[test]
    fn the_budget_ratio_is_null_unless_writes_wait_for_a_majority() {
        for write_concern in [Some("1"), None] {
            let parsed: serde_json::Value = serde_json::from_str(&summary_line(write_concern)).unwrap();
            assert!(parsed["majority_p50_over_budget"].is_null());
        }
        let parsed: serde_json::Value = serde_json::from_str(&summary_line(None)).unwrap();
        assert!(parsed["write_concern"].is_null());
        assert_eq!(parsed["write_concern"], serde_json::Value::Null);
    }

    #[test]
    fn a_run_without_a_completed_operation_reports_no_latency() {
        let probes = Probes {
            fdatasync: histogram_of([60]),
            ping: histogram_of([30]),
            tcp_echo: histogram_of([20]),
        };
        let histogram = Histogram::default();
        let summary = Summary {
            workload: "insert",
            connections: 1,
            seconds: 3,
            ops: 0,
            errors: 2,
            elapsed_secs: 3.0,
            write_concern: Some("majority"),
            read_preference: "primary",
            replica_set: Some("rs0"),
            primary: "127.0.0.1:27017",
            histogram: &histogram,
            probes: &probes,
        };
        let parsed: serde_json::Value = serde_json::from_str(&summary.json_line()).unwrap();
        for key in ["p50_us", "p99_us", "p999_us", "majority_p50_over_budget"] {
            assert!(parsed[key].is_null(), "{key}: {parsed}");
        }
    }
}
