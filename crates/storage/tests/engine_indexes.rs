//! Index maintenance: unique (DuplicateKey with keyPattern and keyValue),
//! multikey, sparse, compound and descending, updates that move keys.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{Engine, IndexSpec, ReadAt, StorageError};

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    Engine::open(options).unwrap()
}

fn spec(name: &str, key: Document, unique: bool, sparse: bool) -> IndexSpec {
    IndexSpec { name: name.to_string(), key, unique, sparse, ..Default::default() }
}

fn ids_in_index(engine: &Arc<Engine>, ns: &str, index: &str, reverse: bool) -> Vec<Bson> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan_index(ns, index, Bound::Unbounded, Bound::Unbounded, reverse, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.document.get("_id").unwrap().clone())
        .collect()
}

fn ints(values: &[i32]) -> Vec<Bson> {
    values.iter().map(|v| Bson::Int32(*v)).collect()
}

#[test]
fn multikey_index_has_one_entry_per_element_and_sets_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.create_indexes("db.m", vec![spec("tags_1", doc! {"tags": 1}, false, false)]).unwrap();
    engine.writer().insert("db.m", doc! {"_id": 1, "tags": "solo"}).unwrap();
    assert!(engine.collection_info("db.m").unwrap().multikey_indexes.is_empty());
    engine.writer().insert("db.m", doc! {"_id": 2, "tags": ["a", "b", "a"]}).unwrap();
    assert_eq!(engine.collection_info("db.m").unwrap().multikey_indexes, vec!["tags_1".to_string()]);
    // "a", "b" for doc 2 (deduplicated), "solo" for doc 1, in key order.
    assert_eq!(ids_in_index(&engine, "db.m", "tags_1", false), ints(&[2, 2, 1]));
    engine.writer().update("db.m", &Bson::Int32(2), doc! {"_id": 2, "tags": ["c"]}, doc! {"$set": {"tags": ["c"]}}).unwrap();
    assert_eq!(ids_in_index(&engine, "db.m", "tags_1", false), ints(&[2, 1]));
    // The flag survives a restart through the journal and the checkpoint.
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.collection_info("db.m").unwrap().multikey_indexes, vec!["tags_1".to_string()]);
    engine.checkpoint_now().unwrap();
    engine.shutdown().unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.collection_info("db.m").unwrap().multikey_indexes, vec!["tags_1".to_string()]);
    assert!(engine.validate("db.m").unwrap().valid);
    engine.shutdown().unwrap();
}

