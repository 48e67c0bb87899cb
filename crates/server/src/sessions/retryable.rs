//! A retryable write: the statements of one `lsid` + `txnNumber`, which of
//! them a first attempt already executed, and their first outcome.
//!
//! Storage records every statement it executes for a session
//! (`Writer::set_session`): the oplog entry carries `lsid`, `txnNumber`,
//! `stmtId` and `prevOpTime` (the session's previous entry of the same
//! transaction number), and `config.transactions` holds the newest one
//! (`lastWriteOpTime`), in the same commit, on every member (see
//! `docs/replication.md`). So the history of a transaction number is the
//! chain from `lastWriteOpTime` back along `prevOpTime`, and a new primary
//! answers a retry from the same chain it replicated.
//!
//! Before a command runs, `RetryableWrite::begin` reads that chain once
//! (the session is checked out, so nothing else of this session writes
//! meanwhile); each statement then asks `executed(stmt_id)`:
//! - found: not run again; its outcome is rebuilt from its entry (insert:
//!   one document; update: an `i` entry is an upsert, whose `_id` is the
//!   entry's, a `u` entry one modified document; delete: one document;
//!   findAndModify: the image kept in `config.image_collection`, or the
//!   upserted document) and its id goes to `retriedStmtIds`;
//! - not found, and the chain was cut (oplog truncated past it):
//!   IncompleteTransactionHistory (217), since it may have run;
//! - not found: run with the statement attached, so storage records it.
//!
//! A statement that wrote nothing (an error such as a duplicate key, an
//! update that matched nothing or changed nothing) left no entry and runs
//! again on a retry, as in MongoDB. Multi-document updates and deletes
//! (`multi: true`, `limit: 0`) cannot be retried statement by statement
//! and are refused (InvalidOptions, 72), as MongoDB refuses them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bson::{Bson, Document};
use parking_lot::Mutex;
use slipstream_storage::session::parse_optime;
use slipstream_storage::{Engine, OpTime, ReadAt, StatementSession};

use crate::error::CommandError;
use crate::exec::limits::WRITE_BATCH_STATEMENTS_MAX;
use crate::failpoint::TransactionalWriteFailPoint;

/// The longest `prevOpTime` chain walked: one entry per statement of a
/// transaction number, and a command has at most
/// `WRITE_BATCH_STATEMENTS_MAX` statements (drivers give each command its
/// own transaction number).
const HISTORY_ENTRIES_MAX: usize = WRITE_BATCH_STATEMENTS_MAX + 1;

/// TransactionTooOld (225).
pub fn transaction_too_old(txn_number: i64, newest: i64, lsid: &Document) -> CommandError {
    CommandError::new(
        225,
        format!(
            "Retryable write with txnNumber {txn_number} is prohibited on session {lsid} because a newer retryable \
             write with txnNumber {newest} has already started on this session."
        ),
    )
}

/// IncompleteTransactionHistory (217).
fn incomplete_history(lsid: &Document, txn_number: i64) -> CommandError {
    CommandError::new(
        217,
        format!(
            "Incomplete history detected for transaction {txn_number} on session {lsid}: the oplog no longer holds \
             every statement of it"
        ),
    )
}

/// How the command numbers its statements.
#[derive(Clone, Debug, PartialEq)]
enum StatementIds {
    /// `stmtId` (default 0) plus the statement's index in the batch.
    FromIndex(i32),
    /// `stmtIds`, one per statement.
    Listed(Vec<i32>),
}

/// One retryable write command's view of its session's history.
#[derive(Debug)]
pub struct RetryableWrite {
    lsid: Document,
    txn_number: i64,
    /// The entries the transaction number already wrote, by `stmtId`.
    executed: HashMap<i32, Document>,
    /// The chain was cut before its start.
    incomplete: bool,
    ids: StatementIds,
    /// Statements answered from history, for `retriedStmtIds`.
    retried: Mutex<Vec<i32>>,
    /// The test-only `onPrimaryTransactionalWrite` fail point (with test
    /// commands only), and whether it asked to close the connection.
    fail_point: Option<Arc<TransactionalWriteFailPoint>>,
    close_connection: AtomicBool,
}

