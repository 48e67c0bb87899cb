//! Generating the index keys of a document, as MongoDB's btree key
//! generator does.

use bson::{Bson, Document};

use super::encode::encode_value;
use super::{IndexKeys, KeyPattern};
use crate::error::QueryError;

/// A value the key generator points at for missing fields.
static NULL_VALUE: Bson = Bson::Null;
/// The key value of an empty array.
static UNDEFINED_VALUE: Bson = Bson::Undefined;

/// A container a remaining path is looked up in: a document, an array
/// addressed by decimal positions, or nothing (a non-document element).
#[derive(Clone, Copy)]
enum Container<'a> {
    Doc(&'a Document),
    Arr(&'a [Bson]),
    Empty,
}

fn field_of<'a>(container: Container<'a>, name: &str) -> Option<&'a Bson> {
    match container {
        Container::Doc(doc) => doc.get(name),
        Container::Arr(items) => positional(name).and_then(|i| items.get(i)),
        Container::Empty => None,
    }
}

/// Follows `path` through documents and stops at the first array (or at
/// the end): returns the element found, the path left after it, and the
/// element's field name. A scalar in the middle of the path finds nothing.
fn element_or_array<'a>(
    container: Container<'a>,
    path: &str,
) -> (Option<&'a Bson>, String, String) {
    let (first, rest) = path.split_once('.').unwrap_or((path, ""));
    let Some(found) = field_of(container, first) else {
        return (None, String::new(), first.to_string());
    };
    match found {
        Bson::Array(_) => (Some(found), rest.to_string(), first.to_string()),
        _ if rest.is_empty() => (Some(found), String::new(), first.to_string()),
        Bson::Document(doc) => element_or_array(Container::Doc(doc), rest),
        _ => (None, String::new(), first.to_string()),
    }
}

fn positional(part: &str) -> Option<usize> {
    // An array's field names are "0", "1", ...: only that spelling
    // addresses an element.
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if part.len() > 1 && part.starts_with('0') {
        return None;
    }
    part.parse().ok()
}

/// A key pattern field's path continued through one particular element
/// of the array being expanded (`a.1.b` indexes element 1 of `a`).
#[derive(Clone, Default)]
struct PositionalPath<'a> {
    indexed: Option<&'a Bson>,
    found: Option<&'a Bson>,
    remaining: String,
    name: String,
}

/// MongoDB's btree key generator: all indexed paths advance together
/// through the document; at most one array is expanded per level (two
/// different arrays are "parallel arrays"), and the keys of one element
/// of that array are generated together, so compound keys over paths
/// through one array stay correlated per element.
struct KeyGenerator<'a> {
    sparse: bool,
    width: usize,
    keys: Vec<Vec<&'a Bson>>,
    multikey: bool,
}

