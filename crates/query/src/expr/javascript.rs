//! `$function` as MongoDB 7.0 runs it with JavaScript disabled (Slipstream
//! has no JavaScript engine): the operator parses and checks its fields,
//! and evaluating it fails with 31264, so a pipeline that never evaluates
//! it (no documents) succeeds, as there.

use bson::Bson;

use super::{Args, Context, Expr, OpSpec, Value};
use crate::error::QueryError;

pub(super) const OPERATORS: &[OpSpec] = &[OpSpec {
    name: "$function",
    style: super::ArgStyle::Custom(parse_function),
    eval: eval_function,
}];

/// MongoDB's checks in its order: an object (31260), `body` present
/// (31261), a constant (31432) string or code (31262), `args` present
/// (31263, any expression), `lang` present (31418) and "js" (31419).
fn parse_function(_: &'static OpSpec, operand: &Bson) -> Result<Args, QueryError> {
    let Bson::Document(spec) = operand else {
        return Err(QueryError::new(
            31260,
            format!(
                "$function requires an object as an argument, found: {}",
                crate::compare::type_name(operand)
            ),
        ));
    };
    let body = spec
        .get("body")
        .ok_or_else(|| QueryError::new(31261, "The body function must be specified."))?;
    let body = Expr::parse(body)?;
    let body = body
        .as_literal()
        .ok_or_else(|| QueryError::new(31432, "The body function must be a constant expression"))?;
    if !matches!(body, Bson::String(_) | Bson::JavaScriptCode(_)) {
        return Err(QueryError::new(
            31262,
            "The body function must evaluate to type string or code",
        ));
    }
    let args = spec
        .get("args")
        .ok_or_else(|| QueryError::new(31263, "The args field must be specified."))?;
    let args = Expr::parse(args)?;
    match spec.get("lang") {
        None => Err(QueryError::new(31418, "The lang field must be specified.")),
        Some(Bson::String(lang)) if lang == "js" => Ok(Args::positional(vec![args])),
        Some(_) => Err(QueryError::new(
            31419,
            "Currently the only supported language specifier is 'js'.",
        )),
    }
}

fn eval_function(_: &'static str, _: &Args, _: &Context) -> Result<Value, QueryError> {
    Err(QueryError::new(
        31264,
        "Cannot run server-side javascript without the javascript engine enabled",
    ))
}
