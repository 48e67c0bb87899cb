//! Write concern evaluation on the primary: is `w:1`, `w:N` or
//! `w:"majority"` satisfied for a write at a given OpTime, and has
//! `wtimeout` passed.

use crate::millis::Millis;
use crate::node::{Node, Role};
use slipstream_clock::OpTime;

/// The `w` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum W {
    /// `w: N`: N data-bearing members (the primary included) have the write.
    Nodes(u32),
    /// `w: "majority"`: the write is committed.
    Majority,
}

/// A write concern: `w`, `j` and `wtimeout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteConcern {
    /// How many must acknowledge.
    pub w: W,
    /// `j`: count durable positions rather than applied ones (always so for
    /// majority, as with `writeConcernMajorityJournalDefault`).
    pub journal: bool,
    /// `wtimeout` in milliseconds; `None` or 0 waits without limit.
    pub wtimeout_ms: Option<u64>,
}

/// Where a write stands with respect to its write concern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConcernStatus {
    /// Acknowledge the client.
    Satisfied,
    /// Keep waiting.
    Waiting,
    /// `wtimeout` passed (MongoDB code 64 WriteConcernFailed, with
    /// `wtimeout: true`); the write itself is not undone.
    TimedOut,
    /// More members asked for than exist (code 100 UnsatisfiableWriteConcern).
    Unsatisfiable,
    /// This member is no longer primary in the write's term; the waiter is
    /// interrupted (code 11602 InterruptedDueToReplStateChange).
    SteppedDown,
}

impl Node {
    /// Evaluates `concern` for a write at `optime` that began waiting at
    /// `started_at`.
    pub fn evaluate_write_concern(
        &self,
        optime: OpTime,
        concern: &WriteConcern,
        started_at: Millis,
        now: Millis,
    ) -> WriteConcernStatus {
        if self.role != Role::Primary || self.term != optime.term {
            return WriteConcernStatus::SteppedDown;
        }
        let satisfied = match concern.w {
            W::Majority => self.commit_point >= optime,
            W::Nodes(n) => {
                let data_bearing = self.config.members.iter().filter(|m| m.is_data_bearing()).count();
                if n as usize > data_bearing {
                    return WriteConcernStatus::Unsatisfiable;
                }
                self.members_with(optime, concern.journal) >= n as usize
            }
        };
        if satisfied {
            return WriteConcernStatus::Satisfied;
        }
        match concern.wtimeout_ms {
            Some(t) if t > 0 && now.since(started_at) >= t => WriteConcernStatus::TimedOut,
            _ => WriteConcernStatus::Waiting,
        }
    }

    /// Data-bearing members (this one included) known to hold `optime`.
    /// Only positions in the write's own term count: a position in a later
    /// term says nothing about holding this entry.
    fn members_with(&self, optime: OpTime, journal: bool) -> usize {
        let holds = |p: OpTime| p.term == optime.term && p >= optime;
        (0..self.config.members.len())
            .filter(|&i| self.config.members[i].is_data_bearing())
            .filter(|&i| {
                let position = match (Some(i) == self.my_index, journal) {
                    (true, true) => self.last_durable,
                    (true, false) => self.last_applied,
                    (false, true) => self.members[i].durable,
                    (false, false) => self.members[i].applied,
                };
                holds(position)
            })
            .count()
    }
}
