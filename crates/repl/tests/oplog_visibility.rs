//! What replication relies on from storage, checked under concurrency:
//! a tailing reader (the fetcher's view of a primary) sees the oplog in
//! `ts` order without holes while many writers commit; and a reader on a
//! secondary sees an applied batch whole or not at all.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, RawDocumentBuf};
use slipstream_clock::Timestamp;
use slipstream_storage::{from_bson_timestamp, Engine, EngineOptions, ReadAt, WriteGate};

const WRITERS: usize = 8;
const WRITES_PER_WRITER: usize = 300;
const BATCH_ENTRIES: usize = 2_000;
const READ_BYTES: usize = 64 * 1024 * 1024;
const DEADLINE: Duration = Duration::from_secs(60);

fn replicated_engine(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.replicated = true;
    Engine::open(options).unwrap()
}

fn ts(entry: &RawDocumentBuf) -> Timestamp {
    from_bson_timestamp(entry.get_timestamp("ts").unwrap())
}

#[test]
fn a_tailing_reader_sees_every_entry_in_order_under_concurrent_writers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = replicated_engine(dir.path());
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let done = Arc::new(AtomicBool::new(false));
    let tail = {
        let engine = engine.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            // The fetcher's view: read after the last seen entry, again and
            // again, while the writers run.
            let mut seen: Vec<Timestamp> = Vec::new();
            loop {
                let finished = done.load(Ordering::SeqCst);
                let from = seen.last().map_or(Bound::Unbounded, |last| Bound::Excluded(*last));
                let entries = engine.oplog_read(from, 10_000, READ_BYTES).unwrap();
                seen.extend(entries.iter().map(ts));
                if finished && entries.is_empty() {
                    return seen;
                }
            }
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for i in 0..WRITES_PER_WRITER {
                    engine.writer().insert("t.c", doc! {"_id": format!("{w}-{i}")}).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = tail.join().unwrap();
    let all: Vec<Timestamp> = engine
        .oplog_read(Bound::Unbounded, 100_000, READ_BYTES)
        .unwrap()
        .iter()
        .map(ts)
        .collect();
    // No hole: what the tail saw is the whole oplog, in order, once each.
    assert_eq!(seen, all);
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]));
    assert!(
        seen.len() > WRITERS * WRITES_PER_WRITER,
        "the collection's creation is logged too"
    );
    engine.shutdown().unwrap();
}

#[test]
fn a_secondary_reader_sees_an_applied_batch_whole_or_not_at_all() {
    // A primary's oplog: one collection creation and BATCH_ENTRIES inserts.
    let source_dir = tempfile::tempdir().unwrap();
    let source = replicated_engine(source_dir.path());
    source.set_write_gate(WriteGate::Open { term: 1 });
    for i in 0..BATCH_ENTRIES {
        source.writer().insert("t.c", doc! {"_id": i as i64}).unwrap();
    }
    let entries = source.oplog_read(Bound::Unbounded, 100_000, READ_BYTES).unwrap();
    source.shutdown().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let secondary = replicated_engine(dir.path());
    let applied = Arc::new(AtomicBool::new(false));
    let reader = {
        let secondary = secondary.clone();
        let applied = applied.clone();
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut counts = Vec::new();
            loop {
                let finished = applied.load(Ordering::SeqCst);
                let reader = secondary.reader(ReadAt::Latest).unwrap();
                let count = if reader.collection_info("t.c").is_some() {
                    reader.count("t.c").unwrap()
                } else {
                    0
                };
                counts.push(count);
                if finished || started.elapsed() > DEADLINE {
                    return counts;
                }
            }
        })
    };
    // Give the reader a head start so that it reads during the apply.
    std::thread::sleep(Duration::from_millis(20));
    secondary.apply_batch(&entries).unwrap();
    applied.store(true, Ordering::SeqCst);
    let counts = reader.join().unwrap();
    assert!(
        counts.iter().all(|&count| count == 0 || count == BATCH_ENTRIES as u64),
        "a partial batch was visible"
    );
    assert_eq!(*counts.last().unwrap(), BATCH_ENTRIES as u64);
    assert!(
        counts.contains(&0),
        "the reader never read before the batch was visible"
    );
    secondary.shutdown().unwrap();
}
