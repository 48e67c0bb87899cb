//! Retryable writes through `operation::execute` on a real engine, with a
//! fake replica set topology (always primary): a retry with the same
//! `lsid` + `txnNumber` answers the first outcome and applies nothing
//! again, also on another member that received the first attempt through
//! `Engine::apply_batch` (a failover); older transaction numbers, cut
//! histories, concurrent use of one session, and the session commands.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, Uuid};
use slipstream_repl::{BoxFuture, CommandAccess, MemberBlocklist, ReadConcernArgs, ReplError, Topology, WriteConcern};
use slipstream_server::commands::CommandContext;
use slipstream_server::connection::request_from_op_msg;
use slipstream_server::log::Log;
use slipstream_server::operation::execute;
use slipstream_server::{ServerOptions, ServerState};
use slipstream_storage::{Engine, EngineOptions, OpTime, ReadAt, Timestamp, WriteGate};

/// A member that is always primary and whose concerns are satisfied at once.
struct Primary {
    engine: Arc<Engine>,
}

impl Topology for Primary {
    fn is_replica_set(&self) -> bool {
        true
    }
    fn hello_fields(&self, _legacy: bool, reply: &mut Document) -> i64 {
        reply.insert("isWritablePrimary", true);
        reply.insert("setName", "rs");
        0
    }
    fn topology_counter(&self) -> i64 {
        0
    }
    fn topology_changed(&self, _seen: i64) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
    fn check_access(&self, _access: CommandAccess, _db: &str, _secondary_ok: bool) -> Result<(), ReplError> {
        Ok(())
    }
    fn default_write_concern(&self) -> WriteConcern {
        WriteConcern {
            implicit: true,
            ..WriteConcern::w1()
        }
    }
    fn check_write_concern(&self, _concern: &WriteConcern) -> Result<(), ReplError> {
        Ok(())
    }
    fn wait_for_write_concern<'a>(
        &'a self,
        _last: OpTime,
        _wc: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>> {
        Box::pin(async { Ok(()) })
    }
    fn read_point<'a>(
        &'a self,
        _concern: &'a ReadConcernArgs,
        _deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>> {
        Box::pin(async { Ok(ReadAt::Latest) })
    }
    fn linearizable_barrier(&self, _deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>> {
        Box::pin(async { Ok(()) })
    }
    fn observe_cluster_time(&self, _ts: Timestamp) -> Result<(), ReplError> {
        Ok(())
    }
    fn cluster_time(&self) -> Timestamp {
        self.engine.cluster_time()
    }
    fn last_applied(&self) -> OpTime {
        self.engine.last_applied()
    }
    fn oplog_query_metadata(&self) -> Option<Document> {
        None
    }
    fn run_command<'a>(&'a self, _name: &'a str, _body: &'a Document) -> BoxFuture<'a, Result<Document, ReplError>> {
        Box::pin(async { Err(ReplError::NoReplicationEnabled) })
    }
    fn server_status(&self) -> Option<Document> {
        None
    }
}

/// One member: a connection context on its state; its directory goes last.
struct Node {
    ctx: Arc<CommandContext>,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.ctx.state.engine.shutdown().unwrap();
    }
}

fn node(term: i64) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let mut engine_options = EngineOptions::new(dir.path());
    engine_options.replicated = true;
    let engine = Engine::open(engine_options).unwrap();
    engine.set_write_gate(WriteGate::Open { term });
    let topology = Arc::new(Primary {
        engine: Arc::clone(&engine),
    });
    let mut options = ServerOptions::new(dir.path(), 0);
    options.enable_test_commands = true;
    let log = Log::with_sink(Box::new(std::io::sink()));
    let state = Arc::new(ServerState::new(
        engine,
        topology,
        Arc::new(MemberBlocklist::default()),
        options,
        log,
    ));
    Node {
        ctx: Arc::new(CommandContext::new(state, 1, "127.0.0.1:1".into())),
        _dir: dir,
    }
}

impl Node {
    async fn run(&self, body: Document) -> Document {
        run_on(&self.ctx, body).await
    }

    /// Another connection to the same member.
    fn connection(&self, id: i64) -> Arc<CommandContext> {
        Arc::new(CommandContext::new(
            Arc::clone(&self.ctx.state),
            id,
            "127.0.0.1:2".into(),
        ))
    }

