//! The member processes: started detached (their own session, so that they
//! outlive the `cluster` command and a Ctrl-C in its terminal), found again
//! by process id, signalled, and waited for without being our children.
//!
//! A process id alone is not proof: after a member exits its id may be
//! reused. A member counts as running only while `/proc/<pid>/cmdline`
//! still names its data directory, and a zombie (exited, not yet reaped by
//! whoever adopted it) counts as gone: it holds no files and no port.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::state::{ClusterState, MemberState};

/// How often a wait looks at a process again.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// The `serve` command line of a member, one of `members` sharing this
/// machine.
pub fn serve_arguments(state: &ClusterState, member: &MemberState, members: usize) -> Vec<String> {
    let mut arguments = vec![
        "serve".to_owned(),
        "--replSet".to_owned(),
        state.set_name.clone(),
        "--enable-test-commands".to_owned(),
        "--bind-ip".to_owned(),
        "127.0.0.1".to_owned(),
        "--port".to_owned(),
        member.port.to_string(),
        "--dbpath".to_owned(),
        member.dbpath.display().to_string(),
        "--logpath".to_owned(),
        member.logpath.display().to_string(),
    ];
    let chosen = |arg: &String| arg == "--worker-threads" || arg.starts_with("--worker-threads=");
    if !state.serve_args.iter().any(chosen) && std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        arguments.push("--worker-threads".to_owned());
        arguments.push(shared_worker_threads(members).to_string());
    }
    arguments.extend(state.serve_args.iter().cloned());
    arguments
}

/// Async workers per member when `members` share this machine's cores:
/// the cores divided among them, at least one. A member on its own
/// machine takes one per core, but co-located members that each do that
/// wake one another's idle workers: on 2 cores, 3 members with 2 workers
/// each used 15-20% more CPU per majority write than with 1, with 25%
/// more context switches (`scripts/bench_replset.sh`, `MEMBER_ENV`).
/// `--serve-arg=--worker-threads=N` or `TOKIO_WORKER_THREADS` choose
/// otherwise.
pub fn shared_worker_threads(members: usize) -> usize {
    let cores = thread::available_parallelism().map_or(1, usize::from);
    (cores / members.max(1)).max(1)
}

/// Starts a member, one of `members` sharing this machine, in a session of
/// its own. Its stdout and stderr are
/// appended to its `outpath`. Dropping the handle neither waits for nor
/// kills the child: the member lives on after this command exits.
pub fn spawn(state: &ClusterState, member: &MemberState, members: usize) -> io::Result<Child> {
    fs::create_dir_all(&member.dbpath)?;
    let output = OpenOptions::new().create(true).append(true).open(&member.outpath)?;
    let mut command = Command::new(&state.binary);
    command
        .args(serve_arguments(state, member, members))
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output);
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it runs in the child between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        });
    }
    command.spawn()
}

/// Whether the member's process is alive (zombies count as gone).
pub fn is_running(member: &MemberState) -> bool {
    if member.pid == 0 {
        // Never started; and kill(0, ..) would mean our own process group.
        return false;
    }
    let proc_dir = Path::new("/proc").join(member.pid.to_string());
    if !Path::new("/proc/self").exists() {
        // No procfs: signal 0 says whether the id is in use at all.
        // SAFETY: kill with signal 0 sends nothing.
        return unsafe { libc::kill(member.pid as libc::pid_t, 0) } == 0;
    }
    let Ok(stat) = fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // The state letter follows the command name, which is in parentheses
    // and may itself hold spaces or parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z") | Some("X") | None) {
        return false;
    }
    let Ok(cmdline) = fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    let dbpath = member.dbpath.display().to_string();
    cmdline
        .split(|&byte| byte == 0)
        .any(|argument| argument == dbpath.as_bytes())
}

/// Sends `signal` to a running member; false when it is not running.
pub fn signal(member: &MemberState, signal: libc::c_int) -> io::Result<bool> {
    if !is_running(member) {
        return Ok(false);
    }
    // SAFETY: plain kill(2) on a process id we just checked.
    if unsafe { libc::kill(member.pid as libc::pid_t, signal) } == -1 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::ESRCH) {
            Ok(false)
        } else {
            Err(err)
        };
    }
    Ok(true)
}

/// Waits until the member's process is gone; false if it is still running
/// at the deadline.
pub fn wait_gone(member: &MemberState, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while is_running(member) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
    true
}

/// Waits until the member's process is stopped by a signal (state `T` in
/// `/proc/<pid>/stat`): SIGSTOP is delivered asynchronously, and on a busy
/// machine the process can still be running when kill(2) returns. False if
/// it is not stopped at the deadline.
pub fn wait_stopped(member: &MemberState, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", member.pid)).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("T") {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Stops a member: SIGTERM (and SIGCONT, so that a paused member can act on
/// it), then SIGKILL if it has not exited within `timeout`. Returns whether
/// it exited on its own.
pub fn stop(member: &MemberState, timeout: Duration) -> io::Result<bool> {
    if !signal(member, libc::SIGTERM)? {
        return Ok(true);
    }
    signal(member, libc::SIGCONT)?;
    if wait_gone(member, timeout) {
        return Ok(true);
    }
    kill(member, timeout)?;
    Ok(false)
}

/// SIGKILL, then waits until the process is gone.
pub fn kill(member: &MemberState, timeout: Duration) -> io::Result<()> {
    signal(member, libc::SIGKILL)?;
    if wait_gone(member, timeout) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("member {} (pid {}) still runs after SIGKILL", member.id, member.pid),
        ))
    }
}

/// The last `lines` lines of a file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::STATE_FORMAT;

    fn state(serve_args: Vec<String>) -> ClusterState {
        let member = |id: u32| crate::cluster::state::tests::member(id, 27016 + id as u16);
        ClusterState {
            format: STATE_FORMAT,
            set_name: "rs0".into(),
            binary: "/bin/slipstream".into(),
            serve_args,
            members: vec![member(1), member(2), member(3)],
            partition: None,
        }
    }

    #[test]
    fn members_share_the_cores_unless_told_otherwise() {
        let cores = thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(shared_worker_threads(3), (cores / 3).max(1));
        assert_eq!(shared_worker_threads(0), cores);
        let workers = |args: &[String]| {
            args.iter()
                .enumerate()
                .filter(|(_, arg)| arg.starts_with("--worker-threads"))
                .map(|(i, arg)| if arg.contains('=') { arg.clone() } else { format!("{arg} {}", args[i + 1]) })
                .collect::<Vec<_>>()
        };
        let chosen = state(vec!["--worker-threads=4".into()]);
        assert_eq!(workers(&serve_arguments(&chosen, &chosen.members[0], 3)), ["--worker-threads=4"]);
        if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
            let default = state(vec![]);
            let expected = format!("--worker-threads {}", shared_worker_threads(3));
            assert_eq!(workers(&serve_arguments(&default, &default.members[0], 3)), [expected]);
        }
    }
}
