//! Comparison, boolean and conditional operators, and `$let`.
//!
//! Expression comparisons use the full BSON order (no type bracketing, as
//! opposed to query filters): `{$gt: ["a", 1]}` is true because strings
//! order above numbers.

use std::cmp::Ordering;

use bson::Bson;

use super::{
    is_nullish, parse_named, truthy, validate_variable_name, ArgStyle, Args,
    Context, Expr, OpSpec, Value,
};
use crate::error::QueryError;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$eq", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$ne", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$gt", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$gte", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$lt", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$lte", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$cmp", style: ArgStyle::Positional { min: 2, max: 2 }, eval: eval_compare },
    OpSpec { name: "$and", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_and },
    OpSpec { name: "$or", style: ArgStyle::Positional { min: 0, max: usize::MAX }, eval: eval_or },
    OpSpec { name: "$not", style: ArgStyle::Positional { min: 1, max: 1 }, eval: eval_not },
    OpSpec { name: "$cond", style: ArgStyle::Custom(parse_cond), eval: eval_cond },
    OpSpec { name: "$ifNull", style: ArgStyle::Positional { min: 2, max: usize::MAX }, eval: eval_if_null },
    OpSpec { name: "$switch", style: ArgStyle::Custom(parse_switch), eval: eval_switch },
    OpSpec { name: "$let", style: ArgStyle::Custom(parse_let), eval: eval_let },
];

fn eval_compare(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let left = args.eval(0, cx)?;
    let right = args.eval(1, cx)?;
    let order = cx.compare(&left, &right);
    let result = match name {
        "$eq" => order == Ordering::Equal,
        "$ne" => order != Ordering::Equal,
        "$gt" => order == Ordering::Greater,
        "$gte" => order != Ordering::Less,
        "$lt" => order == Ordering::Less,
        "$lte" => order != Ordering::Greater,
        _ => {
            let n = match order {
                Ordering::Less => -1,
                Ordering::Equal => 0,
                Ordering::Greater => 1,
            };
            return Ok(Some(Bson::Int32(n)));
        }
    };
    Ok(Some(Bson::Boolean(result)))
}

fn eval_and(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    for i in 0..args.len() {
        if !truthy(&args.eval(i, cx)?) {
            return Ok(Some(Bson::Boolean(false)));
        }
    }
    Ok(Some(Bson::Boolean(true)))
}

fn eval_or(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    for i in 0..args.len() {
        if truthy(&args.eval(i, cx)?) {
            return Ok(Some(Bson::Boolean(true)));
        }
    }
    Ok(Some(Bson::Boolean(false)))
}

fn eval_not(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    Ok(Some(Bson::Boolean(!truthy(&args.eval(0, cx)?))))
}

/// `$cond` takes `[if, then, else]` or `{if, then, else}`.
fn parse_cond(spec: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    match operand {
        Bson::Document(_) => parse_named(spec.name, operand, &["if", "then", "else"], &[]),
        Bson::Array(items) if items.len() == 3 => {
            Ok(Args::positional(items.iter().map(Expr::parse).collect::<Result<_, _>>()?))
        }
        _ => Err(QueryError::new(16020, "Expression $cond takes exactly 3 arguments.")),
    }
}

fn eval_cond(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    if truthy(&args.eval(0, cx)?) {
        args.eval(1, cx)
    } else {
        args.eval(2, cx)
    }
}

/// `$ifNull: [e1, ..., replacement]`: the first non-nullish of the
/// expressions, else the replacement (which may itself be null).
fn eval_if_null(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let last = args.len() - 1;
    for i in 0..last {
        let value = args.eval(i, cx)?;
        if !is_nullish(&value) {
            return Ok(value);
        }
    }
    args.eval(last, cx)
}

/// `$switch: {branches: [{case, then}, ...], default}` is stored as
/// `[case1, then1, case2, then2, ...]` with `names = ["default"]` when a
/// default exists (the default is then the last expression).
fn parse_switch(_: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    let Bson::Document(d) = operand else {
        return Err(QueryError::new(40060, "$switch requires an object as an argument"));
    };
    let mut exprs = Vec::new();
    let mut default = None;
    for (key, value) in d {
        match key.as_str() {
            "branches" => {
                let Bson::Array(branches) = value else {
                    return Err(QueryError::new(40061, "$switch expected an array for 'branches'"));
                };
                for branch in branches {
                    let Bson::Document(b) = branch else {
                        return Err(QueryError::new(40062, "$switch expected each branch to be an object"));
                    };
                    for k in b.keys() {
                        if k != "case" && k != "then" {
                            return Err(QueryError::new(40063, format!("$switch found an unknown argument to a branch: {k}")));
                        }
                    }
                    let case = b.get("case").ok_or_else(|| {
                        QueryError::new(40064, "$switch requires each branch have a 'case' expression")
                    })?;
                    let then = b.get("then").ok_or_else(|| {
                        QueryError::new(40065, "$switch requires each branch have a 'then' expression.")
                    })?;
                    exprs.push(Some(Expr::parse(case)?));
                    exprs.push(Some(Expr::parse(then)?));
                }
            }
            "default" => default = Some(Expr::parse(value)?),
            other => {
                return Err(QueryError::new(40067, format!("$switch found an unknown argument: {other}")))
            }
        }
    }
    if exprs.is_empty() {
        return Err(QueryError::new(40068, "$switch requires at least one branch."));
    }
    let mut names = Vec::new();
    if let Some(default) = default {
        exprs.push(Some(default));
        names.push("default".to_string());
    }
    Ok(Args { exprs, names })
}

