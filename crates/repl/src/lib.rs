//! Replication: everything between the consensus core's decisions and the
//! world. It owns the `Topology` trait the server asks (role, write and
//! read concern waits, `hello` fields, reply metadata) and its two
//! implementations: `Standalone`, a node without `--replSet`, and
//! `ReplicaSet`, a member whose coordinator thread (`coordinator`) owns the
//! `consensus::Node` and carries out its actions through its companions,
//! one noun a file: `heartbeat_sender`, `election_runner`,
//! `position_reporter`, `oplog_fetcher`, `applier`, `rollback`,
//! `position_watcher`, `noop_writer`, `restart_catch_up`, `resync`; `oplog_window`
//! reports how far back the oplog reaches. Members talk over `network` (the
//! internal `client`, or an in-memory one in tests) in the shapes of
//! `protocol` and `config_document`; `commands` runs the replSet commands;
//! `report` renders what a member tells drivers and operators.
//!
//! Must not depend on the server crate: the server depends on this one and
//! holds an `Arc<dyn Topology>`; nothing else in the server knows whether
//! the node is a member of a set. See `docs/replication.md`.

pub mod applier;
pub mod client;
pub mod commit_waiters;
pub mod commands;
pub mod concern;
pub mod config_document;
pub mod coordinator;
pub mod inputs;
pub mod election_runner;
pub mod error;
pub mod fail_points;
pub mod fault;
pub mod heartbeat_sender;
pub mod initial_sync;
pub mod local_state;
pub mod network;
pub mod newly_added;
pub mod noop_writer;
pub mod oplog_fetcher;
pub mod position_reporter;
pub mod position_watcher;
pub mod protocol;
pub mod replica_set;
pub mod oplog_window;
pub mod restart_catch_up;
pub mod resync;
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
