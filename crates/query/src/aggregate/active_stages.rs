//! How many pipeline stages are running at once on this thread, held
//! within `ACTIVE_STAGES_MAX` (see there for why).
//!
//! A pipeline runs synchronously on one thread from its first document to
//! its last, and a sub-pipeline or a view read runs while its parent's
//! stage is pulling a document; so a per-thread count of the stages of the
//! chains being pulled is exactly the nesting on this thread's stack.

use std::cell::Cell;

use super::{DocStream, ACTIVE_STAGES_MAX, MAX_SUB_PIPELINE_DEPTH_EXCEEDED};
use crate::error::QueryError;

thread_local! {
    /// The stages of every chain this thread is pulling from right now.
    static ACTIVE_STAGES: Cell<usize> = const { Cell::new(0) };
}

/// A pipeline's chain of stages, counted while it is being pulled.
pub(crate) struct Counted<'a> {
    inner: DocStream<'a>,
    /// The chain's stages; an empty pipeline still counts one, for the
    /// frames of the stage that runs it.
    stages: usize,
    failed: bool,
}

impl<'a> Counted<'a> {
    pub(crate) fn new(inner: DocStream<'a>, stages: usize) -> Counted<'a> {
        Counted { inner, stages: stages.max(1), failed: false }
    }
}

impl Iterator for Counted<'_> {
    type Item = Result<bson::Document, QueryError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let Some(_pulling) = Pulling::enter(self.stages) else {
            self.failed = true;
            return Some(Err(QueryError::new(
                MAX_SUB_PIPELINE_DEPTH_EXCEEDED,
                format!(
                    "More than {ACTIVE_STAGES_MAX} pipeline stages would run nested at once (counting the stages of sub-pipelines and views)"
                ),
            )));
        };
        self.inner.next()
    }
}

/// Holds `stages` in the count while alive; releasing them on drop keeps
/// the count right when a stage panics (the server catches the panic and
/// the thread goes on serving).
struct Pulling {
    stages: usize,
}

impl Pulling {
    fn enter(stages: usize) -> Option<Pulling> {
        ACTIVE_STAGES.with(|active| {
            let total = active.get().checked_add(stages).filter(|&total| total <= ACTIVE_STAGES_MAX)?;
            active.set(total);
            Some(Pulling { stages })
        })
    }
}

impl Drop for Pulling {
    fn drop(&mut self) {
        ACTIVE_STAGES.with(|active| {
            assert!(active.get() >= self.stages, "active stages released more than once");
            active.set(active.get() - self.stages);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> DocStream<'static> {
        Box::new(std::iter::empty())
    }

    #[test]
    fn the_count_is_held_only_while_pulling() {
        let mut outer = Counted::new(empty(), ACTIVE_STAGES_MAX);
        assert!(outer.next().is_none());
        // The outer chain is not being pulled: a full-size one fits again.
        let mut again = Counted::new(empty(), ACTIVE_STAGES_MAX);
        assert!(again.next().is_none());
        ACTIVE_STAGES.with(|active| assert_eq!(active.get(), 0));
    }

    #[test]
    fn nested_chains_add_up() {
        let inner = Counted::new(empty(), 2);
        let mut outer = Counted::new(Box::new(inner), ACTIVE_STAGES_MAX - 1);
        let error = outer.next().expect("the inner chain reports").unwrap_err();
        assert_eq!(error.code, MAX_SUB_PIPELINE_DEPTH_EXCEEDED);
        assert!(outer.next().is_none(), "a failed chain ends");
        ACTIVE_STAGES.with(|active| assert_eq!(active.get(), 0));
    }
}
