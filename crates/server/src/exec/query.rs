//! Running a query: a plan's scan, the filter, skip, limit and projection,
//! either streamed batch by batch from the plan's position (the cursor
//! keeps only the position), or, when the plan does not give the requested
//! order, sorted in memory under the named memory budget and buffered.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bson::Document;
use slipstream_query::expr::Variables;
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;
use slipstream_query::sort::SortSpec;
use slipstream_storage::Reader;

use super::batch::Batch;
use super::limits::{
    BLOCKING_SORT_ALLOW_DISK_USE_MEMORY_BYTES_MAX, BLOCKING_SORT_MEMORY_BYTES_MAX, SCAN_CHUNK_RECORDS,
};
use super::scan::{Scan, ScanItem, ScanStats};
use super::size::document_size;
use super::sort::InMemorySort;
use crate::error::CommandError;

/// MaxTimeMSExpired (50).
pub fn max_time_expired() -> CommandError {
    CommandError::new(50, "operation exceeded time limit")
}

/// A yield point of a query: MaxTimeMSExpired past the deadline, and
/// Interrupted once the running operation is killed (`killOp`).
pub(crate) fn check_deadline(deadline: Option<Instant>) -> Result<(), CommandError> {
    crate::operations::check_for_interrupt()?;
    match deadline {
        Some(deadline) if Instant::now() >= deadline => Err(max_time_expired()),
        _ => Ok(()),
    }
}

/// The variables a filter's `$expr` sees during one batch: `$$NOW`.
/// (Commands with `let` rewrite their constants into the filter.)
fn expr_variables() -> Variables {
    Variables::empty().with_now(bson::DateTime::now())
}

/// Whether `document` matches; an `$expr` that fails to evaluate fails
/// the query, as in MongoDB, rather than silently not matching.
fn filter_matches(filter: &Filter, document: &Document, vars: &Variables) -> Result<bool, CommandError> {
    Ok(filter.matches_with_variables(document, vars)?.matched)
}

/// Applies the projection, if any, to a matched document.
pub(crate) fn project(
    projection: Option<&Projection>,
    filter: &Filter,
    document: Document,
) -> Result<Document, CommandError> {
    match projection {
        None => Ok(document),
        Some(projection) => {
            // The positional `field.$` projection needs the match's array
            // position, so the match is recomputed with details here.
            let details = filter.matches_with_variables(&document, &expr_variables())?;
            // Computed fields compare strings under the query's collation.
            let vars = expr_variables().with_collation(filter.collation_ref());
            Ok(projection.apply_with_variables(&document, Some(&details), &vars)?)
        }
    }
}

/// A query whose results come straight from its scan, in scan order.
#[derive(Debug)]
pub struct StreamingQuery {
    scan: Scan,
    filter: Filter,
    projection: Option<Projection>,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    returned: u64,
}

impl StreamingQuery {
    pub fn new(scan: Scan, filter: Filter, projection: Option<Projection>, skip: u64, limit: Option<u64>) -> Self {
        StreamingQuery {
            scan,
            filter,
            projection,
            skip_remaining: skip,
            limit_remaining: limit,
            returned: 0,
        }
    }

    pub fn stats(&self) -> ScanStats {
        self.scan.stats
    }

    pub fn returned(&self) -> u64 {
        self.returned
    }

    pub fn ns(&self) -> &str {
        self.scan.ns()
    }

