//! Retryable-write bookkeeping: a session's writes carry `lsid`,
//! `txnNumber`, `stmtId` and `prevOpTime`; applying them (on the primary,
//! through `apply_batch`, in recovery) keeps `config.transactions` and the
//! findAndModify images in `config.image_collection`, which roll back with
//! the entries that made them.

use std::ops::Bound;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::engine::EngineOptions;
use slipstream_storage::{
    Engine, OpTime, ReadAt, RetryImage, StatementSession, StorageError, Timestamp, TimestampBson, WriteGate,
};

fn options(dir: &std::path::Path) -> EngineOptions {
    let mut options = EngineOptions::new(dir);
    options.checkpoint_interval_ms = 60_000;
    options.journal_commit_interval_ms = 2;
    options.replicated = true;
    options
}

fn open(dir: &std::path::Path) -> Arc<Engine> {
    Engine::open(options(dir)).unwrap()
}

fn statement(lsid: &Document, txn_number: i64, stmt_id: i32) -> StatementSession {
    StatementSession { lsid: lsid.clone(), txn_number, stmt_id }
}

fn entry_at(engine: &Arc<Engine>, ts: Timestamp) -> Document {
    let raw = engine.oplog_entry(ts).unwrap().expect("an entry at the timestamp");
    Document::try_from(raw.as_ref()).unwrap()
}

fn optime_of(document: &Document) -> OpTime {
    OpTime::new(Timestamp::from_bson(document.get_timestamp("ts").unwrap()), document.get_i64("t").unwrap())
}

fn record(engine: &Arc<Engine>, lsid: &Document) -> Option<Document> {
    engine.reader(ReadAt::Latest).unwrap().session_record(lsid).unwrap()
}

fn image(engine: &Arc<Engine>, lsid: &Document) -> Option<Document> {
    engine.reader(ReadAt::Latest).unwrap().retry_image(lsid).unwrap()
}

/// Every document of a collection, in `_id` order.
fn contents(engine: &Arc<Engine>, ns: &str) -> Vec<Document> {
    let reader = engine.reader(ReadAt::Latest).unwrap();
    reader
        .scan(ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// The session state a retry reads: both derived collections, whole.
fn session_state(engine: &Arc<Engine>) -> (Vec<Document>, Vec<Document>) {
    (contents(engine, "config.transactions"), contents(engine, "config.image_collection"))
}

/// Two sessions' writes on a primary: returns the lsids.
fn write_sessions(primary: &Arc<Engine>) -> (Document, Document) {
    let a = doc! {"id": bson::Uuid::new()};
    let b = doc! {"id": bson::Uuid::new()};
    primary.writer().with_session(statement(&a, 1, 0)).insert("db.c", doc! {"_id": 1, "x": 1}).unwrap();
    primary.writer().with_session(statement(&a, 1, 1)).insert("db.c", doc! {"_id": 2, "x": 2}).unwrap();
    primary.writer().with_session(statement(&b, 5, 0)).insert("db.c", doc! {"_id": 3, "x": 3}).unwrap();
    let mut writer = primary.writer().with_session(statement(&a, 1, 2));
    writer.set_retry_image(Some(RetryImage::Post));
    writer.update("db.c", &Bson::Int32(1), doc! {"_id": 1, "x": 10}, doc! {"$set": {"x": 10}}).unwrap();
    drop(writer);
    let mut writer = primary.writer().with_session(statement(&b, 6, 0));
    writer.set_retry_image(Some(RetryImage::Pre));
    writer.delete("db.c", &Bson::Int32(3)).unwrap();
    drop(writer);
    (a, b)
}

#[test]
fn entries_carry_the_session_and_chain_the_statements_of_a_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let primary = open(dir.path());
    primary.set_write_gate(WriteGate::Open { term: 2 });
    let (a, b) = write_sessions(&primary);

    // Session a, transaction 1: three statements, chained newest to oldest.
    let record_a = record(&primary, &a).unwrap();
    assert_eq!(record_a.get_document("_id").unwrap(), &a);
    assert_eq!(record_a.get_i64("txnNum").unwrap(), 1);
    let last = optime_of(record_a.get_document("lastWriteOpTime").unwrap());
    let mut chain = Vec::new();
    let mut at = last;
    while !at.is_null() {
        let entry = entry_at(&primary, at.ts);
        assert_eq!(optime_of(&entry), at);
        assert_eq!(entry.get_document("lsid").unwrap(), &a);
        assert_eq!(entry.get_i64("txnNumber").unwrap(), 1);
        chain.push((entry.get_i32("stmtId").unwrap(), entry.get_str("op").unwrap().to_string()));
        at = optime_of(entry.get_document("prevOpTime").unwrap());
    }
    assert_eq!(chain, vec![(2, "u".to_string()), (1, "i".to_string()), (0, "i".to_string())]);
    let newest = entry_at(&primary, last.ts);
    assert_eq!(newest.get_str("needsRetryImage").unwrap(), "postImage");
    assert_eq!(record_a.get_datetime("lastWriteDate").unwrap(), newest.get_datetime("wall").unwrap());

    // Session b: transaction 6 starts a new chain.
    let record_b = record(&primary, &b).unwrap();
    assert_eq!(record_b.get_i64("txnNum").unwrap(), 6);
    let delete = entry_at(&primary, optime_of(record_b.get_document("lastWriteOpTime").unwrap()).ts);
    assert_eq!(delete.get_str("op").unwrap(), "d");
    assert!(optime_of(delete.get_document("prevOpTime").unwrap()).is_null());
    assert_eq!(
        delete.get_document("prevOpTime").unwrap(),
        &doc! {"ts": bson::Timestamp { time: 0, increment: 0 }, "t": -1_i64}
    );
    assert_eq!(delete.get_str("needsRetryImage").unwrap(), "preImage");

    // The implicit create is not part of any statement.
    let first = Document::try_from(primary.oplog_read(Bound::Unbounded, 1, 1 << 20).unwrap()[0].as_ref()).unwrap();
    assert_eq!(first.get_str("op").unwrap(), "c");
    assert!(!first.contains_key("lsid"));

    // The images a retried findAndModify answers with.
    let image_a = image(&primary, &a).unwrap();
    assert_eq!(image_a.get_i64("txnNum").unwrap(), 1);
    assert_eq!(Timestamp::from_bson(image_a.get_timestamp("ts").unwrap()), last.ts);
    assert_eq!(image_a.get_str("imageKind").unwrap(), "postImage");
    assert_eq!(image_a.get_document("image").unwrap(), &doc! {"_id": 1, "x": 10});
    let image_b = image(&primary, &b).unwrap();
    assert_eq!(image_b.get_str("imageKind").unwrap(), "preImage");
    assert_eq!(image_b.get_document("image").unwrap(), &doc! {"_id": 3, "x": 3});
    primary.shutdown().unwrap();
}

#[test]
fn an_older_transaction_number_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let primary = open(dir.path());
    primary.set_write_gate(WriteGate::Open { term: 1 });
    let lsid = doc! {"id": bson::Uuid::new()};
    primary.writer().with_session(statement(&lsid, 4, 0)).insert("db.c", doc! {"_id": 1}).unwrap();
    let before = primary.last_applied();
    let old = primary.writer().with_session(statement(&lsid, 3, 0)).insert("db.c", doc! {"_id": 2});
    assert!(matches!(old, Err(StorageError::TransactionTooOld(_))), "{old:?}");
    assert_eq!(primary.last_applied(), before, "nothing was logged");
    assert_eq!(contents(&primary, "db.c"), vec![doc! {"_id": 1}]);
    assert_eq!(record(&primary, &lsid).unwrap().get_i64("txnNum").unwrap(), 4);
    primary.shutdown().unwrap();
}

