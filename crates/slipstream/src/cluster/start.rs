//! Starting members: `up` (a new set, or a stopped one again), `restart N`
//! and `add`, and the waits that follow a start.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use bson::doc;
use serde_json::json;

use super::config::{initiate_config, parse_member_options, MemberOptions, Settings};
use super::state::{ClusterState, MemberState, StateError, MEMBERS_MAX, STATE_FORMAT};
use super::view::MemberView;
use super::{control, process, status_json, Cluster, UpArgs, STOP_TIMEOUT};

/// How often a wait asks the members again.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Lines of a member's output and log quoted when it fails to start.
const TAIL_LINES: usize = 20;

/// `up` on a cluster that exists starts it as it was made: an option given
/// that says otherwise is refused (it was dropped without a word, so a
/// user asking for five members on another port got the old three).
fn check_same_shape(cluster: &Cluster, state: &ClusterState, args: &UpArgs) -> Result<(), String> {
    let mut differs = Vec::new();
    let data_members = state.members.iter().filter(|m| !m.arbiter).count() as u32;
    if args.nodes.is_some_and(|nodes| nodes != data_members) {
        differs.push(format!("--nodes {} (it has {data_members} data-bearing members)", args.nodes()));
    }
    if args.arbiter && !state.members.iter().any(|m| m.arbiter) {
        differs.push("--arbiter (it has none)".to_owned());
    }
    let first_port = state.members.iter().map(|m| m.port).min().unwrap_or(0);
    if args.base_port.is_some_and(|port| port != first_port) {
        differs.push(format!("--base-port {} (its members start at {first_port})", args.base_port()));
    }
    if args.set_name.as_ref().is_some_and(|name| *name != state.set_name) {
        differs.push(format!("--set-name {} (it is {})", args.set_name(), state.set_name));
    }
    if !args.serve_arg.is_empty() && args.serve_arg != state.serve_args {
        differs.push(format!("--serve-arg {:?} (it has {:?})", args.serve_arg, state.serve_args));
    }
    let made_only = [
        ("--election-timeout-ms", args.election_timeout_ms.is_some()),
        ("--heartbeat-interval-ms", args.heartbeat_interval_ms.is_some()),
        ("--no-chaining", args.no_chaining),
        ("--member", !args.member.is_empty()),
    ];
    for (option, given) in made_only {
        if given {
            differs.push(format!("{option} (set when a cluster is made; change it with replSetReconfig)"));
        }
    }
    if differs.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the cluster at {} exists and starts again as it was made; these options say otherwise: {}. \
         Leave them out to start it, or give another --dir for a new cluster",
        cluster.dir().display(),
        differs.join("; ")
    ))
}

pub fn up(cluster: &Cluster, args: &UpArgs) -> Result<String, String> {
    match ClusterState::load(cluster.dir()) {
        Ok(state) => {
            check_same_shape(cluster, &state, args)?;
            return start_again(cluster, state, args.wait.timeout());
        }
        Err(StateError::Missing(_)) => {}
        Err(err) => return Err(err.to_string()),
    }
    let options = member_options(args)?;
    let count = args.nodes() + u32::from(args.arbiter);
    if u32::from(args.base_port()) + count - 1 > u32::from(u16::MAX) || args.base_port() == 0 {
        return Err(format!(
            "--base-port {} leaves no room for {count} members",
            args.base_port()
        ));
    }
    let dir = absolute_directory(cluster.dir())?;
    let mut state = ClusterState {
        format: STATE_FORMAT,
        set_name: args.set_name(),
        binary: std::env::current_exe().map_err(|err| format!("cannot find this binary: {err}"))?,
        serve_args: args.serve_arg.clone(),
        members: Vec::new(),
        partition: None,
    };
    let members: Vec<MemberState> = (1..=count)
        .map(|id| new_member(&dir, id, args.base_port() + (id - 1) as u16, id > args.nodes()))
        .collect();
    // The configuration is checked as the members will check it before any
    // of them starts: one they would refuse left them running in a
    // directory that could never come up.
    let settings = Settings {
        election_timeout_ms: args.election_timeout_ms(),
        heartbeat_interval_ms: args.heartbeat_interval_ms(),
        chaining_allowed: !args.no_chaining,
    };
    let planned = ClusterState { members: members.clone(), ..state.clone() };
    slipstream_repl::config_document::parse_config(&initiate_config(&planned, &options, settings))
        .map_err(|err| format!("the set's configuration would be refused: {err}"))?;
    for member in &members {
        check_port_free(member.port)?;
    }
    let deadline = Instant::now() + args.wait.timeout();
    initiate_new(cluster, &mut state, members, &options, args, deadline).map_err(|err| {
        format!(
            "{err}\n(the members started are in {}: `cluster stop` ends them)",
            cluster.dir().display()
        )
    })
}

