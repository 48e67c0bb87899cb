//! `slipstream bench`: drives a node or a replica set over the wire with
//! its own small client (one TCP connection per simulated client), prints
//! progress to stderr every second and, as the last stdout line, one JSON
//! object (`summary::KEYS` in that order). Before and after the load it
//! probes what the machine costs (fdatasync on the data directory's disk,
//! loopback round trips) so that latencies can be judged against them; the
//! two halves are merged, so that one burst of disk traffic from elsewhere
//! does not decide the figure alone.
//!
//! `slipstream bench failover` measures write unavailability across
//! primary failures instead (see `failover`).

// Also the `cluster` command's client.
pub(crate) mod client;
mod deployment;
mod driver;
mod failover;
mod histogram;
mod probe;
mod summary;
mod uri;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};

use deployment::Deployment;
use driver::{Progress, Role};
use histogram::Histogram;
use probe::PROBE_SAMPLES_MAX;
use summary::{Probes, Summary};
pub use workload::Workload;

/// The most simulated clients one run may open.
pub const CONNECTIONS_MAX: usize = 4096;
/// The largest preloaded set for read, scan and update.
pub const DOCS_MAX: u64 = 10_000_000;
/// Longest the bench waits for a primary at the start.
const STARTUP_DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// `slipstream bench [failover]`.
#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchCommand {
    #[command(subcommand)]
    pub mode: Option<BenchMode>,
    #[command(flatten)]
    pub load: BenchArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BenchMode {
    /// Kill or step down the primary of a replica set under a steady
    /// `w: "majority"` load, N times; print each trial's write
    /// unavailability window and throughput timeline, and plot them.
    Failover(failover::FailoverArgs),
}

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// mongodb://HOST:PORT for one node, or mongodb://H1,H2,../?replicaSet=NAME
    /// for a set (writes go to the primary found through `hello`).
    #[arg(long, default_value = "mongodb://127.0.0.1:27017")]
    pub uri: String,
    #[arg(long, value_enum, required = true)]
    pub workload: Option<WorkloadName>,
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Documents preloaded for read, scan and update.
    #[arg(long, default_value_t = 100_000)]
    pub docs: u64,
    /// The `w` of every write (insert-j adds `j: true` to it).
    #[arg(long = "write-concern", value_enum, default_value = "1")]
    pub write_concern: WriteConcernArg,
    /// Where read and scan operations go.
    #[arg(long = "read-preference", value_enum, default_value = "primary")]
    pub read_preference: ReadPreferenceArg,
    /// The node's data directory: the fdatasync probe runs on its disk.
    #[arg(long)]
    pub dbpath: Option<PathBuf>,
    /// Where the fdatasync probe writes its file (default: --dbpath, else
    /// the current directory).
    #[arg(long = "probe-dir")]
    pub probe_dir: Option<PathBuf>,
    /// Rounds of each probe (fdatasync, ping, TCP echo).
    #[arg(long = "probe-samples", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(1..=PROBE_SAMPLES_MAX as u64))]
    pub probe_samples: u64,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadName {
    #[value(name = "insert-j")]
    InsertJ,
    #[value(name = "insert")]
    Insert,
    #[value(name = "read")]
    Read,
    #[value(name = "scan")]
    Scan,
    #[value(name = "update")]
    Update,
}

impl WorkloadName {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadName::InsertJ => "insert-j",
            WorkloadName::Insert => "insert",
            WorkloadName::Read => "read",
            WorkloadName::Scan => "scan",
            WorkloadName::Update => "update",
        }
    }

    pub fn writes(self) -> bool {
        matches!(self, WorkloadName::InsertJ | WorkloadName::Insert | WorkloadName::Update)
    }
}

/// `w: 1` or `w: "majority"`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConcernArg {
    #[value(name = "1")]
    One,
    #[value(name = "majority")]
    Majority,
}

impl WriteConcernArg {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteConcernArg::One => "1",
            WriteConcernArg::Majority => "majority",
        }
    }

    pub fn w(self) -> bson::Bson {
        match self {
            WriteConcernArg::One => bson::Bson::Int32(1),
            WriteConcernArg::Majority => bson::Bson::String("majority".into()),
        }
    }
}

/// MongoDB's read preference modes the bench can follow (no tags, no
/// staleness bound).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPreferenceArg {
    #[value(name = "primary")]
    Primary,
    #[value(name = "secondary")]
    Secondary,
    #[value(name = "secondaryPreferred")]
    SecondaryPreferred,
    #[value(name = "nearest")]
    Nearest,
}

impl ReadPreferenceArg {
    pub fn as_str(self) -> &'static str {
        match self {
            ReadPreferenceArg::Primary => "primary",
            ReadPreferenceArg::Secondary => "secondary",
            ReadPreferenceArg::SecondaryPreferred => "secondaryPreferred",
            ReadPreferenceArg::Nearest => "nearest",
        }
    }
}

