//! The replica set's numbers in Prometheus' text exposition format 0.0.4:
//! one `# HELP` and one `# TYPE` line per family, then its samples,
//! families never interleaved, label values escaped (`\\`, `\"`, `\n`),
//! histograms as cumulative `_bucket{le=..}` lines ending with `+Inf`,
//! then `_sum` and `_count`.
//!
//! Lag and ages are computed from wall-clock dates of oplog entries, as
//! MongoDB's own lag rules are: a member's lag is how far the date of its
//! last applied entry trails the primary's.

use std::fmt::Write;

use slipstream_consensus::MemberState;

use super::metrics::ReplMetrics;
use super::snapshot::{ReplSnapshot, SetView};

/// Every family starts with this prefix.
const PREFIX: &str = "slipstream_repl_";

/// The text of one scrape.
pub fn prometheus_text(snapshot: &ReplSnapshot, metrics: &ReplMetrics) -> String {
    let mut out = String::new();
    role(&mut out, snapshot);
    if let Some(set) = snapshot.set.as_ref() {
        family(&mut out, "term", "gauge", "The member's current term.");
        sample(&mut out, "term", &[], set.term as f64);
        member_lag(&mut out, snapshot, set);
        commit_point_age(&mut out, snapshot, set);
    }
    write_concern(&mut out, metrics);
    apply_and_network(&mut out, metrics);
    elections(&mut out, metrics);
    out
}

/// `# HELP` and `# TYPE` of a family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {PREFIX}{name} {help}");
    let _ = writeln!(out, "# TYPE {PREFIX}{name} {kind}");
}

/// A label value with the format's three escapes.
fn escape_label_value(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One sample line: `name{labels} value`.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    let _ = write!(out, "{PREFIX}{name}");
    if !labels.is_empty() {
        let rendered: Vec<String> = labels
            .iter()
            .map(|(label, value)| format!("{label}=\"{}\"", escape_label_value(value)))
            .collect();
        let _ = write!(out, "{{{}}}", rendered.join(","));
    }
    let _ = writeln!(out, " {}", number(value));
}

/// A sample value as the format spells it.
fn number(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value == f64::INFINITY {
        "+Inf".to_string()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{value}")
    }
}

fn role(out: &mut String, snapshot: &ReplSnapshot) {
    family(
        out,
        "role",
        "gauge",
        "The member's state as MongoDB numbers it (1 PRIMARY, 2 SECONDARY, 7 ARBITER, 10 REMOVED, 0 STARTUP: no configuration).",
    );
    let (set_name, state) = match snapshot.set.as_ref() {
        Some(set) => (set.config.set_name.as_str(), set.state),
        None => ("", MemberState::Startup),
    };
    let labels = [("set", set_name), ("member", snapshot.extras.me_host.as_str())];
    sample(out, "role", &labels, f64::from(state.code()));
}

/// The wall date of the primary's last applied entry, when a primary is known.
fn primary_applied_wall_ms(snapshot: &ReplSnapshot, set: &SetView) -> Option<i64> {
    if set.state == MemberState::Primary {
        return Some(snapshot.extras.applied.1);
    }
    let primary = set.primary?;
    set.members.iter().find(|m| m.id == primary).map(|m| m.applied_wall_ms)
}

fn member_lag(out: &mut String, snapshot: &ReplSnapshot, set: &SetView) {
    family(
        out,
        "member_lag_seconds",
        "gauge",
        "How far the wall date of each data-bearing member's last applied entry trails the primary's (no samples while no primary is known).",
    );
    let Some(primary_wall_ms) = primary_applied_wall_ms(snapshot, set) else {
        return;
    };
    for view in &set.members {
        if set.config.member(view.id).is_none_or(|m| m.arbiter_only) {
            continue;
        }
        let applied_wall_ms = if view.is_self {
            snapshot.extras.applied.1
        } else {
            view.applied_wall_ms
        };
        let lag_ms = (primary_wall_ms - applied_wall_ms).max(0);
        sample(
            out,
            "member_lag_seconds",
            &[("member", view.host.as_str())],
            lag_ms as f64 / 1000.0,
        );
    }
}

