//! `$rename`: moving a value from one path to another, with MongoDB's
//! checks on both paths.

use bson::{Bson, Document};

use super::apply::{render, Env};
use super::target::{array_index, TargetPath};
use crate::error::{codes, QueryError};

/// `$rename`: moves the value at `from` to `to`. A missing source is a
/// no-op; neither path may go through an array.
pub fn apply_rename(
    root: &mut Document,
    from: &TargetPath,
    to: &TargetPath,
    env: &Env<'_>,
) -> Result<(), QueryError> {
    let from_parts: Vec<&str> = from.dotted.split('.').collect();
    let to_parts: Vec<&str> = to.dotted.split('.').collect();
    // Find the source value. As in MongoDB, a missing source is a no-op,
    // a path through a scalar (or a named field of an array) is not
    // viable, and a source inside an array element is refused.
    let mut node: &Document = root;
    for (i, part) in from_parts.iter().enumerate() {
        let Some(value) = node.get(*part) else {
            return Ok(());
        };
        if i + 1 == from_parts.len() {
            break;
        }
        let next = from_parts[i + 1];
        match value {
            Bson::Document(child) => node = child,
            Bson::Array(items) => {
                return match array_index(next) {
                    Some(index) if index < items.len() => Err(QueryError::bad_value(format!(
                        "The source field cannot be an array element, '{}' in doc with {} has an array field called '{}'",
                        from.dotted, env.id_text, part
                    ))),
                    Some(_) => Ok(()),
                    None => Err(not_traversable(next, &from.dotted, part, value)),
                };
            }
            other => return Err(not_traversable(next, &from.dotted, part, other)),
        }
    }
    // Check the destination can be created before changing anything.
    let mut probe: Option<&Document> = Some(root);
    for (i, part) in to_parts[..to_parts.len() - 1].iter().enumerate() {
        let Some(doc) = probe else { break };
        match doc.get(*part) {
            None => probe = None,
            Some(Bson::Document(child)) => probe = Some(child),
            Some(Bson::Array(_)) => {
                return Err(QueryError::bad_value(format!(
                    "The destination field cannot be an array element, '{}' in doc with {} being an array",
                    to.dotted,
                    to_parts[..=i].join(".")
                )))
            }
            Some(other) => {
                return Err(QueryError::new(
                    codes::PATH_NOT_VIABLE,
                    format!("Cannot create field '{}' in element {}", to_parts[i + 1], render(part, other)),
                ))
            }
        }
    }
    let value = take_path(root, &from_parts).expect("source found above");
    let mut parent = root;
    for part in &to_parts[..to_parts.len() - 1] {
        if !parent.contains_key(*part) {
            parent.insert(*part, Document::new());
        }
        parent = match parent.get_mut(*part) {
            Some(Bson::Document(child)) => child,
            _ => unreachable!("destination parents checked above"),
        };
    }
    parent.insert(to_parts[to_parts.len() - 1], value);
    Ok(())
}

fn not_traversable(next: &str, dotted: &str, name: &str, value: &Bson) -> QueryError {
    QueryError::new(
        codes::PATH_NOT_VIABLE,
        format!(
            "Cannot use the part ({next}) of ({dotted}) to traverse the element ({})",
            render(name, value)
        ),
    )
}

fn take_path(root: &mut Document, parts: &[&str]) -> Option<Bson> {
    let (last, parents) = parts.split_last()?;
    let mut node = root;
    for part in parents {
        node = match node.get_mut(*part) {
            Some(Bson::Document(child)) => child,
            _ => return None,
        };
    }
    node.remove(*last)
}
