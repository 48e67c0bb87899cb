//! Applying parsed modifiers to a document: walking target paths (through
//! `$`, `$[]` and `$[id]`), creating missing parents for operators that
//! create, and the leaf operation of each operator.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::arith::{arithmetic, bitwise, debug_number, zero_like, ArithOp};
use super::spec::{bson_type_name, Action, DateKind, Modifier};
use super::target::{array_index, Component, TargetPath};
use super::{array_ops, rename};
use crate::collation::compare_with;
use crate::compare::as_number;
use crate::error::{codes, QueryError};
use crate::filter::Filter;

/// What the leaf operations need besides the modifier itself.
pub struct Env<'a> {
    pub positional: Option<usize>,
    pub now: bson::DateTime,
    pub is_upsert_insert: bool,
    /// Array filters by identifier; each matches `{identifier: element}`.
    pub array_filters: &'a [(String, Filter)],
    /// The collation values compare under (`Update::with_collation`).
    pub collation: Option<&'a crate::collation::Collation>,
    /// `{_id: ...}` of the document, rendered for error messages.
    pub id_text: String,
    /// The document before the update: array filters select elements by
    /// their values before any modifier ran, as MongoDB evaluates them
    /// once per array.
    pub original: &'a Document,
}

/// The concrete paths an update's modifiers reached, recorded when the
/// update has `$`, `$[]` or `$[id]` paths: those can reach one element
/// twice, which only shows once the document is known.
#[derive(Default)]
pub struct Touched {
    pub enabled: bool,
    pub paths: Vec<String>,
}

impl Touched {
    fn record(&mut self, prefix: &str, name: &str) {
        if self.enabled {
            self.paths.push(if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}.{name}")
            });
        }
    }
}

/// Where a value lives inside its container.
#[derive(Clone, Debug)]
enum Key {
    Name(String),
    Index(usize),
}

/// What a leaf operation does to its slot.
enum Outcome {
    Keep,
    Set(Bson),
    Remove,
}

/// True for operators that create missing fields and parents.
fn creates(action: &Action) -> bool {
    !matches!(
        action,
        Action::Unset
            | Action::Pop { .. }
            | Action::Pull(_)
            | Action::PullAll(_)
            | Action::Rename(_)
    )
}

/// Applies one modifier to `root`.
pub fn apply_modifier(
    root: &mut Document,
    modifier: &Modifier,
    env: &Env<'_>,
    touched: &mut Touched,
) -> Result<(), QueryError> {
    if let Action::SetOnInsert(_) = modifier.action {
        if !env.is_upsert_insert {
            return Ok(());
        }
    }
    if let Action::Rename(to) = &modifier.action {
        touched.record("", &modifier.path.dotted);
        touched.record("", &to.dotted);
        return rename::apply_rename(root, &modifier.path, to, env);
    }
    // Work on the root as a Bson so that documents and arrays walk alike;
    // the take/put-back costs no copy.
    let mut node = Bson::Document(std::mem::take(root));
    let result = walk(
        &mut node,
        None,
        &modifier.path,
        0,
        "",
        "",
        modifier,
        env,
        touched,
    );
    if let Bson::Document(doc) = node {
        *root = doc;
    }
    result
}

/// How an operator treats a path that does not exist.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Creates missing fields and parents (`$set`, `$inc`, `$push`, ...);
    /// a path that cannot be created is PathNotViable.
    Create,
    /// Does nothing on a missing path, but a path that could not even be
    /// created (through a scalar) is PathNotViable (`$pop`, `$pull`).
    Viable,
    /// Does nothing on any missing path (`$unset`).
    Lenient,
}

fn mode(action: &Action) -> Mode {
    match action {
        Action::Unset => Mode::Lenient,
        _ if creates(action) => Mode::Create,
        _ => Mode::Viable,
    }
}

