//! `slipstream bench failover`: how long writes are unavailable when the
//! primary dies (SIGKILL) or steps down (`replSetStepDown`, which hands off
//! to a caught-up secondary), measured N times under a steady load of
//! `w: "majority"` 1 KB inserts.
//!
//! Each trial:
//! 1. waits until every member answers `hello` as PRIMARY or SECONDARY;
//! 2. records the steady load for `--steady-seconds`;
//! 3. finds the primary, marks the fault instant and kills it (`slipstream
//!    cluster kill`) or sends it `replSetStepDown`;
//! 4. waits until a write to another member is acknowledged (the window
//!    closes; see `trial` for the exact definition), then `--settle-seconds`;
//! 5. kill: restarts the old primary (`slipstream cluster restart`) and
//!    records `--settle-seconds` more; stepdown: unfreezes the old primary
//!    (`replSetFreeze: 0`) so that later trials may elect it again;
//! 6. prints the trial's JSON line (window, counts, 100 ms timeline).
//!
//! After the trials: one summary JSON line (window p50/p99 per kind) and a
//! PNG of the timelines.

mod cluster;
mod plot;
mod trial;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::doc;
use clap::{Args, ValueEnum};
use serde_json::Value;

use super::client::{reply_ok, Client};
use super::deployment::{self, Deployment};
use super::driver::{Driver, Observer, Progress, Role};
use super::summary::{ordered_json, rounded};
use super::uri::ConnectionString;
use super::{ReadPreferenceArg, Workload, WorkloadName, WriteConcernArg};
use cluster::{Cluster, Member, SetSettings};
use trial::{Trial, TrialObserver, TrialReport};

/// The most trials one run may make.
pub const TRIALS_MAX: usize = 1000;
/// The most load connections.
pub const FAILOVER_CONNECTIONS_MAX: usize = 256;
/// Longest the set may take to have every member healthy before a trial.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a trial waits for a new primary to acknowledge a write.
const WINDOW_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the controller looks at the set and the trial.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Load before the first trial, not recorded (connections, caches).
const WARMUP: Duration = Duration::from_secs(1);
/// Longest `replSetStepDown` may take (its catch-up period is shorter).
const STEP_DOWN_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// `secondaryCatchUpPeriodSecs` of the stepdown.
const STEP_DOWN_CATCH_UP_SECS: i32 = 5;
/// Members of a set the bench starts itself.
const NODES: u16 = 3;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL the primary (then restart it).
    Kill,
    /// `replSetStepDown` on the primary (planned, with handoff).
    Stepdown,
}

