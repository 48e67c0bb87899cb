//! Update target paths: parsing `a.b.$`, `a.$[]`, `a.$[x].b` into
//! components, the conflict check between the paths of one update, and the
//! order in which MongoDB 5.0+ applies them.

use std::cmp::Ordering;
use std::collections::HashSet;

use crate::error::{codes, QueryError};

/// One component of an update target path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Component {
    /// A field name, or an array index when the container is an array.
    Field(String),
    /// `$`: the array position the query matched.
    Positional,
    /// `$[]`: every element of the array.
    AllElements,
    /// `$[identifier]`: the elements matching that array filter.
    Filtered(String),
}

/// A parsed target path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetPath {
    pub dotted: String,
    pub components: Vec<Component>,
}

impl TargetPath {
    pub fn parse(dotted: &str) -> Result<TargetPath, QueryError> {
        if dotted.is_empty() {
            return Err(QueryError::new(
                codes::EMPTY_FIELD_NAME,
                "An empty update path is not valid.",
            ));
        }
        // Writing to a path creates its levels: a path of more components
        // than any stored document may have levels is refused before any
        // walk over it.
        crate::depth::check_field_path(dotted)?;
        let mut components = Vec::new();
        let mut positional_count = 0;
        for (i, part) in dotted.split('.').enumerate() {
            if part.is_empty() {
                return Err(QueryError::new(
                    codes::EMPTY_FIELD_NAME,
                    format!("The update path '{dotted}' contains an empty field name, which is not allowed."),
                ));
            }
            let component = if part == "$" {
                positional_count += 1;
                Component::Positional
            } else if part == "$[]" {
                Component::AllElements
            } else if let Some(inner) = part.strip_prefix("$[").and_then(|p| p.strip_suffix(']')) {
                validate_identifier(inner)?;
                Component::Filtered(inner.to_string())
            } else if part.starts_with('$') {
                return Err(QueryError::new(
                    codes::DOLLAR_PREFIXED_FIELD_NAME,
                    format!("The dollar ($) prefixed field '{part}' in '{dotted}' is not valid for storage."),
                ));
            } else {
                Component::Field(part.to_string())
            };
            if i == 0 && !matches!(component, Component::Field(_)) {
                return Err(QueryError::bad_value(format!(
                    "Cannot have array filter identifier (i.e. '$[<id>]') or positional operator as the first element in path '{dotted}'"
                )));
            }
            components.push(component);
        }
        if positional_count > 1 {
            return Err(QueryError::bad_value(format!(
                "Too many positional (i.e. '$') elements found in path '{dotted}'"
            )));
        }
        Ok(TargetPath {
            dotted: dotted.to_string(),
            components,
        })
    }

    /// True when the path contains `$`, `$[]` or `$[id]`.
    pub fn is_dynamic(&self) -> bool {
        self.components
            .iter()
            .any(|c| !matches!(c, Component::Field(_)))
    }

    /// The array filter identifiers the path uses.
    pub fn identifiers(&self) -> impl Iterator<Item = &str> {
        self.components.iter().filter_map(|c| match c {
            Component::Filtered(id) => Some(id.as_str()),
            _ => None,
        })
    }
}

/// Array filter identifiers start with a lowercase letter and are
/// alphanumeric, as in MongoDB.
pub fn validate_identifier(id: &str) -> Result<(), QueryError> {
    let mut chars = id.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(QueryError::bad_value(format!(
            "The array filter identifier '{id}' must begin with a lowercase letter and contain only alphanumeric characters"
        )))
    }
}

/// Fails with ConflictingUpdateOperators when one path is a prefix of (or
/// equal to) another; `paths` is in the order the update names them, and
/// the first conflict in that order is the one named, as in MongoDB.
pub fn check_conflicts(paths: &[&TargetPath]) -> Result<(), QueryError> {
    // One pass with two sets keeps this linear in the number of paths
    // (times their depth): updates may name thousands of fields.
    let mut earlier_paths: HashSet<&str> = HashSet::new();
    let mut earlier_prefixes: HashSet<&str> = HashSet::new();
    for (i, later) in paths.iter().enumerate() {
        let dotted = later.dotted.as_str();
        let conflict = earlier_prefixes.contains(dotted)
            || prefixes(dotted).any(|prefix| earlier_paths.contains(prefix));
        if conflict {
            // The sets say an earlier path conflicts; find it to name it.
            let earlier = paths[..i].iter().find(|earlier| {
                nested_or_equal(&earlier.dotted, dotted) || nested_or_equal(dotted, &earlier.dotted)
            });
            let at = match earlier {
                Some(earlier) if earlier.dotted.len() <= dotted.len() => earlier.dotted.as_str(),
                _ => dotted,
            };
            return Err(QueryError::new(
                codes::CONFLICTING_UPDATE_OPERATORS,
                format!("Updating the path '{dotted}' would create a conflict at '{at}'"),
            ));
        }
        earlier_paths.insert(dotted);
        earlier_prefixes.extend(prefixes(dotted));
    }
    Ok(())
}

/// Fails when positional paths made two modifiers reach the same place
/// (`a.$[]` and `a.$[x]` both reaching `a.0`): MongoDB refuses such an
/// update once it sees the document, rather than apply one over the other.
pub fn check_reached_paths(paths: &[String]) -> Result<(), QueryError> {
    let mut seen_paths: HashSet<&str> = HashSet::new();
    let mut seen_prefixes: HashSet<&str> = HashSet::new();
    for path in paths {
        let path = path.as_str();
        let clash = if seen_prefixes.contains(path) {
            Some(path)
        } else {
            prefixes(path).find(|prefix| seen_paths.contains(prefix))
        };
        if let Some(at) = clash {
            return Err(QueryError::new(
                codes::CONFLICTING_UPDATE_OPERATORS,
                format!("Update created a conflict at '{at}'"),
            ));
        }
        seen_paths.insert(path);
        seen_prefixes.extend(prefixes(path));
    }
    Ok(())
}

/// `a`, `a.b`, `a.b.c` for `a.b.c`: every component prefix, itself included.
fn prefixes(dotted: &str) -> impl Iterator<Item = &str> {
    dotted
        .match_indices('.')
        .map(move |(at, _)| &dotted[..at])
        .chain(std::iter::once(dotted))
}

/// True when `short` equals `long` or is a component prefix of it.
fn nested_or_equal(short: &str, long: &str) -> bool {
    long == short || (long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b'.'))
}

/// The order MongoDB 5.0+ applies update paths in: component by component,
/// numeric names numerically, other names by bytes.
pub fn compare_paths(a: &TargetPath, b: &TargetPath) -> Ordering {
    let mut left = a.dotted.split('.');
    let mut right = b.dotted.split('.');
    loop {
        match (left.next(), right.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = compare_names(x, y);
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

fn compare_names(x: &str, y: &str) -> Ordering {
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if numeric(x) && numeric(y) {
        let x = x.trim_start_matches('0');
        let y = y.trim_start_matches('0');
        return x.len().cmp(&y.len()).then_with(|| x.cmp(y));
    }
    x.as_bytes().cmp(y.as_bytes())
}

/// The array index a field component names, if it is a plain decimal.
pub fn array_index(name: &str) -> Option<usize> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok()
}
