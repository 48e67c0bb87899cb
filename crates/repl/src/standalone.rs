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
//!   `snapshot` need a replica set (NotAReplicaSet, 123), and so do
//!   `afterClusterTime` and `atClusterTime` (IllegalOperation, 20: a
//!   standalone keeps no cluster time), in that order, as MongoDB's
//!   `waitForReadConcern` checks them. Drivers only send `afterClusterTime`
//!   after a reply carried `operationTime`, which a standalone never sends.
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

    fn hello_fields(&self, legacy: bool, reply: &mut Document) -> i64 {
        reply.insert(if legacy { "ismaster" } else { "isWritablePrimary" }, true);
        let applied = self.engine.last_applied_wall();
        let durable = self.engine.last_durable_wall();
        reply.insert("lastWrite", last_write_document(applied, durable));
        self.topology_counter()
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
                ReadConcernLevel::Local | ReadConcernLevel::Available | ReadConcernLevel::Majority => {}
                ReadConcernLevel::Linearizable => {
                    return Err(ReplError::NotAReplicaSet(
                        "node needs to be a replica set member to use read concern".into(),
                    ))
                }
                ReadConcernLevel::Snapshot => {
                    return Err(ReplError::NotAReplicaSet(
                        "node needs to be a replica set member to use readConcern: snapshot".into(),
                    ))
                }
            }
            let named = match (concern.after_cluster_time, concern.at_cluster_time) {
                (Some(_), _) => "afterClusterTime",
                (None, Some(_)) => "atClusterTime",
                (None, None) => return Ok(ReadAt::Latest),
            };
            Err(ReplError::IllegalOperation(format!(
                "Cannot specify {named} readConcern without replication enabled"
            )))
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

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use slipstream_storage::EngineOptions;

    fn read_point(standalone: &Standalone, body: Document) -> Result<ReadAt, ReplError> {
        let args = ReadConcernArgs::parse(&body).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(standalone.read_point(&args, None))
    }

    #[test]
    fn concerns_a_standalone_refuses_as_mongodb_does() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineOptions::new(dir.path())).unwrap();
        let standalone = Standalone::new(engine.clone());
        for level in ["local", "available", "majority"] {
            assert_eq!(read_point(&standalone, doc! {"readConcern": {"level": level}}).unwrap(), ReadAt::Latest);
        }
        let code = |result: Result<ReadAt, ReplError>| match result.unwrap_err() {
            ReplError::NotAReplicaSet(_) => 123,
            ReplError::IllegalOperation(_) => 20,
            other => panic!("{other:?}"),
        };
        let ts = bson::Timestamp { time: 1, increment: 1 };
        assert_eq!(code(read_point(&standalone, doc! {"readConcern": {"level": "linearizable"}})), 123);
        // snapshot is refused before its atClusterTime is looked at.
        let at = doc! {"readConcern": {"level": "snapshot", "atClusterTime": ts}};
        assert_eq!(code(read_point(&standalone, at)), 123);
        assert_eq!(code(read_point(&standalone, doc! {"readConcern": {"afterClusterTime": ts}})), 20);
        assert!(standalone.check_write_concern(&WriteConcern::majority()).is_ok());
        let two = WriteConcern { w: W::Nodes(2), ..WriteConcern::w1() };
        assert!(matches!(standalone.check_write_concern(&two), Err(ReplError::BadArgument { code: 2, .. })));
        let tag = WriteConcern { w: W::Tag("dc".into()), ..WriteConcern::w1() };
        assert!(matches!(standalone.check_write_concern(&tag), Err(ReplError::UnknownReplWriteConcern(_))));
        engine.shutdown().unwrap();
    }
}
