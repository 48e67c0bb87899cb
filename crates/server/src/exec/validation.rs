//! Document validation: a collection's `validator` (query operators and
//! `$jsonSchema`), `validationLevel` and `validationAction`, checked on
//! every insert and update unless the command says
//! `bypassDocumentValidation`.
//!
//! A refused document answers 121 DocumentValidationFailure with the
//! `errInfo` of MongoDB 7.0: `failingDocumentId` and `details`, which name
//! the failing operator (`$jsonSchema` with `schemaRulesNotSatisfied`, or a
//! query operator with `specifiedAs` and `consideredValue`, under `$and`'s
//! `clausesNotSatisfied` when the validator has several clauses).

use bson::{doc, Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_query::json_schema::JsonSchema;
use slipstream_storage::Engine;

use crate::error::CommandError;
use crate::exec::args;

/// MongoDB's DocumentValidationFailure.
pub const DOCUMENT_VALIDATION_FAILURE: i32 = 121;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Off,
    Strict,
    /// Updates of documents that already fail the validator are not checked.
    Moderate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Error,
    /// Log the failure and write anyway.
    Warn,
}

/// One top-level clause of a validator.
#[derive(Clone, Debug)]
enum Clause {
    Schema(JsonSchema),
    /// A query clause: its document (one field) and the parsed filter.
    Query(Document, Filter),
}

/// A collection's validator, parsed.
#[derive(Clone, Debug)]
pub struct CollectionValidator {
    clauses: Vec<Clause>,
    level: Level,
    action: Action,
}

pub fn parse_level(value: &Bson) -> Result<Level, CommandError> {
    match value.as_str() {
        Some("off") => Ok(Level::Off),
        Some("strict") => Ok(Level::Strict),
        Some("moderate") => Ok(Level::Moderate),
        _ => Err(CommandError::bad_value(format!(
            "Enumeration value '{}' for field 'validationLevel' is not a valid value.",
            display(value)
        ))),
    }
}

pub fn parse_action(value: &Bson) -> Result<Action, CommandError> {
    match value.as_str() {
        Some("error") => Ok(Action::Error),
        Some("warn") => Ok(Action::Warn),
        _ => Err(CommandError::bad_value(format!(
            "Enumeration value '{}' for field 'validationAction' is not a valid value.",
            display(value)
        ))),
    }
}

fn display(value: &Bson) -> String {
    value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string())
}

/// Checks a `validator` option (create, collMod).
pub fn check_validator(value: &Bson) -> Result<(), CommandError> {
    let Bson::Document(validator) = value else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field 'validator' is the wrong type '{}', expected type 'object'",
            args::type_name(value)
        )));
    };
    clauses(validator)?;
    Ok(())
}

