//! Structured JSON log lines in MongoDB's shape,
//! `{"t":{"$date":..},"s":"I","c":"NETWORK","id":N,"ctx":"conn12","msg":..,"attr":{..}}`,
//! written to `--logpath` (or stdout) and kept in a bounded in-memory ring
//! for `getLog`. Direct calls come from the server; everything any crate
//! emits through `tracing` arrives here too, through the binary's layer.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

/// The most recent lines `getLog: "global"` can return (MongoDB keeps 1024).
pub const LOG_RING_LINES_MAX: usize = 1024;
/// The most startup warnings kept for `getLog: "startupWarnings"`.
pub const STARTUP_WARNINGS_MAX: usize = 64;

/// MongoDB's deepest debug level (`D5`).
pub const DEBUG_LEVEL_MAX: u8 = 5;

/// MongoDB's severities: `F`, `E`, `W`, `I`, and `D1` (least verbose debug)
/// to `D5`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Fatal,
    Error,
    Warning,
    Info,
    /// 1..=DEBUG_LEVEL_MAX; out-of-range levels print as the nearest one.
    Debug(u8),
}

impl Severity {
    pub fn letter(self) -> &'static str {
        const DEBUG_LETTERS: [&str; DEBUG_LEVEL_MAX as usize] = ["D1", "D2", "D3", "D4", "D5"];
        match self {
            Severity::Fatal => "F",
            Severity::Error => "E",
            Severity::Warning => "W",
            Severity::Info => "I",
            Severity::Debug(level) => DEBUG_LETTERS[usize::from(level.clamp(1, DEBUG_LEVEL_MAX)) - 1],
        }
    }
}

struct Ring {
    lines: VecDeque<String>,
    total_written: u64,
    startup_warnings: Vec<String>,
}

/// The node's log. Cloning it is cheap and every clone writes to the same
/// sink and ring, so that the server's state and the process-wide `tracing`
/// layer share one log.
#[derive(Clone)]
pub struct Log {
    shared: Arc<Shared>,
}

/// The sink and the ring each sit behind a mutex held only for one line,
/// and never both at once.
struct Shared {
    sink: Mutex<Box<dyn Write + Send>>,
    ring: Mutex<Ring>,
}

impl Log {
    /// Appends to `logpath`, or writes to stdout when none is given.
    pub fn open(logpath: Option<&Path>) -> io::Result<Log> {
        let sink: Box<dyn Write + Send> = match logpath {
            Some(path) => Box::new(OpenOptions::new().create(true).append(true).open(path)?),
            None => Box::new(io::stdout()),
        };
        Ok(Log::with_sink(sink))
    }

    pub fn with_sink(sink: Box<dyn Write + Send>) -> Log {
        let ring = Ring { lines: VecDeque::new(), total_written: 0, startup_warnings: Vec::new() };
        Log { shared: Arc::new(Shared { sink: Mutex::new(sink), ring: Mutex::new(ring) }) }
    }

    pub fn info(&self, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
        self.write(Severity::Info, component, id, ctx, msg, attr);
    }

    pub fn warning(&self, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
        self.write(Severity::Warning, component, id, ctx, msg, attr);
    }

    pub fn error(&self, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
        self.write(Severity::Error, component, id, ctx, msg, attr);
    }

    /// A warning also listed under `getLog: "startupWarnings"`.
    pub fn startup_warning(&self, id: u32, msg: &str, attr: Value) {
        let line = format_line(Severity::Warning, "CONTROL", id, "initandlisten", msg, attr);
        {
            let mut ring = self.shared.ring.lock();
            if ring.startup_warnings.len() < STARTUP_WARNINGS_MAX {
                ring.startup_warnings.push(line.clone());
            }
        }
        self.emit(line);
    }

    pub fn write(&self, severity: Severity, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) {
        self.emit(format_line(severity, component, id, ctx, msg, attr));
    }

    fn emit(&self, line: String) {
        {
            let mut sink = self.shared.sink.lock();
            // A failing log sink must not take the node down; the line stays
            // in the ring for getLog.
            let _ = writeln!(sink, "{line}");
            let _ = sink.flush();
        }
        let mut ring = self.shared.ring.lock();
        if ring.lines.len() == LOG_RING_LINES_MAX {
            ring.lines.pop_front();
        }
        ring.lines.push_back(line);
        ring.total_written += 1;
    }

    /// `(total lines written, the recent lines)`.
    pub fn recent(&self) -> (u64, Vec<String>) {
        let ring = self.shared.ring.lock();
        (ring.total_written, ring.lines.iter().cloned().collect())
    }

