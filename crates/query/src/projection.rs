//! `find` projections (MongoDB 4.4+ semantics): inclusion or exclusion of
//! (dotted) fields, `_id` included unless excluded, `$slice`, `$elemMatch`,
//! the positional `field.$`, and computed fields given as literals or
//! aggregation expressions.
//!
//! A projection is parsed into a tree keyed by path component, then applied
//! in one walk over the document: included fields keep the document's order,
//! computed fields follow in the order of the specification.

use bson::{Bson, Document};

use crate::error::{codes, QueryError};
use crate::expr::{Expr, Variables};
use crate::filter::{Filter, MatchDetails};

/// A parsed projection.
#[derive(Clone, Debug)]
pub struct Projection {
    tree: Tree,
    /// True when only the listed fields are kept (inclusion projection).
    inclusion: bool,
    /// Whether `_id` appears in the output (default yes).
    include_id: bool,
}

#[derive(Clone, Debug, Default)]
struct Tree {
    fields: Vec<(String, Action)>,
}

#[derive(Clone, Debug)]
enum Action {
    Include,
    Exclude,
    Slice {
        skip: Option<i64>,
        limit: i64,
    },
    /// `$elemMatch`: the filter is `{field: {$elemMatch: ...}}`, tested on
    /// `{field: [element]}` for each element in turn.
    ElemMatch(Filter),
    /// `field.$`: the element at the position the query matched.
    Positional,
    Computed(Expr),
    Children(Tree),
}

impl Tree {
    fn get(&self, name: &str) -> Option<&Action> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    /// Adds `action` at the dotted `path`, refusing paths that overlap one
    /// already present (`{a: 1, "a.b": 1}`).
    fn insert(
        &mut self,
        parts: &[&str],
        action: Action,
        full_path: &str,
    ) -> Result<(), QueryError> {
        let collision = || QueryError::new(31250, format!("Path collision at {full_path}"));
        let (first, rest) = match parts.split_first() {
            Some(split) => split,
            None => return Err(collision()),
        };
        let existing = self.fields.iter_mut().find(|(n, _)| n == first);
        match (existing, rest.is_empty()) {
            (None, true) => self.fields.push((first.to_string(), action)),
            (None, false) => {
                let mut child = Tree::default();
                child.insert(rest, action, full_path)?;
                self.fields
                    .push((first.to_string(), Action::Children(child)));
            }
            (Some((_, Action::Children(child))), false) => child.insert(rest, action, full_path)?,
            (Some(_), _) => return Err(collision()),
        }
        Ok(())
    }

    fn has_positional(&self) -> bool {
        self.fields.iter().any(|(_, action)| match action {
            Action::Positional => true,
            Action::Children(child) => child.has_positional(),
            _ => false,
        })
    }

    fn has_elem_match(&self) -> bool {
        self.fields.iter().any(|(_, action)| match action {
            Action::ElemMatch(_) => true,
            Action::Children(child) => child.has_elem_match(),
            _ => false,
        })
    }

    fn has_computed(&self) -> bool {
        self.fields.iter().any(|(_, action)| match action {
            Action::Computed(_) => true,
            Action::Children(child) => child.has_computed(),
            _ => false,
        })
    }
}

/// Whether a specification value includes (`1`, `true`) or excludes
/// (`0`, `false`); `None` for values that are not numbers or booleans.
fn inclusion_flag(value: &Bson) -> Option<bool> {
    match value {
        Bson::Boolean(b) => Some(*b),
        Bson::Int32(n) => Some(*n != 0),
        Bson::Int64(n) => Some(*n != 0),
        Bson::Double(f) => Some(*f != 0.0),
        Bson::Decimal128(d) => Some(crate::compare::decimal_to_f64(d) != 0.0),
        _ => None,
    }
}

/// What kind of field a specification entry is, for the mixing rules.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Include,
    Exclude,
    Neutral,
}

struct Parser {
    tree: Tree,
    kind: Option<(Kind, String)>,
    include_id: Option<bool>,
    positional_count: usize,
}

impl Projection {
    pub fn parse(spec: &Document) -> Result<Projection, QueryError> {
        let mut parser = Parser {
            tree: Tree::default(),
            kind: None,
            include_id: None,
            positional_count: 0,
        };
        for (key, value) in spec {
            parser.entry(key, value)?;
        }
        if parser.positional_count > 0 && parser.tree.has_elem_match() {
            return Err(QueryError::bad_value(
                "Cannot specify positional operator and $elemMatch.",
            ));
        }
        let inclusion = match &parser.kind {
            Some((Kind::Include, _)) => true,
            Some((Kind::Exclude, _)) => false,
            // Only `$slice` (or nothing but `_id`): `{_id: 1}` alone keeps
            // just `_id`, `{_id: 0}` or `$slice` alone keep everything else.
            _ => {
                parser.include_id == Some(true)
                    && !parser.tree.fields.iter().any(|(n, _)| n != "_id")
            }
        };
        let include_id = parser.include_id.unwrap_or(true);
        Ok(Projection {
            tree: parser.tree,
            inclusion,
            include_id,
        })
    }