fn commit_point_age(out: &mut String, snapshot: &ReplSnapshot, set: &SetView) {
    family(
        out,
        "commit_point_age_seconds",
        "gauge",
        "Wall-clock age of the entry at the commit point (no sample before there is one).",
    );
    if set.commit_point.is_null() {
        return;
    }
    let age_ms = (snapshot.extras.now_wall_ms - snapshot.commit_point_wall_ms()).max(0);
    sample(out, "commit_point_age_seconds", &[], age_ms as f64 / 1000.0);
}

fn write_concern(out: &mut String, metrics: &ReplMetrics) {
    let name = "write_concern_wait_seconds";
    family(
        out,
        name,
        "histogram",
        "Time write concerns waited for replication, from the write to the answer.",
    );
    let reading = metrics.write_concern_wait_reading();
    for (bound_ms, count) in &reading.cumulative {
        let le = bound_ms.map_or("+Inf".to_string(), |ms| number(ms as f64 / 1000.0));
        sample(out, &format!("{name}_bucket"), &[("le", le.as_str())], *count as f64);
    }
    sample(
        out,
        &format!("{name}_sum"),
        &[],
        reading.sum_micros as f64 / 1_000_000.0,
    );
    sample(out, &format!("{name}_count"), &[], reading.count as f64);
    family(
        out,
        "write_concern_timeouts_total",
        "counter",
        "Write concern waits that ended at their wtimeout.",
    );
    sample(
        out,
        "write_concern_timeouts_total",
        &[],
        metrics.write_concern_timeouts() as f64,
    );
    family(
        out,
        "write_concern_waiters",
        "gauge",
        "Write concern waiters registered now.",
    );
    sample(
        out,
        "write_concern_waiters",
        &[],
        metrics.write_concern_waiters() as f64,
    );
}

fn apply_and_network(out: &mut String, metrics: &ReplMetrics) {
    let (batches, ops, apply_micros) = metrics.apply_totals();
    let (getmores, fetched_ops, bytes) = metrics.network_totals();
    let (buffer_count, buffer_bytes) = metrics.buffer();
    let counters: [(&str, &str, f64); 7] = [
        ("apply_batches_total", "Oplog batches applied.", batches as f64),
        ("apply_ops_total", "Oplog entries applied.", ops as f64),
        (
            "apply_seconds_total",
            "Time spent applying batches.",
            apply_micros as f64 / 1_000_000.0,
        ),
        (
            "network_getmores_total",
            "Oplog fetches (find and getMore) answered by the sync source.",
            getmores as f64,
        ),
        ("network_ops_total", "Oplog entries fetched.", fetched_ops as f64),
        ("network_bytes_total", "Bytes of oplog entries fetched.", bytes as f64),
        (
            "sync_source_changes_total",
            "Times the sync source changed to another member.",
            metrics.sync_source_changes() as f64,
        ),
    ];
    for (name, help, value) in counters {
        family(out, name, "counter", help);
        sample(out, name, &[], value);
    }
    family(
        out,
        "buffer_entries",
        "gauge",
        "Fetched oplog entries waiting for the applier.",
    );
    sample(out, "buffer_entries", &[], buffer_count as f64);
    family(
        out,
        "buffer_bytes",
        "gauge",
        "Bytes of fetched oplog entries waiting for the applier.",
    );
    sample(out, "buffer_bytes", &[], buffer_bytes as f64);
}