impl<'a> KeyGenerator<'a> {
    fn expand(
        &mut self,
        mut paths: Vec<String>,
        mut fixed: Vec<&'a Bson>,
        container: Container<'a>,
        mut not_found: usize,
        positional: &[PositionalPath<'a>],
    ) -> Result<(), QueryError> {
        let mut array: Option<(&'a Bson, String)> = None;
        let mut array_fields: Vec<usize> = Vec::new();
        let mut expand_unembedded = true;
        for i in 0..self.width {
            if paths[i].is_empty() {
                continue;
            }
            let first = paths[i].split('.').next().unwrap_or("").to_string();
            let in_container = field_of(container, &first).is_some();
            let position = &positional[i];
            if in_container && position.indexed.is_some() {
                return Err(QueryError::new(
                    16746,
                    format!(
                        "Ambiguous field name found in array (do not use numeric field names in embedded elements in an array), field: '{first}'"
                    ),
                ));
            }
            let (found, remaining, name) = if in_container {
                element_or_array(container, &paths[i])
            } else if let Some(indexed) = position.indexed {
                if let Bson::Array(_) = indexed {
                    expand_unembedded = false;
                }
                (
                    position.found,
                    position.remaining.clone(),
                    position.name.clone(),
                )
            } else {
                (None, String::new(), first)
            };
            match found {
                None => {
                    fixed[i] = &NULL_VALUE;
                    paths[i] = String::new();
                    not_found += 1;
                }
                Some(value @ Bson::Array(_)) => {
                    paths[i] = remaining;
                    array_fields.push(i);
                    match &array {
                        None => array = Some((value, name)),
                        Some((existing, existing_name)) => {
                            if !std::ptr::eq(*existing, value) {
                                return Err(QueryError::new(
                                    crate::error::codes::CANNOT_INDEX_PARALLEL_ARRAYS,
                                    format!(
                                        "cannot index parallel arrays [{name}] [{existing_name}]"
                                    ),
                                ));
                            }
                        }
                    }
                }
                Some(value) => {
                    fixed[i] = value;
                    paths[i] = String::new();
                }
            }
        }
        let Some((array, _)) = array else {
            if !(self.sparse && not_found == self.width) {
                self.keys.push(fixed);
            }
            return Ok(());
        };
        let Bson::Array(items) = array else {
            unreachable!("only arrays are recorded")
        };
        let no_positional = vec![PositionalPath::default(); self.width];
        if items.is_empty() {
            // An empty array indexes as undefined where it ends a path and
            // as a missing field (null) where a path continues below it.
            if expand_unembedded {
                self.multikey = true;
            }
            return self.element(
                &paths,
                &fixed,
                &UNDEFINED_VALUE,
                not_found,
                array,
                &array_fields,
                true,
                &no_positional,
            );
        }
        let mut below = no_positional.clone();
        for i in 0..self.width {
            let through_array = array_fields.contains(&i);
            if paths[i].is_empty() {
                if through_array && expand_unembedded {
                    self.multikey = true;
                }
                continue;
            }
            let part = paths[i].split('.').next().unwrap_or("");
            below[i].indexed = field_of(Container::Arr(items), part);
            if below[i].indexed.is_none() {
                self.multikey = true;
                continue;
            }
            let (found, remaining, name) = element_or_array(Container::Arr(items), &paths[i]);
            below[i].found = found;
            below[i].remaining = remaining;
            below[i].name = name;
        }
        for item in items {
            self.element(
                &paths,
                &fixed,
                item,
                not_found,
                array,
                &array_fields,
                expand_unembedded,
                &below,
            )?;
        }
        Ok(())
    }

    /// Generates the keys of one element of the expanded array.
    #[allow(clippy::too_many_arguments)]
    fn element(
        &mut self,
        paths: &[String],
        fixed: &[&'a Bson],
        item: &'a Bson,
        not_found: usize,
        array: &'a Bson,
        array_fields: &[usize],
        expand_unembedded: bool,
        positional: &[PositionalPath<'a>],
    ) -> Result<(), QueryError> {
        let mut fixed = fixed.to_vec();
        for &i in array_fields {
            if paths[i].is_empty() {
                fixed[i] = if expand_unembedded { item } else { array };
            }
        }
        let container = match item {
            Bson::Document(doc) => Container::Doc(doc),
            _ => Container::Empty,
        };
        self.expand(paths.to_vec(), fixed, container, not_found, positional)
    }
}

/// Keys of one document for one index, MongoDB semantics: missing field
/// -> null; sparse index: no keys when every indexed field is missing;
/// arrays: one key per element (multikey), empty array -> undefined;
/// arrays at two indexed paths of one document -> error 171 "cannot index
/// parallel arrays [a] [b]"; dotted paths through arrays.
pub fn index_keys(
    doc: &Document,
    pattern: &KeyPattern,
    sparse: bool,
) -> Result<IndexKeys, QueryError> {
    let width = pattern.fields.len();
    let mut generator = KeyGenerator {
        sparse,
        width,
        keys: Vec::new(),
        multikey: false,
    };
    let paths: Vec<String> = pattern.fields.iter().map(|f| f.path.clone()).collect();
    let fixed = vec![&NULL_VALUE; width];
    let positional = vec![PositionalPath::default(); width];
    generator.expand(paths, fixed, Container::Doc(doc), 0, &positional)?;
    if generator.keys.is_empty() && !sparse {
        generator.keys.push(vec![&NULL_VALUE; width]);
    }
    let mut keys: Vec<Vec<u8>> = generator
        .keys
        .iter()
        .map(|values| {
            let mut key = Vec::new();
            for (value, field) in values.iter().zip(&pattern.fields) {
                let value = crate::collation::collate_with(pattern.collation.as_deref(), value);
                encode_value(&mut key, &value, field.descending);
            }
            key
        })
        .collect();
    keys.sort();
    keys.dedup();
    let multikey = generator.multikey || keys.len() > 1;
    Ok(IndexKeys { keys, multikey })
}
