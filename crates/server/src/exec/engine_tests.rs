//! Query execution against a real storage engine in a temporary
//! directory: resumable scans with writes between batches, multikey
//! de-duplication, and the oplog paths the replication fetcher will use
//! (ts bounds, newest first, tailable awaitData wake-up and time-out).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_storage::{Engine, EngineOptions, IndexSpec, ReadAt};
use slipstream_storage::TimestampBson;

use super::batch::{Batch, BatchLimits};
use super::oplog::{read_newest, tail_batch, OplogQuery, TsBounds};
use super::plan::{plan_query, QueryShape};
use super::query::StreamingQuery;
use super::scan::{Access, Scan};

fn open_engine() -> (tempfile::TempDir, Arc<Engine>) {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions::new(dir.path())).unwrap();
    (dir, engine)
}

fn insert_all(engine: &Engine, ns: &str, documents: impl IntoIterator<Item = Document>) {
    for document in documents {
        engine.writer().insert(ns, document).unwrap();
    }
}

fn ids(documents: &[Document]) -> Vec<i32> {
    documents.iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

fn batch_of(n: usize) -> Batch {
    Batch::new(BatchLimits {
        documents_max: Some(n),
        bytes_max: usize::MAX,
    })
}

#[test]
fn streaming_query_resumes_after_writes_between_batches() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    insert_all(&engine, ns, (0..300).map(|i| doc! {"_id": i, "even": i % 2 == 0}));
    let scan = Scan::new(ns, Access::Collection { reverse: false });
    let mut query = StreamingQuery::new(scan, Filter::parse(&doc! {"even": true}).unwrap(), None, 0, None);

    let mut first = batch_of(50);
    let finished = query
        .fill(&engine.reader(ReadAt::Latest).unwrap(), &mut first, None)
        .unwrap();
    assert!(!finished);
    let first = first.into_documents();
    assert_eq!(ids(&first), (0..100).step_by(2).collect::<Vec<_>>());

    // Between batches: delete a document not yet returned, insert one
    // beyond the position and one before it (which the cursor has passed).
    engine.writer().delete(ns, &Bson::Int32(150)).unwrap();
    insert_all(
        &engine,
        ns,
        [doc! {"_id": 1000, "even": true}, doc! {"_id": -2, "even": true}],
    );

    let mut rest = Vec::new();
    loop {
        let mut batch = batch_of(40);
        let finished = query
            .fill(&engine.reader(ReadAt::Latest).unwrap(), &mut batch, None)
            .unwrap();
        rest.extend(batch.into_documents());
        if finished {
            break;
        }
    }
    let mut expected: Vec<i32> = (100..300).step_by(2).filter(|i| *i != 150).collect();
    expected.push(1000);
    assert_eq!(ids(&rest), expected);
}

#[test]
fn limit_and_skip_apply_across_batches() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    insert_all(&engine, ns, (0..100).map(|i| doc! {"_id": i}));
    let scan = Scan::new(ns, Access::Collection { reverse: true });
    let mut query = StreamingQuery::new(scan, Filter::match_all(), None, 5, Some(12));
    let mut all = Vec::new();
    let mut finished = false;
    while !finished {
        let mut batch = batch_of(5);
        finished = query
            .fill(&engine.reader(ReadAt::Latest).unwrap(), &mut batch, None)
            .unwrap();
        all.extend(batch.into_documents());
    }
    assert_eq!(ids(&all), (83..95).rev().collect::<Vec<_>>());
}

#[test]
fn multikey_index_scan_returns_each_document_once_across_batches() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    engine
        .create_indexes(
            ns,
            vec![IndexSpec {
                name: "tags_1".into(),
                key: doc! {"tags": 1},
                unique: false,
                sparse: false,
                ..Default::default()
            }],
        )
        .unwrap();
    insert_all(
        &engine,
        ns,
        (0..40).map(|i| doc! {"_id": i, "tags": [i % 3, (i + 1) % 3, 7, 8]}),
    );
    let info = engine.collection_info(ns).unwrap();
    assert!(info.multikey_indexes.contains(&"tags_1".to_string()));
    let filter_document = doc! {"tags": {"$gte": 0}};
    let filter = Filter::parse(&filter_document).unwrap();
    let shape = QueryShape::filter_only(&filter_document, &filter);
    let plan = plan_query(Some(&info), &shape).unwrap();
    assert!(
        matches!(plan.access, Access::Index { multikey: true, .. }),
        "{:?}",
        plan.access
    );
    let mut query = StreamingQuery::new(plan.scan(ns), filter, None, 0, None);
    let mut all = Vec::new();
    let mut finished = false;
    while !finished {
        let mut batch = batch_of(3);
        finished = query
            .fill(&engine.reader(ReadAt::Latest).unwrap(), &mut batch, None)
            .unwrap();
        all.extend(batch.into_documents());
    }
    let mut seen = ids(&all);
    seen.sort();
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
}

fn oplog_entries_after(engine: &Engine, ns: &str) -> bson::Timestamp {
    insert_all(engine, ns, [doc! {"_id": "marker"}]);
    let newest = engine.oplog_read_newest(1).unwrap();
    let entry = Document::try_from(newest[0].clone()).unwrap();
    entry.get_timestamp("ts").unwrap()
}

