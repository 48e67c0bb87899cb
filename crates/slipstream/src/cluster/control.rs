//! Acting on running members: `stop`, `kill`, `pause`, `resume`, and the
//! test-only fault hook behind `partition` / `heal`.
//!
//! What a partition drops: each member on one side sets the `blockMembers`
//! fail point naming the hosts of every member on the other sides, which
//! cuts all member-to-member traffic between them in both directions
//! (heartbeats, votes, oplog fetching, position reports, stepUp): its
//! replication network refuses to send to them, and its server closes any
//! connection whose internal handshake named one of them. Connections of
//! clients (drivers, mongosh, these commands) are kept, so a test can still
//! write to an isolated primary. A member that is down or paused takes its
//! part when `restart` or `resume` brings it back.

use std::io;

use serde_json::json;

use super::admin::AdminError;
use super::partition::{blocked_by, format_sides, parse_sides};
use super::state::{ClusterState, MemberState};
use super::view::MemberView;
use super::{process, status_json, Cluster, STOP_TIMEOUT};

pub fn stop_all(cluster: &Cluster) -> Result<String, String> {
    let mut state = cluster.load()?;
    // Signal everyone first, so that the members shut down side by side.
    let mut stopping = Vec::new();
    for member in &state.members {
        if process::signal(member, libc::SIGTERM).map_err(|err| signal_error(member, err))? {
            process::signal(member, libc::SIGCONT).map_err(|err| signal_error(member, err))?;
            stopping.push(member.clone());
        }
    }
    let mut killed = Vec::new();
    for member in &stopping {
        if !process::wait_gone(member, STOP_TIMEOUT) {
            eprintln!(
                "member {} did not exit within {} s of SIGTERM: SIGKILL",
                member.id,
                STOP_TIMEOUT.as_secs()
            );
            process::kill(member, STOP_TIMEOUT).map_err(|err| signal_error(member, err))?;
            killed.push(member.id);
        }
    }
    for member in &mut state.members {
        member.paused = false;
    }
    cluster.save(&state)?;
    out!(
        "stopped {} members ({} needed SIGKILL); the data stays in {}",
        stopping.len(),
        killed.len(),
        cluster.dir().display()
    );
    let stopped: Vec<u32> = stopping.iter().map(|member| member.id).collect();
    Ok(json!({"stopped": stopped, "killed": killed}).to_string())
}

pub fn kill(cluster: &Cluster, id: u32) -> Result<String, String> {
    let mut state = cluster.load()?;
    let member = running_member(&state, id)?;
    process::kill(&member, STOP_TIMEOUT).map_err(|err| signal_error(&member, err))?;
    state.member_mut(id)?.paused = false;
    cluster.save(&state)?;
    out!("member {id} (pid {}) killed with SIGKILL", member.pid);
    Ok(json!({"killed": id, "pid": member.pid}).to_string())
}

pub fn pause(cluster: &Cluster, id: u32) -> Result<String, String> {
    let mut state = cluster.load()?;
    let member = running_member(&state, id)?;
    process::signal(&member, libc::SIGSTOP).map_err(|err| signal_error(&member, err))?;
    // Returns once the member is stopped, so that what the caller does next
    // (a test, a fault schedule) finds it paused.
    if !process::wait_stopped(&member, STOP_TIMEOUT) {
        return Err(format!("member {id} (pid {}) was sent SIGSTOP but did not stop", member.pid));
    }
    state.member_mut(id)?.paused = true;
    cluster.save(&state)?;
    out!("member {id} (pid {}) paused with SIGSTOP", member.pid);
    Ok(json!({"paused": id, "pid": member.pid}).to_string())
}

/// How long `resume` keeps offering a resumed member its blocklist.
const RESUME_BLOCKLIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

