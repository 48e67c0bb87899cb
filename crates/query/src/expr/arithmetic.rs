//! Arithmetic operators and MongoDB's number type rules: the result has
//! the widest input type (int < long < double); an int result that
//! overflows becomes a long, a long that overflows becomes a double.
//! Decimal128 arithmetic is not implemented and answers a clear error
//! rather than an approximate result.

use bson::Bson;

use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::{codes, QueryError};

const MAX: usize = usize::MAX;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$add", style: ArgStyle::Positional { min: 0, max: MAX }, eval: eval_add },
    OpSpec { name: "$multiply", style: ArgStyle::Positional { min: 0, max: MAX }, eval: eval_multiply },
    OpSpec { name: "$subtract", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_subtract },
    OpSpec { name: "$divide", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_divide },
    OpSpec { name: "$mod", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_mod },
    OpSpec { name: "$abs", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_abs },
    OpSpec { name: "$ceil", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$floor", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$sqrt", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$exp", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$ln", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$log10", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_unary_float },
    OpSpec { name: "$log", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_log },
    OpSpec { name: "$round", style: ArgStyle::Positional { min: 1, max: 2 }, eval: eval_round },
    OpSpec { name: "$trunc", style: ArgStyle::Positional { min: 1, max: 2 }, eval: eval_round },
    OpSpec { name: "$pow", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_pow },
    OpSpec { name: "$bitAnd", style: ArgStyle::Positional { min: 0, max: MAX }, eval: eval_bitwise },
    OpSpec { name: "$bitOr", style: ArgStyle::Positional { min: 0, max: MAX }, eval: eval_bitwise },
    OpSpec { name: "$bitXor", style: ArgStyle::Positional { min: 0, max: MAX }, eval: eval_bitwise },
    OpSpec { name: "$bitNot", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_bitwise },
];

/// A number during arithmetic, tagged with its BSON width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    Int(i32),
    Long(i64),
    Double(f64),
}

impl Num {
    pub(crate) fn from_bson(value: &Bson) -> Option<Num> {
        match value {
            Bson::Int32(v) => Some(Num::Int(*v)),
            Bson::Int64(v) => Some(Num::Long(*v)),
            Bson::Double(v) => Some(Num::Double(*v)),
            _ => None,
        }
    }

    pub(crate) fn to_bson(self) -> Bson {
        match self {
            Num::Int(v) => Bson::Int32(v),
            Num::Long(v) => Bson::Int64(v),
            Num::Double(v) => Bson::Double(v),
        }
    }

    pub(crate) fn as_f64(self) -> f64 {
        match self {
            Num::Int(v) => f64::from(v),
            Num::Long(v) => v as f64,
            Num::Double(v) => v,
        }
    }

    fn as_i64(self) -> Option<i64> {
        match self {
            Num::Int(v) => Some(i64::from(v)),
            Num::Long(v) => Some(v),
            Num::Double(_) => None,
        }
    }

    fn is_double(self) -> bool {
        matches!(self, Num::Double(_))
    }

    fn is_long(self) -> bool {
        matches!(self, Num::Long(_))
    }
}

/// Narrows an exact integer result to the widest input width: int when
/// both inputs were ints and it fits, otherwise long.
fn narrow(value: i64, long_input: bool) -> Num {
    match i32::try_from(value) {
        Ok(small) if !long_input => Num::Int(small),
        _ => Num::Long(value),
    }
}

/// Adds two numbers with MongoDB's promotion rules.
pub(crate) fn add(a: Num, b: Num) -> Num {
    integer_op(a, b, |x, y| x + y, |x, y| x + y)
}

fn multiply(a: Num, b: Num) -> Num {
    integer_op(a, b, |x, y| x * y, |x, y| x * y)
}

fn subtract(a: Num, b: Num) -> Num {
    integer_op(a, b, |x, y| x - y, |x, y| x - y)
}

/// Applies an operation exactly when both inputs are integers (in 128
/// bits, where the sum or product of two longs cannot overflow), narrowing
/// the result; a result beyond a long becomes the nearest double.
fn integer_op(a: Num, b: Num, exact: fn(i128, i128) -> i128, float: fn(f64, f64) -> f64) -> Num {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => {
            let result = exact(i128::from(x), i128::from(y));
            match i64::try_from(result) {
                Ok(fits) => narrow(fits, a.is_long() || b.is_long()),
                Err(_) => Num::Double(result as f64),
            }
        }
        _ => Num::Double(float(a.as_f64(), b.as_f64())),
    }
}

