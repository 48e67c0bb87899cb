//! The workloads: what each operation sends and how the data set is
//! prepared.
//!
//! - `insert-j`: one 1 KB document per insert, `writeConcern {w, j: true}`.
//! - `insert`: the same with `{w}`.
//! - `read`: a point `find` by `_id` over `docs` preloaded documents.
//! - `scan`: a range `find` of 100 documents by `_id` from a random start.
//! - `update`: `$inc` of one field of a random document by `_id`, `{w}`.
//!
//! `w` is `--write-concern` (1 or "majority"); reads carry
//! `$readPreference` when it is not `primary`.

use bson::{doc, Document};
use slipstream_wire::DocumentSequence;

use super::client::{reply_ok, Client};
use super::{ReadPreferenceArg, WorkloadName, WriteConcernArg};

pub const DATABASE: &str = "slipstream_bench";
/// Size of the payload string of every document.
pub const PAYLOAD_BYTES: usize = 1000;
/// Documents per preload insert.
const PRELOAD_BATCH_DOCS: u64 = 1000;
/// Documents returned by one `scan` operation.
pub const SCAN_DOCS: i32 = 100;

/// xorshift64*: a small deterministic generator (a seeded run issues the
/// same operations).
pub struct Random(u64);

impl Random {
    pub fn new(seed: u64) -> Random {
        Random(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

pub struct Workload {
    name: WorkloadName,
    docs: u64,
    payload: String,
    write_concern: Document,
    /// `$readPreference` of reads, `None` for `primary`.
    read_preference: Option<Document>,
    /// The preload waits for a majority, so that reads on secondaries find
    /// the documents.
    preload_write_concern: Document,
}

impl Workload {
    pub fn new(
        name: WorkloadName,
        docs: u64,
        write_concern: WriteConcernArg,
        read_preference: ReadPreferenceArg,
        replica_set: bool,
    ) -> Workload {
        let mut concern = doc! {"w": write_concern.w()};
        if name == WorkloadName::InsertJ {
            concern.insert("j", true);
        }
        Workload {
            name,
            docs,
            payload: "x".repeat(PAYLOAD_BYTES),
            write_concern: concern,
            read_preference: (read_preference != ReadPreferenceArg::Primary)
                .then(|| doc! {"mode": read_preference.as_str()}),
            preload_write_concern: if replica_set {
                doc! {"w": "majority"}
            } else {
                doc! {"w": 1}
            },
        }
    }

    fn collection(&self) -> &'static str {
        match self.name {
            WorkloadName::InsertJ | WorkloadName::Insert => "inserts",
            WorkloadName::Read | WorkloadName::Scan | WorkloadName::Update => "docs",
        }
    }

    /// Drops the collection and, for read/scan/update, loads `docs`
    /// documents with `_id` 0..docs over `connections` parallel clients.
    pub async fn prepare(&self, address: &str, connections: usize) -> Result<(), String> {
        let mut admin = Client::connect(address).await.map_err(|err| format!("connect to {address}: {err}"))?;
        let reply = admin
            .command(&doc! {"drop": self.collection(), "$db": DATABASE}, &[])
            .await
            .map_err(|err| format!("drop: {err}"))?;
        if !reply_ok(&reply) && reply.get_i32("code").ok() != Some(26) {
            return Err(format!("drop failed: {reply}"));
        }
        if matches!(self.name, WorkloadName::InsertJ | WorkloadName::Insert) {
            return Ok(());
        }
        let loaders = connections.clamp(1, 8) as u64;
        let batches = self.docs.div_ceil(PRELOAD_BATCH_DOCS);
        let started = std::time::Instant::now();
        let mut tasks = Vec::new();
        for loader in 0..loaders {
            let address = address.to_owned();
            let payload = self.payload.clone();
            let write_concern = self.preload_write_concern.clone();
            let docs = self.docs;
            tasks.push(tokio::spawn(async move {
                let mut client = Client::connect(&address).await.map_err(|err| err.to_string())?;
                let mut batch = loader;
                while batch < batches {
                    let first = batch * PRELOAD_BATCH_DOCS;
                    let last = (first + PRELOAD_BATCH_DOCS).min(docs);
                    let documents = (first..last)
                        .map(|id| doc! {"_id": id as i64, "counter": 0_i64, "payload": payload.clone()})
                        .collect();
                    let sequence = DocumentSequence { identifier: "documents".into(), documents };
                    let reply = client
                        .command(
                            &doc! {"insert": "docs", "ordered": false, "writeConcern": write_concern.clone(), "$db": DATABASE},
                            &[sequence],
                        )
                        .await
                        .map_err(|err| err.to_string())?;
                    if !reply_ok(&reply) {
                        return Err(format!("preload insert failed: {reply}"));
                    }
                    batch += loaders;
                }
                Ok::<(), String>(())
            }));
        }
        for task in tasks {
            task.await.map_err(|err| err.to_string())??;
        }
        eprintln!("[bench] preloaded {} documents in {:.1}s", self.docs, started.elapsed().as_secs_f64());
        Ok(())
    }

    /// The command of the `sequence`-th operation of client `client`.
    pub fn next_operation(&self, client: u64, sequence: u64, random: &mut Random) -> (Document, Vec<DocumentSequence>) {
        match self.name {
            WorkloadName::InsertJ | WorkloadName::Insert => {
                let document = doc! {"_id": format!("{client}-{sequence}"), "payload": self.payload.clone()};
                let body = doc! {"insert": "inserts", "ordered": true, "writeConcern": self.write_concern.clone(), "$db": DATABASE};
                (body, vec![DocumentSequence { identifier: "documents".into(), documents: vec![document] }])
            }
            WorkloadName::Read => {
                let id = random.below(self.docs) as i64;
                let body =
                    doc! {"find": "docs", "filter": {"_id": id}, "limit": 1, "singleBatch": true, "$db": DATABASE};
                (self.with_read_preference(body), Vec::new())
            }
            WorkloadName::Scan => {
                let start = random.below(self.docs.saturating_sub(SCAN_DOCS as u64).max(1)) as i64;
                let body = doc! {
                    "find": "docs", "filter": {"_id": {"$gte": start}}, "sort": {"_id": 1},
                    "limit": SCAN_DOCS, "batchSize": SCAN_DOCS, "singleBatch": true, "$db": DATABASE,
                };
                (self.with_read_preference(body), Vec::new())
            }
            WorkloadName::Update => {
                let id = random.below(self.docs) as i64;
                let update = doc! {"q": {"_id": id}, "u": {"$inc": {"counter": 1_i64}}};
                let body = doc! {"update": "docs", "ordered": true, "writeConcern": self.write_concern.clone(), "$db": DATABASE};
                (body, vec![DocumentSequence { identifier: "updates".into(), documents: vec![update] }])
            }
        }
    }

    fn with_read_preference(&self, mut body: Document) -> Document {
        if let Some(read_preference) = &self.read_preference {
            body.insert("$readPreference", read_preference.clone());
        }
        body
    }
}