    pub fn startup_warnings(&self) -> Vec<String> {
        self.shared.ring.lock().startup_warnings.clone()
    }
}

/// Formats one line with MongoDB's field order (t, s, c, id, ctx, msg,
/// attr), which a serde map would not keep.
fn format_line(severity: Severity, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) -> String {
    let date = iso8601_utc(bson::DateTime::now().timestamp_millis());
    let quote = |text: &str| Value::String(text.to_owned()).to_string();
    let mut line = format!(
        "{{\"t\":{{\"$date\":{}}},\"s\":\"{}\",\"c\":{},\"id\":{},\"ctx\":{},\"msg\":{}",
        quote(&date),
        severity.letter(),
        quote(component),
        id,
        quote(ctx),
        quote(msg)
    );
    if !attr.is_null() {
        line.push_str(",\"attr\":");
        line.push_str(&attr.to_string());
    }
    line.push('}');
    line
}

/// MongoDB's `iso8601-utc` form, always with milliseconds:
/// `2020-05-01T15:16:17.180Z` (a general RFC 3339 writer drops trailing
/// zeros, which breaks fixed-width readers of the log).
fn iso8601_utc(unix_ms: i64) -> String {
    const MS_PER_DAY: i64 = 86_400_000;
    let days = unix_ms.div_euclid(MS_PER_DAY);
    let ms_of_day = unix_ms.rem_euclid(MS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, ms) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{ms:03}Z")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`: eras of 400 years, March-based years so
/// that the leap day ends the year).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_json_in_mongodb_shape_and_the_ring_is_bounded() {
        let log = Log::with_sink(Box::new(io::sink()));
        for n in 0..(LOG_RING_LINES_MAX + 5) {
            log.info("NETWORK", 22943, "listener", "Connection accepted", json!({"n": n}));
        }
        let (total, lines) = log.recent();
        assert_eq!(total, (LOG_RING_LINES_MAX + 5) as u64);
        assert_eq!(lines.len(), LOG_RING_LINES_MAX);
        let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(last["s"], "I");
        assert_eq!(last["c"], "NETWORK");
        assert_eq!(last["id"], 22943);
        assert_eq!(last["attr"]["n"], LOG_RING_LINES_MAX + 4);
        assert!(last["t"]["$date"].as_str().unwrap().contains('T'));
        assert!(lines[0].starts_with("{\"t\":{\"$date\":"), "MongoDB's field order: {}", lines[0]);
    }

    #[test]
    fn dates_always_carry_three_digits_of_milliseconds() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601_utc(1_588_346_177_180), "2020-05-01T15:16:17.180Z");
        assert_eq!(iso8601_utc(951_868_800_000 - 1), "2000-02-29T23:59:59.999Z");
        assert_eq!(iso8601_utc(-1), "1969-12-31T23:59:59.999Z");
        // Against bson's own RFC 3339 writer, which drops trailing zeros.
        for unix_ms in [1_700_000_000_000i64, 1_709_251_199_999, 4_102_444_800_000] {
            let theirs = bson::DateTime::from_millis(unix_ms).try_to_rfc3339_string().unwrap();
            let ours = iso8601_utc(unix_ms);
            assert_eq!(ours[..19], theirs[..19], "{unix_ms}");
        }
    }

    #[test]
    fn every_severity_has_mongodb_letter() {
        let letters: Vec<_> = [Severity::Fatal, Severity::Error, Severity::Warning, Severity::Info]
            .into_iter()
            .chain((0..=DEBUG_LEVEL_MAX + 1).map(Severity::Debug))
            .map(Severity::letter)
            .collect();
        assert_eq!(letters, ["F", "E", "W", "I", "D1", "D1", "D2", "D3", "D4", "D5", "D5"]);
    }

    #[test]
    fn clones_share_one_ring_and_one_sink() {
        let log = Log::with_sink(Box::new(io::sink()));
        let clone = log.clone();
        clone.write(Severity::Debug(2), "STORAGE", 1, "checkpointer", "checkpoint", Value::Null);
        log.info("CONTROL", 2, "main", "ready", Value::Null);
        let (total, lines) = log.recent();
        assert_eq!(total, 2);
        assert!(lines[0].contains("\"s\":\"D2\""), "{}", lines[0]);
        assert!(!lines[0].contains("attr"), "an empty attr is left out, as MongoDB does: {}", lines[0]);
    }
}
