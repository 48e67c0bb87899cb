//! Measures the key-value engine with real checkpoint batches, through the
//! same `KvEngine` trait the checkpoint uses, and prints one JSON object.
//!
//! A checkpoint batch holds the record keys of the documents written since
//! the last checkpoint (table id ++ encoded `_id`; ObjectIds grow, so they
//! arrive sorted and land at the right edge of the B-tree) and the index
//! entries of those documents (table id ++ encoded field value ++ record
//! key; field values are random, so these land all over the tree).
//!
//! Usage: `cargo run --release -p slipstream-storage --example kv_bench --
//! [--records N] [--batch B] [--value-bytes V] [--indexes I] [--reads R] [--sorted true]`

use std::sync::Arc;
use std::time::Instant;

use slipstream_storage::io::StdIo;
use slipstream_storage::kv::{KvBatch, KvEngine, KvOp};
use slipstream_storage::redb_engine::RedbEngine;

/// A small deterministic generator (xorshift64*), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

struct Args {
    records: u64,
    batch: u64,
    value_bytes: usize,
    indexes: u32,
    reads: u64,
    /// Batches in key order, as a checkpoint writes them.
    sorted: bool,
}

fn parse_args() -> Args {
    let mut args = Args { records: 1_000_000, batch: 10_000, value_bytes: 1024, indexes: 1, reads: 200_000, sorted: false };
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < raw.len() {
        let value = &raw[i + 1];
        match raw[i].as_str() {
            "--records" => args.records = value.parse().expect("--records N"),
            "--batch" => args.batch = value.parse().expect("--batch B"),
            "--value-bytes" => args.value_bytes = value.parse().expect("--value-bytes V"),
            "--indexes" => args.indexes = value.parse().expect("--indexes I"),
            "--reads" => args.reads = value.parse().expect("--reads R"),
            "--sorted" => args.sorted = value.parse().expect("--sorted true|false"),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    args
}

/// Record key of document `n`: table 1, then an ObjectId-like encoding
/// (type byte 0x2D and 12 bytes growing with `n`).
fn record_key(n: u64) -> Vec<u8> {
    let mut key = 1u32.to_be_bytes().to_vec();
    key.push(0x2D);
    key.extend_from_slice(&[0x65, 0x00, 0x00, 0x00]);
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// Index entry of document `n` in index `index`: a random number-typed
/// field value, then the record key.
fn index_key(index: u32, rng: &mut Rng, n: u64) -> Vec<u8> {
    let mut key = (2 + index).to_be_bytes().to_vec();
    key.push(0x14);
    key.extend_from_slice(&rng.next().to_be_bytes());
    key.extend_from_slice(&[0, 0]);
    key.extend_from_slice(&record_key(n)[4..]);
    key
}

fn op_key(op: &KvOp) -> &[u8] {
    match op {
        KvOp::Put { key, .. } | KvOp::PutShared { key, .. } | KvOp::Delete { key } => key,
        KvOp::DeleteRange { start, .. } => start,
    }
}

fn directory_size(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path).unwrap().filter_map(|e| e.ok()).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum()
}

fn main() {
    let args = parse_args();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpoint.redb");
    let engine: Arc<dyn KvEngine> = Arc::new(RedbEngine::open(&path, &StdIo::new()).unwrap().0);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let value = vec![0xABu8; args.value_bytes];

    let started = Instant::now();
    let mut batch_ms = Vec::new();
    let mut written = 0u64;
    while written < args.records {
        let count = args.batch.min(args.records - written);
        let mut batch = KvBatch::default();
        for n in written..written + count {
            batch.put(record_key(n), value.clone());
            for index in 0..args.indexes {
                batch.put(index_key(index, &mut rng, n), 4u32.to_be_bytes().to_vec());
            }
        }
        if args.sorted {
            batch.ops.sort_by(|a, b| op_key(a).cmp(op_key(b)));
        }
        batch.set_metadata("checkpoint_ts", written.to_be_bytes().to_vec());
        let batch_started = Instant::now();
        engine.commit(batch).unwrap();
        batch_ms.push(batch_started.elapsed().as_secs_f64() * 1000.0);
        written += count;
    }
    let load_secs = started.elapsed().as_secs_f64();
    let keys_total = args.records * (1 + u64::from(args.indexes));

    let snapshot = engine.snapshot().unwrap();
    let read_started = Instant::now();
    let mut found = 0u64;
    for _ in 0..args.reads {
        let n = rng.next() % args.records;
        if snapshot.get(&record_key(n)).unwrap().is_some() {
            found += 1;
        }
    }
    let read_secs = read_started.elapsed().as_secs_f64();
    assert_eq!(found, args.reads, "every record must be found");
    drop(snapshot);
    drop(engine);

    let size = directory_size(dir.path());
    let reopen_started = Instant::now();
    let engine = RedbEngine::open(&path, &StdIo::new()).unwrap().0;
    let reopen_ms = reopen_started.elapsed().as_secs_f64() * 1000.0;
    drop(engine);

    batch_ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p50 = batch_ms[batch_ms.len() / 2];
    let max = batch_ms[batch_ms.len() - 1];
    let raw_bytes = args.records * (args.value_bytes as u64 + 17) + args.records * u64::from(args.indexes) * 35;
    println!(
        "{{\"engine\":\"redb\",\"sorted\":{},\"records\":{},\"indexes\":{},\"batch\":{},\"value_bytes\":{},\"load_secs\":{:.2},\"documents_per_sec\":{:.0},\"keys_per_sec\":{:.0},\"batch_ms_p50\":{:.1},\"batch_ms_max\":{:.1},\"point_reads_per_sec\":{:.0},\"file_bytes\":{},\"size_over_raw\":{:.2},\"reopen_ms\":{:.1}}}",
        args.sorted,
        args.records,
        args.indexes,
        args.batch,
        args.value_bytes,
        load_secs,
        args.records as f64 / load_secs,
        keys_total as f64 / load_secs,
        p50,
        max,
        args.reads as f64 / read_secs,
        size,
        size as f64 / raw_bytes as f64,
        reopen_ms
    );
}
