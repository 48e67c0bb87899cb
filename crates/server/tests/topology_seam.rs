//! The seam between the server and a replica set topology, proved with a
//! fake `Topology` (the real `ReplicaSet` comes later): the dispatch
//! table's access check, the concerns handed to the topology, and the
//! reply metadata a member adds. Commands run through `operation::execute`
//! against a real engine in a temporary directory.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use parking_lot::Mutex;
use slipstream_repl::{
    BoxFuture, CommandAccess, MemberBlocklist, ReadConcernArgs, ReadConcernLevel, ReplError, Topology, WriteConcern, W,
};
use slipstream_server::commands::CommandContext;
use slipstream_server::connection::request_from_op_msg;
use slipstream_server::log::Log;
use slipstream_server::operation::execute;
use slipstream_server::{ServerOptions, ServerState};
use slipstream_storage::{bson_timestamp, Engine, EngineOptions, OpTime, ReadAt, Timestamp};
use tokio::sync::Notify;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Primary,
    Secondary,
    Recovering,
}

/// What the fake was asked, for the assertions.
#[derive(Default)]
struct Calls {
    write_concern_waits: Vec<(OpTime, WriteConcern)>,
    read_points: Vec<ReadConcernArgs>,
    linearizable_barriers: usize,
    observed_cluster_times: Vec<Timestamp>,
    commands: Vec<String>,
}

struct FakeSet {
    role: Mutex<Role>,
    counter: AtomicI64,
    changed: Notify,
    calls: Mutex<Calls>,
    /// The write concern wait fails with this (once set).
    write_concern_failure: Mutex<Option<ReplError>>,
}

const LAST_APPLIED: OpTime = OpTime {
    term: 2,
    ts: Timestamp { secs: 50, inc: 1 },
};
const CLUSTER_TIME: Timestamp = Timestamp { secs: 60, inc: 7 };
const COMMIT_POINT: Timestamp = Timestamp { secs: 40, inc: 0 };
/// Cluster times past this are refused as drift.
const DRIFT_LIMIT_SECS: u32 = 1_000_000;

impl FakeSet {
    fn new(role: Role) -> Arc<FakeSet> {
        Arc::new(FakeSet {
            role: Mutex::new(role),
            counter: AtomicI64::new(3),
            changed: Notify::new(),
            calls: Mutex::new(Calls::default()),
            write_concern_failure: Mutex::new(None),
        })
    }

    fn step_down(&self) {
        *self.role.lock() = Role::Secondary;
        self.counter.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }
}

impl Topology for FakeSet {
    fn is_replica_set(&self) -> bool {
        true
    }

    fn hello_fields(&self, legacy: bool, reply: &mut Document) -> i64 {
        let primary = *self.role.lock() == Role::Primary;
        reply.insert(if legacy { "ismaster" } else { "isWritablePrimary" }, primary);
        reply.insert("secondary", !primary);
        reply.insert("setName", "rs");
        self.topology_counter()
    }

    fn topology_counter(&self) -> i64 {
        self.counter.load(Ordering::SeqCst)
    }

