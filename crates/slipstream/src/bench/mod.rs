//! `slipstream bench`: drives a node over the wire with its own small
//! client (one TCP connection per simulated client), prints progress to
//! stderr every second and, as the last stdout line, one JSON object
//! `{"workload","connections","seconds","ops","errors","ops_per_sec",
//! "p50_us","p99_us","p999_us"}`.

// Also the `cluster` command's client.
pub(crate) mod client;
mod histogram;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};

use client::Client;
use histogram::Histogram;
pub use workload::Workload;

/// The most simulated clients one run may open.
pub const CONNECTIONS_MAX: usize = 4096;
/// The largest preloaded set for read, scan and update.
pub const DOCS_MAX: u64 = 10_000_000;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// mongodb://HOST:PORT (one host; path and options are ignored).
    #[arg(long, default_value = "mongodb://127.0.0.1:27017")]
    pub uri: String,
    #[arg(long, value_enum)]
    pub workload: WorkloadName,
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Documents preloaded for read, scan and update.
    #[arg(long, default_value_t = 100_000)]
    pub docs: u64,
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
}

/// `host:port` of a `mongodb://` URI.
pub fn address_of(uri: &str) -> Result<String, String> {
    let rest = uri.strip_prefix("mongodb://").ok_or_else(|| format!("URI must start with mongodb://: {uri}"))?;
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    let host = hosts.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.contains(',') {
        return Err(format!("URI must name exactly one host: {uri}"));
    }
    Ok(if host.contains(':') { host.to_owned() } else { format!("{host}:27017") })
}

pub fn run(args: BenchArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(bench(args)) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

struct Progress {
    ops: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
}

async fn bench(args: BenchArgs) -> Result<String, String> {
    if args.connections == 0 || args.connections > CONNECTIONS_MAX {
        return Err(format!("--connections must be between 1 and {CONNECTIONS_MAX}"));
    }
    if args.seconds == 0 {
        return Err("--seconds must be at least 1".into());
    }
    if args.docs == 0 || args.docs > DOCS_MAX {
        return Err(format!("--docs must be between 1 and {DOCS_MAX}"));
    }
    let address = address_of(&args.uri)?;
    let workload = Arc::new(Workload::new(args.workload, args.docs));
    workload.prepare(&address, args.connections).await?;

    let progress = Arc::new(Progress { ops: AtomicU64::new(0), errors: AtomicU64::new(0), stop: AtomicBool::new(false) });
    let mut clients = Vec::with_capacity(args.connections);
    for index in 0..args.connections {
        let client = Client::connect(&address).await.map_err(|err| format!("connect to {address}: {err}"))?;
        clients.push((index, client));
    }
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.connections);
    for (index, client) in clients {
        let workload = workload.clone();
        let progress = progress.clone();
        let address = address.clone();
        tasks.push(tokio::spawn(async move { drive(workload, client, address, index as u64, progress).await }));
    }
    let deadline = started + Duration::from_secs(args.seconds);
    let mut last_ops = 0;
    while Instant::now() < deadline {
        let next = (Instant::now() + Duration::from_secs(1)).min(deadline);
        tokio::time::sleep_until(next.into()).await;
        let ops = progress.ops.load(Ordering::Relaxed);
        eprintln!(
            "[bench {}] t={:.0}s ops={} ops/s={} errors={}",
            args.workload.as_str(),
            started.elapsed().as_secs_f64(),
            ops,
            ops - last_ops,
            progress.errors.load(Ordering::Relaxed)
        );
        last_ops = ops;
    }
    progress.stop.store(true, Ordering::Relaxed);
    let mut histogram = Histogram::default();
    for task in tasks {
        let part = task.await.map_err(|err| format!("a client task failed: {err}"))?;
        histogram.merge(&part);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let ops = histogram.count();
    let errors = progress.errors.load(Ordering::Relaxed);
    Ok(summary_line(args.workload.as_str(), args.connections, args.seconds, ops, errors, elapsed, &histogram))
}

/// The summary as one JSON object with its keys in the documented order
/// (a serde map would sort them).
fn summary_line(workload: &str, connections: usize, seconds: u64, ops: u64, errors: u64, elapsed_secs: f64, histogram: &Histogram) -> String {
    let ops_per_sec = (ops as f64 / elapsed_secs.max(f64::MIN_POSITIVE) * 10.0).round() / 10.0;
    format!(
        "{{\"workload\":{},\"connections\":{},\"seconds\":{},\"ops\":{},\"errors\":{},\"ops_per_sec\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{}}}",
        serde_json::Value::String(workload.to_owned()),
        connections,
        seconds,
        ops,
        errors,
        ops_per_sec,
        histogram.quantile(0.5),
        histogram.quantile(0.99),
        histogram.quantile(0.999)
    )
}

/// How many times one simulated client reconnects after network errors
/// before it gives up for the rest of the run.
const RECONNECTS_MAX: u32 = 10;

/// One simulated client: runs operations until told to stop; successful
/// operations' latencies go into its histogram, failures are counted.
async fn drive(workload: Arc<Workload>, mut client: Client, address: String, index: u64, progress: Arc<Progress>) -> Histogram {
    let mut histogram = Histogram::default();
    let mut random = workload::Random::new(0x9e37_79b9_7f4a_7c15 ^ (index + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut sequence = 0u64;
    let mut reconnects = 0;
    while !progress.stop.load(Ordering::Relaxed) {
        let (body, sequences) = workload.next_operation(index, sequence, &mut random);
        sequence += 1;
        let started = Instant::now();
        match client.command(&body, &sequences).await {
            Ok(reply) if client::reply_ok(&reply) => {
                histogram.record(started.elapsed().as_micros() as u64);
                progress.ops.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {
                progress.errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                progress.errors.fetch_add(1, Ordering::Relaxed);
                reconnects += 1;
                if reconnects > RECONNECTS_MAX {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                match Client::connect(&address).await {
                    Ok(fresh) => client = fresh,
                    Err(_) => continue,
                }
            }
        }
    }
    histogram
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_addresses() {
        assert_eq!(address_of("mongodb://127.0.0.1:27018").unwrap(), "127.0.0.1:27018");
        assert_eq!(address_of("mongodb://localhost/?directConnection=true").unwrap(), "localhost:27017");
        assert!(address_of("mongodb://a:1,b:2").is_err());
        assert!(address_of("http://a").is_err());
    }

    #[test]
    fn summary_is_one_json_object_with_every_key() {
        let mut histogram = Histogram::default();
        for value in 1..=1000 {
            histogram.record(value);
        }
        let line = summary_line("insert-j", 32, 10, 1000, 2, 10.0, &histogram);
        assert!(line.starts_with("{\"workload\":\"insert-j\","));
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        for key in ["workload", "connections", "seconds", "ops", "errors", "ops_per_sec", "p50_us", "p99_us", "p999_us"] {
            assert!(parsed.get(key).is_some(), "{key} missing from {line}");
        }
        assert_eq!(parsed["ops_per_sec"], 100.0);
        assert!(parsed["p50_us"].as_u64().unwrap() >= 500);
    }
}
