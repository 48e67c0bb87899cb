//! Three members in one process over an in-memory `Network`: real engines
//! on real files, real coordinators and companions; only the transport is
//! replaced (commands are handed to the target member's `Topology`, and a
//! tiny oplog server answers the fetcher's `find` / `getMore`, a tiny data
//! server the initial sync's `listDatabases`, `listCollections`,
//! `listIndexes`, `count` and `find`: members that join empty initial-sync
//! from the initiator, as a real process does). The test
//! drives an election, a replicated majority write, a partition of the
//! primary, a new election, a write the isolated primary takes alone, and
//! the heal that rolls it back.

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document, RawDocumentBuf};
use parking_lot::{Mutex, RwLock};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_repl::topology::BoxFuture;
use slipstream_repl::{NetError, Network, ReplError, ReplicaSet, ReplicaSetOptions, Topology, WriteConcern};
use slipstream_storage::io::{FaultyIo, IoBackend, StdIo};
use slipstream_storage::journal::segment_file_name;
use slipstream_storage::recovery::JOURNAL_DIR_NAME;
use slipstream_storage::{from_bson_timestamp, Engine, EngineOptions, ReadAt};

const MEMBERS: u16 = 3;
/// Bound of every wait, so that a broken build fails instead of hanging.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
const OPLOG_READ_BYTES: usize = 16 * 1024 * 1024;

fn host(port: u16) -> String {
    format!("localhost:{port}")
}

/// A member's topology handle and its engine.
type Member = (Arc<ReplicaSet>, Arc<Engine>);

/// Who is reachable from whom, and each member's handle.
#[derive(Default)]
struct Router {
    members: RwLock<HashMap<String, Member>>,
    /// Pairs (either direction) that cannot talk.
    cut: RwLock<BTreeSet<(String, String)>>,
    cursors: Mutex<HashMap<i64, (String, Timestamp)>>,
    next_cursor: AtomicI64,
}

impl Router {
    fn reachable(&self, a: &str, b: &str) -> bool {
        let cut = self.cut.read();
        !cut.contains(&(a.to_owned(), b.to_owned())) && !cut.contains(&(b.to_owned(), a.to_owned()))
    }

    fn isolate(&self, member: &str) {
        let mut cut = self.cut.write();
        for port in 1..=MEMBERS {
            if host(port) != member {
                cut.insert((member.to_owned(), host(port)));
            }
        }
    }

    fn heal(&self) {
        self.cut.write().clear();
    }

    fn member(&self, host: &str) -> Option<Member> {
        self.members.read().get(host).cloned()
    }

    async fn serve(&self, host: &str, db: &str, body: Document) -> Result<Document, NetError> {
        let (set, engine) = self
            .member(host)
            .ok_or_else(|| NetError::Unreachable(host.to_owned()))?;
        let name = body.keys().next().cloned().unwrap_or_default();
        let mut reply = match name.as_str() {
            "find" | "getMore" if db == "local" => self.oplog_query(host, &engine, &name, &body).await?,
            "listDatabases" | "listCollections" | "listIndexes" | "count" | "find" => {
                data_query(&engine, db, &name, &body)?
            }
            _ => set.run_command(&name, &body).await.map_err(command_error)?,
        };
        if matches!(name.as_str(), "find" | "getMore") {
            for (key, value) in set.oplog_query_metadata().unwrap_or_default() {
                reply.insert(key, value);
            }
        }
        reply.insert("ok", 1.0);
        Ok(reply)
    }

