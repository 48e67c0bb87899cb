//! `Standalone`: the topology of a node started without `--replSet`, as a
//! MongoDB 7.0 standalone `mongod` behaves.
//!
//! - Always writable; the topology never changes.
//! - Write concern: `w: 0` and `w: 1` are satisfied once the write is
//!   applied; `j: true` (or `fsync`) waits for the journal; `w: "majority"`
//!   means the node itself, and MongoDB journals majority writes, so it
//!   waits for the journal too; `w > 1` is refused (BadValue), a tag is
//!   UnknownReplWriteConcern (79).
//! - Read concern: `local`, `available` and `majority` read the latest
//!   state (everything applied is the whole "set"'s); `linearizable` and
//!   `snapshot` need a replica set (NotAReplicaSet, 123), as in MongoDB.
//!   `afterClusterTime` is satisfied at once: the node's cluster time is its
//!   own last oplog timestamp, so it has applied every time it handed out.
//! - Replication commands answer NoReplicationEnabled (76).

use std::sync::Arc;
use std::time::Instant;

use bson::{doc, DateTime, Document};
use slipstream_clock::{OpTime, Timestamp};
use slipstream_storage::{bson_timestamp, Engine, ReadAt};

use crate::concern::{ReadConcernArgs, ReadConcernLevel, WriteConcern, W};
use crate::error::ReplError;
use crate::topology::{BoxFuture, CommandAccess, Topology};

pub struct Standalone {
    /// The storage engine (shared; locks internally).
    engine: Arc<Engine>,
}

impl Standalone {
    pub fn new(engine: Arc<Engine>) -> Standalone {
        Standalone { engine }
    }
}

/// `lastWrite` of a `hello` reply: on a standalone every durable write is
/// majority-committed, so the majority fields follow the durable position.
pub fn last_write_document(applied: (OpTime, i64), majority: (OpTime, i64)) -> Document {
    let op_time = |op: OpTime| doc! {"ts": bson_timestamp(op.ts), "t": op.term};
    doc! {
        "opTime": op_time(applied.0),
        "lastWriteDate": DateTime::from_millis(applied.1),
        "majorityOpTime": op_time(majority.0),
        "majorityWriteDate": DateTime::from_millis(majority.1),
    }
}

impl Topology for Standalone {
    fn is_replica_set(&self) -> bool {
        false
    }

    fn hello_fields(&self, legacy: bool, reply: &mut Document) {
        reply.insert(if legacy { "ismaster" } else { "isWritablePrimary" }, true);
        let applied = self.engine.last_applied_wall();
        let durable = self.engine.last_durable_wall();
        reply.insert("lastWrite", last_write_document(applied, durable));
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
        WriteConcern { implicit: true, ..WriteConcern::w1() }
    }

    fn check_write_concern(&self, concern: &WriteConcern) -> Result<(), ReplError> {
        match &concern.w {
            W::Nodes(n) if *n > 1 => Err(ReplError::bad_value("cannot use 'w' > 1 on a standalone")),
            W::Tag(mode) => Err(ReplError::UnknownReplWriteConcern(format!(
                "No write concern mode named '{mode}' found in replica set configuration"
            ))),
            _ => Ok(()),
        }
    }

    fn wait_for_write_concern<'a>(
        &'a self,
        last_write: OpTime,
        concern: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>> {
        Box::pin(async move {
            if !concern.needs_journal() {
                return Ok(());
            }
            self.engine.wait_durable_async(last_write.ts).await.map_err(ReplError::from)
        })
    }

    fn read_point<'a>(
        &'a self,
        concern: &'a ReadConcernArgs,
        _deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>> {
        Box::pin(async move {
            match concern.effective_level() {
                ReadConcernLevel::Local | ReadConcernLevel::Available | ReadConcernLevel::Majority => {
                    Ok(ReadAt::Latest)
                }
                ReadConcernLevel::Linearizable => {
                    Err(ReplError::NotAReplicaSet("node needs to be a replica set member to use read concern".into()))
                }
                ReadConcernLevel::Snapshot => Err(ReplError::NotAReplicaSet(
                    "node needs to be a replica set member to use readConcern: snapshot".into(),
                )),
            }
        })
    }

    fn linearizable_barrier(&self, _deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>> {
        Box::pin(async {
            Err(ReplError::NotAReplicaSet("node needs to be a replica set member to use read concern".into()))
        })
    }

    fn observe_cluster_time(&self, _cluster_time: Timestamp) -> Result<(), ReplError> {
        // A standalone keeps no cluster-wide clock: its time is its oplog's.
        Ok(())
    }

    fn cluster_time(&self) -> Timestamp {
        self.engine.last_applied().ts
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
