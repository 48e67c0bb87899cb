//! `$sort`: a blocking stage. Followed directly by `$limit n`, it keeps
//! only the best `n` documents seen so far (a top-k sort), so its memory
//! is bounded by the limit rather than by the input.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::{document_size, error_stream, DocStream, ExecContext, MemoryBudget, Stage};
use crate::error::QueryError;
use crate::sort::SortSpec;

#[derive(Debug)]
pub(crate) struct SortStage {
    spec: SortSpec,
    limit: Option<usize>,
}

/// A document with its precomputed sort keys and input position (the
/// position makes the sort stable: ties keep their input order).
struct Keyed {
    keys: Vec<Bson>,
    position: usize,
    size_bytes: usize,
    doc: Document,
}

impl SortStage {
    pub(crate) fn parse(spec: &Bson, limit: Option<usize>) -> Result<SortStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(15973, "the $sort key specification must be an object"));
        };
        let spec = SortSpec::parse(spec)?;
        if spec.is_empty() {
            return Err(QueryError::new(15976, "$sort stage must have at least one sort key"));
        }
        Ok(SortStage { spec, limit })
    }

    fn order(&self, a: &Keyed, b: &Keyed) -> Ordering {
        self.spec.compare_keys(&a.keys, &b.keys).then(a.position.cmp(&b.position))
    }

    fn sort_all(&self, input: DocStream<'_>, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let mut budget = MemoryBudget::new("$sort", cx.memory_limit_bytes);
        let mut kept: Vec<Keyed> = Vec::new();
        for (position, item) in input.enumerate() {
            let doc = item?;
            let size_bytes = document_size(&doc);
            budget.add(size_bytes);
            kept.push(Keyed { keys: self.spec.keys(&doc), position, size_bytes, doc });
            if let Some(limit) = self.limit {
                // Trim to the best `limit` once twice as many are held,
                // which keeps the work O(n log k) overall, or once they
                // pass the memory limit: a few large documents (8 of 15 MB
                // under `$limit: 1`) failed with 292 before any trim.
                if kept.len() >= limit.saturating_mul(2).max(64) || budget.is_over() {
                    self.truncate(&mut kept, limit, &mut budget);
                }
            }
            budget.check()?;
        }
        kept.sort_by(|a, b| self.order(a, b));
        if let Some(limit) = self.limit {
            kept.truncate(limit);
        }
        Ok(kept.into_iter().map(|k| k.doc).collect())
    }

    fn truncate(&self, kept: &mut Vec<Keyed>, limit: usize, budget: &mut MemoryBudget) {
        kept.sort_by(|a, b| self.order(a, b));
        for dropped in kept.drain(limit.min(kept.len())..) {
            budget.release(dropped.size_bytes);
        }
    }
}

impl Stage for SortStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        self.spec = std::mem::take(&mut self.spec).with_collation(Some(collation.clone()));
    }

    /// Passes documents through unchanged.
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.sort_all(input, cx) {
            Ok(docs) => Box::new(docs.into_iter().map(Ok)),
            Err(error) => error_stream(error),
        }
    }
}