    fn topology_changed(&self, seen: i64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            loop {
                let notified = self.changed.notified();
                if self.topology_counter() > seen {
                    return;
                }
                notified.await;
            }
        })
    }

    fn check_access(&self, access: CommandAccess, _db: &str, secondary_ok: bool) -> Result<(), ReplError> {
        match (*self.role.lock(), access) {
            (_, CommandAccess::Always) | (Role::Primary, _) => Ok(()),
            (_, CommandAccess::Write) => Err(ReplError::NotWritablePrimary),
            (Role::Secondary, CommandAccess::Read) if secondary_ok => Ok(()),
            (Role::Secondary, CommandAccess::Read) => Err(ReplError::NotPrimaryNoSecondaryOk),
            (Role::Recovering, CommandAccess::Read) => Err(ReplError::NotPrimaryOrSecondary),
        }
    }

    fn default_write_concern(&self) -> WriteConcern {
        WriteConcern {
            implicit: true,
            ..WriteConcern::majority()
        }
    }

    fn check_write_concern(&self, concern: &WriteConcern) -> Result<(), ReplError> {
        match concern.w {
            W::Nodes(n) if n > 3 => Err(ReplError::UnsatisfiableWriteConcern(
                "Not enough data-bearing nodes".into(),
            )),
            _ => Ok(()),
        }
    }

    fn wait_for_write_concern<'a>(
        &'a self,
        last_write: OpTime,
        concern: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>> {
        self.calls
            .lock()
            .write_concern_waits
            .push((last_write, concern.clone()));
        let failure = self.write_concern_failure.lock().take();
        Box::pin(async move { failure.map_or(Ok(()), Err) })
    }

    fn read_point<'a>(
        &'a self,
        concern: &'a ReadConcernArgs,
        _deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>> {
        self.calls.lock().read_points.push(*concern);
        Box::pin(async move {
            match concern.effective_level() {
                ReadConcernLevel::Majority => Ok(ReadAt::At(COMMIT_POINT)),
                _ => Ok(ReadAt::Latest),
            }
        })
    }

    fn linearizable_barrier(&self, _deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>> {
        self.calls.lock().linearizable_barriers += 1;
        let primary = *self.role.lock() == Role::Primary;
        Box::pin(async move {
            if primary {
                Ok(())
            } else {
                Err(ReplError::NotWritablePrimary)
            }
        })
    }

    fn observe_cluster_time(&self, cluster_time: Timestamp) -> Result<(), ReplError> {
        self.calls.lock().observed_cluster_times.push(cluster_time);
        if cluster_time.secs > DRIFT_LIMIT_SECS {
            return Err(ReplError::ClusterTimeDrift("clusterTime too far ahead".into()));
        }
        Ok(())
    }

    fn cluster_time(&self) -> Timestamp {
        CLUSTER_TIME
    }

    fn last_applied(&self) -> OpTime {
        LAST_APPLIED
    }

    fn oplog_query_metadata(&self) -> Option<Document> {
        Some(doc! {"$replData": {"term": 2_i64}, "$oplogQueryData": {"rbid": 1}})
    }

    fn run_command<'a>(&'a self, name: &'a str, _body: &'a Document) -> BoxFuture<'a, Result<Document, ReplError>> {
        self.calls.lock().commands.push(name.to_owned());
        Box::pin(async move { Ok(doc! {"set": "rs", "answeredBy": "fake"}) })
    }

    fn server_status(&self) -> Option<Document> {
        Some(doc! {"setName": "rs"})
    }
}

/// A node on a fake set: one connection's context (holding the node's
/// state and engine), and the engine's directory, removed last (fields drop
/// in order: the engine must be gone before its files are).
struct Node {
    ctx: CommandContext,
    set: Arc<FakeSet>,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.ctx.state.engine.shutdown().unwrap();
    }
}

fn node(role: Role) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineOptions::new(dir.path())).unwrap();
    let set = FakeSet::new(role);
    let mut options = ServerOptions::new(dir.path(), 0);
    options.enable_test_commands = true;
    let log = Log::with_sink(Box::new(std::io::sink()));
    let state = Arc::new(ServerState::new(
        engine,
        set.clone(),
        Arc::new(MemberBlocklist::default()),
        options,
        log,
    ));
    Node {
        ctx: CommandContext::new(state, 1, "127.0.0.1:1".into()),
        set,
        _dir: dir,
    }
}

