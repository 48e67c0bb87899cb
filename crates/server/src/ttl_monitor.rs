//! The TTL monitor: every `ttlMonitorSleepSecs` it deletes the documents
//! whose TTL-indexed date is older than the index's `expireAfterSeconds`.
//!
//! Its deletes are ordinary deletes through the engine's writer, one oplog
//! entry each, so every member of a set applies them as it applies a
//! client's; only a writable primary runs passes (a secondary's writer is
//! closed anyway). As in MongoDB, a document expires when the indexed field
//! holds a date (or an array holding one) at or before now minus
//! `expireAfterSeconds`; other values never expire, and a partial TTL index
//! expires only the documents its filter admits.

use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, DateTime, Document};
use serde_json::json;
use slipstream_query::filter::Filter;
use slipstream_repl::CommandAccess;
use slipstream_storage::{CollectionInfo, Engine, IndexSpec};

use crate::error::CommandError;
use crate::exec::plan::{plan_query, QueryShape};
use crate::exec::query::collect_matches;
use crate::state::ServerState;

/// Documents one write-lock hold deletes at most, so that a large backlog
/// does not keep clients' writes waiting for long.
const TTL_DELETES_PER_BATCH_MAX: usize = 1_000;

/// Documents one index loses per pass at most (MongoDB 7.0's
/// `ttlIndexDeleteTargetDocs`); the rest waits for the next pass.
const TTL_DELETES_PER_INDEX_PER_PASS_MAX: u64 = 50_000;

/// Runs passes until the node shuts down.
pub async fn run(state: Arc<ServerState>) {
    loop {
        let sleep = Duration::from_secs(state.parameters.ttl_monitor_sleep_secs());
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            // A new setting takes effect now rather than after the old sleep.
            _ = state.parameters.ttl_changed.notified() => continue,
            _ = state.shutdown.wait() => return,
        }
        if !state.parameters.ttl_monitor_enabled() {
            continue;
        }
        let pass_state = state.clone();
        let deleted = tokio::task::spawn_blocking(move || pass(&pass_state))
            .await
            .unwrap_or(0);
        state.metrics.count_ttl_pass(deleted);
    }
}

/// One pass over every TTL index of every database; the documents deleted.
fn pass(state: &ServerState) -> u64 {
    let engine = &state.engine;
    let now = DateTime::now();
    let mut deleted = 0;
    for db in engine.list_databases() {
        if state.topology.check_access(CommandAccess::Write, &db, false).is_err() {
            continue;
        }
        for info in engine.list_collections(&db) {
            for index in info.indexes.iter().filter(|index| index.expire_after_seconds.is_some()) {
                match delete_expired(engine, &info, index, now) {
                    Ok(n) => deleted += n,
                    Err(error) => state.log.warning(
                        "INDEX",
                        22537,
                        "TTLMonitor",
                        "Error during TTL pass",
                        json!({"namespace": info.ns, "index": index.name, "error": error.message}),
                    ),
                }
            }
        }
    }
    deleted
}

/// The filter of the documents `index` expires at `now`.
fn expired_filter(index: &IndexSpec, now: DateTime) -> Option<Document> {
    let seconds = index.expire_after_seconds?;
    let (path, _) = index.key.iter().next()?;
    let cutoff = DateTime::from_millis(now.timestamp_millis().saturating_sub(seconds.saturating_mul(1000)));
    let expired = doc! {path: {"$lte": cutoff}};
    match &index.partial_filter_expression {
        // Only what the index holds expires.
        Some(partial) => Some(doc! {"$and": [expired, partial.clone()]}),
        None => Some(expired),
    }
}

/// Deletes what `index` expires, in batches; the documents deleted.
fn delete_expired(
    engine: &Engine,
    info: &CollectionInfo,
    index: &IndexSpec,
    now: DateTime,
) -> Result<u64, CommandError> {
    let Some(filter_document) = expired_filter(index, now) else {
        return Ok(0);
    };
    // A partial filter admits documents under the index's collation.
    let filter = Filter::parse_collated(&filter_document, index.pattern()?.collation)?;
    let shape = QueryShape::filter_only(&filter_document, &filter);
    let plan = plan_query(Some(info), &shape)?;
    let mut deleted = 0;
    while deleted < TTL_DELETES_PER_INDEX_PER_PASS_MAX {
        let mut writer = engine.writer();
        let matches = collect_matches(
            &writer.reader(),
            &info.ns,
            &plan,
            &filter,
            None,
            Some(TTL_DELETES_PER_BATCH_MAX),
        )?;
        for document in &matches {
            writer.delete(&info.ns, document.get("_id").unwrap_or(&Bson::Null))?;
            deleted += 1;
        }
        if matches.len() < TTL_DELETES_PER_BATCH_MAX {
            break;
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cutoff_is_now_minus_the_ttl() {
        let index = IndexSpec {
            name: "at_1".into(),
            key: doc! {"at": 1},
            expire_after_seconds: Some(10),
            ..IndexSpec::default()
        };
        let filter = expired_filter(&index, DateTime::from_millis(60_000)).unwrap();
        assert_eq!(filter, doc! {"at": {"$lte": DateTime::from_millis(50_000)}});
        let plain = IndexSpec {
            expire_after_seconds: None,
            ..index
        };
        assert!(expired_filter(&plain, DateTime::from_millis(60_000)).is_none());
    }
}
