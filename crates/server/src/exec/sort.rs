//! The in-memory ("blocking") sort: every candidate is held in memory under
//! a named byte budget; with a limit only the best `skip + limit` documents
//! are kept (a top-k sort), as MongoDB does.

use std::cmp::Ordering;

use bson::Document;

use super::size::document_size;
use crate::error::CommandError;

/// QueryExceededMemoryLimitNoDiskUseAllowed (292).
pub const SORT_MEMORY_LIMIT_CODE: i32 = 292;

/// Collects documents and sorts them with `compare`, failing once the
/// documents held pass `memory_bytes_max`.
pub struct InMemorySort<F> {
    compare: F,
    /// Keep at most this many documents (`skip + limit`), if bounded.
    keep_max: Option<usize>,
    memory_bytes_max: usize,
    allow_disk_use: bool,
    documents: Vec<(Document, usize)>,
    bytes: usize,
}

impl<F: Fn(&Document, &Document) -> Ordering> InMemorySort<F> {
    pub fn new(compare: F, keep_max: Option<usize>, memory_bytes_max: usize, allow_disk_use: bool) -> Self {
        InMemorySort {
            compare,
            keep_max,
            memory_bytes_max,
            allow_disk_use,
            documents: Vec::new(),
            bytes: 0,
        }
    }

    /// Adds one candidate. Equal keys keep their arrival order (the sort is
    /// stable), so a tie is broken by the scan order, as in MongoDB.
    pub fn push(&mut self, document: Document) -> Result<(), CommandError> {
        if self.keep_max == Some(0) {
            return Ok(());
        }
        // Insert after every element that is <= the new one: stable order.
        let position = self
            .documents
            .partition_point(|(held, _)| (self.compare)(held, &document) != Ordering::Greater);
        if let Some(keep) = self.keep_max {
            if position >= keep {
                return Ok(());
            }
        }
        let size = document_size(&document);
        self.documents.insert(position, (document, size));
        self.bytes += size;
        if let Some(keep) = self.keep_max {
            while self.documents.len() > keep {
                let (_, dropped) = self.documents.pop().expect("len > keep >= 0");
                self.bytes -= dropped;
            }
        }
        if self.bytes > self.memory_bytes_max {
            return Err(self.memory_error());
        }
        Ok(())
    }

    fn memory_error(&self) -> CommandError {
        if self.allow_disk_use {
            CommandError::new(
                SORT_MEMORY_LIMIT_CODE,
                format!(
                    "Sort exceeded memory limit of {} bytes; Slipstream has no external sort, so allowDiskUse cannot raise it further",
                    self.memory_bytes_max
                ),
            )
        } else {
            CommandError::new(
                SORT_MEMORY_LIMIT_CODE,
                format!(
                    "Sort exceeded memory limit of {} bytes, but did not opt in to external sorting.",
                    self.memory_bytes_max
                ),
            )
        }
    }

    /// The documents in sorted order.
    pub fn finish(self) -> Vec<Document> {
        self.documents.into_iter().map(|(document, _)| document).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn by_a(x: &Document, y: &Document) -> Ordering {
        x.get_i32("a").unwrap().cmp(&y.get_i32("a").unwrap())
    }

    #[test]
    fn sorts_stably() {
        let mut sort = InMemorySort::new(by_a, None, 1 << 20, false);
        for (a, tag) in [(3, "x"), (1, "y"), (3, "z"), (2, "w"), (1, "v")] {
            sort.push(doc! {"a": a, "tag": tag}).unwrap();
        }
        let tags: Vec<String> = sort
            .finish()
            .iter()
            .map(|d| d.get_str("tag").unwrap().to_string())
            .collect();
        assert_eq!(tags, ["y", "v", "w", "x", "z"]);
    }

    #[test]
    fn top_k_keeps_only_the_best() {
        let mut sort = InMemorySort::new(by_a, Some(2), 1 << 20, false);
        for a in [5, 3, 9, 1, 7] {
            sort.push(doc! {"a": a}).unwrap();
        }
        let values: Vec<i32> = sort.finish().iter().map(|d| d.get_i32("a").unwrap()).collect();
        assert_eq!(values, [1, 3]);
    }

    #[test]
    fn memory_limit_is_enforced_with_code_292() {
        let mut sort = InMemorySort::new(by_a, None, 100, false);
        let mut result = Ok(());
        for a in 0..20 {
            result = sort.push(doc! {"a": a, "pad": "0123456789"});
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result.unwrap_err().code, 292);
    }

    #[test]
    fn top_k_stays_within_memory_when_only_k_fit() {
        let mut sort = InMemorySort::new(by_a, Some(1), 100, false);
        for a in 0..1000 {
            sort.push(doc! {"a": a, "pad": "0123456789"}).unwrap();
        }
        assert_eq!(sort.finish().len(), 1);
    }
}
