//! The Slipstream node's front: the tokio listener, connections, the
//! command dispatch table, cursors, and the mapping of every lower layer's
//! errors to MongoDB error codes. Commands live one family to a file under
//! `commands/`, each parsing its arguments into a typed request before it
//! touches storage.
//!
//! Must not depend on redb (only on `slipstream-storage`'s facade).

pub mod commands;
pub mod cursor;
pub mod error;
pub mod state;
