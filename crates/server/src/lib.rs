//! The Slipstream node's front: the tokio listener, connections, the
//! command dispatch table, cursors, and the mapping of every lower layer's
//! errors to MongoDB error codes. Commands live one family to a file under
//! `commands/`, each parsing its arguments into a typed request before it
//! touches storage.
//!
//! Must not depend on redb (only on `slipstream-storage`'s facade), and
//! must not know whether the node is a replica set member except through
//! the `Arc<dyn Topology>` in `ServerState`.

pub mod admission;
pub mod api_version;
pub mod commands;
pub mod concern;
pub mod connection;
pub mod cursor;
pub mod error;
pub mod error_codes;
pub mod exec;
pub mod failpoint;
pub mod flow_control;
pub mod listener;
pub mod log;
pub mod memory;
pub mod metrics;
pub mod operation;
pub mod operations;
pub mod parameters;
pub mod profiler;
pub mod session;
pub mod sessions;
pub mod state;
pub mod ttl_monitor;

pub use listener::serve;
pub use state::{ServerOptions, ServerState};

/// The stack of every thread of the node's runtime (async workers and the
/// blocking pool), where commands run.
///
/// Nearly every walk over a document recurses once per level, and the
/// stages of a pipeline are chained iterators, one set of frames per stage.
/// The limits on what may nest bound how deep that goes: a message within
/// maxBSONDepth (the wire layer), a stored document within 100 levels, a
/// field path within 200 components, values the query language builds
/// within 200 levels, at most `ACTIVE_STAGES_MAX` stages running nested
/// (`slipstream_query`). In a debug build the deepest of these measured
/// ~2.5 MiB (2,000 stages running nested) and ~1.6 MiB (a projection nested
/// 200 deep), past Rust's 2 MiB default; release frames are smaller.
/// `tests/stack_budget.rs` runs the costliest inputs on half of this size.
pub const THREAD_STACK_BYTES: usize = 8 * 1024 * 1024;