/// The same records on a second engine fed the first one's oplog, and on
/// both after a crash (recovery replays the entries).
#[test]
fn every_member_derives_the_same_session_state() {
    let primary_dir = tempfile::tempdir().unwrap();
    let secondary_dir = tempfile::tempdir().unwrap();
    let primary = open(primary_dir.path());
    primary.set_write_gate(WriteGate::Open { term: 1 });
    let (a, _) = write_sessions(&primary);
    let expected = session_state(&primary);
    assert_eq!(expected.0.len(), 2);
    assert_eq!(expected.1.len(), 2);

    let secondary = open(secondary_dir.path());
    let entries = primary.oplog_read(Bound::Unbounded, usize::MAX, usize::MAX).unwrap();
    for batch in entries.chunks(2) {
        secondary.apply_batch(batch).unwrap();
    }
    assert_eq!(session_state(&secondary), expected);
    assert_eq!(contents(&secondary, "db.c"), contents(&primary, "db.c"));
    let uuid = |engine: &Arc<Engine>| engine.collection_info("config.transactions").unwrap().uuid;
    assert_eq!(uuid(&secondary), uuid(&primary), "the derived collection is the same collection everywhere");

    // A crash of both: recovery replays the entries, and with them the records.
    drop(primary);
    drop(secondary);
    let primary = open(primary_dir.path());
    let secondary = open(secondary_dir.path());
    assert_eq!(session_state(&primary), expected);
    assert_eq!(session_state(&secondary), expected);
    // And after a checkpoint, from the checkpoint.
    secondary.set_stable_timestamp(secondary.last_applied().ts);
    secondary.checkpoint_now().unwrap();
    secondary.shutdown().unwrap();
    drop(secondary);
    let secondary = open(secondary_dir.path());
    assert_eq!(session_state(&secondary), expected);
    assert_eq!(record(&secondary, &a), record(&primary, &a));
    secondary.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn session_records_roll_back_with_their_entries() {
    let dir = tempfile::tempdir().unwrap();
    let primary = open(dir.path());
    primary.set_write_gate(WriteGate::Open { term: 1 });
    let (a, b) = write_sessions(&primary);
    let common = primary.last_applied().ts;
    let at_common = session_state(&primary);
    // After the common point: a new transaction of a, a first write of c.
    let c = doc! {"id": bson::Uuid::new()};
    let mut writer = primary.writer().with_session(statement(&a, 2, 0));
    writer.set_retry_image(Some(RetryImage::Pre));
    writer.update("db.c", &Bson::Int32(2), doc! {"_id": 2, "x": 20}, doc! {"$set": {"x": 20}}).unwrap();
    drop(writer);
    primary.writer().with_session(statement(&c, 1, 0)).insert("db.d", doc! {"_id": 1}).unwrap();
    assert_ne!(session_state(&primary), at_common);

    primary.set_write_gate(WriteGate::Closed);
    primary.rollback_to(common).unwrap();
    assert_eq!(session_state(&primary), at_common);
    assert_eq!(record(&primary, &c), None);
    assert_eq!(record(&primary, &a).unwrap().get_i64("txnNum").unwrap(), 1);
    assert_eq!(image(&primary, &b).unwrap().get_str("imageKind").unwrap(), "preImage");
    // The rolled-back transaction number may be used again.
    primary.set_write_gate(WriteGate::Open { term: 2 });
    primary.writer().with_session(statement(&a, 2, 0)).insert("db.c", doc! {"_id": 9}).unwrap();
    let record_a = record(&primary, &a).unwrap();
    assert_eq!(record_a.get_i64("txnNum").unwrap(), 2);
    assert_eq!(optime_of(record_a.get_document("lastWriteOpTime").unwrap()).term, 2);
    primary.shutdown().unwrap();
}
