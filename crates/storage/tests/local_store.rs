//! The durable local documents (`Engine::local()`): written durably by
//! temporary file, fsync, rename and directory fsync; a crash at any point
//! of a write leaves the old document or the new one; readable through a
//! `Reader` as the one document of the read-only collection `local.<name>`.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_query::index_key::record_key;
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::io::{Fault, FaultyIo};
use slipstream_storage::local_store::{LOCAL_DIR_NAME, LOCAL_DOCUMENTS_MAX};
use slipstream_storage::poison::PoisonPolicy;
use slipstream_storage::{Engine, ReadAt, StorageError, WriteGate};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.poison_policy = PoisonPolicy::RefuseLaterCalls;
    options.replicated = true;
    options
}

fn config(version: i32) -> Document {
    let members: Vec<Bson> = (0..3).map(|i| Bson::Document(doc! {"_id": i, "host": format!("h{i}:27017")})).collect();
    doc! {"_id": "rs0", "version": version, "term": 1_i64, "members": members, "pad": "x".repeat(300)}
}

#[test]
fn documents_are_durable_and_read_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.local().read("system.replset").unwrap(), None);
    engine.local().write("system.replset", &config(1)).unwrap();
    engine.local().write("replset.election", &doc! {"_id": "election", "term": 3_i64, "votedFor": 1}).unwrap();
    engine.local().write("system.replset", &config(2)).unwrap();
    assert_eq!(engine.local().read("system.replset").unwrap(), Some(config(2)));
    assert_eq!(engine.local().names(), vec!["replset.election".to_string(), "system.replset".to_string()]);
    // A crash right after: every write returned after its fsyncs.
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    assert_eq!(engine.local().read("system.replset").unwrap(), Some(config(2)));
    assert_eq!(engine.local().read("replset.election").unwrap().unwrap().get_i64("term").unwrap(), 3);
    let files = std::fs::read_dir(dir.path().join(LOCAL_DIR_NAME)).unwrap().count();
    assert_eq!(files, 2, "one file per document, no temporary left");
    engine.shutdown().unwrap();
}

#[test]
fn names_sizes_and_counts_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let doc = doc! {"_id": 1};
    for bad in ["", "../x", "a/b", ".hidden", "oplog.rs", "space here", &"n".repeat(65)] {
        assert!(matches!(engine.local().write(bad, &doc), Err(StorageError::InvalidNamespace(_))), "{bad:?}");
        assert!(matches!(engine.local().read(bad), Err(StorageError::InvalidNamespace(_))), "{bad:?}");
    }
    assert!(matches!(engine.local().write("no_id", &doc! {"term": 1}), Err(StorageError::InvalidDocument(_))));
    let big = doc! {"_id": 1, "s": "x".repeat(16 * 1024 * 1024)};
    assert!(matches!(engine.local().write("big", &big), Err(StorageError::DocumentTooLarge(_))));
    for i in 0..LOCAL_DOCUMENTS_MAX {
        engine.local().write(&format!("d{i}"), &doc).unwrap();
    }
    assert!(matches!(engine.local().write("one.more", &doc), Err(StorageError::IllegalOperation(_))));
    engine.local().write("d0", &doc! {"_id": 2}).unwrap();
    engine.shutdown().unwrap();
}

/// A write cut at every step (a torn write of the temporary file, a failed
/// fsync of it, a failed directory fsync after the rename), then a power
/// loss keeping none, some or all of what was not fsynced: the document
/// read after a restart is the old one or the new one, and the new one
/// whenever the write returned.
#[test]
fn a_write_torn_at_any_point_leaves_the_old_or_the_new_document() {
    let old = config(1);
    let new = config(2);
    let new_len = new.to_vec().unwrap().len();
    let faults: Vec<Option<Fault>> = vec![
        Some(Fault::Write { nth: 1, partial_bytes: None }),
        Some(Fault::Write { nth: 1, partial_bytes: Some(3) }),
        Some(Fault::Write { nth: 1, partial_bytes: Some(new_len / 2) }),
        Some(Fault::Write { nth: 1, partial_bytes: Some(new_len - 1) }),
        Some(Fault::Sync { nth: 1 }),
        Some(Fault::Sync { nth: 2 }),
        None,
    ];
    let mut outcomes = Vec::new();
    for fault in faults {
        for keep_unsynced_bytes in [0, 7, u64::MAX] {
            let dir = tempfile::tempdir().unwrap();
            let engine = Engine::open(options(dir.path())).unwrap();
            engine.local().write("system.replset", &old).unwrap();
            engine.shutdown().unwrap();
            drop(engine);

            let faulty = FaultyIo::over_std();
            let engine = Engine::open_with_io(options(dir.path()), faulty.as_backend()).unwrap();
            if let Some(fault) = fault {
                faulty.arm(fault);
            }
            let result = engine.local().write("system.replset", &new);
            assert_eq!(result.is_ok(), fault.is_none(), "{fault:?}: {result:?}");
            if fault.is_some() {
                // Poisoned: nothing is retried.
                let again = engine.local().write("system.replset", &new);
                assert!(matches!(again, Err(StorageError::Poisoned(_))), "{again:?}");
                assert_eq!(faulty.ops_after_fault_under(&dir.path().join(LOCAL_DIR_NAME)), 0);
            }
            faulty.power_off();
            drop(engine);
            faulty.crash(keep_unsynced_bytes).unwrap();

            let engine = Engine::open(options(dir.path())).unwrap();
            let found = engine.local().read("system.replset").unwrap().expect("a document survives");
            assert!(found == old || found == new, "{fault:?}, keeping {keep_unsynced_bytes}: a broken document");
            if result.is_ok() {
                assert_eq!(found, new, "{fault:?}: an acknowledged write was lost");
            }
            outcomes.push((fault, found == new));
            engine.shutdown().unwrap();
        }
    }
    // The failed directory fsync is the case where a crash brings the old
    // name back: the model must have exercised it.
    assert!(outcomes.iter().any(|(fault, is_new)| *fault == Some(Fault::Sync { nth: 2 }) && !is_new));
}

