//! Member states as reported in heartbeats and `replSetGetStatus`.

use std::fmt;

/// MongoDB's member states. PRIMARY, SECONDARY and ARBITER are decided by
/// this crate; STARTUP, STARTUP2, RECOVERING and ROLLBACK are reported by
/// the I/O layer (initial sync, maintenance, rollback in progress). A
/// candidate reports SECONDARY, as MongoDB does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemberState {
    /// 0: configuration not yet loaded.
    Startup,
    /// 1: the primary.
    Primary,
    /// 2: a secondary (or a candidate).
    Secondary,
    /// 3: data not consistent yet or in maintenance; does not vote for itself.
    Recovering,
    /// 5: initial sync in progress.
    Startup2,
    /// 6: not known (no heartbeat yet).
    Unknown,
    /// 7: an arbiter.
    Arbiter,
    /// 8: unreachable.
    Down,
    /// 9: rolling back diverged entries.
    Rollback,
    /// 10: not a member of the configuration it holds (removed by a
    /// reconfig); it only exchanges heartbeats, to learn a configuration
    /// that adds it back.
    Removed,
}

impl MemberState {
    /// The numeric code MongoDB uses in `replSetGetStatus`.
    pub fn code(self) -> u8 {
        match self {
            MemberState::Startup => 0,
            MemberState::Primary => 1,
            MemberState::Secondary => 2,
            MemberState::Recovering => 3,
            MemberState::Startup2 => 5,
            MemberState::Unknown => 6,
            MemberState::Arbiter => 7,
            MemberState::Down => 8,
            MemberState::Rollback => 9,
            MemberState::Removed => 10,
        }
    }

    /// The name MongoDB prints (`stateStr`).
    pub fn name(self) -> &'static str {
        match self {
            MemberState::Startup => "STARTUP",
            MemberState::Primary => "PRIMARY",
            MemberState::Secondary => "SECONDARY",
            MemberState::Recovering => "RECOVERING",
            MemberState::Startup2 => "STARTUP2",
            MemberState::Unknown => "UNKNOWN",
            MemberState::Arbiter => "ARBITER",
            MemberState::Down => "DOWN",
            MemberState::Rollback => "ROLLBACK",
            MemberState::Removed => "REMOVED",
        }
    }

    /// True for states in which a member serves as a sync source.
    pub fn is_readable(self) -> bool {
        matches!(self, MemberState::Primary | MemberState::Secondary)
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