/// Applies `modifier` below `node`, the container of path component
/// `depth`; `node_name` is the field `node` sits in (for error messages)
/// and `concrete` the path to it with positions resolved; `original` is
/// the same place in the document before the update (None at the root).
#[allow(clippy::too_many_arguments)]
fn walk(
    node: &mut Bson,
    original: Option<&Bson>,
    path: &TargetPath,
    depth: usize,
    node_name: &str,
    concrete: &str,
    modifier: &Modifier,
    env: &Env<'_>,
    touched: &mut Touched,
) -> Result<(), QueryError> {
    let mode = mode(&modifier.action);
    let component = &path.components[depth];
    let keys = resolve(node, original, component, node_name, mode, path, env)?;
    let last = depth + 1 == path.components.len();
    for key in keys {
        let name = key_text(&key);
        if last {
            touched.record(concrete, &name);
            let current = get(node, &key);
            match leaf(current, &name, modifier, env)? {
                Outcome::Keep => {}
                Outcome::Set(value) => put(node, &key, value),
                Outcome::Remove => remove(node, &key),
            }
            continue;
        }
        if get(node, &key).is_none() {
            if matches!(
                path.components[depth + 1],
                Component::AllElements | Component::Filtered(_)
            ) {
                let prefix: Vec<&str> = path.dotted.split('.').take(depth + 1).collect();
                return Err(QueryError::bad_value(format!(
                    "The path '{}' must exist in the document in order to apply array updates.",
                    prefix.join(".")
                )));
            }
            if mode != Mode::Create {
                continue;
            }
            put(node, &key, Bson::Document(Document::new()));
        }
        let child = get_mut(node, &key).expect("child present or just created");
        let child_path = if concrete.is_empty() {
            name.clone()
        } else {
            format!("{concrete}.{name}")
        };
        let child_original = match (original, &key) {
            (None, Key::Name(name)) => env.original.get(name),
            (None, Key::Index(_)) => None,
            (Some(parent), key) => get(parent, key),
        };
        walk(
            child,
            child_original,
            path,
            depth + 1,
            &name,
            &child_path,
            modifier,
            env,
            touched,
        )?;
    }
    Ok(())
}

fn key_text(key: &Key) -> String {
    match key {
        Key::Name(name) => name.clone(),
        Key::Index(i) => i.to_string(),
    }
}

/// The keys a component selects in `node`.
fn resolve(
    node: &Bson,
    original: Option<&Bson>,
    component: &Component,
    node_name: &str,
    mode: Mode,
    path: &TargetPath,
    env: &Env<'_>,
) -> Result<Vec<Key>, QueryError> {
    match (node, component) {
        (Bson::Document(_), Component::Field(name)) => Ok(vec![Key::Name(name.clone())]),
        (Bson::Array(items), Component::Field(name)) => match array_index(name) {
            Some(i) if mode == Mode::Create && i >= items.len() && i > MAX_PADDED_INDEX => {
                Err(QueryError::bad_value(format!(
                    "can't backfill array to larger than {MAX_PADDED_INDEX} elements"
                )))
            }
            Some(i) => Ok(vec![Key::Index(i)]),
            None => not_viable(name, node_name, node, mode, path),
        },
        (Bson::Array(items), Component::Positional) => match env.positional {
            Some(i) if i < items.len() || mode == Mode::Create => Ok(vec![Key::Index(i)]),
            Some(_) => Ok(Vec::new()),
            None => Err(no_positional_match()),
        },
        (Bson::Array(items), Component::AllElements) => {
            Ok((0..items.len()).map(Key::Index).collect())
        }
        (Bson::Array(items), Component::Filtered(id)) => {
            let filter = env
                .array_filters
                .iter()
                .find(|(name, _)| name == id)
                .map(|(_, f)| f)
                .ok_or_else(|| {
                    QueryError::bad_value(format!("No array filter found for identifier '{id}'"))
                })?;
            let mut keys = Vec::new();
            let candidates = match original {
                Some(Bson::Array(before)) => before,
                _ => items,
            };
            for (i, item) in candidates.iter().enumerate().take(items.len()) {
                let mut wrapper = Document::new();
                wrapper.insert(id.clone(), item.clone());
                if filter.matches(&wrapper) {
                    keys.push(Key::Index(i));
                }
            }
            Ok(keys)
        }
        // MongoDB substitutes the matched position for `$` before walking,
        // so outside an array it is an ordinary numeric field name.
        (_, Component::Positional) => match env.positional {
            Some(i) => resolve(
                node,
                original,
                &Component::Field(i.to_string()),
                node_name,
                mode,
                path,
                env,
            ),
            None => Err(no_positional_match()),
        },
        (_, Component::AllElements | Component::Filtered(_)) => {
            Err(QueryError::bad_value(format!(
                "Cannot apply array updates to non-array element {}",
                render(node_name, node)
            )))
        }
        (_, Component::Field(name)) => not_viable(name, node_name, node, mode, path),
    }
}

