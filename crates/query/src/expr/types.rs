//! Type inspection and conversion: `$type`, `$isNumber`, `$convert` and
//! its shorthands (`$toString`, `$toInt`, ...). Conversion failures are
//! ConversionFailure (241) unless `onError` is given.

use bson::{oid::ObjectId, Bson};

use super::{is_nullish, parse_named, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;

const CONVERSION_FAILURE: i32 = 241;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$type", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_type },
    OpSpec { name: "$isNumber", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_is_number },
    OpSpec { name: "$toString", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toInt", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toLong", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toDouble", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toBool", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toObjectId", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$toDate", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_shorthand },
    OpSpec { name: "$convert", style: ArgStyle::Custom(parse_convert), eval: eval_convert },
    OpSpec { name: "$tsSecond", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_timestamp_part },
    OpSpec { name: "$tsIncrement", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_timestamp_part },
];

/// `$tsSecond` / `$tsIncrement`: the parts of a BSON Timestamp, as longs.
fn eval_timestamp_part(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    match args.eval(0, cx)? {
        None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Timestamp(ts)) => {
            let part = if name == "$tsSecond" { ts.time } else { ts.increment };
            Ok(Some(Bson::Int64(i64::from(part))))
        }
        other => Err(QueryError::new(5687301, format!("Argument to {name} must be a timestamp, but is {}", type_name(&other)))),
    }
}

fn eval_type(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    Ok(Some(Bson::from(type_name(&args.eval(0, cx)?))))
}

fn eval_is_number(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    let number = matches!(value, Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)));
    Ok(Some(Bson::Boolean(number)))
}

/// The target types `$convert` knows, by `$type` name or BSON type number.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Double,
    String,
    ObjectId,
    Bool,
    Date,
    Int,
    Long,
}

fn target_from(value: &Bson) -> Result<Target, QueryError> {
    let target = match value {
        Bson::String(s) => match s.as_str() {
            "double" => Some(Target::Double),
            "string" => Some(Target::String),
            "objectId" => Some(Target::ObjectId),
            "bool" => Some(Target::Bool),
            "date" => Some(Target::Date),
            "int" => Some(Target::Int),
            "long" => Some(Target::Long),
            _ => None,
        },
        number => match super::arithmetic::Num::from_bson(number).map(|n| n.as_f64()) {
            Some(1.0) => Some(Target::Double),
            Some(2.0) => Some(Target::String),
            Some(7.0) => Some(Target::ObjectId),
            Some(8.0) => Some(Target::Bool),
            Some(9.0) => Some(Target::Date),
            Some(16.0) => Some(Target::Int),
            Some(18.0) => Some(Target::Long),
            _ => None,
        },
    };
    target.ok_or_else(|| {
        QueryError::new(
            super::super::error::codes::COMMAND_NOT_SUPPORTED,
            format!("$convert to type {value} is not supported"),
        )
    })
}

fn eval_shorthand(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let target = match name {
        "$toString" => Target::String,
        "$toInt" => Target::Int,
        "$toLong" => Target::Long,
        "$toDouble" => Target::Double,
        "$toBool" => Target::Bool,
        "$toObjectId" => Target::ObjectId,
        _ => Target::Date,
    };
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    convert(value.as_ref().expect("nullish checked"), target).map(Some)
}

/// `$convert: {input, to, onError, onNull}` at positions
/// `[input, to, onError, onNull]`.
fn parse_convert(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    parse_named(spec.name, operand, &["input", "to"], &["onError", "onNull"])
}

fn eval_convert(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    let to = args.eval(1, cx)?;
    if is_nullish(&to) {
        return Ok(Some(Bson::Null));
    }
    let target = target_from(to.as_ref().expect("nullish checked"))?;
    if is_nullish(&value) {
        return match args.get(3) {
            Some(_) => args.eval(3, cx),
            None => Ok(Some(Bson::Null)),
        };
    }
    match convert(value.as_ref().expect("nullish checked"), target) {
        Ok(converted) => Ok(Some(converted)),
        Err(error) if error.code == CONVERSION_FAILURE && args.get(2).is_some() => args.eval(2, cx),
        Err(error) => Err(error),
    }
}

fn failure(value: &Bson, target: &str, detail: &str) -> QueryError {
    let from = type_name(&Some(value.clone()));
    let suffix = if detail.is_empty() { String::new() } else { format!(": {detail}") };
    QueryError::new(
        CONVERSION_FAILURE,
        format!("Failed to parse {target} from {from} value{suffix}"),
    )
}

