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
//! With `--together`, each round runs the three at once, one thread each,
//! and also reports how many of each mode's stalls overlapped in time with
//! a stall of both other modes: stalls that hit every file at once come
//! from the disk or the file system as a whole, not from the file's size.
//!
//! ```text
//! cargo run -p slipstream-storage --example fdatasync_stalls -- \
//!     [--dir DIR] [--seconds 10] [--rounds 3] [--record-bytes 1024] [--together]
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
    together: bool,
}

fn parse_args() -> Args {
    let mut args = Args {
        dir: std::env::temp_dir(),
        seconds: 10,
        rounds: 3,
        record_bytes: 1024,
        together: false,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        if flag == "--together" {
            args.together = true;
            continue;
        }
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

/// One run's fdatasyncs: each one's latency in microseconds, and the
/// stalls among them as (start, end) since a shared epoch.
#[derive(Default)]
struct Samples {
    latencies: Vec<u64>,
    stalls: Vec<(Duration, Duration)>,
    ran_out_of_file: bool,
}

fn run(file: &File, record_bytes: usize, duration: Duration, epoch: Instant) -> std::io::Result<Samples> {
    let record = vec![0xA5u8; record_bytes];
    let mut samples = Samples::default();
    let mut offset = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        if offset + record_bytes as u64 > FILE_BYTES_MAX {
            samples.ran_out_of_file = true;
            return Ok(samples);
        }
        file.write_all_at(&record, offset)?;
        let sync_started = Instant::now();
        file.sync_data()?;
        let micros = sync_started.elapsed().as_micros() as u64;
        samples.latencies.push(micros);
        if micros > STALL_MICROS_MIN {
            samples.stalls.push((sync_started - epoch, Instant::now() - epoch));
        }
        offset += record_bytes as u64;
    }
    Ok(samples)
}

type Stall = (Duration, Duration);

/// How many of `stalls` overlap in time with a stall in every one of `others`.
fn stalls_shared_with_all(stalls: &[Stall], others: &[&[Stall]]) -> usize {
    let overlaps = |a: &Stall, b: &Stall| a.0 < b.1 && b.0 < a.1;
    stalls
        .iter()
        .filter(|stall| others.iter().all(|other| other.iter().any(|o| overlaps(stall, o))))
        .count()
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
    let all = if args.together {
        run_together(&args, &dir)?
    } else {
        run_in_turns(&args, &dir)?
    };
    for (position, mode) in MODES.iter().enumerate() {
        println!(
            "{{\"mode\":\"{}\",\"rounds\":{},\"together\":{},{}}}",
            mode.name(),
            args.rounds,
            args.together,
            summary(&all[position])
        );
    }
    std::fs::remove_dir(&dir)?;
    Ok(())
}

/// Each round runs the three modes one after the other, starting with a
/// different one each round, so that none always follows the same one.
fn run_in_turns(args: &Args, dir: &Path) -> std::io::Result<Vec<Vec<u64>>> {
    let duration = Duration::from_secs(args.seconds);
    let mut all: Vec<Vec<u64>> = vec![Vec::new(); MODES.len()];
    for round in 0..args.rounds {
        for turn in 0..MODES.len() {
            let position = (round + turn) % MODES.len();
            let mode = MODES[position];
            let path = dir.join(format!("{}-{round}.dat", mode.name()));
            let file = prepare(&path, mode)?;
            let load_before = load_average();
            let samples = run(&file, args.record_bytes, duration, Instant::now())?;
            let load_after = load_average();
            println!(
                "{{\"mode\":\"{}\",\"round\":{round},\"seconds\":{},\"record_bytes\":{},{},\"ran_out_of_file\":{},\"load_before\":\"{load_before}\",\"load_after\":\"{load_after}\"}}",
                mode.name(),
                args.seconds,
                args.record_bytes,
                summary(&samples.latencies),
                samples.ran_out_of_file
            );
            all[position].extend(samples.latencies);
            drop(file);
            std::fs::remove_file(&path)?;
        }
    }
    Ok(all)
}

/// Each round runs the three modes at the same time, one thread each.
fn run_together(args: &Args, dir: &Path) -> std::io::Result<Vec<Vec<u64>>> {
    let duration = Duration::from_secs(args.seconds);
    let mut all: Vec<Vec<u64>> = vec![Vec::new(); MODES.len()];
    for round in 0..args.rounds {
        let mut files = Vec::new();
        for mode in MODES {
            let path = dir.join(format!("{}-{round}.dat", mode.name()));
            files.push((prepare(&path, mode)?, path));
        }
        let load_before = load_average();
        let epoch = Instant::now();
        let results: Vec<std::io::Result<Samples>> = std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .iter()
                .map(|(file, _)| scope.spawn(move || run(file, args.record_bytes, duration, epoch)))
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("a writer panicked"))
                .collect()
        });
        let load_after = load_average();
        let samples = results.into_iter().collect::<std::io::Result<Vec<Samples>>>()?;
        for (position, mode) in MODES.iter().enumerate() {
            let others: Vec<&[Stall]> = (0..MODES.len())
                .filter(|other| *other != position)
                .map(|other| samples[other].stalls.as_slice())
                .collect();
            let shared = stalls_shared_with_all(&samples[position].stalls, &others);
            println!(
                "{{\"mode\":\"{}\",\"round\":{round},\"together\":true,\"seconds\":{},\"record_bytes\":{},{},\"stalls_shared_with_both_others\":{shared},\"ran_out_of_file\":{},\"load_before\":\"{load_before}\",\"load_after\":\"{load_after}\"}}",
                mode.name(),
                args.seconds,
                args.record_bytes,
                summary(&samples[position].latencies),
                samples[position].ran_out_of_file
            );
            all[position].extend(&samples[position].latencies);
        }
        for (file, path) in files {
            drop(file);
            std::fs::remove_file(&path)?;
        }
    }
    Ok(all)
}