impl RetryableWrite {
    /// Reads the history of `lsid`'s `txn_number` as of now:
    /// TransactionTooOld (225) when the session already wrote with a
    /// higher transaction number.
    pub fn begin(
        engine: &Arc<Engine>,
        lsid: Document,
        txn_number: i64,
        body: &Document,
    ) -> Result<RetryableWrite, CommandError> {
        let ids = statement_ids(body)?;
        let record = engine.reader(ReadAt::Latest)?.session_record(&lsid)?;
        let mut write = RetryableWrite {
            lsid,
            txn_number,
            executed: HashMap::new(),
            incomplete: false,
            ids,
            retried: Mutex::new(Vec::new()),
            fail_point: None,
            close_connection: AtomicBool::new(false),
        };
        let Some(record) = record else {
            return Ok(write);
        };
        let recorded = record.get_i64("txnNum").map_err(|_| bad_record(&record))?;
        if recorded > txn_number {
            return Err(transaction_too_old(txn_number, recorded, &write.lsid));
        }
        if recorded == txn_number {
            let last = record
                .get_document("lastWriteOpTime")
                .ok()
                .and_then(parse_optime)
                .ok_or_else(|| bad_record(&record))?;
            write.walk(engine, last)?;
        }
        Ok(write)
    }

    /// Follows `prevOpTime` from `last` and keeps each entry by `stmtId`.
    fn walk(&mut self, engine: &Engine, last: OpTime) -> Result<(), CommandError> {
        let mut next = last;
        for _ in 0..HISTORY_ENTRIES_MAX {
            if next.is_null() {
                return Ok(());
            }
            let entry = match engine.oplog_entry(next.ts)? {
                Some(raw) => Document::try_from(raw.as_ref())
                    .map_err(|error| CommandError::internal(format!("unreadable oplog entry: {error}")))?,
                None => {
                    self.incomplete = true;
                    return Ok(());
                }
            };
            if !self.is_own(&entry, next) {
                // Another entry at that timestamp: the one we look for was
                // truncated and the position reused.
                self.incomplete = true;
                return Ok(());
            }
            if let Ok(stmt_id) = entry.get_i32("stmtId") {
                self.executed.entry(stmt_id).or_insert_with(|| entry.clone());
            }
            next = entry
                .get_document("prevOpTime")
                .ok()
                .and_then(parse_optime)
                .unwrap_or(OpTime::NULL);
        }
        Err(CommandError::internal(format!(
            "the history of transaction {} on session {} is longer than {HISTORY_ENTRIES_MAX} entries",
            self.txn_number, self.lsid
        )))
    }

    fn is_own(&self, entry: &Document, at: OpTime) -> bool {
        entry.get_i64("t").ok() == Some(at.term)
            && entry.get_i64("txnNumber").ok() == Some(self.txn_number)
            && entry.get_document("lsid").ok() == Some(&self.lsid)
    }

    pub fn lsid(&self) -> &Document {
        &self.lsid
    }

    pub fn txn_number(&self) -> i64 {
        self.txn_number
    }

    /// The statement id of the batch's `index`-th statement.
    pub fn stmt_id(&self, index: usize) -> i32 {
        match &self.ids {
            StatementIds::FromIndex(first) => first.saturating_add(index as i32),
            StatementIds::Listed(ids) => ids[index],
        }
    }

    /// Checks that `stmtIds` (when given) names every statement.
    pub fn check_statement_count(&self, count: usize) -> Result<(), CommandError> {
        match &self.ids {
            StatementIds::Listed(ids) if ids.len() != count => Err(CommandError::bad_value(format!(
                "The size of 'stmtIds' ({}) must match the number of statements ({count})",
                ids.len()
            ))),
            _ => Ok(()),
        }
    }

    /// Consults `onPrimaryTransactionalWrite` for the statements this
    /// command executes.
    pub fn with_fail_point(mut self, fail_point: Arc<TransactionalWriteFailPoint>) -> RetryableWrite {
        self.fail_point = Some(fail_point);
        self
    }

