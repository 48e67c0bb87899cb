//! Array operators that order, pick or combine elements: `$sortArray`,
//! `$zip`, and the expression forms of `$firstN`, `$lastN`, `$maxN`,
//! `$minN`.

use bson::{Bson, Document};

use super::{is_nullish, type_name, ArgStyle, Args, Context, OpSpec, Value};
use crate::error::QueryError;
use crate::sort::SortSpec;

pub(super) static OPERATORS: &[OpSpec] = &[
    OpSpec { name: "$sortArray", style: ArgStyle::Named { required: &["input", "sortBy"], optional: &[] }, eval: eval_sort_array },
    OpSpec { name: "$zip", style: ArgStyle::Named { required: &["inputs"], optional: &["useLongestLength", "defaults"] }, eval: eval_zip },
    OpSpec { name: "$firstN", style: ArgStyle::Named { required: &["n", "input"], optional: &[] }, eval: eval_n },
    OpSpec { name: "$lastN", style: ArgStyle::Named { required: &["n", "input"], optional: &[] }, eval: eval_n },
    OpSpec { name: "$maxN", style: ArgStyle::Named { required: &["n", "input"], optional: &[] }, eval: eval_n },
    OpSpec { name: "$minN", style: ArgStyle::Named { required: &["n", "input"], optional: &[] }, eval: eval_n },
];

fn eval_sort_array(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let input = args.eval(0, cx)?;
    if is_nullish(&input) {
        return Ok(Some(Bson::Null));
    }
    let Some(Bson::Array(mut items)) = input else {
        return Err(QueryError::new(2942504, format!("The input argument to {name} must be an array, but was of type: {}", type_name(&input))));
    };
    match args.eval(1, cx)? {
        // `sortBy: 1` or `-1` orders whole values.
        Some(direction @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))) => {
            let descending = match direction {
                Bson::Int32(1) | Bson::Int64(1) => false,
                Bson::Int32(-1) | Bson::Int64(-1) => true,
                Bson::Double(1.0) => false,
                Bson::Double(-1.0) => true,
                _ => return Err(QueryError::new(2942505, format!("{name}: sortBy must be 1, -1 or a sort pattern"))),
            };
            items.sort_by(|a, b| {
                let order = cx.compare_present(a, b);
                if descending { order.reverse() } else { order }
            });
        }
        // A sort pattern orders documents by their fields; other
        // elements sort as if they were documents without those fields.
        Some(Bson::Document(pattern)) => {
            let spec = SortSpec::parse(&pattern)?.with_collation(cx.vars.collation_ref());
            let empty = Document::new();
            items.sort_by(|a, b| {
                let left = if let Bson::Document(d) = a { d } else { &empty };
                let right = if let Bson::Document(d) = b { d } else { &empty };
                spec.compare(left, right)
            });
        }
        _ => return Err(QueryError::new(2942505, format!("{name}: sortBy must be 1, -1 or a sort pattern"))),
    }
    Ok(Some(Bson::Array(items)))
}

fn eval_zip(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let inputs = args.eval(0, cx)?;
    let Some(Bson::Array(inputs)) = inputs else {
        return Err(QueryError::new(34461, format!("inputs must be an array of expressions, found {}", type_name(&inputs))));
    };
    let mut arrays = Vec::with_capacity(inputs.len());
    for input in inputs {
        match input {
            Bson::Null | Bson::Undefined => return Ok(Some(Bson::Null)),
            Bson::Array(items) => arrays.push(items),
            other => {
                return Err(QueryError::new(34468, format!("{name} found a non-array expression in input: {}", type_name(&Some(other)))))
            }
        }
    }
    let longest = match args.eval(1, cx)? {
        None => false,
        Some(Bson::Boolean(b)) => b,
        other => return Err(QueryError::new(34463, format!("useLongestLength must be a bool, found {}", type_name(&other)))),
    };
    let defaults = match args.get(2) {
        None => vec![Bson::Null; arrays.len()],
        Some(_) => {
            if !longest {
                return Err(QueryError::new(34466, "cannot specify defaults unless useLongestLength is true"));
            }
            match args.eval(2, cx)? {
                Some(Bson::Array(d)) if d.len() == arrays.len() => d,
                _ => return Err(QueryError::new(34467, "defaults and inputs must have the same length")),
            }
        }
    };
    let lengths = arrays.iter().map(Vec::len);
    let length = if longest { lengths.max().unwrap_or(0) } else { lengths.min().unwrap_or(0) };
    let zipped = (0..length)
        .map(|i| {
            let row = arrays.iter().zip(&defaults).map(|(a, d)| a.get(i).cloned().unwrap_or_else(|| d.clone())).collect();
            Bson::Array(row)
        })
        .collect();
    Ok(Some(Bson::Array(zipped)))
}