    /// Projects `doc`. `details` is the match of the query, needed by a
    /// positional `field.$` projection.
    pub fn apply(
        &self,
        doc: &Document,
        details: Option<&MatchDetails>,
    ) -> Result<Document, QueryError> {
        self.apply_with_variables(doc, details, &Variables::empty())
    }

    /// `apply` with a command's variables (`Variables::with_let(let,
    /// now)`): computed fields (`{x: {$add: ["$a", "$$bonus"]}}`) see
    /// `$$NOW` and the `let` constants, as in a MongoDB 5.0+ `find`.
    pub fn apply_with_variables(
        &self,
        doc: &Document,
        details: Option<&MatchDetails>,
        vars: &Variables,
    ) -> Result<Document, QueryError> {
        let context = Context {
            root: doc,
            position: details.and_then(|d| d.array_position),
            vars,
        };
        if self.inclusion {
            let mut out = Document::new();
            if self.include_id && self.tree.get("_id").is_none() {
                if let Some(id) = doc.get("_id") {
                    out.insert("_id", id.clone());
                }
            }
            context.include_document(doc, &self.tree, &mut out)?;
            Ok(out)
        } else {
            let mut out = context.exclude_document(doc, &self.tree)?;
            if !self.include_id {
                out.remove("_id");
            }
            Ok(out)
        }
    }
}

impl Parser {
    fn entry(&mut self, key: &str, value: &Bson) -> Result<(), QueryError> {
        validate_path(key)?;
        if key == "_id" {
            if let Some(flag) = inclusion_flag(value) {
                self.include_id = Some(flag);
                return Ok(());
            }
        }
        if let Some(array_path) = key.strip_suffix(".$") {
            return self.positional(array_path, key, value);
        }
        if key.contains('$') {
            return Err(QueryError::bad_value(format!(
                "FieldPath field names may not start with '$': {key}"
            )));
        }
        let action = match value {
            Bson::Document(sub) => return self.document_entry(key, sub),
            other => match inclusion_flag(other) {
                Some(true) => Action::Include,
                Some(false) => Action::Exclude,
                None => Action::Computed(Expr::parse(other)?),
            },
        };
        self.add(key, action)
    }

    fn positional(&mut self, array_path: &str, key: &str, value: &Bson) -> Result<(), QueryError> {
        if inclusion_flag(value) != Some(true) {
            return Err(QueryError::bad_value(format!(
                "positional projection cannot be used with exclusion: {key}"
            )));
        }
        if array_path.contains('$') {
            return Err(QueryError::bad_value(format!(
                "Positional projection '{key}' contains the positional operator more than once."
            )));
        }
        self.positional_count += 1;
        if self.positional_count > 1 {
            return Err(QueryError::bad_value(
                "Cannot specify more than one positional projection per query.",
            ));
        }
        self.add(array_path, Action::Positional)
    }

    fn document_entry(&mut self, key: &str, sub: &Document) -> Result<(), QueryError> {
        let first = match sub.keys().next() {
            Some(first) => first.as_str(),
            None => {
                return Err(QueryError::new(51270, format!("An empty sub-projection is not a valid value. Found empty object at path {key}")))
            }
        };
        let action = match first {
            "$slice" => parse_slice(sub.get("$slice").unwrap_or(&Bson::Null))?,
            "$elemMatch" => {
                if key.contains('.') {
                    return Err(QueryError::new(
                        31275,
                        "Cannot use $elemMatch projection on a nested field.",
                    ));
                }
                let mut filter = Document::new();
                filter.insert(key, Bson::Document(sub.clone()));
                Action::ElemMatch(Filter::parse(&filter)?)
            }
            "$meta" => {
                return Err(QueryError::new(
                    codes::COMMAND_NOT_SUPPORTED,
                    format!("$meta projection of {key} is not supported by Slipstream"),
                ))
            }
            operator if operator.starts_with('$') => {
                Action::Computed(Expr::parse(&Bson::Document(sub.clone()))?)
            }
            _ => {
                // A nested projection: `{a: {b: 1}}` is `{"a.b": 1}`.
                for (name, value) in sub {
                    self.entry(&format!("{key}.{name}"), value)?;
                }
                return Ok(());
            }
        };
        self.add(key, action)
    }