fn unsupported(value: &Bson, target: &str) -> QueryError {
    QueryError::new(
        CONVERSION_FAILURE,
        format!("Unsupported conversion from {} to {target} in $convert with no onError value", type_name(&Some(value.clone()))),
    )
}

/// Converts a non-null value to the target type with MongoDB's rules.
fn convert(value: &Bson, target: Target) -> Result<Bson, QueryError> {
    match target {
        Target::String => to_string(value),
        Target::Bool => to_bool(value),
        Target::Double => to_double(value),
        Target::Int => to_integer(value, "int", i64::from(i32::MIN), i64::from(i32::MAX))
            .map(|v| Bson::Int32(v as i32)),
        Target::Long => to_integer(value, "long", i64::MIN, i64::MAX).map(Bson::Int64),
        Target::ObjectId => match value {
            Bson::ObjectId(oid) => Ok(Bson::ObjectId(*oid)),
            Bson::String(s) => ObjectId::parse_str(s)
                .map(Bson::ObjectId)
                .map_err(|_| failure(value, "objectId", s)),
            other => Err(unsupported(other, "objectId")),
        },
        Target::Date => to_date(value),
    }
}

/// MongoDB's shortest round-trip text for a double ("1.5", "1e+20").
pub(crate) fn format_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity".to_string() } else { "-Infinity".to_string() };
    }
    let text = format!("{v}");
    if v.abs() >= 1e16 || (v != 0.0 && v.abs() < 1e-5) {
        return format!("{v:e}").replace('e', "e+").replace("e+-", "e-");
    }
    text
}

fn to_string(value: &Bson) -> Result<Bson, QueryError> {
    let text = match value {
        Bson::String(s) => s.clone(),
        Bson::Int32(v) => v.to_string(),
        Bson::Int64(v) => v.to_string(),
        Bson::Double(v) => format_double(*v),
        Bson::Decimal128(d) => d.to_string(),
        Bson::Boolean(b) => b.to_string(),
        Bson::ObjectId(oid) => oid.to_hex(),
        Bson::DateTime(d) => super::dates::format_iso(d.timestamp_millis()),
        other => return Err(unsupported(other, "string")),
    };
    Ok(Bson::String(text))
}

fn to_bool(value: &Bson) -> Result<Bson, QueryError> {
    let truth = match value {
        Bson::Boolean(b) => *b,
        Bson::Int32(v) => *v != 0,
        Bson::Int64(v) => *v != 0,
        Bson::Double(v) => *v != 0.0,
        Bson::Decimal128(d) => crate::compare::decimal_to_f64(d) != 0.0,
        // Strings, objects, arrays, dates, ObjectIds convert to true.
        _ => true,
    };
    Ok(Bson::Boolean(truth))
}

fn to_double(value: &Bson) -> Result<Bson, QueryError> {
    let v = match value {
        Bson::Double(v) => *v,
        Bson::Int32(v) => f64::from(*v),
        Bson::Int64(v) => *v as f64,
        Bson::Decimal128(d) => crate::compare::decimal_to_f64(d),
        Bson::Boolean(b) => f64::from(u8::from(*b)),
        Bson::DateTime(d) => d.timestamp_millis() as f64,
        Bson::String(s) => s.trim_end().parse::<f64>().ok().filter(|_| !s.trim().is_empty()).ok_or_else(|| failure(value, "double", s))?,
        other => return Err(unsupported(other, "double")),
    };
    Ok(Bson::Double(v))
}

fn to_integer(value: &Bson, target: &str, min: i64, max: i64) -> Result<i64, QueryError> {
    let overflow = || QueryError::new(CONVERSION_FAILURE, format!("Conversion would overflow target type in $convert with no onError value: {value}"));
    let v = match value {
        Bson::Int32(v) => i64::from(*v),
        Bson::Int64(v) => *v,
        Bson::Boolean(b) => i64::from(*b),
        Bson::DateTime(d) if target == "long" => d.timestamp_millis(),
        Bson::Double(v) => {
            if !v.is_finite() {
                return Err(QueryError::new(CONVERSION_FAILURE, format!("Attempt to convert {} value to integer type in $convert with no onError value", format_double(*v))));
            }
            let truncated = v.trunc();
            if truncated < min as f64 || truncated > max as f64 {
                return Err(overflow());
            }
            truncated as i64
        }
        Bson::String(s) => s.parse::<i64>().map_err(|_| failure(value, target, s))?,
        other => return Err(unsupported(other, target)),
    };
    if v < min || v > max {
        return Err(overflow());
    }
    Ok(v)
}