    /// The server's oplog queries, as much as the fetcher and the rollback
    /// search use: `ts` bounds, `$natural: -1`, tailable awaitData getMore.
    async fn oplog_query(
        &self,
        host: &str,
        engine: &Arc<Engine>,
        name: &str,
        body: &Document,
    ) -> Result<Document, NetError> {
        let protocol = |why: &str| NetError::Protocol(why.to_owned());
        if name == "find" {
            let filter = body.get_document("filter").cloned().unwrap_or_default();
            let bound = |op: &str| match filter.get("ts") {
                // `{ts: <timestamp>}` (an initial sync's "does the source
                // still hold this entry"): the entries from it on.
                Some(Bson::Timestamp(ts)) if op == "$gte" => Some(from_bson_timestamp(*ts)),
                Some(Bson::Document(ts)) => match ts.get(op) {
                    Some(Bson::Timestamp(ts)) => Some(from_bson_timestamp(*ts)),
                    _ => None,
                },
                _ => None,
            };
            let limit = match body.get("limit") {
                Some(Bson::Int32(n)) => *n as usize,
                Some(Bson::Int64(n)) => *n as usize,
                _ => 5000,
            };
            let entries = if body.get_document("sort").is_ok_and(|s| s.contains_key("$natural")) {
                engine.oplog_read_newest_at_or_before(bound("$lte").unwrap_or(Timestamp::MAX), limit)
            } else {
                let from = bound("$gte").map_or(Bound::Unbounded, Bound::Included);
                engine.oplog_read(from, limit, OPLOG_READ_BYTES)
            }
            .map_err(|e| protocol(&e.to_string()))?;
            let documents = documents(&entries);
            let mut id = 0;
            if body.get_bool("tailable").unwrap_or(false) {
                id = self.next_cursor.fetch_add(1, Ordering::SeqCst) + 1;
                let last = documents.last().and_then(ts_of).unwrap_or(Timestamp::new(0, 0));
                self.cursors.lock().insert(id, (host.to_owned(), last));
            }
            return Ok(doc! {"cursor": {"id": id, "ns": "local.oplog.rs", "firstBatch": documents}});
        }
        let id = body.get_i64("getMore").map_err(|_| protocol("getMore id"))?;
        let (_, last) = self
            .cursors
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| protocol("no such cursor"))?;
        let wait = Duration::from_millis(body.get_i64("maxTimeMS").unwrap_or(1000) as u64);
        let mut watch = engine.oplog_watch();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let entries = engine
                .oplog_read(Bound::Excluded(last), 5000, OPLOG_READ_BYTES)
                .map_err(|e| protocol(&e.to_string()))?;
            if !entries.is_empty() || tokio::time::Instant::now() >= deadline {
                let documents = documents(&entries);
                if let Some(ts) = documents.last().and_then(ts_of) {
                    self.cursors.lock().insert(id, (host.to_owned(), ts));
                }
                return Ok(doc! {"cursor": {"id": id, "ns": "local.oplog.rs", "nextBatch": documents}});
            }
            let _ = tokio::time::timeout_at(deadline, watch.changed()).await;
        }
    }
}

/// What an initial sync reads of the source's data, over the engine:
/// every reply is one batch (cursor id 0), as these tests copy little.
/// Options it does not model (`min`, a filter) are refused, so that a
/// sync that needs them fails loudly instead of copying the wrong thing.
fn data_query(engine: &Arc<Engine>, db: &str, name: &str, body: &Document) -> Result<Document, NetError> {
    let protocol = |why: String| NetError::Protocol(why);
    let reader = engine.reader(ReadAt::Latest).map_err(|e| protocol(e.to_string()))?;
    let collection = |key: &str| format!("{db}.{}", body.get_str(key).unwrap_or_default());
    match name {
        "listDatabases" => {
            let databases: Vec<Document> = engine
                .list_databases()
                .into_iter()
                .filter(|name| name != "local")
                .map(|name| doc! {"name": name, "sizeOnDisk": 0_i64, "empty": false})
                .collect();
            Ok(doc! {"databases": databases})
        }
        "listCollections" => {
            let collections: Vec<Document> = engine
                .list_collections(db)
                .into_iter()
                .map(|info| {
                    let name = info.ns.split_once('.').map_or("", |(_, name)| name).to_owned();
                    doc! {"name": name, "type": "collection", "options": info.options,
                    "info": {"uuid": bson::Binary {subtype: bson::spec::BinarySubtype::Uuid, bytes: info.uuid.bytes().to_vec()}}}
                })
                .collect();
            Ok(doc! {"cursor": {"id": 0_i64, "ns": format!("{db}.$cmd.listCollections"), "firstBatch": collections}})
        }
        "listIndexes" => {
            let ns = collection("listIndexes");
            let info = engine.collection_info(&ns).ok_or_else(|| NetError::Command {
                code: 26,
                message: format!("ns does not exist: {ns}"),
                reply: doc! {"ok": 0.0, "code": 26},
            })?;
            let specs: Vec<Document> = info.indexes.iter().map(|spec| spec.to_document()).collect();
            Ok(doc! {"cursor": {"id": 0_i64, "ns": ns, "firstBatch": specs}})
        }
        "count" => {
            let n = reader
                .count(&collection("count"))
                .map_err(|e| protocol(e.to_string()))?;
            Ok(doc! {"n": n as i64})
        }
        _ => {
            if body.contains_key("min") || body.get_document("filter").is_ok_and(|f| !f.is_empty()) {
                return Err(protocol(format!(
                    "the in-memory network does not serve this find: {body}"
                )));
            }
            let ns = collection("find");
            let documents: Vec<Document> = reader
                .scan(&ns, Bound::Unbounded, Bound::Unbounded, false, usize::MAX)
                .map_err(|e| protocol(e.to_string()))?
                .into_iter()
                .map(|(_, document)| document)
                .collect();
            Ok(doc! {"cursor": {"id": 0_i64, "ns": ns, "firstBatch": documents}})
        }
    }
}

