//! `slipstream cluster` without a replica set: argument checks, the state
//! file, and how members are found again by process id. The set's
//! behaviour (up, failover, partitions) is tested through pymongo in
//! `python/tests/replset/`.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn cluster(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .arg("cluster")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .expect("run slipstream cluster")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The last stdout line, parsed.
fn summary(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; stderr: {}", stderr(output)));
    serde_json::from_str(last).unwrap_or_else(|err| panic!("{err}: {last}"))
}

/// A state file naming `members` (id, pid, dbpath), written by hand as
/// `cluster up` would have.
fn write_state(dir: &Path, binary: &str, members: &[(u32, u32)], base_port: u16) {
    let members: Vec<Value> = members
        .iter()
        .map(|&(id, pid)| {
            let home = dir.join(format!("n{id}"));
            json!({
                "id": id, "port": base_port + id as u16 - 1, "pid": pid,
                "dbpath": home.join("db"), "logpath": home.join("mongod.log"), "outpath": home.join("output.log"),
                "arbiter": false, "paused": false,
            })
        })
        .collect();
    let state = json!({"format": 1, "set_name": "rs0", "binary": binary, "serve_args": [], "members": members, "partition": null});
    fs::write(dir.join("cluster.json"), state.to_string()).unwrap();
}

/// A process whose command line names `dbpath`, standing in for a member.
fn stand_in(dbpath: &Path) -> Child {
    Command::new("sh")
        .args(["-c", "sleep 60; :", "member"])
        .arg(dbpath)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sh")
}

/// Panics with the stand-in's exit status if it is no longer running: a
/// `cluster` command that finds the member gone then says why.
fn still_running(child: &mut Child) {
    if let Some(status) = child.try_wait().unwrap() {
        panic!("the stand-in member (pid {}) exited before the test acted on it: {status}", child.id());
    }
}

fn gone(child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn cmdline(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline")).map_or_else(|err| err.to_string(), |bytes| {
        String::from_utf8_lossy(&bytes).replace('\0', " ")
    })
}

fn proc_state(pid: u32) -> String {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn commands_without_a_cluster_say_so() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["status"][..],
        &["stop"],
        &["kill", "1"],
        &["partition", "1|2"],
        &["heal"],
        &["restart", "1"],
    ] {
        let output = cluster(dir.path(), args);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&output).contains("no cluster at"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn up_refuses_bad_shapes_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("c");
    for (args, code, message) in [
        (&["up", "--nodes", "0"][..], 2, "--nodes"),
        (&["up", "--nodes", "8"], 2, "--nodes"),
        (&["up", "--election-timeout-ms", "0"], 2, "election-timeout-ms"),
        (&["up", "--member", "4:priority=0"], 1, "numbered 1 to 3"),
        (&["up", "--member", "2:slaveDelay=1"], 1, "unknown option"),
        (&["up", "--base-port", "65535"], 1, "no room"),
        // What the members would refuse at initiate is refused before any
        // starts (they were left running in a directory that never came up).
        (&["up", "--set-name", "", "--base-port", "40111"], 1, "would be refused"),
        (&["up", "--member", "1:votes=0,priority=1", "--base-port", "40111"], 1, "would be refused"),
    ] {
        let output = cluster(&target, args);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains(message), "{args:?}: {}", stderr(&output));
        assert!(!target.join("cluster.json").exists(), "{args:?} wrote a state file");
    }
}

#[test]
fn up_refuses_a_port_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let output = cluster(dir.path(), &["up", "--nodes", "1", "--base-port", &port.to_string()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains(&format!("port {port} is not free")),
        "{}",
        stderr(&output)
    );
    assert!(!dir.path().join("cluster.json").exists());
}

