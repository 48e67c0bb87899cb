//! Model test: random inserts, updates, deletes, index creation and drops,
//! checkpoints, clean and unclean reopens and rollbacks, every one mirrored
//! in a `BTreeMap` model; after each step every collection and every index
//! scan is compared with the model, and reads at random past timestamps
//! (at or above the checkpoint) are compared with the model's history.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use proptest::prelude::*;
use slipstream_query::index_key::{index_keys, record_key, KeyPattern};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError, Timestamp, WriteGate};
use slipstream_storage::TimestampBson;

const COLLECTIONS: [&str; 2] = ["db.a", "db.b"];

/// The model of one collection: documents by `_id`, and index specs.
#[derive(Clone, Debug, Default, PartialEq)]
struct ModelCollection {
    documents: BTreeMap<i32, Document>,
    indexes: Vec<IndexSpec>,
}

type Model = BTreeMap<String, ModelCollection>;

#[derive(Clone, Debug)]
enum Op {
    Insert { coll: usize, id: i32, a: Bson, b: Option<i32> },
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
        6 => (coll.clone(), 0..12i32, value_a(), proptest::option::of(0..6i32)).prop_map(|(coll, id, a, b)| Op::Insert { coll, id, a, b }),
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
    ]
}

fn index_spec(which: usize) -> IndexSpec {
    match which {
        0 => IndexSpec { name: "a_1".into(), key: doc! {"a": 1}, unique: false, sparse: false },
        1 => IndexSpec { name: "b_1_unique_sparse".into(), key: doc! {"b": 1}, unique: true, sparse: true },
        _ => IndexSpec { name: "b_-1_a_1".into(), key: doc! {"b": -1, "a": 1}, unique: false, sparse: false },
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

fn options(dir: &std::path::Path, checkpoint_interval_ms: u64) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = checkpoint_interval_ms;
    options.journal_commit_interval_ms = 2;
    options
}

/// Every collection and index of the engine at `at`, as the model has it.
fn compare(engine: &Arc<Engine>, at: ReadAt, model: &Model) -> Result<(), TestCaseError> {
    let reader = match engine.reader(at) {
        Ok(reader) => reader,
        // A background checkpoint passed the timestamp since the caller looked.
        Err(StorageError::SnapshotTooOld(_)) if matches!(at, ReadAt::At(ts) if engine.checkpoint_timestamp() > ts) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("reader: {e}"))),
    };
    for ns in COLLECTIONS {
        let expected = model.get(ns);
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

fn run(ops: Vec<Op>, checkpoint_interval_ms: u64) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut engine = Engine::open(options(dir.path(), checkpoint_interval_ms)).unwrap();
    let mut model: Model = BTreeMap::new();
    // The model after every entry, by the entry's timestamp.
    let mut history: Vec<(Timestamp, Model)> = vec![(Timestamp::ZERO, model.clone())];
    for op in ops {
        match op {
            Op::Insert { coll, id, a, b } => {
                let ns = COLLECTIONS[coll];
                let document = make_doc(id, &a, b);
                let entry = model.get(ns).cloned().unwrap_or_default();
                let expect_error = entry.documents.contains_key(&id) || violates_unique(&entry, &document);
                let created = !model.contains_key(ns);
                let before = engine.last_applied().ts;
                let result = engine.writer().insert(ns, document.clone());
                if created {
                    // The implicit create is logged (and applied) even if the insert fails.
                    model.insert(ns.to_string(), ModelCollection::default());
                    history.push((first_entry_after(&engine, before), model.clone()));
                }
                match result {
                    Ok(optime) => {
                        prop_assert!(!expect_error, "insert of {} should fail", document);
                        model.get_mut(ns).unwrap().documents.insert(id, document);
                        history.push((optime.ts, model.clone()));
                    }
                    Err(StorageError::DuplicateKey { .. }) => prop_assert!(expect_error, "unexpected DuplicateKey for {}", document),
                    Err(other) => return Err(TestCaseError::fail(format!("insert: {other}"))),
                }
            }
            Op::Update { coll, id, a, b } => {
                let ns = COLLECTIONS[coll];
                let Some(entry) = model.get(ns) else { continue };
                let Some(old) = entry.documents.get(&id) else { continue };
                let new = make_doc(id, &a, b);
                let form = slipstream_query::update::oplog_update(old, &new);
                let expect_error = violates_unique(entry, &new);
                match engine.writer().update(ns, &Bson::Int32(id), new.clone(), form) {
                    Ok(optime) => {
                        prop_assert!(!expect_error);
                        model.get_mut(ns).unwrap().documents.insert(id, new);
                        history.push((optime.ts, model.clone()));
                    }
                    Err(StorageError::DuplicateKey { .. }) => prop_assert!(expect_error),
                    Err(other) => return Err(TestCaseError::fail(format!("update: {other}"))),
                }
            }
            Op::Delete { coll, id } => {
                let ns = COLLECTIONS[coll];
                if !model.get(ns).is_some_and(|c| c.documents.contains_key(&id)) {
                    continue;
                }
                let optime = engine.writer().delete(ns, &Bson::Int32(id)).unwrap();
                model.get_mut(ns).unwrap().documents.remove(&id);
                history.push((optime.ts, model.clone()));
            }
            Op::CreateIndex { coll, which } => {
                let ns = COLLECTIONS[coll];
                let spec = index_spec(which);
                let entry = model.get(ns).cloned().unwrap_or_default();
                let exists = entry.indexes.iter().any(|i| i.name == spec.name);
                let mut with_index = entry.clone();
                with_index.indexes = vec![spec.clone()];
                let violates = !exists && entry.documents.values().any(|d| violates_unique(&with_index, d));
                let created = !model.contains_key(ns);
                let before = engine.last_applied().ts;
                let result = engine.create_indexes(ns, vec![spec.clone()]);
                if created {
                    model.insert(ns.to_string(), ModelCollection::default());
                    history.push((first_entry_after(&engine, before), model.clone()));
                }
                match result {
                    Ok((_, _, optime)) => {
                        prop_assert!(!violates);
                        if !exists {
                            model.get_mut(ns).unwrap().indexes.push(spec);
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
                if !model.get(ns).is_some_and(|c| c.indexes.iter().any(|i| i.name == spec.name)) {
                    continue;
                }
                let (_, optime) = engine.drop_indexes(ns, std::slice::from_ref(&spec.name)).unwrap();
                model.get_mut(ns).unwrap().indexes.retain(|i| i.name != spec.name);
                history.push((optime.ts, model.clone()));
            }
            Op::DropCollection { coll } => {
                let ns = COLLECTIONS[coll];
                if !model.contains_key(ns) {
                    prop_assert!(matches!(engine.drop_collection(ns), Err(StorageError::NamespaceNotFound(_))));
                    continue;
                }
                let optime = engine.drop_collection(ns).unwrap();
                model.remove(ns);
                history.push((optime.ts, model.clone()));
            }
            Op::Rename { from, to, drop_target } => {
                let (from, to) = (COLLECTIONS[from], COLLECTIONS[to]);
                let result = engine.rename_collection(from, to, drop_target);
                if from == to {
                    prop_assert!(matches!(result, Err(StorageError::InvalidDocument(_))), "{:?}", result);
                } else if !model.contains_key(from) {
                    prop_assert!(matches!(result, Err(StorageError::NamespaceNotFound(_))), "{:?}", result);
                } else if model.contains_key(to) && !drop_target {
                    prop_assert!(matches!(result, Err(StorageError::NamespaceExists(_))), "{:?}", result);
                } else {
                    let optime = result.map_err(|e| TestCaseError::fail(format!("rename: {e}")))?;
                    let moved = model.remove(from).unwrap();
                    model.insert(to.to_string(), moved);
                    history.push((optime.ts, model.clone()));
                }
            }
            Op::Checkpoint => {
                engine.checkpoint_now().unwrap();
            }
            Op::Reopen { clean } => {
                if clean {
                    engine.shutdown().unwrap();
                }
                drop(engine);
                engine = Engine::open(options(dir.path(), checkpoint_interval_ms)).unwrap();
                prop_assert_eq!(engine.last_applied().ts, history.last().unwrap().0.max(engine.checkpoint_timestamp()));
            }
            Op::Rollback { back } => {
                let checkpoint = engine.checkpoint_timestamp();
                let candidates: Vec<usize> = (0..history.len()).filter(|i| history[*i].0 >= checkpoint).collect();
                if candidates.len() <= back {
                    continue;
                }
                let position = candidates[candidates.len() - 1 - back];
                let ts = history[position].0;
                engine.set_write_gate(WriteGate::Closed);
                let result = engine.rollback_to(ts);
                engine.set_write_gate(WriteGate::Open { term: -1 });
                match result {
                    Ok(()) => {}
                    // A background checkpoint passed `ts` meanwhile.
                    Err(StorageError::SnapshotTooOld(_)) if engine.checkpoint_timestamp() > ts => continue,
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
                let checkpoint = engine.checkpoint_timestamp();
                let position = history.len().saturating_sub(1 + back);
                let (ts, past) = &history[position];
                if *ts < checkpoint {
                    prop_assert!(matches!(engine.reader(ReadAt::At(*ts)), Err(StorageError::SnapshotTooOld(_))) || *ts == checkpoint);
                    continue;
                }
                match engine.reader(ReadAt::At(*ts)) {
                    Ok(_) => compare(&engine, ReadAt::At(*ts), past)?,
                    // A background checkpoint passed `ts` meanwhile.
                    Err(StorageError::SnapshotTooOld(_)) if engine.checkpoint_timestamp() > *ts => continue,
                    Err(other) => return Err(TestCaseError::fail(format!("reader: {other}"))),
                }
            }
        }
        compare(&engine, ReadAt::Latest, &model)?;
    }
    for ns in COLLECTIONS {
        if model.contains_key(ns) {
            let report = engine.validate(ns).unwrap();
            prop_assert!(report.valid, "{:?}", report.errors);
        }
    }
    engine.shutdown().unwrap();
    drop(engine);
    let engine = Engine::open(options(dir.path(), checkpoint_interval_ms)).unwrap();
    compare(&engine, ReadAt::Latest, &model)?;
    engine.shutdown().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model_with_explicit_checkpoints(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, 60_000)?;
    }

    #[test]
    fn engine_matches_model_with_background_checkpoints(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops, 3)?;
    }
}
