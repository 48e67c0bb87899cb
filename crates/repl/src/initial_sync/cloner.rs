//! The cloner: copies every database but `local` from the source, one
//! collection at a time in namespace order: its options, UUID and indexes
//! first (`listCollections`, `listIndexes`; the indexes are then maintained
//! as documents arrive), then its documents in `_id` order through `find`
//! and `getMore` (replies of at most 16 MB, the server's batch bound). A
//! `Fetcher` task reads the cursor one reply ahead while the previous
//! replies are stored, so the network and the disk overlap; replies are
//! gathered up to `COPY_COMMIT_BYTES` into one bulk load (one fsynced
//! commit) followed by a durable progress record naming its last `_id`:
//! the record never names a document read ahead but not yet stored. A
//! resumed copy skips the collections done and continues the current one
//! after the last `_id` recorded.
//!
//! The copy is not consistent at one timestamp (MongoDB's logical clone):
//! the oplog catch-up that follows applies the source's entries from the
//! begin point idempotently, which repairs it.

use bson::{doc, Bson, Document, RawDocumentBuf};
use slipstream_storage::IndexSpec;

use super::progress::Progress;
use super::source::{self, count_of, cursor_batch, operation_time};
use super::{Attempt, SyncError};
use crate::fail_points::{
    INITIAL_SYNC_HANG_AFTER_BATCH, INITIAL_SYNC_HANG_AFTER_COLLECTION, INITIAL_SYNC_HANG_BEFORE_INDEX_BUILD,
};
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
    let batch_documents =
        test_data_documents(&attempt.shared, "batchDocuments").unwrap_or(CLONE_BATCH_DOCUMENTS as i64);
    let mut find = doc! {"find": &plan.name, "filter": {}, "hint": {"_id": 1}, "batchSize": batch_documents};
    if let Some(id) = &resume_after {
        find.insert("min", doc! {"_id": id.clone()});
    }
    let cursor = CursorRead {
        host: attempt.host.clone(),
        db: ns.split('.').next().unwrap_or("").to_owned(),
        collection: plan.name.clone(),
        batch_documents,
    };
    if attempt.progress.indexes_building.as_deref() == Some(ns.as_str()) {
        tracing::info!(target: "repl", ns, "resuming initial sync at the index build of {ns}");
    } else {
        let fetcher = Fetcher::start(attempt.shared.clone(), cursor, find);
        copy_documents(attempt, &ns, fetcher, resume_after).await?;
        attempt.progress.indexes_building = Some(ns.clone());
        save(attempt).await?;
        hang_while_on(&attempt.shared, INITIAL_SYNC_HANG_BEFORE_INDEX_BUILD, &ns).await;
    }
    build_indexes(attempt, &ns).await?;
    attempt.progress.collections_done.push(ns.clone());
    attempt.progress.current = None;
    attempt.progress.indexes_building = None;
    save(attempt).await?;
    attempt.status.collection_done(&ns);
    tracing::debug!(target: "repl", ns, "initial sync copied a collection");
    hang_while_on(&attempt.shared, INITIAL_SYNC_HANG_AFTER_COLLECTION, &ns).await;
    Ok(())
}

/// Builds the collection's secondary indexes from its copied documents
/// (the copy left them alone: built from sorted keys, each index page is
/// written once instead of once a load).
async fn build_indexes(attempt: &Attempt, ns: &str) -> Result<(), SyncError> {
    let engine = attempt.shared.engine.clone();
    let build_ns = ns.to_owned();
    let started = std::time::Instant::now();
    let report = blocking(move || engine.bulk_build_indexes(&build_ns)).await?;
    if report.keys > 0 {
        tracing::info!(target: "repl", ns, keys = report.keys, runs_spilled = report.runs_spilled,
            commits = report.commits, elapsed_ms = started.elapsed().as_millis() as u64,
            "initial sync built the indexes of {ns}");
    }
    Ok(())
}

