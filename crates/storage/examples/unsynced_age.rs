//! How long an acknowledged `w: 1` write waits for its fsync while a large
//! checkpoint is written (issue 6, item 5).
//!
//! Loads `--load-mb` of documents without checkpointing, then keeps one
//! writer inserting small documents (acknowledged without waiting for the
//! fsync, as `w: 1` is) while a sampler reads the engine's
//! `oldest_unsynced_write_age_ms` every millisecond: first for a baseline
//! window without a checkpoint, then while one checkpoint writes everything
//! loaded. Prints one JSON line.
//!
//! ```text
//! cargo run --release -p slipstream-storage --example unsynced_age -- \
//!     [--dir DIR] [--load-mb 300] [--commit-interval-ms 100] [--baseline-ms 3000]
//! ```
//!
//! `--dir` must be on the disk being measured (a tmpfs makes fsyncs free).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::doc;
use parking_lot::Mutex;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::Engine;

/// Bytes of padding per loaded document.
const LOAD_DOCUMENT_BYTES: usize = 1024;
/// The writer's pause between inserts, so that it does not saturate a core.
const WRITER_PAUSE: Duration = Duration::from_micros(500);
const SAMPLE_INTERVAL: Duration = Duration::from_millis(1);

const PHASE_BASELINE: u8 = 0;
const PHASE_CHECKPOINT: u8 = 1;
const PHASE_DONE: u8 = 2;

struct Args {
    dir: Option<std::path::PathBuf>,
    load_mb: usize,
    commit_interval_ms: u64,
    baseline_ms: u64,
}

fn parse_args() -> Args {
    let mut args = Args { dir: None, load_mb: 300, commit_interval_ms: 100, baseline_ms: 3000 };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = Some(value.into()),
            "--load-mb" => args.load_mb = value.parse().expect("--load-mb"),
            "--commit-interval-ms" => args.commit_interval_ms = value.parse().expect("--commit-interval-ms"),
            "--baseline-ms" => args.baseline_ms = value.parse().expect("--baseline-ms"),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

/// Samples of one phase, in milliseconds.
#[derive(Default)]
struct Samples(Vec<u64>);

impl Samples {
    fn summary(&self) -> serde_like::Summary {
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        let at = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0);
        let max = sorted.last().copied().unwrap_or(0);
        serde_like::Summary { samples: sorted.len(), p50: at(0.5), p99: at(0.99), max }
    }
}

mod serde_like {
    pub struct Summary {
        pub samples: usize,
        pub p50: u64,
        pub p99: u64,
        pub max: u64,
    }

    impl std::fmt::Display for Summary {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "{{\"samples\": {}, \"p50_ms\": {}, \"p99_ms\": {}, \"max_ms\": {}}}",
                self.samples, self.p50, self.p99, self.max
            )
        }
    }
}

fn main() {
    let args = parse_args();
    let temp = tempfile::tempdir_in(args.dir.clone().unwrap_or_else(|| ".".into())).unwrap();
    let mut options = EngineOptions::new(temp.path());
    options.journal_commit_interval_ms = args.commit_interval_ms;
    options.checkpoint_interval_ms = 3_600_000;
    options.oplog_size_bytes = 4 * 1024 * 1024 * 1024;
    let engine = Engine::open(options).unwrap();

    let pad = "x".repeat(LOAD_DOCUMENT_BYTES);
    let load_documents = args.load_mb * 1024 * 1024 / LOAD_DOCUMENT_BYTES;
    let loading = Instant::now();
    for id in 0..load_documents as i64 {
        engine.writer().insert("bench.load", doc! {"_id": id, "pad": pad.as_str()}).unwrap();
    }
    // The first load becomes the checkpoint's base; the measured checkpoint
    // then writes a second load into a file that already holds data, as a
    // periodic one does.
    engine.checkpoint_now().unwrap();
    let load_ms = loading.elapsed().as_millis();

    for id in load_documents as i64..2 * load_documents as i64 {
        engine.writer().insert("bench.load", doc! {"_id": id, "pad": pad.as_str()}).unwrap();
    }
    let last = engine.last_applied().ts;
    engine.wait_durable(last).unwrap();

    let phase = Arc::new(AtomicU8::new(PHASE_BASELINE));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut id = 0i64;
            while !stop.load(Ordering::Relaxed) {
                engine.writer().insert("bench.w1", doc! {"_id": id}).unwrap();
                id += 1;
                std::thread::sleep(WRITER_PAUSE);
            }
            id
        })
    };
    let samples = Arc::new(Mutex::new([Samples::default(), Samples::default()]));
    let sampler = {
        let (engine, stop, phase, samples) = (engine.clone(), stop.clone(), phase.clone(), samples.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let age = engine.stats().oldest_unsynced_write_age_ms;
                let current = phase.load(Ordering::Relaxed);
                if current < PHASE_DONE {
                    samples.lock()[current as usize].0.push(age);
                }
                std::thread::sleep(SAMPLE_INTERVAL);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(args.baseline_ms));
    phase.store(PHASE_CHECKPOINT, Ordering::Relaxed);
    let checkpointing = Instant::now();
    engine.checkpoint_now().unwrap();
    let checkpoint_ms = checkpointing.elapsed().as_millis();
    phase.store(PHASE_DONE, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    let w1_writes = writer.join().unwrap();
    sampler.join().unwrap();
    engine.shutdown().unwrap();

    let samples = samples.lock();
    println!(
        "{{\"load_mb\": {}, \"load_ms\": {load_ms}, \"commit_interval_ms\": {}, \"checkpoint_ms\": {checkpoint_ms}, \
         \"w1_writes\": {w1_writes}, \"baseline\": {}, \"during_checkpoint\": {}}}",
        args.load_mb,
        args.commit_interval_ms,
        samples[0].summary(),
        samples[1].summary()
    );
}