impl Node {
    async fn run(&self, body: Document) -> Document {
        let request = request_from_op_msg(body).unwrap();
        execute(&self.ctx, &request).await.expect("a reply")
    }
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

#[test]
fn a_secondary_refuses_writes_and_reads_without_secondary_ok() {
    runtime().block_on(async {
        let node = node(Role::Secondary);
        let insert = node
            .run(doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "d"})
            .await;
        assert_eq!(code(&insert), Some(10107), "{insert}");
        assert_eq!(insert.get_str("codeName").unwrap(), "NotWritablePrimary");
        let find = node.run(doc! {"find": "c", "$db": "d"}).await;
        assert_eq!(code(&find), Some(13435), "{find}");
        let allowed = doc! {"find": "c", "$db": "d", "$readPreference": {"mode": "secondaryPreferred"}};
        assert_eq!(code(&node.run(allowed).await), None);
        // Writes stay refused whatever the read preference; an aggregate
        // with $out and the explain of a write are writes.
        let out = doc! {"aggregate": "c", "pipeline": [{"$out": "o"}], "cursor": {}, "$db": "d",
        "$readPreference": {"mode": "secondary"}};
        assert_eq!(code(&node.run(out).await), Some(10107));
        let explain = doc! {"explain": {"delete": "c", "deletes": [{"q": {}, "limit": 0}]}, "$db": "d",
        "$readPreference": {"mode": "nearest"}};
        assert_eq!(code(&node.run(explain).await), Some(10107));
        // Commands that need no particular state still run.
        assert_eq!(code(&node.run(doc! {"ping": 1, "$db": "admin"}).await), None);
        assert_eq!(code(&node.run(doc! {"hello": 1, "$db": "admin"}).await), None);
    });
}

#[test]
fn a_recovering_member_refuses_reads_even_with_secondary_ok() {
    runtime().block_on(async {
        let node = node(Role::Recovering);
        let find = doc! {"find": "c", "$db": "d", "$readPreference": {"mode": "secondaryPreferred"}};
        let reply = node.run(find).await;
        assert_eq!(code(&reply), Some(13436), "{reply}");
        assert_eq!(reply.get_str("codeName").unwrap(), "NotPrimaryOrSecondary");
    });
}

#[test]
fn a_primary_runs_both_and_every_reply_carries_the_set_metadata() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        let insert = node
            .run(doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "d"})
            .await;
        assert_eq!(code(&insert), None, "{insert}");
        // operationTime is the insert's own entry, not the fake's.
        let write_ts = match insert.get("operationTime") {
            Some(Bson::Timestamp(ts)) => *ts,
            other => panic!("operationTime {other:?}"),
        };
        assert_ne!(write_ts, bson_timestamp(LAST_APPLIED.ts));
        let cluster_time = insert.get_document("$clusterTime").unwrap();
        assert_eq!(
            cluster_time.get("clusterTime"),
            Some(&Bson::Timestamp(bson_timestamp(CLUSTER_TIME)))
        );
        let signature = cluster_time.get_document("signature").unwrap();
        assert_eq!(signature.get_binary_generic("hash").unwrap(), &vec![0u8; 20]);
        assert_eq!(signature.get("keyId"), Some(&Bson::Int64(0)));
        // A read reports the last applied entry, an error reply too.
        let ping = node.run(doc! {"ping": 1, "$db": "admin"}).await;
        assert_eq!(
            ping.get("operationTime"),
            Some(&Bson::Timestamp(bson_timestamp(LAST_APPLIED.ts)))
        );
        let error = node.run(doc! {"find": "c", "filter": 5, "$db": "d"}).await;
        assert_eq!(code(&error), Some(14));
        assert!(
            error.contains_key("operationTime") && error.contains_key("$clusterTime"),
            "{error}"
        );
    });
}

#[test]
fn received_cluster_time_is_gossiped_and_drift_refused() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        let gossip = |secs: u32| doc! {"clusterTime": bson::Timestamp {time: secs, increment: 1}, "signature": {}};
        let ok = node
            .run(doc! {"ping": 1, "$db": "admin", "$clusterTime": gossip(70)})
            .await;
        assert_eq!(code(&ok), None);
        let drift = node
            .run(doc! {"ping": 1, "$db": "admin", "$clusterTime": gossip(DRIFT_LIMIT_SECS + 1)})
            .await;
        assert_eq!(code(&drift), Some(205), "{drift}");
        let observed = node.set.calls.lock().observed_cluster_times.clone();
        assert_eq!(
            observed,
            vec![Timestamp::new(70, 1), Timestamp::new(DRIFT_LIMIT_SECS + 1, 1)]
        );
    });
}