fn initiate_new(
    cluster: &Cluster,
    state: &mut ClusterState,
    members: Vec<MemberState>,
    options: &[MemberOptions],
    args: &UpArgs,
    deadline: Instant,
) -> Result<String, String> {
    let settings = Settings {
        election_timeout_ms: args.election_timeout_ms(),
        heartbeat_interval_ms: args.heartbeat_interval_ms(),
        chaining_allowed: !args.no_chaining,
    };
    let children = spawn_all(cluster, state, members)?;
    wait_all_answering(cluster, state, children, deadline)?;
    let config = initiate_config(state, options, settings);
    eprintln!("initiating {} with {} members", state.set_name, state.members.len());
    cluster
        .admin
        .command(state.members[0].port, doc! {"replSetInitiate": config})
        .map_err(|err| format!("replSetInitiate on member 1 failed: {err}"))?;
    ready(cluster, state, deadline)
}

fn member_options(args: &UpArgs) -> Result<Vec<MemberOptions>, String> {
    let options = args
        .member
        .iter()
        .map(|spec| parse_member_options(spec))
        .collect::<Result<Vec<_>, _>>()?;
    for option in &options {
        if option.id == 0 || option.id > args.nodes() {
            return Err(format!(
                "--member {}: members are numbered 1 to {} (the arbiter takes no options)",
                option.id, args.nodes()
            ));
        }
    }
    Ok(options)
}

/// A stopped cluster's members, started again on their data: their config
/// and terms are on disk, so no initiate. The partition is lifted.
fn start_again(cluster: &Cluster, mut state: ClusterState, timeout: Duration) -> Result<String, String> {
    if let Some(running) = state.members.iter().find(|member| process::is_running(member)) {
        return Err(format!(
            "the cluster at {} is already up (member {} runs, pid {}); `cluster stop` it first",
            cluster.dir().display(),
            running.id,
            running.pid
        ));
    }
    eprintln!(
        "starting the stopped cluster at {} again (its members keep their data and config)",
        cluster.dir().display()
    );
    state.partition = None;
    let deadline = Instant::now() + timeout;
    let members = std::mem::take(&mut state.members);
    let children = spawn_all(cluster, &mut state, members)?;
    wait_all_answering(cluster, &state, children, deadline)?;
    ready(cluster, &state, deadline)
}

/// Waits for the set to be ready, then prints the URI and returns the
/// status line.
fn ready(cluster: &Cluster, state: &ClusterState, deadline: Instant) -> Result<String, String> {
    let views = wait_ready(cluster, state, deadline)?;
    for view in &views {
        eprintln!("{}", view.line());
    }
    out!("{}", state.uri());
    Ok(status_json(state, &views).to_string())
}

pub fn restart(cluster: &Cluster, id: u32, timeout: Duration) -> Result<String, String> {
    let mut state = cluster.load()?;
    let member = state.member(id)?.clone();
    if process::is_running(&member) {
        eprintln!("stopping member {id} (pid {}) first", member.pid);
        process::stop(&member, STOP_TIMEOUT).map_err(|err| format!("stopping member {id}: {err}"))?;
    }
    let members = state.members.len();
    let mut child = process::spawn(&state, &member, members).map_err(|err| format!("starting member {id}: {err}"))?;
    {
        let saved = state.member_mut(id)?;
        saved.pid = child.id();
        saved.paused = false;
    }
    cluster.save(&state)?;
    let member = state.member(id)?.clone();
    wait_answering(cluster, &member, &mut child, Instant::now() + timeout)?;
    control::apply_blocklist(cluster, &state, &member)
        .map_err(|err| format!("member {id} restarted but did not take its partition's blocklist: {err}"))?;
    let view = MemberView::of(&cluster.admin, &member);
    out!("{}", view.line());
    Ok(view.json().to_string())
}

pub fn add(cluster: &Cluster, arbiter: bool, timeout: Duration) -> Result<String, String> {
    let mut state = cluster.load()?;
    if state.members.len() >= MEMBERS_MAX {
        return Err(format!(
            "the cluster already has {MEMBERS_MAX} members, a replica set's most"
        ));
    }
    let id = state.members.iter().map(|member| member.id).max().unwrap_or(0) + 1;
    let after = state.members.iter().map(|member| member.port).max().unwrap_or(0);
    let port = next_free_port(after)?;
    let dir = absolute_directory(cluster.dir())?;
    let member = new_member(&dir, id, port, arbiter);
    let mut children = spawn_all(cluster, &mut state, vec![member])?;
    // As spawned: with its pid (the copy from before said pid 0, DOWN).
    let member = state.member(id)?.clone();
    wait_answering(cluster, &member, &mut children[0], Instant::now() + timeout)?;
    let mut config_member = json!({"_id": id, "host": member.host()});
    if arbiter {
        config_member["arbiterOnly"] = json!(true);
    }
    out!(
        "member {id} runs on {} outside the config; add it with replSetReconfig, e.g. mongosh rs.add({config_member})",
        member.host()
    );
    let view = MemberView::of(&cluster.admin, &member);
    Ok(json!({"member": view.json(), "config": config_member}).to_string())
}