    async fn documents(&self, collection: &str) -> Vec<Document> {
        let reply = self
            .run(doc! {"find": collection, "sort": {"_id": 1}, "$db": "d"})
            .await;
        let batch = reply.get_document("cursor").unwrap().get_array("firstBatch").unwrap();
        batch.iter().map(|item| item.as_document().unwrap().clone()).collect()
    }

    fn oplog_len(&self) -> usize {
        self.ctx
            .state
            .engine
            .oplog_read(Bound::Unbounded, 100_000, usize::MAX)
            .unwrap()
            .len()
    }
}

async fn run_on(ctx: &CommandContext, body: Document) -> Document {
    let request = request_from_op_msg(body).unwrap();
    execute(ctx, &request).await.expect("a reply")
}

fn code(reply: &Document) -> Option<i32> {
    (reply.get_f64("ok").ok() != Some(1.0)).then(|| reply.get_i32("code").unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn with_txn(mut body: Document, lsid: &Document, txn_number: i64) -> Document {
    body.insert("lsid", lsid.clone());
    body.insert("txnNumber", txn_number);
    body.insert("$db", "d");
    body
}

/// Strips what may differ between two answers to the same write.
fn outcome(reply: &Document) -> Document {
    let mut reply = reply.clone();
    for field in ["operationTime", "$clusterTime", "retriedStmtIds", "retriedStmtId"] {
        reply.remove(field);
    }
    reply
}

/// Each kind of write, sent twice: the second answer is the first's and
/// changes nothing (no document, no oplog entry), and names the statements
/// it answered from history.
async fn check_retries_answer_the_first_outcome(node: &Node) {
    let lsid = doc! {"id": Uuid::new()};
    node.run(doc! {"insert": "c", "documents": [{"_id": 10, "x": 1}, {"_id": 11, "x": 1}], "$db": "d"})
        .await;
    let writes = [
        doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]},
        doc! {"insert": "c", "documents": [{"_id": 6}]},
        doc! {"update": "c", "updates": [
            {"q": {"_id": 1}, "u": {"$inc": {"n": 1}}},
            {"q": {"_id": 3}, "u": {"$inc": {"n": 1}}, "upsert": true},
            {"q": {"_id": 99}, "u": {"$inc": {"n": 1}}},
        ]},
        doc! {"delete": "c", "deletes": [{"q": {"x": 1}, "limit": 1}]},
        doc! {"findAndModify": "c", "query": {"_id": 2}, "update": {"$inc": {"n": 5}}, "new": true},
        doc! {"findAndModify": "c", "query": {"_id": 2}, "update": {"$inc": {"n": 5}}, "fields": {"n": 1}},
        doc! {"findAndModify": "c", "query": {"_id": 4}, "update": {"$set": {"u": 1}}, "upsert": true, "new": true},
        doc! {"findAndModify": "c", "query": {"_id": 11}, "remove": true},
    ];
    for (txn, write) in writes.into_iter().enumerate() {
        let body = with_txn(write, &lsid, txn as i64 + 1);
        let first = node.run(body.clone()).await;
        assert_eq!(code(&first), None, "{first}");
        assert!(
            !first.contains_key("retriedStmtIds") && !first.contains_key("retriedStmtId"),
            "{first}"
        );
        let (documents, entries) = (node.documents("c").await, node.oplog_len());
        let second = node.run(body.clone()).await;
        assert_eq!(outcome(&second), outcome(&first), "retry of {body}");
        assert!(
            second.contains_key("retriedStmtIds") || second.contains_key("retriedStmtId"),
            "{second}"
        );
        assert_eq!(node.documents("c").await, documents, "a retry changed data: {body}");
        assert_eq!(node.oplog_len(), entries, "a retry wrote an entry: {body}");
    }
    let update = doc! {"update": "c", "updates": [
        {"q": {"_id": 1}, "u": {"$inc": {"n": 1}}},
        {"q": {"_id": 5}, "u": {"$set": {"n": 1}}, "upsert": true},
    ]};
    let first = node.run(with_txn(update.clone(), &lsid, 20)).await;
    assert_eq!(first.get_i32("n").unwrap(), 2);
    assert_eq!(first.get_i32("nModified").unwrap(), 1);
    let second = node.run(with_txn(update, &lsid, 20)).await;
    assert_eq!(
        second.get_array("upserted").unwrap(),
        &vec![Bson::Document(doc! {"index": 1, "_id": 5})]
    );
    assert_eq!(
        second.get_array("retriedStmtIds").unwrap(),
        &vec![Bson::Int32(0), Bson::Int32(1)]
    );
}