/// Stores what `fetcher` reads, `load_documents` (or `COPY_COMMIT_BYTES`)
/// a bulk load, each followed by its progress record; a resumed copy's
/// first reply starts with the last document stored before, left out.
async fn copy_documents(
    attempt: &mut Attempt,
    ns: &str,
    mut fetcher: Fetcher,
    resume_after: Option<Bson>,
) -> Result<(), SyncError> {
    let load_documents = test_data_documents(&attempt.shared, "loadDocuments").unwrap_or(fetcher.batch_documents);
    let mut first = true;
    let mut pending = Pending::default();
    loop {
        let fetched = fetcher.next().await.transpose()?;
        let last = fetched.is_none();
        if let Some(Fetched {
            mut documents,
            operation_time,
        }) = fetched
        {
            if std::mem::take(&mut first) {
                if let Some(id) = &resume_after {
                    documents.retain(|document| document_id(document).as_ref() != Some(id));
                }
            }
            if let Some(ts) = operation_time {
                attempt.progress.max_seen = attempt.progress.max_seen.max(ts);
            }
            pending.add(documents);
        }
        if !pending.documents.is_empty() && (last || pending.is_full(load_documents)) {
            let Pending { documents, replies, .. } = std::mem::take(&mut pending);
            copy_batch(attempt, ns, replies, documents).await?;
            hang_after_batch(&attempt.shared, ns).await;
        }
        if last {
            return Ok(());
        }
    }
}

/// Replies read ahead of the one being written: the next `getMore` runs
/// while a batch is stored, so the network and storage overlap, and memory
/// holds at most this many waiting replies (16 MB each) beside the one
/// being written and the one arriving.
pub const FETCH_AHEAD_BATCHES: usize = 1;

/// Bytes of documents stored in one bulk load (one fsynced commit and one
/// progress record): several replies' worth, since each commit rewrites
/// the key-value store's pages it touches (every index's leaves, for keys
/// in random order), so fewer, larger commits write less. Bounds, with
/// `FETCH_AHEAD_BATCHES`, what the copy holds in memory.
pub const COPY_COMMIT_BYTES: usize = 64 * 1024 * 1024;

/// Replies received and not yet stored.
#[derive(Default)]
struct Pending {
    documents: Vec<RawDocumentBuf>,
    bytes: usize,
    replies: u64,
}

impl Pending {
    fn add(&mut self, documents: Vec<RawDocumentBuf>) {
        self.bytes += documents
            .iter()
            .map(|document| document.as_bytes().len())
            .sum::<usize>();
        self.documents.extend(documents);
        self.replies += 1;
    }

    /// Whether to store now: `COPY_COMMIT_BYTES` reached, or
    /// `load_documents` (both it and a reply's `batchSize` are at most
    /// `CLONE_BATCH_DOCUMENTS`, so a load stays under twice that,
    /// `BULK_INSERT_DOCUMENTS_MAX`).
    fn is_full(&self, load_documents: i64) -> bool {
        self.bytes >= COPY_COMMIT_BYTES || self.documents.len() as i64 >= load_documents
    }
}

/// Where one collection's documents are read from.
struct CursorRead {
    host: String,
    db: String,
    collection: String,
    batch_documents: i64,
}

/// One reply's documents and the source's position when it read them.
struct Fetched {
    documents: Vec<RawDocumentBuf>,
    operation_time: Option<slipstream_storage::Timestamp>,
}

/// Reads one collection's cursor on its own task, `FETCH_AHEAD_BATCHES`
/// replies ahead of the writer; stops reading when dropped (an attempt
/// that fails leaves no reader behind).
struct Fetcher {
    replies: tokio::sync::mpsc::Receiver<Result<Fetched, SyncError>>,
    /// Documents a reply asks for.
    batch_documents: i64,
    task: tokio::task::JoinHandle<()>,
}

impl Fetcher {
    fn start(shared: std::sync::Arc<Shared>, cursor: CursorRead, find: Document) -> Fetcher {
        let (sender, replies) = tokio::sync::mpsc::channel(FETCH_AHEAD_BATCHES);
        let batch_documents = cursor.batch_documents;
        let task = tokio::spawn(async move {
            let mut body = find;
            loop {
                let read = read_batch(&shared, &cursor, body).await;
                let cursor_id = match &read {
                    Ok((cursor_id, _)) => *cursor_id,
                    Err(_) => 0,
                };
                if sender.send(read.map(|(_, fetched)| fetched)).await.is_err() || cursor_id == 0 {
                    return;
                }
                body = doc! {"getMore": cursor_id, "collection": &cursor.collection,
                "batchSize": cursor.batch_documents};
            }
        });
        Fetcher {
            replies,
            batch_documents,
            task,
        }
    }

