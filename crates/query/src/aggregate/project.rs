//! `$project`, `$addFields`/`$set` and `$unset`, with aggregation
//! semantics (not `find`'s): a projection is a tree of paths; inclusion
//! keeps the named fields in input order and appends computed fields in
//! specification order; exclusion removes the named fields; `$addFields`
//! sets computed fields, keeping existing fields in place. Nested paths
//! apply to each document of an array. Computed expressions always see the
//! whole input document as `$$CURRENT`.

use bson::{Bson, Document};

use super::{DocStream, ExecContext, Stage};
use crate::error::QueryError;
use crate::expr::Expr;

#[derive(Clone, Debug)]
enum ProjNode {
    Include,
    Exclude,
    Computed(Expr),
    Nested(Tree),
}

/// Fields of one level, in specification order.
#[derive(Clone, Debug, Default)]
struct Tree {
    fields: Vec<(String, ProjNode)>,
}

impl Tree {
    fn get(&self, name: &str) -> Option<&ProjNode> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, node)| node)
    }

    fn has_computed(&self) -> bool {
        self.fields.iter().any(|(_, node)| match node {
            ProjNode::Computed(_) => true,
            ProjNode::Nested(sub) => sub.has_computed(),
            _ => false,
        })
    }

    /// Inserts `node` at the dotted `path`, refusing a path that is a
    /// prefix of (or equal to) another.
    fn insert(&mut self, stage: &str, full: &str, path: &[String], node: ProjNode) -> Result<(), QueryError> {
        let collision = || QueryError::new(31250, format!("Invalid {stage} :: caused by :: Path collision at {full}"));
        let (first, rest) = path.split_first().expect("paths are never empty");
        let existing = self.fields.iter_mut().find(|(n, _)| n == first);
        if rest.is_empty() {
            if existing.is_some() {
                return Err(collision());
            }
            self.fields.push((first.clone(), node));
            return Ok(());
        }
        match existing {
            Some((_, ProjNode::Nested(sub))) => sub.insert(stage, full, rest, node),
            Some(_) => Err(collision()),
            None => {
                let mut sub = Tree::default();
                sub.insert(stage, full, rest, node)?;
                self.fields.push((first.clone(), ProjNode::Nested(sub)));
                Ok(())
            }
        }
    }

    /// The first excluded path other than a top-level `_id`, if any.
    fn first_exclusion(&self, top: bool) -> Option<String> {
        self.fields.iter().find_map(|(name, node)| match node {
            ProjNode::Exclude if !(top && name == "_id") => Some(name.clone()),
            ProjNode::Nested(sub) => sub.first_exclusion(false).map(|rest| format!("{name}.{rest}")),
            _ => None,
        })
    }

    fn has_inclusion_or_computed(&self, top: bool) -> bool {
        self.fields.iter().any(|(name, node)| match node {
            ProjNode::Include => !(top && name == "_id"),
            ProjNode::Computed(_) => true,
            ProjNode::Nested(sub) => sub.has_inclusion_or_computed(false),
            ProjNode::Exclude => false,
        })
    }
}

fn validate_field_name(stage: &str, name: &str) -> Result<Vec<String>, QueryError> {
    if name.is_empty() {
        return Err(QueryError::new(40352, format!("Invalid {stage} :: caused by :: FieldPath cannot be constructed with empty string")));
    }
    crate::depth::check_field_path(name)?;
    let parts: Vec<String> = name.split('.').map(str::to_string).collect();
    for part in &parts {
        if part.is_empty() {
            return Err(QueryError::new(15998, format!("Invalid {stage} :: caused by :: FieldPath field names may not be empty strings.")));
        }
        if part.starts_with('$') {
            return Err(QueryError::new(16410, format!("Invalid {stage} :: caused by :: FieldPath field names may not start with '$'. ('{part}')")));
        }
    }
    Ok(parts)
}

/// Whether a projection value is an inclusion/exclusion flag (`$project`)
/// or a value to set (`$addFields`).
#[derive(Clone, Copy, PartialEq)]
enum SpecKind {
    Project,
    AddFields,
}

