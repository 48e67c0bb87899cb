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
/// `Standalone` and by `ReplicaSet`. Each method says where the server
/// calls it (`crates/server/src/...`); `operation.rs` is the one pipeline
/// every command goes through.
///
/// Futures returned here may be dropped before they finish (a client goes
/// away; a `blockMembers`-blocked member's command is cut off): they must
/// be cancel-safe, e.g. a write concern waiter deregisters on drop.
pub trait Topology: Send + Sync {
    /// True on a replica set member: replies then carry `$clusterTime` and
    /// `operationTime`, a received `$clusterTime` is observed, and
    /// `txnNumber` is considered (`operation.rs`, `session.rs`).
    fn is_replica_set(&self) -> bool;

    /// Adds the topology's fields to a `hello` / `isMaster` reply:
    /// `isWritablePrimary` (or `ismaster` when `legacy`), `secondary`,
    /// `setName`, `hosts`, `passives`, `arbiters`, `primary`, `me`,
    /// `setVersion`, `electionId`, `arbiterOnly`, `hidden`, `tags`,
    /// `lastWrite`, as the node's state has them. Inserted first in the
    /// reply, before the server's own fields (`commands/handshake.rs`).
    /// Returns the `topologyVersion.counter` of the same state, so that a
    /// reply never pairs one state's fields with another's counter.
    fn hello_fields(&self, legacy: bool, reply: &mut Document) -> i64;

    /// `topologyVersion.counter` (sent as Int64): moves on every change of
    /// state a driver cares about (`commands/handshake.rs`).
    fn topology_counter(&self) -> i64;

    /// `topologyVersion.processId` when replication keeps its own (shown
    /// by `serverStatus.repl`), so that `hello` shows the same one.
    fn process_id(&self) -> Option<bson::oid::ObjectId> {
        None
    }

    /// The counter to put on a NotPrimaryError reply (MongoDB 4.4+ does),
    /// when the state published with it already says this member is not
    /// a writable primary. `None` while it still says writable (a write
    /// refused by a gate that closed before the new state was published):
    /// a driver that already saw that counter, with this member primary,
    /// would take the error for stale and retry on the same member.
    fn not_primary_topology_counter(&self) -> Option<i64> {
        None
    }

    /// Resolves once the counter has moved past `seen`: an awaitable
    /// `hello` (and each round of its exhaust stream) races it against
    /// `maxAwaitTimeMS` and shutdown. Never resolves on a topology that
    /// cannot change.
    fn topology_changed(&self, seen: i64) -> BoxFuture<'_, ()>;

    /// May a command of this kind run on `db` now? `secondary_ok` is true
    /// when the client's read preference allows a secondary. Called once
    /// per command, before its concerns and handler, with the access of
    /// its dispatch-table row (`operation.rs`). Expected: Write on a
    /// non-primary 10107; Read on a SECONDARY without secondaryOk 13435;
    /// Read in any other non-primary state 13436; Always never refused.
    fn check_access(&self, access: CommandAccess, db: &str, secondary_ok: bool) -> Result<(), ReplError>;

    /// The write concern of a command that named none, and the `w` of one
    /// that named only `j` / `wtimeout` (`concern.rs`).
    fn default_write_concern(&self) -> WriteConcern;

    /// Refuses a write concern this topology cannot take at all, before the
    /// write happens (an error reply, nothing written): `w > 1` or a tag on
    /// a standalone. A set refuses nothing here: more nodes than it has
    /// (100) and an unknown tag (79) are reported by the wait, after the
    /// write, as MongoDB does.
    /// Called for every command whose row takes a write concern
    /// (`concern.rs`).
    fn check_write_concern(&self, concern: &WriteConcern) -> Result<(), ReplError>;