    /// The next reply, in order; `None` after the last (or an error).
    async fn next(&mut self) -> Option<Result<Fetched, SyncError>> {
        self.replies.recv().await
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One `find` or `getMore` round trip: the cursor id and the batch.
async fn read_batch(
    shared: &std::sync::Arc<Shared>,
    cursor: &CursorRead,
    body: Document,
) -> Result<(i64, Fetched), SyncError> {
    let reply = source::command_raw(shared, &cursor.host, &cursor.db, body).await?;
    let (cursor_id, documents) = cursor_batch(&reply)?;
    let operation_time = operation_time(&reply);
    Ok((
        cursor_id,
        Fetched {
            documents,
            operation_time,
        },
    ))
}

/// A copy size from `initialSyncHangAfterBatch`'s `data` while it is on
/// (`batchDocuments`: documents a reply asks for; `loadDocuments`: a bulk
/// load's documents, several replies' when larger; a test's small
/// batches; `None` when not set), at most `CLONE_BATCH_DOCUMENTS`.
fn test_data_documents(shared: &Shared, field: &str) -> Option<i64> {
    test_data(shared, field).map(|n| n.min(CLONE_BATCH_DOCUMENTS as i64))
}

/// A positive number from `initialSyncHangAfterBatch`'s `data` while it is
/// on (also the checkpoint copy's `batchBytes`).
pub(super) fn test_data(shared: &Shared, field: &str) -> Option<i64> {
    shared
        .fail_points
        .data_while_on(INITIAL_SYNC_HANG_AFTER_BATCH)
        .and_then(|data| data.get(field).and_then(crate::protocol::integral))
        .filter(|n| *n > 0)
}

/// `initialSyncHangAfterBatch`: waits while on, unless its `data.ns`
/// names another collection.
pub(super) async fn hang_after_batch(shared: &Shared, ns: &str) {
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

/// Waits while the fail point `name` is on (`initialSyncHangBeforeIndexBuild`:
/// once a collection's documents are copied, and recorded so, and before
/// its indexes are built; `initialSyncHangAfterCollection`).
async fn hang_while_on(shared: &Shared, name: &'static str, ns: &str) {
    if !shared.fail_points.is_on(name) {
        return;
    }
    tracing::info!(target: "repl", fail_point = name, ns,
        "initial sync fail point reached: hanging while it is on");
    shared.fail_points.wait_while_on(name).await;
}

fn document_id(document: &RawDocumentBuf) -> Option<Bson> {
    let value = document.get("_id").ok()??;
    Bson::try_from(value).ok()
}

/// One batch into storage, then its progress record (both durable).
async fn copy_batch(
    attempt: &mut Attempt,
    ns: &str,
    replies: u64,
    documents: Vec<RawDocumentBuf>,
) -> Result<(), SyncError> {
    let last = documents.last().expect("not empty");
    let last_id = document_id(last).ok_or_else(|| SyncError::protocol("a copied document without _id"))?;
    let count = documents.len() as u64;
    let engine = attempt.shared.engine.clone();
    let load_ns = ns.to_owned();
    let bytes = blocking(move || engine.bulk_insert_records(&load_ns, &documents)).await?;
    attempt.progress.current = Some((ns.to_owned(), last_id));
    save(attempt).await?;
    attempt.status.batch_copied(ns, replies, count, bytes);
    Ok(())
}

pub async fn save(attempt: &Attempt) -> Result<(), SyncError> {
    save_progress(&attempt.shared, attempt.progress.clone()).await
}

/// Writes the progress record (durable when it returns).
pub async fn save_progress(shared: &std::sync::Arc<Shared>, progress: Progress) -> Result<(), SyncError> {
    let engine = shared.engine.clone();
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