fn to_date(value: &Bson) -> Result<Bson, QueryError> {
    let millis = match value {
        Bson::DateTime(d) => d.timestamp_millis(),
        Bson::Int64(v) => *v,
        Bson::Double(v) if v.is_finite() => v.trunc() as i64,
        Bson::ObjectId(oid) => oid.timestamp().timestamp_millis(),
        Bson::Timestamp(ts) => i64::from(ts.time) * 1000,
        Bson::String(s) => super::dates::parse_iso(s).ok_or_else(|| failure(value, "date", s))?,
        other => return Err(unsupported(other, "date")),
    };
    Ok(Bson::DateTime(bson::DateTime::from_millis(millis)))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, oid::ObjectId, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {"n": null, "s": "5"}, &Variables::empty())
    }

    #[test]
    fn type_names() {
        assert_eq!(eval(bson!({"$type": "$absent"})).unwrap(), Bson::from("missing"));
        assert_eq!(eval(bson!({"$type": "$n"})).unwrap(), Bson::from("null"));
        assert_eq!(eval(bson!({"$type": [[1]]})).unwrap(), Bson::from("array"));
        assert_eq!(eval(bson!({"$type": {"$literal": 1i64}})).unwrap(), Bson::from("long"));
        assert_eq!(eval(bson!({"$isNumber": "$s"})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$isNumber": 2.5})).unwrap(), Bson::Boolean(true));
        let ts = Bson::Timestamp(bson::Timestamp { time: 1_700_000_000, increment: 7 });
        assert_eq!(eval(bson!({"$tsSecond": ts.clone()})).unwrap(), Bson::Int64(1_700_000_000));
        assert_eq!(eval(bson!({"$tsIncrement": ts})).unwrap(), Bson::Int64(7));
    }

    #[test]
    fn conversions() {
        assert_eq!(eval(bson!({"$toInt": "$s"})).unwrap(), Bson::Int32(5));
        assert_eq!(eval(bson!({"$toInt": 5.9})).unwrap(), Bson::Int32(5));
        assert_eq!(eval(bson!({"$toLong": true})).unwrap(), Bson::Int64(1));
        assert_eq!(eval(bson!({"$toDouble": "2.5"})).unwrap(), Bson::Double(2.5));
        assert_eq!(eval(bson!({"$toString": 2.5})).unwrap(), Bson::from("2.5"));
        assert_eq!(eval(bson!({"$toString": 1})).unwrap(), Bson::from("1"));
        assert_eq!(eval(bson!({"$toBool": "false"})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$toBool": 0})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$toInt": "$n"})).unwrap(), Bson::Null);
        let oid = ObjectId::parse_str("5ab9cbfa31c2ab715d42129e").unwrap();
        assert_eq!(eval(bson!({"$toObjectId": "5ab9cbfa31c2ab715d42129e"})).unwrap(), Bson::ObjectId(oid));
        assert_eq!(eval(bson!({"$toDate": 1_000i64})).unwrap(), Bson::DateTime(bson::DateTime::from_millis(1000)));
        assert_eq!(eval(bson!({"$toDate": "2018-03-03T00:00:00Z"})).unwrap(), Bson::DateTime(bson::DateTime::from_millis(1_520_035_200_000)));
        assert_eq!(eval(bson!({"$toInt": "abc"})).unwrap_err().code, 241);
        assert_eq!(eval(bson!({"$toInt": 3e10})).unwrap_err().code, 241);
    }

    #[test]
    fn convert_with_on_error_and_on_null() {
        assert_eq!(eval(bson!({"$convert": {"input": "abc", "to": "int", "onError": -1}})).unwrap(), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$convert": {"input": "$absent", "to": "int", "onNull": 0}})).unwrap(), Bson::Int32(0));
        assert_eq!(eval(bson!({"$convert": {"input": "7", "to": 18}})).unwrap(), Bson::Int64(7));
        assert_eq!(eval(bson!({"$convert": {"input": 1, "to": "decimal"}})).unwrap_err().code, 115);
    }
}