/// Checks the validation options of `create` or `collMod` (`field`, `value`);
/// false when `field` is not one of them.
pub fn check_option(field: &str, value: &Bson) -> Result<bool, CommandError> {
    match field {
        "validator" => check_validator(value)?,
        "validationLevel" => {
            parse_level(value)?;
        }
        "validationAction" => {
            parse_action(value)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Whether `$rand` (or `$sampleRate`, which MongoDB rewrites to it) is
/// anywhere in the value: a validator must give one answer per document.
fn draws_random(value: &Bson) -> bool {
    names_key(value, "$rand") || names_key(value, "$sampleRate")
}

/// Whether `key` is a field name anywhere in the value.
fn names_key(value: &Bson, key: &str) -> bool {
    match value {
        Bson::Document(d) => d.iter().any(|(k, v)| k == key || names_key(v, key)),
        Bson::Array(items) => items.iter().any(|item| names_key(item, key)),
        _ => false,
    }
}

fn clauses(validator: &Document) -> Result<Vec<Clause>, CommandError> {
    if draws_random(&Bson::Document(validator.clone())) {
        return Err(CommandError::new(3040500, "$rand not allowed inside collection validators"));
    }
    if names_key(&Bson::Document(validator.clone()), "$function") {
        return Err(CommandError::new(4660800, "$function cannot be used inside a validator."));
    }
    let mut clauses = Vec::new();
    for (field, value) in validator {
        if matches!(
            field.as_str(),
            "$where" | "$text" | "$near" | "$nearSphere" | "$geoNear"
        ) {
            return Err(CommandError::new(
                4,
                format!("{field} is not allowed in collection validators"),
            ));
        }
        if field == "$jsonSchema" {
            let Bson::Document(schema) = value else {
                return Err(CommandError::type_mismatch("$jsonSchema must be an object"));
            };
            clauses.push(Clause::Schema(JsonSchema::parse(schema)?));
            continue;
        }
        let clause = doc! {field: value.clone()};
        let filter = Filter::parse(&clause)?;
        clauses.push(Clause::Query(clause, filter));
    }
    Ok(clauses)
}

impl CollectionValidator {
    /// The validator a collection's options define (`None`: none, or off).
    pub fn from_options(options: &Document) -> Result<Option<CollectionValidator>, CommandError> {
        let Some(Bson::Document(validator)) = options.get("validator") else {
            return Ok(None);
        };
        let level = options
            .get("validationLevel")
            .map(parse_level)
            .transpose()?
            .unwrap_or(Level::Strict);
        let action = options
            .get("validationAction")
            .map(parse_action)
            .transpose()?
            .unwrap_or(Action::Error);
        if level == Level::Off || validator.is_empty() {
            return Ok(None);
        }
        Ok(Some(CollectionValidator {
            clauses: clauses(validator)?,
            level,
            action,
        }))
    }

    fn clause_failure(clause: &Clause, document: &Document) -> Option<Document> {
        match clause {
            Clause::Schema(schema) => {
                let failures = schema.failures(&Bson::Document(document.clone()));
                (!failures.is_empty())
                    .then(|| doc! {"operatorName": "$jsonSchema", "schemaRulesNotSatisfied": failures})
            }
            Clause::Query(clause, filter) => (!filter.matches(document)).then(|| query_failure(clause, document)),
        }
    }

    /// `details` of `errInfo` when `document` fails, else `None`.
    pub fn failure(&self, document: &Document) -> Option<Document> {
        let failing: Vec<(usize, Document)> = self
            .clauses
            .iter()
            .enumerate()
            .filter_map(|(index, clause)| Some((index, Self::clause_failure(clause, document)?)))
            .collect();
        if failing.is_empty() {
            return None;
        }
        if self.clauses.len() == 1 {
            return failing.into_iter().next().map(|(_, details)| details);
        }
        let clauses: Vec<Bson> = failing
            .into_iter()
            .map(|(index, details)| Bson::Document(doc! {"index": index as i32, "details": details}))
            .collect();
        Some(doc! {"operatorName": "$and", "clausesNotSatisfied": clauses})
    }

    /// Checks a new or changed document; `old` is the document an update
    /// replaces (`None` for an insert).
    pub fn check(&self, document: &Document, old: Option<&Document>) -> Result<(), CommandError> {
        if self.level == Level::Moderate && old.is_some_and(|old| self.failure(old).is_some()) {
            return Ok(());
        }
        let Some(details) = self.failure(document) else {
            return Ok(());
        };
        let id = document.get("_id").cloned().unwrap_or(Bson::Null);
        if self.action == Action::Warn {
            tracing::warn!(id = 20294, failingDocumentId = %id, details = %details, "Document would fail validation");
            return Ok(());
        }
        Err(
            CommandError::new(DOCUMENT_VALIDATION_FAILURE, "Document failed validation")
                .with_extra("errInfo", doc! {"failingDocumentId": id, "details": details}),
        )
    }
}

/// The explanation of a failed query clause `{path: condition}` or
/// `{$op: ...}`: its operator, what was specified, and the value seen.
fn query_failure(clause: &Document, document: &Document) -> Document {
    let (field, condition) = clause.iter().next().expect("a clause has one field");
    if field.starts_with('$') {
        return doc! {"operatorName": field, "specifiedAs": clause.clone(), "reason": "expression did not match"};
    }
    let considered = slipstream_query::path::get_exact(document, field).cloned();
    let (operator, specified) = match condition {
        Bson::Document(operators) if operators.keys().next().is_some_and(|key| key.starts_with('$')) => {
            // The first operator the value fails names the failure.
            let failing = operators.iter().find(|(operator, argument)| {
                let single = doc! {field: {operator.as_str(): (*argument).clone()}};
                Filter::parse(&single).is_ok_and(|filter| !filter.matches(document))
            });
            match failing {
                Some((operator, argument)) => (operator.clone(), doc! {field: {operator.as_str(): argument.clone()}}),
                None => ("$and".to_string(), clause.clone()),
            }
        }
        _ => ("$eq".to_string(), clause.clone()),
    };
    let mut details = doc! {"operatorName": operator, "specifiedAs": specified};
    match considered {
        Some(value) => {
            details.insert("reason", "comparison failed");
            details.insert("consideredValue", value);
        }
        None => {
            details.insert("reason", "field was missing");
        }
    }
    details
}

/// What one write command validates against: the target's validator,
/// unless the command bypasses validation.
#[derive(Clone, Debug, Default)]
pub struct Validation {
    validator: Option<CollectionValidator>,
}

impl Validation {
    pub fn for_command(engine: &Engine, ns: &str, body: &Document, command: &str) -> Result<Validation, CommandError> {
        if args::get_bool(body, command, "bypassDocumentValidation")?.unwrap_or(false) {
            return Ok(Validation::default());
        }
        let validator = match engine.collection_info(ns) {
            Some(info) => CollectionValidator::from_options(&info.options)?,
            None => None,
        };
        Ok(Validation { validator })
    }

    pub fn check_insert(&self, document: &Document) -> Result<(), CommandError> {
        match &self.validator {
            Some(validator) => validator.check(document, None),
            None => Ok(()),
        }
    }

    pub fn check_update(&self, old: &Document, new: &Document) -> Result<(), CommandError> {
        match &self.validator {
            Some(validator) => validator.check(new, Some(old)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validator(options: Document) -> CollectionValidator {
        CollectionValidator::from_options(&options).unwrap().unwrap()
    }

    #[test]
    fn query_clauses_explain_their_failure() {
        let v = validator(doc! {"validator": {"a": {"$gt": 5}}});
        assert!(v.check(&doc! {"_id": 1, "a": 6}, None).is_ok());
        let error = v.check(&doc! {"_id": 1, "a": 1}, None).unwrap_err();
        assert_eq!(error.code, 121);
        let info = error.extra.get_document("errInfo").unwrap();
        assert_eq!(info.get_i32("failingDocumentId").unwrap(), 1);
        let details = info.get_document("details").unwrap();
        assert_eq!(details.get_str("operatorName").unwrap(), "$gt");
        assert_eq!(details.get_i32("consideredValue").unwrap(), 1);
        let two = validator(doc! {"validator": {"a": 1, "b": {"$exists": true}}});
        let details = two.failure(&doc! {"a": 1}).unwrap();
        assert_eq!(details.get_str("operatorName").unwrap(), "$and");
        assert_eq!(details.get_array("clausesNotSatisfied").unwrap().len(), 1);
    }

    #[test]
    fn levels_and_actions() {
        let moderate = validator(doc! {"validator": {"a": 1}, "validationLevel": "moderate"});
        assert!(moderate.check(&doc! {"a": 2}, Some(&doc! {"a": 3})).is_ok());
        assert!(moderate.check(&doc! {"a": 2}, Some(&doc! {"a": 1})).is_err());
        let warn = validator(doc! {"validator": {"a": 1}, "validationAction": "warn"});
        assert!(warn.check(&doc! {"a": 2}, None).is_ok());
        let off = doc! {"validator": {"a": 1}, "validationLevel": "off"};
        assert!(CollectionValidator::from_options(&off).unwrap().is_none());
    }
}
