//! Trigonometric operators and angle conversions; all answer doubles and
//! null for nullish input. Domain errors follow MongoDB's bounds checks.

use bson::Bson;

use super::arithmetic::Num;
use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;

const ONE: ArgStyle = ArgStyle::Positional { min: 1, max: 1 };

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$sin", style: ONE, eval: eval_unary },
    OpSpec { name: "$cos", style: ONE, eval: eval_unary },
    OpSpec { name: "$tan", style: ONE, eval: eval_unary },
    OpSpec { name: "$asin", style: ONE, eval: eval_unary },
    OpSpec { name: "$acos", style: ONE, eval: eval_unary },
    OpSpec { name: "$atan", style: ONE, eval: eval_unary },
    OpSpec { name: "$sinh", style: ONE, eval: eval_unary },
    OpSpec { name: "$cosh", style: ONE, eval: eval_unary },
    OpSpec { name: "$tanh", style: ONE, eval: eval_unary },
    OpSpec { name: "$asinh", style: ONE, eval: eval_unary },
    OpSpec { name: "$acosh", style: ONE, eval: eval_unary },
    OpSpec { name: "$atanh", style: ONE, eval: eval_unary },
    OpSpec { name: "$degreesToRadians", style: ONE, eval: eval_unary },
    OpSpec { name: "$radiansToDegrees", style: ONE, eval: eval_unary },
    OpSpec { name: "$atan2", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_atan2 },
];

fn number(name: &str, value: &Value) -> Result<f64, QueryError> {
    match value.as_ref().and_then(Num::from_bson) {
        Some(n) => Ok(n.as_f64()),
        None => Err(QueryError::new(28765, format!("{name} only supports numeric types, not {}", type_name(value)))),
    }
}

fn out_of_bounds(name: &str, x: f64, bounds: &str) -> QueryError {
    QueryError::new(50989, format!("cannot apply {name} to {x}, value must be in {bounds}"))
}

fn eval_unary(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let x = number(name, &value)?;
    let finite_only = matches!(name, "$sin" | "$cos" | "$tan");
    if finite_only && x.is_infinite() {
        return Err(out_of_bounds(name, x, "(-inf,inf)"));
    }
    let result = match name {
        "$sin" => x.sin(),
        "$cos" => x.cos(),
        "$tan" => x.tan(),
        "$asin" | "$acos" if !(-1.0..=1.0).contains(&x) && !x.is_nan() => return Err(out_of_bounds(name, x, "[-1,1]")),
        "$asin" => x.asin(),
        "$acos" => x.acos(),
        "$atan" => x.atan(),
        "$sinh" => x.sinh(),
        "$cosh" => x.cosh(),
        "$tanh" => x.tanh(),
        "$asinh" => x.asinh(),
        "$acosh" if x < 1.0 => return Err(out_of_bounds(name, x, "[1,inf]")),
        "$acosh" => x.acosh(),
        "$atanh" if !(-1.0..=1.0).contains(&x) && !x.is_nan() => return Err(out_of_bounds(name, x, "[-1,1]")),
        "$atanh" => x.atanh(),
        "$degreesToRadians" => x.to_radians(),
        _ => x.to_degrees(),
    };
    Ok(Some(Bson::Double(result)))
}

fn eval_atan2(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (y, x) = (args.eval(0, cx)?, args.eval(1, cx)?);
    if is_nullish(&y) || is_nullish(&x) {
        return Ok(Some(Bson::Null));
    }
    Ok(Some(Bson::Double(number(name, &y)?.atan2(number(name, &x)?))))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {}, &Variables::empty())
    }

    #[test]
    fn values_and_bounds() {
        assert_eq!(eval(bson!({"$sin": 0})).unwrap(), Bson::Double(0.0));
        assert_eq!(eval(bson!({"$cos": 0})).unwrap(), Bson::Double(1.0));
        assert_eq!(eval(bson!({"$atan2": [0, 1]})).unwrap(), Bson::Double(0.0));
        assert_eq!(eval(bson!({"$radiansToDegrees": std::f64::consts::PI})).unwrap(), Bson::Double(180.0));
        assert_eq!(eval(bson!({"$degreesToRadians": 180})).unwrap(), Bson::Double(std::f64::consts::PI));
        assert_eq!(eval(bson!({"$asin": 2})).unwrap_err().code, 50989);
        assert_eq!(eval(bson!({"$acosh": 0.5})).unwrap_err().code, 50989);
        assert_eq!(eval(bson!({"$sin": null})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$sin": "x"})).unwrap_err().code, 28765);
    }
}
