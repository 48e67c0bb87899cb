//! A replica set member's engine (`EngineOptions::replicated`): checkpoints
//! never pass the stable timestamp, so a crash recovers everything from the
//! journal and `rollback_to` any point at or after the stable timestamp
//! works; the write gate decides whether client writes commit and with
//! which term; clients cannot write to `local`.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, OpTime, ReadAt, StorageError, Timestamp, TimestampBson, WriteGate};

fn options(dir: &std::path::Path, replicated: bool) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.replicated = replicated;
    options
}

fn ids(engine: &Arc<Engine>, ns: &str) -> Vec<i32> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let docs = reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap();
    docs.into_iter().map(|(_, d)| d.get_i32("_id").unwrap()).collect()
}

fn oplog(engine: &Arc<Engine>) -> Vec<Document> {
    let entries = engine.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    entries.into_iter().map(|raw| Document::try_from(raw.as_ref()).unwrap()).collect()
}

fn entry_ts(entry: &Document) -> Timestamp {
    Timestamp::from_bson(entry.get_timestamp("ts").unwrap())
}

#[test]
fn checkpoints_stop_at_the_stable_timestamp_and_recovery_replays_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let mut written = Vec::new();
    for i in 0..20 {
        written.push(engine.writer().insert("db.c", doc! {"_id": i}).unwrap());
    }
    engine.wait_durable(engine.last_applied().ts).unwrap();
    // Until replication sets a stable timestamp, nothing is checkpointed.
    assert_eq!(engine.checkpoint_now().unwrap(), Timestamp::ZERO);
    let stable = written[9].ts;
    engine.set_stable_timestamp(stable);
    assert_eq!(engine.checkpoint_now().unwrap(), stable);
    // It never moves back.
    engine.set_stable_timestamp(written[3].ts);
    assert_eq!(engine.stable_timestamp(), Some(stable));
    assert_eq!(engine.checkpoint_now().unwrap(), stable);

    // A crash: everything past the checkpoint comes back from the journal.
    drop(engine);
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    assert_eq!(engine.checkpoint_timestamp(), stable);
    assert_eq!(engine.last_applied(), written[19]);
    assert_eq!(ids(&engine, "db.c"), (0..20).collect::<Vec<_>>());
    // The stable timestamp restarts at the checkpoint: a clean shutdown
    // checkpoints no further either.
    assert_eq!(engine.stable_timestamp(), Some(stable));
    engine.shutdown().unwrap();
    drop(engine);
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    assert_eq!(engine.checkpoint_timestamp(), stable);
    assert_eq!(ids(&engine, "db.c"), (0..20).collect::<Vec<_>>());
    // So the rollback to the stable timestamp a member may need still works.
    assert_eq!(engine.write_gate(), WriteGate::Closed, "a member starts with the gate closed");
    engine.rollback_to(stable).unwrap();
    assert_eq!(ids(&engine, "db.c"), (0..10).collect::<Vec<_>>());
    assert_eq!(engine.last_applied(), written[9]);
    engine.shutdown().unwrap();
}

/// Background checkpoints every few milliseconds while writes go on and the
/// stable timestamp moves: a rollback to any point at or after the stable
/// timestamp always succeeds (the checkpoint never passes it).
#[test]
fn rollback_to_any_point_at_or_after_stable_works_under_background_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path(), true);
    opts.checkpoint_interval_ms = 2;
    let engine = Engine::open(opts).unwrap();
    let mut next_id: i32 = 0;
    for round in 0..30i32 {
        engine.set_write_gate(WriteGate::Open { term: i64::from(round) + 1 });
        let mut written = Vec::new();
        for _ in 0..10 {
            written.push(engine.writer().insert("db.c", doc! {"_id": next_id}).unwrap());
            next_id += 1;
        }
        engine.set_stable_timestamp(written[(round % 5) as usize].ts);
        std::thread::sleep(std::time::Duration::from_millis(3));
        engine.set_write_gate(WriteGate::Closed);
        let target = written[5 + (round % 5) as usize];
        assert!(engine.checkpoint_timestamp() <= engine.stable_timestamp().unwrap());
        engine.rollback_to(target.ts).unwrap();
        assert_eq!(engine.last_applied(), target);
        next_id -= 9 - (5 + round % 5);
    }
    assert!(engine.stats().checkpoints > 0, "the checkpoint thread ran");
    assert_eq!(ids(&engine, "db.c"), (0..next_id).collect::<Vec<_>>());
    engine.shutdown().unwrap();
}

