//! Dotted paths as stages address fields: through sub-documents only
//! (arrays are not traversed), creating intermediate documents on write.

use bson::{Bson, Document};

use crate::error::QueryError;

/// Splits and validates a dotted field path of a stage argument.
pub(crate) fn split_path(stage: &str, path: &str) -> Result<Vec<String>, QueryError> {
    if path.is_empty() {
        return Err(QueryError::new(40352, format!("{stage}: FieldPath cannot be constructed with empty string")));
    }
    crate::depth::check_field_path(path)?;
    let parts: Vec<String> = path.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(QueryError::new(15998, format!("{stage}: FieldPath field names may not be empty strings.")));
        }
        if part.starts_with('$') {
            return Err(QueryError::new(16410, format!("{stage}: FieldPath field names may not start with '$'. ('{part}')")));
        }
    }
    Ok(parts)
}

/// The value at `parts`, following documents only.
pub(crate) fn get_path<'a>(doc: &'a Document, parts: &[String]) -> Option<&'a Bson> {
    let (first, rest) = parts.split_first()?;
    let value = doc.get(first)?;
    if rest.is_empty() {
        return Some(value);
    }
    match value {
        Bson::Document(inner) => get_path(inner, rest),
        _ => None,
    }
}

/// Sets the value at `parts`, replacing any non-document on the way with
/// a new document (as `$unwind` and `$lookup`'s `as` do).
pub(crate) fn set_path(doc: &mut Document, parts: &[String], value: Bson) {
    let Some((first, rest)) = parts.split_first() else { return };
    if rest.is_empty() {
        doc.insert(first.clone(), value);
        return;
    }
    if !matches!(doc.get(first), Some(Bson::Document(_))) {
        doc.insert(first.clone(), Bson::Document(Document::new()));
    }
    if let Some(Bson::Document(inner)) = doc.get_mut(first) {
        set_path(inner, rest, value);
    }
}

/// Removes the field at `parts` if present (through documents only).
pub(crate) fn remove_path(doc: &mut Document, parts: &[String]) {
    let Some((first, rest)) = parts.split_first() else { return };
    if rest.is_empty() {
        doc.remove(first);
        return;
    }
    if let Some(Bson::Document(inner)) = doc.get_mut(first) {
        remove_path(inner, rest);
    }
}
