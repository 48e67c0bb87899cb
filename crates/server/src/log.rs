//! Structured JSON log lines in MongoDB's shape,
//! `{"t":{"$date":..},"s":"I","c":"NETWORK","id":N,"ctx":"conn12","msg":..,"attr":{..}}`,
//! written to `--logpath` (or stdout) and kept in a bounded in-memory ring
//! for `getLog`.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;

use parking_lot::Mutex;
use serde_json::Value;

/// The most recent lines `getLog: "global"` can return (MongoDB keeps 1024).
pub const LOG_RING_LINES_MAX: usize = 1024;
/// The most startup warnings kept for `getLog: "startupWarnings"`.
pub const STARTUP_WARNINGS_MAX: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    fn letter(self) -> &'static str {
        match self {
            Severity::Info => "I",
            Severity::Warning => "W",
            Severity::Error => "E",
        }
    }
}

struct Ring {
    lines: VecDeque<String>,
    total_written: u64,
    startup_warnings: Vec<String>,
}

/// The node's log. Shared by every task; the sink and the ring each sit
/// behind a mutex held only for one line.
pub struct Log {
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
        Log {
            sink: Mutex::new(sink),
            ring: Mutex::new(Ring { lines: VecDeque::new(), total_written: 0, startup_warnings: Vec::new() }),
        }
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
            let mut ring = self.ring.lock();
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
            let mut sink = self.sink.lock();
            // A failing log sink must not take the node down; the line stays
            // in the ring for getLog.
            let _ = writeln!(sink, "{line}");
            let _ = sink.flush();
        }
        let mut ring = self.ring.lock();
        if ring.lines.len() == LOG_RING_LINES_MAX {
            ring.lines.pop_front();
        }
        ring.lines.push_back(line);
        ring.total_written += 1;
    }

    /// `(total lines written, the recent lines)`.
    pub fn recent(&self) -> (u64, Vec<String>) {
        let ring = self.ring.lock();
        (ring.total_written, ring.lines.iter().cloned().collect())
    }

    pub fn startup_warnings(&self) -> Vec<String> {
        self.ring.lock().startup_warnings.clone()
    }
}

/// Formats one line with MongoDB's field order (t, s, c, id, ctx, msg,
/// attr), which a serde map would not keep.
fn format_line(severity: Severity, component: &str, id: u32, ctx: &str, msg: &str, attr: Value) -> String {
    let now = bson::DateTime::now();
    let date = now.try_to_rfc3339_string().unwrap_or_else(|_| now.timestamp_millis().to_string());
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
}