    fn add(&mut self, key: &str, action: Action) -> Result<(), QueryError> {
        let kind = match action {
            Action::Include | Action::Computed(_) | Action::ElemMatch(_) | Action::Positional => {
                Kind::Include
            }
            Action::Exclude => Kind::Exclude,
            Action::Slice { .. } | Action::Children(_) => Kind::Neutral,
        };
        self.check_mixing(key, kind)?;
        let parts: Vec<&str> = key.split('.').collect();
        self.tree.insert(&parts, action, key)
    }

    fn check_mixing(&mut self, key: &str, kind: Kind) -> Result<(), QueryError> {
        if kind == Kind::Neutral {
            return Ok(());
        }
        match &self.kind {
            None => self.kind = Some((kind, key.to_string())),
            Some((existing, _)) if *existing == kind => {}
            Some((Kind::Include, _)) => {
                return Err(QueryError::new(
                    31254,
                    format!("Cannot do exclusion on field {key} in inclusion projection"),
                ))
            }
            Some(_) => {
                return Err(QueryError::new(
                    31253,
                    format!("Cannot do inclusion on field {key} in exclusion projection"),
                ))
            }
        }
        Ok(())
    }
}

fn validate_path(key: &str) -> Result<(), QueryError> {
    crate::depth::check_field_path(key)?;
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(QueryError::bad_value(format!(
            "projection path '{key}' has an empty field name"
        )));
    }
    if key.starts_with('$') {
        return Err(QueryError::bad_value(format!(
            "FieldPath field names may not start with '$': {key}"
        )));
    }
    Ok(())
}

fn slice_number(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_finite() => Some(f.trunc() as i64),
        _ => None,
    }
}

fn parse_slice(argument: &Bson) -> Result<Action, QueryError> {
    if let Some(limit) = slice_number(argument) {
        return Ok(Action::Slice { skip: None, limit });
    }
    let items = match argument {
        Bson::Array(items) if items.len() == 2 => items,
        _ => {
            return Err(QueryError::new(
                28667,
                "$slice only supports numbers and [skip, limit] arrays",
            ))
        }
    };
    let (skip, limit) = match (slice_number(&items[0]), slice_number(&items[1])) {
        (Some(skip), Some(limit)) => (skip, limit),
        _ => {
            return Err(QueryError::new(
                28667,
                "$slice only supports numbers and [skip, limit] arrays",
            ))
        }
    };
    if limit <= 0 {
        return Err(QueryError::new(
            28724,
            format!("$slice limit must be positive, not {limit}"),
        ));
    }
    Ok(Action::Slice {
        skip: Some(skip),
        limit,
    })
}

fn apply_slice(items: &[Bson], skip: Option<i64>, limit: i64) -> Vec<Bson> {
    let len = items.len() as i64;
    let (start, count) = match skip {
        None if limit >= 0 => (0, limit),
        None => ((len + limit).max(0), len),
        Some(skip) if skip >= 0 => (skip.min(len), limit),
        Some(skip) => ((len + skip).max(0), limit),
    };
    let end = start.saturating_add(count).min(len);
    items[start as usize..end.max(start) as usize].to_vec()
}

struct Context<'a> {
    root: &'a Document,
    position: Option<usize>,
    vars: &'a Variables,
}

