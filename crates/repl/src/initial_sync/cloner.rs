//! The cloner: copies every database but `local` from the source, one
//! collection at a time in namespace order: its options, UUID and indexes
//! first (`listCollections`, `listIndexes`; the indexes are then maintained
//! as documents arrive), then its documents in `_id` order through `find`
//! and `getMore`, each reply (at most 16 MB, the server's batch bound) one
//! bulk load into storage followed by a durable progress record. A resumed
//! copy skips the collections done and continues the current one after
//! the last `_id` copied.
//!
//! The copy is not consistent at one timestamp (MongoDB's logical clone):
//! the oplog catch-up that follows applies the source's entries from the
//! begin point idempotently, which repairs it.

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_storage::IndexSpec;

use super::progress::Progress;
use super::source::{self, count_of, cursor_batch, operation_time};
use super::{Attempt, SyncError};
use crate::fail_points::{INITIAL_SYNC_HANG_AFTER_BATCH, INITIAL_SYNC_HANG_AFTER_COLLECTION};
use crate::replica_set::Shared;

/// Most documents one copy batch asks for (storage's bulk load takes at
/// most `BULK_INSERT_DOCUMENTS_MAX`); replies are bounded to 16 MB anyway.
pub const CLONE_BATCH_DOCUMENTS: u64 = 50_000;
/// Collections of one database listed at most (MongoDB has no limit; a
/// bound keeps one reply's worth).
pub const COLLECTIONS_PER_DATABASE_MAX: i64 = 100_000;

/// One collection to copy, as `listCollections` describes it.
struct CollectionPlan {
    ns: String,
    name: String,
    options: Document,
    uuid: bson::Uuid,
    indexes: Vec<IndexSpec>,
}

/// Copies what the progress record does not show as done.
pub async fn clone_all(attempt: &mut Attempt) -> Result<(), SyncError> {
    let reply = source::command(&attempt.shared, &attempt.host, "admin", doc! {"listDatabases": 1}).await?;
    let databases = reply
        .get_array("databases")
        .map_err(|_| SyncError::protocol("listDatabases"))?;
    let mut names = Vec::new();
    let mut total_bytes = 0;
    for database in databases.iter().filter_map(Bson::as_document) {
        let Ok(name) = database.get_str("name") else { continue };
        if name == "local" {
            continue;
        }
        total_bytes += count_of(database, "sizeOnDisk");
        names.push(name.to_owned());
    }
    names.sort();
    attempt.status.set_total_bytes(total_bytes);
    for db in names {
        let plans = list_collections(attempt, &db).await?;
        for plan in &plans {
            let done = attempt.progress.collections_done.contains(&plan.ns);
            let count = source::command(&attempt.shared, &attempt.host, &db, doc! {"count": &plan.name}).await?;
            let indexes = plan.indexes.len() as u64 + 1;
            attempt
                .status
                .plan_collection(&plan.ns, count_of(&count, "n"), indexes, done);
        }
        for plan in plans {
            if !attempt.progress.collections_done.contains(&plan.ns) {
                clone_collection(attempt, plan).await?;
            }
        }
    }
    Ok(())
}

async fn list_collections(attempt: &Attempt, db: &str) -> Result<Vec<CollectionPlan>, SyncError> {
    let body = doc! {"listCollections": 1, "cursor": {"batchSize": COLLECTIONS_PER_DATABASE_MAX}};
    let reply = source::command_raw(&attempt.shared, &attempt.host, db, body).await?;
    let (_, collections) = cursor_batch(&reply)?;
    let mut plans = Vec::new();
    for raw in collections {
        let info = Document::try_from(raw.as_ref()).map_err(|_| SyncError::protocol("listCollections"))?;
        if info.get_str("type").unwrap_or("collection") != "collection" {
            continue;
        }
        let name = info
            .get_str("name")
            .map_err(|_| SyncError::protocol("listCollections name"))?;
        let uuid = match info.get_document("info").ok().and_then(|i| i.get("uuid")) {
            Some(Bson::Binary(binary)) => bson::Uuid::from_bytes(
                binary
                    .bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| SyncError::protocol("collection uuid"))?,
            ),
            _ => bson::Uuid::new(),
        };
        let options = info.get_document("options").cloned().unwrap_or_default();
        let indexes = list_indexes(attempt, db, name).await?;
        plans.push(CollectionPlan {
            ns: format!("{db}.{name}"),
            name: name.to_owned(),
            options,
            uuid,
            indexes,
        });
    }
    plans.sort_by(|a, b| a.ns.cmp(&b.ns));
    Ok(plans)
}