#[test]
fn oplog_query_pushes_down_ts_bounds_and_reads_newest_first() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    let marker = oplog_entries_after(&engine, ns);
    insert_all(&engine, ns, (0..5).map(|i| doc! {"_id": i}));
    let filter_document = doc! {"ts": {"$gt": marker}, "op": "i"};
    let filter = Filter::parse(&filter_document).unwrap();
    let bounds = TsBounds::from_filter(&filter_document);
    let mut query = OplogQuery::new(filter.clone(), bounds, None, 0, None, false, false);
    let mut batch = batch_of(100);
    assert!(query.fill(&engine, &mut batch, None).unwrap());
    let documents = batch.into_documents();
    let inserted: Vec<i32> = documents
        .iter()
        .map(|e| e.get_document("o").unwrap().get_i32("_id").unwrap())
        .collect();
    assert_eq!(inserted, vec![0, 1, 2, 3, 4]);
    // Only entries after the marker were examined.
    assert_eq!(query.examined, 5);

    let (newest, _) = read_newest(&engine, &filter, bounds, None, 0, Some(2), None).unwrap();
    let newest: Vec<i32> = newest
        .iter()
        .map(|e| e.get_document("o").unwrap().get_i32("_id").unwrap())
        .collect();
    assert_eq!(newest, vec![4, 3]);
}

/// A rollback's common point search reads the source's oplog newest first
/// below a timestamp: the read starts at that timestamp (the journal's
/// index) instead of reading every newer entry and dropping it, which on a
/// source with many or large newer entries outlasted the search's timeout.
#[test]
fn oplog_read_newest_first_starts_at_the_upper_bound() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    insert_all(&engine, ns, (0..10).map(|i| doc! {"_id": i}));
    let bound = oplog_entries_after(&engine, ns);
    insert_all(&engine, ns, (10..500).map(|i| doc! {"_id": i}));
    let filter_document = doc! {"ts": {"$lte": bound}};
    let filter = Filter::parse(&filter_document).unwrap();
    let bounds = TsBounds::from_filter(&filter_document);
    let (newest, examined) = read_newest(&engine, &filter, bounds, None, 0, Some(3), None).unwrap();
    let first = newest[0].get_timestamp("ts").unwrap();
    assert_eq!(first, bound, "the newest entry at or below the bound comes first");
    assert_eq!(newest.len(), 3);
    assert_eq!(examined, 3, "entries above the bound were read");
    // An exclusive bound starts just below it.
    let below = doc! {"ts": {"$lt": bound}};
    let (newest, _) =
        read_newest(&engine, &Filter::parse(&below).unwrap(), TsBounds::from_filter(&below), None, 0, Some(1), None)
            .unwrap();
    assert!(newest[0].get_timestamp("ts").unwrap() < bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailable_await_data_cursor_wakes_on_a_new_entry() {
    let (_dir, engine) = open_engine();
    let ns = "db.c";
    let marker = oplog_entries_after(&engine, ns);
    let filter_document = doc! {"ts": {"$gt": marker}};
    let bounds = TsBounds::from_filter(&filter_document);
    let mut query = OplogQuery::new(
        Filter::parse(&filter_document).unwrap(),
        bounds,
        None,
        0,
        None,
        true,
        true,
    );

    let writer_engine = Arc::clone(&engine);
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer_engine.writer().insert("db.c", doc! {"_id": "woken"}).unwrap();
    });
    let started = Instant::now();
    let limits = BatchLimits::get_more(None, None);
    let (documents, finished) = tail_batch(&engine, &mut query, limits, Duration::from_secs(5))
        .await
        .unwrap();
    writer.await.unwrap();
    assert!(!finished);
    assert_eq!(documents.len(), 1);
    assert_eq!(documents[0].get_document("o").unwrap().get_str("_id").unwrap(), "woken");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "woke only after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailable_await_data_cursor_times_out_empty_and_stays_open() {
    let (_dir, engine) = open_engine();
    let marker = oplog_entries_after(&engine, "db.c");
    let filter_document = doc! {"ts": {"$gt": marker}};
    let bounds = TsBounds::from_filter(&filter_document);
    let mut query = OplogQuery::new(
        Filter::parse(&filter_document).unwrap(),
        bounds,
        None,
        0,
        None,
        true,
        true,
    );
    let started = Instant::now();
    let (documents, finished) = tail_batch(
        &engine,
        &mut query,
        BatchLimits::get_more(None, None),
        Duration::from_millis(300),
    )
    .await
    .unwrap();
    assert!(documents.is_empty());
    assert!(!finished);
    assert!(started.elapsed() >= Duration::from_millis(290));
    // Entries written after the time-out are still delivered, in order.
    insert_all(&engine, "db.c", [doc! {"_id": 1}, doc! {"_id": 2}]);
    let (documents, _) = tail_batch(
        &engine,
        &mut query,
        BatchLimits::get_more(None, None),
        Duration::from_millis(300),
    )
    .await
    .unwrap();
    let inserted: Vec<i32> = documents
        .iter()
        .map(|e| e.get_document("o").unwrap().get_i32("_id").unwrap())
        .collect();
    assert_eq!(inserted, vec![1, 2]);
}

#[test]
fn position_lost_when_the_last_seen_entry_is_gone() {
    let (_dir, engine) = open_engine();
    let marker = oplog_entries_after(&engine, "db.c");
    insert_all(&engine, "db.c", [doc! {"_id": 1}]);
    let filter_document = doc! {"ts": {"$gte": marker}};
    let bounds = TsBounds::from_filter(&filter_document);
    let mut query = OplogQuery::new(
        Filter::parse(&filter_document).unwrap(),
        bounds,
        None,
        0,
        None,
        true,
        false,
    );
    let mut batch = batch_of(10);
    query.fill(&engine, &mut batch, None).unwrap();
    assert_eq!(batch.len(), 2);
    let first = slipstream_storage::Timestamp::from_bson(marker);
    assert!(query.check_position(first).is_ok());
    let later = slipstream_storage::Timestamp::new(u32::MAX, 0);
    assert_eq!(query.check_position(later).unwrap_err().code, 136);
}