fn decimal_unsupported(op: &str) -> QueryError {
    QueryError::new(codes::COMMAND_NOT_SUPPORTED, format!("{op} does not support Decimal128 values yet"))
}

/// The number of a value for operator `op`, or the operator's type error.
fn number_arg(op: &str, value: &Bson, code: i32) -> Result<Num, QueryError> {
    if let Bson::Decimal128(_) = value {
        return Err(decimal_unsupported(op));
    }
    Num::from_bson(value).ok_or_else(|| {
        QueryError::new(code, format!("{op} only supports numeric types, not {}", type_name(&Some(value.clone()))))
    })
}

fn eval_add(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = args.eval_all(cx)?;
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut total = Num::Int(0);
    let mut date: Option<i64> = None;
    for value in values.iter().flatten() {
        if let Bson::DateTime(d) = value {
            if date.is_some() {
                return Err(QueryError::new(16612, "only one date allowed in an $add expression"));
            }
            date = Some(d.timestamp_millis());
            continue;
        }
        if let Bson::Decimal128(_) = value {
            return Err(decimal_unsupported(name));
        }
        let Some(n) = Num::from_bson(value) else {
            return Err(QueryError::new(
                16554,
                format!("$add only supports numeric or date types, not {}", type_name(&Some(value.clone()))),
            ));
        };
        total = add(total, n);
    }
    match date {
        Some(millis) => Ok(Some(Bson::DateTime(date_plus(millis, total)?))),
        None => Ok(Some(total.to_bson())),
    }
}

/// A date moved by a number of milliseconds (doubles round to nearest).
fn date_plus(millis: i64, offset: Num) -> Result<bson::DateTime, QueryError> {
    let delta = match offset {
        Num::Double(v) => v.round() as i64,
        other => other.as_i64().unwrap_or_default(),
    };
    millis
        .checked_add(delta)
        .map(bson::DateTime::from_millis)
        .ok_or_else(|| QueryError::new(16612, "date overflow in $add"))
}

fn eval_multiply(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = args.eval_all(cx)?;
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut product = Num::Int(1);
    for value in values.iter().flatten() {
        product = multiply(product, number_arg(name, value, 16555)?);
    }
    Ok(Some(product.to_bson()))
}

fn eval_subtract(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (left, right) = (args.eval(0, cx)?, args.eval(1, cx)?);
    let (Some(left), Some(right)) = (left, right) else { return Ok(Some(Bson::Null)) };
    match (&left, &right) {
        (Bson::Null | Bson::Undefined, _) | (_, Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
        (Bson::DateTime(a), Bson::DateTime(b)) => {
            Ok(Some(Bson::Int64(a.timestamp_millis().wrapping_sub(b.timestamp_millis()))))
        }
        (Bson::DateTime(a), other) => {
            let n = number_arg(name, other, 16556)?;
            let negated = subtract(Num::Int(0), n);
            Ok(Some(Bson::DateTime(date_plus(a.timestamp_millis(), negated)?)))
        }
        (a, b) => {
            if let Bson::DateTime(_) = b {
                return Err(QueryError::new(16556, "can't $subtract a date from a non-date"));
            }
            Ok(Some(subtract(number_arg(name, a, 16556)?, number_arg(name, b, 16556)?).to_bson()))
        }
    }
}

/// Evaluates both arguments as numbers; `None` when either is nullish.
fn two_numbers(name: &str, args: &Args, cx: &Context, code: i32) -> Result<Option<(Num, Num)>, QueryError> {
    let (left, right) = (args.eval(0, cx)?, args.eval(1, cx)?);
    if is_nullish(&left) || is_nullish(&right) {
        return Ok(None);
    }
    let (Some(left), Some(right)) = (left, right) else { return Ok(None) };
    Ok(Some((number_arg(name, &left, code)?, number_arg(name, &right, code)?)))
}

fn eval_divide(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some((a, b)) = two_numbers(name, args, cx, 16609)? else { return Ok(Some(Bson::Null)) };
    if b.as_f64() == 0.0 {
        return Err(QueryError::new(codes::BAD_VALUE, "can't $divide by zero"));
    }
    Ok(Some(Bson::Double(a.as_f64() / b.as_f64())))
}

fn eval_mod(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some((a, b)) = two_numbers(name, args, cx, 16611)? else { return Ok(Some(Bson::Null)) };
    if b.as_f64() == 0.0 {
        return Err(QueryError::new(16610, "can't $mod by zero"));
    }
    let result = match (a.as_i64(), b.as_i64()) {
        // checked_rem fails only for i64::MIN % -1, whose remainder is 0.
        (Some(x), Some(y)) => narrow(x.checked_rem(y).unwrap_or(0), a.is_long() || b.is_long()),
        _ => Num::Double(a.as_f64() % b.as_f64()),
    };
    Ok(Some(result.to_bson()))
}

/// Evaluates the single argument as a number; `None` when nullish.
fn one_number(name: &str, args: &Args, cx: &Context) -> Result<Option<Num>, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(None);
    }
    number_arg(name, value.as_ref().expect("nullish checked"), 28765).map(Some)
}

