//! Read concern on a standalone: which timestamp a read reads at.
//!
//! `local`, `available`, `majority` and `linearizable` read the latest
//! state (on a standalone everything applied is also majority-committed);
//! `snapshot` reads at `atClusterTime` when given, else at one timestamp
//! chosen when the query starts and kept for every batch of its cursor.
//! `afterClusterTime` (causal sessions) is accepted: a standalone has
//! applied every time it handed out.

use bson::{Bson, Document};
use slipstream_storage::{ReadAt, Timestamp};
use slipstream_storage::TimestampBson;

use crate::error::CommandError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConcern {
    Latest,
    /// `snapshot`: at this timestamp, or (None) at one chosen at the start.
    Snapshot(Option<Timestamp>),
}

impl ReadConcern {
    pub fn parse(body: &Document) -> Result<ReadConcern, CommandError> {
        let spec = match body.get("readConcern") {
            None | Some(Bson::Null) => return Ok(ReadConcern::Latest),
            Some(Bson::Document(spec)) => spec,
            Some(_) => return Err(CommandError::new(14, "readConcern must be an object")),
        };
        let at_cluster_time = match spec.get("atClusterTime") {
            None | Some(Bson::Null) => None,
            Some(Bson::Timestamp(ts)) => Some(Timestamp::from_bson(*ts)),
            Some(_) => return Err(CommandError::new(14, "atClusterTime must be a timestamp")),
        };
        let level = match spec.get("level") {
            None | Some(Bson::Null) => "local",
            Some(Bson::String(level)) => level.as_str(),
            Some(_) => return Err(CommandError::new(14, "readConcern.level must be a string")),
        };
        match level {
            "local" | "available" | "majority" | "linearizable" if at_cluster_time.is_none() => Ok(ReadConcern::Latest),
            "snapshot" => Ok(ReadConcern::Snapshot(at_cluster_time)),
            "local" | "available" | "majority" | "linearizable" => Err(CommandError::new(
                72,
                "readConcern.atClusterTime is only valid with readConcern level snapshot",
            )),
            other => Err(CommandError::new(
                9,
                format!("readConcern level '{other}' is not valid"),
            )),
        }
    }

    /// The read position of a query's first batch.
    pub fn read_at(self) -> ReadAt {
        match self {
            ReadConcern::Snapshot(Some(ts)) => ReadAt::At(ts),
            _ => ReadAt::Latest,
        }
    }

    /// Whether later batches must keep reading at the first batch's
    /// timestamp.
    pub fn pins_timestamp(self) -> bool {
        matches!(self, ReadConcern::Snapshot(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn levels() {
        assert_eq!(ReadConcern::parse(&doc! {}).unwrap(), ReadConcern::Latest);
        assert_eq!(
            ReadConcern::parse(&doc! {"readConcern": {"level": "majority"}}).unwrap(),
            ReadConcern::Latest
        );
        assert_eq!(
            ReadConcern::parse(&doc! {"readConcern": {"afterClusterTime": bson::Timestamp {time: 1, increment: 1}}})
                .unwrap(),
            ReadConcern::Latest
        );
        let at = ReadConcern::parse(
            &doc! {"readConcern": {"level": "snapshot", "atClusterTime": bson::Timestamp {time: 5, increment: 2}}},
        )
        .unwrap();
        assert_eq!(at.read_at(), ReadAt::At(Timestamp::new(5, 2)));
        assert_eq!(
            ReadConcern::parse(&doc! {"readConcern": {"level": "bogus"}})
                .unwrap_err()
                .code,
            9
        );
    }
}
