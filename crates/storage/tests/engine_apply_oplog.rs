//! A second engine that applies the first one's oplog (as a secondary
//! will) ends with the same collections, indexes, documents and dbHash,
//! and the same oplog; `apply_batch` makes each batch visible whole, and
//! applies nothing of a batch it refuses or cannot apply.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError, Timestamp};

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    Engine::open(options).unwrap()
}

fn oplog(engine: &Arc<Engine>) -> Vec<Document> {
    engine
        .oplog_read(Bound::Unbounded, usize::MAX, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|raw| Document::try_from(raw.as_ref()).unwrap())
        .collect()
}

fn state(engine: &Arc<Engine>) -> Vec<(String, Vec<Document>, Vec<String>)> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let mut out = Vec::new();
    for db in engine.list_databases() {
        for info in engine.list_collections(&db) {
            let docs = reader.scan(&info.ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap();
            let names = info.indexes.iter().map(|i| i.name.clone()).collect();
            out.push((info.ns.clone(), docs.into_iter().map(|(_, d)| d).collect(), names));
        }
    }
    out
}

#[test]
fn applying_the_oplog_elsewhere_reproduces_the_state() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let secondary = open(secondary_dir.path());

    primary.create_collection("app.users", doc! {"validationLevel": "off"}).unwrap();
    primary.create_indexes("app.users", vec![IndexSpec { name: "email_1".into(), key: doc! {"email": 1}, unique: true, sparse: false, ..Default::default() }]).unwrap();
    {
        let mut writer = primary.writer();
        for i in 0..30 {
            writer.insert("app.users", doc! {"_id": i, "email": format!("u{i}@x"), "tags": [i % 3, i % 5]}).unwrap();
        }
        for i in 0..10 {
            let new = doc! {"_id": i, "email": format!("u{i}@x"), "tags": [i % 3, i % 5], "score": i * 10};
            writer.update("app.users", &Bson::Int32(i), new, doc! {"$set": {"score": i * 10}}).unwrap();
        }
        writer.delete("app.users", &Bson::Int32(29)).unwrap();
        writer.insert("app.tmp", doc! {"_id": "t"}).unwrap();
        writer.noop("new primary").unwrap();
    }
    primary.rename_collection("app.tmp", "app.kept", false).unwrap();
    primary.writer().insert("app.gone", doc! {"_id": 1}).unwrap();
    primary.drop_collection("app.gone").unwrap();
    primary.writer().insert("other.x", doc! {"_id": 1}).unwrap();
    primary.drop_database("other").unwrap();

    let entries = oplog(&primary);
    let raw_entries = primary.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    // Apply in a few batches, as a fetcher would.
    for chunk in raw_entries.chunks(7) {
        secondary.apply_batch(chunk).unwrap();
    }
    assert_eq!(state(&secondary), state(&primary));
    assert_eq!(secondary.db_hash("app", None).unwrap(), primary.db_hash("app", None).unwrap());
    assert_eq!(oplog(&secondary), entries);
    assert_eq!(secondary.last_applied(), primary.last_applied());
    let users = secondary.collection_info("app.users").unwrap();
    assert_eq!(users.uuid, primary.collection_info("app.users").unwrap().uuid);
    assert_eq!(users.multikey_indexes, Vec::<String>::new(), "email is never an array");
    assert!(secondary.validate("app.users").unwrap().valid);

    // An entry at or below the last applied one is refused.
    assert!(matches!(secondary.apply_batch(&raw_entries[..1]), Err(StorageError::OplogOutOfOrder(_))));

    // The secondary's own restart replays the applied entries.
    drop(secondary);
    let secondary = open(secondary_dir.path());
    assert_eq!(state(&secondary), state(&primary));
    assert!(secondary.last_applied().ts > Timestamp::ZERO);
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

fn raw_oplog(engine: &Arc<Engine>) -> Vec<bson::RawDocumentBuf> {
    engine.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap()
}

fn member(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.replicated = true;
    Engine::open(options).unwrap()
}

const BATCH_ENTRIES: usize = 16;

