//! State shared by every connection of a node.

use std::sync::Arc;

use slipstream_storage::Engine;

/// Everything a command may touch beyond its own connection.
pub struct ServerState {
    /// The storage engine (read-only handle; the engine locks internally).
    pub engine: Arc<Engine>,
}