/// Parses the fields of `spec` (under `prefix`) into `tree`.
fn parse_into(stage: &str, kind: SpecKind, spec: &Document, prefix: &[String], tree: &mut Tree) -> Result<(), QueryError> {
    for (name, value) in spec {
        let mut path = prefix.to_vec();
        path.extend(validate_field_name(stage, name)?);
        // Nested specifications spell one path over several levels.
        if path.len() > crate::depth::FIELD_PATH_PARTS_MAX {
            return Err(QueryError::new(crate::depth::OVERFLOW, "FieldPath is too long"));
        }
        let full = path.join(".");
        let node = match value {
            Bson::Document(sub) if sub.keys().next().is_some_and(|k| k.starts_with('$')) => {
                ProjNode::Computed(Expr::parse(value)?)
            }
            Bson::Document(sub) if sub.is_empty() => {
                if kind == SpecKind::Project {
                    return Err(QueryError::new(51270, format!("Invalid {stage} :: caused by :: An empty sub-projection is not a valid value. Found empty object at path {full}")));
                }
                ProjNode::Computed(Expr::literal(value.clone()))
            }
            Bson::Document(sub) => {
                parse_into(stage, kind, sub, &path, tree)?;
                continue;
            }
            Bson::Boolean(_) | Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)
                if kind == SpecKind::Project =>
            {
                if crate::expr::is_truthy(value) { ProjNode::Include } else { ProjNode::Exclude }
            }
            other => ProjNode::Computed(Expr::parse(other)?),
        };
        tree.insert(stage, &full, &path, node)?;
    }
    Ok(())
}

#[derive(Debug)]
enum Mode {
    Inclusion,
    Exclusion,
}

/// `$project` and `$unset`.
#[derive(Debug)]
pub(crate) struct ProjectStage {
    tree: Tree,
    mode: Mode,
}

impl ProjectStage {
    pub(crate) fn parse(spec: &Bson) -> Result<ProjectStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(15969, "$project specification must be an object"));
        };
        if spec.is_empty() {
            return Err(QueryError::new(51272, "Invalid $project :: caused by :: projection specification must have at least one field"));
        }
        let mut tree = Tree::default();
        parse_into("$project", SpecKind::Project, spec, &[], &mut tree)?;
        let exclusion = tree.first_exclusion(true);
        let inclusion = tree.has_inclusion_or_computed(true);
        let mode = match (exclusion, inclusion) {
            (Some(field), true) => {
                let message = if tree.has_computed() {
                    format!("Invalid $project :: caused by :: Cannot use expression other than $meta in exclusion projection (field {field})")
                } else {
                    format!("Invalid $project :: caused by :: Cannot do exclusion on field {field} in inclusion projection")
                };
                return Err(QueryError::new(31254, message));
            }
            (Some(_), false) => Mode::Exclusion,
            (None, true) => Mode::Inclusion,
            // Only `_id` is named: `{_id: 0}` excludes it, `{_id: 1}` keeps only it.
            (None, false) if matches!(tree.get("_id"), Some(ProjNode::Exclude)) => Mode::Exclusion,
            (None, false) => Mode::Inclusion,
        };
        if matches!(mode, Mode::Inclusion) && tree.get("_id").is_none() {
            tree.fields.insert(0, ("_id".to_string(), ProjNode::Include));
        }
        Ok(ProjectStage { tree, mode })
    }

    /// `$unset: "a.b"` or `["a", "b.c"]`: an exclusion projection.
    pub(crate) fn parse_unset(spec: &Bson) -> Result<ProjectStage, QueryError> {
        let paths: Vec<&str> = match spec {
            Bson::String(s) => vec![s.as_str()],
            Bson::Array(items) if !items.is_empty() => items
                .iter()
                .map(|item| match item {
                    Bson::String(s) => Ok(s.as_str()),
                    _ => Err(QueryError::new(31120, "$unset specification must be a string or an array containing only string values")),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(QueryError::new(31002, "$unset specification must be a string or an array with at least one field")),
        };
        let mut tree = Tree::default();
        for path in paths {
            let parts = validate_field_name("$unset", path)?;
            tree.insert("$unset", path, &parts, ProjNode::Exclude)?;
        }
        Ok(ProjectStage { tree, mode: Mode::Exclusion })
    }

    fn project(&self, doc: &Document, cx: &ExecContext<'_>) -> Result<Document, QueryError> {
        match self.mode {
            Mode::Inclusion => include(&self.tree, doc, doc, cx),
            Mode::Exclusion => Ok(exclude(&self.tree, doc)),
        }
    }
}

impl Stage for ProjectStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.map(move |item| self.project(&item?, cx)))
    }
}

