//! `Topology`: everything the server asks about replication, behind one
//! handle. A standalone node and a replica set member answer the same
//! questions; nothing else in the server knows which one it is.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use bson::Document;
use slipstream_clock::{OpTime, Timestamp};
use slipstream_storage::ReadAt;

use crate::concern::{ReadConcernArgs, WriteConcern};
use crate::error::ReplError;

/// A boxed future, so that the trait stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a command does, as the dispatch table records it: checked once,
/// before the handler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandAccess {
    /// Changes data or the catalog: a writable primary only (10107).
    Write,
    /// Reads data: the primary, or a SECONDARY when the client allows it
    /// (13435 without secondaryOk, 13436 in any other state).
    Read,
    /// Needs no particular state: handshake, diagnostics, cursors already
    /// admitted, the replSet commands, shutdown.
    Always,
}

/// The replication questions the server asks. Implemented by
/// `Standalone` and by `ReplicaSet`.
pub trait Topology: Send + Sync {
    /// True on a replica set member (replies then carry `$clusterTime` and
    /// `operationTime`, and retryable writes are accepted).
    fn is_replica_set(&self) -> bool;

    /// Adds the topology's fields to a `hello` / `isMaster` reply:
    /// `isWritablePrimary` (or `ismaster` when `legacy`), `secondary`,
    /// `setName`, `hosts`, `passives`, `arbiters`, `primary`, `me`,
    /// `setVersion`, `electionId`, `arbiterOnly`, `hidden`, `tags`,
    /// `lastWrite`, as the node's state has them.
    fn hello_fields(&self, legacy: bool, reply: &mut Document);

    /// `topologyVersion.counter`: moves on every change of state a driver
    /// cares about.
    fn topology_counter(&self) -> i64;

    /// Resolves once the counter has moved past `seen` (awaitable `hello`).
    /// Never resolves on a topology that cannot change.
    fn topology_changed(&self, seen: i64) -> BoxFuture<'_, ()>;

    /// May a command of this kind run on `db` now? `secondary_ok` is true
    /// when the client's read preference allows a secondary.
    fn check_access(&self, access: CommandAccess, db: &str, secondary_ok: bool) -> Result<(), ReplError>;

    /// The write concern of a command that named none.
    fn default_write_concern(&self) -> WriteConcern;

    /// Refuses a write concern this topology cannot satisfy (before the
    /// write happens): `w > 1` on a standalone, an unknown tag, ...
    fn check_write_concern(&self, concern: &WriteConcern) -> Result<(), ReplError>;

    /// Waits until the write concern holds for every write up to
    /// `last_write` (the command's last entry, or the last applied one when
    /// the command wrote nothing).
    fn wait_for_write_concern<'a>(
        &'a self,
        last_write: OpTime,
        concern: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>>;

    /// Where a read with these arguments reads, waiting first where the
    /// concern says so (`afterClusterTime` not yet applied, no majority
    /// snapshot yet) until `deadline`.
    fn read_point<'a>(
        &'a self,
        concern: &'a ReadConcernArgs,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>>;

    /// After a `linearizable` read: proves this member was still primary
    /// when the read ran (a no-op write that reaches the majority).
    fn linearizable_barrier(&self, deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>>;

    /// A `$clusterTime` received from a client or a member (gossip).
    fn observe_cluster_time(&self, cluster_time: Timestamp) -> Result<(), ReplError>;

    /// The greatest cluster time this node knows, for replies.
    fn cluster_time(&self) -> Timestamp;

    /// The last applied OpTime (`operationTime` of a command that wrote
    /// nothing).
    fn last_applied(&self) -> OpTime;

    /// `$replData` / `$oplogQueryData` for replies to an oplog fetcher's
    /// `find` / `getMore` on `local.oplog.rs`; `None` on a standalone.
    fn oplog_query_metadata(&self) -> Option<Document>;

    /// Runs a replication command (`replSetInitiate`, `replSetGetStatus`,
    /// `replSetHeartbeat`, ...). A standalone answers NoReplicationEnabled.
    fn run_command<'a>(&'a self, name: &'a str, body: &'a Document) -> BoxFuture<'a, Result<Document, ReplError>>;

    /// `serverStatus.repl`, or `None` on a standalone.
    fn server_status(&self) -> Option<Document>;
}
