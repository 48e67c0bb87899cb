//! `$redact`: evaluates an expression at each document level and keeps
//! (`$$KEEP`), removes (`$$PRUNE`) or descends into (`$$DESCEND`) it.
//! `$$ROOT` is the top-level document; `$$CURRENT` the level evaluated.

use bson::{Bson, Document};

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;
use crate::expr::{Expr, Variables};

#[derive(Debug)]
pub(crate) struct RedactStage {
    expr: Expr,
}

enum Verdict {
    Keep,
    Prune,
    Descend,
}

impl RedactStage {
    pub(crate) fn parse(spec: &Bson) -> Result<RedactStage, QueryError> {
        Ok(RedactStage { expr: Expr::parse(spec)? })
    }

    fn verdict(&self, level: &Document, vars: &Variables) -> Result<Verdict, QueryError> {
        match self.expr.evaluate(level, vars)? {
            Bson::String(s) if s == "keep" => Ok(Verdict::Keep),
            Bson::String(s) if s == "prune" => Ok(Verdict::Prune),
            Bson::String(s) if s == "descend" => Ok(Verdict::Descend),
            other => Err(QueryError::new(
                17053,
                format!("$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned {other}"),
            )),
        }
    }

    /// The redacted form of one level, `None` when it is pruned.
    fn redact(&self, level: Document, vars: &Variables) -> Result<Option<Document>, QueryError> {
        match self.verdict(&level, vars)? {
            Verdict::Keep => Ok(Some(level)),
            Verdict::Prune => Ok(None),
            Verdict::Descend => {
                let mut out = Document::new();
                for (name, value) in level {
                    if let Some(kept) = self.redact_value(value, vars)? {
                        out.insert(name, kept);
                    }
                }
                Ok(Some(out))
            }
        }
    }

    fn redact_value(&self, value: Bson, vars: &Variables) -> Result<Option<Bson>, QueryError> {
        match value {
            Bson::Document(d) => Ok(self.redact(d, vars)?.map(Bson::Document)),
            Bson::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if let Some(kept) = self.redact_value(item, vars)? {
                        out.push(kept);
                    }
                }
                Ok(Some(Bson::Array(out)))
            }
            other => Ok(Some(other)),
        }
    }
}

impl Stage for RedactStage {
    /// Only removes parts of documents.
    fn may_deepen(&self) -> bool {
        false
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.filter_map(move |item| {
            let doc = match item {
                Ok(doc) => doc,
                Err(error) => return Some(Err(error)),
            };
            let vars = cx.vars.clone().with_root(&doc);
            self.redact(doc, &vars).transpose()
        }))
    }
}
