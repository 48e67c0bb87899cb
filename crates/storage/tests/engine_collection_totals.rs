//! Collection totals (`collection_totals.rs`): the count, data size and
//! index key counts that `collection_stats` and `count` answer without a
//! scan stay equal to a scan of the records and to a model of the writes,
//! through updates that change sizes and index keys, deletes, index builds
//! and drops, a rollback, a crash with journal replay past the checkpoint,
//! a bulk load, a member applying the oplog, drop and re-create, rename,
//! capped trims, snapshot reads and concurrent writers.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_storage::engine::{CollectionStats, EngineOptions};
use slipstream_storage::{Engine, IndexSpec, OpTime, ReadAt, WriteGate};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.replicated = true;
    options
}

fn open(dir: &std::path::Path) -> Arc<Engine> {
    let engine = Engine::open(options(dir)).unwrap();
    engine.set_write_gate(WriteGate::Open { term: 1 });
    engine
}

fn tag_index() -> IndexSpec {
    // Sparse and on an array field: a document has zero, one or many keys.
    IndexSpec {
        name: "tags_1".into(),
        key: doc! {"tags": 1},
        sparse: true,
        ..IndexSpec::default()
    }
}

/// The documents a collection should hold, by `_id`, and what its
/// statistics must then be.
#[derive(Default)]
struct Model {
    documents: BTreeMap<i32, Document>,
}

impl Model {
    fn insert(&mut self, engine: &Engine, ns: &str, document: Document) -> OpTime {
        let id = document.get_i32("_id").unwrap();
        let optime = engine.writer().insert(ns, document.clone()).unwrap();
        self.documents.insert(id, document);
        optime
    }

    fn replace(&mut self, engine: &Engine, ns: &str, document: Document) -> OpTime {
        let id = document.get_i32("_id").unwrap();
        let optime = engine
            .writer()
            .update(ns, &Bson::Int32(id), document.clone(), document.clone())
            .unwrap();
        self.documents.insert(id, document);
        optime
    }

    fn delete(&mut self, engine: &Engine, ns: &str, id: i32) -> OpTime {
        let optime = engine.writer().delete(ns, &Bson::Int32(id)).unwrap();
        self.documents.remove(&id);
        optime
    }

    fn tag_keys(&self) -> u64 {
        let tags = self.documents.values().filter_map(|d| d.get("tags"));
        let keys = tags.map(|tags| match tags {
            // Distinct values, one key each (an empty array keys as undefined).
            Bson::Array(values) if values.is_empty() => 1,
            Bson::Array(values) => {
                let mut distinct: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                distinct.sort();
                distinct.dedup();
                distinct.len() as u64
            }
            _ => 1,
        });
        keys.sum()
    }

    fn stats(&self, with_tags: bool) -> CollectionStats {
        let count = self.documents.len() as u64;
        let data_size_bytes = self.documents.values().map(|d| d.to_vec().unwrap().len() as u64).sum();
        let mut index_key_counts = vec![("_id_".to_string(), count)];
        if with_tags {
            index_key_counts.push(("tags_1".to_string(), self.tag_keys()));
        }
        CollectionStats {
            count,
            data_size_bytes,
            index_key_counts,
        }
    }
}

/// The stats from the totals, checked against a scan and against `expected`.
fn assert_stats(engine: &Engine, ns: &str, expected: &CollectionStats) {
    let stats = engine.collection_stats(ns).unwrap();
    assert_eq!(&stats, expected, "totals of {ns}");
    assert_eq!(engine.collection_stats_scanned(ns).unwrap(), stats, "a scan of {ns}");
    let report = engine.validate(ns).unwrap();
    assert!(report.valid, "validate {ns}: {:?}", report.errors);
}

fn count(engine: &Arc<Engine>, at: ReadAt, ns: &str) -> u64 {
    engine.reader(at).unwrap().count(ns).unwrap()
}