fn eval_switch(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let has_default = !args.names.is_empty();
    let branch_exprs = if has_default { args.len() - 1 } else { args.len() };
    for i in (0..branch_exprs).step_by(2) {
        if truthy(&args.eval(i, cx)?) {
            return args.eval(i + 1, cx);
        }
    }
    if has_default {
        return args.eval(args.len() - 1, cx);
    }
    Err(QueryError::new(
        40066,
        "$switch could not find a matching branch for an input, and no default was specified.",
    ))
}

/// `$let: {vars: {name: expr, ...}, in: expr}` is stored as
/// `[in, var1, var2, ...]` with the variable names in `names`.
fn parse_let(_: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    let Bson::Document(d) = operand else {
        return Err(QueryError::new(16874, "$let only supports an object as its argument"));
    };
    for key in d.keys() {
        if key != "vars" && key != "in" {
            return Err(QueryError::new(16875, format!("Unrecognized parameter to $let: {key}")));
        }
    }
    let Some(Bson::Document(vars)) = d.get("vars") else {
        return Err(QueryError::new(16876, "Missing 'vars' parameter to $let"));
    };
    let body = d.get("in").ok_or_else(|| QueryError::new(16877, "Missing 'in' parameter to $let"))?;
    let mut exprs = vec![Some(Expr::parse(body)?)];
    let mut names = Vec::new();
    for (name, value) in vars {
        validate_variable_name(name, false)?;
        names.push(name.clone());
        exprs.push(Some(Expr::parse(value)?));
    }
    Ok(Args { exprs, names })
}

fn eval_let(_: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let mut bindings = Vec::with_capacity(args.names.len());
    for (i, name) in args.names.iter().enumerate() {
        bindings.push((name.clone(), args.eval(i + 1, cx)?));
    }
    cx.with_bindings(bindings, |inner| args.eval(0, inner))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Bson {
        let d = doc! {"qty": 250, "name": "abc", "n": null};
        Expr::parse(&expr).unwrap().evaluate(&d, &Variables::empty()).unwrap()
    }

    #[test]
    fn comparisons_use_bson_order_without_type_bracketing() {
        assert_eq!(eval(bson!({"$gt": ["$qty", 250]})), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$gte": ["$qty", 250]})), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$cmp": ["$qty", 300]})), Bson::Int32(-1));
        assert_eq!(eval(bson!({"$gt": ["$name", 1]})), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$eq": ["$qty", 250.0]})), Bson::Boolean(true));
        // Missing orders below null, as in MongoDB.
        assert_eq!(eval(bson!({"$eq": ["$absent", null]})), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$lt": ["$absent", null]})), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$eq": ["$n", null]})), Bson::Boolean(true));
    }

    #[test]
    fn boolean_operators() {
        assert_eq!(eval(bson!({"$and": [1, "green"]})), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$and": [[], null]})), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$and": []})), Bson::Boolean(true));
        assert_eq!(eval(bson!({"$or": [0, "$absent"]})), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$not": [[false]]})), Bson::Boolean(false));
        assert_eq!(eval(bson!({"$not": [null]})), Bson::Boolean(true));
    }

    #[test]
    fn cond_if_null_switch_let() {
        assert_eq!(eval(bson!({"$cond": {"if": {"$gte": ["$qty", 250]}, "then": 30, "else": 20}})), Bson::Int32(30));
        assert_eq!(eval(bson!({"$cond": [{"$lt": ["$qty", 250]}, 30, 20]})), Bson::Int32(20));
        assert_eq!(eval(bson!({"$ifNull": ["$n", "$absent", "Unspecified"]})), Bson::from("Unspecified"));
        assert_eq!(eval(bson!({"$ifNull": ["$qty", 0]})), Bson::Int32(250));
        let switch = bson!({"$switch": {"branches": [
            {"case": {"$lt": ["$qty", 100]}, "then": "low"},
            {"case": {"$lt": ["$qty", 300]}, "then": "mid"}], "default": "high"}});
        assert_eq!(eval(switch), Bson::from("mid"));
        let no_default = bson!({"$switch": {"branches": [{"case": false, "then": 1}]}});
        let err = Expr::parse(&no_default).unwrap().evaluate(&doc! {}, &Variables::empty()).unwrap_err();
        assert_eq!(err.code, 40066);
        let let_expr = bson!({"$let": {"vars": {"total": {"$add": ["$qty", 10]}, "x": 2}, "in": {"$multiply": ["$$total", "$$x"]}}});
        assert_eq!(eval(let_expr), Bson::Int32(520));
    }

    #[test]
    fn undefined_variable_is_an_error() {
        let err = Expr::parse(&bson!("$$nope")).unwrap().evaluate(&doc! {}, &Variables::empty()).unwrap_err();
        assert_eq!(err.code, 17276);
        assert_eq!(Expr::parse(&bson!({"$let": {"vars": {"Bad": 1}, "in": 1}})).unwrap_err().code, 9);
    }
}
