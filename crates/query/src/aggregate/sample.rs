//! `$sample: {size: n}`: `n` documents of the input chosen uniformly at
//! random, without repeats, in random order (all of them, shuffled, when
//! the input has fewer). MongoDB sorts by a random key and keeps the top
//! `n`; a reservoir gives the same distribution holding only `n`
//! documents, charged to the stage's memory budget.

use bson::{Bson, Document};

use super::{document_size, error_stream, DocStream, ExecContext, MemoryBudget, Stage};
use crate::compare::{as_number, Number};
use crate::error::QueryError;
use crate::expr::random::random_index;

#[derive(Debug)]
pub(crate) struct SampleStage {
    size: usize,
}

impl SampleStage {
    /// MongoDB 7.0's checks, in its order: an object (28745), each field
    /// `size` (28748 otherwise), a number (28746), not negative after
    /// truncation to a long (28747); `size` present (28749).
    pub(crate) fn parse(spec: &Bson) -> Result<SampleStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(
                28745,
                "the $sample stage specification must be an object",
            ));
        };
        let mut size = None;
        for (name, value) in spec {
            if name != "size" {
                return Err(QueryError::new(
                    28748,
                    format!("unrecognized option to $sample: {name}"),
                ));
            }
            let truncated = match as_number(value) {
                Some(Number::Int(n)) => n,
                // A saturating cast, as MongoDB's numberLong (NaN is 0).
                Some(Number::Float(x)) => x as i64,
                None => return Err(QueryError::new(28746, "size argument to $sample must be a number")),
            };
            if truncated < 0 {
                return Err(QueryError::new(28747, "size argument to $sample must not be negative"));
            }
            size = Some(usize::try_from(truncated).unwrap_or(usize::MAX));
        }
        let size = size.ok_or_else(|| QueryError::new(28749, "$sample stage must specify a size"))?;
        Ok(SampleStage { size })
    }

    fn sample(&self, input: DocStream<'_>, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let mut budget = MemoryBudget::new("$sample", cx.memory_limit_bytes);
        let mut kept: Vec<(usize, Document)> = Vec::new();
        for (seen, item) in input.enumerate() {
            let doc = item?;
            if kept.len() < self.size {
                let size_bytes = document_size(&doc);
                budget.charge(size_bytes)?;
                kept.push((size_bytes, doc));
                continue;
            }
            // Algorithm R: the (seen + 1)th document replaces a kept one
            // with probability size / (seen + 1).
            let slot = random_index(seen + 1);
            if slot < self.size {
                let size_bytes = document_size(&doc);
                budget.charge(size_bytes)?;
                budget.release(kept[slot].0);
                kept[slot] = (size_bytes, doc);
            }
        }
        // The reservoir keeps arrival order in part: shuffled (Fisher-Yates).
        for last in (1..kept.len()).rev() {
            kept.swap(last, random_index(last + 1));
        }
        Ok(kept.into_iter().map(|(_, doc)| doc).collect())
    }
}

impl Stage for SampleStage {
    /// Passes documents through unchanged.
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.sample(input, cx) {
            Ok(docs) => Box::new(docs.into_iter().map(Ok)),
            Err(error) => error_stream(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_checked_as_mongodb_does() {
        let code = |spec: Bson| SampleStage::parse(&spec).unwrap_err().code;
        assert_eq!(code(Bson::Int32(1)), 28745);
        assert_eq!(code(bson::bson!({"size": 1, "x": 1})), 28748);
        assert_eq!(code(bson::bson!({"size": "1"})), 28746);
        assert_eq!(code(bson::bson!({"size": -1})), 28747);
        assert_eq!(code(bson::bson!({})), 28749);
        assert_eq!(SampleStage::parse(&bson::bson!({"size": -0.5})).unwrap().size, 0);
        assert_eq!(SampleStage::parse(&bson::bson!({"size": 2.9})).unwrap().size, 2);
    }
}
