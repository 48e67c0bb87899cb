//! `$group` accumulators. Each group holds one `AccumulatorState` per
//! output field; `add` folds in one evaluated value (`None` = missing),
//! `finish` yields the field's value.

use bson::{Bson, Document};

use super::approximate_size;
use crate::collation::{compare_with, Collation};
use crate::error::{codes, QueryError};
use super::select_accumulators::{SelectKind, SelectSpec, SelectState};
use crate::expr::{Expr, Variables};
use crate::quantile::QuantileSpec;

/// Which accumulator a `$group` field uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AccumulatorKind {
    Sum,
    Avg,
    Min,
    Max,
    First,
    Last,
    Push,
    AddToSet,
    MergeObjects,
    StdDevPop,
    StdDevSamp,
    /// `$firstN`, `$top`, ... (see `select_accumulators`).
    Select,
    /// `$percentile`, `$median` (see `crate::quantile`).
    Quantile,
}

/// Accumulators MongoDB has that Slipstream answers with
/// CommandNotSupported rather than "unknown".
const UNSUPPORTED: &[&str] = &["$accumulator"];

/// One `$group` output field: `{field: {$op: <expr>}}`.
#[derive(Clone, Debug)]
pub(crate) struct AccumulatorSpec {
    pub field: String,
    pub kind: AccumulatorKind,
    pub expr: Expr,
    /// The options of a `Select` accumulator.
    pub select: Option<SelectSpec>,
    /// The percentiles of a `Quantile` accumulator.
    pub quantile: Option<QuantileSpec>,
}

impl AccumulatorSpec {
    pub(crate) fn parse(field: &str, spec: &Bson) -> Result<AccumulatorSpec, QueryError> {
        let Bson::Document(d) = spec else {
            return Err(QueryError::new(40234, format!("The field '{field}' must be an accumulator object")));
        };
        if d.len() != 1 {
            return Err(QueryError::new(40238, format!("The field '{field}' must specify one accumulator")));
        }
        let (name, argument) = d.iter().next().expect("one field checked above");
        let kind = match name.as_str() {
            "$sum" => AccumulatorKind::Sum,
            "$avg" => AccumulatorKind::Avg,
            "$min" => AccumulatorKind::Min,
            "$max" => AccumulatorKind::Max,
            "$first" => AccumulatorKind::First,
            "$last" => AccumulatorKind::Last,
            "$push" => AccumulatorKind::Push,
            "$addToSet" => AccumulatorKind::AddToSet,
            "$mergeObjects" => AccumulatorKind::MergeObjects,
            "$stdDevPop" => AccumulatorKind::StdDevPop,
            "$stdDevSamp" => AccumulatorKind::StdDevSamp,
            "$count" => {
                if !matches!(argument, Bson::Document(a) if a.is_empty()) {
                    return Err(QueryError::new(codes::TYPE_MISMATCH, "$count takes no arguments, i.e. $count:{}"));
                }
                return Ok(AccumulatorSpec { field: field.to_string(), kind: AccumulatorKind::Sum, expr: Expr::literal(Bson::Int32(1)), select: None, quantile: None });
            }
            select if SelectKind::from_name(select).is_some() => {
                let kind = SelectKind::from_name(select).expect("checked by the guard");
                return Ok(AccumulatorSpec {
                    field: field.to_string(),
                    kind: AccumulatorKind::Select,
                    expr: Expr::literal(Bson::Null),
                    select: Some(SelectSpec::parse(select, kind, argument)?),
                    quantile: None,
                });
            }
            "$percentile" | "$median" => {
                let code = if name == "$median" { 7436100 } else { 7429703 };
                let quantile = QuantileSpec::parse(name, argument, code)?;
                return Ok(AccumulatorSpec {
                    field: field.to_string(),
                    kind: AccumulatorKind::Quantile,
                    expr: quantile.input.clone(),
                    select: None,
                    quantile: Some(quantile),
                });
            }
            unsupported if UNSUPPORTED.contains(&unsupported) => {
                return Err(QueryError::new(codes::COMMAND_NOT_SUPPORTED, format!("the {unsupported} accumulator is not supported by Slipstream")))
            }
            unknown => return Err(QueryError::new(15952, format!("unknown group operator '{unknown}'"))),
        };
        if let Bson::Array(items) = argument {
            if items.len() != 1 {
                return Err(QueryError::new(40237, format!("The {name} accumulator is a unary operator")));
            }
        }
        let argument = match argument {
            Bson::Array(items) => &items[0],
            other => other,
        };
        Ok(AccumulatorSpec { field: field.to_string(), kind, expr: Expr::parse(argument)?, select: None, quantile: None })
    }
}

