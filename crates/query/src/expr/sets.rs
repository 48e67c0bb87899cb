//! Set operators over arrays (`$setUnion`, `$setIntersection`,
//! `$setDifference`, `$setEquals`, `$setIsSubset`) and
//! `$anyElementTrue`/`$allElementsTrue`. Sets compare elements with BSON
//! equality (so `1` and `1.0` are one element); results keep first-seen
//! order, which MongoDB leaves unspecified.

use bson::Bson;

use super::{is_nullish, is_truthy, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$setUnion", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_union },
    OpSpec { name: "$setIntersection", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_intersection },
    OpSpec { name: "$setDifference", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_difference },
    OpSpec { name: "$setEquals", style: ArgStyle::Positional { min: 2, max: usize::MAX }, eval: eval_equals },
    OpSpec { name: "$setIsSubset", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_is_subset },
    OpSpec { name: "$anyElementTrue", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_element_truth },
    OpSpec { name: "$allElementsTrue", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_element_truth },
];

/// Whether `set` holds `value`, equal under the operation's collation.
fn contains(cx: &Context, set: &[Bson], value: &Bson) -> bool {
    set.iter().any(|member| cx.equal(member, value))
}

/// The distinct elements of `items`, in first-seen order.
fn distinct(cx: &Context, items: Vec<Bson>) -> Vec<Bson> {
    let mut out: Vec<Bson> = Vec::with_capacity(items.len());
    for item in items {
        if !contains(cx, &out, &item) {
            out.push(item);
        }
    }
    out
}

/// Every argument as an array; `None` when one is nullish (the result is
/// then null); an error for any other non-array.
fn arrays(name: &str, args: &Args, cx: &Context, code: i32) -> Result<Option<Vec<Vec<Bson>>>, QueryError> {
    let mut out = Vec::with_capacity(args.len());
    for value in args.eval_all(cx)? {
        match value {
            Some(Bson::Array(items)) => out.push(items),
            nullish if is_nullish(&nullish) => return Ok(None),
            other => {
                return Err(QueryError::new(code, format!("All operands of {name} must be arrays. One argument is of type: {}", type_name(&other))))
            }
        }
    }
    Ok(Some(out))
}

fn eval_union(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(sets) = arrays(name, args, cx, 17043)? else { return Ok(Some(Bson::Null)) };
    Ok(Some(Bson::Array(distinct(cx, sets.into_iter().flatten().collect()))))
}

fn eval_intersection(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(mut sets) = arrays(name, args, cx, 17047)? else { return Ok(Some(Bson::Null)) };
    if sets.is_empty() {
        return Ok(Some(Bson::Array(Vec::new())));
    }
    let first = distinct(cx, sets.remove(0));
    let common = first.into_iter().filter(|item| sets.iter().all(|set| contains(cx, set, item))).collect();
    Ok(Some(Bson::Array(common)))
}

fn eval_difference(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let Some(sets) = arrays(name, args, cx, 17048)? else { return Ok(Some(Bson::Null)) };
    let first = distinct(cx, sets[0].clone());
    let rest: Vec<Bson> = first.into_iter().filter(|item| !contains(cx, &sets[1], item)).collect();
    Ok(Some(Bson::Array(rest)))
}

/// Arrays required, null not accepted (`$setEquals`, `$setIsSubset`).
fn strict_arrays(name: &str, args: &Args, cx: &Context, code: i32) -> Result<Vec<Vec<Bson>>, QueryError> {
    args.eval_all(cx)?
        .into_iter()
        .map(|value| match value {
            Some(Bson::Array(items)) => Ok(items),
            other => Err(QueryError::new(code, format!("All operands of {name} must be arrays. One argument is of type: {}", type_name(&other)))),
        })
        .collect()
}

fn eval_equals(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let sets = strict_arrays(name, args, cx, 17044)?;
    let first = &sets[0];
    let equal = sets[1..].iter().all(|set| {
        set.iter().all(|item| contains(cx, first, item)) && first.iter().all(|item| contains(cx, set, item))
    });
    Ok(Some(Bson::Boolean(equal)))
}

fn eval_is_subset(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let sets = strict_arrays(name, args, cx, 17046)?;
    Ok(Some(Bson::Boolean(sets[0].iter().all(|item| contains(cx, &sets[1], item)))))
}

fn eval_element_truth(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let value = args.eval(0, cx)?;
    let Some(Bson::Array(items)) = value else {
        return Err(QueryError::new(17040, format!("{name}'s argument must be an array, but is {}", type_name(&value))));
    };
    let result = if name == "$anyElementTrue" { items.iter().any(is_truthy) } else { items.iter().all(is_truthy) };
    Ok(Some(Bson::Boolean(result)))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {"a": ["a", "b", "a"], "b": ["b", "c"], "n": null}, &Variables::empty())
    }

    #[test]
    fn documented_set_examples() {
        assert_eq!(eval(bson!({"$setUnion": ["$a", "$b"]})).unwrap(), bson!(["a", "b", "c"]));
        assert_eq!(eval(bson!({"$setIntersection": ["$a", "$b"]})).unwrap(), bson!(["b"]));
        assert_eq!(eval(bson!({"$setDifference": ["$a", "$b"]})).unwrap(), bson!(["a"]));
        assert_eq!(eval(bson!({"$setEquals": [["a", "b", "a"], ["b", "a"]]})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$setIsSubset": [["a"], "$a"]})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$setUnion": ["$a", "$n"]})).unwrap(), Bson::Null);
        assert_eq!(eval(bson!({"$setUnion": [[1], [1.0, 2]]})).unwrap(), bson!([1, 2]));
        assert_eq!(eval(bson!({"$setEquals": ["$a", "$n"]})).unwrap_err().code, 17044);
        assert_eq!(eval(bson!({"$anyElementTrue": [[false, 0, [false]]]})).unwrap(), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$allElementsTrue": [[true, 1, null]]})).unwrap(), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$allElementsTrue": [[]]})).unwrap(), Bson::Boolean(true));
    }
}
