//! Replication: everything between the consensus core's decisions and the
//! world. It owns the `Topology` trait the server asks (role, write and
//! read concern waits, `hello` fields, reply metadata) and its two
//! implementations: `Standalone`, a node without `--replSet`, and (next)
//! `ReplicaSet`, a member whose coordinator thread owns the
//! `consensus::Node` and carries out its actions through the heartbeat
//! sender, oplog fetcher, applier, position reporter and election runner.
//!
//! Must not depend on the server crate: the server depends on this one and
//! holds an `Arc<dyn Topology>`; nothing else in the server knows whether
//! the node is a member of a set. See `docs/replication.md`.

pub mod applier;
pub mod client;
pub mod commands;
pub mod concern;
pub mod config_document;
pub mod coordinator;
pub mod election_runner;
pub mod error;
pub mod fault;
pub mod heartbeat_sender;
pub mod local_state;
pub mod network;
pub mod noop_writer;
pub mod oplog_fetcher;
pub mod position_reporter;
pub mod position_watcher;
pub mod protocol;
pub mod replica_set;
pub mod rollback;
pub mod snapshot;
pub mod standalone;
pub mod report;
pub mod topology;

pub use concern::{ReadConcernArgs, ReadConcernLevel, WriteConcern, W};
pub use error::ReplError;
pub use fault::MemberBlocklist;
pub use network::{NetError, Network, TcpNetwork};
pub use replica_set::{ReplicaSet, ReplicaSetOptions};
pub use standalone::Standalone;
pub use topology::{BoxFuture, CommandAccess, Topology};
