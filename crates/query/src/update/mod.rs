//! Update documents with MongoDB 7.0 semantics: operator updates (`$set`,
//! `$inc`, `$push`, ... with `$`, `$[]` and `$[id]` paths and
//! arrayFilters), replacement documents, the seed document of an upsert,
//! and the idempotent oplog form of an update (seed 000 4.2).
//!
//! Modifiers are applied in MongoDB 5.0+ order: by target path, field
//! names compared component by component (numeric names numerically), so
//! that fields an update creates are appended in that order whatever order
//! the update document lists them in. `$set` of an existing field keeps its
//! position.

mod apply;
mod arith;
mod array_ops;
mod oplog_form;
mod pipeline;
mod rename;
mod seed;
mod spec;
mod target;

use bson::{Bson, Document};

use crate::error::{codes, QueryError};
use crate::expr::Variables;
use crate::filter::Filter;

pub use oplog_form::{apply_oplog_update, oplog_update};
pub use seed::upsert_seed;

use spec::{Action, Modifier, PullCondition};
use target::TargetPath;

/// A parsed update, ready to apply to many documents.
#[derive(Clone, Debug)]
pub struct Update {
    kind: Kind,
    /// Array filters by identifier; each matches `{identifier: element}`.
    array_filters: Vec<(String, Filter)>,
    /// The operation's collation: array filters, `$pull` conditions and
    /// the comparisons of `$min`, `$max`, `$addToSet`, `$pullAll` and
    /// `$push`'s `$sort` follow it, as in MongoDB (`None`: simple).
    collation: crate::collation::CollationRef,
}

#[derive(Clone, Debug)]
enum Kind {
    Replacement(Document),
    /// Modifiers sorted into application order.
    Operators(Vec<Modifier>),
    /// An aggregation pipeline of `$set`/`$unset`/`$project`/... stages.
    Pipeline(pipeline::UpdatePipeline),
}

/// Per-document inputs of `Update::apply`.
#[derive(Clone, Debug)]
pub struct UpdateContext {
    /// Array position from the filter match, for `$`.
    pub positional: Option<usize>,
    /// The time `$currentDate` writes.
    pub now: bson::DateTime,
    /// True when the update builds an upsert's new document
    /// (`$setOnInsert` applies).
    pub is_upsert_insert: bool,
}

/// The result of applying an update to one document.
#[derive(Clone, Debug, PartialEq)]
pub struct UpdateOutcome {
    pub document: Document,
    /// False when the result is byte-for-byte the original (MongoDB's
    /// nModified counts only real changes).
    pub modified: bool,
}

impl Update {
    /// `update` is an operator document ({$set: ...}), a replacement
    /// document (no $ keys), or an aggregation pipeline array of the
    /// stages MongoDB allows in updates.
    pub fn parse(update: &Bson, array_filters: Option<&[Document]>) -> Result<Update, QueryError> {
        let doc = match update {
            Bson::Document(doc) => doc,
            Bson::Array(stages) => {
                if array_filters.is_some_and(|f| !f.is_empty()) {
                    return Err(QueryError::failed_to_parse(
                        "arrayFilters may not be specified for pipeline-style updates",
                    ));
                }
                let pipeline = pipeline::UpdatePipeline::parse(stages)?;
                return Ok(Update {
                    kind: Kind::Pipeline(pipeline),
                    array_filters: Vec::new(),
                    collation: None,
                });
            }
            _ => {
                return Err(QueryError::failed_to_parse(
                    "Update argument must be either an object or an array",
                ))
            }
        };
        let filters = parse_array_filters(array_filters.unwrap_or(&[]))?;
        let is_operators = doc
            .keys()
            .next()
            .map(|k| k.starts_with('$'))
            .unwrap_or(false);
        if !is_operators {
            spec::check_replacement(doc)?;
            if !filters.is_empty() {
                let id = &filters[0].0;
                return Err(QueryError::failed_to_parse(format!(
                    "The array filter for identifier '{id}' was not used in the update {doc}"
                )));
            }
            return Ok(Update {
                kind: Kind::Replacement(doc.clone()),
                array_filters: filters,
                collation: None,
            });
        }
        let mut modifiers = spec::parse_operators(doc)?;
        let mut paths: Vec<&TargetPath> = Vec::with_capacity(modifiers.len() + 1);
        for modifier in &modifiers {
            paths.push(&modifier.path);
            if let Action::Rename(to) = &modifier.action {
                paths.push(to);
            }
        }
        target::check_conflicts(&paths)?;
        check_identifiers(&modifiers, &filters, doc)?;
        // Renames are placed at their destination, as MongoDB's update
        // tree places them; sort_by is stable for equal paths.
        modifiers.sort_by(|a, b| target::compare_paths(order_path(a), order_path(b)));
        Ok(Update {
            kind: Kind::Operators(modifiers),
            array_filters: filters,
            collation: None,
        })
    }