fn documents(entries: &[RawDocumentBuf]) -> Vec<Document> {
    entries
        .iter()
        .map(|e| Document::try_from(e.as_ref()).expect("an oplog entry is a document"))
        .collect()
}

fn ts_of(entry: &Document) -> Option<Timestamp> {
    match entry.get("ts") {
        Some(Bson::Timestamp(ts)) => Some(from_bson_timestamp(*ts)),
        _ => None,
    }
}

/// The codes the members act on (the server's table has them all).
fn command_error(err: ReplError) -> NetError {
    let code = match &err {
        ReplError::NotYetInitialized => 94,
        ReplError::NotWritablePrimary => 10107,
        ReplError::BadArgument { code, .. } => *code,
        ReplError::InvalidReplicaSetConfig(_) => 93,
        ReplError::IllegalOperation(_) => 20,
        _ => 8,
    };
    NetError::Command {
        code,
        message: err.to_string(),
        reply: doc! {"ok": 0.0, "code": code},
    }
}

/// One member's view of the in-memory network.
struct MemoryNetwork {
    me: String,
    router: Arc<Router>,
}

impl Network for MemoryNetwork {
    fn run<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Document, NetError>> {
        Box::pin(async move {
            if !self.router.reachable(&self.me, host) {
                return Err(NetError::Blocked);
            }
            match tokio::time::timeout(timeout, self.router.serve(host, db, body)).await {
                Ok(result) if self.router.reachable(&self.me, host) => result,
                Ok(_) => Err(NetError::Blocked),
                Err(_) => Err(NetError::Timeout),
            }
        })
    }
}

struct Cluster {
    router: Arc<Router>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    fn start(runtime: &tokio::runtime::Runtime) -> Cluster {
        Cluster::start_with_io(runtime, |_| StdIo::new())
    }

    /// `start` with member `port`'s engine doing its file I/O through
    /// `io(port)`.
    fn start_with_io(runtime: &tokio::runtime::Runtime, io: impl Fn(u16) -> Arc<dyn IoBackend>) -> Cluster {
        let router = Arc::new(Router::default());
        let mut dirs = Vec::new();
        for port in 1..=MEMBERS {
            let dir = tempfile::tempdir().unwrap();
            let mut options = EngineOptions::new(dir.path());
            options.replicated = true;
            options.journal_commit_interval_ms = 5;
            let engine = Engine::open_with_io(options, io(port)).unwrap();
            let me = host(port);
            let network = Arc::new(MemoryNetwork {
                me: me.clone(),
                router: router.clone(),
            });
            let set_options = ReplicaSetOptions {
                set_name: "rs".into(),
                port,
                host_names: Vec::new(),
            };
            let me_host = Arc::new(RwLock::new(me.clone()));
            let set =
                ReplicaSet::start(engine.clone(), network, me_host, set_options, runtime.handle().clone()).unwrap();
            router.members.write().insert(me, (Arc::new(set), engine));
            dirs.push(dir);
        }
        Cluster { router, _dirs: dirs }
    }

    /// Member `port`'s first journal segment (the only one these tests
    /// fill).
    fn journal_segment(&self, port: u16) -> std::path::PathBuf {
        let dir = self._dirs[usize::from(port) - 1].path();
        dir.join(JOURNAL_DIR_NAME).join(segment_file_name(1))
    }

    fn set(&self, port: u16) -> Arc<ReplicaSet> {
        self.router.member(&host(port)).unwrap().0
    }

    fn engine(&self, port: u16) -> Arc<Engine> {
        self.router.member(&host(port)).unwrap().1
    }