#[test]
fn an_oplog_fetch_gets_the_replication_metadata() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        let fetch = doc! {"find": "oplog.rs", "filter": {}, "$db": "local", "$replData": 1, "$oplogQueryData": 1};
        let reply = node.run(fetch).await;
        assert_eq!(code(&reply), None, "{reply}");
        assert_eq!(reply.get_document("$replData").unwrap().get_i64("term").unwrap(), 2);
        assert_eq!(
            reply.get_document("$oplogQueryData").unwrap().get_i32("rbid").unwrap(),
            1
        );
        let plain = node.run(doc! {"find": "oplog.rs", "filter": {}, "$db": "local"}).await;
        assert!(!plain.contains_key("$replData"));
    });
}

#[test]
fn write_concern_defaults_to_the_topologys_and_failures_sit_beside_ok() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        let insert = node
            .run(doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "d"})
            .await;
        assert_eq!(code(&insert), None);
        let (last_write, concern) = node.set.calls.lock().write_concern_waits.pop().unwrap();
        assert_eq!(concern.w, W::Majority, "the set's default");
        assert_eq!(
            Bson::Timestamp(bson_timestamp(last_write.ts)),
            insert.get("operationTime").cloned().unwrap()
        );
        // A command that wrote nothing waits at the last applied entry.
        node.run(doc! {"delete": "c", "deletes": [{"q": {"_id": 99}, "limit": 1}], "$db": "d"})
            .await;
        assert_eq!(node.set.calls.lock().write_concern_waits.pop().unwrap().0, LAST_APPLIED);
        // A timeout is a writeConcernError beside ok: 1 (the write happened).
        *node.set.write_concern_failure.lock() = Some(ReplError::WriteConcernTimeout { wtimeout_ms: 10 });
        let timed_out = node
            .run(doc! {"insert": "c", "documents": [{"_id": 2}], "writeConcern": {"w": 3, "wtimeout": 10}, "$db": "d"})
            .await;
        assert_eq!(code(&timed_out), None, "{timed_out}");
        assert_eq!(timed_out.get_i32("n").unwrap(), 1);
        let error = timed_out.get_document("writeConcernError").unwrap();
        assert_eq!(error.get_i32("code").unwrap(), 64);
        assert_eq!(error.get_str("codeName").unwrap(), "WriteConcernFailed");
        let info = error.get_document("errInfo").unwrap();
        assert!(info.get_bool("wtimeout").unwrap());
        assert_eq!(info.get_document("writeConcern").unwrap().get_i32("w").unwrap(), 3);
        // An unsatisfiable concern is refused before anything is written.
        let refused = node
            .run(doc! {"insert": "c", "documents": [{"_id": 3}], "writeConcern": {"w": 9}, "$db": "d"})
            .await;
        assert_eq!(code(&refused), Some(100), "{refused}");
        let count = node.run(doc! {"count": "c", "query": {"_id": 3}, "$db": "d"}).await;
        assert_eq!(count.get_i32("n").unwrap(), 0);
    });
}

#[test]
fn read_concern_goes_through_the_topology() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        node.run(doc! {"insert": "c", "documents": [{"_id": 1}], "$db": "d"})
            .await;
        let majority = node
            .run(doc! {"find": "c", "readConcern": {"level": "majority"}, "$db": "d"})
            .await;
        assert_eq!(code(&majority), None, "{majority}");
        let asked = node.set.calls.lock().read_points.pop().unwrap();
        assert_eq!(asked.level, Some(ReadConcernLevel::Majority));
        let linearizable =
            doc! {"find": "c", "filter": {"_id": 1}, "readConcern": {"level": "linearizable"}, "$db": "d"};
        assert_eq!(code(&node.run(linearizable.clone()).await), None);
        assert_eq!(node.set.calls.lock().linearizable_barriers, 1);
        // A barrier that fails (the primary stepped down) fails the read.
        node.set.step_down();
        let mut on_secondary = linearizable;
        on_secondary.insert("$readPreference", doc! {"mode": "secondaryPreferred"});
        assert_eq!(code(&node.run(on_secondary).await), Some(10107));
        // A write takes a readConcern holding only afterClusterTime.
        let node = self::node(Role::Primary);
        let causal = doc! {"insert": "c", "documents": [{"_id": 5}], "$db": "d",
        "readConcern": {"afterClusterTime": bson::Timestamp {time: 1, increment: 1}}};
        assert_eq!(code(&node.run(causal).await), None);
        assert!(node
            .set
            .calls
            .lock()
            .read_points
            .pop()
            .unwrap()
            .after_cluster_time
            .is_some());
    });
}

