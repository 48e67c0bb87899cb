//! A second engine that applies the first one's oplog (as a secondary
//! will) ends with the same collections, indexes, documents and dbHash,
//! and the same oplog.

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
    primary.create_indexes("app.users", vec![IndexSpec { name: "email_1".into(), key: doc! {"email": 1}, unique: true, sparse: false }]).unwrap();
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