impl FaultKind {
    fn as_str(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Stepdown => "stepdown",
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    #[arg(long, value_enum)]
    pub kind: FaultKind,
    #[arg(long, default_value_t = 10)]
    pub trials: usize,
    /// Load connections, each a closed loop of `w: "majority"` inserts.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// The directory of a set started by `slipstream cluster up` (default:
    /// the bench starts a 3-member set of its own and stops it after).
    #[arg(long = "cluster-dir")]
    pub cluster_dir: Option<PathBuf>,
    /// `electionTimeoutMillis` of the set the bench starts itself.
    #[arg(long = "election-timeout-ms", default_value_t = 1000)]
    pub election_timeout_ms: u64,
    /// `heartbeatIntervalMillis` of the set the bench starts (MongoDB's
    /// defaults keep it at a fifth of the election timeout).
    #[arg(long = "heartbeat-interval-ms", default_value_t = 200)]
    pub heartbeat_interval_ms: u64,
    /// Recorded load before each fault.
    #[arg(long = "steady-seconds", default_value_t = 2)]
    pub steady_seconds: u64,
    /// Recorded load after the window closes (and again after a restart).
    #[arg(long = "settle-seconds", default_value_t = 2)]
    pub settle_seconds: u64,
    /// `replSetStepDown`'s seconds: how long the old primary may not stand
    /// for election (the bench unfreezes it once the window closed).
    #[arg(long = "step-down-secs", default_value_t = 10)]
    pub step_down_secs: i32,
    /// Where the PNG goes (default: failover-<kind>.png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// A TrueType font for the plot's text (default: a system DejaVu Sans).
    #[arg(long)]
    pub font: Option<PathBuf>,
}

fn check_args(args: &FailoverArgs) -> Result<(), String> {
    if args.trials == 0 || args.trials > TRIALS_MAX {
        return Err(format!("--trials must be between 1 and {TRIALS_MAX}"));
    }
    if args.connections == 0 || args.connections > FAILOVER_CONNECTIONS_MAX {
        return Err(format!("--connections must be between 1 and {FAILOVER_CONNECTIONS_MAX}"));
    }
    if args.steady_seconds == 0 || args.steady_seconds > 60 || args.settle_seconds > 60 {
        return Err("--steady-seconds must be 1..=60 and --settle-seconds 0..=60".into());
    }
    if !(STEP_DOWN_CATCH_UP_SECS..=3600).contains(&args.step_down_secs) {
        return Err(format!("--step-down-secs must be between {STEP_DOWN_CATCH_UP_SECS} and 3600"));
    }
    if !(100..=60_000).contains(&args.election_timeout_ms) {
        return Err("--election-timeout-ms must be between 100 and 60000".into());
    }
    if !(10..=60_000).contains(&args.heartbeat_interval_ms) {
        return Err("--heartbeat-interval-ms must be between 10 and 60000".into());
    }
    Ok(())
}

pub async fn run(args: FailoverArgs) -> Result<(), String> {
    check_args(&args)?;
    let cluster = match &args.cluster_dir {
        Some(dir) => Cluster::attach(dir)?,
        None => {
            let dir = std::env::temp_dir().join(format!("slipstream-failover-{}", std::process::id()));
            eprintln!("[failover] starting a {NODES}-member set in {}", dir.display());
            let settings = SetSettings {
                election_timeout_ms: args.election_timeout_ms,
                heartbeat_interval_ms: args.heartbeat_interval_ms,
            };
            Cluster::start(&dir, NODES, &settings).await?
        }
    };
    let outcome = run_trials(&cluster, &args).await;
    if cluster.owned() {
        match (cluster.stop().await, &outcome) {
            (Ok(()), Ok(())) => {
                let _ = std::fs::remove_dir_all(cluster.dir());
            }
            (Err(err), _) => eprintln!("[failover] stopping the set: {err}"),
            (Ok(()), Err(_)) => eprintln!("[failover] the set's logs stay in {}", cluster.dir().display()),
        }
    }
    outcome
}

/// The load's clients, running until `stop`.
struct Load {
    progress: Arc<Progress>,
    tasks: Vec<tokio::task::JoinHandle<super::histogram::Histogram>>,
}

impl Load {
    async fn start(
        deployment: Arc<Deployment>,
        connections: usize,
        observer: Arc<dyn Observer>,
    ) -> Result<Load, String> {
        let workload = Arc::new(Workload::new(
            WorkloadName::Insert,
            1,
            WriteConcernArg::Majority,
            ReadPreferenceArg::Primary,
            true,
        ));
        let view = deployment.view(Instant::now() + HEALTH_TIMEOUT).await?;
        workload.prepare(&view.primary, connections).await?;
        let progress = Arc::new(Progress::default());
        let mut tasks = Vec::with_capacity(connections);
        for index in 0..connections {
            let driver = Driver::connect(deployment.clone(), Role::Primary, index as u64).await?;
            let (workload, progress, observer) = (workload.clone(), progress.clone(), observer.clone());
            tasks.push(tokio::spawn(async move { driver.run(workload, progress, Some(observer)).await }));
        }
        Ok(Load { progress, tasks })
    }