fn doc_with(id: i32, tags: Bson, filler: usize) -> Document {
    doc! {"_id": id, "tags": tags, "filler": "x".repeat(filler)}
}

#[test]
fn totals_follow_inserts_size_changing_updates_deletes_and_index_builds() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let ns = "db.c";
    let mut model = Model::default();
    for id in 0..20 {
        model.insert(
            &engine,
            ns,
            doc_with(id, Bson::Array(vec![Bson::Int32(id % 3), Bson::Int32(7), Bson::Int32(7)]), id as usize),
        );
    }
    assert_stats(&engine, ns, &model.stats(false));
    // Built over 20 documents: the build's keys are counted.
    engine.create_indexes(ns, vec![tag_index()]).unwrap();
    assert_stats(&engine, ns, &model.stats(true));
    for id in 0..10 {
        // Bigger, smaller, fewer keys, no key (sparse), duplicate values.
        let tags = match id % 4 {
            0 => Bson::Array(vec![]),
            1 => Bson::Array(vec![Bson::Int32(1), Bson::Int32(1)]),
            2 => Bson::String("one".into()),
            _ => Bson::Null,
        };
        let mut document = doc_with(id, tags, (id as usize) * 50);
        if id % 4 == 3 {
            document.remove("tags");
        }
        model.replace(&engine, ns, document);
    }
    assert_stats(&engine, ns, &model.stats(true));
    let before_deletes = engine.last_applied();
    let count_before = model.documents.len() as u64;
    for id in (0..20).step_by(3) {
        model.delete(&engine, ns, id);
    }
    assert_stats(&engine, ns, &model.stats(true));
    assert_eq!(count(&engine, ReadAt::Latest, ns), model.documents.len() as u64);
    // A snapshot read counts what its timestamp saw.
    assert_eq!(count(&engine, ReadAt::At(before_deletes.ts), ns), count_before);
    // An index drop leaves the other counts as they were.
    engine.drop_indexes(ns, &["tags_1".to_string()]).unwrap();
    assert_stats(&engine, ns, &model.stats(false));
    engine.shutdown().unwrap();
}

#[test]
fn a_rollback_takes_the_totals_back_with_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let ns = "db.c";
    engine.create_collection(ns, doc! {}).unwrap();
    engine.create_indexes(ns, vec![tag_index()]).unwrap();
    let mut model = Model::default();
    for id in 0..10 {
        model.insert(&engine, ns, doc_with(id, Bson::Int32(id), 10));
    }
    let stable = engine.last_applied();
    let expected = model.stats(true);
    engine.set_stable_timestamp(stable.ts);
    assert_eq!(engine.checkpoint_now().unwrap(), stable.ts);
    for id in 10..15 {
        model.insert(&engine, ns, doc_with(id, Bson::Int32(id), 100));
    }
    model.replace(
        &engine,
        ns,
        doc_with(2, Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]), 500),
    );
    model.delete(&engine, ns, 3);
    engine.set_write_gate(WriteGate::Closed);
    engine.rollback_to(stable.ts).unwrap();
    assert_stats(&engine, ns, &expected);
    // Writes after the rollback start from the rolled-back totals.
    engine.set_write_gate(WriteGate::Open { term: 2 });
    let mut after = Model::default();
    for id in 0..10 {
        after.documents.insert(id, doc_with(id, Bson::Int32(id), 10));
    }
    after.insert(&engine, ns, doc_with(50, Bson::Int32(50), 3));
    assert_stats(&engine, ns, &after.stats(true));
    engine.shutdown().unwrap();
}

