//! `$percentile` and `$median` (MongoDB 7.0, whose only `method` is
//! "approximate"), as `$group` accumulators and as expressions over an
//! array. Non-numeric inputs are ignored; with none left the result is
//! null (`$median`) or an array of nulls (`$percentile`).
//!
//! MongoDB computes "approximate" percentiles with a t-digest; here every
//! numeric input is kept and the percentile is the nearest-rank one (the
//! smallest input with at least `p` of the inputs at or below it), an
//! exact answer within the approximation MongoDB documents. An accumulator
//! keeps 8 bytes per input, charged to `$group`'s memory limit.

use bson::Bson;

use crate::compare::{as_number, Number};
use crate::error::{codes, QueryError};
use crate::expr::Expr;

/// One parsed `$percentile` / `$median`: the percentiles it reports, and
/// whether it reports one scalar (`$median`).
#[derive(Clone, Debug)]
pub struct QuantileSpec {
    pub input: Expr,
    ps: Vec<f64>,
    median: bool,
}

/// Whether the operator is `$median` (else `$percentile`).
fn is_median(name: &str) -> bool {
    name == "$median"
}

impl QuantileSpec {
    /// Parses `{input, p, method}` (`{input, method}` for `$median`) as
    /// MongoDB's IDL does: unknown fields 40415, a wrong `method` type 14,
    /// a method other than "approximate" BadValue, then missing fields
    /// 40414 in declaration order; `not_object_code` is the operator's own
    /// code for an argument that is not an object.
    pub fn parse(name: &str, operand: &Bson, not_object_code: i32) -> Result<QuantileSpec, QueryError> {
        let Bson::Document(spec) = operand else {
            return Err(QueryError::new(
                not_object_code,
                format!("specification must be an object; found {name}: {operand}"),
            ));
        };
        let known: &[&str] = if is_median(name) {
            &["input", "method"]
        } else {
            &["input", "p", "method"]
        };
        for (field, value) in spec {
            if !known.contains(&field.as_str()) {
                return Err(QueryError::new(
                    40415,
                    format!("BSON field '{name}.{field}' is an unknown field."),
                ));
            }
            if field == "method" {
                check_method(name, value)?;
            }
        }
        for field in known {
            if !spec.contains_key(field) {
                return Err(QueryError::new(
                    40414,
                    format!("BSON field '{name}.{field}' is missing but a required field"),
                ));
            }
        }
        let input = Expr::parse(spec.get("input").expect("checked above"))?;
        let ps = if is_median(name) {
            vec![0.5]
        } else {
            parse_p(spec.get("p").expect("checked above"))?
        };
        Ok(QuantileSpec {
            input,
            ps,
            median: is_median(name),
        })
    }

    /// The result over `values` (the numeric inputs, in any order).
    pub fn finish(&self, values: &mut [f64]) -> Bson {
        result(&self.ps, self.median, values)
    }

    /// The percentiles, as the expression form carries them.
    pub fn ps(&self) -> &[f64] {
        &self.ps
    }
}

/// The result over `values` for percentiles `ps` (one scalar when
/// `median`).
pub fn result(ps: &[f64], median: bool, values: &mut [f64]) -> Bson {
    if values.is_empty() {
        return if median {
            Bson::Null
        } else {
            Bson::Array(vec![Bson::Null; ps.len()])
        };
    }
    values.sort_by(f64::total_cmp);
    let mut results = ps.iter().map(|p| Bson::Double(nearest_rank(values, *p)));
    if median {
        results.next().expect("a median has one percentile")
    } else {
        Bson::Array(results.collect())
    }
}

/// The expression form's inputs: the numeric elements of an array, or a
/// numeric value alone.
pub fn expression_inputs(input: Option<Bson>) -> Vec<f64> {
    match input {
        Some(Bson::Array(items)) => items.iter().filter_map(numeric).collect(),
        Some(other) => numeric(&other).into_iter().collect(),
        None => Vec::new(),
    }
}

