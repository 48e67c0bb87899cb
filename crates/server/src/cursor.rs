//! Server-side cursors (skeleton: the CRUD engineer replaces this file).

/// Every open cursor of the node.
#[derive(Default)]
pub struct CursorManager {}