    /// What storage needs to record the batch's `index`-th statement,
    /// which is about to run (the test-only fail point may fail it).
    pub fn statement(&self, index: usize) -> Result<StatementSession, CommandError> {
        if let Some(failure) = self.fail_point.as_ref().and_then(|fail_point| fail_point.fires()) {
            if failure.close_connection {
                self.close_connection.store(true, Ordering::Relaxed);
            }
            if let Some(code) = failure.fail_before_commit_code {
                return Err(CommandError::new(
                    code,
                    "Failing write due to onPrimaryTransactionalWrite fail point",
                ));
            }
        }
        Ok(StatementSession {
            lsid: self.lsid.clone(),
            txn_number: self.txn_number,
            stmt_id: self.stmt_id(index),
        })
    }

    /// The test-only fail point asked to close the connection after this
    /// command.
    pub fn close_connection_requested(&self) -> bool {
        self.close_connection.load(Ordering::Relaxed)
    }

    /// The entry a first attempt wrote for `stmt_id`, if it ran (and is
    /// then counted in `retriedStmtIds`); IncompleteTransactionHistory when
    /// the history is cut and does not show it.
    pub fn executed(&self, stmt_id: i32) -> Result<Option<&Document>, CommandError> {
        match self.executed.get(&stmt_id) {
            Some(entry) => {
                self.retried.lock().push(stmt_id);
                Ok(Some(entry))
            }
            None if self.incomplete => Err(incomplete_history(&self.lsid, self.txn_number)),
            None => Ok(None),
        }
    }

    /// The statements answered from history, in the order asked.
    pub fn retried_stmt_ids(&self) -> Vec<i32> {
        self.retried.lock().clone()
    }

    /// Adds `retriedStmtIds` to an insert, update or delete reply when
    /// statements were answered from history.
    pub fn add_retried_ids(&self, reply: &mut Document) {
        let retried = self.retried_stmt_ids();
        if !retried.is_empty() {
            reply.insert("retriedStmtIds", retried);
        }
    }
}