#[test]
fn a_reused_process_id_is_not_a_member() {
    // Our own process id stands in for a member that exited and whose id
    // was reused: its command line does not name the member's data, so
    // the member is DOWN and `kill` must not touch the process.
    let dir = tempfile::tempdir().unwrap();
    write_state(
        dir.path(),
        "/bin/false",
        &[(1, std::process::id()), (2, std::process::id())],
        40001,
    );
    let output = cluster(dir.path(), &["status"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let status = summary(&output);
    assert_eq!(
        status["uri"],
        "mongodb://127.0.0.1:40001,127.0.0.1:40002/?replicaSet=rs0"
    );
    for member in status["members"].as_array().unwrap() {
        assert_eq!(member["state"], "DOWN");
        assert_eq!(member["up"], false);
    }
    let output = cluster(dir.path(), &["kill", "1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("member 1 is not running"),
        "{}",
        stderr(&output)
    );
    let output = cluster(dir.path(), &["kill", "3"]);
    assert!(
        stderr(&output).contains("no member 3 (members: 1, 2)"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn kill_pause_resume_and_stop_act_on_the_member_process() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = stand_in(&dir.path().join("n1").join("db"));
    let mut second = stand_in(&dir.path().join("n2").join("db"));
    write_state(dir.path(), "/bin/false", &[(1, first.id()), (2, second.id())], 40011);

    let output = cluster(dir.path(), &["pause", "1"]);
    if !output.status.success() {
        still_running(&mut first);
    }
    assert!(output.status.success(), "{} (/proc/{}/cmdline: {:?})", stderr(&output), first.id(), cmdline(first.id()));
    assert_eq!(proc_state(first.id()), "T", "SIGSTOP stops the process");
    let status = summary(&cluster(dir.path(), &["status"]));
    assert_eq!(status["members"][0]["state"], "PAUSED");
    assert_eq!(status["members"][0]["paused"], true);
    // Resuming continues the process, then fails to reach it (the stand-in
    // serves no fail point) and says so.
    let output = cluster(dir.path(), &["resume", "1"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("did not take its partition's blocklist"),
        "{}",
        stderr(&output)
    );
    assert_ne!(proc_state(first.id()), "T");

    let output = cluster(dir.path(), &["kill", "1"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(summary(&output), json!({"killed": 1, "pid": first.id()}));
    assert!(gone(&mut first));
    assert_eq!(
        summary(&cluster(dir.path(), &["status"]))["members"][0]["state"],
        "DOWN"
    );

    let output = cluster(dir.path(), &["stop"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(summary(&output), json!({"stopped": [2], "killed": []}));
    assert!(gone(&mut second));
}

#[test]
fn partition_is_recorded_and_waits_for_members_that_are_down() {
    let dir = tempfile::tempdir().unwrap();
    // Process ids that cannot be members (ours), so every member is down.
    let pid = std::process::id();
    write_state(dir.path(), "/bin/false", &[(1, pid), (2, pid), (3, pid)], 40021);
    for (spec, message) in [
        ("1|4", "no member 4"),
        ("1,2", "two sides"),
        ("1|1", "more than one side"),
    ] {
        let output = cluster(dir.path(), &["partition", spec]);
        assert_eq!(output.status.code(), Some(1), "{spec}");
        assert!(stderr(&output).contains(message), "{spec}: {}", stderr(&output));
    }
    let output = cluster(dir.path(), &["partition", "1,2|3"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        summary(&output),
        json!({"partition": "1,2|3", "applied": [], "deferred": [1, 2, 3]})
    );
    let state: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("cluster.json")).unwrap()).unwrap();
    assert_eq!(state["partition"], json!([[1, 2], [3]]));
    assert_eq!(summary(&cluster(dir.path(), &["status"]))["partition"], "1,2|3");

    let output = cluster(dir.path(), &["heal"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(summary(&output)["partition"], Value::Null);
}

#[test]
fn up_on_a_stopped_cluster_starts_its_members_again() {
    // The recorded binary fails at once: `up` reports the member's exit
    // with its output instead of waiting.
    let dir = tempfile::tempdir().unwrap();
    write_state(dir.path(), "/bin/false", &[(1, std::process::id())], 40031);
    let output = cluster(dir.path(), &["up"]);
    assert_eq!(output.status.code(), Some(1));
    let message = stderr(&output);
    assert!(message.contains("starting the stopped cluster"), "{message}");
    assert!(message.contains("member 1 exited during startup"), "{message}");
    let state: Value = serde_json::from_str(&fs::read_to_string(dir.path().join("cluster.json")).unwrap()).unwrap();
    assert_ne!(
        state["members"][0]["pid"],
        json!(std::process::id()),
        "the new process id is recorded"
    );
}

#[test]
fn a_closed_output_pipe_is_not_a_failure() {
    // `cluster status | head -1`: the command ends as it would have, with
    // no panic (println! panics on EPIPE).
    let dir = tempfile::tempdir().unwrap();
    let mut child = stand_in(&dir.path().join("n1").join("db"));
    write_state(dir.path(), "/bin/false", &[(1, child.id())], 40021);
    let mut status = Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .args(["cluster", "--dir"])
        .arg(dir.path())
        .arg("status")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(status.stdout.take());
    let output = status.wait_with_output().unwrap();
    assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    assert_ne!(output.status.code(), Some(101), "{}", stderr(&output));
    let _ = child.kill();
    let _ = child.wait();
}
