//! Parsing index key patterns (`{a: 1, "b.c": -1}`).

use bson::{Bson, Document};

use crate::compare::{as_number, Number};
use crate::error::QueryError;

/// MongoDB error code CannotCreateIndex.
pub const CANNOT_CREATE_INDEX: i32 = 67;

/// A key pattern field: the dotted path and its direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyField {
    pub path: String,
    pub descending: bool,
}

/// The parsed key pattern of an index, e.g. `{a: 1, "b.c": -1}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub fields: Vec<KeyField>,
    /// The index's collation: string values are keyed by their sort keys
    /// (`None`: by their bytes).
    pub collation: crate::collation::CollationRef,
}

impl KeyPattern {
    /// The same pattern keyed under `collation`.
    pub fn with_collation(mut self, collation: crate::collation::CollationRef) -> KeyPattern {
        self.collation = collation;
        self
    }

    /// Parses an index key pattern. Only ascending/descending btree fields
    /// are supported; special index types answer CannotCreateIndex (67)
    /// naming the type, never a silently wrong index.
    pub fn parse(key: &Document) -> Result<KeyPattern, QueryError> {
        if key.is_empty() {
            return Err(QueryError::new(
                CANNOT_CREATE_INDEX,
                "Index keys cannot be empty.",
            ));
        }
        let mut fields = Vec::with_capacity(key.len());
        for (path, value) in key {
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("Index key contains an illegal field name: '{path}'"),
                ));
            }
            if path == "$**" || path.ends_with(".$**") {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("wildcard indexes are not supported (key '{path}')"),
                ));
            }
            if path.starts_with('$') {
                return Err(QueryError::new(
                    CANNOT_CREATE_INDEX,
                    format!("Index key contains an illegal field name: field name starts with '$': '{path}'"),
                ));
            }
            let descending = match value {
                Bson::String(kind) => {
                    let known = [
                        "text",
                        "2dsphere",
                        "2d",
                        "hashed",
                        "geoHaystack",
                        "columnstore",
                    ];
                    let message = if known.contains(&kind.as_str()) {
                        format!("'{kind}' indexes are not supported (key '{path}')")
                    } else {
                        format!("Unknown index plugin '{kind}'")
                    };
                    return Err(QueryError::new(CANNOT_CREATE_INDEX, message));
                }
                other => match as_number(other) {
                    Some(n) => {
                        let sign = match n {
                            Number::Int(i) => i.signum() as f64,
                            Number::Float(f) if f.is_nan() => 0.0,
                            Number::Float(f) => f,
                        };
                        if sign == 0.0 {
                            return Err(QueryError::new(
                                CANNOT_CREATE_INDEX,
                                format!("Values in v:2 index key pattern cannot be of value 0 (key '{path}')"),
                            ));
                        }
                        sign < 0.0
                    }
                    None => {
                        return Err(QueryError::new(
                            CANNOT_CREATE_INDEX,
                            format!(
                            "Values in v:2 index key pattern cannot be of type {} (key '{path}')",
                            type_name(other)
                        ),
                        ))
                    }
                },
            };
            fields.push(KeyField {
                path: path.clone(),
                descending,
            });
        }
        Ok(KeyPattern { fields, collation: None })
    }
}

fn type_name(value: &Bson) -> &'static str {
    match value {
        Bson::Boolean(_) => "bool",
        Bson::Null => "null",
        Bson::Document(_) => "object",
        Bson::Array(_) => "array",
        Bson::ObjectId(_) => "objectId",
        Bson::DateTime(_) => "date",
        _ => "non-numeric",
    }
}
