//! The replica set's decisions: seed 000's pull-based Raft as a pure,
//! deterministic state machine.
//!
//! This crate owns every rule that decides safety and liveness of a replica
//! set member: who may vote for whom, when an entry is committed, whom a
//! member pulls from, when a primary steps down, when a write concern is
//! satisfied. It must not do I/O: no sockets, files, threads, clock reads or
//! randomness. Time, received messages and local log events come in through
//! [`Node::step`]; [`Action`]s come out, to be carried out in order by the
//! `repl` crate. It depends on nothing but `std`.
//!
//! Modules: [`optime`] (positions), [`config`] (configuration and its
//! validation), [`state`] (member states), [`message`] (what members send
//! each other), [`io`] (events and actions), [`node`] (the state machine;
//! its handlers are split into `heartbeat`, `election`, `sync_source`,
//! `replication`, `stepdown`), [`write_concern`], and [`simulation`]: a
//! deterministic cluster of nodes with a simulated network and oplogs, used
//! by the scenario tests and the randomized simulator.

pub mod config;
mod election;
#[cfg(test)]
mod node_tests;
mod heartbeat;
pub mod io;
pub mod message;
mod mutation;
#[cfg(test)]
mod mutation_tests;
pub mod node;
pub mod optime;
mod replication;
pub mod simulation;
pub mod state;
mod stepdown;
mod sync_source;
pub mod write_concern;

pub use config::{ConfigError, MemberConfig, ReplSetConfig, Settings};
pub use io::{Action, Event, PullBatch, StepDownError, StepDownRequest};
pub use message::{Heartbeat, MemberPosition, Message, UpdatePosition, VoteRequest, VoteResponse};
pub use node::{Node, Persisted, WriteError};
pub use optime::{MemberId, Millis, OpTime, Timestamp};
pub use state::MemberState;
pub use write_concern::{WriteConcern, WriteConcernStatus, W};
