//! Array operators, including the variable-binding ones (`$filter`,
//! `$map`, `$reduce`).

use bson::Bson;

use super::{
    is_nullish, parse_named, truthy, type_name, validate_variable_name, ArgStyle, Args,
    Context, OpSpec, Value,
};
use crate::depth::{value_exceeds, BSON_DEPTH_MAX, OVERFLOW};
use crate::error::QueryError;

/// The most elements `$range` may produce, so that one expression cannot
/// allocate without bound.
const RANGE_ELEMENTS_MAX: usize = 10_000_000;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$size", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_size },
    OpSpec { name: "$arrayElemAt", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_array_elem_at },
    OpSpec { name: "$first", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_first_last },
    OpSpec { name: "$last", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_first_last },
    OpSpec { name: "$in", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_in },
    OpSpec { name: "$concatArrays", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_concat_arrays },
    OpSpec { name: "$filter", style: ArgStyle::Custom(parse_filter), eval: eval_filter },
    OpSpec { name: "$map", style: ArgStyle::Custom(parse_map), eval: eval_map },
    OpSpec { name: "$reduce", style: ArgStyle::Named { required: &["input", "initialValue", "in"], optional: &[] }, eval: eval_reduce },
    OpSpec { name: "$slice", style: ArgStyle::Positional { min: 2, max: 3 }, eval: eval_slice },
    OpSpec { name: "$isArray", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_is_array },
    OpSpec { name: "$range", style: ArgStyle::Positional { min: 2, max: 3 }, eval: eval_range },
    OpSpec { name: "$reverseArray", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_reverse },
    OpSpec { name: "$indexOfArray", style: ArgStyle::Positional { min: 2, max: 4 }, eval: eval_index_of_array },
];

fn integer(op: &str, value: &Value, what: &str, code: i32) -> Result<i64, QueryError> {
    match value.as_ref().and_then(super::arithmetic::Num::from_bson) {
        Some(n) if n.as_f64().fract() == 0.0 => Ok(n.as_f64() as i64),
        _ => Err(QueryError::new(code, format!("{op}'s {what} must be a numeric value representable as a 32-bit integral value, but is of type {}", type_name(value)))),
    }
}

fn eval_size(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    match args.eval(0, cx)? {
        Some(Bson::Array(items)) => Ok(Some(Bson::Int32(i32::try_from(items.len()).unwrap_or(i32::MAX)))),
        other => Err(QueryError::new(
            17124,
            format!("The argument to $size must be an array. Type of argument: {}", type_name(&other)),
        )),
    }
}

/// The element at a possibly negative index (from the end), if in range.
fn element_at(items: &[Bson], index: i64) -> Option<Bson> {
    let len = i64::try_from(items.len()).ok()?;
    let position = if index < 0 { len + index } else { index };
    if position < 0 || position >= len {
        return None;
    }
    items.get(position as usize).cloned()
}

fn eval_array_elem_at(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (array, index) = (args.eval(0, cx)?, args.eval(1, cx)?);
    if is_nullish(&array) || is_nullish(&index) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = array else {
        return Err(QueryError::new(28689, format!("{name}'s first argument must be an array, but is {}", type_name(&array))));
    };
    let index = integer(name, &index, "second argument", 28691)?;
    Ok(element_at(&items, index))
}

fn eval_first_last(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = value else {
        return Err(QueryError::new(28689, format!("{name}'s argument must be an array, but is {}", type_name(&value))));
    };
    Ok(if name == "$first" { items.first().cloned() } else { items.last().cloned() })
}

fn eval_in(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let (needle, array) = (args.eval(0, cx)?, args.eval(1, cx)?);
    let Some(Bson::Array(items)) = array else {
        return Err(QueryError::new(40081, format!("$in requires an array as a second argument, found: {}", type_name(&array))));
    };
    let found = items.iter().any(|item| cx.compare(&needle, &Some(item.clone())).is_eq());
    Ok(Some(Bson::Boolean(found)))
}

