//! A member's durable state outside the oplog, through `Engine::local()`:
//! term and vote (`replset.election`), the configuration
//! (`system.replset`), the rollback id (`replset.rbid`). Every write is
//! durable before it returns (the local store fsyncs), which is what lets
//! the coordinator send a vote's reply right after persisting it.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use slipstream_consensus::config::{MemberId, ReplSetConfig};
use slipstream_consensus::Persisted;
use slipstream_storage::Engine;

use crate::config_document::{config_document, parse_config};
use crate::error::ReplError;
use crate::protocol::integral;

const ELECTION: &str = "replset.election";
const CONFIG: &str = "system.replset";
const RBID: &str = "replset.rbid";

pub struct LocalState {
    engine: Arc<Engine>,
}

impl LocalState {
    pub fn new(engine: Arc<Engine>) -> LocalState {
        LocalState { engine }
    }

    pub fn read_term_and_vote(&self) -> Result<Persisted, ReplError> {
        let Some(document) = self.engine.local().read(ELECTION)? else {
            return Ok(Persisted::default());
        };
        let term = document.get("term").and_then(integral).unwrap_or(0);
        let voted_for = match document.get("votedFor").and_then(integral) {
            Some(id) if id >= 0 => Some(id as MemberId),
            _ => None,
        };
        Ok(Persisted { term, voted_for })
    }

    pub fn write_term_and_vote(&self, term: i64, voted_for: Option<MemberId>) -> Result<(), ReplError> {
        let voted: Bson = voted_for.map_or(Bson::Int32(-1), |id| Bson::Int32(id as i32));
        let document = doc! {"_id": "election", "term": term, "votedFor": voted};
        Ok(self.engine.local().write(ELECTION, &document)?)
    }

    pub fn read_config(&self) -> Result<Option<ReplSetConfig>, ReplError> {
        match self.engine.local().read(CONFIG)? {
            Some(document) => Ok(Some(parse_config(&document)?)),
            None => Ok(None),
        }
    }

    pub fn write_config(&self, config: &ReplSetConfig) -> Result<(), ReplError> {
        Ok(self.engine.local().write(CONFIG, &config_document(config))?)
    }

    /// The rollback id: changes on every rollback, so that a member
    /// searching another's oplog notices it rolled back meanwhile.
    pub fn read_rbid(&self) -> Result<Option<i32>, ReplError> {
        let document: Option<Document> = self.engine.local().read(RBID)?;
        Ok(document
            .and_then(|d| d.get("rbid").and_then(integral))
            .map(|rbid| rbid as i32))
    }

    pub fn write_rbid(&self, rbid: i32) -> Result<(), ReplError> {
        Ok(self.engine.local().write(RBID, &doc! {"_id": "rbid", "rbid": rbid})?)
    }
}
