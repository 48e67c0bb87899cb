//! The Slipstream node's front: the tokio listener, connections, the
//! command dispatch table, cursors, and the mapping of every lower layer's
//! errors to MongoDB error codes. Commands live one family to a file under
//! `commands/`, each parsing its arguments into a typed request before it
//! touches storage.
//!
//! Must not depend on redb (only on `slipstream-storage`'s facade), and
//! must not know whether the node is a replica set member except through
//! the `Arc<dyn Topology>` in `ServerState`.

pub mod commands;
pub mod concern;
pub mod connection;
pub mod cursor;
pub mod error;
pub mod error_codes;
pub mod exec;
pub mod failpoint;
pub mod listener;
pub mod log;
pub mod metrics;
pub mod operation;
pub mod session;
pub mod sessions;
pub mod state;

pub use listener::serve;
pub use state::{ServerOptions, ServerState};