    /// The update with its string comparisons under `collation` (the
    /// operation's). A pipeline update gets it through its variables.
    pub fn with_collation(mut self, collation: crate::collation::CollationRef) -> Update {
        assert!(self.collation.is_none(), "an update is collated once");
        let Some(collation) = collation else { return self };
        let collate = |filter: &mut Filter| {
            let parsed = std::mem::replace(filter, Filter::match_all());
            *filter = parsed.with_collation(Some(collation.clone()));
        };
        self.array_filters.iter_mut().for_each(|(_, filter)| collate(filter));
        if let Kind::Operators(modifiers) = &mut self.kind {
            for modifier in modifiers {
                if let Action::Pull(PullCondition::Query(filter) | PullCondition::Operators(filter)) =
                    &mut modifier.action
                {
                    collate(filter);
                }
            }
        }
        self.collation = Some(collation);
        self
    }

    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, Kind::Replacement(_))
    }

    /// Applies the update to one document.
    pub fn apply(&self, doc: &Document, ctx: &UpdateContext) -> Result<UpdateOutcome, QueryError> {
        self.apply_with_variables(doc, ctx, &Variables::empty().with_now(ctx.now))
    }

    /// Applies the update with a command's variables (built by
    /// `Variables::with_let(let, now)`): a pipeline-style update sees the
    /// `let` constants as `$$name`. `$$NOW` is `ctx.now` unless `vars`
    /// sets it. Operator and replacement updates hold no expressions, so
    /// for them this is `apply`.
    pub fn apply_with_variables(
        &self,
        doc: &Document,
        ctx: &UpdateContext,
        vars: &Variables,
    ) -> Result<UpdateOutcome, QueryError> {
        let result = match &self.kind {
            Kind::Replacement(replacement) => replace(doc, replacement)?,
            Kind::Pipeline(pipeline) => {
                let output = match vars.now() {
                    Some(_) => pipeline.run_with_variables(doc, vars)?,
                    None => pipeline.run_with_variables(doc, &vars.clone().with_now(ctx.now))?,
                };
                replace(doc, &output)?
            }
            Kind::Operators(modifiers) => {
                let env = apply::Env {
                    positional: ctx.positional,
                    now: ctx.now,
                    is_upsert_insert: ctx.is_upsert_insert,
                    array_filters: &self.array_filters,
                    collation: self.collation.as_deref(),
                    original: doc,
                    id_text: match doc.get("_id") {
                        Some(id) => format!("{{_id: {id}}}"),
                        None => "{}".to_string(),
                    },
                };
                let mut result = doc.clone();
                let mut touched = apply::Touched {
                    enabled: modifiers.iter().any(|m| m.path.is_dynamic()),
                    paths: Vec::new(),
                };
                for modifier in modifiers {
                    apply::apply_modifier(&mut result, modifier, &env, &mut touched)?;
                }
                if touched.enabled {
                    target::check_reached_paths(&touched.paths)?;
                }
                if let Some(id) = doc.get("_id") {
                    if !result.get("_id").is_some_and(|new| same_bytes(id, new)) {
                        return Err(QueryError::new(
                            codes::IMMUTABLE_FIELD,
                            "Performing an update on the path '_id' would modify the immutable field '_id'",
                        ));
                    }
                }
                result
            }
        };
        // A path or a value may have made the result deeper than any
        // stored document may be; refuse it before encoding it below or
        // handing it on.
        crate::validate::check_updated_depth(&result)?;
        let modified = !same_document(doc, &result);
        Ok(UpdateOutcome {
            document: result,
            modified,
        })
    }
}

