//! In-process throughput of the engine (no network): N threads inserting
//! 1 KB documents, each waiting for its write to be journaled (`j: true`),
//! then N threads reading by `_id`. Prints one JSON object per phase.
//!
//! Last, a second engine applies the first one's oplog in batches, as a
//! secondary does, each batch followed by its fsync (`apply`).
//!
//! Usage: `cargo run --release -p slipstream-storage --example engine_bench --
//! [--threads N] [--seconds S] [--apply-batch N] [--apply-entries N]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, ReadAt};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(|v| v.parse().expect("a number")).unwrap_or(default)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

fn run_phase(name: &str, threads: u64, seconds: u64, work: Arc<dyn Fn(u64, u64) + Send + Sync>) {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (stop, ops, work) = (stop.clone(), ops.clone(), work.clone());
            std::thread::spawn(move || {
                let mut latencies = Vec::new();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    work(thread, n);
                    latencies.push(t.elapsed().as_micros() as u64);
                    n += 1;
                    ops.fetch_add(1, Ordering::Relaxed);
                }
                latencies
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut latencies: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let total = ops.load(Ordering::Relaxed);
    println!(
        "{{\"workload\":\"{name}\",\"threads\":{threads},\"seconds\":{elapsed:.1},\"ops\":{total},\"ops_per_sec\":{:.0},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{}}}",
        total as f64 / elapsed,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999)
    );
}

fn main() {
    let threads = arg("--threads", 32);
    let seconds = arg("--seconds", 5);
    let dir = tempfile::tempdir().unwrap();
    let mut options = EngineOptions::new(dir.path());
    options.checkpoint_interval_ms = arg("--checkpoint-interval-ms", 1000);
    let engine = Engine::open(options).unwrap();
    let payload = "x".repeat(1000);

    // _ids grow like ObjectIds do (a counter shared by all threads), so
    // that records arrive in key order as they do from real drivers.
    let next_id = Arc::new(AtomicU64::new(0));
    let writer_engine = engine.clone();
    let ids = next_id.clone();
    run_phase(
        "insert-j",
        threads,
        seconds,
        Arc::new(move |_thread, _n| {
            let id = ids.fetch_add(1, Ordering::Relaxed) as i64;
            let optime = writer_engine.writer().insert("bench.c", doc! {"_id": id, "payload": payload.clone()}).unwrap();
            writer_engine.wait_durable(optime.ts).unwrap();
        }),
    );
    let writer_engine = engine.clone();
    let payload = "y".repeat(1000);
    let ids = next_id.clone();
    run_phase(
        "insert",
        threads,
        seconds,
        Arc::new(move |_thread, _n| {
            let id = ids.fetch_add(1, Ordering::Relaxed) as i64;
            writer_engine.writer().insert("bench.c", doc! {"_id": id, "payload": payload.clone()}).unwrap();
        }),
    );
    let count = engine.reader(ReadAt::Latest).unwrap().count("bench.c").unwrap();
    let stats = engine.stats();
    println!(
        "{{\"documents\":{count},\"checkpoints\":{},\"last_checkpoint_ms\":{},\"versions_in_memory\":{},\"journal_fsyncs\":{}}}",
        stats.checkpoints, stats.last_checkpoint_ms, stats.versions_in_memory, stats.journal_fsyncs
    );

    let reader_engine = engine.clone();
    run_phase(
        "read",
        threads,
        seconds,
        Arc::new(move |thread, n| {
            let id = ((thread * 7919 + n * 104_729) % count.max(1)) as i64;
            let reader = reader_engine.reader(ReadAt::Latest).unwrap();
            let _ = reader.get("bench.c", &Bson::Int64(id)).unwrap();
        }),
    );
    let (batch, entries) = (arg("--apply-batch", 64) as usize, arg("--apply-entries", 20_000) as usize);
    apply_phase(&engine, batch, entries, true);
    apply_phase(&engine, batch, entries, false);
    engine.shutdown().unwrap();
}

/// A secondary's apply path: batches of the primary's oplog, each applied
/// and then made durable before the next (what the applier does before it
/// reports its position); without `durable`, the CPU cost of applying
/// alone (the journal syncs at its interval).
fn apply_phase(primary: &Arc<Engine>, batch_entries: usize, entries_max: usize, durable: bool) {
    let entries = primary.oplog_read(std::ops::Bound::Unbounded, entries_max, usize::MAX).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut options = EngineOptions::new(dir.path());
    options.checkpoint_interval_ms = 1000;
    let secondary = Engine::open(options).unwrap();
    let mut latencies = Vec::new();
    let started = Instant::now();
    for batch in entries.chunks(batch_entries.max(1)) {
        let t = Instant::now();
        let last = apply(&secondary, batch);
        if durable {
            secondary.wait_durable(last).unwrap();
        }
        latencies.push(t.elapsed().as_micros() as u64);
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    println!(
        "{{\"workload\":\"{}\",\"batch_entries\":{batch_entries},\"entries\":{},\"seconds\":{elapsed:.1},\"entries_per_sec\":{:.0},\"batch_p50_us\":{},\"batch_p99_us\":{}}}",
        if durable { "apply-j" } else { "apply" },
        entries.len(),
        entries.len() as f64 / elapsed,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    secondary.shutdown().unwrap();
}

fn apply(secondary: &Engine, batch: &[bson::RawDocumentBuf]) -> slipstream_storage::Timestamp {
    secondary.apply_batch(batch).unwrap().ts
}