    /// The one writable primary among `ports` in a term above `above`.
    async fn wait_for_primary(&self, ports: &[u16], above: i64) -> (u16, i64) {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        loop {
            for &port in ports {
                let snapshot = self.set(port).shared().snapshot();
                if snapshot.writable_primary && snapshot.term > above {
                    return (port, snapshot.term);
                }
            }
            assert!(Instant::now() < deadline, "no primary among {ports:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + WAIT_TIMEOUT;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn get(&self, port: u16, id: i32) -> Option<Document> {
        let reader = self.engine(port).reader(ReadAt::Latest).unwrap();
        reader.get("test.c", &Bson::Int32(id)).unwrap()
    }

    fn stop(self) {
        for port in 1..=MEMBERS {
            let (set, engine) = self.router.member(&host(port)).unwrap();
            set.stop();
            engine.shutdown().unwrap();
        }
    }
}

async fn insert(cluster: &Cluster, port: u16, id: i32) -> Result<OpTime, ReplError> {
    let engine = cluster.engine(port);
    let op = tokio::task::spawn_blocking(move || engine.writer().insert("test.c", doc! {"_id": id}).map_err(Box::new))
        .await
        .unwrap()
        .map_err(ReplError::Storage)?;
    Ok(op)
}

#[test]
fn three_members_elect_replicate_fail_over_and_roll_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let cluster = Cluster::start(&runtime);
    runtime.block_on(async {
        let config = doc! {
            "_id": "rs",
            "members": [{"_id": 1, "host": host(1)}, {"_id": 2, "host": host(2)}, {"_id": 3, "host": host(3)}],
            "settings": {"electionTimeoutMillis": 500, "heartbeatIntervalMillis": 100},
        };
        cluster
            .set(1)
            .run_command("replSetInitiate", &doc! {"replSetInitiate": config})
            .await
            .unwrap();
        let (primary, term) = cluster.wait_for_primary(&[1, 2, 3], 0).await;

        // A majority write: acknowledged once a majority holds it durably.
        let op = insert(&cluster, primary, 1).await.unwrap();
        let set = cluster.set(primary);
        let majority = WriteConcern {
            wtimeout_ms: 10_000,
            ..WriteConcern::majority()
        };
        set.wait_for_write_concern(op, &majority).await.unwrap();
        let holders = (1..=MEMBERS)
            .filter(|&p| cluster.engine(p).last_durable() >= op)
            .count();
        assert!(holders >= 2, "a majority write on {holders} member(s)");
        cluster
            .wait_until("every member to hold the write", || {
                (1..=MEMBERS).all(|p| cluster.get(p, 1).is_some())
            })
            .await;

        // Partition the primary: the others elect a new one in a later term;
        // the old one steps down once it sees no majority.
        cluster.router.isolate(&host(primary));
        // A write the isolated primary takes before it notices: never on a
        // majority, it must be rolled back after the heal.
        let rbid_before = cluster.set(primary).shared().rbid();
        insert(&cluster, primary, 99)
            .await
            .expect("the isolated primary still takes a w:1 write");
        let others: Vec<u16> = (1..=MEMBERS).filter(|&p| p != primary).collect();
        let (new_primary, new_term) = cluster.wait_for_primary(&others, term).await;
        assert!(new_term > term);
        let op = insert(&cluster, new_primary, 2).await.unwrap();
        cluster
            .set(new_primary)
            .wait_for_write_concern(op, &majority)
            .await
            .unwrap();
        let old = cluster.set(primary);
        cluster
            .wait_until("the isolated primary to step down", || {
                !old.shared().snapshot().writable_primary
            })
            .await;
        assert!(cluster.get(primary, 99).is_some());

        // Heal: the old primary rolls back its lone write and catches up.
        cluster.router.heal();
        cluster
            .wait_until("the old primary to roll back and catch up", || {
                cluster.get(primary, 2).is_some() && cluster.get(primary, 99).is_none()
            })
            .await;
        for port in 1..=MEMBERS {
            assert!(
                cluster.get(port, 1).is_some() && cluster.get(port, 2).is_some(),
                "member {port}"
            );
            assert!(
                cluster.get(port, 99).is_none(),
                "member {port} kept an uncommitted write"
            );
        }
        assert_ne!(old.shared().rbid(), rbid_before, "the rollback bumps the rollback id");
    });
    cluster.stop();
}

/// Rounds of the partition test, and writes tried per round.
const PARTITION_ROUNDS: u64 = 6;
const WRITES_PER_ROUND: i32 = 10;
/// How long a partition lasts at least: more than two election timeouts.
const PARTITION_HOLD_MS: u64 = 700;

/// xorshift64*: which member each round isolates (fixed seed: the choices
/// repeat; the timing does not).
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

#[test]
fn partitions_never_lose_a_majority_write_and_members_converge() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let cluster = Cluster::start(&runtime);
    runtime.block_on(async {
        let config = doc! {
            "_id": "rs",
            "members": [{"_id": 1, "host": host(1)}, {"_id": 2, "host": host(2)}, {"_id": 3, "host": host(3)}],
            "settings": {"electionTimeoutMillis": 300, "heartbeatIntervalMillis": 60},
        };
        cluster
            .set(1)
            .run_command("replSetInitiate", &doc! {"replSetInitiate": config})
            .await
            .unwrap();
        cluster.wait_for_primary(&[1, 2, 3], 0).await;
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut acknowledged = Vec::new();
        let majority = WriteConcern {
            wtimeout_ms: 1_000,
            ..WriteConcern::majority()
        };
        let mut id = 0;
        for round in 0..PARTITION_ROUNDS {
            // Even rounds isolate the primary (an election must follow);
            // odd rounds isolate a member drawn at random, or nobody.
            let primary = (1..=MEMBERS).find(|&p| cluster.set(p).shared().snapshot().writable_primary);
            let isolated = match primary {
                Some(primary) if round % 2 == 0 => primary,
                _ => (next(&mut rng) % (u64::from(MEMBERS) + 1)) as u16,
            };
            if isolated > 0 {
                cluster.router.isolate(&host(isolated));
            }
            for _ in 0..WRITES_PER_ROUND {
                id += 1;
                let primary = (1..=MEMBERS).find(|&p| cluster.set(p).shared().snapshot().writable_primary);
                let Some(primary) = primary else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let Ok(op) = insert(&cluster, primary, id).await else {
                    continue;
                };
                if cluster.set(primary).wait_for_write_concern(op, &majority).await.is_ok() {
                    acknowledged.push(id);
                }
            }
            // Long enough for the others to elect (election timeout 300 ms).
            tokio::time::sleep(Duration::from_millis(PARTITION_HOLD_MS + next(&mut rng) % 300)).await;
            cluster.router.heal();
        }
        assert!(!acknowledged.is_empty(), "no write was acknowledged at all");
        // Healed: one primary, every member at the same oplog end.
        cluster.wait_for_primary(&[1, 2, 3], 0).await;
        let (primary, _) = cluster.wait_for_primary(&[1, 2, 3], 0).await;
        let op = insert(&cluster, primary, 1_000_000).await.unwrap();
        cluster
            .set(primary)
            .wait_for_write_concern(op, &majority)
            .await
            .unwrap();
        cluster
            .wait_until("every member to reach the last write", || {
                (1..=MEMBERS).all(|p| cluster.engine(p).last_applied() >= op)
            })
            .await;
        let oplog = |port: u16| {
            let entries = cluster
                .engine(port)
                .oplog_read(Bound::Unbounded, 1_000_000, OPLOG_READ_BYTES)
                .unwrap();
            documents(&entries)
                .iter()
                .map(|e| (ts_of(e), e.get_i64("t").ok()))
                .collect::<Vec<_>>()
        };
        let reference = oplog(1);
        for port in 2..=MEMBERS {
            assert_eq!(oplog(port), reference, "member {port}'s oplog differs from member 1's");
        }
        let term = cluster.set(primary).shared().snapshot().term;
        eprintln!(
            "partition test: {} of {id} writes acknowledged, final term {term}",
            acknowledged.len()
        );
        assert!(term > 1, "the partitions caused no election");
        for port in 1..=MEMBERS {
            let missing: Vec<i32> = acknowledged
                .iter()
                .copied()
                .filter(|&id| cluster.get(port, id).is_none())
                .collect();
            assert!(missing.is_empty(), "member {port} lost acknowledged writes {missing:?}");
        }
    });
    cluster.stop();
}