#[test]
fn a_retry_answers_the_first_outcome_and_applies_nothing_twice() {
    runtime().block_on(async {
        let node = node(1);
        check_retries_answer_the_first_outcome(&node).await;
    });
}

#[test]
fn a_new_primary_answers_a_retry_from_the_replicated_history() {
    runtime().block_on(async {
        let old = node(1);
        let new = node(2);
        // Two sessions, one write each (a retry of a session's older
        // transaction number would be TransactionTooOld).
        let (one, two) = (doc! {"id": Uuid::new()}, doc! {"id": Uuid::new()});
        let insert = with_txn(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, &one, 7);
        let modify = with_txn(
            doc! {"findAndModify": "c", "query": {"_id": 1}, "update": {"$set": {"a": 1}}, "new": true},
            &two,
            8,
        );
        let first_insert = old.run(insert.clone()).await;
        let first_modify = old.run(modify.clone()).await;
        assert_eq!(code(&first_modify), None, "{first_modify}");
        // The new primary receives the old one's oplog, as a secondary
        // applies it, then takes over.
        let entries = old
            .ctx
            .state
            .engine
            .oplog_read(Bound::Unbounded, 1000, usize::MAX)
            .unwrap();
        new.ctx.state.engine.apply_batch(&entries).unwrap();
        let entries_before = new.oplog_len();
        assert_eq!(outcome(&new.run(insert).await), outcome(&first_insert));
        assert_eq!(outcome(&new.run(modify).await), outcome(&first_modify));
        assert_eq!(new.oplog_len(), entries_before);
        assert_eq!(new.documents("c").await, vec![doc! {"_id": 1, "a": 1}, doc! {"_id": 2}]);
        // A statement of the same command that had not run then runs now.
        let more = with_txn(
            doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 3}]},
            &one,
            7,
        );
        let reply = new.run(more).await;
        assert_eq!(reply.get_i32("n").unwrap(), 3, "{reply}");
        assert_eq!(
            reply.get_array("retriedStmtIds").unwrap(),
            &vec![Bson::Int32(0), Bson::Int32(1)]
        );
        assert_eq!(new.oplog_len(), entries_before + 1);
        // The session's older transaction number is refused there too.
        let older = with_txn(doc! {"insert": "c", "documents": [{"_id": 4}]}, &two, 6);
        assert_eq!(code(&new.run(older).await), Some(225));
    });
}

#[test]
fn older_transaction_numbers_are_refused_and_errors_are_not_recorded() {
    runtime().block_on(async {
        let node = node(1);
        let lsid = doc! {"id": Uuid::new()};
        let insert = |txn: i64, id: i32| with_txn(doc! {"insert": "c", "documents": [{"_id": id}]}, &lsid, txn);
        assert_eq!(code(&node.run(insert(5, 1)).await), None);
        let old = node.run(insert(4, 2)).await;
        assert_eq!(code(&old), Some(225), "{old}");
        assert_eq!(old.get_str("codeName").unwrap(), "TransactionTooOld");
        // A duplicate key is a write error, not recorded: the retry runs
        // again and fails alike.
        let duplicate = insert(6, 1);
        let first = node.run(duplicate.clone()).await;
        let second = node.run(duplicate).await;
        assert_eq!(first.get_array("writeErrors").unwrap().len(), 1);
        assert_eq!(outcome(&second), outcome(&first));
        assert!(!second.contains_key("retriedStmtIds"));
        // Multi-document statements cannot be retried.
        let multi = with_txn(
            doc! {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "multi": true}]},
            &lsid,
            7,
        );
        let reply = node.run(multi).await;
        assert_eq!(
            reply.get_array("writeErrors").unwrap()[0]
                .as_document()
                .unwrap()
                .get_i32("code")
                .unwrap(),
            72
        );
        let all = with_txn(doc! {"delete": "c", "deletes": [{"q": {}, "limit": 0}]}, &lsid, 8);
        let reply = node.run(all).await;
        assert_eq!(
            reply.get_array("writeErrors").unwrap()[0]
                .as_document()
                .unwrap()
                .get_i32("code")
                .unwrap(),
            72
        );
        // A transaction number that wrote nothing still counts as started.
        assert_eq!(code(&node.run(insert(7, 9)).await), Some(225));
    });
}

