//! `$unwind`: one output document per element of an array field.

use bson::{Bson, Document};

use super::fields::{get_path, remove_path, set_path, split_path};
use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;

#[derive(Debug)]
pub(crate) struct UnwindStage {
    path: Vec<String>,
    include_array_index: Option<Vec<String>>,
    preserve_null_and_empty_arrays: bool,
}

fn field_path(option: &str, value: &Bson) -> Result<Vec<String>, QueryError> {
    match value {
        Bson::String(s) if s.starts_with('$') => split_path("$unwind", &s[1..]),
        Bson::String(s) => Err(QueryError::new(28818, format!("{option} option to $unwind stage should be prefixed with a '$': {s}"))),
        other => Err(QueryError::new(28808, format!("expected a string as the path for $unwind stage, got {}", crate::expr::type_name(&Some(other.clone()))))),
    }
}

impl UnwindStage {
    pub(crate) fn parse(spec: &Bson) -> Result<UnwindStage, QueryError> {
        let Bson::Document(options) = spec else {
            return Ok(UnwindStage { path: field_path("path", spec)?, include_array_index: None, preserve_null_and_empty_arrays: false });
        };
        let mut stage = UnwindStage { path: Vec::new(), include_array_index: None, preserve_null_and_empty_arrays: false };
        for (key, value) in options {
            match key.as_str() {
                "path" => stage.path = field_path("path", value)?,
                "includeArrayIndex" => match value {
                    Bson::String(s) if !s.starts_with('$') => stage.include_array_index = Some(split_path("$unwind", s)?),
                    _ => return Err(QueryError::new(28822, "includeArrayIndex option to $unwind stage should not be prefixed with a '$'")),
                },
                "preserveNullAndEmptyArrays" => match value {
                    Bson::Boolean(b) => stage.preserve_null_and_empty_arrays = *b,
                    _ => return Err(QueryError::new(28809, "expected a boolean for the preserveNullAndEmptyArrays option to $unwind stage")),
                },
                other => return Err(QueryError::new(28811, format!("unrecognized option to $unwind stage: {other}"))),
            }
        }
        if stage.path.is_empty() {
            return Err(QueryError::new(28812, "no path specified to $unwind stage"));
        }
        Ok(stage)
    }

    /// The documents one input document unwinds into.
    fn unwind(&self, doc: Document) -> Vec<Document> {
        let value = get_path(&doc, &self.path).cloned();
        match value {
            Some(Bson::Array(items)) if !items.is_empty() => items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    let mut out = doc.clone();
                    set_path(&mut out, &self.path, item);
                    self.set_index(&mut out, Bson::Int64(index as i64));
                    out
                })
                .collect(),
            Some(Bson::Array(_)) => {
                if !self.preserve_null_and_empty_arrays {
                    return Vec::new();
                }
                // An empty array is removed from the preserved document.
                let mut out = doc;
                remove_path(&mut out, &self.path);
                self.set_index(&mut out, Bson::Null);
                vec![out]
            }
            None | Some(Bson::Null | Bson::Undefined) => {
                if !self.preserve_null_and_empty_arrays {
                    return Vec::new();
                }
                let mut out = doc;
                self.set_index(&mut out, Bson::Null);
                vec![out]
            }
            // A non-array value is treated as a one-element array.
            Some(_) => {
                let mut out = doc;
                self.set_index(&mut out, Bson::Null);
                vec![out]
            }
        }
    }

    fn set_index(&self, doc: &mut Document, index: Bson) {
        if let Some(path) = &self.include_array_index {
            set_path(doc, path, index);
        }
    }
}

impl Stage for UnwindStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, _: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.flat_map(move |item| -> Vec<Result<Document, QueryError>> {
            match item {
                Ok(doc) => self.unwind(doc).into_iter().map(Ok).collect(),
                Err(error) => vec![Err(error)],
            }
        }))
    }
}