#[test]
fn a_crash_replays_the_totals_past_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "db.c";
    let mut model = Model::default();
    {
        let engine = open(dir.path());
        engine.create_collection(ns, doc! {}).unwrap();
        engine.create_indexes(ns, vec![tag_index()]).unwrap();
        for id in 0..30 {
            model.insert(&engine, ns, doc_with(id, Bson::Int32(id % 4), 20));
        }
        engine.set_stable_timestamp(engine.last_applied().ts);
        engine.checkpoint_now().unwrap();
        for id in 0..10 {
            model.replace(
                &engine,
                ns,
                doc_with(id, Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]), 200),
            );
        }
        for id in 20..30 {
            model.delete(&engine, ns, id);
        }
        model.insert(&engine, ns, doc_with(99, Bson::Int32(1), 1));
        engine.wait_durable(engine.last_applied().ts).unwrap();
        // No shutdown: recovery replays the journal over the checkpoint.
    }
    let engine = open(dir.path());
    assert_stats(&engine, ns, &model.stats(true));
    assert_eq!(count(&engine, ReadAt::Latest, ns), 21);
    // And a clean shutdown's checkpoint holds them as well.
    engine.set_stable_timestamp(engine.last_applied().ts);
    engine.shutdown().unwrap();
    drop(engine);
    let engine = open(dir.path());
    assert_stats(&engine, ns, &model.stats(true));
    engine.shutdown().unwrap();
}

#[test]
fn a_bulk_load_and_the_oplog_after_it_keep_the_totals() {
    let source_dir = tempfile::tempdir().unwrap();
    let member_dir = tempfile::tempdir().unwrap();
    let source = open(source_dir.path());
    let ns = "app.users";
    source.create_collection(ns, doc! {}).unwrap();
    source.create_indexes(ns, vec![tag_index()]).unwrap();
    let mut model = Model::default();
    for id in 0..100 {
        model.insert(&source, ns, doc_with(id, Bson::Int32(id % 5), 30));
    }
    let begin = source.last_applied();
    // Changed while the copy runs: the copy sees some of it.
    model.replace(
        &source,
        ns,
        doc_with(1, Bson::Array(vec![Bson::Int32(1), Bson::Int32(2)]), 300),
    );
    model.delete(&source, ns, 2);
    model.insert(&source, ns, doc_with(500, Bson::Int32(9), 5));

    let member = Engine::open(options(member_dir.path())).unwrap();
    let uuid = source.collection_info(ns).unwrap().uuid;
    member
        .bulk_create_collection(ns, doc! {}, uuid, vec![tag_index()])
        .unwrap();
    let copied: Vec<RawDocumentBuf> = (0..100)
        .map(|id| RawDocumentBuf::try_from(&doc_with(id, Bson::Int32(id % 5), 30)).unwrap())
        .collect();
    member.bulk_insert(ns, &copied[..60]).unwrap();
    // A resume copies some again (one of them as changed since), then the rest.
    let mut again = copied[50..].to_vec();
    again[0] = RawDocumentBuf::try_from(&doc_with(50, Bson::Array(vec![Bson::Int32(6), Bson::Int32(8)]), 90)).unwrap();
    member.bulk_insert(ns, &again).unwrap();
    let mut loaded = Model::default();
    for id in 0..100 {
        loaded.documents.insert(id, doc_with(id, Bson::Int32(id % 5), 30));
    }
    loaded
        .documents
        .insert(50, doc_with(50, Bson::Array(vec![Bson::Int32(6), Bson::Int32(8)]), 90));
    assert_stats(&member, ns, &loaded.stats(true));

    let entries = source
        .oplog_read(std::ops::Bound::Excluded(begin.ts), usize::MAX, usize::MAX)
        .unwrap();
    // The catch-up applies the changes made during the copy; the copy's
    // own version of _id 50 (which no entry rewrites) stays.
    member.apply_batch(&entries).unwrap();
    model.documents.insert(50, loaded.documents[&50].clone());
    assert_stats(&member, ns, &model.stats(true));
    member.shutdown().unwrap();
    source.shutdown().unwrap();
}