/// A field asked of a scalar, or a named field asked of an array.
fn not_viable(
    field: &str,
    node_name: &str,
    node: &Bson,
    mode: Mode,
    path: &TargetPath,
) -> Result<Vec<Key>, QueryError> {
    match mode {
        Mode::Create => Err(cannot_create(field, node_name, node)),
        Mode::Viable => Err(QueryError::new(
            codes::PATH_NOT_VIABLE,
            format!(
                "Cannot use the part ({field}) of ({}) to traverse the element ({})",
                path.dotted,
                render(node_name, node)
            ),
        )),
        Mode::Lenient => Ok(Vec::new()),
    }
}

fn no_positional_match() -> QueryError {
    QueryError::bad_value("The positional operator did not find the match needed from the query.")
}

pub(super) fn render(name: &str, value: &Bson) -> String {
    format!("{{{name}: {value}}}")
}

fn cannot_create(field: &str, node_name: &str, node: &Bson) -> QueryError {
    QueryError::new(
        codes::PATH_NOT_VIABLE,
        format!(
            "Cannot create field '{field}' in element {}",
            render(node_name, node)
        ),
    )
}

fn get<'b>(node: &'b Bson, key: &Key) -> Option<&'b Bson> {
    match (node, key) {
        (Bson::Document(doc), Key::Name(name)) => doc.get(name),
        (Bson::Array(items), Key::Index(i)) => items.get(*i),
        _ => None,
    }
}

fn get_mut<'b>(node: &'b mut Bson, key: &Key) -> Option<&'b mut Bson> {
    match (node, key) {
        (Bson::Document(doc), Key::Name(name)) => doc.get_mut(name),
        (Bson::Array(items), Key::Index(i)) => items.get_mut(*i),
        _ => None,
    }
}

/// Sets the slot: an existing field keeps its position, a new field is
/// appended, an index past the end pads the array with nulls.
fn put(node: &mut Bson, key: &Key, value: Bson) {
    match (node, key) {
        (Bson::Document(doc), Key::Name(name)) => {
            doc.insert(name.clone(), value);
        }
        (Bson::Array(items), Key::Index(i)) => {
            if *i < items.len() {
                items[*i] = value;
            } else {
                // Padding is bounded by the document size limit the
                // caller enforces on the result.
                items.resize(*i, Bson::Null);
                items.push(value);
            }
        }
        _ => unreachable!("resolve only yields keys that fit the container"),
    }
}

/// Removes a field; an array element becomes null, as `$unset` does.
fn remove(node: &mut Bson, key: &Key) {
    match (node, key) {
        (Bson::Document(doc), Key::Name(name)) => {
            doc.remove(name);
        }
        (Bson::Array(items), Key::Index(i)) => {
            if let Some(slot) = items.get_mut(*i) {
                *slot = Bson::Null;
            }
        }
        _ => {}
    }
}

/// Refuses indexes that would pad an array beyond reason; MongoDB caps
/// the padding it creates at 1,500,000 elements.
const MAX_PADDED_INDEX: usize = 1_500_000;

