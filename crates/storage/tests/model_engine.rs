//! Model test: random inserts, updates, deletes, index creation and drops,
//! checkpoints, clean and unclean reopens and rollbacks, every one mirrored
//! in a `BTreeMap` model; after each step every collection and every index
//! scan is compared with the model, and reads at random past timestamps
//! (at or above the checkpoint) are compared with the model's history.
//!
//! Some inserts are retryable writes of a few sessions: the model keeps
//! each session's transaction number and last write, compared with
//! `config.transactions` like any collection. A replica set member's run
//! (`replicated`) also moves the stable timestamp: rollbacks then go to any
//! point at or after it and must succeed, and checkpoints must never pass
//! it. At the end, a second engine applies the whole oplog with
//! `apply_batch` in batches of random size and must match the model too.
//!
//! A member's run with no room for versions in memory (`history_bytes_max`
//! 0) checkpoints past the stable timestamp at every chance, keeping the
//! history on disk: rollbacks to any point at or after the stable timestamp
//! must still succeed, also after an unclean reopen, and reads at any past
//! timestamp at or above the history floor must match the model.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::index_key::{index_keys, record_key, KeyPattern};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StatementSession, StorageError, Timestamp, WriteGate};
use slipstream_storage::TimestampBson;

const COLLECTIONS: [&str; 2] = ["db.a", "db.b"];

/// The model of one collection: documents by `_id`, and index specs.
#[derive(Clone, Debug, Default, PartialEq)]
struct ModelCollection {
    documents: BTreeMap<i32, Document>,
    indexes: Vec<IndexSpec>,
}

/// Sessions whose retryable writes the run makes.
const SESSIONS: usize = 2;

/// The model: collections by namespace, and per session the transaction
/// number and timestamp of its newest retryable write.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    collections: BTreeMap<String, ModelCollection>,
    sessions: BTreeMap<usize, (i64, Timestamp)>,
}

fn lsid(session: usize) -> Document {
    doc! {"id": format!("session-{session}")}
}

#[derive(Clone, Debug)]
enum Op {
    /// `session`: (which session, whether it starts a new transaction).
    Insert { coll: usize, id: i32, a: Bson, b: Option<i32>, session: Option<(usize, bool)> },
    Update { coll: usize, id: i32, a: Bson, b: Option<i32> },
    Delete { coll: usize, id: i32 },
    CreateIndex { coll: usize, which: usize },
    DropIndex { coll: usize, which: usize },
    DropCollection { coll: usize },
    Rename { from: usize, to: usize, drop_target: bool },
    Checkpoint,
    Reopen { clean: bool },
    Rollback { back: usize },
    ReadPast { back: usize },
    /// Replication moves the commit point (replicated runs only).
    SetStable { back: usize },
}

