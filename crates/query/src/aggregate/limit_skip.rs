//! `$limit` and `$skip`.

use bson::Bson;

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;

/// A whole, non-negative number of a `$limit`/`$skip` argument.
fn whole_number(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        Bson::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e18 => Some(*v as i64),
        _ => None,
    }
}

/// Parses a `$limit` argument: a positive whole number.
pub(crate) fn parse_limit(spec: &Bson) -> Result<usize, QueryError> {
    match whole_number(spec) {
        Some(n) if n > 0 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(_) => Err(QueryError::new(15958, "the limit must be positive")),
        None => Err(QueryError::new(15957, "the limit must be specified as a number")),
    }
}

#[derive(Debug)]
pub(crate) struct LimitStage {
    limit: usize,
}

impl LimitStage {
    pub(crate) fn new(limit: usize) -> LimitStage {
        LimitStage { limit }
    }
}

impl Stage for LimitStage {
    /// Passes documents through unchanged.
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, _: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.take(self.limit))
    }
}

#[derive(Debug)]
pub(crate) struct SkipStage {
    skip: usize,
}

impl SkipStage {
    pub(crate) fn parse(spec: &Bson) -> Result<SkipStage, QueryError> {
        match whole_number(spec) {
            Some(n) if n >= 0 => Ok(SkipStage { skip: usize::try_from(n).unwrap_or(usize::MAX) }),
            Some(n) => Err(QueryError::new(15956, format!("invalid argument to $skip stage: Expected a non-negative number in: $skip: {n}"))),
            None => Err(QueryError::new(15972, "Argument to $skip must be a number")),
        }
    }
}

impl Stage for SkipStage {
    /// Passes documents through unchanged.
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, _: &'a ExecContext<'a>) -> DocStream<'a> {
        let mut remaining = self.skip;
        // Errors are never skipped: they must reach the caller.
        Box::new(input.filter(move |item| {
            if item.is_err() || remaining == 0 {
                return true;
            }
            remaining -= 1;
            false
        }))
    }
}
