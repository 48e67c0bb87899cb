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

impl super::Engine {
    /// Opens the gate with `term` and logs the no-op `message` as the first
    /// entry under it, in one hold of the write lock: a new primary's "new
    /// primary" no-op precedes every client write of its term (replication's
    /// `electionTime` is that entry).
    pub fn open_write_gate_with_noop(&self, term: i64, message: &str) -> super::Result<crate::OpTime> {
        assert!(term >= crate::timestamp::UNINITIALIZED_TERM, "a gate opened with term {term}");
        let mut writer = self.writer();
        writer.state.gate = WriteGate::Open { term };
        writer.noop(message)
    }
}

impl super::Writer<'_> {
    /// Logs a no-op entry whose `o` is `object` (`appendOplogNote`'s
    /// `data`, as MongoDB writes it), through the write gate.
    pub fn noop_object(&mut self, object: &bson::Document) -> super::Result<crate::OpTime> {
        let o = super::raw(object)?;
        let optime = self.engine.inner.commit(&mut self.state, None, |_applier, _ts| {
            Ok(Some(super::EntryPlan {
                op: crate::oplog_entry::OpKind::Noop,
                ns: String::new(),
                ui: None,
                o: o.clone(),
                o2: None,
            }))
        })?;
        Ok(optime.expect("noop always logs"))
    }
}