    async fn stop(self) {
        self.progress.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

async fn run_trials(cluster: &Cluster, args: &FailoverArgs) -> Result<(), String> {
    let members = cluster.members()?;
    let data_members: Vec<Member> = members.into_iter().filter(|member| !member.arbiter).collect();
    wait_healthy(&data_members).await?;
    let set_name = set_name(&data_members).await?;
    let uri =
        ConnectionString { hosts: data_members.iter().map(|m| m.host.clone()).collect(), replica_set: Some(set_name) };
    // The controller's own view, so that finding the primary before a
    // fault does not disturb the clients' views.
    let controller = Deployment::new(uri.clone());
    let observer = Arc::new(TrialObserver::new(Arc::new(Trial::new(Instant::now()))));
    let load = Load::start(Arc::new(Deployment::new(uri)), args.connections, observer.clone()).await?;
    tokio::time::sleep(WARMUP).await;
    let mut reports = Vec::with_capacity(args.trials);
    let mut failure = None;
    for number in 1..=args.trials {
        match run_trial(cluster, &data_members, &controller, &observer, args, number).await {
            Ok(report) => {
                out!("{}", report.json_line());
                reports.push(report);
            }
            Err(err) => {
                failure = Some(format!("trial {number}: {err}"));
                break;
            }
        }
    }
    load.stop().await;
    if !reports.is_empty() {
        let summary = WindowSummary::of(&reports);
        let path = args.plot.clone().unwrap_or_else(|| PathBuf::from(format!("failover-{}.png", args.kind.as_str())));
        let title = format!(
            "Failover ({}), {} connections w:majority: window p50 {} ms, p99 {} ms over {} trials",
            args.kind.as_str(),
            args.connections,
            summary.p50_ms.map_or("-".into(), |ms| format!("{ms:.0}")),
            summary.p99_ms.map_or("-".into(), |ms| format!("{ms:.0}")),
            reports.len()
        );
        let plot = match plot::render(&path, &title, &reports, args.font.as_deref()) {
            Ok(()) => Some(path),
            Err(err) => {
                eprintln!("[failover] no plot: {err}");
                None
            }
        };
        out!("{}", summary.json_line(args, cluster.owned(), plot));
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

async fn run_trial(
    cluster: &Cluster,
    members: &[Member],
    controller: &Deployment,
    observer: &TrialObserver,
    args: &FailoverArgs,
    number: usize,
) -> Result<TrialReport, String> {
    wait_healthy(members).await?;
    let trial = Arc::new(Trial::new(Instant::now()));
    observer.begin(trial.clone());
    tokio::time::sleep(Duration::from_secs(args.steady_seconds)).await;
    let old_primary = controller.refresh(Instant::now() + HEALTH_TIMEOUT).await?.primary;
    let old_member = cluster.member_at(&old_primary)?;
    let threshold = trial.mark_fault(&old_primary, Instant::now());
    eprintln!("[failover] trial {number}: {} {old_primary} (stall threshold {threshold:?})", args.kind.as_str());
    let mut fault_result = match args.kind {
        FaultKind::Kill => cluster.kill(&old_member).await.map(|()| "ok".to_owned())?,
        FaultKind::Stepdown => step_down(&old_primary, args.step_down_secs).await,
    };
    let deadline = Instant::now() + WINDOW_TIMEOUT;
    while !trial.window_closed() && Instant::now() < deadline {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let settle = Duration::from_secs(args.settle_seconds);
    tokio::time::sleep(settle).await;
    match args.kind {
        FaultKind::Kill => {
            trial.mark_restart(Instant::now());
            cluster.restart(&old_member).await?;
            tokio::time::sleep(settle).await;
        }
        FaultKind::Stepdown => {
            fault_result.push_str("; unfreeze ");
            fault_result.push_str(&admin_command(&old_primary, doc! {"replSetFreeze": 0, "$db": "admin"}).await);
        }
    }
    Ok(trial.report(number, args.kind.as_str(), fault_result, Instant::now()))
}

/// `replSetStepDown` on `primary`; its answer ("ok" or the error) goes into
/// the trial's report, since a refused stepdown is a finding, not a crash
/// of the bench.
async fn step_down(primary: &str, step_down_secs: i32) -> String {
    let command = doc! {
        "replSetStepDown": step_down_secs,
        "secondaryCatchUpPeriodSecs": STEP_DOWN_CATCH_UP_SECS,
        "$db": "admin",
    };
    admin_command(primary, command).await
}

async fn admin_command(member: &str, command: bson::Document) -> String {
    let exchange = async {
        let mut client = Client::connect(member).await?;
        client.command(&command, &[]).await
    };
    match tokio::time::timeout(STEP_DOWN_COMMAND_TIMEOUT, exchange).await {
        Ok(Ok(reply)) if reply_ok(&reply) => "ok".into(),
        Ok(Ok(reply)) => format!("error: {reply}"),
        Ok(Err(err)) => format!("error: {err}"),
        Err(_) => format!("error: no answer within {STEP_DOWN_COMMAND_TIMEOUT:?}"),
    }
}

/// Waits until every member answers `hello` as PRIMARY or SECONDARY, with
/// exactly one primary.
async fn wait_healthy(members: &[Member]) -> Result<(), String> {
    let deadline = Instant::now() + HEALTH_TIMEOUT;
    let mut last = String::new();
    loop {
        let mut primaries = 0;
        let mut healthy = 0;
        for member in members {
            match deployment::hello(&member.host).await {
                Ok(reply) if reply.get_bool("isWritablePrimary").unwrap_or(false) => {
                    primaries += 1;
                    healthy += 1;
                }
                Ok(reply) if reply.get_bool("secondary").unwrap_or(false) => healthy += 1,
                Ok(reply) => last = format!("{} is neither primary nor secondary: {reply}", member.host),
                Err(err) => last = err,
            }
        }
        if primaries == 1 && healthy == members.len() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("the set is not healthy after {HEALTH_TIMEOUT:?}: {last}"));
        }
        tokio::time::sleep(POLL_INTERVAL * 10).await;
    }
}

async fn set_name(members: &[Member]) -> Result<String, String> {
    let reply = deployment::hello(&members[0].host).await?;
    reply.get_str("setName").map(str::to_owned).map_err(|_| format!("{} is no replica set member", members[0].host))
}

/// The windows of all trials of a run.
struct WindowSummary {
    windows_ms: Vec<f64>,
    /// Trials that ended with no new primary.
    missing: usize,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

impl WindowSummary {
    fn of(reports: &[TrialReport]) -> WindowSummary {
        let windows_ms: Vec<f64> = reports.iter().filter_map(|report| report.window_ms).collect();
        let mut sorted = windows_ms.clone();
        sorted.sort_by(f64::total_cmp);
        WindowSummary {
            missing: reports.len() - windows_ms.len(),
            p50_ms: quantile(&sorted, 0.5),
            p99_ms: quantile(&sorted, 0.99),
            windows_ms,
        }
    }

    fn json_line(&self, args: &FailoverArgs, owned: bool, plot: Option<PathBuf>) -> String {
        let optional_ms = |value: Option<f64>| value.map_or(Value::Null, |ms| rounded(ms, 1));
        let max = self.windows_ms.iter().copied().reduce(f64::max);
        ordered_json(&[
            ("summary", "failover".into()),
            ("kind", args.kind.as_str().into()),
            ("trials", (self.windows_ms.len() + self.missing).into()),
            ("connections", args.connections.into()),
            ("window_p50_ms", optional_ms(self.p50_ms)),
            ("window_p99_ms", optional_ms(self.p99_ms)),
            ("window_max_ms", optional_ms(max)),
            ("trials_without_new_primary", self.missing.into()),
            ("windows_ms", Value::Array(self.windows_ms.iter().map(|ms| rounded(*ms, 1)).collect())),
            ("election_timeout_ms", if owned { args.election_timeout_ms.into() } else { Value::Null }),
            ("heartbeat_interval_ms", if owned { args.heartbeat_interval_ms.into() } else { Value::Null }),
            ("plot", plot.map_or(Value::Null, |path| path.display().to_string().into())),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&ten, 0.5), Some(5.0));
        assert_eq!(quantile(&ten, 0.99), Some(10.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
    }
}