fn leaf(
    current: Option<&Bson>,
    field: &str,
    modifier: &Modifier,
    env: &Env<'_>,
) -> Result<Outcome, QueryError> {
    Ok(match &modifier.action {
        Action::Set(value) | Action::SetOnInsert(value) => Outcome::Set(value.clone()),
        Action::Unset => match current {
            Some(_) => Outcome::Remove,
            None => Outcome::Keep,
        },
        Action::Inc(operand) | Action::Mul(operand) => {
            let (op, name) = match modifier.action {
                Action::Inc(_) => (ArithOp::Add, "$inc"),
                _ => (ArithOp::Multiply, "$mul"),
            };
            match current {
                None if op == ArithOp::Add => Outcome::Set(operand.clone()),
                None => Outcome::Set(zero_like(operand)),
                Some(value) if as_number(value).is_some() => match arithmetic(value, operand, op)? {
                    Some(result) => Outcome::Set(result),
                    None => {
                        return Err(QueryError::bad_value(format!(
                            "Failed to apply {name} operations to current value ({}) for document {}",
                            debug_number(value),
                            env.id_text
                        )))
                    }
                },
                Some(value) => {
                    return Err(QueryError::type_mismatch(format!(
                        "Cannot apply {name} to a value of non-numeric type. {} has the field '{field}' of non-numeric type {}",
                        env.id_text,
                        bson_type_name(value)
                    )))
                }
            }
        }
        Action::Min(value) | Action::Max(value) => {
            let wanted = if matches!(modifier.action, Action::Min(_)) {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            match current {
                Some(existing) if compare_with(env.collation, value, existing) != wanted => Outcome::Keep,
                _ => Outcome::Set(value.clone()),
            }
        }
        Action::CurrentDate(kind) => Outcome::Set(match kind {
            DateKind::Date => Bson::DateTime(env.now),
            DateKind::Timestamp => {
                let seconds = env.now.timestamp_millis().div_euclid(1000);
                // A timestamp's increment orders writes within a second;
                // outside the oplog there is none to take, so 1 is used.
                Bson::Timestamp(bson::Timestamp {
                    time: u32::try_from(seconds).unwrap_or(0),
                    increment: 1,
                })
            }
        }),
        Action::Push(spec) => {
            let items = array_for_append(current, field, "$push", env)?;
            Outcome::Set(Bson::Array(array_ops::push(items, spec, env.collation)))
        }
        Action::AddToSet(values) => {
            let mut items = array_for_append(current, field, "$addToSet", env)?;
            for value in values {
                if !items.iter().any(|item| compare_with(env.collation, item, value).is_eq()) {
                    items.push(value.clone());
                }
            }
            Outcome::Set(Bson::Array(items))
        }
        Action::Pop { first } => match current {
            None => Outcome::Keep,
            Some(Bson::Array(items)) if items.is_empty() => Outcome::Keep,
            Some(Bson::Array(items)) => {
                let mut items = items.clone();
                if *first {
                    items.remove(0);
                } else {
                    items.pop();
                }
                Outcome::Set(Bson::Array(items))
            }
            Some(other) => {
                return Err(QueryError::type_mismatch(format!(
                    "Path '{}' contains an element of non-array type '{}'",
                    modifier.path.dotted,
                    bson_type_name(other)
                )))
            }
        },
        Action::Pull(condition) => match current {
            None => Outcome::Keep,
            Some(Bson::Array(items)) => {
                let kept: Vec<Bson> = items
                    .iter()
                    .filter(|item| !array_ops::pull_matches(condition, item, env.collation))
                    .cloned()
                    .collect();
                Outcome::Set(Bson::Array(kept))
            }
            Some(_) => {
                return Err(QueryError::bad_value(
                    "Cannot apply $pull to a non-array value",
                ))
            }
        },
        Action::PullAll(values) => match current {
            None => Outcome::Keep,
            Some(Bson::Array(items)) => {
                let kept: Vec<Bson> = items
                    .iter()
                    .filter(|item| !values.iter().any(|v| compare_with(env.collation, item, v).is_eq()))
                    .cloned()
                    .collect();
                Outcome::Set(Bson::Array(kept))
            }
            Some(_) => {
                return Err(QueryError::bad_value(
                    "Cannot apply $pullAll to a non-array value",
                ))
            }
        },
        Action::Bit(ops) => {
            let mut value = match current {
                None => Bson::Int32(0),
                Some(v @ (Bson::Int32(_) | Bson::Int64(_))) => v.clone(),
                Some(other) => {
                    return Err(QueryError::bad_value(format!(
                        "Cannot apply $bit to a value of non-integral type.{} has the field {field} of non-integer type {}",
                        env.id_text,
                        bson_type_name(other)
                    )))
                }
            };
            for (op, operand) in ops {
                value = bitwise(&value, operand, *op);
            }
            Outcome::Set(value)
        }
        Action::Rename(_) => unreachable!("renames are applied by apply_rename"),
    })
}

fn array_for_append(
    current: Option<&Bson>,
    field: &str,
    op: &str,
    env: &Env<'_>,
) -> Result<Vec<Bson>, QueryError> {
    match current {
        None => Ok(Vec::new()),
        Some(Bson::Array(items)) => Ok(items.clone()),
        Some(other) => {
            let _ = op;
            Err(QueryError::bad_value(format!(
                "The field '{field}' must be an array but is of type {} in document {}",
                bson_type_name(other),
                env.id_text
            )))
        }
    }
}