#[test]
fn retryable_writes_get_the_label_on_a_secondary_and_run_on_a_primary() {
    runtime().block_on(async {
        let node = node(Role::Secondary);
        let lsid = doc! {"id": bson::Binary {subtype: bson::spec::BinarySubtype::Uuid, bytes: vec![7; 16]}};
        let retryable =
            doc! {"insert": "c", "documents": [{"_id": 1}], "lsid": lsid.clone(), "txnNumber": 1_i64, "$db": "d"};
        let on_secondary = node.run(retryable.clone()).await;
        assert_eq!(code(&on_secondary), Some(10107));
        assert_eq!(
            on_secondary.get_array("errorLabels").unwrap(),
            &vec![Bson::from("RetryableWriteError")]
        );
        // On a primary the write runs, unlabelled (its retries are
        // `tests/retryable_writes.rs`).
        let primary = self::node(Role::Primary);
        let ran = primary.run(retryable).await;
        assert_eq!(code(&ran), None, "{ran}");
        assert!(!ran.contains_key("errorLabels"));
        let count = primary.run(doc! {"count": "c", "$db": "d"}).await;
        assert_eq!(count.get_i32("n").unwrap(), 1);
        // txnNumber on a command that is no retryable write.
        let find = doc! {"find": "c", "lsid": lsid, "txnNumber": 1_i64, "$db": "d"};
        let reply = primary.run(find).await;
        assert_eq!(code(&reply), Some(50768));
        assert_eq!(reply.get_str("codeName").unwrap(), "NotARetryableWriteCommand");
    });
}

#[test]
fn hello_serverstatus_and_replset_commands_ask_the_topology() {
    runtime().block_on(async {
        let node = node(Role::Primary);
        let hello = node.run(doc! {"hello": 1, "$db": "admin"}).await;
        assert!(hello.get_bool("isWritablePrimary").unwrap());
        assert_eq!(hello.get_str("setName").unwrap(), "rs");
        let version = hello.get_document("topologyVersion").unwrap().clone();
        assert_eq!(version.get("counter"), Some(&Bson::Int64(3)));
        assert_eq!(hello.get("connectionId"), Some(&Bson::Int32(1)));
        // An awaitable hello is answered as soon as the topology changes.
        let set = node.set.clone();
        let stepper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            set.step_down();
        });
        let started = Instant::now();
        let awaited = node
            .run(doc! {"hello": 1, "topologyVersion": version, "maxAwaitTimeMS": 10_000, "$db": "admin"})
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "waited {:?}",
            started.elapsed()
        );
        assert!(!awaited.get_bool("isWritablePrimary").unwrap());
        assert_eq!(
            awaited.get_document("topologyVersion").unwrap().get("counter"),
            Some(&Bson::Int64(4))
        );
        stepper.await.unwrap();
        let status = node.run(doc! {"serverStatus": 1, "$db": "admin"}).await;
        assert_eq!(status.get_document("repl").unwrap().get_str("setName").unwrap(), "rs");
        let replies = node.run(doc! {"replSetGetStatus": 1, "$db": "admin"}).await;
        assert_eq!(replies.get_str("answeredBy").unwrap(), "fake");
        assert_eq!(node.set.calls.lock().commands, vec!["replSetGetStatus".to_owned()]);
    });
}
