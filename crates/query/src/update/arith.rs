//! Numeric arithmetic for `$inc`, `$mul` and `$bit`, with MongoDB's type
//! promotion: int32 widens to int64 on overflow, any double makes the
//! result a double, and an int64 overflow is an error (`Ok(None)` here),
//! as MongoDB's SafeNum makes it.

use bson::Bson;

use crate::error::{codes, QueryError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Multiply,
}

fn decimal_unsupported(op: ArithOp) -> QueryError {
    let name = match op {
        ArithOp::Add => "$inc",
        ArithOp::Multiply => "$mul",
    };
    QueryError::new(
        codes::COMMAND_NOT_SUPPORTED,
        format!("{name} on Decimal128 values is not supported"),
    )
}

fn as_f64(value: &Bson) -> f64 {
    match value {
        Bson::Int32(v) => f64::from(*v),
        Bson::Int64(v) => *v as f64,
        Bson::Double(v) => *v,
        _ => f64::NAN,
    }
}

/// `current op operand`; both must be numbers (checked by the caller).
/// `Ok(None)` when the result overflows int64.
pub fn arithmetic(current: &Bson, operand: &Bson, op: ArithOp) -> Result<Option<Bson>, QueryError> {
    if matches!(current, Bson::Decimal128(_)) || matches!(operand, Bson::Decimal128(_)) {
        return Err(decimal_unsupported(op));
    }
    let float = |a: f64, b: f64| match op {
        ArithOp::Add => a + b,
        ArithOp::Multiply => a * b,
    };
    Ok(Some(match (current, operand) {
        (Bson::Int32(a), Bson::Int32(b)) => {
            let wide = match op {
                ArithOp::Add => i64::from(*a) + i64::from(*b),
                ArithOp::Multiply => i64::from(*a) * i64::from(*b),
            };
            match i32::try_from(wide) {
                Ok(narrow) => Bson::Int32(narrow),
                Err(_) => Bson::Int64(wide),
            }
        }
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            let a = int_value(current);
            let b = int_value(operand);
            let exact = match op {
                ArithOp::Add => a.checked_add(b),
                ArithOp::Multiply => a.checked_mul(b),
            };
            match exact {
                Some(v) => Bson::Int64(v),
                None => return Ok(None),
            }
        }
        _ => Bson::Double(float(as_f64(current), as_f64(operand))),
    }))
}

/// MongoDB's `SafeNum::debugString` of a number, for overflow errors.
pub fn debug_number(value: &Bson) -> String {
    match value {
        Bson::Int32(v) => format!("(NumberInt){v}"),
        Bson::Int64(v) => format!("(NumberLong){v}"),
        Bson::Double(v) => format!("(NumberDouble){v}"),
        other => other.to_string(),
    }
}

fn int_value(value: &Bson) -> i64 {
    match value {
        Bson::Int32(v) => i64::from(*v),
        Bson::Int64(v) => *v,
        _ => 0,
    }
}

/// The zero of the operand's type: `$mul` on a missing field sets it.
pub fn zero_like(operand: &Bson) -> Bson {
    match operand {
        Bson::Int32(_) => Bson::Int32(0),
        Bson::Int64(_) => Bson::Int64(0),
        Bson::Decimal128(_) => operand.clone(),
        _ => Bson::Double(0.0),
    }
}

/// One bitwise operation; both values must be int32 or int64.
pub fn bitwise(current: &Bson, operand: &Bson, op: super::spec::BitOp) -> Bson {
    use super::spec::BitOp;
    let a = int_value(current);
    let b = int_value(operand);
    let result = match op {
        BitOp::And => a & b,
        BitOp::Or => a | b,
        BitOp::Xor => a ^ b,
    };
    match (current, operand) {
        (Bson::Int32(_), Bson::Int32(_)) => Bson::Int32(result as i32),
        _ => Bson::Int64(result),
    }
}