#[test]
fn a_closed_gate_refuses_every_client_write() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    assert_eq!(engine.write_gate(), WriteGate::Closed);
    let refused = |result: Result<OpTime, StorageError>| matches!(result, Err(StorageError::NotWritablePrimary));
    assert!(refused(engine.writer().insert("db.c", doc! {"_id": 1})));
    assert!(refused(engine.writer().noop("new primary")));
    assert!(refused(engine.create_collection("db.c", Document::new())));
    engine.set_write_gate(WriteGate::Open { term: 2 });
    engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    engine.writer().insert("db.d", doc! {"_id": 1}).unwrap();
    engine.set_write_gate(WriteGate::Closed);
    let before = engine.last_applied();
    assert!(refused(engine.writer().update("db.c", &Bson::Int32(1), doc! {"_id": 1, "x": 1}, doc! {"$set": {"x": 1}})));
    assert!(refused(engine.writer().delete("db.c", &Bson::Int32(1))));
    assert!(refused(engine.drop_collection("db.c")));
    assert!(refused(engine.rename_collection("db.c", "db.e", false)));
    let spec = IndexSpec { name: "x_1".into(), key: doc! {"x": 1}, unique: false, sparse: false, ..Default::default() };
    assert!(matches!(engine.create_indexes("db.c", vec![spec]), Err(StorageError::NotWritablePrimary)));
    assert!(matches!(engine.drop_database("db"), Err(StorageError::NotWritablePrimary)));
    assert_eq!(engine.last_applied(), before, "nothing was logged");
    assert_eq!(ids(&engine, "db.c"), vec![1]);
    engine.shutdown().unwrap();

    // A standalone takes writes from the start, with the uninitialized term.
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), false)).unwrap();
    assert_eq!(engine.write_gate(), WriteGate::Open { term: -1 });
    assert_eq!(engine.writer().insert("db.c", doc! {"_id": 1}).unwrap().term, -1);
    engine.shutdown().unwrap();
}

#[test]
fn entries_carry_the_term_of_the_open_gate() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 7 });
    let optime = engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    assert_eq!(optime.term, 7);
    assert_eq!(engine.last_applied(), optime);
    engine.set_write_gate(WriteGate::Open { term: 8 });
    let noop = engine.writer().noop("new primary").unwrap();
    assert_eq!(noop.term, 8);
    let terms: Vec<i64> = oplog(&engine).iter().map(|e| e.get_i64("t").unwrap()).collect();
    assert_eq!(terms, vec![7, 7, 8], "create, insert, noop");
    // The term survives a restart (it is read back from the entries).
    drop(engine);
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    assert_eq!(engine.last_applied(), noop);
    engine.shutdown().unwrap();
}

/// Writers race a gate that opens with a new term and closes again, over
/// and over: no entry commits after `Closed` has returned, and every entry
/// carries the term of the gate that was open when it committed.
#[test]
fn writers_racing_gate_switches_never_commit_after_closed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (engine, stop, next_id) = (engine.clone(), stop.clone(), next_id.clone());
            std::thread::spawn(move || {
                let (mut committed, mut refused) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let id = next_id.fetch_add(1, Ordering::Relaxed) as i64;
                    match engine.writer().insert("db.c", doc! {"_id": id}) {
                        Ok(_) => committed += 1,
                        Err(StorageError::NotWritablePrimary) => refused += 1,
                        Err(other) => panic!("{other}"),
                    }
                }
                (committed, refused)
            })
        })
        .collect();
    // (term, last applied when Closed returned)
    let mut periods: Vec<(i64, Timestamp)> = Vec::new();
    for term in 1..=40 {
        engine.set_write_gate(WriteGate::Open { term });
        std::thread::sleep(std::time::Duration::from_micros(500));
        engine.set_write_gate(WriteGate::Closed);
        periods.push((term, engine.last_applied().ts));
        std::thread::sleep(std::time::Duration::from_micros(200));
        assert_eq!(engine.last_applied().ts, periods.last().unwrap().1, "a write committed after Closed returned");
    }
    stop.store(true, Ordering::Relaxed);
    let (committed, refused) =
        writers.into_iter().map(|w| w.join().unwrap()).fold((0, 0), |(c, r), (c2, r2)| (c + c2, r + r2));
    assert!(committed > 0 && refused > 0, "the race did not happen: {committed} committed, {refused} refused");
    let entries = oplog(&engine);
    assert_eq!(entries.len() as u64, committed + 1, "every insert plus the collection's create");
    for entry in &entries {
        let ts = entry_ts(entry);
        let (term, _) = periods.iter().find(|(_, closed_at)| ts <= *closed_at).expect("no entry after the last close");
        assert_eq!(entry.get_i64("t").unwrap(), *term, "entry at {ts}");
    }
    engine.shutdown().unwrap();
}

#[test]
fn clients_cannot_write_to_local_on_a_member() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), true)).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    let illegal = |result: Result<OpTime, StorageError>| matches!(result, Err(StorageError::IllegalOperation(_)));
    assert!(illegal(engine.writer().insert("local.c", doc! {"_id": 1})));
    assert!(illegal(engine.create_collection("local.c", Document::new())));
    engine.writer().insert("db.c", doc! {"_id": 1}).unwrap();
    assert!(illegal(engine.rename_collection("db.c", "local.c", false)));
    assert!(matches!(engine.drop_database("local"), Ok(None)), "nothing there to drop, nothing logged");
    assert!(oplog(&engine).iter().all(|e| !e.get_str("ns").unwrap().starts_with("local")));
    assert!(engine.list_collections("local").is_empty());
    engine.shutdown().unwrap();

    // A standalone's clients may (MongoDB allows it; nothing replicates).
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path(), false)).unwrap();
    engine.writer().insert("local.c", doc! {"_id": 1}).unwrap();
    engine.shutdown().unwrap();
}