pub fn resume(cluster: &Cluster, id: u32) -> Result<String, String> {
    let mut state = cluster.load()?;
    let member = running_member(&state, id)?;
    process::signal(&member, libc::SIGCONT).map_err(|err| signal_error(&member, err))?;
    state.member_mut(id)?.paused = false;
    cluster.save(&state)?;
    let member = state.member(id)?.clone();
    // A member back from a long SIGSTOP may take seconds to answer again
    // (its runtime catches up on its timers first): a slow answer is tried
    // again, a refused connection (nothing listens) is not.
    let deadline = std::time::Instant::now() + RESUME_BLOCKLIST_TIMEOUT;
    loop {
        match apply_blocklist(cluster, &state, &member) {
            Ok(()) => break,
            Err(err) if is_slow(&err) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(err) => {
                return Err(format!("member {id} resumed but did not take its partition's blocklist: {err}"));
            }
        }
    }
    out!("member {id} (pid {}) resumed with SIGCONT", member.pid);
    Ok(json!({"resumed": id, "pid": member.pid}).to_string())
}

pub fn partition(cluster: &Cluster, spec: &str) -> Result<String, String> {
    let mut state = cluster.load()?;
    let known: Vec<u32> = state.members.iter().map(|member| member.id).collect();
    let sides = parse_sides(spec, &known)?;
    state.partition = Some(sides.clone());
    cluster.save(&state)?;
    let (applied, deferred) = apply_everywhere(cluster, &state)?;
    out!("partition {} in force", format_sides(&sides));
    Ok(json!({"partition": format_sides(&sides), "applied": applied, "deferred": deferred}).to_string())
}

pub fn heal(cluster: &Cluster) -> Result<String, String> {
    let mut state = cluster.load()?;
    state.partition = None;
    cluster.save(&state)?;
    let (applied, deferred) = apply_everywhere(cluster, &state)?;
    out!("healed: every member talks to every member");
    let views: Vec<MemberView> = cluster.views(&state);
    let mut summary = status_json(&state, &views);
    summary["applied"] = json!(applied);
    summary["deferred"] = json!(deferred);
    Ok(summary.to_string())
}

/// Sets every running member's blocklist to its part of the partition in
/// force. Members down or paused are skipped (their `restart` or `resume`
/// applies it); returns (applied, skipped) member ids.
fn apply_everywhere(cluster: &Cluster, state: &ClusterState) -> Result<(Vec<u32>, Vec<u32>), String> {
    let mut applied = Vec::new();
    let mut deferred = Vec::new();
    for member in &state.members {
        if member.paused || !process::is_running(member) {
            eprintln!(
                "member {} is down or paused: it takes its blocklist when it comes back",
                member.id
            );
            deferred.push(member.id);
            continue;
        }
        apply_blocklist(cluster, state, member).map_err(|err| format!("member {}: {err}", member.id))?;
        applied.push(member.id);
    }
    Ok((applied, deferred))
}

/// Sets one member's `blockMembers` fail point to the hosts the partition
/// in force has it block (off when none).
pub fn apply_blocklist(cluster: &Cluster, state: &ClusterState, member: &MemberState) -> Result<(), AdminError> {
    let blocked = match &state.partition {
        Some(sides) => blocked_by(member.id, sides),
        None => Vec::new(),
    };
    let hosts: Vec<String> = blocked
        .iter()
        .filter_map(|id| state.members.iter().find(|other| other.id == *id))
        .map(MemberState::host)
        .collect();
    if !hosts.is_empty() {
        eprintln!("member {} blocks {}", member.id, hosts.join(", "));
    }
    cluster.admin.block_members(member.port, &hosts)
}

/// A member that did not answer in time (rather than one that refused).
fn is_slow(err: &AdminError) -> bool {
    match err {
        AdminError::TimedOut => true,
        AdminError::Unreachable(why) => why.contains("timed out"),
        AdminError::Failed { .. } => false,
    }
}

fn running_member(state: &ClusterState, id: u32) -> Result<MemberState, String> {
    let member = state.member(id)?;
    if !process::is_running(member) {
        return Err(format!("member {id} is not running (pid {} has exited)", member.pid));
    }
    Ok(member.clone())
}

fn signal_error(member: &MemberState, err: io::Error) -> String {
    format!("signalling member {} (pid {}): {err}", member.id, member.pid)
}
