//! How long opening a journal takes, by its size: fills a journal with
//! `size_mb` of 1 KB entries (64 MiB segments, as a member's), closes it,
//! then opens it `trials` times, warm (its files in the OS page cache) and
//! cold (their pages dropped first with `posix_fadvise`), and prints one
//! JSON object per size with each trial's milliseconds and how many
//! segments an open read whole (`segments_scanned`).
//!
//! `cargo run --release -p slipstream-storage --example journal_open -- [sizes_mb] [trials] [dir]`
//!
//! `sizes_mb` is a comma-separated list (default `64,256,1024`).
//! `journal_open --existing DIR [trials]` times opening a copy of an
//! existing journal directory instead (a member's `<dbpath>/journal`). A
//! restarted member opens its journal before anything else; how long that
//! takes should not grow with how much oplog it holds.

use std::path::Path;
use std::time::Instant;

use slipstream_storage::io::StdIo;
use slipstream_storage::journal::{EntryMeta, Journal, JournalAppend, JournalOptions};
use slipstream_storage::{Timestamp, TimestampBson};

const ENTRY_BYTES: usize = 1024;
const APPEND_BATCH: usize = 1000;

fn options() -> JournalOptions {
    JournalOptions { segment_size_bytes: 64 * 1024 * 1024, size_cap_bytes: u64::MAX, ..JournalOptions::default() }
}

fn entry(ts: Timestamp) -> Vec<u8> {
    let pad = "x".repeat(ENTRY_BYTES - 100);
    let document = bson::doc! {"_id": ts.as_u64() as i64, "pad": pad};
    bson::doc! {"ts": ts.to_bson(), "t": 1i64, "op": "i", "ns": "bench.journal", "o": document}.to_vec().unwrap()
}

fn fill(dir: &Path, size_mb: u64) -> u64 {
    let journal = Journal::open(dir, StdIo::new(), options()).unwrap();
    let entries = size_mb * 1024 * 1024 / ENTRY_BYTES as u64;
    let mut next = 1u64;
    while next <= entries {
        let batch: Vec<(Timestamp, Vec<u8>)> = (next..(next + APPEND_BATCH as u64).min(entries + 1))
            .map(|i| {
                let ts = Timestamp::new(1_700_000_000 + (i / 100_000) as u32, (i % 100_000) as u32 + 1);
                (ts, entry(ts))
            })
            .collect();
        next += batch.len() as u64;
        let appends: Vec<JournalAppend<'_>> = batch
            .iter()
            .map(|(ts, bytes)| JournalAppend { ts: *ts, meta: EntryMeta::of_entry(bytes), entry: bytes })
            .collect();
        journal.append_batch(&appends).unwrap();
    }
    journal.close().unwrap();
    entries
}

fn drop_cached_pages(dir: &Path) {
    use std::os::unix::io::AsRawFd;
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = std::fs::File::open(entry.unwrap().path()).unwrap();
        // SAFETY: a valid open descriptor; the call only advises the kernel.
        let result = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(result, 0, "posix_fadvise failed");
    }
}

/// Milliseconds to open, and the segments scanned whole.
fn open_ms(dir: &Path) -> (f64, u64) {
    let started = Instant::now();
    let journal = Journal::open(dir, StdIo::new(), options()).unwrap();
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    let scanned = journal.stats().segments_scanned_at_open;
    journal.close().unwrap();
    ((elapsed * 100.0).round() / 100.0, scanned)
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Opens a copy of `dir` (an open may cut a torn tail or write index
/// files; the original is left alone) warm `trials` times.
fn existing(dir: &Path, trials: usize) {
    let scratch = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), scratch.path().join(entry.file_name())).unwrap();
    }
    let opens: Vec<(f64, u64)> = (0..trials).map(|_| open_ms(scratch.path())).collect();
    let warm: Vec<f64> = opens.iter().map(|(ms, _)| *ms).collect();
    let line = serde_json::json!({
        "bench": "journal-open",
        "existing": dir.display().to_string(),
        "segments_scanned": opens.last().map(|(_, scanned)| *scanned),
        "warm_ms": warm,
        "warm_median_ms": median(&warm),
    });
    println!("{line}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--existing") {
        let trials = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5);
        existing(Path::new(args.get(2).expect("--existing DIR")), trials);
        return;
    }
    let sizes: Vec<u64> =
        args.get(1).map_or("64,256,1024", String::as_str).split(',').map(|s| s.parse().expect("sizes_mb")).collect();
    let trials: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let parent = args.get(3).map_or(".", String::as_str);
    for size_mb in sizes {
        let scratch = tempfile::tempdir_in(parent).unwrap();
        let entries = fill(scratch.path(), size_mb);
        let segments = std::fs::read_dir(scratch.path())
            .unwrap()
            .filter(|entry| entry.as_ref().unwrap().file_name().to_string_lossy().ends_with(".seg"))
            .count();
        // The first open after the fill may do one-time work (a journal
        // written by an older build); it is reported apart.
        let (first_ms, _) = open_ms(scratch.path());
        let warm: Vec<f64> = (0..trials).map(|_| open_ms(scratch.path()).0).collect();
        let cold: Vec<f64> = (0..trials)
            .map(|_| {
                drop_cached_pages(scratch.path());
                open_ms(scratch.path()).0
            })
            .collect();
        let (_, segments_scanned) = open_ms(scratch.path());
        let line = serde_json::json!({
            "bench": "journal-open",
            "size_mb": size_mb,
            "entries": entries,
            "segments": segments,
            "segments_scanned": segments_scanned,
            "first_open_ms": first_ms,
            "warm_ms": warm,
            "warm_median_ms": median(&warm),
            "cold_ms": cold,
            "cold_median_ms": median(&cold),
        });
        println!("{line}");
    }
}
