//! Feeding documents to the aggregation pipeline from storage: the input
//! of a pipeline (a plan's scan, lazily, with the leading `$match` applied
//! as it goes) and the `CollectionSource` that `$lookup` and `$unionWith`
//! read other collections through.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Instant;

use bson::Document;
use slipstream_query::aggregate::CollectionSource;
use slipstream_query::collation::{same_collation, CollationRef};
use slipstream_query::filter::Filter;
use slipstream_query::QueryError;
use slipstream_storage::{Engine, ReadAt, Reader, Timestamp};
use slipstream_storage::TimestampBson;

use super::limits::{
    BLOCKING_SORT_MEMORY_BYTES_MAX, OPLOG_READ_CHUNK_ENTRIES, REPLY_BATCH_BYTES_MAX, SCAN_CHUNK_RECORDS,
};
use super::oplog::TsBounds;
use super::query::check_deadline;
use super::scan::{Access, Scan, ScanStats};
use super::size::document_size;
use crate::error::CommandError;

fn to_query_error(error: CommandError) -> QueryError {
    QueryError::new(error.code, error.message)
}

/// The documents of a scan that pass `filter`, read a chunk at a time.
pub struct ScanInput {
    scan: Scan,
    reader: Reader,
    filter: Filter,
    buffer: VecDeque<Document>,
    finished: bool,
    deadline: Option<Instant>,
}

impl ScanInput {
    pub fn new(scan: Scan, reader: Reader, filter: Filter, deadline: Option<Instant>) -> Self {
        ScanInput {
            scan,
            reader,
            filter,
            buffer: VecDeque::new(),
            finished: false,
            deadline,
        }
    }

    pub fn stats(&self) -> ScanStats {
        self.scan.stats
    }

    fn refill(&mut self) -> Result<(), CommandError> {
        while self.buffer.is_empty() && !self.finished {
            check_deadline(self.deadline)?;
            let fetched = self.scan.fetch(&self.reader, SCAN_CHUNK_RECORDS)?;
            for item in fetched.items {
                let duplicate = self.scan.is_duplicate(&item);
                self.scan.consume(&item)?;
                if !duplicate && self.filter.matches(&item.document) {
                    self.buffer.push_back(item.document);
                }
            }
            if fetched.reached_end {
                self.scan.finish();
                self.finished = true;
            }
        }
        Ok(())
    }
}

impl Iterator for ScanInput {
    type Item = Result<Document, QueryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(error) = self.refill() {
            self.finished = true;
            self.buffer.clear();
            return Some(Err(to_query_error(error)));
        }
        self.buffer.pop_front().map(Ok)
    }
}