    /// Waits until the write concern holds for every write up to
    /// `last_write` (the command's last entry, or `last_applied()` when the
    /// command wrote nothing), after the handler, whether it succeeded or
    /// not; never for `w: 0`. A failure becomes the reply's
    /// `writeConcernError` beside `ok: 1` (`WriteConcernTimeout` adds
    /// `errInfo.wtimeout: true`) (`operation.rs`).
    fn wait_for_write_concern<'a>(
        &'a self,
        last_write: OpTime,
        concern: &'a WriteConcern,
    ) -> BoxFuture<'a, Result<(), ReplError>>;

    /// Where a read with these arguments reads, waiting first where the
    /// concern says so (`afterClusterTime` not yet applied, no majority
    /// snapshot yet) until `deadline` (from `maxTimeMS`). Called before the
    /// handler of any command that carries a non-empty `readConcern` the
    /// command's row admits (writes too: causal sessions send
    /// `afterClusterTime` on them; their answer is only waited for).
    /// `ReadAt::At(ts)` is kept by the cursor for every `getMore`; with
    /// level `snapshot` and `ReadAt::Latest` the server pins the first
    /// batch's timestamp and reports it as `atClusterTime` (`concern.rs`,
    /// `exec/read_concern.rs`).
    fn read_point<'a>(
        &'a self,
        concern: &'a ReadConcernArgs,
        deadline: Option<Instant>,
    ) -> BoxFuture<'a, Result<ReadAt, ReplError>>;

    /// After a `linearizable` read succeeded and before its reply: proves
    /// this member was still primary when the read ran (a no-op write that
    /// reaches the majority); an error replaces the reply (`operation.rs`).
    fn linearizable_barrier(&self, deadline: Option<Instant>) -> BoxFuture<'_, Result<(), ReplError>>;

    /// A `$clusterTime` received from a client or a member (gossip), before
    /// the command runs; an error (e.g. drift, 262) is the reply. Only
    /// called on a replica set member (`operation.rs`).
    fn observe_cluster_time(&self, cluster_time: Timestamp) -> Result<(), ReplError>;

    /// The greatest cluster time this node knows: `$clusterTime.clusterTime`
    /// of every reply on a member (`operation.rs`).
    fn cluster_time(&self) -> Timestamp;

    /// The last applied OpTime: `operationTime` of a command that wrote
    /// nothing, and where such a command's write concern waits.
    fn last_applied(&self) -> OpTime;

    /// `{$replData: ..., $oplogQueryData: ...}`, merged into the reply of a
    /// `find` / `getMore` on `local.oplog.rs` whose request carries
    /// `$replData` or `$oplogQueryData`; `None` on a standalone
    /// (`operation.rs`).
    fn oplog_query_metadata(&self) -> Option<Document>;

    /// Resolves once this member's commit point is past `known` (another
    /// member's oplog fetcher's `lastKnownCommittedOpTime`): its awaitData
    /// `getMore` then answers at once with the new commit point. Never on
    /// a standalone.
    fn commit_point_passed(&self, _known: OpTime) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    /// Runs a replication command (`replSetInitiate`, `replSetGetStatus`,
    /// `replSetHeartbeat`, ... `appendOplogNote`; the list is
    /// `commands::COMMANDS`), sent to the admin database (`commands/repl.rs`).
    /// The reply is the command's fields without `ok`. A standalone
    /// answers NoReplicationEnabled.
    fn run_command<'a>(&'a self, name: &'a str, body: &'a Document) -> BoxFuture<'a, Result<Document, ReplError>>;

    /// Runs a command on the set's primary over the members' internal
    /// client and returns its reply as the primary gave it (`ok: 0` and
    /// all). For what a secondary hands on instead of running itself: an
    /// `aggregate` with `$out` or `$merge` sent to a secondary with a read
    /// preference that allows one (MongoDB 5.0+ runs those on
    /// secondaries, writing through the primary). NotWritablePrimary when
    /// this member is not a secondary or knows no primary; a standalone
    /// has none to hand on to.
    fn run_on_primary<'a>(
        &'a self,
        _db: &'a str,
        _body: Document,
        _timeout: std::time::Duration,
    ) -> BoxFuture<'a, Result<Document, ReplError>> {
        Box::pin(async { Err(ReplError::NotWritablePrimary) })
    }

    /// `serverStatus.repl`, or `None` on a standalone (`commands/admin.rs`).
    fn server_status(&self) -> Option<Document>;

    /// Further top-level `serverStatus` sections of a member
    /// (`metrics: {repl, getLastError}`, `electionMetrics`); none on a
    /// standalone (`commands/admin.rs`).
    fn server_status_sections(&self) -> Vec<(&'static str, Document)> {
        Vec::new()
    }

    /// `configureFailPoint` for a fail point replication consults
    /// (`fail_points::NAMES`), or `None` for any other name (the server's
    /// own, `commands/admin.rs`). A standalone has none.
    fn configure_fail_point(&self, _body: &Document) -> Option<Result<Document, ReplError>> {
        None
    }

    /// Before a `shutdown` command stops the node: a primary waits up to
    /// `timeout_secs` (MongoDB's `timeoutSecs`, default 10) for an
    /// electable secondary to catch up and steps down, failing with
    /// ExceededTimeLimit (262) if none did, unless `force`
    /// (`commands/admin.rs`). Nothing to wait for on a standalone.
    fn prepare_shutdown(&self, _force: bool, _timeout_secs: Option<u64>) -> BoxFuture<'_, Result<(), ReplError>> {
        Box::pin(async { Ok(()) })
    }
}