fn elections(out: &mut String, metrics: &ReplMetrics) {
    let counts = metrics.elections();
    family(
        out,
        "elections_total",
        "counter",
        "Elections this member stood in, by MongoDB's reason name.",
    );
    for (reason, called, _) in &counts {
        sample(out, "elections_total", &[("reason", reason)], *called as f64);
    }
    family(
        out,
        "elections_won_total",
        "counter",
        "Elections this member won, by MongoDB's reason name.",
    );
    for (reason, _, won) in &counts {
        sample(out, "elections_won_total", &[("reason", reason)], *won as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::tests::{extras, node, three_members, NOW_WALL_MS};
    use super::*;
    use slipstream_clock::{OpTime, Timestamp};
    use slipstream_consensus::ElectionReason;
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    /// One parsed sample.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    fn is_metric_name(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    fn is_label_name(name: &str) -> bool {
        let mut chars = name.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    /// Parses `{a="x",b="y"}` from the start of `text`; returns the labels
    /// and the rest. Panics on anything the format does not allow.
    fn parse_labels(text: &str) -> (BTreeMap<String, String>, &str) {
        let mut labels = BTreeMap::new();
        let mut rest = text.strip_prefix('{').expect("labels open with {");
        loop {
            if let Some(after) = rest.strip_prefix('}') {
                return (labels, after);
            }
            let eq = rest.find('=').expect("label needs =");
            let name = &rest[..eq];
            assert!(is_label_name(name), "bad label name {name:?}");
            rest = rest[eq + 1..].strip_prefix('"').expect("label value is quoted");
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                let (i, c) = chars.next().expect("unterminated label value");
                match c {
                    '"' => break i,
                    '\\' => match chars.next().expect("dangling escape").1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        other => panic!("invalid escape \\{other}"),
                    },
                    '\n' => panic!("raw newline in label value"),
                    c => value.push(c),
                }
            };
            assert!(
                labels.insert(name.to_string(), value).is_none(),
                "duplicate label {name}"
            );
            rest = &rest[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
    }

    fn parse_value(text: &str) -> f64 {
        match text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            _ => text.parse().unwrap_or_else(|_| panic!("bad value {text:?}")),
        }
    }

    /// Checks `text` line by line against the 0.0.4 rules and returns the
    /// samples with the family each belongs to.
    fn parse(text: &str) -> Vec<(String, Sample)> {
        assert!(text.ends_with('\n'), "the last line ends with a newline");
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut helped = BTreeSet::new();
        let mut finished: BTreeSet<String> = BTreeSet::new();
        let mut current: Option<String> = None;
        let mut samples = Vec::new();
        for line in text.lines() {
            assert!(!line.is_empty(), "no empty lines");
            if let Some(comment) = line.strip_prefix("# ") {
                let mut parts = comment.splitn(3, ' ');
                let (keyword, name) = (parts.next().expect("keyword"), parts.next().expect("name"));
                let rest = parts.next().expect("text");
                assert!(is_metric_name(name), "bad family name {name}");
                if current.as_deref() != Some(name) {
                    if let Some(previous) = current.take() {
                        finished.insert(previous);
                    }
                    assert!(!finished.contains(name), "family {name} appears twice");
                    current = Some(name.to_string());
                }
                match keyword {
                    "HELP" => assert!(helped.insert(name.to_string()), "two HELP lines for {name}"),
                    "TYPE" => {
                        assert!(["counter", "gauge", "histogram", "summary", "untyped"].contains(&rest));
                        assert!(
                            types.insert(name.to_string(), rest.to_string()).is_none(),
                            "two TYPE lines"
                        );
                    }
                    other => panic!("unknown comment keyword {other}"),
                }
                continue;
            }
            let name_end = line.find(['{', ' ']).expect("sample has a value");
            let name = &line[..name_end];
            assert!(is_metric_name(name), "bad metric name {name}");
            let (labels, rest) = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end..])
            } else {
                (BTreeMap::new(), &line[name_end..])
            };
            let value = parse_value(rest.strip_prefix(' ').expect("one space before the value"));
            let family = current.clone().expect("a sample after its TYPE");
            let kind = types.get(&family).expect("TYPE before samples");
            let allowed = match kind.as_str() {
                "histogram" => vec![
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ],
                _ => vec![family.clone()],
            };
            assert!(
                allowed.contains(&name.to_string()),
                "{name} outside its family {family}"
            );
            if kind == "counter" {
                assert!(name.ends_with("_total") && value >= 0.0, "counter {name} = {value}");
            }
            samples.push((
                family,
                Sample {
                    name: name.to_string(),
                    labels,
                    value,
                },
            ));
        }
        check_histograms(&types, &samples);
        samples
    }

    /// Buckets cumulative, `le` increasing, `+Inf` last and equal to `_count`.
    fn check_histograms(types: &BTreeMap<String, String>, samples: &[(String, Sample)]) {
        for (family, _) in types.iter().filter(|(_, kind)| kind.as_str() == "histogram") {
            let buckets: Vec<&Sample> = samples
                .iter()
                .filter(|(f, s)| f == family && s.name.ends_with("_bucket"))
                .map(|(_, s)| s)
                .collect();
            let bounds: Vec<f64> = buckets.iter().map(|s| parse_value(&s.labels["le"])).collect();
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "le increasing");
            assert_eq!(bounds.last(), Some(&f64::INFINITY));
            assert!(
                buckets.windows(2).all(|w| w[0].value <= w[1].value),
                "buckets cumulative"
            );
            let count = samples
                .iter()
                .find(|(f, s)| f == family && s.name.ends_with("_count"))
                .expect("_count");
            assert_eq!(buckets.last().map(|s| s.value), Some(count.1.value));
            assert!(samples.iter().any(|(f, s)| f == family && s.name.ends_with("_sum")));
        }
    }

    fn value_of(samples: &[(String, Sample)], name: &str, label: Option<(&str, &str)>) -> f64 {
        samples
            .iter()
            .find(|(_, s)| s.name == name && label.is_none_or(|(k, v)| s.labels.get(k).map(String::as_str) == Some(v)))
            .map(|(_, s)| s.value)
            .unwrap_or_else(|| panic!("no sample {name} {label:?}"))
    }

    /// A secondary whose primary (member 0) is 2.5 s ahead of it and 4 s
    /// ahead of member 2; the commit point is 6 s old.
    fn lagging_secondary() -> ReplSnapshot {
        let mut snapshot = ReplSnapshot::capture(&node(three_members(), 1), extras("b:27017"));
        let set = snapshot.set.as_mut().expect("configured");
        set.term = 3;
        set.primary = Some(0);
        set.members[0].applied_wall_ms = NOW_WALL_MS - 1_000;
        set.members[2].applied_wall_ms = NOW_WALL_MS - 5_000;
        set.commit_point = OpTime::new(Timestamp::new(1_705_985_100, 1), 3);
        snapshot.extras.applied.1 = NOW_WALL_MS - 3_500;
        snapshot.extras.commit_point_wall_ms = Some(NOW_WALL_MS - 6_000);
        snapshot
    }

    #[test]
    fn output_follows_the_text_format_and_carries_the_values() {
        let metrics = ReplMetrics::new(0);
        metrics.record_write_concern_wait(Duration::from_micros(800), false);
        metrics.record_write_concern_wait(Duration::from_millis(40), false);
        metrics.record_write_concern_wait(Duration::from_secs(40), true);
        metrics.record_apply_batch(12, Duration::from_millis(2));
        metrics.record_getmore(12, 2_048, Duration::from_millis(1));
        metrics.record_election(ElectionReason::PriorityTakeover, true);
        metrics.set_write_concern_waiters(5);
        let text = prometheus_text(&lagging_secondary(), &metrics);
        let samples = parse(&text);
        let role = ("member", "b:27017");
        assert_eq!(value_of(&samples, "slipstream_repl_role", Some(role)), 2.0);
        assert_eq!(value_of(&samples, "slipstream_repl_role", Some(("set", "rs1"))), 2.0);
        assert_eq!(value_of(&samples, "slipstream_repl_term", None), 3.0);
        let lag = "slipstream_repl_member_lag_seconds";
        assert_eq!(value_of(&samples, lag, Some(("member", "a:27017"))), 0.0);
        assert_eq!(value_of(&samples, lag, Some(("member", "b:27017"))), 2.5);
        assert_eq!(value_of(&samples, lag, Some(("member", "c:27017"))), 4.0);
        assert_eq!(
            value_of(&samples, "slipstream_repl_commit_point_age_seconds", None),
            6.0
        );
        let bucket = "slipstream_repl_write_concern_wait_seconds_bucket";
        assert_eq!(value_of(&samples, bucket, Some(("le", "0.001"))), 1.0);
        assert_eq!(value_of(&samples, bucket, Some(("le", "0.05"))), 2.0);
        assert_eq!(value_of(&samples, bucket, Some(("le", "30"))), 2.0);
        assert_eq!(value_of(&samples, bucket, Some(("le", "+Inf"))), 3.0);
        assert_eq!(
            value_of(&samples, "slipstream_repl_write_concern_wait_seconds_count", None),
            3.0
        );
        assert_eq!(
            value_of(&samples, "slipstream_repl_write_concern_wait_seconds_sum", None),
            40.0408
        );
        assert_eq!(
            value_of(&samples, "slipstream_repl_write_concern_timeouts_total", None),
            1.0
        );
        assert_eq!(value_of(&samples, "slipstream_repl_apply_ops_total", None), 12.0);
        assert_eq!(value_of(&samples, "slipstream_repl_apply_seconds_total", None), 0.002);
        assert_eq!(value_of(&samples, "slipstream_repl_network_bytes_total", None), 2_048.0);
        assert_eq!(value_of(&samples, "slipstream_repl_write_concern_waiters", None), 5.0);
        let won = ("reason", "priorityTakeover");
        assert_eq!(
            value_of(&samples, "slipstream_repl_elections_won_total", Some(won)),
            1.0
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let mut snapshot = lagging_secondary();
        snapshot.set.as_mut().expect("configured").config.set_name = "r\"s\\1\nx".to_string();
        let text = prometheus_text(&snapshot, &ReplMetrics::new(0));
        assert!(text.contains(r#"set="r\"s\\1\nx""#), "{text}");
        let samples = parse(&text);
        assert_eq!(
            value_of(&samples, "slipstream_repl_role", Some(("set", "r\"s\\1\nx"))),
            2.0
        );
    }

    #[test]
    fn no_lag_or_commit_age_without_a_primary_or_commit_point() {
        let snapshot = ReplSnapshot::capture(&node(three_members(), 1), extras("b:27017"));
        let text = prometheus_text(&snapshot, &ReplMetrics::new(0));
        let samples = parse(&text);
        assert!(!samples
            .iter()
            .any(|(_, s)| s.name == "slipstream_repl_member_lag_seconds"));
        assert!(!samples
            .iter()
            .any(|(_, s)| s.name == "slipstream_repl_commit_point_age_seconds"));
        assert!(text.contains("# TYPE slipstream_repl_member_lag_seconds gauge\n"));
    }

    #[test]
    fn uninitialized_member_reports_startup_role_only() {
        let text = prometheus_text(&ReplSnapshot::uninitialized(extras("a:1")), &ReplMetrics::new(0));
        let samples = parse(&text);
        assert_eq!(value_of(&samples, "slipstream_repl_role", Some(("set", ""))), 0.0);
        assert!(!samples.iter().any(|(_, s)| s.name == "slipstream_repl_term"));
    }

    #[test]
    fn the_parser_refuses_what_the_format_refuses() {
        for bad in [
            "slipstream_repl_x 1\n",                                      // no TYPE
            "# TYPE a gauge\na{l=\"x} 1\n",                               // unterminated
            "# TYPE a gauge\na{l=\"\\t\"} 1\n",                           // invalid escape
            "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\n", // family twice
            "# TYPE a gauge\na  1\n",                                     // two spaces
            "# TYPE a_total counter\na_total -1\n",                       // negative counter
        ] {
            assert!(std::panic::catch_unwind(|| parse(bad)).is_err(), "accepted {bad:?}");
        }
    }
}