impl<'a> Context<'a> {
    fn include_document(
        &self,
        doc: &Document,
        tree: &Tree,
        out: &mut Document,
    ) -> Result<(), QueryError> {
        for (name, value) in doc {
            let projected = match tree.get(name) {
                Some(action) => self.include_value(name, value, action)?,
                None => None,
            };
            if let Some(projected) = projected {
                out.insert(name.clone(), projected);
            }
        }
        for (name, action) in &tree.fields {
            if doc.contains_key(name) {
                continue;
            }
            match action {
                Action::Computed(expr) => {
                    if let Some(value) = expr.evaluate_optional(self.root, self.vars)? {
                        out.insert(name.clone(), value);
                    }
                }
                Action::Children(child) if child.has_computed() => {
                    let mut sub = Document::new();
                    self.include_document(&Document::new(), child, &mut sub)?;
                    out.insert(name.clone(), sub);
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn include_value(
        &self,
        name: &str,
        value: &Bson,
        action: &Action,
    ) -> Result<Option<Bson>, QueryError> {
        Ok(match action {
            Action::Include => Some(value.clone()),
            Action::Exclude => None,
            Action::Slice { skip, limit } => Some(match value {
                Bson::Array(items) => Bson::Array(apply_slice(items, *skip, *limit)),
                other => other.clone(),
            }),
            Action::ElemMatch(filter) => match value {
                Bson::Array(items) => {
                    first_elem_match(name, items, filter).map(|item| Bson::Array(vec![item]))
                }
                _ => None,
            },
            Action::Positional => Some(Bson::Array(vec![self.positional_element(name, value)?])),
            Action::Computed(expr) => expr.evaluate_optional(self.root, self.vars)?,
            Action::Children(child) => match value {
                Bson::Document(sub) => {
                    let mut out = Document::new();
                    self.include_document(sub, child, &mut out)?;
                    Some(Bson::Document(out))
                }
                Bson::Array(_) if child.has_positional() => {
                    let item = self.positional_element(name, value)?;
                    self.include_value(name, &item, action)?
                        .map(|v| Bson::Array(vec![v]))
                }
                Bson::Array(items) => Some(Bson::Array(self.include_array(items, child)?)),
                _ => None,
            },
        })
    }

    /// Inclusion below an array keeps the documents (projected) and nested
    /// arrays, and drops scalars, as MongoDB does.
    fn include_array(&self, items: &[Bson], tree: &Tree) -> Result<Vec<Bson>, QueryError> {
        let mut out = Vec::new();
        for item in items {
            match item {
                Bson::Document(sub) => {
                    let mut projected = Document::new();
                    self.include_document(sub, tree, &mut projected)?;
                    out.push(Bson::Document(projected));
                }
                Bson::Array(nested) => out.push(Bson::Array(self.include_array(nested, tree)?)),
                _ => {}
            }
        }
        Ok(out)
    }

    fn positional_element(&self, name: &str, value: &Bson) -> Result<Bson, QueryError> {
        let items = match value {
            Bson::Array(items) => items,
            _ => {
                return Err(QueryError::new(
                    51246,
                    format!("positional operator '{name}.$' requires the field to be an array"),
                ))
            }
        };
        self.position
            .and_then(|position| items.get(position))
            .cloned()
            .ok_or_else(|| {
                QueryError::new(
                    51246,
                    "positional operator '.$' couldn't find a matching element in the array",
                )
            })
    }

    fn exclude_document(&self, doc: &Document, tree: &Tree) -> Result<Document, QueryError> {
        let mut out = Document::new();
        for (name, value) in doc {
            let kept = match tree.get(name) {
                None => Some(value.clone()),
                Some(action) => self.exclude_value(value, action)?,
            };
            if let Some(kept) = kept {
                out.insert(name.clone(), kept);
            }
        }
        Ok(out)
    }

    fn exclude_value(&self, value: &Bson, action: &Action) -> Result<Option<Bson>, QueryError> {
        Ok(match (action, value) {
            (Action::Exclude, _) => None,
            (Action::Slice { skip, limit }, Bson::Array(items)) => {
                Some(Bson::Array(apply_slice(items, *skip, *limit)))
            }
            (Action::Children(child), Bson::Document(sub)) => {
                Some(Bson::Document(self.exclude_document(sub, child)?))
            }
            (Action::Children(_), Bson::Array(items)) => {
                // Documents inside the array lose the excluded fields;
                // scalars stay.
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    if let Some(kept) = self.exclude_value(item, action)? {
                        out.push(kept);
                    }
                }
                Some(Bson::Array(out))
            }
            _ => Some(value.clone()),
        })
    }
}

/// The first element of `items` that satisfies the `$elemMatch` filter.
fn first_elem_match(name: &str, items: &[Bson], filter: &Filter) -> Option<Bson> {
    items.iter().find_map(|item| {
        let mut probe = Document::new();
        probe.insert(name, Bson::Array(vec![item.clone()]));
        filter.matches(&probe).then(|| item.clone())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn slice_forms_follow_mongodb() {
        let items: Vec<Bson> = (1..=5).map(Bson::Int32).collect();
        assert_eq!(
            apply_slice(&items, None, 2),
            vec![Bson::Int32(1), Bson::Int32(2)]
        );
        assert_eq!(
            apply_slice(&items, None, -2),
            vec![Bson::Int32(4), Bson::Int32(5)]
        );
        assert_eq!(apply_slice(&items, Some(-2), 1), vec![Bson::Int32(4)]);
        assert_eq!(apply_slice(&items, Some(10), 1), Vec::<Bson>::new());
        assert_eq!(apply_slice(&items, None, -10).len(), 5);
    }

    #[test]
    fn collision_is_an_error() {
        assert_eq!(
            Projection::parse(&doc! {"a": 1, "a.b": 1})
                .unwrap_err()
                .code,
            31250
        );
    }
}
