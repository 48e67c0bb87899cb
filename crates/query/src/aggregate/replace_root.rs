//! `$replaceRoot: {newRoot: <expr>}` and `$replaceWith: <expr>`.

use bson::Bson;

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;
use crate::expr::{type_name, Expr};

#[derive(Debug)]
pub(crate) struct ReplaceRootStage {
    new_root: Expr,
}

impl ReplaceRootStage {
    pub(crate) fn parse(name: &str, spec: &Bson) -> Result<ReplaceRootStage, QueryError> {
        let expression = if name == "$replaceWith" {
            spec
        } else {
            let Bson::Document(d) = spec else {
                return Err(QueryError::new(40229, "expected an object as specification for $replaceRoot stage"));
            };
            if let Some(other) = d.keys().find(|k| *k != "newRoot") {
                return Err(QueryError::new(40415, format!("BSON field '$replaceRoot.{other}' is an unknown field.")));
            }
            d.get("newRoot").ok_or_else(|| {
                QueryError::new(40414, "BSON field '$replaceRoot.newRoot' is missing but a required field")
            })?
        };
        Ok(ReplaceRootStage { new_root: Expr::parse(expression)? })
    }
}

impl Stage for ReplaceRootStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.map(move |item| {
            let doc = item?;
            match self.new_root.evaluate_optional(&doc, &cx.vars)? {
                Some(Bson::Document(root)) => Ok(root),
                other => Err(QueryError::new(
                    40228,
                    format!(
                        "'replacement document' must evaluate to an object, but resulting value was: {}. Type of resulting value: '{}'. Input document: {doc}",
                        other.clone().map_or("MISSING".to_string(), |v| v.to_string()),
                        type_name(&other)
                    ),
                )),
            }
        }))
    }
}