    /// Fills `batch` from `reader`; returns true when the query has nothing
    /// more to give (the cursor can be closed).
    pub fn fill(
        &mut self,
        reader: &Reader,
        batch: &mut Batch,
        deadline: Option<Instant>,
    ) -> Result<bool, CommandError> {
        // Read no further ahead than the results still wanted (a point
        // query reads one record), growing the chunk while the filter
        // rejects records, up to SCAN_CHUNK_RECORDS.
        let wanted = batch.room().min(
            self.limit_remaining
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        );
        let mut chunk = wanted
            .saturating_add(usize::try_from(self.skip_remaining).unwrap_or(usize::MAX))
            .clamp(1, SCAN_CHUNK_RECORDS);
        loop {
            if self.limit_remaining == Some(0) {
                self.scan.finish();
                return Ok(true);
            }
            if self.scan.is_done() {
                return Ok(true);
            }
            if batch.is_full() {
                return Ok(false);
            }
            check_deadline(deadline)?;
            let vars = expr_variables();
            let fetched = self.scan.fetch(reader, chunk)?;
            chunk = chunk.saturating_mul(2).min(SCAN_CHUNK_RECORDS);
            let mut stopped = false;
            for item in fetched.items {
                if batch.is_full() || self.limit_remaining == Some(0) {
                    stopped = true;
                    break;
                }
                if self.scan.is_duplicate(&item) || !filter_matches(&self.filter, &item.document, &vars)? {
                    self.scan.consume(&item)?;
                    continue;
                }
                if self.skip_remaining > 0 {
                    self.skip_remaining -= 1;
                    self.scan.consume(&item)?;
                    continue;
                }
                let ScanItem {
                    record_key,
                    document,
                    after,
                } = item;
                let output = project(self.projection.as_ref(), &self.filter, document)?;
                if batch.push(output).is_err() {
                    // Full by bytes: this record opens the next batch.
                    stopped = true;
                    break;
                }
                self.scan.consume_at(&record_key, after)?;
                self.returned += 1;
                if let Some(limit) = self.limit_remaining.as_mut() {
                    *limit -= 1;
                }
            }
            if stopped {
                return Ok(self.limit_remaining == Some(0));
            }
            if batch.is_full() && self.limit_remaining != Some(0) {
                // Like MongoDB's executor, a full batch does not look ahead
                // for the end: the next getMore finds it (drivers count on
                // exactly that sequence of batches).
                return Ok(false);
            }
            if fetched.reached_end {
                self.scan.finish();
                return Ok(true);
            }
        }
    }
}

/// Runs `scan` to its end and sorts the matches in memory; returns the
/// projected documents after skip and limit, and the scan's counters.
#[allow(clippy::too_many_arguments)]
pub fn run_sorted(
    mut scan: Scan,
    reader: &Reader,
    filter: &Filter,
    sort: &SortSpec,
    projection: Option<&Projection>,
    skip: u64,
    limit: Option<u64>,
    allow_disk_use: bool,
    deadline: Option<Instant>,
) -> Result<(VecDeque<Document>, ScanStats), CommandError> {
    let keep_max = limit.map(|limit| usize::try_from(skip.saturating_add(limit)).unwrap_or(usize::MAX));
    let memory_bytes_max = if allow_disk_use {
        BLOCKING_SORT_ALLOW_DISK_USE_MEMORY_BYTES_MAX
    } else {
        BLOCKING_SORT_MEMORY_BYTES_MAX
    };
    let mut sorter = InMemorySort::new(
        |a: &Document, b: &Document| sort.compare(a, b),
        keep_max,
        memory_bytes_max,
        allow_disk_use,
    );
    loop {
        check_deadline(deadline)?;
        let vars = expr_variables();
        let fetched = scan.fetch(reader, SCAN_CHUNK_RECORDS)?;
        for item in fetched.items {
            let duplicate = scan.is_duplicate(&item);
            scan.consume(&item)?;
            if !duplicate && filter_matches(filter, &item.document, &vars)? {
                sorter.push(item.document)?;
            }
        }
        if fetched.reached_end {
            break;
        }
    }
    scan.finish();
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    let mut output = VecDeque::new();
    for document in sorter.finish().into_iter().skip(skip) {
        output.push_back(project(projection, filter, document)?);
    }
    Ok((output, scan.stats))
}

/// Bytes (encoded size) of the documents that buffered results hold for
/// later batches, over every open cursor: `serverStatus`'s
/// `slipstream.memory.cursorBufferedBytes`.
static BUFFERED_BYTES: AtomicU64 = AtomicU64::new(0);

/// What buffered results of open cursors hold now (`BUFFERED_BYTES`).
pub fn buffered_results_bytes() -> u64 {
    BUFFERED_BYTES.load(Ordering::Relaxed)
}

/// Results computed up front (in-memory sorts, aggregation output, index
/// lists), handed out batch by batch.
#[derive(Debug, Default)]
pub struct BufferedResults {
    documents: VecDeque<Document>,
    /// The encoded size of `documents`, counted in `BUFFERED_BYTES`.
    bytes: u64,
    /// The work done computing them, for `explain`.
    pub stats: ScanStats,
}

impl BufferedResults {
    pub fn new(documents: impl Into<VecDeque<Document>>, stats: ScanStats) -> Self {
        let documents = documents.into();
        let bytes = documents.iter().map(|document| document_size(document) as u64).sum();
        BUFFERED_BYTES.fetch_add(bytes, Ordering::Relaxed);
        BufferedResults { documents, bytes, stats }
    }