/// The running state of one accumulator in one group.
#[derive(Clone, Debug)]
pub(crate) enum AccumulatorState {
    Sum(Sum),
    Avg { sum: Sum, count: u64 },
    Extreme { kind: AccumulatorKind, best: Option<Bson> },
    First(Option<Bson>, bool),
    Last(Option<Bson>),
    Values(Vec<Bson>),
    Merged(Document),
    /// Welford's running mean and sum of squared deviations.
    StdDev { sample: bool, count: u64, mean: f64, m2: f64 },
    Select(SelectState),
    /// The numeric inputs of `$percentile` / `$median`.
    Quantile(Vec<f64>),
}

/// A running numeric sum with MongoDB's widening: int, then long, then
/// double on overflow or when a double is added.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sum {
    Int(i64),
    Long(i64),
    Double(f64),
}

impl Sum {
    fn add(self, value: &Bson) -> Sum {
        let (n, long, double) = match value {
            Bson::Int32(v) => (i64::from(*v), false, None),
            Bson::Int64(v) => (*v, true, None),
            Bson::Double(v) => (0, false, Some(*v)),
            Bson::Decimal128(d) => (0, false, Some(crate::compare::decimal_to_f64(d))),
            _ => return self,
        };
        match (self, double) {
            (Sum::Double(total), Some(d)) => Sum::Double(total + d),
            (Sum::Double(total), None) => Sum::Double(total + n as f64),
            (other, Some(d)) => Sum::Double(other.as_f64() + d),
            (Sum::Int(total), None) | (Sum::Long(total), None) => match total.checked_add(n) {
                Some(result) if long || matches!(self, Sum::Long(_)) => Sum::Long(result),
                Some(result) => Sum::Int(result),
                None => Sum::Double(total as f64 + n as f64),
            },
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Sum::Int(v) | Sum::Long(v) => v as f64,
            Sum::Double(v) => v,
        }
    }

    fn to_bson(self) -> Bson {
        match self {
            Sum::Int(v) => match i32::try_from(v) {
                Ok(small) => Bson::Int32(small),
                Err(_) => Bson::Int64(v),
            },
            Sum::Long(v) => Bson::Int64(v),
            Sum::Double(v) => Bson::Double(v),
        }
    }
}

