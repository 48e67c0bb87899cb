//! Where a read reads: the point the topology chose for the command's read
//! concern (asked once, before the handler, by `operation::execute`), which
//! a cursor keeps for every later batch.
//!
//! - `ReadAt::Latest`: the newest state at each batch (`local`, and
//!   everything on a standalone).
//! - `ReadAt::At(ts)`: that state (a set's `majority` commit point, or
//!   `snapshot`'s `atClusterTime`).
//! - `pinned` (`snapshot`): the first batch's reader chooses the timestamp
//!   when the topology left it to the reader, and every batch reads there;
//!   the reply reports it as `atClusterTime`.

use slipstream_storage::ReadAt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadPoint {
    pub at: ReadAt,
    pub pinned: bool,
}

impl ReadPoint {
    /// No read concern: the newest state.
    pub const LATEST: ReadPoint = ReadPoint {
        at: ReadAt::Latest,
        pinned: false,
    };

    pub fn is_latest(self) -> bool {
        self == ReadPoint::LATEST
    }

    /// The `atClusterTime` a `snapshot` read's reply names when the topology
    /// chose the timestamp up front (a set's majority snapshot); `None`
    /// when the reader chooses it (then the reply names the reader's).
    pub fn chosen_snapshot(self) -> Option<slipstream_storage::Timestamp> {
        match (self.pinned, self.at) {
            (true, ReadAt::At(ts)) => Some(ts),
            _ => None,
        }
    }

    /// A `majority` read: a chosen timestamp the cursor does not pin (the
    /// newest committed state, wherever the commit point is when read).
    pub fn follows_commit_point(self) -> bool {
        !self.pinned && matches!(self.at, ReadAt::At(_))
    }

    /// Where the batches after the first read, given the timestamp the
    /// first batch's reader read at.
    pub fn kept_by_cursor(self, first_read: slipstream_storage::Timestamp) -> ReadAt {
        if self.pinned {
            ReadAt::At(first_read)
        } else {
            self.at
        }
    }
}

impl Default for ReadPoint {
    fn default() -> Self {
        ReadPoint::LATEST
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream_storage::Timestamp;

    #[test]
    fn a_cursor_keeps_its_read_point() {
        let first = Timestamp::new(9, 1);
        assert_eq!(ReadPoint::LATEST.kept_by_cursor(first), ReadAt::Latest);
        let majority = ReadPoint {
            at: ReadAt::At(Timestamp::new(5, 0)),
            pinned: false,
        };
        assert_eq!(majority.kept_by_cursor(first), ReadAt::At(Timestamp::new(5, 0)));
        let snapshot = ReadPoint {
            at: ReadAt::Latest,
            pinned: true,
        };
        assert_eq!(snapshot.kept_by_cursor(first), ReadAt::At(first));
        assert!(!snapshot.is_latest());
        assert_eq!(snapshot.chosen_snapshot(), None);
        assert_eq!(majority.chosen_snapshot(), None, "not a snapshot read");
        let chosen = ReadPoint { at: ReadAt::At(Timestamp::new(7, 2)), pinned: true };
        assert_eq!(chosen.chosen_snapshot(), Some(Timestamp::new(7, 2)));
    }
}