#[test]
fn sparse_index_skips_documents_without_the_field_and_plain_index_keys_them_as_null() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    // `unique` and `sparse` identify an index (MongoDB 7.0's index
    // signature): the same key pattern may carry both; the same signature
    // under another name is a conflict.
    let plain_a = spec("a_plain", doc! {"a": 1}, false, false);
    let (before, after, _) =
        engine.create_indexes("db.s", vec![spec("a_sparse", doc! {"a": 1}, true, true), plain_a]).unwrap();
    assert_eq!((before, after), (1, 3));
    engine.create_indexes("db.s", vec![spec("a_again", doc! {"a": 1}, false, false)]).unwrap_err();
    engine.drop_indexes("db.s", &["a_plain".to_string()]).unwrap();
    engine.create_indexes("db.s", vec![spec("a_b", doc! {"a": 1, "b": 1}, false, false)]).unwrap();
    let mut writer = engine.writer();
    writer.insert("db.s", doc! {"_id": 1}).unwrap();
    writer.insert("db.s", doc! {"_id": 2}).unwrap();
    writer.insert("db.s", doc! {"_id": 3, "a": 5}).unwrap();
    match writer.insert("db.s", doc! {"_id": 4, "a": 5}) {
        Err(StorageError::DuplicateKey { key_pattern, key_value, .. }) => {
            assert_eq!(key_pattern, doc! {"a": 1});
            assert_eq!(key_value, doc! {"a": 5});
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    drop(writer);
    assert_eq!(ids_in_index(&engine, "db.s", "a_sparse", false), ints(&[3]));
    // Null sorts before numbers: both documents without `a` come first.
    assert_eq!(ids_in_index(&engine, "db.s", "a_b", false), ints(&[1, 2, 3]));
    engine.shutdown().unwrap();
}

#[test]
fn unique_index_build_over_duplicates_fails_and_leaves_no_index() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.writer().insert("db.d", doc! {"_id": 1, "k": 1}).unwrap();
    engine.writer().insert("db.d", doc! {"_id": 2, "k": 1}).unwrap();
    match engine.create_indexes("db.d", vec![spec("k_1", doc! {"k": 1}, true, false)]) {
        Err(StorageError::DuplicateKey { index_name, key_value, .. }) => {
            assert_eq!(index_name, "k_1");
            assert_eq!(key_value, doc! {"k": 1});
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
    assert_eq!(engine.collection_info("db.d").unwrap().indexes.len(), 1);
    // The failed build logged nothing: a restart agrees.
    drop(engine);
    let engine = open(dir.path());
    assert_eq!(engine.collection_info("db.d").unwrap().indexes.len(), 1);
    engine.shutdown().unwrap();
}

#[test]
fn compound_descending_index_orders_and_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.create_indexes("db.c", vec![spec("a_1_b_-1", doc! {"a": 1, "b": -1}, false, false)]).unwrap();
    let mut writer = engine.writer();
    let rows = [(1, 1, 1), (2, 1, 2), (3, 2, 1), (4, 2, 3), (5, 1, 3)];
    for (id, a, b) in rows {
        writer.insert("db.c", doc! {"_id": id, "a": a, "b": b}).unwrap();
    }
    drop(writer);
    assert_eq!(ids_in_index(&engine, "db.c", "a_1_b_-1", false), ints(&[5, 2, 1, 4, 3]));
    assert_eq!(ids_in_index(&engine, "db.c", "a_1_b_-1", true), ints(&[3, 4, 1, 2, 5]));
    // Range a == 1 through the key prefix of a's encoding.
    let mut prefix = Vec::new();
    slipstream_query::index_key::encode_value(&mut prefix, &Bson::Int32(1), false);
    let end = slipstream_query::index_key::prefix_end(&prefix).unwrap();
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let entries = reader
        .scan_index("db.c", "a_1_b_-1", Bound::Included(prefix), Bound::Excluded(end), false, None, 2)
        .unwrap();
    let ids: Vec<Bson> = entries.iter().map(|e| e.document.get("_id").unwrap().clone()).collect();
    assert_eq!(ids, ints(&[5, 2]));
    assert!(matches!(
        reader.scan_index("db.c", "nope", Bound::Unbounded, Bound::Unbounded, false, None, 1),
        Err(StorageError::IndexNotFound(_))
    ));
    engine.shutdown().unwrap();
}

#[test]
fn index_conflicts_and_drops() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let (before, after, _) = engine.create_indexes("db.x", vec![spec("a_1", doc! {"a": 1}, false, false)]).unwrap();
    assert_eq!((before, after), (1, 2));
    // The same spec again is a no-op.
    let (before, after, _) = engine.create_indexes("db.x", vec![spec("a_1", doc! {"a": 1}, false, false)]).unwrap();
    assert_eq!((before, after), (2, 2));
    assert!(matches!(
        engine.create_indexes("db.x", vec![spec("a_1", doc! {"b": 1}, false, false)]),
        Err(StorageError::IndexConflict { code: 86, .. })
    ));
    assert!(matches!(
        engine.create_indexes("db.x", vec![spec("other", doc! {"a": 1}, false, false)]),
        Err(StorageError::IndexConflict { code: 85, .. })
    ));
    assert!(matches!(engine.drop_indexes("db.x", &["nope".to_string()]), Err(StorageError::IndexNotFound(_))));
    assert!(matches!(engine.drop_indexes("db.x", &["_id_".to_string()]), Err(StorageError::IndexConflict { code: 72, .. })));
    let (before, _) = engine.drop_indexes("db.x", &["*".to_string()]).unwrap();
    assert_eq!(before, 2);
    assert_eq!(engine.collection_info("db.x").unwrap().indexes.len(), 1);
    engine.shutdown().unwrap();
}

#[test]
fn documents_over_16_megabytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let big = "x".repeat(16 * 1024 * 1024);
    assert!(matches!(engine.writer().insert("db.big", doc! {"_id": 1, "s": big}), Err(StorageError::DocumentTooLarge(_))));
    assert!(matches!(engine.writer().insert("db.big", doc! {"x": 1}), Err(StorageError::InvalidDocument(_))));
    assert!(matches!(engine.writer().insert("db.big", doc! {"_id": [1, 2]}), Err(StorageError::InvalidDocument(_))));
    engine.shutdown().unwrap();
}

/// The server maps variants, not message text, to codes: each cause has
/// its own variant.
#[test]
fn bad_namespaces_have_their_own_variant() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    assert!(matches!(engine.create_collection("nodot", doc! {}), Err(StorageError::InvalidNamespace(_))));
    engine.writer().insert("db.a", doc! {"_id": 1}).unwrap();
    assert!(matches!(engine.rename_collection("db.a", "nodot", false), Err(StorageError::InvalidNamespace(_))));
    engine.shutdown().unwrap();
}