/// Inclusion: included fields in input order, then computed fields (and
/// nested levels holding computed fields that the input lacks) in
/// specification order.
fn include(tree: &Tree, doc: &Document, root: &Document, cx: &ExecContext<'_>) -> Result<Document, QueryError> {
    let mut out = Document::new();
    for (name, value) in doc {
        match tree.get(name) {
            Some(ProjNode::Include) => {
                out.insert(name.clone(), value.clone());
            }
            Some(ProjNode::Nested(sub)) => {
                if let Some(projected) = include_value(sub, value, root, cx)? {
                    out.insert(name.clone(), projected);
                }
            }
            _ => {}
        }
    }
    for (name, node) in &tree.fields {
        match node {
            ProjNode::Computed(expr) => {
                if let Some(value) = expr.evaluate_optional(root, &cx.vars)? {
                    out.insert(name.clone(), value);
                }
            }
            ProjNode::Nested(sub) if sub.has_computed() && !doc.contains_key(name) => {
                out.insert(name.clone(), include(sub, &Document::new(), root, cx)?);
            }
            _ => {}
        }
    }
    Ok(out)
}

fn include_value(sub: &Tree, value: &Bson, root: &Document, cx: &ExecContext<'_>) -> Result<Option<Bson>, QueryError> {
    match value {
        Bson::Document(d) => Ok(Some(Bson::Document(include(sub, d, root, cx)?))),
        Bson::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                if let Some(projected) = include_value(sub, item, root, cx)? {
                    out.push(projected);
                }
            }
            Ok(Some(Bson::Array(out)))
        }
        // A scalar has no sub-fields to keep; computed sub-fields replace it.
        _ if sub.has_computed() => Ok(Some(Bson::Document(include(sub, &Document::new(), root, cx)?))),
        _ => Ok(None),
    }
}

fn exclude(tree: &Tree, doc: &Document) -> Document {
    let mut out = Document::new();
    for (name, value) in doc {
        match tree.get(name) {
            Some(ProjNode::Exclude) => {}
            Some(ProjNode::Nested(sub)) => {
                out.insert(name.clone(), exclude_value(sub, value));
            }
            _ => {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    out
}

fn exclude_value(sub: &Tree, value: &Bson) -> Bson {
    match value {
        Bson::Document(d) => Bson::Document(exclude(sub, d)),
        Bson::Array(items) => Bson::Array(items.iter().map(|item| exclude_value(sub, item)).collect()),
        other => other.clone(),
    }
}

/// `$addFields` / `$set`.
#[derive(Debug)]
pub(crate) struct AddFieldsStage {
    tree: Tree,
}

impl AddFieldsStage {
    pub(crate) fn parse(name: &str, spec: &Bson) -> Result<AddFieldsStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(40272, format!("{name} specification stage must be an object, got {}", crate::expr::type_name(&Some(spec.clone())))));
        };
        let mut tree = Tree::default();
        parse_into(name, SpecKind::AddFields, spec, &[], &mut tree)?;
        Ok(AddFieldsStage { tree })
    }
}

impl Stage for AddFieldsStage {
    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        Box::new(input.map(move |item| {
            let root = item?;
            let mut out = root.clone();
            set_fields(&self.tree, &mut out, &root, cx)?;
            Ok(out)
        }))
    }
}

/// Sets every computed field of `tree` in `target`; a missing result
/// (e.g. `$$REMOVE`) removes the field.
fn set_fields(tree: &Tree, target: &mut Document, root: &Document, cx: &ExecContext<'_>) -> Result<(), QueryError> {
    for (name, node) in &tree.fields {
        match node {
            ProjNode::Computed(expr) => match expr.evaluate_optional(root, &cx.vars)? {
                Some(value) => {
                    target.insert(name.clone(), value);
                }
                None => {
                    target.remove(name);
                }
            },
            ProjNode::Nested(sub) => {
                // Taking the value out in place keeps the field's position.
                let existing = target.get_mut(name).map(|slot| std::mem::replace(slot, Bson::Null));
                let updated = set_nested(sub, existing, root, cx)?;
                target.insert(name.clone(), updated);
            }
            ProjNode::Include | ProjNode::Exclude => unreachable!("$addFields trees hold only computed fields"),
        }
    }
    Ok(())
}

fn set_nested(sub: &Tree, existing: Option<Bson>, root: &Document, cx: &ExecContext<'_>) -> Result<Bson, QueryError> {
    match existing {
        Some(Bson::Document(mut d)) => {
            set_fields(sub, &mut d, root, cx)?;
            Ok(Bson::Document(d))
        }
        Some(Bson::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(set_nested(sub, Some(item), root, cx)?);
            }
            Ok(Bson::Array(out))
        }
        // Missing or a scalar: replaced by a document of the new fields.
        _ => {
            let mut d = Document::new();
            set_fields(sub, &mut d, root, cx)?;
            Ok(Bson::Document(d))
        }
    }
}
