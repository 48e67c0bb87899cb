//! `$percentile` and `$median` as expressions over an array (MongoDB 7.0);
//! the arguments and the computation are `crate::quantile`'s.

use bson::Bson;

use super::{Args, Context, Expr, OpSpec, Value};
use crate::error::QueryError;
use crate::quantile::{expression_inputs, result, QuantileSpec};

pub(super) const OPERATORS: &[OpSpec] = &[
    OpSpec {
        name: "$percentile",
        style: super::ArgStyle::Custom(parse_quantile),
        eval: eval_quantile,
    },
    OpSpec {
        name: "$median",
        style: super::ArgStyle::Custom(parse_quantile),
        eval: eval_quantile,
    },
];

/// MongoDB's codes for an argument that is not an object, in expressions.
fn not_object_code(name: &str) -> i32 {
    if name == "$median" {
        7436201
    } else {
        7436200
    }
}

/// Two arguments: the input, and the percentiles as a literal array.
fn parse_quantile(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    let parsed = QuantileSpec::parse(spec.name, operand, not_object_code(spec.name))?;
    let ps = Bson::Array(parsed.ps().iter().map(|p| Bson::Double(*p)).collect());
    Ok(Args::positional(vec![parsed.input, Expr::literal(ps)]))
}

fn eval_quantile(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let mut values = expression_inputs(args.eval(0, cx)?);
    let ps: Vec<f64> = match args.eval(1, cx)? {
        Some(Bson::Array(ps)) => ps.iter().filter_map(crate::quantile::numeric).collect(),
        _ => unreachable!("parse_quantile stores the percentiles as an array"),
    };
    Ok(Some(result(&ps, name == "$median", &mut values)))
}