/// Releases every fsync hold when dropped: a hold left behind (one CI run
/// hung so, with the test's checks all passed) blocks a member's blocking
/// task for ever, and the runtime's drop waits for it. What was left is
/// reported on stderr.
struct ReleaseHoldsOnDrop<'a>(&'a [FaultyIo]);

impl Drop for ReleaseHoldsOnDrop<'_> {
    fn drop(&mut self) {
        for (index, io) in self.0.iter().enumerate() {
            if let Some(left) = io.release_any_hold() {
                eprintln!("member {}: {left} was left at the end of the test; released", index + 1);
            }
        }
    }
}

/// A `w: "majority"` write is acknowledged once a majority holds it
/// durably, whichever members they are: not while the secondaries have
/// applied it but their journal fsyncs are held (applied positions must
/// never count), and without waiting for the primary's own fsync once both
/// secondaries have theirs (the commit point is the whole rule).
#[test]
fn majority_acknowledgement_follows_durable_positions_only() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let faulty: Vec<FaultyIo> = (0..MEMBERS).map(|_| FaultyIo::over_std()).collect();
    // Declared after the runtime, so dropped before it, on a panic too.
    let _holds = ReleaseHoldsOnDrop(&faulty);
    let cluster = Cluster::start_with_io(&runtime, |port| faulty[usize::from(port) - 1].as_backend());
    let io = |port: u16| &faulty[usize::from(port) - 1];
    runtime.block_on(async {
        let config = doc! {
            "_id": "rs",
            "members": [{"_id": 1, "host": host(1)}, {"_id": 2, "host": host(2)}, {"_id": 3, "host": host(3)}],
            "settings": {"electionTimeoutMillis": 2000, "heartbeatIntervalMillis": 100},
        };
        cluster
            .set(1)
            .run_command("replSetInitiate", &doc! {"replSetInitiate": config})
            .await
            .unwrap();
        let (primary, _) = cluster.wait_for_primary(&[1, 2, 3], 0).await;
        let secondaries: Vec<u16> = (1..=MEMBERS).filter(|&p| p != primary).collect();
        let majority = WriteConcern {
            wtimeout_ms: WAIT_TIMEOUT.as_millis() as i64,
            ..WriteConcern::majority()
        };
        let set = cluster.set(primary);
        let op = insert(&cluster, primary, 1).await.unwrap();
        set.wait_for_write_concern(op, &majority).await.unwrap();
        cluster
            .wait_until("every member to hold the first write durably", || {
                (1..=MEMBERS).all(|p| cluster.engine(p).last_durable() >= op)
            })
            .await;

        // Both secondaries apply the write but cannot sync it.
        for &port in &secondaries {
            io(port).hold_next_sync(&cluster.journal_segment(port));
        }
        let op = insert(&cluster, primary, 2).await.unwrap();
        let waiting = {
            let set = set.clone();
            let majority = majority.clone();
            tokio::spawn(async move { set.wait_for_write_concern(op, &majority).await })
        };
        for &port in &secondaries {
            assert!(
                io(port).wait_until_sync_held(WAIT_TIMEOUT),
                "member {port} never synced"
            );
        }
        cluster
            .wait_until("the secondaries to apply the write", || {
                secondaries.iter().all(|&p| cluster.engine(p).last_applied() >= op)
            })
            .await;
        cluster
            .wait_until("the primary to sync the write", || {
                cluster.engine(primary).last_durable() >= op
            })
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "acknowledged with only the primary durable");
        for &port in &secondaries {
            io(port).release_held_sync();
        }
        tokio::time::timeout(WAIT_TIMEOUT, waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();

        // The primary's own fsync is held: the two secondaries make the
        // majority.
        io(primary).hold_next_sync(&cluster.journal_segment(primary));
        let op = insert(&cluster, primary, 3).await.unwrap();
        tokio::time::timeout(WAIT_TIMEOUT, set.wait_for_write_concern(op, &majority))
            .await
            .expect("acknowledged once both secondaries are durable")
            .unwrap();
        assert!(io(primary).wait_until_sync_held(WAIT_TIMEOUT));
        assert!(
            cluster.engine(primary).last_durable() < op,
            "the primary's fsync was held"
        );
        for &port in &secondaries {
            assert!(
                cluster.engine(port).last_durable() >= op,
                "member {port} is not durable"
            );
        }
        io(primary).release_held_sync();
    });
    cluster.stop();
}
