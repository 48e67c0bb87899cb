//! `$rand`: a double drawn uniformly from [0, 1) each time it is evaluated
//! (MongoDB 4.4+). `$sampleRate` in a filter and the `$sample` stage are
//! built on it.

use bson::Bson;

use super::{Args, Context, OpSpec, Value};
use crate::error::QueryError;

pub(super) const OPERATORS: &[OpSpec] = &[OpSpec {
    name: "$rand",
    style: super::ArgStyle::Custom(parse_rand),
    eval: eval_rand,
}];

/// `{}` or `[]`: MongoDB reads the operand as an object (an array is one)
/// and refuses any argument in it; a scalar fails as not an object.
fn parse_rand(_: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    match operand {
        Bson::Document(d) if d.is_empty() => Ok(Args::positional(Vec::new())),
        Bson::Array(items) if items.is_empty() => Ok(Args::positional(Vec::new())),
        Bson::Document(_) | Bson::Array(_) => {
            Err(QueryError::new(3040501, "$rand does not currently accept arguments"))
        }
        _ => Err(QueryError::new(10065, "invalid parameter: expected an object ($rand)")),
    }
}

fn eval_rand(_: &'static str, _: &Args, _: &Context) -> Result<Value, QueryError> {
    Ok(Some(Bson::Double(random_unit())))
}

/// A double in [0, 1) from the thread's generator (seeded from the
/// operating system's randomness).
pub(crate) fn random_unit() -> f64 {
    fastrand::f64()
}

/// An index in [0, bound), for `$sample`.
pub(crate) fn random_index(bound: usize) -> usize {
    assert!(bound > 0, "random_index of an empty range");
    fastrand::usize(..bound)
}