#[test]
fn a_cut_history_is_incomplete() {
    runtime().block_on(async {
        let old = node(1);
        let new = node(2);
        let lsid = doc! {"id": Uuid::new()};
        let two = with_txn(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, &lsid, 3);
        old.run(two).await;
        // The new member received only the second statement's entry (its
        // first one is gone, as after an oplog truncation).
        let entries = old
            .ctx
            .state
            .engine
            .oplog_read(Bound::Unbounded, 1000, usize::MAX)
            .unwrap();
        let last = entries.last().unwrap().clone();
        new.ctx.state.engine.apply_batch(&[last]).unwrap();
        let retry = with_txn(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, &lsid, 3);
        let reply = new.run(retry).await;
        assert_eq!(code(&reply), Some(217), "{reply}");
        assert_eq!(reply.get_str("codeName").unwrap(), "IncompleteTransactionHistory");
    });
}

#[test]
fn one_command_with_a_txn_number_per_session_at_a_time() {
    runtime().block_on(async {
        let node = node(1);
        let lsid = doc! {"id": Uuid::new()};
        let first = node.connection(2);
        let held = first.state.sessions.check_out(
            slipstream_server::sessions::lsid::parse(&Bson::Document(lsid.clone())).unwrap(),
            None,
        );
        let held = held.await.unwrap();
        // Without txnNumber a command does not check its session out
        // (MongoDB's shouldCheckOutSession): it runs at once.
        let find = doc! {"find": "c", "lsid": lsid.clone(), "maxTimeMS": 100, "$db": "d"};
        let reply = node.run(find).await;
        assert_eq!(code(&reply), None, "{reply}");
        let mut insert = doc! {
            "insert": "c", "documents": [{"_id": 1}], "lsid": lsid.clone(), "txnNumber": 1_i64, "maxTimeMS": 100,
            "$db": "d",
        };
        let reply = node.run(insert.clone()).await;
        assert_eq!(code(&reply), Some(50), "{reply}");
        insert.remove("maxTimeMS");
        let waiting = {
            let ctx = node.connection(3);
            tokio::spawn(async move { run_on(&ctx, insert).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(held);
        assert_eq!(code(&waiting.await.unwrap()), None);
    });
}

#[test]
fn sessions_are_listed_until_ended() {
    runtime().block_on(async {
        let node = node(1);
        let listed = |node: &Node| {
            let ctx = Arc::clone(&node.ctx);
            async move {
                let reply = run_on(
                    &ctx,
                    doc! {"aggregate": 1, "pipeline": [{"$listLocalSessions": {}}, {"$sort": {"lastUse": 1}}], "cursor": {}, "$db": "admin"},
                )
                .await;
                let batch = reply.get_document("cursor").unwrap().get_array("firstBatch").unwrap().clone();
                batch.into_iter().map(|item| item.as_document().unwrap().get_document("_id").unwrap().clone()).collect::<Vec<_>>()
            }
        };
        let id = Uuid::new();
        node.run(doc! {"ping": 1, "lsid": {"id": id}, "$db": "admin"}).await;
        let sessions = listed(&node).await;
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0].get("id"), Some(&Bson::Binary(bson::Binary::from_uuid(id))));
        assert_eq!(sessions[0].get_binary_generic("uid").unwrap().len(), 32);
        let started = node.run(doc! {"startSession": 1, "$db": "admin"}).await;
        assert_eq!(started.get_i32("timeoutMinutes").unwrap(), 30);
        assert_eq!(listed(&node).await.len(), 2);
        node.run(doc! {"endSessions": [{"id": id}], "$db": "admin"}).await;
        let left = listed(&node).await;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].get("id"), started.get_document("id").unwrap().get("id"));
        node.run(doc! {"killSessions": [], "$db": "admin"}).await;
        assert!(listed(&node).await.is_empty());
        let misplaced = node.run(doc! {"aggregate": "c", "pipeline": [{"$listLocalSessions": {}}], "cursor": {}, "$db": "admin"}).await;
        assert_eq!(code(&misplaced), Some(73));
    });
}

