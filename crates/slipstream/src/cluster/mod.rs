//! `slipstream cluster`: a local replica set on loopback, one `serve`
//! process and one directory per member, for trying replication out and
//! for tests (MongoDB's mlaunch / ReplSetTest).
//!
//! `up` starts the members detached (they outlive the command), initiates
//! the set, waits until it has a primary and every other member is
//! SECONDARY or ARBITER, and prints the connection string. The other
//! commands find the members again through `<dir>/cluster.json`: `status`,
//! `stop`, `kill N` (SIGKILL), `restart N`, `pause N` / `resume N`
//! (SIGSTOP / SIGCONT), `add` (a new member process outside the config, for
//! `replSetReconfig`), and `partition "1,2|3"` / `heal`, which set the
//! test-only `blockMembers` fail point on every member.
//!
//! Every command prints lines for people and, as its last stdout line, one
//! JSON object for scripts; progress goes to stderr.

mod admin;
mod config;
mod control;
mod partition;
mod process;
mod start;
mod state;
mod view;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use admin::Admin;
use state::ClusterState;
use view::MemberView;

/// Most members `up` starts: every member votes, and a set has at most 7
/// voters.
pub const NODES_MAX: u32 = 7;
/// Longest `stop`, `kill` and `restart` wait for a member to exit after a
/// signal before escalating to SIGKILL (or giving up after SIGKILL).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    /// The cluster's directory: `cluster.json` and one `nK/` per member.
    #[arg(long, global = true, default_value = "slipstream-cluster")]
    pub dir: PathBuf,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum ClusterCommand {
    /// Start the members, initiate the set, wait for a primary, print the
    /// connection string. On a directory whose members are all stopped,
    /// start them again instead (their config is on disk).
    Up(UpArgs),
    /// Each member's state, optime and process.
    Status,
    /// SIGTERM every member (SIGKILL after 30 s); the data stays.
    Stop,
    /// SIGKILL member N, as a crash.
    Kill { member: u32 },
    /// Start member N again on its data (stopping it first if it runs).
    Restart(RestartArgs),
    /// SIGSTOP member N: it holds its connections but answers nothing.
    Pause { member: u32 },
    /// SIGCONT member N.
    Resume { member: u32 },
    /// Start one more member process, outside the set's config, for
    /// `replSetReconfig` (mongosh `rs.add`) to add.
    Add(AddArgs),
    /// Cut member-to-member traffic between sides, e.g. "1,2|3" (test hook:
    /// the `blockMembers` fail point; client traffic is kept).
    Partition {
        /// Member numbers, sides separated by `|`.
        sides: String,
    },
    /// Undo `partition`: every member talks to every member again.
    Heal,
}

/// `cluster up`'s options. Those that shape the set are options without
/// a clap default (the defaults are the methods below), so that `up` on a
/// stopped cluster can tell one given from one left out: it starts the
/// cluster as it was made and refuses one that differs, which it dropped.
#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Data-bearing members [default: 3].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=NODES_MAX as i64))]
    pub nodes: Option<u32>,
    /// Add an arbiter (a voting member without data) after the nodes.
    #[arg(long)]
    pub arbiter: bool,
    /// Member K listens on base-port + K - 1 [default: 27017].
    #[arg(long = "base-port")]
    pub base_port: Option<u16>,
    /// The replica set's name [default: rs0].
    #[arg(long = "set-name")]
    pub set_name: Option<String>,
    /// `settings.electionTimeoutMillis` [default: 10000, MongoDB's].
    #[arg(long = "election-timeout-ms", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub election_timeout_ms: Option<u64>,
    /// `settings.heartbeatIntervalMillis` [default: 2000, MongoDB's].
    #[arg(long = "heartbeat-interval-ms", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub heartbeat_interval_ms: Option<u64>,
    /// `settings.chainingAllowed: false`: secondaries sync only from the
    /// primary.
    #[arg(long = "no-chaining")]
    pub no_chaining: bool,
    /// Per-member options, repeatable: `ID:priority=P,votes=0|1,hidden`.
    #[arg(long = "member", value_name = "ID:OPTIONS")]
    pub member: Vec<String>,
    /// An extra argument for every member's `serve` (repeatable), e.g.
    /// `--serve-arg=-v`.
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub serve_arg: Vec<String>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

