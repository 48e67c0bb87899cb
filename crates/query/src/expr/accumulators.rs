//! The expression forms of `$sum`, `$avg`, `$min`, `$max`, `$stdDevPop`
//! and `$stdDevSamp`: over the elements of a single array argument, or
//! over several arguments. Non-numeric values are ignored by the numeric
//! ones; null and missing values are ignored by `$min`/`$max`.

use bson::Bson;

use super::arithmetic::{add, Num};
use super::{ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$sum", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_sum },
    OpSpec { name: "$avg", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_avg },
    OpSpec { name: "$min", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_extreme },
    OpSpec { name: "$max", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_extreme },
    OpSpec { name: "$stdDevPop", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_std_dev },
    OpSpec { name: "$stdDevSamp", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_std_dev },
];

/// The values an accumulator expression folds: the elements of a lone
/// array argument, else the arguments themselves.
fn inputs(args: &Args, cx: &Context) -> Result<Vec<Value>, QueryError> {
    let mut values = args.eval_all(cx)?;
    if values.len() == 1 && matches!(values[0], Some(Bson::Array(_))) {
        let Some(Some(Bson::Array(items))) = values.pop() else { unreachable!("matched above") };
        return Ok(items.into_iter().map(Some).collect());
    }
    Ok(values)
}

/// The numeric values among `values`; Decimal128 is refused (its
/// arithmetic is not implemented, and skipping it would be wrong).
fn numbers(name: &str, values: &[Value]) -> Result<Vec<Num>, QueryError> {
    if values.iter().flatten().any(|v| matches!(v, Bson::Decimal128(_))) {
        return Err(QueryError::new(
            crate::error::codes::COMMAND_NOT_SUPPORTED,
            format!("{name} does not support Decimal128 values yet"),
        ));
    }
    Ok(values.iter().flatten().filter_map(Num::from_bson).collect())
}

fn eval_sum(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let total = numbers(name, &inputs(args, cx)?)?.into_iter().fold(Num::Int(0), add);
    Ok(Some(total.to_bson()))
}

fn eval_avg(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = numbers(name, &inputs(args, cx)?)?;
    if values.is_empty() {
        return Ok(Some(Bson::Null));
    }
    let total: f64 = values.iter().map(|n| n.as_f64()).sum();
    Ok(Some(Bson::Double(total / values.len() as f64)))
}

fn eval_extreme(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = inputs(args, cx)?;
    let candidates = values.into_iter().filter(|v| !super::is_nullish(v));
    let best = if name == "$min" {
        candidates.min_by(|a, b| cx.compare(a, b))
    } else {
        candidates.max_by(|a, b| cx.compare(a, b))
    };
    Ok(Some(best.flatten().unwrap_or(Bson::Null)))
}

fn eval_std_dev(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values: Vec<f64> = numbers(name, &inputs(args, cx)?)?.into_iter().map(Num::as_f64).collect();
    let count = values.len();
    let divisor = if name == "$stdDevSamp" { count.saturating_sub(1) } else { count };
    if divisor == 0 {
        return Ok(Some(Bson::Null));
    }
    let mean = values.iter().sum::<f64>() / count as f64;
    let squares: f64 = values.iter().map(|x| (x - mean) * (x - mean)).sum();
    Ok(Some(Bson::Double((squares / divisor as f64).sqrt())))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Bson {
        let d = doc! {"quizzes": [10, 6, 7], "labs": [5, 8], "final": 80, "midterm": 75, "n": null};
        Expr::parse(&expr).unwrap().evaluate(&d, &Variables::empty()).unwrap()
    }

    #[test]
    fn documented_examples() {
        assert_eq!(eval(bson!({"$sum": "$quizzes"})), Bson::Int32(23));
        assert_eq!(eval(bson!({"$sum": ["$final", "$midterm", "x"]})), Bson::Int32(155));
        assert_eq!(eval(bson!({"$avg": "$labs"})), Bson::Double(6.5));
        assert_eq!(eval(bson!({"$avg": ["$final", "$midterm"]})), Bson::Double(77.5));
        assert_eq!(eval(bson!({"$max": "$quizzes"})), Bson::Int32(10));
        assert_eq!(eval(bson!({"$min": ["$final", "$midterm", "$n"]})), Bson::Int32(75));
        assert_eq!(eval(bson!({"$min": "$n"})), Bson::Null);
        assert_eq!(eval(bson!({"$avg": "$n"})), Bson::Null);
        assert_eq!(eval(bson!({"$stdDevPop": [1, 3]})), Bson::Double(1.0));
        assert_eq!(eval(bson!({"$stdDevSamp": [5]})), Bson::Null);
    }
}