fn order_path(modifier: &Modifier) -> &TargetPath {
    match &modifier.action {
        Action::Rename(to) => to,
        _ => &modifier.path,
    }
}

/// A replacement keeps the original `_id` (first when the replacement has
/// none) and may not change it.
fn replace(original: &Document, replacement: &Document) -> Result<Document, QueryError> {
    let Some(id) = original.get("_id") else {
        return Ok(replacement.clone());
    };
    match replacement.get("_id") {
        Some(new_id) if same_bytes(id, new_id) => Ok(replacement.clone()),
        Some(new_id) => Err(QueryError::new(
            codes::IMMUTABLE_FIELD,
            format!("After applying the update, the (immutable) field '_id' was found to have been altered to _id: {new_id}"),
        )),
        None => {
            let mut result = Document::new();
            result.insert("_id", id.clone());
            for (key, value) in replacement {
                result.insert(key.clone(), value.clone());
            }
            Ok(result)
        }
    }
}

/// Exact equality (type and bytes), unlike `values_equal` for which
/// `1 == 1.0`.
pub(crate) fn same_bytes(a: &Bson, b: &Bson) -> bool {
    let mut left = Document::new();
    left.insert("v", a.clone());
    let mut right = Document::new();
    right.insert("v", b.clone());
    same_document(&left, &right)
}

/// Byte-for-byte document equality, field order included (`Document`'s
/// own `==` ignores order).
pub(crate) fn same_document(a: &Document, b: &Document) -> bool {
    match (a.to_vec(), b.to_vec()) {
        (Ok(x), Ok(y)) => x == y,
        // Serialisation fails only for documents no client could send.
        _ => false,
    }
}

/// Parses arrayFilters into (identifier, filter over `{identifier: elt}`).
fn parse_array_filters(filters: &[Document]) -> Result<Vec<(String, Filter)>, QueryError> {
    let mut parsed: Vec<(String, Filter)> = Vec::with_capacity(filters.len());
    for filter in filters {
        let mut ids = Vec::new();
        collect_identifiers(filter, &mut ids);
        let Some(id) = ids.first().cloned() else {
            return Err(QueryError::failed_to_parse(
                "Cannot use an expression without a top-level field name in arrayFilters",
            ));
        };
        if let Some(other) = ids.iter().find(|other| **other != id) {
            return Err(QueryError::failed_to_parse(format!(
                "Error parsing array filter :: caused by :: Expected a single top-level field name, found '{id}' and '{other}'"
            )));
        }
        target::validate_identifier(&id)?;
        if parsed.iter().any(|(existing, _)| *existing == id) {
            return Err(QueryError::failed_to_parse(format!(
                "Found multiple array filters with the same top-level field name {id}"
            )));
        }
        parsed.push((id, Filter::parse(filter)?));
    }
    Ok(parsed)
}

fn collect_identifiers(filter: &Document, out: &mut Vec<String>) {
    for (key, value) in filter {
        if matches!(key.as_str(), "$and" | "$or" | "$nor") {
            if let Bson::Array(clauses) = value {
                for clause in clauses {
                    if let Bson::Document(clause) = clause {
                        collect_identifiers(clause, out);
                    }
                }
            }
        } else if !key.starts_with('$') {
            out.push(key.split('.').next().unwrap_or(key).to_string());
        }
    }
}

/// Every `$[id]` needs a filter and every filter must be used.
fn check_identifiers(
    modifiers: &[Modifier],
    filters: &[(String, Filter)],
    update: &Document,
) -> Result<(), QueryError> {
    let mut used: Vec<&str> = Vec::new();
    for modifier in modifiers {
        for id in modifier.path.identifiers() {
            if !filters.iter().any(|(name, _)| name == id) {
                return Err(QueryError::bad_value(format!(
                    "No array filter found for identifier '{id}' in path '{}'",
                    modifier.path.dotted
                )));
            }
            used.push(id);
        }
    }
    for (id, _) in filters {
        if !used.contains(&id.as_str()) {
            return Err(QueryError::failed_to_parse(format!(
                "The array filter for identifier '{id}' was not used in the update {update}"
            )));
        }
    }
    Ok(())
}