fn value_a() -> impl Strategy<Value = Bson> {
    prop_oneof![
        (0..5i32).prop_map(Bson::Int32),
        proptest::collection::vec(0..5i32, 0..3).prop_map(|v| Bson::Array(v.into_iter().map(Bson::Int32).collect())),
        Just(Bson::String("s".into())),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let coll = 0..COLLECTIONS.len();
    prop_oneof![
        6 => (coll.clone(), 0..12i32, value_a(), proptest::option::of(0..6i32), proptest::option::of((0..SESSIONS, any::<bool>())))
            .prop_map(|(coll, id, a, b, session)| Op::Insert { coll, id, a, b, session }),
        4 => (coll.clone(), 0..12i32, value_a(), proptest::option::of(0..6i32)).prop_map(|(coll, id, a, b)| Op::Update { coll, id, a, b }),
        2 => (coll.clone(), 0..12i32).prop_map(|(coll, id)| Op::Delete { coll, id }),
        1 => (coll.clone(), 0..3usize).prop_map(|(coll, which)| Op::CreateIndex { coll, which }),
        1 => (coll.clone(), 0..3usize).prop_map(|(coll, which)| Op::DropIndex { coll, which }),
        1 => coll.clone().prop_map(|coll| Op::DropCollection { coll }),
        1 => (coll.clone(), coll, any::<bool>()).prop_map(|(from, to, drop_target)| Op::Rename { from, to, drop_target }),
        1 => Just(Op::Checkpoint),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => (1..6usize).prop_map(|back| Op::Rollback { back }),
        2 => (0..20usize).prop_map(|back| Op::ReadPast { back }),
        2 => (0..8usize).prop_map(|back| Op::SetStable { back }),
    ]
}

fn index_spec(which: usize) -> IndexSpec {
    match which {
        0 => IndexSpec { name: "a_1".into(), key: doc! {"a": 1}, unique: false, sparse: false, ..Default::default() },
        1 => IndexSpec { name: "b_1_unique_sparse".into(), key: doc! {"b": 1}, unique: true, sparse: true, ..Default::default() },
        _ => IndexSpec { name: "b_-1_a_1".into(), key: doc! {"b": -1, "a": 1}, unique: false, sparse: false, ..Default::default() },
    }
}

fn make_doc(id: i32, a: &Bson, b: Option<i32>) -> Document {
    let mut d = doc! {"_id": id, "a": a.clone()};
    if let Some(b) = b {
        d.insert("b", b);
    }
    d
}

/// Whether `doc` would violate a unique index of the model collection.
fn violates_unique(coll: &ModelCollection, doc: &Document) -> bool {
    let id = doc.get_i32("_id").unwrap();
    coll.indexes.iter().filter(|spec| spec.unique).any(|spec| {
        let pattern = KeyPattern::parse(&spec.key).unwrap();
        let keys = index_keys(doc, &pattern, spec.sparse).unwrap().keys;
        coll.documents.iter().filter(|(other, _)| **other != id).any(|(_, other)| {
            let other_keys = index_keys(other, &pattern, spec.sparse).unwrap().keys;
            keys.iter().any(|k| other_keys.contains(k))
        })
    })
}

fn options(dir: &std::path::Path, checkpoint_interval_ms: u64, replicated: bool) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = checkpoint_interval_ms;
    options.journal_commit_interval_ms = 2;
    options.replicated = replicated;
    options
}

/// How one run's engines are configured.
#[derive(Clone, Copy)]
struct RunConfig {
    checkpoint_interval_ms: u64,
    replicated: bool,
    history_bytes_max: u64,
}

impl RunConfig {
    fn new(checkpoint_interval_ms: u64, replicated: bool) -> Self {
        RunConfig { checkpoint_interval_ms, replicated, history_bytes_max: EngineOptions::new("").history_bytes_max }
    }

    /// Every checkpoint goes as far as it can, past the stable timestamp.
    fn past_stable(checkpoint_interval_ms: u64) -> Self {
        RunConfig { history_bytes_max: 0, ..RunConfig::new(checkpoint_interval_ms, true) }
    }
}

