//! Queries on `local.oplog.rs`: the oplog is read from the journal through
//! `Engine::oplog_read` in timestamp (natural) order, with the filter's
//! bounds on `ts` pushed down so that a fetcher resuming at a timestamp
//! does not scan the whole oplog, or newest first for `$natural: -1`.
//! Tailable cursors keep the timestamp of the last entry they examined and,
//! with `awaitData`, wait for new entries on `Engine::oplog_watch`.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::{Bson, Document, RawDocumentBuf};
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;
use slipstream_storage::{Engine, Timestamp};
use slipstream_storage::TimestampBson;

use super::batch::{Batch, BatchLimits};
use super::limits::{BLOCKING_SORT_MEMORY_BYTES_MAX, OPLOG_READ_CHUNK_ENTRIES, REPLY_BATCH_BYTES_MAX};
use super::query::{check_deadline, project};
use super::size::document_size;
use crate::error::CommandError;

pub const OPLOG_DB: &str = "local";
pub const OPLOG_COLLECTION: &str = "oplog.rs";

pub fn is_oplog(db: &str, collection: &str) -> bool {
    db == OPLOG_DB && collection == OPLOG_COLLECTION
}

/// CappedPositionLost (136): the entries after a tailable cursor's position
/// were truncated away (the reader fell off the capped oplog).
pub fn capped_position_lost(position: Timestamp) -> CommandError {
    CommandError::new(
        136,
        format!(
            "CollectionScan died due to position in capped collection being deleted. Last seen record id: {position}"
        ),
    )
}

/// Bounds on `ts` a filter implies, from its top-level `ts` conditions and
/// those of a top-level `$and`. Conditions the bounds do not capture are
/// still checked by the filter itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsBounds {
    pub lower: Bound<Timestamp>,
    pub upper: Bound<Timestamp>,
}

impl TsBounds {
    pub fn from_filter(filter: &Document) -> TsBounds {
        let mut bounds = TsBounds {
            lower: Bound::Unbounded,
            upper: Bound::Unbounded,
        };
        bounds.add_conditions(filter);
        bounds
    }

