//! Under the default poison policy a failed fsync, or a panic in one of the
//! journal's threads, ends the process: the cause is logged and the process
//! aborts (as MongoDB's fassert does), so that nothing goes on serving
//! state that will not survive a restart and no `j: true` waiter blocks
//! forever. Each case runs in a child process (this test binary, re-run)
//! and the parent checks how it ended and what it logged.

mod journal_common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use journal_common::*;
use slipstream_storage::io::{Fault, FaultyIo};
use slipstream_storage::journal::{Journal, JournalOptions};

const CHILD_DIR_ENV: &str = "SLIPSTREAM_JOURNAL_ABORT_CHILD_DIR";
/// How long the child may take to abort; a child still running after it
/// has a waiter blocked for good.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);

/// The child's side: one durable entry, then the fault, then a durable
/// wait that must never return.
fn run_child(dir: &str, fault: Fault) {
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).try_init();
    // The abort is expected: leave no core file behind.
    let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads the struct we pass and touches no memory of ours.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let io = FaultyIo::over_std();
    let options = JournalOptions { commit_interval_ms: 3_600_000, ..JournalOptions::default() };
    let journal = Journal::open(std::path::Path::new(dir), io.as_backend(), options).unwrap();
    journal.append(ts(0), &entry(ts(0), 300)).unwrap();
    journal.sync_now().unwrap();
    io.arm(fault);
    journal.append(ts(1), &entry(ts(1), 300)).unwrap();
    let result = journal.wait_durable(ts(1));
    println!("survived the fault: {result:?}");
}

/// Runs test `name` as a child with `fault`, and checks that it aborted,
/// logging `cause`, and that the journal it left reopens with its durable
/// entry.
fn check_child_aborts(name: &str, fault: Fault, cause: &str) {
    if let Ok(dir) = std::env::var(CHILD_DIR_ENV) {
        run_child(&dir, fault);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + CHILD_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{name}: the child still runs {CHILD_TIMEOUT:?} after the fault: a waiter is blocked for good");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let output = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{name}: the child ended with {status:?}\n{output}");
    assert!(stderr.contains("durability can no longer be promised"), "{name}: no error logged:\n{stderr}");
    assert!(stderr.contains(cause), "{name}: the log does not say {cause:?}:\n{stderr}");
    let journal = open(dir.path(), small_options());
    assert_eq!(all_timestamps(&journal).first(), Some(&ts(0)), "{name}: the durable entry is gone");
}

#[test]
fn a_failed_fsync_aborts_the_process() {
    check_child_aborts("a_failed_fsync_aborts_the_process", Fault::Sync { nth: 1 }, "injected fsync failure");
}

#[test]
fn a_failed_write_aborts_the_process() {
    let fault = Fault::Write { nth: 1, partial_bytes: Some(100) };
    check_child_aborts("a_failed_write_aborts_the_process", fault, "injected write failure");
}

#[test]
fn a_panic_in_a_sync_worker_aborts_the_process() {
    check_child_aborts("a_panic_in_a_sync_worker_aborts_the_process", Fault::SyncPanics { nth: 1 }, "injected panic");
}

#[test]
fn a_panic_in_the_group_commit_thread_aborts_the_process() {
    let fault = Fault::WritePanics { nth: 1 };
    check_child_aborts("a_panic_in_the_group_commit_thread_aborts_the_process", fault, "injected panic");
}