#[test]
fn a_cursor_belongs_to_its_session() {
    runtime().block_on(async {
        let node = node(1);
        node.run(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 3}], "$db": "d"})
            .await;
        let (mine, other) = (doc! {"id": Uuid::new()}, doc! {"id": Uuid::new()});
        let open = |lsid: Option<&Document>| {
            let mut find = doc! {"find": "c", "batchSize": 1, "$db": "d"};
            if let Some(lsid) = lsid {
                find.insert("lsid", lsid.clone());
            }
            find
        };
        let more = |id: i64, lsid: Option<&Document>| {
            let mut get_more = doc! {"getMore": id, "collection": "c", "batchSize": 1, "$db": "d"};
            if let Some(lsid) = lsid {
                get_more.insert("lsid", lsid.clone());
            }
            get_more
        };
        let cursor_id = |reply: Document| reply.get_document("cursor").unwrap().get_i64("id").unwrap();
        let id = cursor_id(node.run(open(Some(&mine))).await);
        assert_eq!(code(&node.run(more(id, Some(&other))).await), Some(50738));
        assert_eq!(code(&node.run(more(id, None)).await), Some(50737));
        assert_eq!(code(&node.run(more(id, Some(&mine))).await), None);
        let sessionless = cursor_id(node.run(open(None)).await);
        assert_eq!(code(&node.run(more(sessionless, Some(&mine))).await), Some(50736));
        assert_eq!(code(&node.run(more(sessionless, None)).await), None);
        // killSessions closes the session's cursors, not the others.
        node.run(doc! {"killSessions": [mine.clone()], "$db": "admin"}).await;
        assert_eq!(code(&node.run(more(id, Some(&mine))).await), Some(43));
        assert_eq!(code(&node.run(more(sessionless, None)).await), None);
    });
}

#[test]
fn a_lost_reply_is_retried_exactly_once() {
    runtime().block_on(async {
        let node = node(1);
        let lsid = doc! {"id": Uuid::new()};
        // The fail point closes the connection after each command that
        // executed a statement, as a reply lost to a network failure.
        let fail = doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": "alwaysOn", "$db": "admin"};
        assert_eq!(code(&node.run(fail).await), None);
        let insert = with_txn(doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}, &lsid, 1);
        let request = request_from_op_msg(insert.clone()).unwrap();
        assert!(execute(&node.ctx, &request).await.is_none(), "the connection is closed");
        let retry = node.run(insert).await;
        assert_eq!(retry.get_i32("n").unwrap(), 2, "{retry}");
        assert_eq!(node.documents("c").await.len(), 2);
        // failBeforeCommitExceptionCode fails statements after the skip.
        let fail = doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"skip": 1},
        "data": {"failBeforeCommitExceptionCode": 1, "closeConnection": false}, "$db": "admin"};
        node.run(fail).await;
        let two = with_txn(doc! {"insert": "c", "documents": [{"_id": 3}, {"_id": 4}]}, &lsid, 2);
        let reply = node.run(two.clone()).await;
        assert_eq!(reply.get_i32("n").unwrap(), 1, "{reply}");
        let errors = reply.get_array("writeErrors").unwrap();
        assert_eq!(errors[0].as_document().unwrap().get_i32("index").unwrap(), 1);
        node.run(doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": "off", "$db": "admin"})
            .await;
        let retry = node.run(two).await;
        assert_eq!(retry.get_i32("n").unwrap(), 2, "{retry}");
        assert_eq!(retry.get_array("retriedStmtIds").unwrap(), &vec![Bson::Int32(0)]);
        assert_eq!(node.documents("c").await.len(), 4);
    });
}

#[test]
fn a_write_cut_by_a_stepdown_fails_the_command_and_is_retried() {
    runtime().block_on(async {
        let node = node(1);
        let lsid = doc! {"id": Uuid::new()};
        let insert = with_txn(
            doc! {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}], "ordered": false},
            &lsid,
            1,
        );
        // The gate closes after the command was admitted (a stepdown
        // racing the write): the whole command fails, labelled, not one
        // statement after another, with MongoDB's code for a write a
        // stepdown interrupts.
        node.ctx.state.engine.set_write_gate(WriteGate::Closed);
        let cut = node.run(insert.clone()).await;
        assert_eq!(code(&cut), Some(11602), "{cut}");
        assert!(!cut.contains_key("writeErrors"), "{cut}");
        assert_eq!(
            cut.get_array("errorLabels").unwrap(),
            &vec![Bson::from("RetryableWriteError")]
        );
        node.ctx.state.engine.set_write_gate(WriteGate::Open { term: 2 });
        let retry = node.run(insert).await;
        assert_eq!(retry.get_i32("n").unwrap(), 2, "{retry}");
    });
}