fn new_member(dir: &Path, id: u32, port: u16, arbiter: bool) -> MemberState {
    let home = dir.join(format!("n{id}"));
    MemberState {
        id,
        port,
        pid: 0,
        dbpath: home.join("db"),
        logpath: home.join("mongod.log"),
        outpath: home.join("output.log"),
        arbiter,
        paused: false,
    }
}

/// Starts each member and records it in the state file as soon as it runs,
/// so that `cluster stop` finds it even if this command fails later.
fn spawn_all(cluster: &Cluster, state: &mut ClusterState, members: Vec<MemberState>) -> Result<Vec<Child>, String> {
    let mut children = Vec::with_capacity(members.len());
    // Every member the machine will run once these are up.
    let sharing = state.members.len() + members.len();
    for mut member in members {
        let child =
            process::spawn(state, &member, sharing).map_err(|err| format!("starting member {}: {err}", member.id))?;
        member.pid = child.id();
        member.paused = false;
        eprintln!(
            "member {} started: pid {}, port {}, dbpath {}",
            member.id,
            member.pid,
            member.port,
            member.dbpath.display()
        );
        state.members.push(member);
        children.push(child);
        cluster.save(state)?;
    }
    Ok(children)
}

fn wait_all_answering(
    cluster: &Cluster,
    state: &ClusterState,
    children: Vec<Child>,
    deadline: Instant,
) -> Result<(), String> {
    for (member, mut child) in state.members.iter().zip(children) {
        wait_answering(cluster, member, &mut child, deadline)?;
    }
    Ok(())
}

/// Waits until the member answers `ping`; fails at once, quoting its
/// output and log, if its process exits. The child handle (not the
/// process table) tells, because between fork and exec the child's command
/// line is still ours.
fn wait_answering(cluster: &Cluster, member: &MemberState, child: &mut Child, deadline: Instant) -> Result<(), String> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "member {} exited during startup ({status})\n{}",
                member.id,
                failure_tails(member)
            ));
        }
        if cluster.admin.ping(member.port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "member {} does not answer on port {}\n{}",
                member.id,
                member.port,
                failure_tails(member)
            ));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

/// Waits until some member is PRIMARY and every other one SECONDARY or
/// ARBITER.
fn wait_ready(cluster: &Cluster, state: &ClusterState, deadline: Instant) -> Result<Vec<MemberView>, String> {
    loop {
        let views = cluster.views(state);
        if let Some(down) = views.iter().find(|view| !view.up) {
            let member = state.member(down.id)?;
            return Err(format!("member {} exited\n{}", down.id, failure_tails(member)));
        }
        if views.iter().any(MemberView::is_primary) && views.iter().all(MemberView::is_healthy) {
            return Ok(views);
        }
        if Instant::now() >= deadline {
            let lines: Vec<String> = views.iter().map(MemberView::line).collect();
            return Err(format!("the set is not ready in time:\n{}", lines.join("\n")));
        }
        thread::sleep(POLL_INTERVAL);
    }
}

fn failure_tails(member: &MemberState) -> String {
    format!(
        "--- {}:\n{}\n--- {}:\n{}",
        member.outpath.display(),
        process::tail(&member.outpath, TAIL_LINES),
        member.logpath.display(),
        process::tail(&member.logpath, TAIL_LINES)
    )
}

/// Ports `add` tries above the members' highest before giving up.
const ADD_PORT_SEARCH: u16 = 64;

/// The first free port above `after` (the members' highest): the next one
/// may be taken meanwhile, by another program or by an outgoing
/// connection's ephemeral port.
fn next_free_port(after: u16) -> Result<u16, String> {
    let mut last_error = String::from("no port left");
    for offset in 1..=ADD_PORT_SEARCH {
        let Some(port) = after.checked_add(offset) else { break };
        match check_port_free(port) {
            Ok(()) => return Ok(port),
            Err(err) => last_error = err,
        }
    }
    Err(format!("no free port among the {ADD_PORT_SEARCH} above {after}: {last_error}"))
}

fn check_port_free(port: u16) -> Result<(), String> {
    TcpListener::bind(("127.0.0.1", port))
        .map(drop)
        .map_err(|err| format!("port {port} is not free ({err}); choose another --base-port"))
}

/// The directory, created and made absolute: members are found again by
/// their data paths, whatever directory later commands run from.
fn absolute_directory(dir: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    dir.canonicalize().map_err(|err| format!("{}: {err}", dir.display()))
}
