//! `slipstream bench` against a real node, for correctness only (never a
//! speed): each run is a second long and must print its JSON summary with
//! every documented key.

mod common;

use std::process::Command;

use common::Node;
use serde_json::Value;

/// Every key of the summary line, in order (the README documents them).
const KEYS: [&str; 20] = [
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

/// Runs the bench with `args`; returns its parsed last stdout line.
fn bench(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .arg("bench")
        .args(["--seconds", "1", "--connections", "2", "--probe-samples", "20"])
        .args(args)
        .output()
        .expect("run slipstream bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let line = stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr: {stderr}"));
    let summary: Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("{err}: {line}"));
    let object = summary.as_object().unwrap();
    let keys: Vec<&str> = object.keys().map(String::as_str).collect();
    let mut sorted_keys = KEYS.to_vec();
    sorted_keys.sort();
    assert_eq!(keys, sorted_keys, "{line}");
    for (key, next) in KEYS.iter().zip(KEYS.iter().skip(1)) {
        assert!(line.find(&format!("\"{key}\":")) < line.find(&format!("\"{next}\":")), "{key} after {next}: {line}");
    }
    summary
}

#[test]
fn bench_prints_every_field_against_a_standalone() {
    let node = Node::start(&[]);
    let uri = format!("mongodb://127.0.0.1:{}", node.port);
    let dbpath = node.dbpath.to_str().unwrap();

    let insert_j = bench(&["--uri", &uri, "--workload", "insert-j", "--dbpath", dbpath]);
    assert!(insert_j["ops"].as_u64().unwrap() > 0, "{insert_j}");
    assert_eq!(insert_j["errors"], 0);
    assert_eq!(insert_j["write_concern"], "1");
    assert_eq!(insert_j["primary"], format!("127.0.0.1:{}", node.port));
    assert!(insert_j["replica_set"].is_null());
    for probe in ["fdatasync_p50_us", "loopback_rtt_p50_us", "tcp_echo_rtt_p50_us"] {
        assert!(insert_j[probe].as_u64().unwrap() > 0, "{probe}: {insert_j}");
    }
    assert!(insert_j["majority_p50_over_budget"].is_null(), "only majority writes are judged against the budget");

    let majority = bench(&["--uri", &uri, "--workload", "insert", "--write-concern", "majority", "--dbpath", dbpath]);
    assert!(majority["ops"].as_u64().unwrap() > 0, "{majority}");
    assert_eq!(majority["write_concern"], "majority");
    assert!(majority["majority_p50_over_budget"].as_f64().unwrap() > 0.0, "{majority}");

    // A standalone has no secondary: secondaryPreferred reads the primary.
    let read =
        bench(&["--uri", &uri, "--workload", "read", "--docs", "100", "--read-preference", "secondaryPreferred"]);
    assert!(read["ops"].as_u64().unwrap() > 0, "{read}");
    assert!(read["write_concern"].is_null());
    assert_eq!(read["read_preference"], "secondaryPreferred");
}

#[test]
fn bench_refuses_what_it_cannot_do() {
    let node = Node::start(&[]);
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_slipstream")).arg("bench").args(args).output().expect("run slipstream bench")
    };
    let uri = format!("mongodb://127.0.0.1:{}", node.port);
    let set_uri = format!("mongodb://127.0.0.1:{}/?replicaSet=rs0", node.port);
    let cases: [(&[&str], &str); 3] = [
        (&["--uri", &set_uri, "--workload", "insert", "--seconds", "1"], "not a member of replica set rs0"),
        (
            &["--uri", &uri, "--workload", "read", "--seconds", "1", "--read-preference", "secondary"],
            "no member is a secondary",
        ),
        (
            &["--uri", &uri, "--workload", "insert", "--read-preference", "nearest"],
            "--read-preference applies to read and scan",
        ),
    ];
    for (args, message) in cases {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
