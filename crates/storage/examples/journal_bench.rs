//! Journal group-commit benchmark: N threads append 1 KB entries through
//! one mutex (as the engine's write lock does) and each waits for its entry
//! to be durable (`j: true`). Prints one JSON object.
//!
//! `cargo run --release -p slipstream-storage --example journal_bench -- [threads] [seconds] [entry_bytes] [dir] [preallocate]`
//!
//! `preallocate` (`true`, the default, or `false`) turns the journal's
//! preallocated segments on or off; with them on, the run starts once the
//! journal writes into a preallocated segment (the journal's first segment
//! grows until a spare is ready). Latencies above 50 ms count as stalls.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use slipstream_storage::io::StdIo;
use slipstream_storage::journal::{Journal, JournalOptions};
use slipstream_storage::timestamp::OplogClock;
use slipstream_storage::Timestamp;
use slipstream_storage::TimestampBson;

fn entry(ts: Timestamp, size: usize) -> Vec<u8> {
    let pad = "x".repeat(size.saturating_sub(100));
    bson::doc! {"ts": ts.to_bson(), "t": 1i64, "op": "i", "ns": "bench.journal", "o": {"_id": ts.as_u64() as i64, "pad": pad}}
        .to_vec()
        .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let entry_bytes: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let scratch = tempfile::tempdir_in(args.get(4).map(String::as_str).unwrap_or(".")).unwrap();
    let preallocate: bool = args.get(5).map(|a| a.parse().expect("preallocate: true or false")).unwrap_or(true);
    let options = JournalOptions {
        commit_interval_ms: 100,
        segment_size_bytes: 64 * 1024 * 1024,
        size_cap_bytes: 256 * 1024 * 1024,
        preallocate_segments: preallocate,
        ..JournalOptions::default()
    };
    let segment_size_bytes = options.segment_size_bytes;
    let journal = Arc::new(Journal::open(scratch.path(), StdIo::new(), options).unwrap());
    // Let the size cap delete old segments as the run goes on.
    journal.set_retain_from(Timestamp::MAX);
    let write_lock = Arc::new(Mutex::new(OplogClock::new(Timestamp::ZERO)));
    if preallocate {
        warm_up_into_a_spare(&journal, &write_lock, entry_bytes, segment_size_bytes);
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::<u64>::new()));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (journal, write_lock, stop, acknowledged, latencies) =
                (journal.clone(), write_lock.clone(), stop.clone(), acknowledged.clone(), latencies.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let ts = {
                        let mut clock = write_lock.lock();
                        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as u32;
                        let ts = clock.tick(wall);
                        journal.append(ts, &entry(ts, entry_bytes)).unwrap();
                        ts
                    };
                    journal.wait_durable(ts).unwrap();
                    mine.push(began.elapsed().as_micros() as u64);
                    acknowledged.fetch_add(1, Ordering::Relaxed);
                }
                latencies.lock().extend(mine);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let stats = journal.stats();
    journal.close().unwrap();
    let mut latencies = latencies.lock().clone();
    latencies.sort_unstable();
    let percentile = |p: f64| latencies.get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1))).copied().unwrap_or(0);
    let ops = acknowledged.load(Ordering::Relaxed);
    let stalls = latencies.iter().filter(|&&micros| micros > 50_000).count();
    let load: Vec<&str> = load_before.split_whitespace().take(3).collect();
    println!(
        "{{\"benchmark\":\"journal_group_commit\",\"preallocate\":{preallocate},\"load_before\":\"{}\",\"stalls_over_50ms\":{stalls},\"max_us\":{},\"threads\":{threads},\"entry_bytes\":{entry_bytes},\"seconds\":{elapsed:.2},\"appends\":{ops},\"appends_per_sec\":{:.0},\"fsyncs\":{},\"fsyncs_per_sec\":{:.0},\"commits\":{},\"entries_per_commit\":{:.1},\"mb_written_per_sec\":{:.1},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{}}}",
        load.join(" "),
        latencies.last().copied().unwrap_or(0),
        ops as f64 / elapsed,
        stats.fsyncs,
        stats.fsyncs as f64 / elapsed,
        stats.commits,
        ops as f64 / stats.commits.max(1) as f64,
        stats.bytes_written as f64 / elapsed / 1e6,
        percentile(0.5),
        percentile(0.99),
        percentile(0.999),
    );
}

/// Appends and syncs until the journal writes into a preallocated segment
/// (zeros ahead, no spare ready yet), so that the run measures that.
fn warm_up_into_a_spare(
    journal: &Journal,
    write_lock: &Mutex<OplogClock>,
    entry_bytes: usize,
    segment_size_bytes: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = journal.stats();
        if stats.spares_prepared >= 1 && stats.preallocated_bytes > 0 && stats.preallocated_bytes < segment_size_bytes {
            return;
        }
        assert!(Instant::now() < deadline, "the journal never rolled over into a spare: {stats:?}");
        let ts = write_lock.lock().tick(1);
        journal.append(ts, &entry(ts, entry_bytes)).unwrap();
        journal.sync_now().unwrap();
    }
}