/// The value of a number as a double; `None` for other types.
pub fn numeric(value: &Bson) -> Option<f64> {
    match as_number(value)? {
        Number::Int(n) => Some(n as f64),
        Number::Float(x) => Some(x),
    }
}

fn check_method(name: &str, method: &Bson) -> Result<(), QueryError> {
    match method {
        Bson::String(method) if method == "approximate" => Ok(()),
        Bson::String(_) => Err(QueryError::bad_value(
            "Currently only 'approximate' can be used as percentile 'method'.",
        )),
        other => Err(QueryError::new(
            codes::TYPE_MISMATCH,
            format!(
                "BSON field '{name}.method' is the wrong type '{}', expected type 'string'",
                crate::compare::type_name(other)
            ),
        )),
    }
}

/// `p`: a constant array (7750300 otherwise) of one or more (7750301)
/// numbers (7750302) in [0, 1] (7750303).
fn parse_p(p: &Bson) -> Result<Vec<f64>, QueryError> {
    let constant = Expr::parse(p)?.constant_value().ok_or_else(|| {
        QueryError::new(
            7750300,
            format!("The $percentile 'p' field must be an array of constant values, but found value: {p}."),
        )
    })?;
    let message = "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: ";
    let items = match &constant {
        Bson::Array(items) if !items.is_empty() => items,
        other => return Err(QueryError::new(7750301, format!("{message}{other}"))),
    };
    items
        .iter()
        .map(|item| {
            let p = numeric(item).ok_or_else(|| QueryError::new(7750302, format!("{message}{item}")))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(QueryError::new(7750303, format!("{message}{p}")));
            }
            Ok(p)
        })
        .collect()
}

/// The smallest of the sorted values with at least `p` of them at or
/// below it.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    assert!(!sorted.is_empty(), "nearest_rank of no values");
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let spec = QuantileSpec::parse(
            "$percentile",
            &bson::bson!({"input": "$x", "p": [0.0, 0.5, 0.9, 1.0], "method": "approximate"}),
            1,
        )
        .unwrap();
        let mut values: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        assert_eq!(spec.finish(&mut values), bson::bson!([1.0, 5.0, 9.0, 10.0]));
        assert_eq!(spec.finish(&mut []), bson::bson!([null, null, null, null]));
    }

    #[test]
    fn arguments_are_checked_as_mongodb_does() {
        let code = |name: &str, spec: Bson| QuantileSpec::parse(name, &spec, 7436200).unwrap_err().code;
        assert_eq!(code("$percentile", Bson::Int32(1)), 7436200);
        assert_eq!(
            code(
                "$percentile",
                bson::bson!({"input": 1, "p": [0.5], "method": "approximate", "x": 1})
            ),
            40415
        );
        assert_eq!(
            code("$percentile", bson::bson!({"input": 1, "p": [0.5], "method": "exact"})),
            2
        );
        assert_eq!(
            code("$percentile", bson::bson!({"input": 1, "p": [0.5], "method": 1})),
            14
        );
        assert_eq!(
            code("$percentile", bson::bson!({"input": 1, "method": "approximate"})),
            40414
        );
        assert_eq!(
            code(
                "$percentile",
                bson::bson!({"input": 1, "p": "$a", "method": "approximate"})
            ),
            7750300
        );
        assert_eq!(
            code(
                "$percentile",
                bson::bson!({"input": 1, "p": [], "method": "approximate"})
            ),
            7750301
        );
        assert_eq!(
            code(
                "$percentile",
                bson::bson!({"input": 1, "p": ["a"], "method": "approximate"})
            ),
            7750302
        );
        assert_eq!(
            code(
                "$percentile",
                bson::bson!({"input": 1, "p": [1.5], "method": "approximate"})
            ),
            7750303
        );
        assert_eq!(
            code(
                "$median",
                bson::bson!({"input": 1, "p": [0.5], "method": "approximate"})
            ),
            40415
        );
    }
}
