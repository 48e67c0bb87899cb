//! A deterministic simulated replica set for tests and the simulator:
//! not a mock of anything the product uses, but the harness that drives
//! real `Node`s through faults and checks the protocol's invariants.

pub mod checker;
pub mod cluster;
mod cluster_configs;
pub mod member;
pub mod reconfigs;
pub mod rng;
pub mod run;
pub mod topology;

pub use checker::{Checker, Quorum};
pub use cluster::{Cluster, Envelope, Faults, Payload};
pub use member::SimMember;
pub use rng::Rng;
pub use run::{run_seed, RunOptions, RunReport};
pub use topology::{Expectation, Partition};
