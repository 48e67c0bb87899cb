//! Write concern on a standalone node: `{w, j, wtimeout}`.
//!
//! Choices (MongoDB 7.0 on a standalone `mongod`):
//! - `w: 0` and `w: 1` are satisfied once the write is applied; `j: true`
//!   (or the legacy `fsync: true`) additionally waits until the journal has
//!   fsynced the last write's oplog entry.
//! - `w: "majority"`: the majority of a one-node "set" is the node itself,
//!   and MongoDB makes majority writes wait for the journal, so it is
//!   treated as `j: true`.
//! - `w` > 1 cannot be satisfied without replicas: BadValue (2) "cannot use
//!   'w' > 1 on a standalone", as MongoDB answers; other tag names are
//!   UnknownReplWriteConcern (79).
//! - `wtimeout` is accepted; a standalone never waits on other nodes.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_storage::{Engine, OpTime};

use crate::error::CommandError;

/// The `w` of a write concern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteAcknowledgement {
    Nodes(i64),
    Majority,
}

/// A parsed write concern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteConcern {
    pub w: WriteAcknowledgement,
    /// Wait for the journal's fsync before replying.
    pub journal: bool,
}

impl Default for WriteConcern {
    fn default() -> Self {
        WriteConcern {
            w: WriteAcknowledgement::Nodes(1),
            journal: false,
        }
    }
}

impl WriteConcern {
    /// Reads `writeConcern` from a command body (absent: `{w: 1}`).
    pub fn parse(body: &Document) -> Result<WriteConcern, CommandError> {
        let spec = match body.get("writeConcern") {
            None | Some(Bson::Null) => return Ok(WriteConcern::default()),
            Some(Bson::Document(spec)) => spec,
            Some(_) => return Err(CommandError::new(14, "writeConcern must be an object")),
        };
        let w = match spec.get("w") {
            None | Some(Bson::Null) => WriteAcknowledgement::Nodes(1),
            Some(Bson::String(mode)) if mode == "majority" => WriteAcknowledgement::Majority,
            Some(Bson::String(mode)) => {
                return Err(CommandError::new(
                    79,
                    format!("No write concern mode named '{mode}' found in replica set configuration"),
                ))
            }
            Some(value) => match slipstream_query::compare::as_number(value) {
                Some(slipstream_query::compare::Number::Int(n)) => WriteAcknowledgement::Nodes(n),
                Some(slipstream_query::compare::Number::Float(f)) if f.fract() == 0.0 => {
                    WriteAcknowledgement::Nodes(f as i64)
                }
                _ => return Err(CommandError::new(9, "w has to be a number or a string")),
            },
        };
        if let WriteAcknowledgement::Nodes(n) = w {
            if n < 0 {
                return Err(CommandError::new(9, "w cannot be a negative value"));
            }
            if n > 1 {
                return Err(CommandError::bad_value("cannot use 'w' > 1 on a standalone"));
            }
        }
        let flag = |name: &str| -> Result<bool, CommandError> {
            match spec.get(name) {
                None | Some(Bson::Null) => Ok(false),
                Some(Bson::Boolean(b)) => Ok(*b),
                Some(value) => match slipstream_query::compare::as_number(value) {
                    Some(slipstream_query::compare::Number::Int(n)) => Ok(n != 0),
                    Some(slipstream_query::compare::Number::Float(f)) => Ok(f != 0.0),
                    None => Err(CommandError::new(9, format!("{name} must be a boolean"))),
                },
            }
        };
        let journal = flag("j")? || flag("fsync")? || w == WriteAcknowledgement::Majority;
        Ok(WriteConcern { w, journal })
    }

    /// Waits until the write concern is satisfied for writes up to
    /// `last_write` (or, when the command wrote nothing, everything
    /// applied so far, so that `j: true` still means "my earlier writes
    /// are durable"). A failure becomes the reply's `writeConcernError`.
    pub async fn wait(&self, engine: &Arc<Engine>, last_write: Option<OpTime>) -> Option<Document> {
        if !self.journal {
            return None;
        }
        let ts = last_write.unwrap_or_else(|| engine.last_applied()).ts;
        // Waits on the journal's durable watch: no blocking thread per
        // waiting writer (32 `j: true` writers used to park 32 threads and
        // wake them all at every commit).
        let error = match engine.wait_durable_async(ts).await {
            Ok(()) => return None,
            Err(err) => CommandError::from(err),
        };
        Some(doc! {"code": error.code, "codeName": error.code_name(), "errmsg": error.message})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_w1_without_journal() {
        assert_eq!(WriteConcern::parse(&doc! {}).unwrap(), WriteConcern::default());
    }

    #[test]
    fn journal_and_majority_wait_for_the_journal() {
        assert!(
            WriteConcern::parse(&doc! {"writeConcern": {"w": 1, "j": true}})
                .unwrap()
                .journal
        );
        assert!(
            WriteConcern::parse(&doc! {"writeConcern": {"w": "majority"}})
                .unwrap()
                .journal
        );
        assert!(!WriteConcern::parse(&doc! {"writeConcern": {"w": 0}}).unwrap().journal);
    }

    #[test]
    fn w_above_one_and_unknown_tags_are_refused() {
        assert_eq!(
            WriteConcern::parse(&doc! {"writeConcern": {"w": 2}}).unwrap_err().code,
            2
        );
        assert_eq!(
            WriteConcern::parse(&doc! {"writeConcern": {"w": "dc1"}})
                .unwrap_err()
                .code,
            79
        );
        assert_eq!(
            WriteConcern::parse(&doc! {"writeConcern": {"w": -1}}).unwrap_err().code,
            9
        );
    }
}