impl UpArgs {
    pub fn nodes(&self) -> u32 {
        self.nodes.unwrap_or(3)
    }

    pub fn base_port(&self) -> u16 {
        self.base_port.unwrap_or(27017)
    }

    pub fn set_name(&self) -> String {
        self.set_name.clone().unwrap_or_else(|| "rs0".to_owned())
    }

    pub fn election_timeout_ms(&self) -> u64 {
        self.election_timeout_ms.unwrap_or(10_000)
    }

    pub fn heartbeat_interval_ms(&self) -> u64 {
        self.heartbeat_interval_ms.unwrap_or(2_000)
    }
}

#[derive(Args, Debug, Clone, Copy)]
pub struct WaitArgs {
    /// Longest to wait for members to answer (and, for `up`, for the set to
    /// be ready).
    #[arg(long = "wait-secs", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub wait_secs: u64,
}

impl WaitArgs {
    pub fn timeout(self) -> Duration {
        Duration::from_secs(self.wait_secs)
    }
}

#[derive(Args, Debug, Clone)]
pub struct RestartArgs {
    pub member: u32,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Args, Debug, Clone)]
pub struct AddArgs {
    /// The new member will be an arbiter (only a note in the state file:
    /// the config decides).
    #[arg(long)]
    pub arbiter: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
}

/// What a command needs: its directory and a way to talk to members.
pub struct Cluster {
    pub dir: PathBuf,
    pub admin: Admin,
}

pub fn run(args: ClusterArgs) -> ExitCode {
    let admin = match Admin::new() {
        Ok(admin) => admin,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let cluster = Cluster { dir: args.dir, admin };
    let outcome = match args.command {
        ClusterCommand::Up(up) => start::up(&cluster, &up),
        ClusterCommand::Status => status(&cluster),
        ClusterCommand::Stop => control::stop_all(&cluster),
        ClusterCommand::Kill { member } => control::kill(&cluster, member),
        ClusterCommand::Restart(restart) => start::restart(&cluster, restart.member, restart.wait.timeout()),
        ClusterCommand::Pause { member } => control::pause(&cluster, member),
        ClusterCommand::Resume { member } => control::resume(&cluster, member),
        ClusterCommand::Add(add) => start::add(&cluster, add.arbiter, add.wait.timeout()),
        ClusterCommand::Partition { sides } => control::partition(&cluster, &sides),
        ClusterCommand::Heal => control::heal(&cluster),
    };
    match outcome {
        Ok(summary) => {
            out!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

impl Cluster {
    pub fn load(&self) -> Result<ClusterState, String> {
        ClusterState::load(&self.dir).map_err(|err| err.to_string())
    }

    pub fn save(&self, state: &ClusterState) -> Result<(), String> {
        state.save(&self.dir).map_err(|err| err.to_string())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn views(&self, state: &ClusterState) -> Vec<MemberView> {
        state
            .members
            .iter()
            .map(|member| MemberView::of(&self.admin, member))
            .collect()
    }
}

/// The status JSON line: the set, its URI, the partition, every member.
pub fn status_json(state: &ClusterState, views: &[MemberView]) -> Value {
    json!({
        "set": state.set_name,
        "uri": state.uri(),
        "partition": state.partition.as_ref().map(|sides| partition::format_sides(sides)),
        "members": views.iter().map(MemberView::json).collect::<Vec<_>>(),
    })
}

fn status(cluster: &Cluster) -> Result<String, String> {
    let state = cluster.load()?;
    let views = cluster.views(&state);
    out!("set {}  {}", state.set_name, state.uri());
    if let Some(sides) = &state.partition {
        out!("partition {}", partition::format_sides(sides));
    }
    for view in &views {
        out!("{}", view.line());
    }
    Ok(status_json(&state, &views).to_string())
}