/// `$firstN`/`$lastN`/`$maxN`/`$minN: {n, input}` over an array.
fn eval_n(name: &'static str, args: &Args, cx: &Context) -> Result<Value, QueryError> {
    let n = match args.eval(0, cx)? {
        Some(v) => match super::arithmetic::Num::from_bson(&v) {
            Some(n) if n.as_f64().fract() == 0.0 && n.as_f64() >= 1.0 => n.as_f64() as usize,
            _ => return Err(QueryError::new(5787908, format!("Value for 'n' must be a positive integral value, found {v}"))),
        },
        None => return Err(QueryError::new(5787906, "Value for 'n' must be a positive integral value, found missing")),
    };
    let input = args.eval(1, cx)?;
    let Some(Bson::Array(items)) = input else {
        return Err(QueryError::new(5788200, format!("Input to {name} must be an array, found {}", type_name(&input))));
    };
    let picked: Vec<Bson> = match name {
        "$firstN" => items.into_iter().take(n).collect(),
        "$lastN" => {
            let skip = items.len().saturating_sub(n);
            items.into_iter().skip(skip).collect()
        }
        _ => {
            // $maxN/$minN ignore null and missing values.
            let mut values: Vec<Bson> = items.into_iter().filter(|v| !matches!(v, Bson::Null | Bson::Undefined)).collect();
            values.sort_by(|a, b| {
                let order = cx.compare_present(a, b);
                if name == "$maxN" { order.reverse() } else { order }
            });
            values.truncate(n);
            values
        }
    };
    Ok(Some(Bson::Array(picked)))
}

#[cfg(test)]
mod tests {
    use crate::expr::{Expr, Variables};
    use bson::{bson, doc, Bson};

    fn eval(expr: Bson) -> Result<Bson, crate::QueryError> {
        Expr::parse(&expr)?.evaluate(&doc! {"xs": [3, 1, null, 2], "team": [{"name": "pat", "age": 42}, {"name": "dallas", "age": 36}]}, &Variables::empty())
    }

    #[test]
    fn sort_array() {
        assert_eq!(eval(bson!({"$sortArray": {"input": [3, "a", 1, null], "sortBy": 1}})).unwrap(), bson!([null, 1, 3, "a"]));
        assert_eq!(eval(bson!({"$sortArray": {"input": [3, 1, 2], "sortBy": -1}})).unwrap(), bson!([3, 2, 1]));
        assert_eq!(
            eval(bson!({"$sortArray": {"input": "$team", "sortBy": {"age": 1}}})).unwrap(),
            bson!([{"name": "dallas", "age": 36}, {"name": "pat", "age": 42}])
        );
    }

    #[test]
    fn zip() {
        assert_eq!(eval(bson!({"$zip": {"inputs": [[1, 2, 3], ["a", "b"]]}})).unwrap(), bson!([[1, "a"], [2, "b"]]));
        assert_eq!(
            eval(bson!({"$zip": {"inputs": [[1, 2, 3], ["a"]], "useLongestLength": true, "defaults": [0, "z"]}})).unwrap(),
            bson!([[1, "a"], [2, "z"], [3, "z"]])
        );
        assert_eq!(eval(bson!({"$zip": {"inputs": [[1], null]}})).unwrap(), Bson::Null);
    }

    #[test]
    fn n_operators() {
        assert_eq!(eval(bson!({"$firstN": {"n": 2, "input": "$xs"}})).unwrap(), bson!([3, 1]));
        assert_eq!(eval(bson!({"$lastN": {"n": 2, "input": "$xs"}})).unwrap(), bson!([null, 2]));
        assert_eq!(eval(bson!({"$maxN": {"n": 2, "input": "$xs"}})).unwrap(), bson!([3, 2]));
        assert_eq!(eval(bson!({"$minN": {"n": 5, "input": "$xs"}})).unwrap(), bson!([1, 2, 3]));
        assert_eq!(eval(bson!({"$firstN": {"n": 0, "input": "$xs"}})).unwrap_err().code, 5787908);
    }
}
