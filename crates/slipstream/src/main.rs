//! The `slipstream` binary: `serve` runs a node, `bench` drives one over
//! the wire and prints a JSON summary, `cluster` runs a local replica set.

/// `println!` for the CLI's output lines: a closed stdout (`... | head -1`)
/// is not the command's failure, which goes on to the end (`println!`
/// panics on EPIPE, since Rust ignores SIGPIPE).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod allocator;
mod bench;
mod cluster;
mod log_layer;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// mimalloc instead of glibc's malloc: a member's request, apply and
/// checkpoint paths allocate many small buffers per write (BSON documents,
/// keys, oplog entries), and under 64 connections glibc's malloc, free and
/// chunk consolidation were about a sixth of the samples of every member.
/// Counted (`allocator.rs`) so that `serverStatus` shows the live heap.
#[global_allocator]
static GLOBAL: allocator::CountingMimalloc = allocator::CountingMimalloc;

#[derive(Parser)]
#[command(name = "slipstream", version, about = "A document database that speaks the MongoDB wire protocol")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a data node (mongod).
    Serve(ServeArgs),
    /// Drive a node or a replica set with a workload and print a JSON
    /// summary as the last line; `bench failover` measures failovers.
    Bench(bench::BenchCommand),
    /// Run a local replica set: `up`, `status`, `stop`, `kill N`,
    /// `restart N`, `pause N`, `resume N`, `add`, `partition`, `heal`.
    Cluster(cluster::ClusterArgs),
}

/// `slipstream serve`: MongoDB's spellings are accepted as aliases.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[arg(long, default_value_t = 27017)]
    pub port: u16,
    /// Comma-separated addresses to listen on.
    #[arg(long = "bind-ip", alias = "bind_ip", default_value = "127.0.0.1")]
    pub bind_ip: String,
    #[arg(long)]
    pub dbpath: PathBuf,
    /// Longest a `j: false` write waits for the journal's group commit.
    #[arg(long = "journal-commit-interval-ms", alias = "journalCommitInterval", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=500))]
    pub journal_commit_interval_ms: u64,
    /// The oplog's size cap in megabytes.
    #[arg(long = "oplog-size-mb", alias = "oplogSize", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub oplog_size_mb: u64,
    /// Oplog entries younger than this many hours stay even over the size
    /// cap (MongoDB's `oplogMinRetentionHours`; 0, the default: none).
    #[arg(long = "oplog-min-retention-hours", alias = "oplogMinRetentionHours", default_value_t = 0.0,
          value_parser = parse_retention_hours)]
    pub oplog_min_retention_hours: f64,
    /// Memory for the storage engine's caches, in megabytes (as MongoDB's
    /// `wiredTigerCacheSizeGB`): a quarter for the checkpoint store's page
    /// cache, a quarter for the versions above the checkpoint (past it a
    /// member checkpoints beyond its commit point, keeping the history on
    /// disk).
    #[arg(long = "cache-size-mb", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(4..=1_048_576))]
    pub cache_size_mb: u64,
    /// Enables test-only commands (fail points).
    #[arg(long = "enable-test-commands")]
    pub enable_test_commands: bool,
    /// Append log lines to this file instead of stdout.
    #[arg(long)]
    pub logpath: Option<PathBuf>,
    /// More verbose logging, as MongoDB's `-v`: once for debug (D1) lines,
    /// twice for trace (D2) lines. `RUST_LOG`, when set, decides instead.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// The most simultaneous client connections.
    #[arg(long = "max-connections", alias = "maxConns", default_value_t = slipstream_server::state::MAX_CONNECTIONS_DEFAULT)]
    pub max_connections: usize,
    /// Start from the checkpoint even though the journal no longer reaches
    /// it (deleted, or cut short), giving up the writes it held. Without it
    /// such a node refuses to start.
    #[arg(long = "accept-journal-loss")]
    pub accept_journal_loss: bool,
    /// Serve Prometheus metrics of the replica set member on this port
    /// (plain HTTP, `GET /metrics`).
    #[arg(long = "metrics-port", value_name = "PORT")]
    pub metrics_port: Option<u16>,
    /// Threads that run requests and replication I/O (the async runtime's
    /// workers); 0: the `TOKIO_WORKER_THREADS` environment variable, else
    /// one per core. Members sharing a machine run best with fewer (see
    /// `cluster up`): each wake-up that lands on an idle worker of another
    /// process costs a context switch and a core migration.
    #[arg(long = "worker-threads", default_value_t = 0,
          value_parser = clap::value_parser!(u16).range(0..=crate::serve::WORKER_THREADS_MAX as i64))]
    pub worker_threads: u16,
    /// Run as a member of this replica set (MongoDB's `--replSet`).
    #[arg(long = "replSet", alias = "repl-set", value_name = "NAME")]
    pub repl_set: Option<String>,
    /// MongoDB's `--setParameter name=value` (enableTestCommands,
    /// minSnapshotHistoryWindowInSeconds).
    #[arg(long = "setParameter", value_name = "NAME=VALUE")]
    pub set_parameter: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Cluster(args) => cluster::run(args),
    }
}

/// `--oplog-min-retention-hours`: a number of hours, at least 0 (MongoDB
/// refuses a negative one at startup).
fn parse_retention_hours(value: &str) -> Result<f64, String> {
    let hours: f64 = value.parse().map_err(|_| format!("'{value}' is not a number of hours"))?;
    if !(hours >= 0.0 && hours.is_finite()) {
        return Err(format!("oplogMinRetentionHours must be a finite number >= 0, got {value}"));
    }
    Ok(hours)
}