thread_local! {
    /// How many view reads are nested on this thread (a pipeline runs on
    /// one thread, and each `$lookup`/`$unionWith` of a view nests one).
    static VIEW_READ_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One nested view read; a view whose pipeline reads itself, directly or
/// through other views, would otherwise recurse until the stack overflows.
struct ViewReadDepth;

impl ViewReadDepth {
    fn enter(db: &str, view: &str) -> Result<ViewReadDepth, QueryError> {
        let depth = VIEW_READ_DEPTH.with(|depth| {
            depth.set(depth.get() + 1);
            depth.get()
        });
        let guard = ViewReadDepth;
        if depth > super::views::VIEW_DEPTH_MAX {
            return Err(QueryError::new(
                5,
                format!(
                    "View cycle detected: reading {db}.{view} nests more than {} view reads",
                    super::views::VIEW_DEPTH_MAX
                ),
            ));
        }
        Ok(guard)
    }
}

impl Drop for ViewReadDepth {
    fn drop(&mut self) {
        VIEW_READ_DEPTH.with(|depth| depth.set(depth.get() - 1));
    }
}

/// Reads whole collections for `$lookup` / `$unionWith`, at the pipeline's
/// read position, within the blocking-stage memory budget.
pub struct StorageSource {
    pub engine: Arc<Engine>,
    pub read_at: ReadAt,
}

impl CollectionSource for StorageSource {
    fn scan(&self, db: &str, collection: &str) -> Result<Vec<Document>, QueryError> {
        // A view read on its own runs under its own collation.
        let own = super::views::collation(&self.engine, db, collection).map_err(to_query_error)?;
        self.scan_collated(db, collection, &own, false)
    }

    fn scan_collated(
        &self,
        db: &str,
        collection: &str,
        collation: &CollationRef,
        view_must_match: bool,
    ) -> Result<Vec<Document>, QueryError> {
        // A view is read as its pipeline over its backing collection
        // (which `resolve` guarantees is not itself a view).
        if let Some(view) = super::views::resolve(&self.engine, db, collection).map_err(to_query_error)? {
            if view_must_match {
                let own = super::views::collation(&self.engine, db, collection).map_err(to_query_error)?;
                if !same_collation(own.as_deref(), collation.as_deref()) {
                    return Err(QueryError::new(
                        super::views::OPTION_NOT_SUPPORTED_ON_VIEW,
                        format!("Cannot override the default collation of view {db}.{collection}"),
                    ));
                }
            }
            let _depth = ViewReadDepth::enter(db, collection)?;
            let base = self.scan(db, &view.collection)?;
            let pipeline =
                slipstream_query::aggregate::Pipeline::parse(&view.pipeline, db)?.with_collation(collation.clone());
            return pipeline.execute(Box::new(base.into_iter().map(Ok)), self, bson::DateTime::now());
        }
        let ns = format!("{db}.{collection}");
        if self.engine.collection_info(&ns).is_none() {
            return Ok(Vec::new());
        }
        let reader = self.engine.reader(self.read_at).map_err(|e| to_query_error(e.into()))?;
        let mut input = ScanInput::new(
            Scan::new(ns.clone(), Access::Collection { reverse: false }),
            reader,
            Filter::match_all(),
            None,
        );
        let mut documents = Vec::new();
        let mut bytes = 0usize;
        for document in &mut input {
            let document = document?;
            bytes += document_size(&document);
            if bytes > BLOCKING_SORT_MEMORY_BYTES_MAX {
                return Err(QueryError::new(
                    292,
                    format!("reading {ns} for $lookup/$unionWith exceeded the memory limit of {BLOCKING_SORT_MEMORY_BYTES_MAX} bytes"),
                ));
            }
            documents.push(document);
        }
        Ok(documents)
    }
}

/// The oplog in timestamp order within `bounds`, read a chunk at a time
/// (the input of a pipeline on `local.oplog.rs`).
pub struct OplogInput {
    engine: Arc<Engine>,
    bounds: TsBounds,
    next_from: Bound<Timestamp>,
    buffer: VecDeque<Document>,
    finished: bool,
    deadline: Option<Instant>,
    pub examined: u64,
}

impl OplogInput {
    pub fn new(engine: Arc<Engine>, bounds: TsBounds, deadline: Option<Instant>) -> Self {
        OplogInput {
            engine,
            bounds,
            next_from: bounds.lower,
            buffer: VecDeque::new(),
            finished: false,
            deadline,
            examined: 0,
        }
    }

    fn refill(&mut self) -> Result<(), CommandError> {
        while self.buffer.is_empty() && !self.finished {
            check_deadline(self.deadline)?;
            let entries = self
                .engine
                .oplog_read(self.next_from, OPLOG_READ_CHUNK_ENTRIES, REPLY_BATCH_BYTES_MAX)?;
            if entries.is_empty() {
                self.finished = true;
            }
            for raw in entries {
                let document = Document::try_from(raw)
                    .map_err(|err| CommandError::internal(format!("oplog entry is not valid BSON: {err}")))?;
                let ts = document
                    .get_timestamp("ts")
                    .map(Timestamp::from_bson)
                    .map_err(|_| CommandError::internal("oplog entry without a ts field"))?;
                if self.bounds.above(ts) {
                    self.finished = true;
                    break;
                }
                self.next_from = Bound::Excluded(ts);
                self.examined += 1;
                if !self.bounds.below(ts) {
                    self.buffer.push_back(document);
                }
            }
        }
        Ok(())
    }
}

impl Iterator for OplogInput {
    type Item = Result<Document, QueryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(error) = self.refill() {
            self.finished = true;
            self.buffer.clear();
            return Some(Err(to_query_error(error)));
        }
        self.buffer.pop_front().map(Ok)
    }
}
