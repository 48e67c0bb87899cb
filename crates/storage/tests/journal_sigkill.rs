//! A real crash: a child process (this test binary, re-run) appends from
//! several threads, waits for durability and reports every acknowledged
//! timestamp on stdout; the parent SIGKILLs it mid-stream, reopens the
//! journal, and finds every acknowledged entry, in order, with nothing
//! after a gap.

mod journal_common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use journal_common::*;
use parking_lot::Mutex;
use slipstream_storage::journal::JournalOptions;
use slipstream_storage::Timestamp;

const CHILD_DIR_ENV: &str = "SLIPSTREAM_JOURNAL_SIGKILL_CHILD_DIR";
const CHILD_WRITERS: u32 = 8;

fn sigkill_options() -> JournalOptions {
    JournalOptions {
        commit_interval_ms: 100,
        segment_size_bytes: 256 * 1024,
        size_cap_bytes: u64::MAX,
        ..JournalOptions::default()
    }
}

/// The child's side: append and acknowledge until killed.
fn run_child(dir: &str) {
    let journal = Arc::new(open(std::path::Path::new(dir), sigkill_options()));
    let start = journal.last_ts().map_or(0, |last| {
        // Continue after whatever an earlier round left.
        (0..).find(|i| ts(*i) > last).unwrap()
    });
    let write_lock = Arc::new(Mutex::new(start));
    let stdout = Arc::new(Mutex::new(std::io::stdout()));
    let writers: Vec<_> = (0..CHILD_WRITERS)
        .map(|_| {
            let (journal, write_lock, stdout) = (journal.clone(), write_lock.clone(), stdout.clone());
            std::thread::spawn(move || loop {
                let t = {
                    let mut next = write_lock.lock();
                    let t = ts(*next);
                    *next += 1;
                    journal.append(t, &entry(t, 700)).unwrap();
                    t
                };
                journal.wait_durable(t).unwrap();
                let mut out = stdout.lock();
                writeln!(out, "ack {}", t.as_u64()).unwrap();
                out.flush().unwrap();
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
}

#[test]
fn sigkill_during_concurrent_durable_appends_loses_no_acknowledged_entry() {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        run_child(&dir);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut acknowledged_total = 0;
    for (round, run_ms) in [150u64, 400, 50, 700].into_iter().enumerate() {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sigkill_during_concurrent_durable_appends_loses_no_acknowledged_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let acknowledged = Arc::new(Mutex::new(Vec::<Timestamp>::new()));
        let collector = {
            let acknowledged = acknowledged.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(value) = line.strip_prefix("ack ") {
                        acknowledged.lock().push(Timestamp::from_u64(value.parse().unwrap()));
                    }
                }
            })
        };
        // Wait for the first acknowledgement, then let it run a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        while acknowledged.lock().is_empty() {
            assert!(Instant::now() < deadline, "round {round}: the child never acknowledged a write");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(run_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        collector.join().unwrap();
        let acknowledged = acknowledged.lock().clone();
        assert!(!acknowledged.is_empty());
        acknowledged_total += acknowledged.len();

        let journal = open(dir.path(), sigkill_options());
        let recovered = all_timestamps(&journal);
        for window in recovered.windows(2) {
            assert!(window[0] < window[1]);
        }
        let recovered_set: std::collections::BTreeSet<Timestamp> = recovered.iter().copied().collect();
        for t in &acknowledged {
            assert!(recovered_set.contains(t), "round {round}: acknowledged {t} was lost");
        }
        // No gaps: the journal is the counters 0..n without holes.
        let n = recovered.len() as u32;
        assert_eq!(recovered, (0..n).map(ts).collect::<Vec<_>>(), "round {round}: a hole in the recovered journal");
    }
    assert!(acknowledged_total > 0);
    eprintln!("{acknowledged_total} acknowledged entries over 4 SIGKILLed children");
}