#[test]
fn local_documents_read_as_one_document_collections() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let before = engine.reader(ReadAt::Latest).unwrap();
    engine.local().write("system.replset", &config(1)).unwrap();
    engine.local().write("replset.rbid", &doc! {"_id": "rbid", "rbid": 7}).unwrap();
    let ns = "local.system.replset";
    let info = engine.collection_info(ns).unwrap();
    assert_eq!(info.indexes.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), vec!["_id_"]);
    let names: Vec<String> = engine.list_collections("local").into_iter().map(|c| c.ns).collect();
    assert_eq!(names, vec!["local.replset.rbid".to_string(), ns.to_string()]);
    assert!(engine.list_databases().contains(&"local".to_string()));

    let reader = engine.reader(ReadAt::Latest).unwrap();
    assert_eq!(reader.collection_info(ns), Some(info));
    let all = reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX).unwrap();
    assert_eq!(all, vec![(record_key(&Bson::String("rs0".into())), config(1))]);
    assert_eq!(reader.count(ns).unwrap(), 1);
    assert_eq!(reader.get(ns, &Bson::String("rs0".into())).unwrap(), Some(config(1)));
    assert_eq!(reader.get(ns, &Bson::String("rs1".into())).unwrap(), None);
    let key = record_key(&Bson::String("rs0".into()));
    assert!(reader.scan(ns, Bound::Excluded(key.clone()), Bound::Unbounded, false, 10).unwrap().is_empty());
    assert_eq!(reader.scan(ns, Bound::Included(key.clone()), Bound::Included(key), false, 10).unwrap().len(), 1);
    assert_eq!(reader.scan(ns, Bound::Unbounded, Bound::Unbounded, false, 0).unwrap().len(), 0);
    let by_id = reader.scan_index(ns, "_id_", Bound::Unbounded, Bound::Unbounded, true, None, 5).unwrap();
    assert_eq!(by_id.len(), 1);
    assert!(matches!(
        reader.scan_index(ns, "x_1", Bound::Unbounded, Bound::Unbounded, false, None, 5),
        Err(StorageError::IndexNotFound(_))
    ));
    // A reader keeps the documents it was made with.
    assert_eq!(before.count(ns).unwrap(), 0);
    engine.local().write("system.replset", &config(2)).unwrap();
    assert_eq!(reader.get(ns, &Bson::String("rs0".into())).unwrap(), Some(config(1)));
    assert_eq!(engine.reader(ReadAt::Latest).unwrap().get(ns, &Bson::String("rs0".into())).unwrap(), Some(config(2)));
    // Clients cannot write there: every client write would replicate.
    engine.set_write_gate(WriteGate::Open { term: 1 });
    assert!(matches!(engine.writer().insert(ns, doc! {"_id": "x"}), Err(StorageError::IllegalOperation(_))));
    engine.shutdown().unwrap();
}

#[test]
fn concurrent_writers_of_different_documents_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(options(dir.path())).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let engine: Arc<Engine> = engine.clone();
            std::thread::spawn(move || {
                for round in 0..10 {
                    engine.local().write(&format!("doc{t}"), &doc! {"_id": t, "round": round}).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    drop(engine);
    let engine = Engine::open(options(dir.path())).unwrap();
    for t in 0..4 {
        assert_eq!(engine.local().read(&format!("doc{t}")).unwrap(), Some(doc! {"_id": t, "round": 9}));
    }
    engine.shutdown().unwrap();
}
