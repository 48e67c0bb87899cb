//! The replica set's decisions: seed 000's pull-based Raft as a pure,
//! deterministic state machine, with MongoDB's safe reconfiguration.
//!
//! This crate owns every rule that decides safety and liveness of a replica
//! set member: who may vote for whom, when an entry is committed, whom a
//! member pulls from, when a primary steps down, when a configuration may
//! change, when a write concern is satisfied. It must not do I/O: no
//! sockets, files, threads, clock reads or randomness, and it never hands
//! out a timestamp (storage's oplog clock does; the node learns positions
//! from `Event::Appended`). Time, received messages and local log events
//! come in through [`Node::step`]; [`Action`]s come out, to be carried out
//! in order by the `repl` crate. It depends on nothing but `std` and the
//! `clock` crate's time types.
//!
//! Modules: [`config`] (configuration, its validation and order),
//! [`state`] (member states), [`message`] (what members send each other),
//! [`io`] (events and actions), [`error`] (why commands fail), [`node`]
//! (the state machine; its handlers are split into `heartbeat`,
//! `election`, `sync_source`, `replication`, `stepdown`, `reconfig`,
//! `removed`, `commands`), [`status`] (read-only views),
//! [`election_metrics`], [`write_concern`], [`millis`], and [`simulation`]:
//! a deterministic cluster of nodes with a simulated network and oplogs,
//! used by the scenario tests and the randomized simulator.

mod commands;
#[cfg(test)]
mod commands_tests;
pub mod config;
mod election;
pub mod election_metrics;
pub mod error;
mod heartbeat;
pub mod io;
pub mod message;
pub mod millis;
mod mutation;
#[cfg(test)]
mod mutation_tests;
pub mod node;
#[cfg(test)]
mod node_tests;
mod reconfig;
#[cfg(test)]
mod reconfig_tests;
mod removed;
mod replication;
pub mod simulation;
pub mod state;
pub mod status;
mod stepdown;
mod sync_source;
pub mod write_concern;

pub use config::{ConfigError, ConfigVersionAndTerm, Incompatibility, MemberConfig, MemberId, ReplSetConfig, Settings};
pub use election_metrics::{CatchUpOutcome, ElectionCandidateMetrics, ElectionReason};
pub use error::{NotSecondary, ReconfigError, StepDownError, StepUpError};
pub use io::{Action, Event, ForceReconfig, PullBatch, StepDownRequest};
pub use message::{Heartbeat, MemberPosition, Message, UpdatePosition, VoteRequest, VoteResponse};
pub use millis::{Millis, ShortOpTime};
pub use node::{Node, OplogPositions, Persisted};
pub use slipstream_clock::{OpTime, Timestamp, UNINITIALIZED_TERM};
pub use state::MemberState;
pub use status::MemberView;
pub use write_concern::{WriteConcern, WriteConcernStatus, W};
