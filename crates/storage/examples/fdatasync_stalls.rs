//! Where the journal's fdatasync stalls come from (issue 7): one writer
//! appends small records and fdatasyncs after each, on three kinds of file,
//! run in turns so that the machine's load falls on all three alike:
//!
//! - `append`: the file grows with every write (the journal before
//!   preallocation), so every fdatasync also commits the file system's
//!   metadata journal (the inode's size changed);
//! - `zeroed`: the file was written with zeros to its full size and fsynced
//!   ahead, then overwritten in place: the size and the block map never
//!   change, so fdatasync has only data to flush;
//! - `fallocated`: `fallocate` reserved the blocks ahead (unwritten extents);
//!   on ext4 the first write into each extent converts it to written, a
//!   metadata change that fdatasync must commit.
//!
//! Prints one JSON line per mode and round (p50, p99, p99.9 and max
//! fdatasync latency in microseconds, stalls above 50 ms, the load average
//! before and after), then one line per mode over all rounds.
//!
//! ```text
//! cargo run -p slipstream-storage --example fdatasync_stalls -- \
//!     [--dir DIR] [--seconds 10] [--rounds 3] [--record-bytes 1024]
//! ```
//!
//! `--dir` must be on the disk being measured (a tmpfs makes fsyncs free);
//! the default is the system's temporary directory. The files are removed
//! afterwards.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A latency above this counts as a stall (the writes the issue saw stalled
/// for 100-400 ms; an ordinary fdatasync here takes 0.1-5 ms).
const STALL_MICROS_MIN: u64 = 50_000;
/// The size of each test file: more than one run's writes at any speed this
/// disk reaches (a run that would pass it stops early and says so).
const FILE_BYTES_MAX: u64 = 128 * 1024 * 1024;
/// Zeros written per call when filling a file ahead.
const ZERO_FILL_CHUNK_BYTES: usize = 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Append,
    Zeroed,
    Fallocated,
}

const MODES: [Mode; 3] = [Mode::Append, Mode::Zeroed, Mode::Fallocated];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Append => "append",
            Mode::Zeroed => "zeroed",
            Mode::Fallocated => "fallocated",
        }
    }
}

struct Args {
    dir: PathBuf,
    seconds: u64,
    rounds: usize,
    record_bytes: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        dir: std::env::temp_dir(),
        seconds: 10,
        rounds: 3,
        record_bytes: 1024,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = value.into(),
            "--seconds" => args.seconds = value.parse().expect("--seconds"),
            "--rounds" => args.rounds = value.parse().expect("--rounds"),
            "--record-bytes" => args.record_bytes = value.parse().expect("--record-bytes"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(args.record_bytes > 0 && args.record_bytes as u64 <= FILE_BYTES_MAX);
    args
}

fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Creates the file for `mode`, prepared ahead as that mode needs; the
/// preparation is durable before the timed writes start.
fn prepare(path: &Path, mode: Mode) -> std::io::Result<File> {
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    match mode {
        Mode::Append => {}
        Mode::Zeroed => {
            let zeros = vec![0u8; ZERO_FILL_CHUNK_BYTES];
            let mut offset = 0;
            while offset < FILE_BYTES_MAX {
                let len = zeros.len().min((FILE_BYTES_MAX - offset) as usize);
                file.write_all_at(&zeros[..len], offset)?;
                offset += len as u64;
            }
        }
        Mode::Fallocated => {
            // SAFETY: fallocate on a descriptor we own; it touches no memory of ours.
            let result = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, FILE_BYTES_MAX as libc::off_t) };
            if result != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    file.sync_all()?;
    File::open(path.parent().unwrap())?.sync_all()?;
    Ok(file)
}

/// fdatasync latencies of one run, in microseconds.
fn run(file: &File, record_bytes: usize, duration: Duration) -> std::io::Result<(Vec<u64>, bool)> {
    let record = vec![0xA5u8; record_bytes];
    let mut latencies = Vec::new();
    let mut offset = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        if offset + record_bytes as u64 > FILE_BYTES_MAX {
            return Ok((latencies, true));
        }
        file.write_all_at(&record, offset)?;
        let sync_started = Instant::now();
        file.sync_data()?;
        latencies.push(sync_started.elapsed().as_micros() as u64);
        offset += record_bytes as u64;
    }
    Ok((latencies, false))
}

fn percentile(sorted: &[u64], fraction: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64) * fraction).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(latencies: &[u64]) -> String {
    let mut sorted = latencies.to_vec();
    sorted.sort_unstable();
    let stalls = sorted.iter().filter(|&&micros| micros > STALL_MICROS_MIN).count();
    let stall_micros: u64 = sorted.iter().filter(|&&micros| micros > STALL_MICROS_MIN).sum();
    format!(
        "\"fdatasyncs\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"stalls_over_50ms\":{},\"stalled_ms\":{}",
        sorted.len(),
        percentile(&sorted, 0.50),
        percentile(&sorted, 0.99),
        percentile(&sorted, 0.999),
        sorted.last().copied().unwrap_or(0),
        stalls,
        stall_micros / 1000
    )
}

fn main() -> std::io::Result<()> {
    let args = parse_args();
    let dir = args.dir.join(format!("fdatasync-stalls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let duration = Duration::from_secs(args.seconds);
    let mut all: Vec<Vec<u64>> = vec![Vec::new(); MODES.len()];
    for round in 0..args.rounds {
        // Each round starts with another mode, so that none always runs
        // right after the same neighbour.
        for turn in 0..MODES.len() {
            let position = (round + turn) % MODES.len();
            let mode = MODES[position];
            let path = dir.join(format!("{}-{round}.dat", mode.name()));
            let file = prepare(&path, mode)?;
            let load_before = load_average();
            let (latencies, ran_out) = run(&file, args.record_bytes, duration)?;
            let load_after = load_average();
            println!(
                "{{\"mode\":\"{}\",\"round\":{round},\"seconds\":{},\"record_bytes\":{},{},\"ran_out_of_file\":{ran_out},\"load_before\":\"{load_before}\",\"load_after\":\"{load_after}\"}}",
                mode.name(),
                args.seconds,
                args.record_bytes,
                summary(&latencies)
            );
            all[position].extend(latencies);
            drop(file);
            std::fs::remove_file(&path)?;
        }
    }
    for (position, mode) in MODES.iter().enumerate() {
        println!(
            "{{\"mode\":\"{}\",\"rounds\":{},{}}}",
            mode.name(),
            args.rounds,
            summary(&all[position])
        );
    }
    std::fs::remove_dir(&dir)?;
    Ok(())
}