/// The secondary indexes' specs (`_id_` comes with the collection).
async fn list_indexes(attempt: &Attempt, db: &str, name: &str) -> Result<Vec<IndexSpec>, SyncError> {
    let body = doc! {"listIndexes": name};
    let reply = match source::command_raw(&attempt.shared, &attempt.host, db, body).await {
        Ok(reply) => reply,
        // Dropped since it was listed: the drop's entry follows.
        Err(crate::network::NetError::Command { code: 26, .. }) => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    let (_, specs) = cursor_batch(&reply)?;
    let mut indexes = Vec::new();
    for raw in specs {
        let spec = Document::try_from(raw.as_ref()).map_err(|_| SyncError::protocol("listIndexes"))?;
        if spec.get_str("name").is_ok_and(|name| name == "_id_") {
            continue;
        }
        indexes.push(IndexSpec::from_document(&spec).map_err(SyncError::Storage)?);
    }
    Ok(indexes)
}

async fn clone_collection(attempt: &mut Attempt, plan: CollectionPlan) -> Result<(), SyncError> {
    let ns = plan.ns.clone();
    attempt.status.collection_started(&ns);
    let engine = attempt.shared.engine.clone();
    let (options, uuid, indexes) = (plan.options, plan.uuid, plan.indexes);
    let create_ns = ns.clone();
    blocking(move || engine.bulk_create_collection(&create_ns, options, uuid, indexes)).await?;
    // The `_id` index in its order; resumed, from the last `_id` copied
    // on (`min` is inclusive and, unlike `$gt`, crosses BSON types).
    let resume_after = match &attempt.progress.current {
        Some((current, id)) if *current == ns => Some(id.clone()),
        _ => None,
    };
    let batch_documents = batch_documents(&attempt.shared);
    let db = ns.split('.').next().unwrap_or("").to_owned();
    let mut find = doc! {"find": &plan.name, "filter": {}, "hint": {"_id": 1}, "batchSize": batch_documents};
    if let Some(id) = &resume_after {
        find.insert("min", doc! {"_id": id.clone()});
    }
    let mut reply = source::command_raw(&attempt.shared, &attempt.host, &db, find).await?;
    let mut first = true;
    loop {
        let (cursor_id, mut documents) = cursor_batch(&reply)?;
        if std::mem::take(&mut first) {
            if let Some(id) = &resume_after {
                documents.retain(|document| document_id(document).as_ref() != Some(id));
            }
        }
        if let Some(ts) = operation_time(&reply) {
            attempt.progress.max_seen = attempt.progress.max_seen.max(ts);
        }
        if !documents.is_empty() {
            copy_batch(attempt, &ns, documents).await?;
            hang_after_batch(&attempt.shared, &ns).await;
        }
        if cursor_id == 0 {
            break;
        }
        let get_more = doc! {"getMore": cursor_id, "collection": &plan.name, "batchSize": batch_documents};
        reply = source::command_raw(&attempt.shared, &attempt.host, &db, get_more).await?;
    }
    attempt.progress.collections_done.push(ns.clone());
    attempt.progress.current = None;
    save(attempt).await?;
    attempt.status.collection_done(&ns);
    tracing::debug!(target: "repl", ns, "initial sync copied a collection");
    hang_after_collection(&attempt.shared, &ns).await;
    Ok(())
}

/// The copy's batch size: `initialSyncHangAfterBatch`'s `batchDocuments`
/// while it is on (a test's small batches), else `CLONE_BATCH_DOCUMENTS`.
fn batch_documents(shared: &Shared) -> i64 {
    shared
        .fail_points
        .data_while_on(INITIAL_SYNC_HANG_AFTER_BATCH)
        .and_then(|data| data.get("batchDocuments").and_then(crate::protocol::integral))
        .filter(|n| *n > 0)
        .map_or(CLONE_BATCH_DOCUMENTS as i64, |n| n.min(CLONE_BATCH_DOCUMENTS as i64))
}

/// `initialSyncHangAfterBatch`: waits while on, unless its `data.ns`
/// names another collection.
async fn hang_after_batch(shared: &Shared, ns: &str) {
    let Some(data) = shared.fail_points.data_while_on(INITIAL_SYNC_HANG_AFTER_BATCH) else {
        return;
    };
    if data.get_str("ns").is_ok_and(|chosen| chosen != ns) {
        return;
    }
    tracing::info!(target: "repl", fail_point = INITIAL_SYNC_HANG_AFTER_BATCH, ns,
        "initial sync fail point reached: hanging while it is on");
    shared.fail_points.wait_while_on(INITIAL_SYNC_HANG_AFTER_BATCH).await;
}

/// `initialSyncHangAfterCollection`: waits while on.
async fn hang_after_collection(shared: &Shared, ns: &str) {
    if !shared.fail_points.is_on(INITIAL_SYNC_HANG_AFTER_COLLECTION) {
        return;
    }
    tracing::info!(target: "repl", fail_point = INITIAL_SYNC_HANG_AFTER_COLLECTION, ns,
        "initial sync fail point reached: hanging while it is on");
    shared
        .fail_points
        .wait_while_on(INITIAL_SYNC_HANG_AFTER_COLLECTION)
        .await;
}

fn document_id(document: &RawDocumentBuf) -> Option<Bson> {
    let value = document.get("_id").ok()??;
    Bson::try_from(value).ok()
}

/// One batch into storage, then its progress record (both durable).
async fn copy_batch(attempt: &mut Attempt, ns: &str, documents: Vec<RawDocumentBuf>) -> Result<(), SyncError> {
    let last = documents.last().expect("not empty");
    let last_id = document_id(last).ok_or_else(|| SyncError::protocol("a copied document without _id"))?;
    let count = documents.len() as u64;
    let engine = attempt.shared.engine.clone();
    let load_ns = ns.to_owned();
    let bytes = blocking(move || engine.bulk_insert(&load_ns, &documents)).await?;
    attempt.progress.current = Some((ns.to_owned(), last_id));
    save(attempt).await?;
    attempt.status.batch_copied(ns, count, bytes);
    Ok(())
}

pub async fn save(attempt: &Attempt) -> Result<(), SyncError> {
    let engine = attempt.shared.engine.clone();
    let progress: Progress = attempt.progress.clone();
    tokio::task::spawn_blocking(move || progress.save(&engine))
        .await
        .map_err(|err| SyncError::Stopped(err.to_string()))?
        .map_err(SyncError::Local)
}

/// Runs a storage call off the async workers.
pub async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, slipstream_storage::StorageError> + Send + 'static,
) -> Result<T, SyncError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|err| SyncError::Stopped(err.to_string()))?
        .map_err(SyncError::Storage)
}
