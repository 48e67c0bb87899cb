//! The seed document of an upsert: the filter's equality fields, dotted
//! paths expanded into subdocuments, `_id` first.

use bson::{Bson, Document};

use crate::error::QueryError;

/// MongoDB's NotSingleValueField: one path matched twice by a query.
const NOT_SINGLE_VALUE_FIELD: i32 = 54;

/// The seed document of an upsert: the filter's top-level equality
/// fields (dotted paths expanded into subdocuments, _id first if
/// present); error on conflicting paths.
pub fn upsert_seed(equalities: &[(String, Bson)]) -> Result<Document, QueryError> {
    for (i, (a, _)) in equalities.iter().enumerate() {
        for (b, _) in &equalities[..i] {
            if a == b {
                return Err(QueryError::new(
                    NOT_SINGLE_VALUE_FIELD,
                    format!("cannot infer query fields to set, path '{a}' is matched twice"),
                ));
            }
            let nested = |short: &str, long: &str| {
                long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b'.')
            };
            if nested(a, b) || nested(b, a) {
                return Err(QueryError::new(
                    NOT_SINGLE_VALUE_FIELD,
                    format!(
                        "cannot infer query fields to set, both paths '{b}' and '{a}' are matched"
                    ),
                ));
            }
        }
    }
    let mut seed = Document::new();
    let ids = equalities
        .iter()
        .filter(|(path, _)| path == "_id" || path.starts_with("_id."));
    let others = equalities
        .iter()
        .filter(|(path, _)| !(path == "_id" || path.starts_with("_id.")));
    for (path, value) in ids.chain(others) {
        insert_path(&mut seed, path, value.clone())?;
    }
    Ok(seed)
}

fn insert_path(root: &mut Document, path: &str, value: Bson) -> Result<(), QueryError> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(QueryError::new(
            crate::error::codes::EMPTY_FIELD_NAME,
            format!("The upsert path '{path}' contains an empty field name"),
        ));
    }
    let (last, parents) = parts.split_last().expect("split yields at least one part");
    let mut node = root;
    for part in parents {
        if !node.contains_key(*part) {
            node.insert(*part, Document::new());
        }
        node = match node.get_mut(*part) {
            Some(Bson::Document(child)) => child,
            // Pairwise checks above rule out a scalar on the way, since
            // only equality paths inserted here create values.
            _ => {
                return Err(QueryError::new(
                    NOT_SINGLE_VALUE_FIELD,
                    format!("cannot infer query fields to set, path '{path}' crosses a value"),
                ))
            }
        };
    }
    node.insert(*last, value);
    Ok(())
}
