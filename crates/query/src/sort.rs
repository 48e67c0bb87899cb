//! Sort specifications (`sort: {a: 1, "b.c": -1}`) and the comparison of
//! documents under one.
//!
//! A document's key for one sort field follows MongoDB: the values the path
//! reaches, with arrays at the end of the path replaced by their elements;
//! an ascending sort uses the smallest of them and a descending sort the
//! largest. A missing field sorts as null and an empty array as `undefined`
//! (just below null), as in MongoDB's sort-key generator.

use std::cmp::Ordering;

use bson::{Bson, Document};

use crate::collation::{compare_with, CollationRef};
use crate::compare::{as_number, Number};
use crate::error::QueryError;
use crate::path::{any_candidate, FieldPath, LeafArrays};

/// One field of a sort.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SortField {
    pub path: String,
    pub descending: bool,
}

/// A parsed sort specification; no fields means "any order".
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SortSpec {
    pub fields: Vec<SortField>,
    /// The collation strings sort by (`None`: by bytes).
    pub collation: CollationRef,
}

/// MongoDB caps a sort pattern at 32 fields, like a compound index.
const SORT_FIELDS_MAX: usize = 32;

impl SortSpec {
    pub fn parse(spec: &Document) -> Result<SortSpec, QueryError> {
        if spec.len() > SORT_FIELDS_MAX {
            return Err(QueryError::bad_value(format!(
                "sort pattern has more than {SORT_FIELDS_MAX} fields"
            )));
        }
        let mut fields = Vec::with_capacity(spec.len());
        for (path, direction) in spec {
            validate_path(path)?;
            let descending = match direction {
                Bson::Document(meta) if meta.contains_key("$meta") => {
                    return Err(QueryError::new(
                        crate::error::codes::COMMAND_NOT_SUPPORTED,
                        format!(
                            "sort by {{$meta: {}}} is not supported by Slipstream",
                            meta.get("$meta").map(|m| m.to_string()).unwrap_or_default()
                        ),
                    ))
                }
                other => parse_direction(other)?,
            };
            fields.push(SortField {
                path: path.clone(),
                descending,
            });
        }
        Ok(SortSpec { fields, collation: None })
    }

    /// The same sort with strings ordered by `collation`.
    pub fn with_collation(mut self, collation: CollationRef) -> SortSpec {
        self.collation = collation;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Orders two documents; equal keys compare `Equal` (callers use a
    /// stable sort so that ties keep their input order).
    pub fn compare(&self, a: &Document, b: &Document) -> Ordering {
        for field in &self.fields {
            let path = FieldPath::new(&field.path);
            let left = self.key(a, &path, field.descending);
            let right = self.key(b, &path, field.descending);
            let order = compare_with(self.collation.as_deref(), &left, &right);
            let order = if field.descending {
                order.reverse()
            } else {
                order
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        Ordering::Equal
    }

    /// The key of `doc` for each field, for callers that sort many
    /// documents and want to compute keys once (`compare_keys`).
    pub fn keys(&self, doc: &Document) -> Vec<Bson> {
        self.fields
            .iter()
            .map(|field| self.key(doc, &FieldPath::new(&field.path), field.descending))
            .collect()
    }

    fn key(&self, doc: &Document, path: &FieldPath, descending: bool) -> Bson {
        match self.collation.as_deref() {
            None => sort_key(doc, path, descending),
            Some(collation) => sort_key_by(doc, path, descending, &|a, b| collation.compare(a, b)),
        }
    }

    /// Orders two key vectors produced by `keys`.
    pub fn compare_keys(&self, a: &[Bson], b: &[Bson]) -> Ordering {
        for ((field, left), right) in self.fields.iter().zip(a).zip(b) {
            let order = compare_with(self.collation.as_deref(), left, right);
            let order = if field.descending {
                order.reverse()
            } else {
                order
            };
            if order != Ordering::Equal {
                return order;
            }
        }
        Ordering::Equal
    }
}

fn validate_path(path: &str) -> Result<(), QueryError> {
    crate::depth::check_field_path(path)?;
    if path.is_empty() || path.split('.').any(str::is_empty) {
        return Err(QueryError::bad_value(format!(
            "sort key '{path}' has an empty field name"
        )));
    }
    if path.starts_with('$') {
        return Err(QueryError::bad_value(format!(
            "FieldPath field names may not start with '$': {path}"
        )));
    }
    Ok(())
}

fn parse_direction(direction: &Bson) -> Result<bool, QueryError> {
    let value = match as_number(direction) {
        Some(Number::Int(n)) => n as f64,
        Some(Number::Float(f)) => f,
        None => f64::NAN,
    };
    if value == 1.0 {
        Ok(false)
    } else if value == -1.0 {
        Ok(true)
    } else {
        Err(QueryError::new(
            15975,
            "$sort key ordering must be 1 (for ascending) or -1 (for descending)",
        ))
    }
}

/// The value `doc` sorts by on `path`: the least candidate ascending, the
/// greatest descending.
pub fn sort_key(doc: &Document, path: &FieldPath, descending: bool) -> Bson {
    sort_key_by(doc, path, descending, &crate::compare::compare_values)
}

/// `sort_key` with values ordered by `compare` (a collation's order).
fn sort_key_by(doc: &Document, path: &FieldPath, descending: bool, compare: &dyn Fn(&Bson, &Bson) -> Ordering) -> Bson {
    let mut best: Option<&Bson> = None;
    any_candidate(doc, path, LeafArrays::ElementsOnly, &mut |candidate| {
        let value = candidate.value.unwrap_or(&Bson::Null);
        let better = match best {
            None => true,
            Some(current) => {
                let order = compare(value, current);
                if descending {
                    order == Ordering::Greater
                } else {
                    order == Ordering::Less
                }
            }
        };
        if better {
            best = Some(value);
        }
        false
    });
    best.cloned().unwrap_or(Bson::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn meta_sort_is_rejected_by_name() {
        let err = SortSpec::parse(&doc! {"score": {"$meta": "textScore"}}).unwrap_err();
        assert!(err.message.contains("$meta"), "{err}");
    }

    #[test]
    fn direction_must_be_one_or_minus_one() {
        assert_eq!(SortSpec::parse(&doc! {"a": 2}).unwrap_err().code, 15975);
        assert!(SortSpec::parse(&doc! {"a": -1.0}).unwrap().fields[0].descending);
    }
}