fn eval_abs(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(n) = one_number(name, args, cx)? else { return Ok(Some(Bson::Null)) };
    let result = match n {
        Num::Int(v) => narrow(i64::from(v).abs(), false),
        Num::Long(v) => Num::Long(
            v.checked_abs().ok_or_else(|| QueryError::new(28680, "can't take $abs of long long min"))?,
        ),
        Num::Double(v) => Num::Double(v.abs()),
    };
    Ok(Some(result.to_bson()))
}

/// `$ceil`/`$floor` keep integers as they are; `$sqrt`, `$exp`, `$ln`,
/// `$log10` always answer a double.
fn eval_unary_float(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(n) = one_number(name, args, cx)? else { return Ok(Some(Bson::Null)) };
    let x = n.as_f64();
    let result = match name {
        "$ceil" | "$floor" if !n.is_double() => return Ok(Some(n.to_bson())),
        "$ceil" => x.ceil(),
        "$floor" => x.floor(),
        "$sqrt" if x < 0.0 => {
            return Err(QueryError::new(28714, "$sqrt's argument must be greater than or equal to 0"))
        }
        "$sqrt" => x.sqrt(),
        "$exp" => x.exp(),
        "$ln" if x <= 0.0 => return Err(QueryError::new(28766, format!("$ln's argument must be a positive number, but is {x}"))),
        "$ln" => x.ln(),
        "$log10" if x <= 0.0 => return Err(QueryError::new(28761, format!("$log10's argument must be a positive number, but is {x}"))),
        _ => x.log10(),
    };
    Ok(Some(Bson::Double(result)))
}

/// `$round: [n, place]` rounds half to even; `$trunc` rounds toward zero.
/// `place` is an integer in -20..=100; integers are rounded only for a
/// negative place.
fn eval_round(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(n) = one_number(name, args, cx)? else { return Ok(Some(Bson::Null)) };
    let place_value = args.eval(1, cx)?;
    let place = match &place_value {
        None => 0,
        Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
        Some(v) => match Num::from_bson(v) {
            Some(p) if p.as_f64().fract() == 0.0 && (-20.0..=100.0).contains(&p.as_f64()) => p.as_f64() as i32,
            _ => {
                return Err(QueryError::new(
                    51083,
                    format!("cannot apply {name} with precision value {v}; value must be in [-20,100]"),
                ))
            }
        },
    };
    let truncate = name == "$trunc";
    let result = match n {
        Num::Double(x) => Num::Double(round_float(x, place, truncate)),
        _ if place >= 0 => n,
        _ => {
            let x = n.as_i64().expect("integer");
            let scale = 10i128.pow(place.unsigned_abs());
            let quotient = i128::from(x) / scale;
            let remainder = i128::from(x) % scale;
            let mut rounded = quotient;
            if !truncate {
                let twice = remainder.abs() * 2;
                if twice > scale || (twice == scale && quotient % 2 != 0) {
                    rounded += remainder.signum();
                }
            }
            match i64::try_from(rounded * scale) {
                Ok(v) => narrow(v, n.is_long()),
                Err(_) => Num::Double((rounded * scale) as f64),
            }
        }
    };
    Ok(Some(result.to_bson()))
}

fn round_float(x: f64, place: i32, truncate: bool) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(place);
    let scaled = x * scale;
    let rounded = if truncate {
        scaled.trunc()
    } else {
        let floor = scaled.floor();
        let diff = scaled - floor;
        if diff > 0.5 || (diff == 0.5 && floor % 2.0 != 0.0) {
            floor + 1.0
        } else {
            floor
        }
    };
    rounded / scale
}

/// `$log: [number, base]`, always a double.
fn eval_log(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some((number, base)) = two_numbers(name, args, cx, 28756)? else { return Ok(Some(Bson::Null)) };
    let (x, b) = (number.as_f64(), base.as_f64());
    if x <= 0.0 {
        return Err(QueryError::new(28758, format!("$log's argument must be a positive number, but is {x}")));
    }
    if b <= 0.0 || b == 1.0 {
        return Err(QueryError::new(28759, format!("$log's base must be a positive number not equal to 1, but is {b}")));
    }
    Ok(Some(Bson::Double(x.ln() / b.ln())))
}