    fn add_conditions(&mut self, filter: &Document) {
        for (key, value) in filter {
            match (key.as_str(), value) {
                ("ts", Bson::Timestamp(ts)) => self.add("$eq", *ts),
                ("ts", Bson::Document(operators)) => {
                    for (op, operand) in operators {
                        if let Bson::Timestamp(ts) = operand {
                            self.add(op, *ts);
                        }
                    }
                }
                ("$and", Bson::Array(clauses)) => {
                    for clause in clauses {
                        if let Bson::Document(clause) = clause {
                            self.add_conditions(clause);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn add(&mut self, op: &str, ts: bson::Timestamp) {
        let ts = Timestamp::from_bson(ts);
        match op {
            "$gt" => self.lower = tighter_lower(self.lower, Bound::Excluded(ts)),
            "$gte" => self.lower = tighter_lower(self.lower, Bound::Included(ts)),
            "$lt" => self.upper = tighter_upper(self.upper, Bound::Excluded(ts)),
            "$lte" => self.upper = tighter_upper(self.upper, Bound::Included(ts)),
            "$eq" => {
                self.lower = tighter_lower(self.lower, Bound::Included(ts));
                self.upper = tighter_upper(self.upper, Bound::Included(ts));
            }
            _ => {}
        }
    }

    /// `ts` is below the lower bound.
    pub fn below(&self, ts: Timestamp) -> bool {
        match self.lower {
            Bound::Included(lower) => ts < lower,
            Bound::Excluded(lower) => ts <= lower,
            Bound::Unbounded => false,
        }
    }

    /// The newest timestamp the upper bound allows (None: none does).
    pub fn newest_allowed(&self) -> Option<Timestamp> {
        match self.upper {
            Bound::Included(upper) => Some(upper),
            Bound::Excluded(upper) => upper.as_u64().checked_sub(1).map(Timestamp::from_u64),
            Bound::Unbounded => Some(Timestamp::MAX),
        }
    }

    /// `ts` is above the upper bound.
    pub fn above(&self, ts: Timestamp) -> bool {
        match self.upper {
            Bound::Included(upper) => ts > upper,
            Bound::Excluded(upper) => ts >= upper,
            Bound::Unbounded => false,
        }
    }
}

fn tighter_lower(current: Bound<Timestamp>, new: Bound<Timestamp>) -> Bound<Timestamp> {
    let key = |bound: &Bound<Timestamp>| match bound {
        Bound::Unbounded => (0u8, Timestamp::ZERO, 0u8),
        Bound::Included(ts) => (1, *ts, 0),
        Bound::Excluded(ts) => (1, *ts, 1),
    };
    if key(&new) > key(&current) {
        new
    } else {
        current
    }
}

fn tighter_upper(current: Bound<Timestamp>, new: Bound<Timestamp>) -> Bound<Timestamp> {
    let key = |bound: &Bound<Timestamp>| match bound {
        Bound::Unbounded => (1u8, Timestamp::MAX, 1u8),
        Bound::Included(ts) => (0, *ts, 1),
        Bound::Excluded(ts) => (0, *ts, 0),
    };
    if key(&new) < key(&current) {
        new
    } else {
        current
    }
}

fn entry_document(raw: RawDocumentBuf) -> Result<(Timestamp, Document), CommandError> {
    let document = Document::try_from(raw)
        .map_err(|err| CommandError::internal(format!("oplog entry is not valid BSON: {err}")))?;
    let ts = document
        .get_timestamp("ts")
        .map_err(|_| CommandError::internal("oplog entry without a ts field"))?;
    Ok((Timestamp::from_bson(ts), document))
}

/// A query reading the oplog forward from a timestamp; as a tailable
/// cursor it stays open at the end of the oplog.
#[derive(Debug)]
pub struct OplogQuery {
    filter: Filter,
    projection: Option<Projection>,
    bounds: TsBounds,
    /// Where the next read starts: after the last entry examined.
    next_from: Bound<Timestamp>,
    /// The newest entry examined, if any.
    last_seen: Option<Timestamp>,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    tailable: bool,
    await_data: bool,
    finished: bool,
    pub examined: u64,
    pub returned: u64,
}

impl OplogQuery {
    pub fn new(
        filter: Filter,
        bounds: TsBounds,
        projection: Option<Projection>,
        skip: u64,
        limit: Option<u64>,
        tailable: bool,
        await_data: bool,
    ) -> Self {
        OplogQuery {
            filter,
            projection,
            bounds,
            next_from: bounds.lower,
            last_seen: None,
            skip_remaining: skip,
            limit_remaining: limit,
            tailable,
            await_data,
            finished: false,
            examined: 0,
            returned: 0,
        }
    }

    pub fn is_tailable(&self) -> bool {
        self.tailable
    }

    pub fn is_await_data(&self) -> bool {
        self.await_data
    }

    /// Fails with CappedPositionLost when the oplog no longer holds the
    /// last entry this cursor returned or examined (MongoDB's rule for
    /// capped collections: the cursor's position was deleted under it).
    pub fn check_position(&self, oplog_first: Timestamp) -> Result<(), CommandError> {
        match self.last_seen {
            Some(last_seen) if oplog_first > last_seen => Err(capped_position_lost(last_seen)),
            _ => Ok(()),
        }
    }

    fn advance(&mut self, ts: Timestamp) {
        self.next_from = Bound::Excluded(ts);
        self.last_seen = Some(ts);
        self.examined += 1;
    }

    /// Fills `batch` with the entries available now; returns true when the
    /// cursor is finished (never for a tailable cursor, unless an upper
    /// bound or the limit is reached).
    pub fn fill(
        &mut self,
        engine: &Engine,
        batch: &mut Batch,
        deadline: Option<Instant>,
    ) -> Result<bool, CommandError> {
        // Read no further ahead than the entries still wanted, growing the
        // chunk while the filter rejects entries.
        let limit = self.limit_remaining.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let skip = usize::try_from(self.skip_remaining).unwrap_or(usize::MAX);
        let mut chunk = batch.room().min(limit).saturating_add(skip).clamp(1, OPLOG_READ_CHUNK_ENTRIES);
        loop {
            if self.finished || self.limit_remaining == Some(0) {
                self.finished = true;
                return Ok(true);
            }
            if batch.is_full() {
                return Ok(false);
            }
            check_deadline(deadline)?;
            let entries = engine.oplog_read(self.next_from, chunk, REPLY_BATCH_BYTES_MAX)?;
            chunk = chunk.saturating_mul(2).min(OPLOG_READ_CHUNK_ENTRIES);
            if entries.is_empty() {
                self.finished = !self.tailable;
                return Ok(self.finished);
            }
            for raw in entries {
                if batch.is_full() || self.limit_remaining == Some(0) {
                    return Ok(self.limit_remaining == Some(0));
                }
                let (ts, document) = entry_document(raw)?;
                if self.bounds.above(ts) {
                    self.finished = true;
                    return Ok(true);
                }
                if self.bounds.below(ts) || !self.filter.matches(&document) {
                    self.advance(ts);
                    continue;
                }
                if self.skip_remaining > 0 {
                    self.skip_remaining -= 1;
                    self.advance(ts);
                    continue;
                }
                let output = project(self.projection.as_ref(), &self.filter, document)?;
                if batch.push(output).is_err() {
                    return Ok(false);
                }
                self.advance(ts);
                self.returned += 1;
                if let Some(limit) = self.limit_remaining.as_mut() {
                    *limit -= 1;
                }
            }
        }
    }
}

/// Fills one batch of a tailable cursor, waiting up to `wait` for new
/// entries when it has none and is `awaitData`. Returns the documents and
/// whether the cursor is finished.
pub async fn tail_batch(
    engine: &Arc<Engine>,
    query: &mut OplogQuery,
    limits: BatchLimits,
    wait: Duration,
) -> Result<(Vec<Document>, bool), CommandError> {
    let await_data = query.await_data;
    super::await_data::fill_or_wait(engine, limits, wait, await_data, |batch| query.fill(engine, batch, None)).await
}

/// Newest-first results (`sort: {$natural: -1}`): reads growing windows of
/// the newest entries at or below the filter's upper bound on `ts` (found
/// in the journal's index, so that entries above it are never read) until
/// enough match, the window holds every such entry, or it reaches below
/// the lower bound. Returns the projected documents after skip and limit,
/// and the number of entries examined.
pub fn read_newest(
    engine: &Engine,
    filter: &Filter,
    bounds: TsBounds,
    projection: Option<&Projection>,
    skip: u64,
    limit: Option<u64>,
    deadline: Option<Instant>,
) -> Result<(VecDeque<Document>, u64), CommandError> {
    let wanted = limit.map(|limit| skip.saturating_add(limit));
    let mut window = wanted.map_or(OPLOG_READ_CHUNK_ENTRIES, |n| {
        (n as usize).clamp(1, OPLOG_READ_CHUNK_ENTRIES)
    });
    loop {
        check_deadline(deadline)?;
        let entries = match bounds.newest_allowed() {
            Some(newest) => engine.oplog_read_newest_at_or_before(newest, window)?,
            None => Vec::new(),
        };
        let whole_oplog = entries.len() < window;
        let mut matched = Vec::new();
        let mut bytes = 0usize;
        let mut reached_lower = false;
        let examined = entries.len() as u64;
        for raw in entries {
            let (ts, document) = entry_document(raw)?;
            if bounds.below(ts) {
                reached_lower = true;
                break;
            }
            if bounds.above(ts) || !filter.matches(&document) {
                continue;
            }
            bytes += document_size(&document);
            if bytes > BLOCKING_SORT_MEMORY_BYTES_MAX {
                return Err(CommandError::new(
                    292,
                    format!("reading the oplog newest first held more than {BLOCKING_SORT_MEMORY_BYTES_MAX} bytes; add a limit or a ts bound"),
                ));
            }
            matched.push(document);
            if wanted.is_some_and(|n| matched.len() as u64 >= n) {
                break;
            }
        }
        let enough = wanted.is_some_and(|n| matched.len() as u64 >= n);
        if enough || whole_oplog || reached_lower {
            let mut output = VecDeque::new();
            for document in matched.into_iter().skip(skip as usize) {
                output.push_back(project(projection, filter, document)?);
            }
            return Ok((output, examined));
        }
        window = window.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn ts(secs: u32, inc: u32) -> bson::Timestamp {
        bson::Timestamp {
            time: secs,
            increment: inc,
        }
    }

    #[test]
    fn bounds_come_from_top_level_and_and() {
        let bounds = TsBounds::from_filter(&doc! {"ts": {"$gt": ts(5, 1), "$lte": ts(9, 0)}, "op": "i"});
        assert_eq!(bounds.lower, Bound::Excluded(Timestamp::new(5, 1)));
        assert_eq!(bounds.upper, Bound::Included(Timestamp::new(9, 0)));
        let nested = TsBounds::from_filter(&doc! {"$and": [{"ts": {"$gte": ts(3, 0)}}, {"ts": {"$gt": ts(4, 0)}}]});
        assert_eq!(nested.lower, Bound::Excluded(Timestamp::new(4, 0)));
        assert_eq!(nested.upper, Bound::Unbounded);
    }

    #[test]
    fn tighter_bounds_win() {
        let bounds = TsBounds::from_filter(
            &doc! {"$and": [{"ts": {"$gte": ts(4, 0)}}, {"ts": {"$gt": ts(4, 0)}}, {"ts": {"$lt": ts(8, 0)}}, {"ts": {"$lte": ts(8, 0)}}]},
        );
        assert_eq!(bounds.lower, Bound::Excluded(Timestamp::new(4, 0)));
        assert_eq!(bounds.upper, Bound::Excluded(Timestamp::new(8, 0)));
        assert!(bounds.below(Timestamp::new(4, 0)));
        assert!(!bounds.below(Timestamp::new(4, 1)));
        assert!(bounds.above(Timestamp::new(8, 0)));
    }

    #[test]
    fn equality_is_both_bounds_and_other_types_are_ignored() {
        let bounds = TsBounds::from_filter(&doc! {"ts": ts(7, 2)});
        assert_eq!(bounds.lower, Bound::Included(Timestamp::new(7, 2)));
        assert_eq!(bounds.upper, Bound::Included(Timestamp::new(7, 2)));
        let none = TsBounds::from_filter(&doc! {"ts": {"$gt": 5}});
        assert_eq!(none.lower, Bound::Unbounded);
    }
}