    /// Moves documents into `batch`; returns true when none are left and
    /// the batch had room to see that (a full batch does not look ahead,
    /// as in MongoDB).
    pub fn fill(&mut self, batch: &mut Batch) -> bool {
        while let Some(document) = self.documents.pop_front() {
            let size = document_size(&document) as u64;
            if let Err(document) = batch.push(document) {
                self.documents.push_front(document);
                return false;
            }
            self.release(size);
        }
        !batch.is_full()
    }

    fn release(&mut self, bytes: u64) {
        assert!(bytes <= self.bytes, "buffered results count {} bytes, releasing {bytes}", self.bytes);
        self.bytes -= bytes;
        BUFFERED_BYTES.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Drop for BufferedResults {
    fn drop(&mut self) {
        let left = self.bytes;
        self.release(left);
    }
}

/// The documents matching `filter` in the plan's order (or in `sort`
/// order when the plan does not give it), at most `max` of them: the
/// candidates of an update, delete or findAndModify.
pub fn collect_matches(
    reader: &Reader,
    ns: &str,
    plan: &super::plan::PlannedQuery,
    filter: &Filter,
    sort: Option<&SortSpec>,
    max: Option<usize>,
) -> Result<Vec<Document>, CommandError> {
    if plan.eof || max == Some(0) {
        return Ok(Vec::new());
    }
    let mut scan = plan.scan(ns);
    if let Some(sort) = sort.filter(|sort| !sort.is_empty() && !plan.provides_sort) {
        let limit = max.map(|max| max as u64);
        let (documents, _) = run_sorted(scan, reader, filter, sort, None, 0, limit, false, None)?;
        return Ok(documents.into());
    }
    let mut matches = Vec::new();
    // As in `StreamingQuery::fill`: read only as far ahead as needed.
    let mut chunk = max.unwrap_or(SCAN_CHUNK_RECORDS).clamp(1, SCAN_CHUNK_RECORDS);
    loop {
        let vars = expr_variables();
        let fetched = scan.fetch(reader, chunk)?;
        chunk = chunk.saturating_mul(2).min(SCAN_CHUNK_RECORDS);
        for item in fetched.items {
            let duplicate = scan.is_duplicate(&item);
            scan.consume(&item)?;
            if !duplicate && filter_matches(filter, &item.document, &vars)? {
                matches.push(item.document);
                if max.is_some_and(|max| matches.len() >= max) {
                    return Ok(matches);
                }
            }
        }
        if fetched.reached_end {
            return Ok(matches);
        }
    }
}

/// The number of documents matching `filter` through `plan`, without
/// holding them (`count`, and the statistics of `explain`), with the
/// scan's counters.
pub fn count_matches(
    reader: &Reader,
    ns: &str,
    plan: &super::plan::PlannedQuery,
    filter: &Filter,
) -> Result<(u64, ScanStats), CommandError> {
    if plan.eof {
        return Ok((0, ScanStats::default()));
    }
    let mut scan = plan.scan(ns);
    let mut count = 0u64;
    loop {
        let vars = expr_variables();
        let fetched = scan.fetch(reader, SCAN_CHUNK_RECORDS)?;
        for item in fetched.items {
            let duplicate = scan.is_duplicate(&item);
            scan.consume(&item)?;
            if !duplicate && filter_matches(filter, &item.document, &vars)? {
                count += 1;
            }
        }
        if fetched.reached_end {
            return Ok((count, scan.stats));
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;
    use crate::exec::batch::BatchLimits;

    #[test]
    fn buffered_results_count_what_they_still_hold() {
        let documents: Vec<Document> = (0..3).map(|i| doc! {"_id": i, "pad": "x".repeat(1000)}).collect();
        let sizes: Vec<u64> = documents.iter().map(|document| document_size(document) as u64).collect();
        let mut results = BufferedResults::new(documents, ScanStats::default());
        assert_eq!(results.bytes, sizes.iter().sum::<u64>());
        // Other tests' cursors move the shared counter, never below ours.
        assert!(buffered_results_bytes() >= results.bytes);
        let mut batch = Batch::new(BatchLimits { documents_max: Some(1), bytes_max: usize::MAX });
        assert!(!results.fill(&mut batch));
        assert_eq!(results.bytes, sizes[1] + sizes[2], "a document handed out is no longer held");
        let mut batch = Batch::new(BatchLimits { documents_max: Some(10), bytes_max: usize::MAX });
        assert!(results.fill(&mut batch));
        assert_eq!(results.bytes, 0);
    }
}