pub fn run(command: BenchCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let outcome = match command.mode {
        Some(BenchMode::Failover(args)) => runtime.block_on(failover::run(args)),
        None => runtime.block_on(bench(command.load)).map(|summary| out!("{summary}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

fn check_args(args: &BenchArgs) -> Result<WorkloadName, String> {
    let workload = args.workload.ok_or("--workload is required")?;
    if args.connections == 0 || args.connections > CONNECTIONS_MAX {
        return Err(format!("--connections must be between 1 and {CONNECTIONS_MAX}"));
    }
    if args.seconds == 0 {
        return Err("--seconds must be at least 1".into());
    }
    if args.docs == 0 || args.docs > DOCS_MAX {
        return Err(format!("--docs must be between 1 and {DOCS_MAX}"));
    }
    if workload.writes() && args.read_preference != ReadPreferenceArg::Primary {
        return Err(format!("--read-preference applies to read and scan; {} writes", workload.as_str()));
    }
    Ok(workload)
}

/// Longest the after-load probes may take, discovery included.
const AFTER_PROBE_TIMEOUT: Duration = Duration::from_secs(15);

async fn bench(args: BenchArgs) -> Result<String, String> {
    let workload_name = check_args(&args)?;
    let uri = uri::parse(&args.uri)?;
    let replica_set = uri.replica_set.clone();
    let deployment = Arc::new(Deployment::new(uri));
    let view = deployment.view(Instant::now() + STARTUP_DISCOVERY_TIMEOUT).await?;
    let role = Role::of(workload_name, args.read_preference);
    // Before the preload: a read preference no member satisfies fails now.
    role.pick(&view, 0)?;
    let workload = Arc::new(Workload::new(
        workload_name,
        args.docs,
        args.write_concern,
        args.read_preference,
        !deployment.is_direct(),
    ));
    workload.prepare(&view.primary, args.connections).await?;
    let mut probes = probe_all(&args, &view.primary).await?;

    let progress = Arc::new(Progress::default());
    let mut clients = Vec::with_capacity(args.connections);
    for index in 0..args.connections {
        clients.push(driver::Driver::connect(deployment.clone(), role, index as u64).await?);
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.connections);
    for client in clients {
        let workload = workload.clone();
        let progress = progress.clone();
        tasks.push(tokio::spawn(async move { client.run(workload, progress, None).await }));
    }
    report_progress(workload_name, &progress, started, started + Duration::from_secs(args.seconds)).await;
    progress.stop.store(true, Ordering::Relaxed);
    let mut histogram = Histogram::default();
    for task in tasks {
        let part = task.await.map_err(|err| format!("a client task failed: {err}"))?;
        histogram.merge(&part);
    }
    let elapsed_secs = started.elapsed().as_secs_f64();
    // After the load the primary may have changed, died or stopped
    // answering (a failover during the run): the after-load probes go to the
    // primary as it is now, within a bound, and their failure loses only
    // themselves, never the run's summary.
    let after = async {
        let now = deployment.refresh(Instant::now() + AFTER_PROBE_TIMEOUT).await?;
        probe_all(&args, &now.primary).await
    };
    match tokio::time::timeout(AFTER_PROBE_TIMEOUT, after).await {
        Ok(Ok(after)) => probes.merge(&after),
        Ok(Err(err)) => eprintln!("[bench] after-load probes failed, the summary has the first ones only: {err}"),
        Err(_) => eprintln!("[bench] after-load probes timed out, the summary has the first ones only"),
    }
    let summary = Summary {
        workload: workload_name.as_str(),
        connections: args.connections,
        seconds: args.seconds,
        ops: histogram.count(),
        errors: progress.errors.load(Ordering::Relaxed),
        elapsed_secs,
        write_concern: workload_name.writes().then_some(args.write_concern.as_str()),
        read_preference: args.read_preference.as_str(),
        replica_set: replica_set.as_deref(),
        primary: &view.primary,
        histogram: &histogram,
        probes: &probes,
    };
    Ok(summary.json_line())
}

/// Runs the three probes, with the node idle (before or after the load).
async fn probe_all(args: &BenchArgs, primary: &str) -> Result<Probes, String> {
    let samples = args.probe_samples as usize;
    let dir = match (&args.probe_dir, &args.dbpath) {
        (Some(dir), _) | (None, Some(dir)) => dir.clone(),
        (None, None) => std::env::current_dir().map_err(|err| format!("current directory: {err}"))?,
    };
    let probe_dir = dir.clone();
    let fdatasync = tokio::task::spawn_blocking(move || probe::fdatasync_latency(&probe_dir, samples))
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| format!("fdatasync probe in {}: {err}", dir.display()))?;
    let ping = probe::ping_round_trip(primary, samples).await?;
    let tcp_echo = tokio::task::spawn_blocking(move || probe::tcp_echo_round_trip(samples))
        .await
        .map_err(|err| err.to_string())?
        .map_err(|err| format!("TCP echo probe: {err}"))?;
    eprintln!(
        "[bench] probes: fdatasync p50 {} us in {}, ping p50 {} us, TCP echo p50 {} us",
        fdatasync.quantile(0.5),
        dir.display(),
        ping.quantile(0.5),
        tcp_echo.quantile(0.5)
    );
    Ok(Probes { fdatasync, ping, tcp_echo })
}

async fn report_progress(workload: WorkloadName, progress: &Progress, started: Instant, deadline: Instant) {
    let mut last_ops = 0;
    while Instant::now() < deadline {
        let next = (Instant::now() + Duration::from_secs(1)).min(deadline);
        tokio::time::sleep_until(next.into()).await;
        let ops = progress.ops.load(Ordering::Relaxed);
        eprintln!(
            "[bench {}] t={:.0}s ops={} ops/s={} errors={}",
            workload.as_str(),
            started.elapsed().as_secs_f64(),
            ops,
            ops - last_ops,
            progress.errors.load(Ordering::Relaxed)
        );
        last_ops = ops;
    }
}