/// Every collection and index of the engine at `at`, as the model has it.
fn compare(engine: &Arc<Engine>, at: ReadAt, model: &Model) -> Result<(), TestCaseError> {
    let reader = match engine.reader(at) {
        Ok(reader) => reader,
        // A background checkpoint passed the timestamp since the caller looked.
        Err(StorageError::SnapshotTooOld(_)) if matches!(at, ReadAt::At(ts) if engine.oldest_timestamp() > ts) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("reader: {e}"))),
    };
    for session in 0..SESSIONS {
        let record = reader.session_record(&lsid(session)).unwrap();
        let got = record.map(|r| {
            let last = r.get_document("lastWriteOpTime").unwrap().get_timestamp("ts").unwrap();
            (r.get_i64("txnNum").unwrap(), Timestamp::from_bson(last))
        });
        prop_assert_eq!(got, model.sessions.get(&session).copied(), "session {} at {:?}", session, at);
    }
    for ns in COLLECTIONS {
        let expected = model.collections.get(ns);
        let info = reader.collection_info(ns);
        prop_assert_eq!(info.is_some(), expected.is_some(), "collection {} existence at {:?}", ns, at);
        let docs: Vec<Document> =
            reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap().into_iter().map(|(_, d)| d).collect();
        let expected_docs: Vec<Document> = expected.map(|c| c.documents.values().cloned().collect()).unwrap_or_default();
        prop_assert_eq!(&docs, &expected_docs, "documents of {} at {:?}", ns, at);
        prop_assert_eq!(reader.count(ns).unwrap(), expected_docs.len() as u64);
        let reversed: Vec<Document> =
            reader.scan(ns, Bound::Unbounded, Bound::Unbounded, true, usize::MAX).unwrap().into_iter().map(|(_, d)| d).collect();
        let mut expected_reversed = expected_docs.clone();
        expected_reversed.reverse();
        prop_assert_eq!(reversed, expected_reversed);
        for doc in &expected_docs {
            let got = reader.get(ns, doc.get("_id").unwrap()).unwrap();
            prop_assert_eq!(got.as_ref(), Some(doc));
        }
        let Some(expected) = expected else { continue };
        let info = info.unwrap();
        let names: Vec<String> = info.indexes.iter().map(|i| i.name.clone()).collect();
        let mut expected_names = vec!["_id_".to_string()];
        expected_names.extend(expected.indexes.iter().map(|i| i.name.clone()));
        prop_assert_eq!(names, expected_names, "indexes of {}", ns);
        for spec in &expected.indexes {
            let pattern = KeyPattern::parse(&spec.key).unwrap();
            let mut wanted: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for doc in expected.documents.values() {
                let rk = record_key(doc.get("_id").unwrap());
                for key in index_keys(doc, &pattern, spec.sparse).unwrap().keys {
                    wanted.push((key, rk.clone()));
                }
            }
            wanted.sort();
            let entries = reader.scan_index(ns, &spec.name, Bound::Unbounded, Bound::Unbounded, false, None, usize::MAX).unwrap();
            let got: Vec<(Vec<u8>, Vec<u8>)> = entries.iter().map(|e| (e.index_key.clone(), e.record_key.clone())).collect();
            prop_assert_eq!(&got, &wanted, "index {} of {}", &spec.name, ns);
            // Paging with resume_after sees the same entries.
            let mut paged = Vec::new();
            let mut resume = None;
            loop {
                let page = reader.scan_index(ns, &spec.name, Bound::Unbounded, Bound::Unbounded, false, resume.clone(), 3).unwrap();
                if page.is_empty() {
                    break;
                }
                resume = page.last().map(|e| (e.index_key.clone(), e.record_key.clone()));
                paged.extend(page.into_iter().map(|e| (e.index_key, e.record_key)));
            }
            prop_assert_eq!(&paged, &wanted, "paged index {} of {}", &spec.name, ns);
            for entry in &entries {
                let id = entry.document.get_i32("_id").unwrap();
                prop_assert_eq!(Some(&entry.document), expected.documents.get(&id));
            }
        }
    }
    Ok(())
}

/// The timestamp of the first oplog entry after `ts` (an implicit create).
fn first_entry_after(engine: &Arc<Engine>, ts: Timestamp) -> Timestamp {
    let entries = engine.oplog_read(Bound::Excluded(ts), 1, 1 << 20).unwrap();
    let entry = entries.first().expect("an entry after the create");
    assert_eq!(entry.get_str("op").unwrap(), "c");
    Timestamp::from_bson(entry.get_timestamp("ts").unwrap())
}

/// A member's engine starts with its gate closed: open it with a new term.
fn open_engine(dir: &std::path::Path, config: RunConfig, term: &mut i64) -> Arc<Engine> {
    let mut options = options(dir, config.checkpoint_interval_ms, config.replicated);
    options.history_bytes_max = config.history_bytes_max;
    let engine = Engine::open(options).unwrap();
    if config.replicated {
        *term += 1;
        engine.set_write_gate(WriteGate::Open { term: *term });
    }
    engine
}