fn is_number(value: &Bson) -> bool {
    matches!(value, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
}

impl AccumulatorState {
    pub(crate) fn new(kind: AccumulatorKind) -> AccumulatorState {
        match kind {
            AccumulatorKind::Sum => AccumulatorState::Sum(Sum::Int(0)),
            AccumulatorKind::Avg => AccumulatorState::Avg { sum: Sum::Int(0), count: 0 },
            AccumulatorKind::Min | AccumulatorKind::Max => AccumulatorState::Extreme { kind, best: None },
            AccumulatorKind::First => AccumulatorState::First(None, false),
            AccumulatorKind::Last => AccumulatorState::Last(None),
            AccumulatorKind::Push | AccumulatorKind::AddToSet => AccumulatorState::Values(Vec::new()),
            AccumulatorKind::MergeObjects => AccumulatorState::Merged(Document::new()),
            AccumulatorKind::StdDevPop | AccumulatorKind::StdDevSamp => AccumulatorState::StdDev {
                sample: kind == AccumulatorKind::StdDevSamp,
                count: 0,
                mean: 0.0,
                m2: 0.0,
            },
            AccumulatorKind::Select => AccumulatorState::Select(SelectState::default()),
            AccumulatorKind::Quantile => AccumulatorState::Quantile(Vec::new()),
        }
    }

    /// Folds in one input document: evaluates what the accumulator needs
    /// and returns how many bytes the state grew by.
    pub(crate) fn add_document(&mut self, spec: &AccumulatorSpec, doc: &Document, vars: &Variables) -> Result<usize, QueryError> {
        if let (AccumulatorState::Select(state), Some(select)) = (&mut *self, &spec.select) {
            return state.add(select, doc, vars);
        }
        let value = spec.expr.evaluate_optional(doc, vars)?;
        self.add(spec.kind, value, vars.collation())
    }

    /// Folds in one value and returns how many bytes the state grew by
    /// (for the memory budget). `$min`, `$max` and `$addToSet` compare
    /// strings under `collation` (the operation's; `None`: simple).
    pub(crate) fn add(
        &mut self,
        kind: AccumulatorKind,
        value: Option<Bson>,
        collation: Option<&Collation>,
    ) -> Result<usize, QueryError> {
        let numeric = matches!(self, AccumulatorState::Sum(_) | AccumulatorState::Avg { .. } | AccumulatorState::StdDev { .. });
        if numeric && matches!(value, Some(Bson::Decimal128(_))) {
            // Decimal arithmetic is not implemented; a double would be a
            // silently different result.
            return Err(QueryError::new(
                codes::COMMAND_NOT_SUPPORTED,
                format!("the {} accumulator does not support Decimal128 values yet", match kind {
                    AccumulatorKind::Sum => "$sum",
                    AccumulatorKind::Avg => "$avg",
                    _ => "$stdDev",
                }),
            ));
        }
        match self {
            AccumulatorState::Select(_) => unreachable!("add_document hands select accumulators whole documents"),
            AccumulatorState::Quantile(values) => {
                if let Some(x) = value.as_ref().and_then(crate::quantile::numeric) {
                    values.push(x);
                    return Ok(std::mem::size_of::<f64>());
                }
            }
            AccumulatorState::Sum(sum) => {
                // $sum ignores non-numeric values, including arrays.
                if let Some(v) = &value {
                    *sum = sum.add(v);
                }
            }
            AccumulatorState::Avg { sum, count } => {
                if let Some(v) = value.as_ref().filter(|v| is_number(v)) {
                    *sum = sum.add(v);
                    *count += 1;
                }
            }
            AccumulatorState::Extreme { kind, best } => {
                // $min/$max ignore null and missing values.
                let Some(v) = value.filter(|v| !matches!(v, Bson::Null | Bson::Undefined)) else { return Ok(0) };
                let replace = match best {
                    None => true,
                    Some(current) => {
                        let order = compare_with(collation, &v, current);
                        if *kind == AccumulatorKind::Min { order.is_lt() } else { order.is_gt() }
                    }
                };
                if replace {
                    let grown = approximate_size(&v);
                    *best = Some(v);
                    return Ok(grown);
                }
            }
            AccumulatorState::First(first, seen) => {
                if !*seen {
                    *seen = true;
                    let grown = value.as_ref().map_or(0, approximate_size);
                    *first = value;
                    return Ok(grown);
                }
            }
            AccumulatorState::Last(last) => {
                let grown = value.as_ref().map_or(0, approximate_size);
                *last = value;
                return Ok(grown);
            }
            AccumulatorState::Values(values) => {
                let Some(v) = value else { return Ok(0) };
                let present = |existing: &Bson| compare_with(collation, existing, &v).is_eq();
                if kind == AccumulatorKind::AddToSet && values.iter().any(present) {
                    return Ok(0);
                }
                let grown = approximate_size(&v);
                values.push(v);
                return Ok(grown);
            }
            AccumulatorState::Merged(merged) => {
                crate::expr::merge_objects_into(merged, &value)?;
                return Ok(value.as_ref().map_or(0, approximate_size));
            }
            AccumulatorState::StdDev { count, mean, m2, .. } => {
                if let Some(x) = value.as_ref().and_then(crate::compare::as_number) {
                    let x = match x {
                        crate::compare::Number::Int(i) => i as f64,
                        crate::compare::Number::Float(f) => f,
                    };
                    *count += 1;
                    let delta = x - *mean;
                    *mean += delta / *count as f64;
                    *m2 += delta * (x - *mean);
                }
            }
        }
        Ok(0)
    }

    pub(crate) fn finish(self, spec: &AccumulatorSpec) -> Bson {
        match self {
            AccumulatorState::Select(state) => state.finish(spec.select.as_ref().expect("select state has a select spec")),
            AccumulatorState::Quantile(mut values) => {
                spec.quantile.as_ref().expect("quantile state has a quantile spec").finish(&mut values)
            }
            AccumulatorState::Sum(sum) => sum.to_bson(),
            AccumulatorState::Avg { count: 0, .. } => Bson::Null,
            AccumulatorState::Avg { sum, count } => Bson::Double(sum.as_f64() / count as f64),
            AccumulatorState::Extreme { best, .. } => best.unwrap_or(Bson::Null),
            AccumulatorState::First(value, _) | AccumulatorState::Last(value) => value.unwrap_or(Bson::Null),
            AccumulatorState::Values(values) => Bson::Array(values),
            AccumulatorState::Merged(doc) => Bson::Document(doc),
            AccumulatorState::StdDev { sample, count, m2, .. } => {
                let divisor = if sample { count.saturating_sub(1) } else { count };
                if divisor == 0 {
                    Bson::Null
                } else {
                    Bson::Double((m2 / divisor as f64).sqrt())
                }
            }
        }
    }
}
