//! State shared by every connection of a node.

use std::sync::Arc;

use slipstream_storage::Engine;

use crate::cursor::CursorManager;

/// Everything a command may touch beyond its own connection.
pub struct ServerState {
    /// The storage engine (shared; the engine locks internally).
    pub engine: Arc<Engine>,
    /// Open cursors (locks internally).
    pub cursors: CursorManager,
}