fn eval_concat_arrays(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let mut out = Vec::new();
    for value in args.eval_all(cx)? {
        match value {
            None | Some(Bson::Null | Bson::Undefined) => return Ok(Some(Bson::Null)),
            Some(Bson::Array(items)) => out.extend(items),
            other => {
                return Err(QueryError::new(28664, format!("$concatArrays only supports arrays, not {}", type_name(&other))))
            }
        }
    }
    Ok(Some(Bson::Array(out)))
}

/// Parses named arguments plus the bound variable name `as` (default
/// "this"), stored in `names[0]`.
fn parse_with_as(name: &'static str, operand: &Bson, required: &'static [&'static str], optional: &'static [&'static str]) -> Result<Args, QueryError> {
    let variable = match operand {
        Bson::Document(d) => match d.get("as") {
            None => "this".to_string(),
            Some(Bson::String(s)) => s.clone(),
            Some(_) => return Err(QueryError::failed_to_parse(format!("{name}: 'as' must be a string"))),
        },
        _ => return Err(QueryError::failed_to_parse(format!("{name} only supports an object as its argument"))),
    };
    validate_variable_name(&variable, false)?;
    let mut args = parse_named(name, operand, required, optional)?;
    args.names.push(variable);
    Ok(args)
}

/// `$filter: {input, as, cond, limit}` at positions `[input, cond, as, limit]`.
fn parse_filter(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    parse_with_as(spec.name, operand, &["input", "cond"], &["as", "limit"])
}

/// `$map: {input, as, in}` at positions `[input, in, as]`.
fn parse_map(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    parse_with_as(spec.name, operand, &["input", "in"], &["as"])
}

/// The input array of `$filter`/`$map`/`$reduce`; `None` when nullish.
fn input_array(name: &str, args: &Args, cx: &Context, code: i32) -> Result<Option<Vec<Bson>>, QueryError> {
    let value = args.eval(0, cx)?;
    if is_nullish(&value) {
        return Ok(None);
    }
    match value {
        Some(Bson::Array(items)) => Ok(Some(items)),
        other => Err(QueryError::new(code, format!("input to {name} must be an array not {}", type_name(&other)))),
    }
}

fn eval_filter(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(items) = input_array(name, args, cx, 28651)? else { return Ok(Some(Bson::Null)) };
    let limit = match args.get(3) {
        None => usize::MAX,
        Some(_) => match args.eval(3, cx)? {
            None | Some(Bson::Null) => usize::MAX,
            value => {
                let n = integer(name, &value, "limit", 327391)?;
                if n < 1 {
                    return Err(QueryError::new(327392, format!("$filter: limit must be greater than 0: {n}")));
                }
                n as usize
            }
        },
    };
    let variable = &args.names[0];
    let mut out = Vec::new();
    for item in items {
        if out.len() >= limit {
            break;
        }
        let keep = cx.with_bindings(vec![(variable.clone(), Some(item.clone()))], |inner| args.eval(1, inner))?;
        if truthy(&keep) {
            out.push(item);
        }
    }
    Ok(Some(Bson::Array(out)))
}

fn eval_map(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(items) = input_array(name, args, cx, 16883)? else { return Ok(Some(Bson::Null)) };
    let variable = &args.names[0];
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mapped = cx.with_bindings(vec![(variable.clone(), Some(item))], |inner| args.eval(1, inner))?;
        out.push(mapped.unwrap_or(Bson::Null));
    }
    Ok(Some(Bson::Array(out)))
}

fn eval_reduce(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(items) = input_array(name, args, cx, 40080)? else { return Ok(Some(Bson::Null)) };
    let mut accumulated = args.eval(1, cx)?;
    for item in items {
        let bindings = vec![("value".to_string(), accumulated), ("this".to_string(), Some(item))];
        accumulated = cx.with_bindings(bindings, |inner| args.eval(2, inner))?;
        // `in` may wrap `$$value` once more on every element: the loop,
        // not the expression, decides how deep the result gets, so the
        // depth is checked before the next round copies it again.
        if accumulated.as_ref().is_some_and(|value| value_exceeds(value, BSON_DEPTH_MAX)) {
            return Err(QueryError::new(OVERFLOW, "$reduce accumulated value exceeded max allowable BSON depth"));
        }
    }
    Ok(accumulated)
}

/// `$slice: [array, n]` or `[array, position, n]`.
fn eval_slice(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let values = args.eval_all(cx)?;
    if values.iter().any(is_nullish) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = &values[0] else {
        return Err(QueryError::new(28724, format!("First argument to $slice must be an array, but is of type: {}", type_name(&values[0]))));
    };
    let len = items.len() as i64;
    let (start, count) = if values.len() == 2 {
        let n = integer(name, &values[1], "second argument", 28725)?;
        if n >= 0 { (0, n) } else { ((len + n).max(0), -n) }
    } else {
        let position = integer(name, &values[1], "second argument", 28725)?;
        let n = integer(name, &values[2], "third argument", 28726)?;
        if n <= 0 {
            return Err(QueryError::new(28729, format!("Third argument to $slice must be positive: {n}")));
        }
        let start = if position < 0 { (len + position).max(0) } else { position.min(len) };
        (start, n)
    };
    let end = start.saturating_add(count).min(len);
    Ok(Some(Bson::Array(items[start as usize..end as usize].to_vec())))
}

fn eval_is_array(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    Ok(Some(Bson::Boolean(matches!(args.eval(0, cx)?, Some(Bson::Array(_))))))
}

fn eval_range(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let start = integer(name, &args.eval(0, cx)?, "starting value", 34443)?;
    let end = integer(name, &args.eval(1, cx)?, "ending value", 34445)?;
    let step = match args.get(2) {
        None => 1,
        Some(_) => integer(name, &args.eval(2, cx)?, "step value", 34447)?,
    };
    if step == 0 {
        return Err(QueryError::new(34449, "$range requires a non-zero step value"));
    }
    let mut out = Vec::new();
    let mut current = start;
    while (step > 0 && current < end) || (step < 0 && current > end) {
        if out.len() >= RANGE_ELEMENTS_MAX {
            return Err(QueryError::new(146, format!("$range would produce more than {RANGE_ELEMENTS_MAX} elements")));
        }
        out.push(Bson::Int32(i32::try_from(current).map_err(|_| {
            QueryError::new(34444, "$range requires values representable as a 32-bit integer")
        })?));
        current += step;
    }
    Ok(Some(Bson::Array(out)))
}

fn eval_reverse(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    match args.eval(0, cx)? {
        None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Bson::Null)),
        Some(Bson::Array(mut items)) => {
            items.reverse();
            Ok(Some(Bson::Array(items)))
        }
        other => Err(QueryError::new(34435, format!("The argument to $reverseArray must be an array, but was of type: {}", type_name(&other)))),
    }
}

