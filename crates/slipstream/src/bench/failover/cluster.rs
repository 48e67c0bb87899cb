//! The replica set a failover bench works on, driven through
//! `slipstream cluster` (the same binary): its state file names the
//! members; `up`, `kill N`, `restart N` and `stop` change them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// Longest one `slipstream cluster` command may take (`up` starts three
/// members and waits for an election).
const CLUSTER_COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// The state file `slipstream cluster` keeps in its directory.
pub const STATE_FILE: &str = "cluster.json";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The number `slipstream cluster` commands take.
    pub id: u64,
    /// `host:port`, as the set's config names it.
    pub host: String,
    pub arbiter: bool,
}

/// The replica set settings of a set the bench starts.
pub struct SetSettings {
    pub election_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
}

/// Ports tried for a set the bench starts.
const BASE_PORTS: std::ops::Range<u16> = 20_000..60_000;
/// Base ports tried before giving up.
const BASE_PORT_TRIES: u16 = 50;

/// A port from which `nodes` consecutive loopback ports are free now.
fn free_base_port(nodes: u16) -> Result<u16, String> {
    let span = BASE_PORTS.end - BASE_PORTS.start - nodes;
    let start = (std::process::id() % u32::from(span)) as u16;
    for attempt in 0..BASE_PORT_TRIES {
        let base = BASE_PORTS.start + (start + attempt * 997) % span;
        if (base..base + nodes).all(|port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()) {
            return Ok(base);
        }
    }
    Err(format!("no {nodes} consecutive free ports found in {BASE_PORTS:?}"))
}

pub struct Cluster {
    dir: PathBuf,
    /// True when the bench started the set (and so stops it).
    owned: bool,
}

impl Cluster {
    /// Starts a set of `nodes` members in `dir` through `slipstream cluster
    /// up`, on consecutive free loopback ports.
    pub async fn start(dir: &Path, nodes: u16, settings: &SetSettings) -> Result<Cluster, String> {
        let cluster = Cluster { dir: dir.to_owned(), owned: true };
        let base_port = free_base_port(nodes)?;
        cluster
            .run(&[
                "up",
                "--nodes",
                &nodes.to_string(),
                "--base-port",
                &base_port.to_string(),
                "--election-timeout-ms",
                &settings.election_timeout_ms.to_string(),
                "--heartbeat-interval-ms",
                &settings.heartbeat_interval_ms.to_string(),
            ])
            .await?;
        Ok(cluster)
    }

    /// A set someone else started (and will stop).
    pub fn attach(dir: &Path) -> Result<Cluster, String> {
        let cluster = Cluster { dir: dir.to_owned(), owned: false };
        cluster.members()?;
        Ok(cluster)
    }

    pub fn owned(&self) -> bool {
        self.owned
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The members, read from the state file now.
    pub fn members(&self) -> Result<Vec<Member>, String> {
        let path = self.dir.join(STATE_FILE);
        let text = std::fs::read_to_string(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        parse_members(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    pub fn member_at(&self, host: &str) -> Result<Member, String> {
        let members = self.members()?;
        members
            .into_iter()
            .find(|member| member.host == host)
            .ok_or_else(|| format!("{host} is no member of the cluster"))
    }

    pub async fn kill(&self, member: &Member) -> Result<(), String> {
        self.run(&["kill", &member.id.to_string()]).await
    }

    pub async fn restart(&self, member: &Member) -> Result<(), String> {
        self.run(&["restart", &member.id.to_string()]).await
    }

    pub async fn stop(&self) -> Result<(), String> {
        self.run(&["stop"]).await
    }

    /// `slipstream cluster <args> --dir <dir>`, bounded in time; its output
    /// goes to our stderr (stdout carries the bench's JSON lines).
    async fn run(&self, args: &[&str]) -> Result<(), String> {
        let binary = std::env::current_exe().map_err(|err| format!("the slipstream binary: {err}"))?;
        let mut command = Command::new(binary);
        command.arg("cluster").args(args).arg("--dir").arg(&self.dir).stdout(std::process::Stdio::piped());
        command.kill_on_drop(true);
        let child = command.spawn().map_err(|err| format!("slipstream cluster {}: {err}", args.join(" ")))?;
        let output = tokio::time::timeout(CLUSTER_COMMAND_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| format!("slipstream cluster {} took over {CLUSTER_COMMAND_TIMEOUT:?}", args.join(" ")))?
            .map_err(|err| format!("slipstream cluster {}: {err}", args.join(" ")))?;
        eprint!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            return Err(format!("slipstream cluster {} failed: {}", args.join(" "), output.status));
        }
        Ok(())
    }
}

fn parse_members(text: &str) -> Result<Vec<Member>, String> {
    let state: Value = serde_json::from_str(text).map_err(|err| err.to_string())?;
    let members = state.get("members").and_then(Value::as_array).ok_or("no members array")?;
    members
        .iter()
        .map(|member| {
            let id = member.get("id").and_then(Value::as_u64).ok_or("a member without an id")?;
            let port = member.get("port").and_then(Value::as_u64).ok_or("a member without a port")?;
            let host = member.get("host").and_then(Value::as_str).unwrap_or("127.0.0.1");
            let arbiter = member.get("arbiter").and_then(Value::as_bool).unwrap_or(false);
            Ok(Member { id, host: format!("{host}:{port}"), arbiter })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_file_names_the_members() {
        let text = r#"{"members": [
            {"id": 1, "port": 27017, "pid": 10, "dbpath": "/d/n1", "logpath": "/d/n1/log", "arbiter": false},
            {"id": 2, "port": 27018, "pid": 11, "dbpath": "/d/n2", "logpath": "/d/n2/log", "arbiter": true}]}"#;
        let members = parse_members(text).unwrap();
        assert_eq!(members[0], Member { id: 1, host: "127.0.0.1:27017".into(), arbiter: false });
        assert!(members[1].arbiter);
        assert!(parse_members(r#"{"members": [{"port": 1}]}"#).is_err());
        assert!(parse_members("{}").is_err());
    }
}