fn eval_pow(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some((base, exponent)) = two_numbers(name, args, cx, 28762)? else { return Ok(Some(Bson::Null)) };
    if base.as_f64() == 0.0 && exponent.as_f64() < 0.0 {
        return Err(QueryError::new(28764, "$pow cannot take a base of 0 and a negative exponent"));
    }
    let exact = match (base.as_i64(), exponent.as_i64()) {
        (Some(b), Some(e)) if e >= 0 => u32::try_from(e).ok().and_then(|e| b.checked_pow(e)),
        // A negative exponent of 1 or -1 stays integral.
        (Some(1), Some(_)) => Some(1),
        (Some(-1), Some(e)) => Some(if e % 2 == 0 { 1 } else { -1 }),
        _ => None,
    };
    let result = match exact {
        Some(v) if !base.is_double() && !exponent.is_double() => narrow(v, base.is_long() || exponent.is_long()),
        _ => Num::Double(base.as_f64().powf(exponent.as_f64())),
    };
    Ok(Some(result.to_bson()))
}

/// Bitwise operators over ints and longs (a long input makes the
/// result a long); doubles are refused as in MongoDB.
fn eval_bitwise(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = args.eval_all(cx)?;
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let mut long = false;
    let mut operands = Vec::with_capacity(values.len());
    for value in values.iter().flatten() {
        match value {
            Bson::Int32(v) => operands.push(i64::from(*v)),
            Bson::Int64(v) => {
                long = true;
                operands.push(*v);
            }
            other => {
                return Err(QueryError::new(
                    28765,
                    format!("{name} only supports int and long operands, not {}", type_name(&Some(other.clone()))),
                ))
            }
        }
    }
    let result = match name {
        "$bitNot" => !operands[0],
        "$bitAnd" => operands.iter().fold(-1, |acc, v| acc & v),
        "$bitOr" => operands.iter().fold(0, |acc, v| acc | v),
        _ => operands.iter().fold(0, |acc, v| acc ^ v),
    };
    // Bitwise results of ints always fit an int.
    Ok(Some(if long { Bson::Int64(result) } else { Bson::Int32(result as i32) }))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        let d = doc! {"price": 10, "fee": 2, "date": bson::DateTime::from_millis(1000), "big": i32::MAX, "huge": i64::MAX};
        Expr::parse(&expr)?.evaluate(&d, &Variables::empty())
    }

    #[test]
    fn add_promotes_on_overflow_and_handles_dates() {
        assert_eq!(eval(bson!({"$add": ["$price", "$fee"]})).unwrap(), Bson::Int32(12));
        assert_eq!(eval(bson!({"$add": ["$big", 1]})).unwrap(), Bson::Int64(i64::from(i32::MAX) + 1));
        assert_eq!(eval(bson!({"$add": ["$huge", 1]})).unwrap(), Bson::Double(i64::MAX as f64 + 1.0));
        assert_eq!(eval(bson!({"$add": [1, 2.5]})).unwrap(), Bson::Double(3.5));
        assert_eq!(eval(bson!({"$add": [1, {"$literal": 2i64}]})).unwrap(), Bson::Int64(3));
        assert_eq!(eval(bson!({"$add": ["$date", 500]})).unwrap(), Bson::DateTime(bson::DateTime::from_millis(1500)));
        assert_eq!(eval(bson!({"$add": [1, "$absent"]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$add": [1, "x"]})).unwrap_err().code, 16554);
    }

    #[test]
    fn subtract_multiply_divide_mod() {
        assert_eq!(eval(bson!({"$subtract": ["$date", 1000]})).unwrap(), Bson::DateTime(bson::DateTime::from_millis(0)));
        assert_eq!(eval(bson!({"$subtract": ["$date", "$date"]})).unwrap(), Bson::Int64(0));
        assert_eq!(eval(bson!({"$subtract": [5, 7]})).unwrap(), Bson::Int32(-2));
        assert_eq!(eval(bson!({"$multiply": ["$price", 3]})).unwrap(), Bson::Int32(30));
        assert_eq!(eval(bson!({"$multiply": ["$big", 2]})).unwrap(), Bson::Int64(i64::from(i32::MAX) * 2));
        assert_eq!(eval(bson!({"$divide": [9, 2]})).unwrap(), Bson::Double(4.5));
        assert_eq!(eval(bson!({"$divide": [8, 2]})).unwrap(), Bson::Double(4.0));
        let err = eval(bson!({"$divide": [1, 0]})).unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (2, "can't $divide by zero"));
        assert_eq!(eval(bson!({"$mod": [10, 3]})).unwrap(), Bson::Int32(1));
        assert_eq!(eval(bson!({"$mod": [-10, 3]})).unwrap(), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$mod": [10.5, 3]})).unwrap(), Bson::Double(1.5));
        assert_eq!(eval(bson!({"$mod": [1, 0]})).unwrap_err().code, 16610);
    }

    #[test]
    fn unary_operators() {
        assert_eq!(eval(bson!({"$abs": -5})).unwrap(), Bson::Int32(5));
        assert_eq!(eval(bson!({"$abs": i32::MIN})).unwrap(), Bson::Int64(2147483648));
        assert_eq!(eval(bson!({"$abs": null})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$ceil": 7.80})).unwrap(), Bson::Double(8.0));
        assert_eq!(eval(bson!({"$floor": -2.8})).unwrap(), Bson::Double(-3.0));
        assert_eq!(eval(bson!({"$floor": 5})).unwrap(), Bson::Int32(5));
        assert_eq!(eval(bson!({"$sqrt": 25})).unwrap(), Bson::Double(5.0));
        assert_eq!(eval(bson!({"$sqrt": -1})).unwrap_err().code, 28714);
        assert_eq!(eval(bson!({"$exp": 0})).unwrap(), Bson::Double(1.0));
        assert_eq!(eval(bson!({"$ln": 1})).unwrap(), Bson::Double(0.0));
        assert_eq!(eval(bson!({"$log10": 100})).unwrap(), Bson::Double(2.0));
        assert_eq!(eval(bson!({"$ln": 0})).unwrap_err().code, 28766);
        assert_eq!(eval(bson!({"$log": [100, 10]})).unwrap(), Bson::Double(2.0));
        assert_eq!(eval(bson!({"$log": [8, 1]})).unwrap_err().code, 28759);
    }

    #[test]
    fn round_and_trunc_follow_documented_examples() {
        assert_eq!(eval(bson!({"$round": [19.25, 1]})).unwrap(), Bson::Double(19.2));
        assert_eq!(eval(bson!({"$round": [28.73, 1]})).unwrap(), Bson::Double(28.7));
        assert_eq!(eval(bson!({"$round": [34.32, 1]})).unwrap(), Bson::Double(34.3));
        assert_eq!(eval(bson!({"$round": [-45.39, 1]})).unwrap(), Bson::Double(-45.4));
        assert_eq!(eval(bson!({"$round": [10.5]})).unwrap(), Bson::Double(10.0));
        assert_eq!(eval(bson!({"$round": [11.5]})).unwrap(), Bson::Double(12.0));
        assert_eq!(eval(bson!({"$round": [1234, -2]})).unwrap(), Bson::Int32(1200));
        assert_eq!(eval(bson!({"$round": [1250, -2]})).unwrap(), Bson::Int32(1200));
        assert_eq!(eval(bson!({"$trunc": [19.25, 1]})).unwrap(), Bson::Double(19.2));
        assert_eq!(eval(bson!({"$trunc": [-45.39, 1]})).unwrap(), Bson::Double(-45.3));
        assert_eq!(eval(bson!({"$trunc": [1299, -2]})).unwrap(), Bson::Int32(1200));
    }

    #[test]
    fn bitwise() {
        assert_eq!(eval(bson!({"$bitAnd": [12, 10]})).unwrap(), Bson::Int32(8));
        assert_eq!(eval(bson!({"$bitOr": [12, {"$literal": 3i64}]})).unwrap(), Bson::Int64(15));
        assert_eq!(eval(bson!({"$bitXor": [12, 10]})).unwrap(), Bson::Int32(6));
        assert_eq!(eval(bson!({"$bitNot": 0})).unwrap(), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$bitAnd": [1.5, 1]})).unwrap_err().code, 28765);
    }

    #[test]
    fn pow() {
        assert_eq!(eval(bson!({"$pow": [5, 2]})).unwrap(), Bson::Int32(25));
        assert_eq!(eval(bson!({"$pow": [2, 40]})).unwrap(), Bson::Int64(1 << 40));
        assert_eq!(eval(bson!({"$pow": [2, -1]})).unwrap(), Bson::Double(0.5));
        assert_eq!(eval(bson!({"$pow": [0, -1]})).unwrap_err().code, 28764);
    }
}
