//! What a cursor keeps between batches, and how the next batch is made
//! from it: a streaming query resumes from its plan position on a fresh
//! reader, buffered results are handed out, and an oplog cursor reads (and,
//! when tailable with `awaitData`, waits for) new entries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bson::Document;
use slipstream_storage::{Engine, ReadAt, Reader, StorageError};

use super::batch::{Batch, BatchLimits};
use super::capped::CappedTail;
use super::oplog::{tail_batch, OplogQuery};
use super::query::{BufferedResults, StreamingQuery};
use super::scan::ScanStats;
use crate::error::CommandError;

/// A cursor's execution state.
pub enum CursorBody {
    /// Results come from the plan's scan, resumed at its position.
    Streaming {
        query: StreamingQuery,
        read_at: ReadAt,
        /// A `majority` read: a later batch whose point a checkpoint passed
        /// reads at the newer commit point (see `batch_reader`).
        follows_commit_point: bool,
    },
    /// Results were computed up front (in-memory sort, aggregation).
    Buffered(BufferedResults),
    /// `local.oplog.rs` in natural order, possibly tailable.
    Oplog(OplogQuery),
    /// A tailable cursor on a capped collection.
    Capped(CappedTail),
}

/// How long a batch may take: the deadline of `maxTimeMS` for ordinary
/// cursors; for a tailable `awaitData` cursor, how long to wait for data.
#[derive(Clone, Copy, Debug)]
pub struct BatchTiming {
    pub deadline: Option<Instant>,
    pub await_data_wait: Duration,
}

impl CursorBody {
    /// A tailable cursor stays open when it runs out of results.
    pub fn is_tailable(&self) -> bool {
        matches!(self, CursorBody::Oplog(query) if query.is_tailable()) || matches!(self, CursorBody::Capped(_))
    }

    /// A tailable cursor whose `getMore` waits for new data (`awaitData`):
    /// the only kind that takes a `maxTimeMS` on `getMore`.
    pub fn is_await_data(&self) -> bool {
        matches!(self, CursorBody::Oplog(query) if query.is_tailable() && query.is_await_data())
            || matches!(self, CursorBody::Capped(tail) if tail.is_await_data())
    }

    /// The work done so far, for `explain`.
    pub fn stats(&self) -> ScanStats {
        match self {
            CursorBody::Streaming { query, .. } => query.stats(),
            CursorBody::Buffered(results) => results.stats,
            CursorBody::Oplog(query) => ScanStats {
                keys_examined: 0,
                docs_examined: query.examined,
            },
            CursorBody::Capped(tail) => ScanStats {
                keys_examined: 0,
                docs_examined: tail.examined,
            },
        }
    }

    /// Makes the next batch; returns its documents and whether the cursor
    /// is finished (to be closed, reported with id 0).
    pub async fn next_batch(
        &mut self,
        engine: &Arc<Engine>,
        limits: BatchLimits,
        timing: BatchTiming,
    ) -> Result<(Vec<Document>, bool), CommandError> {
        self.next_batch_on(engine, None, limits, timing).await
    }

    /// `next_batch`, reading a streaming query through `reader` when given
    /// (the first batch reuses the reader its plan was made with).
    pub async fn next_batch_on(
        &mut self,
        engine: &Arc<Engine>,
        reader: Option<Reader>,
        limits: BatchLimits,
        timing: BatchTiming,
    ) -> Result<(Vec<Document>, bool), CommandError> {
        match self {
            CursorBody::Streaming {
                query,
                read_at,
                follows_commit_point,
            } => {
                let reader = match reader {
                    Some(reader) => reader,
                    None => batch_reader(engine, read_at, *follows_commit_point)?,
                };
                let mut batch = Batch::new(limits);
                let finished = query.fill(&reader, &mut batch, timing.deadline)?;
                Ok((batch.into_documents(), finished))
            }
            CursorBody::Buffered(results) => {
                let mut batch = Batch::new(limits);
                let finished = results.fill(&mut batch);
                Ok((batch.into_documents(), finished))
            }
            CursorBody::Oplog(query) if query.is_tailable() => {
                query.check_position(engine.stats().oplog_first)?;
                tail_batch(engine, query, limits, timing.await_data_wait).await
            }
            CursorBody::Capped(tail) => {
                super::capped::tail_batch(engine, tail, limits, timing.await_data_wait).await
            }
            CursorBody::Oplog(query) => {
                let mut batch = Batch::new(limits);
                let finished = query.fill(engine, &mut batch, timing.deadline)?;
                Ok((batch.into_documents(), finished))
            }
        }
    }
}

/// The reader of a streaming cursor's later batch. A `majority` cursor
/// whose read point a checkpoint passed reads on at the stable timestamp
/// (the commit point, which no checkpoint passes) and keeps that point:
/// MongoDB reads each getMore of a majority read at the committed snapshot
/// current then. Any other cursor keeps its point or fails.
fn batch_reader(
    engine: &Arc<Engine>,
    read_at: &mut ReadAt,
    follows_commit_point: bool,
) -> Result<Reader, StorageError> {
    match engine.reader(*read_at) {
        Err(StorageError::SnapshotTooOld(_)) if follows_commit_point => {
            let Some(stable) = engine.stable_timestamp() else {
                return engine.reader(*read_at);
            };
            *read_at = ReadAt::At(stable);
            engine.reader(*read_at)
        }
        other => other,
    }
}
