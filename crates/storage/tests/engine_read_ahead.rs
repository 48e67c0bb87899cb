//! Read-ahead (`read_ahead.rs`) only warms caches: a batch applied from a
//! sync source, and the same entries replayed by recovery, leave the same
//! state with it as without it, also when the batch changes a document
//! several times (what was read ahead is then stale, and must not be
//! used). And it runs: a large batch's documents are read ahead, a small
//! one's are not.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::read_ahead::{KEYS_READ_AHEAD, READ_AHEAD_KEYS_MIN};
use slipstream_storage::{Engine, IndexSpec, ReadAt};

const DOCUMENTS: i32 = 400;

/// `KEYS_READ_AHEAD` counts for the whole process: the tests take turns,
/// so that one's read-ahead does not count in the other's figure.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn open(dir: &std::path::Path, read_ahead_threads: usize) -> Arc<Engine> {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 600_000;
    options.journal_commit_interval_ms = 2;
    options.read_ahead_threads = read_ahead_threads;
    Engine::open(options).unwrap()
}

fn state(engine: &Arc<Engine>) -> Vec<(String, Vec<Document>)> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    let mut out = Vec::new();
    for db in engine.list_databases() {
        for info in engine.list_collections(&db) {
            let docs = reader
                .scan(&info.ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
                .unwrap();
            out.push((info.ns.clone(), docs.into_iter().map(|(_, d)| d).collect()));
        }
    }
    out
}

/// The primary's oplog in two parts: the load (a collection with an index
/// and its documents) and a batch that updates, deletes and re-inserts
/// them, several times each.
fn primary_oplog(dir: &std::path::Path) -> (Arc<Engine>, Vec<RawDocumentBuf>, Vec<RawDocumentBuf>) {
    let primary = open(dir, 0);
    primary.create_collection("app.docs", Document::new()).unwrap();
    let index = IndexSpec {
        name: "k_1".into(),
        key: doc! {"k": 1},
        ..Default::default()
    };
    primary.create_indexes("app.docs", vec![index]).unwrap();
    {
        let mut writer = primary.writer();
        for i in 0..DOCUMENTS {
            writer.insert("app.docs", doc! {"_id": i, "k": i % 7, "v": 0}).unwrap();
        }
    }
    let loaded = primary.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    {
        let mut writer = primary.writer();
        for round in 1..=3 {
            for i in (0..DOCUMENTS).filter(|i| i % 3 != 0) {
                let new = doc! {"_id": i, "k": (i + round) % 7, "v": round};
                writer
                    .update(
                        "app.docs",
                        &Bson::Int32(i),
                        new,
                        doc! {"$set": {"k": (i + round) % 7, "v": round}},
                    )
                    .unwrap();
            }
        }
        for i in (0..DOCUMENTS).filter(|i| i % 5 == 0) {
            writer.delete("app.docs", &Bson::Int32(i)).unwrap();
        }
        for i in (0..DOCUMENTS).filter(|i| i % 10 == 0) {
            writer.insert("app.docs", doc! {"_id": i, "k": 99, "v": -1}).unwrap();
        }
    }
    let all = primary.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    let batch = all[loaded.len()..].to_vec();
    (primary, loaded, batch)
}

/// A member that applied the load and checkpointed it (the documents are
/// then read from the checkpoint file, where read-ahead matters), then
/// applied `batch` as one batch.
fn member(dir: &std::path::Path, threads: usize, loaded: &[RawDocumentBuf], batch: &[RawDocumentBuf]) -> Arc<Engine> {
    let engine = open(dir, threads);
    engine.apply_batch(loaded).unwrap();
    engine.checkpoint_now().unwrap();
    engine.apply_batch(batch).unwrap();
    engine
}

#[test]
fn read_ahead_never_changes_what_a_batch_or_a_replay_applies() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let primary_dir = tempfile::tempdir().unwrap();
    let (primary, loaded, batch) = primary_oplog(primary_dir.path());
    assert!(
        batch.len() > READ_AHEAD_KEYS_MIN,
        "the batch is large enough to be read ahead"
    );
    let with_dir = tempfile::tempdir().unwrap();
    let without_dir = tempfile::tempdir().unwrap();
    let with = member(with_dir.path(), 8, &loaded, &batch);
    let without = member(without_dir.path(), 0, &loaded, &batch);
    let expected = state(&primary);
    assert_eq!(state(&with), expected);
    assert_eq!(state(&without), expected);
    assert_eq!(
        with.db_hash("app", None).unwrap(),
        primary.db_hash("app", None).unwrap()
    );
    assert!(with.validate("app.docs").unwrap().valid);

    // Recovery replays the batch from the journal above the checkpoint,
    // read ahead or not.
    drop(with);
    drop(without);
    let with = open(with_dir.path(), 8);
    let without = open(without_dir.path(), 0);
    assert_eq!(state(&with), expected);
    assert_eq!(state(&without), expected);
    assert!(with.validate("app.docs").unwrap().valid);
    for engine in [with, without, primary] {
        engine.shutdown().unwrap();
    }
}

#[test]
fn a_large_batch_is_read_ahead_and_a_small_one_is_not() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let primary_dir = tempfile::tempdir().unwrap();
    let (primary, loaded, batch) = primary_oplog(primary_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 8);
    engine.apply_batch(&loaded).unwrap();
    engine.checkpoint_now().unwrap();

    let before = KEYS_READ_AHEAD.load(Ordering::Relaxed);
    engine.apply_batch(&batch[..READ_AHEAD_KEYS_MIN - 1]).unwrap();
    assert_eq!(
        KEYS_READ_AHEAD.load(Ordering::Relaxed),
        before,
        "a small batch applies without threads"
    );

    let rest = &batch[READ_AHEAD_KEYS_MIN - 1..];
    let before = KEYS_READ_AHEAD.load(Ordering::Relaxed);
    engine.apply_batch(rest).unwrap();
    let read = KEYS_READ_AHEAD.load(Ordering::Relaxed) - before;
    // One key per document the rest of the batch touches (each once).
    let mut ids: Vec<String> = rest
        .iter()
        .map(|raw| {
            let entry = Document::try_from(raw.as_ref()).unwrap();
            let holder = entry
                .get_document("o2")
                .unwrap_or_else(|_| entry.get_document("o").unwrap());
            holder.get("_id").unwrap().to_string()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(read, ids.len() as u64, "every document the batch reads, once");
    assert_eq!(state(&engine), state(&primary));
    engine.shutdown().unwrap();
    primary.shutdown().unwrap();
}