/// A reader at `Latest` and an oplog tail, racing batches being applied,
/// only ever see whole batches: never some entries of a batch without the
/// rest.
#[test]
fn readers_see_whole_batches_only() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let batches = 150;
    primary.create_collection("db.c", Document::new()).unwrap();
    for i in 0..batches * BATCH_ENTRIES {
        primary.writer().insert("db.c", doc! {"_id": i as i64}).unwrap();
    }
    let entries = raw_oplog(&primary);
    let secondary = member(secondary_dir.path());
    secondary.apply_batch(&entries[..1]).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|which| {
            let (secondary, stop) = (secondary.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                let mut tail_seen = 1usize;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if which == 0 {
                        let count = secondary.reader(ReadAt::Latest).unwrap().count("db.c").unwrap() as usize;
                        assert_eq!(count % BATCH_ENTRIES, 0, "a reader saw {count} documents: part of a batch");
                        // A read at a timestamp inside a batch being applied
                        // reads the newest visible state, never beyond it.
                        let at = secondary.reader(ReadAt::At(Timestamp::MAX)).unwrap().count("db.c").unwrap() as usize;
                        assert_eq!(at % BATCH_ENTRIES, 0, "a read at MAX saw {at} documents");
                    } else {
                        let from = Bound::Excluded(Timestamp::ZERO);
                        let tail = secondary.oplog_read(from, usize::MAX, usize::MAX).unwrap().len();
                        assert_eq!((tail - 1) % BATCH_ENTRIES, 0, "the oplog tail showed {tail} entries");
                        assert!(tail >= tail_seen);
                        tail_seen = tail;
                        // Read backwards: a short answer is the whole oplog,
                        // so whole batches too.
                        let newest = secondary.oplog_read_newest(BATCH_ENTRIES * 3).unwrap().len();
                        assert!(newest == BATCH_ENTRIES * 3 || (newest - 1) % BATCH_ENTRIES == 0, "{newest} newest entries");
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    for batch in entries[1..].chunks(BATCH_ENTRIES) {
        let last = secondary.apply_batch(batch).unwrap();
        assert_eq!(last, secondary.last_applied());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.join().unwrap() > 10, "the reader made too few checks");
    }
    assert_eq!(secondary.reader(ReadAt::Latest).unwrap().count("db.c").unwrap() as usize, batches * BATCH_ENTRIES);
    assert_eq!(secondary.last_applied(), primary.last_applied());
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_batch_out_of_order_applies_nothing() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    for i in 0..6 {
        primary.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    let entries = raw_oplog(&primary);
    let secondary = member(secondary_dir.path());
    secondary.apply_batch(&entries[..3]).unwrap();
    let before = secondary.last_applied();
    let out_of_order = [entries[3].clone(), entries[5].clone(), entries[4].clone()];
    assert!(matches!(secondary.apply_batch(&out_of_order), Err(StorageError::OplogOutOfOrder(_))));
    let repeated = [entries[2].clone(), entries[3].clone()];
    assert!(matches!(secondary.apply_batch(&repeated), Err(StorageError::OplogOutOfOrder(_))));
    assert_eq!(secondary.last_applied(), before);
    assert_eq!(oplog(&secondary).len(), 3);
    // A gap is not the storage's to judge (the fetcher checks continuity):
    // the next entries in order apply.
    assert_eq!(secondary.apply_batch(&entries[3..]).unwrap(), primary.last_applied());
    assert_eq!(state(&secondary), state(&primary));
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// An entry that cannot be applied in the middle of a batch: the error
/// comes back and nothing of the batch is left, not in reads at any
/// timestamp, not in the oplog, not in memory, not after a restart.
#[test]
fn a_batch_that_fails_halfway_leaves_nothing() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    primary.writer().insert("db.c", doc! {"_id": 0}).unwrap();
    let first = raw_oplog(&primary);
    for i in 1..4 {
        primary.writer().insert("db.c", doc! {"_id": i}).unwrap();
    }
    primary.create_indexes("db.c", vec![IndexSpec { name: "x_1".into(), key: doc! {"x": 1}, unique: false, sparse: false, ..Default::default() }]).unwrap();
    let mut batch: Vec<Document> = oplog(&primary)[first.len()..].to_vec();
    let last_ts = batch.last().unwrap().get_timestamp("ts").unwrap();
    let unknown = doc! {
        "ts": bson::Timestamp { time: last_ts.time, increment: last_ts.increment + 1 },
        "t": -1_i64, "op": "c", "ns": "db.$cmd", "o": {"frobnicate": "c"}, "wall": bson::DateTime::now(),
    };
    batch.push(unknown);
    let later = doc! {
        "ts": bson::Timestamp { time: last_ts.time, increment: last_ts.increment + 2 },
        "t": -1_i64, "op": "i", "ns": "db.c", "o": {"_id": 99}, "wall": bson::DateTime::now(),
    };
    batch.push(later);
    let batch: Vec<bson::RawDocumentBuf> = batch.iter().map(|d| bson::RawDocumentBuf::try_from(d).unwrap()).collect();

    let secondary = member(secondary_dir.path());
    secondary.apply_batch(&first).unwrap();
    let before = (secondary.last_applied(), state(&secondary), secondary.stats().versions_in_memory, oplog(&secondary));
    let result = secondary.apply_batch(&batch);
    assert!(matches!(result, Err(StorageError::InvalidOplogEntry(_))), "{result:?}");
    assert_eq!(secondary.reader(ReadAt::At(Timestamp::MAX)).unwrap().count("db.c").unwrap(), 1);
    assert!(secondary.collection_info("db.c").unwrap().indexes.len() == 1, "the index build of the batch is gone");
    let after = (secondary.last_applied(), state(&secondary), secondary.stats().versions_in_memory, oplog(&secondary));
    assert_eq!(after, before);
    // The valid prefix applies on its own afterwards, on a clean state.
    secondary.apply_batch(&batch[..batch.len() - 2]).unwrap();
    assert_eq!(state(&secondary), state(&primary));
    drop(secondary);
    let secondary = member(secondary_dir.path());
    assert_eq!(state(&secondary), state(&primary));
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// Applied entries bypass a closed gate, keep their own terms, and move
/// the oplog clock and the cluster time: the member's own first write
/// after it is elected comes after everything it applied.
#[test]
fn applied_batches_bypass_the_gate_and_advance_the_clock() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = member(primary_dir.path());
    primary.set_write_gate(slipstream_storage::WriteGate::Open { term: 3 });
    // Timestamps from the future (within the drift limit): the secondary's
    // wall clock is behind them.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as u32;
    let ahead = Timestamp::new(now + 30 * 24 * 3600, 5);
    primary.advance_cluster_time(ahead).unwrap();
    primary.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    let entries = raw_oplog(&primary);
    let secondary = member(secondary_dir.path());
    assert_eq!(secondary.write_gate(), slipstream_storage::WriteGate::Closed);
    let last = secondary.apply_batch(&entries).unwrap();
    assert!(last.ts > ahead);
    assert_eq!(last.term, 3);
    assert!(secondary.cluster_time() >= last.ts);
    secondary.set_write_gate(slipstream_storage::WriteGate::Open { term: 4 });
    let own = secondary.writer().insert("db.c", doc! {"_id": 2}).unwrap();
    assert!(own.ts > last.ts);
    assert_eq!(own.term, 4);
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// Hiding an index is one `collMod` command entry: a member applying the
/// oplog gets the same flag, and so does a restart from the checkpoint.
#[test]
fn hiding_an_index_replicates_and_survives_a_restart() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let spec = IndexSpec { name: "x_1".into(), key: doc! {"x": 1}, ..Default::default() };
    primary.create_indexes("db.c", vec![spec]).unwrap();
    let (before, optime) = primary.set_index_hidden("db.c", "x_1", true).unwrap();
    assert!(!before && optime.is_some());
    assert_eq!(primary.set_index_hidden("db.c", "x_1", true).unwrap(), (true, None), "no change, no entry");
    assert!(matches!(primary.set_index_hidden("db.c", "nope", true), Err(StorageError::IndexNotFound(_))));
    let hidden = |engine: &Arc<Engine>| engine.collection_info("db.c").unwrap().indexes[1].hidden;
    let secondary = member(secondary_dir.path());
    secondary.apply_batch(&raw_oplog(&primary)).unwrap();
    assert!(hidden(&secondary));
    secondary.shutdown().unwrap();
    drop(secondary);
    assert!(hidden(&member(secondary_dir.path())));
}