fn run(ops: Vec<Op>, config: RunConfig, batch_entries: usize) -> Result<(), TestCaseError> {
    let RunConfig { checkpoint_interval_ms, replicated, .. } = config;
    let keeps_history = config.history_bytes_max == 0;
    let dir = tempfile::tempdir().unwrap();
    let mut term = 0;
    let mut engine = open_engine(dir.path(), config, &mut term);
    let mut model = Model::default();
    // The model after every entry, by the entry's timestamp.
    let mut history: Vec<(Timestamp, Model)> = vec![(Timestamp::ZERO, model.clone())];
    for op in ops {
        match op {
            Op::Insert { coll, id, a, b, session } => {
                let ns = COLLECTIONS[coll];
                let document = make_doc(id, &a, b);
                let entry = model.collections.get(ns).cloned().unwrap_or_default();
                let expect_error = entry.documents.contains_key(&id) || violates_unique(&entry, &document);
                let created = !model.collections.contains_key(ns);
                let before = engine.last_applied().ts;
                let mut writer = engine.writer();
                let txn = session.map(|(which, new_txn)| {
                    let current = model.sessions.get(&which).map_or(0, |(txn, _)| *txn);
                    let txn_number = if new_txn || current == 0 { current + 1 } else { current };
                    writer.set_session(Some(StatementSession { lsid: lsid(which), txn_number, stmt_id: 0 }));
                    (which, txn_number)
                });
                let result = writer.insert(ns, document.clone());
                drop(writer);
                if created {
                    // The implicit create is logged (and applied) even if the insert fails.
                    model.collections.insert(ns.to_string(), ModelCollection::default());
                    history.push((first_entry_after(&engine, before), model.clone()));
                }
                match result {
                    Ok(optime) => {
                        prop_assert!(!expect_error, "insert of {} should fail", document);
                        model.collections.get_mut(ns).unwrap().documents.insert(id, document);
                        if let Some((which, txn_number)) = txn {
                            model.sessions.insert(which, (txn_number, optime.ts));
                        }
                        history.push((optime.ts, model.clone()));
                    }
                    Err(StorageError::DuplicateKey { .. }) => prop_assert!(expect_error, "unexpected DuplicateKey for {}", document),
                    Err(other) => return Err(TestCaseError::fail(format!("insert: {other}"))),
                }
            }
            Op::Update { coll, id, a, b } => {
                let ns = COLLECTIONS[coll];
                let Some(entry) = model.collections.get(ns) else { continue };
                let Some(old) = entry.documents.get(&id) else { continue };
                let new = make_doc(id, &a, b);
                let form = slipstream_query::update::oplog_update(old, &new);
                let expect_error = violates_unique(entry, &new);
                match engine.writer().update(ns, &Bson::Int32(id), new.clone(), form) {
                    Ok(optime) => {
                        prop_assert!(!expect_error);
                        model.collections.get_mut(ns).unwrap().documents.insert(id, new);
                        history.push((optime.ts, model.clone()));
                    }
                    Err(StorageError::DuplicateKey { .. }) => prop_assert!(expect_error),
                    Err(other) => return Err(TestCaseError::fail(format!("update: {other}"))),
                }
            }
            Op::Delete { coll, id } => {
                let ns = COLLECTIONS[coll];
                if !model.collections.get(ns).is_some_and(|c| c.documents.contains_key(&id)) {
                    continue;
                }
                let optime = engine.writer().delete(ns, &Bson::Int32(id)).unwrap();
                model.collections.get_mut(ns).unwrap().documents.remove(&id);
                history.push((optime.ts, model.clone()));
            }
            Op::CreateIndex { coll, which } => {
                let ns = COLLECTIONS[coll];
                let spec = index_spec(which);
                let entry = model.collections.get(ns).cloned().unwrap_or_default();
                let exists = entry.indexes.iter().any(|i| i.name == spec.name);
                let mut with_index = entry.clone();
                with_index.indexes = vec![spec.clone()];
                let violates = !exists && entry.documents.values().any(|d| violates_unique(&with_index, d));
                let created = !model.collections.contains_key(ns);
                let before = engine.last_applied().ts;
                let result = engine.create_indexes(ns, vec![spec.clone()]);
                if created {
                    model.collections.insert(ns.to_string(), ModelCollection::default());
                    history.push((first_entry_after(&engine, before), model.clone()));
                }
                match result {
                    Ok((_, _, optime)) => {
                        prop_assert!(!violates);
                        if !exists {
                            model.collections.get_mut(ns).unwrap().indexes.push(spec);
                            history.push((optime.unwrap().ts, model.clone()));
                        }
                    }
                    Err(StorageError::DuplicateKey { .. }) => prop_assert!(violates),
                    Err(other) => return Err(TestCaseError::fail(format!("createIndexes: {other}"))),
                }
            }
            Op::DropIndex { coll, which } => {
                let ns = COLLECTIONS[coll];
                let spec = index_spec(which);
                if !model.collections.get(ns).is_some_and(|c| c.indexes.iter().any(|i| i.name == spec.name)) {
                    continue;
                }
                let (_, optime) = engine.drop_indexes(ns, std::slice::from_ref(&spec.name)).unwrap();
                model.collections.get_mut(ns).unwrap().indexes.retain(|i| i.name != spec.name);
                history.push((optime.ts, model.clone()));
            }
            Op::DropCollection { coll } => {
                let ns = COLLECTIONS[coll];
                if !model.collections.contains_key(ns) {
                    prop_assert!(matches!(engine.drop_collection(ns), Err(StorageError::NamespaceNotFound(_))));
                    continue;
                }
                let optime = engine.drop_collection(ns).unwrap();
                model.collections.remove(ns);
                history.push((optime.ts, model.clone()));
            }
            Op::Rename { from, to, drop_target } => {
                let (from, to) = (COLLECTIONS[from], COLLECTIONS[to]);
                let result = engine.rename_collection(from, to, drop_target);
                if from == to {
                    prop_assert!(matches!(result, Err(StorageError::InvalidDocument(_))), "{:?}", result);
                } else if !model.collections.contains_key(from) {
                    prop_assert!(matches!(result, Err(StorageError::NamespaceNotFound(_))), "{:?}", result);
                } else if model.collections.contains_key(to) && !drop_target {
                    prop_assert!(matches!(result, Err(StorageError::NamespaceExists(_))), "{:?}", result);
                } else {
                    let optime = result.map_err(|e| TestCaseError::fail(format!("rename: {e}")))?;
                    let moved = model.collections.remove(from).unwrap();
                    model.collections.insert(to.to_string(), moved);
                    history.push((optime.ts, model.clone()));
                }
            }
            Op::Checkpoint => {
                let at = engine.checkpoint_now().unwrap();
                if keeps_history {
                    // No version stays in memory, and the history reaches the stable timestamp.
                    prop_assert!(at <= engine.last_applied().ts);
                    prop_assert!(engine.oldest_timestamp() <= engine.stable_timestamp().unwrap());
                    prop_assert_eq!(engine.stats().versions_in_memory, 0);
                } else if replicated {
                    prop_assert!(at <= engine.stable_timestamp().unwrap(), "a checkpoint at {} passed the stable timestamp", at);
                }
            }
            Op::Reopen { clean } => {
                if clean {
                    engine.shutdown().unwrap();
                }
                drop(engine);
                engine = open_engine(dir.path(), config, &mut term);
                // Everything comes back, however far the stable timestamp
                // (and so the checkpoint) lags.
                prop_assert_eq!(engine.last_applied().ts, history.last().unwrap().0.max(engine.checkpoint_timestamp()));
            }
            Op::SetStable { back } => {
                if replicated {
                    let position = history.len().saturating_sub(1 + back);
                    engine.set_stable_timestamp(history[position].0);
                }
            }
            Op::Rollback { back } => {
                // A member may roll back to any point at or after its stable
                // timestamp; a standalone only to one at or after its checkpoint.
                let floor = match engine.stable_timestamp() {
                    Some(stable) if replicated => stable,
                    _ => engine.checkpoint_timestamp(),
                };
                let candidates: Vec<usize> = (0..history.len()).filter(|i| history[*i].0 >= floor).collect();
                if candidates.len() <= back {
                    continue;
                }
                let position = candidates[candidates.len() - 1 - back];
                let ts = history[position].0;
                engine.set_write_gate(WriteGate::Closed);
                let result = engine.rollback_to(ts);
                engine.set_write_gate(WriteGate::Open { term: if replicated { term } else { -1 } });
                match result {
                    Ok(()) => {}
                    // A background checkpoint passed `ts` meanwhile (a
                    // standalone's checkpoints follow the durable timestamp).
                    Err(StorageError::SnapshotTooOld(_)) if !replicated && engine.checkpoint_timestamp() > ts => continue,
                    Err(other) => return Err(TestCaseError::fail(format!("rollback_to: {other}"))),
                }
                history.truncate(position + 1);
                model = history[position].1.clone();
                let newest = engine.oplog_read_newest(1).unwrap();
                if let Some(entry) = newest.first() {
                    let entry_ts = entry.get_timestamp("ts").unwrap();
                    prop_assert!(Timestamp::from_bson(entry_ts) <= ts, "oplog keeps an entry above the rollback point");
                }
            }
            Op::ReadPast { back } => {
                let oldest = engine.oldest_timestamp();
                let position = history.len().saturating_sub(1 + back);
                let (ts, past) = &history[position];
                if *ts < oldest {
                    prop_assert!(matches!(engine.reader(ReadAt::At(*ts)), Err(StorageError::SnapshotTooOld(_))) || *ts == oldest);
                    continue;
                }
                match engine.reader(ReadAt::At(*ts)) {
                    Ok(_) => compare(&engine, ReadAt::At(*ts), past)?,
                    // A background checkpoint passed `ts` meanwhile.
                    Err(StorageError::SnapshotTooOld(_)) if engine.oldest_timestamp() > *ts => continue,
                    Err(other) => return Err(TestCaseError::fail(format!("reader: {other}"))),
                }
            }
        }
        compare(&engine, ReadAt::Latest, &model)?;
    }
    for ns in COLLECTIONS {
        if model.collections.contains_key(ns) {
            let report = engine.validate(ns).unwrap();
            prop_assert!(report.valid, "{:?}", report.errors);
        }
    }
    // A member fed this oplog reaches the same state.
    let secondary_dir = tempfile::tempdir().unwrap();
    let secondary = Engine::open(options(secondary_dir.path(), checkpoint_interval_ms, true)).unwrap();
    let entries = engine.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    for batch in entries.chunks(batch_entries) {
        secondary.apply_batch(batch).map_err(|e| TestCaseError::fail(format!("apply_batch: {e}")))?;
    }
    prop_assert_eq!(secondary.last_applied(), engine.last_applied());
    compare(&secondary, ReadAt::Latest, &model)?;
    secondary.shutdown().unwrap();
    engine.shutdown().unwrap();
    drop(engine);
    let engine = open_engine(dir.path(), config, &mut term);
    compare(&engine, ReadAt::Latest, &model)?;
    engine.shutdown().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model_with_explicit_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::new(60_000, false), batch)?;
    }

    #[test]
    fn engine_matches_model_with_background_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::new(3, false), batch)?;
    }

    #[test]
    fn member_engine_matches_model_with_explicit_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::new(60_000, true), batch)?;
    }

    #[test]
    fn member_engine_matches_model_with_background_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::new(3, true), batch)?;
    }

    #[test]
    fn member_engine_past_stable_matches_model_with_explicit_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::past_stable(60_000), batch)?;
    }

    #[test]
    fn member_engine_past_stable_matches_model_with_background_checkpoints(ops in proptest::collection::vec(op(), 1..60), batch in 1..8usize) {
        run(ops, RunConfig::past_stable(3), batch)?;
    }
}
