//! A deterministic simulated replica set for tests and the simulator:
//! not a mock of anything the product uses, but the harness that drives
//! real `Node`s through faults and checks the protocol's invariants.

pub mod checker;
pub mod cluster;
pub mod rng;
pub mod run;
pub mod topology;

pub use checker::Checker;
pub use cluster::{Cluster, Envelope, Faults, Payload};
pub use rng::Rng;
pub use run::{run_seed, RunOptions, RunReport};
pub use topology::{Expectation, Partition};