#[test]
fn a_member_applying_the_oplog_has_the_primarys_totals() {
    let primary_dir = tempfile::tempdir().unwrap();
    let member_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    let member = Engine::open(options(member_dir.path())).unwrap();
    let ns = "db.c";
    let mut model = Model::default();
    primary.create_collection(ns, doc! {}).unwrap();
    primary.create_indexes(ns, vec![tag_index()]).unwrap();
    for id in 0..40 {
        model.insert(&primary, ns, doc_with(id, Bson::Int32(id), id as usize));
    }
    for id in 0..40 {
        match id % 3 {
            0 => drop(model.delete(&primary, ns, id)),
            1 => drop(model.replace(
                &primary,
                ns,
                doc_with(id, Bson::Array(vec![Bson::Int32(id), Bson::Int32(0)]), 70),
            )),
            _ => {}
        }
    }
    // A capped collection's trims are deletes the member applies too.
    primary
        .create_collection("db.capped", doc! {"capped": true, "size": 4096, "max": 5})
        .unwrap();
    for id in 0..12 {
        primary
            .writer()
            .insert("db.capped", doc! {"_id": id, "v": "y".repeat(id as usize)})
            .unwrap();
    }
    let entries = primary
        .oplog_read(std::ops::Bound::Unbounded, usize::MAX, usize::MAX)
        .unwrap();
    for chunk in entries.chunks(7) {
        member.apply_batch(chunk).unwrap();
    }
    assert_stats(&primary, ns, &model.stats(true));
    assert_stats(&member, ns, &model.stats(true));
    let capped = primary.collection_stats("db.capped").unwrap();
    assert_eq!(capped.count, 5);
    assert_eq!(capped, primary.collection_stats_scanned("db.capped").unwrap());
    assert_eq!(member.collection_stats("db.capped").unwrap(), capped);
    member.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn drop_recreate_and_rename_start_from_the_right_totals() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let mut first = Model::default();
    for id in 0..10 {
        first.insert(&engine, "db.a", doc_with(id, Bson::Int32(id), 10));
    }
    engine.drop_collection("db.a").unwrap();
    let mut second = Model::default();
    second.insert(&engine, "db.a", doc_with(1, Bson::Int32(1), 1));
    assert_stats(&engine, "db.a", &second.stats(false));
    // A rename keeps the totals; the dropped target's go with it.
    let mut target = Model::default();
    for id in 0..5 {
        target.insert(&engine, "db.b", doc_with(id, Bson::Int32(id), 40));
    }
    engine.rename_collection("db.a", "db.b", true).unwrap();
    assert_stats(&engine, "db.b", &second.stats(false));
    second.insert(&engine, "db.b", doc_with(2, Bson::Int32(2), 2));
    assert_stats(&engine, "db.b", &second.stats(false));
    assert_eq!(count(&engine, ReadAt::Latest, "db.a"), 0);
    engine.shutdown().unwrap();
}

#[test]
fn concurrent_writers_lose_no_change_to_the_totals() {
    const THREADS: i32 = 8;
    const DOCUMENTS_PER_THREAD: i32 = 150;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let ns = "db.c";
    engine.create_collection(ns, doc! {}).unwrap();
    engine.create_indexes(ns, vec![tag_index()]).unwrap();
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for i in 0..DOCUMENTS_PER_THREAD {
                    let id = thread * 10_000 + i;
                    engine
                        .writer()
                        .insert(ns, doc_with(id, Bson::Int32(i % 7), (i % 13) as usize))
                        .unwrap();
                    if i % 3 == 0 {
                        engine.writer().delete(ns, &Bson::Int32(id)).unwrap();
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let stats = engine.collection_stats(ns).unwrap();
    assert_eq!(
        stats.count,
        (THREADS * (DOCUMENTS_PER_THREAD - (DOCUMENTS_PER_THREAD + 2) / 3)) as u64
    );
    assert_eq!(stats, engine.collection_stats_scanned(ns).unwrap());
    engine.shutdown().unwrap();
}
