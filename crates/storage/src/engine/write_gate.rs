//! The write gate: whether this node takes client writes, and the term
//! their entries carry.
//!
//! Replication opens it when the node becomes a writable primary (with the
//! new term) and closes it on stepdown; the gate lives in the state the
//! write lock guards, and every client write reads it inside the critical
//! section of its commit, so a stepdown and a client write cannot
//! interleave: once `Engine::set_write_gate(Closed)` returns, no client
//! write commits. Entries applied from a sync source (`apply_batch`)
//! bypass it: they carry their own term.

/// Whether client writes are taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteGate {
    /// Writes are taken; their entries carry `term` (-1 on a standalone).
    Open { term: i64 },
    /// Writes fail with `StorageError::NotWritablePrimary`.
    Closed,
}