fn statement_ids(body: &Document) -> Result<StatementIds, CommandError> {
    if let Some(value) = body.get("stmtIds") {
        let Bson::Array(items) = value else {
            return Err(CommandError::type_mismatch("stmtIds must be an array"));
        };
        let ids = items
            .iter()
            .map(|item| match item {
                Bson::Int32(id) => Ok(*id),
                _ => Err(CommandError::type_mismatch("stmtIds must hold 32-bit integers")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if body.contains_key("stmtId") {
            return Err(CommandError::bad_value(
                "May not specify both stmtId and stmtIds in write command",
            ));
        }
        return Ok(StatementIds::Listed(ids));
    }
    match body.get("stmtId") {
        None => Ok(StatementIds::FromIndex(0)),
        Some(Bson::Int32(first)) => Ok(StatementIds::FromIndex(*first)),
        Some(_) => Err(CommandError::type_mismatch("stmtId must be a 32-bit integer")),
    }
}

fn bad_record(record: &Document) -> CommandError {
    CommandError::internal(format!("malformed config.transactions record: {record}"))
}

fn op_of(entry: &Document) -> &str {
    entry.get_str("op").unwrap_or("")
}

fn not_compatible(code: i32, command: &str, entry: &Document) -> CommandError {
    CommandError::new(
        code,
        format!(
            "{command} retry request is not compatible with previous write in the transaction of type: {}, oplog: {entry}",
            op_of(entry)
        ),
    )
}

/// A retried insert statement: its entry must be the insert.
pub fn insert_outcome(entry: &Document) -> Result<(), CommandError> {
    match op_of(entry) {
        "i" => Ok(()),
        _ => Err(not_compatible(40636, "insert", entry)),
    }
}

/// What a retried update statement did.
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateOutcome {
    /// It modified one document (`n: 1, nModified: 1`).
    Modified,
    /// It upserted a document with this `_id` (`n: 1, nModified: 0`).
    Upserted(Bson),
}

/// A retried update statement: a `u` entry modified one document, an `i`
/// entry is an upsert (an update statement writes an insert only then).
pub fn update_outcome(entry: &Document) -> Result<UpdateOutcome, CommandError> {
    match op_of(entry) {
        "u" => Ok(UpdateOutcome::Modified),
        "i" => {
            let id = entry
                .get_document("o")
                .ok()
                .and_then(|document| document.get("_id"))
                .cloned()
                .ok_or_else(|| not_compatible(40638, "update", entry))?;
            Ok(UpdateOutcome::Upserted(id))
        }
        _ => Err(not_compatible(40638, "update", entry)),
    }
}

/// A retried delete statement: its entry must be the delete.
pub fn delete_outcome(entry: &Document) -> Result<(), CommandError> {
    match op_of(entry) {
        "d" => Ok(()),
        _ => Err(not_compatible(40637, "delete", entry)),
    }
}

/// What a findAndModify asked for, as far as its retry is concerned.
#[derive(Clone, Copy, Debug)]
pub struct FindAndModifyShape {
    pub remove: bool,
    pub upsert: bool,
    pub return_new: bool,
}

/// The first outcome of a retried findAndModify: `lastErrorObject` and the
/// unprojected `value` (the caller applies `fields`). `image` is the
/// session's `config.image_collection` document (`Reader::retry_image`).
pub fn find_and_modify_outcome(
    shape: FindAndModifyShape,
    entry: &Document,
    image: Option<&Document>,
) -> Result<(Document, Option<Document>), CommandError> {
    let mut last_error = Document::new();
    last_error.insert("n", 1);
    match op_of(entry) {
        "d" => {
            if !shape.remove {
                return Err(not_compatible(40606, "findAndModify", entry));
            }
            Ok((last_error, Some(image_value(entry, image)?)))
        }
        "u" => {
            if shape.remove {
                return Err(not_compatible(40609, "findAndModify", entry));
            }
            let wanted = if shape.return_new { "postImage" } else { "preImage" };
            if entry.get_str("needsRetryImage").ok() != Some(wanted) {
                return Err(CommandError::new(
                    if shape.return_new { 40611 } else { 40612 },
                    format!("findAndModify retry request wants the {wanted}, which the first attempt did not keep"),
                ));
            }
            last_error.insert("updatedExisting", true);
            Ok((last_error, Some(image_value(entry, image)?)))
        }
        "i" => {
            if !shape.upsert {
                return Err(not_compatible(40608, "findAndModify", entry));
            }
            let inserted = entry
                .get_document("o")
                .map_err(|_| not_compatible(40608, "findAndModify", entry))?;
            last_error.insert("updatedExisting", false);
            if let Some(id) = inserted.get("_id") {
                last_error.insert("upserted", id.clone());
            }
            Ok((last_error, shape.return_new.then(|| inserted.clone())))
        }
        _ => Err(not_compatible(40609, "findAndModify", entry)),
    }
}

/// The image a findAndModify entry kept, checked to be that entry's.
fn image_value(entry: &Document, image: Option<&Document>) -> Result<Document, CommandError> {
    let missing = || {
        CommandError::new(
            5637601,
            "image collection no longer contains the complete write history of this transaction",
        )
    };
    let image = image.ok_or_else(missing)?;
    if image.get_bool("invalidated").unwrap_or(false) {
        return Err(CommandError::new(
            217,
            "Incomplete transaction history: the retry image could not be kept",
        ));
    }
    let same_write = image.get_timestamp("ts").ok() == entry.get_timestamp("ts").ok()
        && image.get_i64("txnNum").ok() == entry.get_i64("txnNumber").ok();
    if !same_write {
        return Err(CommandError::new(
            5637602,
            "image collection no longer contains the complete write history of this transaction",
        ));
    }
    image.get_document("image").cloned().map_err(|_| missing())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Timestamp};

    fn entry(op: &str, o: Document) -> Document {
        doc! {"ts": Timestamp {time: 5, increment: 1}, "t": 1_i64, "op": op, "ns": "db.c", "o": o, "txnNumber": 3_i64, "stmtId": 0}
    }

    #[test]
    fn update_outcomes_tell_upserts_from_updates() {
        assert_eq!(
            update_outcome(&entry("i", doc! {"_id": 7, "a": 1})).unwrap(),
            UpdateOutcome::Upserted(Bson::Int32(7))
        );
        assert_eq!(
            update_outcome(&entry("u", doc! {"$v": 2})).unwrap(),
            UpdateOutcome::Modified
        );
        assert_eq!(update_outcome(&entry("d", doc! {"_id": 7})).unwrap_err().code, 40638);
        assert!(insert_outcome(&entry("i", doc! {"_id": 1})).is_ok());
        assert_eq!(insert_outcome(&entry("u", doc! {})).unwrap_err().code, 40636);
        assert!(delete_outcome(&entry("d", doc! {"_id": 1})).is_ok());
        assert_eq!(delete_outcome(&entry("i", doc! {})).unwrap_err().code, 40637);
    }

    #[test]
    fn find_and_modify_outcomes_come_from_the_image() {
        let shape = FindAndModifyShape {
            remove: false,
            upsert: false,
            return_new: true,
        };
        let mut update = entry("u", doc! {"$v": 2});
        update.insert("needsRetryImage", "postImage");
        let image = doc! {"_id": {}, "txnNum": 3_i64, "ts": Timestamp {time: 5, increment: 1}, "imageKind": "postImage", "image": {"_id": 1, "x": 2}};
        let (last_error, value) = find_and_modify_outcome(shape, &update, Some(&image)).unwrap();
        assert_eq!(last_error, doc! {"n": 1, "updatedExisting": true});
        assert_eq!(value, Some(doc! {"_id": 1, "x": 2}));
        // An image of another write, or none, or invalidated.
        let mut stale = image.clone();
        stale.insert("ts", Timestamp { time: 4, increment: 1 });
        assert_eq!(
            find_and_modify_outcome(shape, &update, Some(&stale)).unwrap_err().code,
            5637602
        );
        assert_eq!(find_and_modify_outcome(shape, &update, None).unwrap_err().code, 5637601);
        let invalidated = doc! {"txnNum": 3_i64, "ts": Timestamp {time: 5, increment: 1}, "invalidated": true};
        assert_eq!(
            find_and_modify_outcome(shape, &update, Some(&invalidated))
                .unwrap_err()
                .code,
            217
        );
        // The first attempt kept the pre-image, the retry wants the post-image.
        let old = FindAndModifyShape {
            return_new: false,
            ..shape
        };
        assert_eq!(
            find_and_modify_outcome(old, &update, Some(&image)).unwrap_err().code,
            40612
        );
        // Upserts answer from the entry itself.
        let upsert = FindAndModifyShape { upsert: true, ..shape };
        let (last_error, value) = find_and_modify_outcome(upsert, &entry("i", doc! {"_id": 9, "x": 1}), None).unwrap();
        assert_eq!(last_error, doc! {"n": 1, "updatedExisting": false, "upserted": 9});
        assert_eq!(value, Some(doc! {"_id": 9, "x": 1}));
        let remove = FindAndModifyShape {
            remove: true,
            upsert: false,
            return_new: false,
        };
        assert_eq!(
            find_and_modify_outcome(remove, &update, Some(&image)).unwrap_err().code,
            40609
        );
    }

    #[test]
    fn statement_ids_come_from_the_index_or_the_list() {
        assert_eq!(statement_ids(&doc! {}).unwrap(), StatementIds::FromIndex(0));
        assert_eq!(statement_ids(&doc! {"stmtId": 4}).unwrap(), StatementIds::FromIndex(4));
        assert_eq!(
            statement_ids(&doc! {"stmtIds": [3, 1]}).unwrap(),
            StatementIds::Listed(vec![3, 1])
        );
        assert_eq!(statement_ids(&doc! {"stmtIds": [3], "stmtId": 1}).unwrap_err().code, 2);
        assert_eq!(statement_ids(&doc! {"stmtId": "x"}).unwrap_err().code, 14);
    }
}