fn eval_index_of_array(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let array = args.eval(0, cx)?;
    if is_nullish(&array) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(items)) = array else {
        return Err(QueryError::new(40090, format!("$indexOfArray requires an array as a first argument, found: {}", type_name(&array))));
    };
    let needle = args.eval(1, cx)?.unwrap_or(Bson::Null);
    let start = match args.get(2) {
        None => 0,
        Some(_) => integer(name, &args.eval(2, cx)?, "starting index", 40096)?.max(0) as usize,
    };
    let end = match args.get(3) {
        None => items.len(),
        Some(_) => (integer(name, &args.eval(3, cx)?, "ending index", 40096)?.max(0) as usize).min(items.len()),
    };
    let found = (start..end).find(|&i| cx.equal(&items[i], &needle));
    Ok(Some(Bson::Int32(found.map_or(-1, |i| i32::try_from(i).unwrap_or(i32::MAX)))))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        let d = doc! {"items": [{"item_id": 43, "quantity": 2, "price": 10}, {"item_id": 2, "quantity": 1, "price": 240}], "xs": [1, 2, 3, 4], "n": null};
        Expr::parse(&expr)?.evaluate(&d, &Variables::empty())
    }

    #[test]
    fn size_elem_at_first_last() {
        assert_eq!(eval(bson!({"$size": "$xs"})).unwrap(), Bson::Int32(4));
        assert_eq!(eval(bson!({"$size": "$absent"})).unwrap_err().code, 17124);
        assert_eq!(eval(bson!({"$arrayElemAt": ["$xs", -1]})).unwrap(), Bson::Int32(4));
        assert_eq!(eval(bson!({"$arrayElemAt": ["$xs", 15]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$first": "$xs"})).unwrap(), Bson::Int32(1));
        assert_eq!(eval(bson!({"$last": "$xs"})).unwrap(), Bson::Int32(4));
        assert_eq!(eval(bson!({"$first": "$n"})).unwrap(), Bson::Null);
    }

    #[test]
    fn membership_and_concatenation() {
        assert_eq!(eval(bson!({"$in": [2.0, "$xs"]})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$in": ["x", "$xs"]})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$in": [1, "$absent"]})).unwrap_err().code, 40081);
        assert_eq!(eval(bson!({"$concatArrays": ["$xs", [5]]})).unwrap(), bson!([1, 2, 3, 4, 5]));
        assert_eq!(eval(bson!({"$concatArrays": ["$xs", "$n"]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$indexOfArray": ["$xs", 3]})).unwrap(), Bson::Int32(2));
        assert_eq!(eval(bson!({"$indexOfArray": ["$xs", 9]})).unwrap(), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$isArray": ["$xs"]})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$reverseArray": "$xs"})).unwrap(), bson!([4, 3, 2, 1]));
    }

    #[test]
    fn filter_map_reduce() {
        let filter = bson!({"$filter": {"input": "$items", "as": "item", "cond": {"$gte": ["$$item.price", 100]}}});
        assert_eq!(eval(filter).unwrap(), bson!([{"item_id": 2, "quantity": 1, "price": 240}]));
        let limited = bson!({"$filter": {"input": "$xs", "cond": {"$gt": ["$$this", 1]}, "limit": 2}});
        assert_eq!(eval(limited).unwrap(), bson!([2, 3]));
        assert_eq!(eval(bson!({"$map": {"input": "$xs", "as": "x", "in": {"$multiply": ["$$x", 10]}}})).unwrap(), bson!([10, 20, 30, 40]));
        assert_eq!(eval(bson!({"$map": {"input": "$n", "in": 1}})).unwrap(), Bson::Null);
        let reduce = bson!({"$reduce": {"input": "$xs", "initialValue": {"sum": 0, "product": 1},
            "in": {"sum": {"$add": ["$$value.sum", "$$this"]}, "product": {"$multiply": ["$$value.product", "$$this"]}}}});
        assert_eq!(eval(reduce).unwrap(), bson!({"sum": 10, "product": 24}));
        let strings = bson!({"$reduce": {"input": ["a", "b", "c"], "initialValue": "", "in": {"$concat": ["$$value", "$$this"]}}});
        assert_eq!(eval(strings).unwrap(), Bson::from("abc"));
    }

    #[test]
    fn slice_and_range() {
        assert_eq!(eval(bson!({"$slice": ["$xs", 2]})).unwrap(), bson!([1, 2]));
        assert_eq!(eval(bson!({"$slice": ["$xs", -2]})).unwrap(), bson!([3, 4]));
        assert_eq!(eval(bson!({"$slice": ["$xs", 1, 2]})).unwrap(), bson!([2, 3]));
        assert_eq!(eval(bson!({"$slice": ["$xs", -3, 2]})).unwrap(), bson!([2, 3]));
        assert_eq!(eval(bson!({"$slice": ["$xs", 15, 2]})).unwrap(), bson!([]));
        assert_eq!(eval(bson!({"$range": [0, 10, 2]})).unwrap(), bson!([0, 2, 4, 6, 8]));
        assert_eq!(eval(bson!({"$range": [10, 0, -2]})).unwrap(), bson!([10, 8, 6, 4, 2]));
        assert_eq!(eval(bson!({"$range": [0, 10, -2]})).unwrap(), bson!([]));
        assert_eq!(eval(bson!({"$range": [0, 1, 0]})).unwrap_err().code, 34449);
    }
}
