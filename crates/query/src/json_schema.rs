//! `$jsonSchema`: the JSON Schema draft 4 subset MongoDB 7.0 supports, with
//! its `bsonType` extension, for collection validators.
//!
//! As in JSON Schema, a keyword constrains only values of its own type
//! (`minimum` ignores strings, `required` ignores arrays). A failed check
//! explains itself in the shape MongoDB 7.0 puts under
//! `errInfo.details.schemaRulesNotSatisfied`, so a client sees which rule
//! failed and on what value.

use bson::{doc, Bson, Document};

use crate::compare::{as_number, canonical_type_rank, compare_values, type_name, values_equal, Number};
use crate::error::QueryError;
use crate::filter::{RegexMatcher, TypeSet};

/// How deep schemas may nest (`properties` within `properties`, ...).
const SCHEMA_DEPTH_MAX: usize = 100;

/// Keywords of draft 4 MongoDB parses but does not implement (code 9).
const UNSUPPORTED_KEYWORDS: &[&str] = &["$ref", "$schema", "default", "definitions", "format", "id"];

/// A parsed schema: its rules in the order they were written.
#[derive(Clone, Debug)]
pub struct JsonSchema {
    rules: Vec<Rule>,
}

#[derive(Clone, Debug)]
enum Rule {
    /// `bsonType` or `type` (the keyword, what was specified, the codes).
    Type(&'static str, Bson, TypeSet),
    Enum(Vec<Bson>),
    Required(Vec<String>),
    Properties(Vec<(String, JsonSchema)>),
    PatternProperties(Vec<(RegexMatcher, JsonSchema)>),
    AdditionalProperties(Additional, Vec<String>, Vec<RegexMatcher>),
    MinProperties(usize),
    MaxProperties(usize),
    Minimum(Bson, bool),
    Maximum(Bson, bool),
    MultipleOf(Bson),
    MinLength(usize),
    MaxLength(usize),
    Pattern(RegexMatcher, String),
    Items(Items),
    MinItems(usize),
    MaxItems(usize),
    UniqueItems,
    AllOf(Vec<JsonSchema>),
    AnyOf(Vec<JsonSchema>),
    OneOf(Vec<JsonSchema>),
    Not(Box<JsonSchema>),
}

#[derive(Clone, Debug)]
enum Additional {
    Forbidden,
    Schema(Box<JsonSchema>),
}

#[derive(Clone, Debug)]
enum Items {
    Each(Box<JsonSchema>),
    /// A schema per position, then `additionalItems` (`None`: any).
    Tuple(Vec<JsonSchema>, Option<Additional>),
}

fn bad(message: impl Into<String>) -> QueryError {
    QueryError::failed_to_parse(message)
}

fn count(keyword: &str, value: &Bson) -> Result<usize, QueryError> {
    match as_number(value) {
        Some(Number::Int(n)) if n >= 0 => Ok(n as usize),
        Some(Number::Float(f)) if f >= 0.0 && f.fract() == 0.0 => Ok(f as usize),
        _ => Err(bad(format!(
            "$jsonSchema keyword '{keyword}' must be a representable as a non-negative integer"
        ))),
    }
}

fn schemas(keyword: &str, value: &Bson, depth: usize) -> Result<Vec<JsonSchema>, QueryError> {
    let Bson::Array(items) = value else {
        return Err(QueryError::type_mismatch(format!(
            "$jsonSchema keyword '{keyword}' must be an array"
        )));
    };
    if items.is_empty() {
        return Err(bad(format!(
            "$jsonSchema keyword '{keyword}' must be a non-empty array"
        )));
    }
    items
        .iter()
        .map(|item| JsonSchema::parse_value(keyword, item, depth + 1))
        .collect()
}

/// JSON Schema's `type` names as BSON type codes (`integer` is not
/// supported by MongoDB: use `bsonType`).
fn json_type(name: &Bson) -> Result<Bson, QueryError> {
    let alias = match name.as_str() {
        Some("object") => "object",
        Some("array") => "array",
        Some("number") => "number",
        Some("boolean") => "bool",
        Some("string") => "string",
        Some("null") => "null",
        Some("integer") => return Err(bad("$jsonSchema type 'integer' is not currently supported.")),
        _ => return Err(bad(format!("Unknown type name alias: {name}"))),
    };
    Ok(Bson::String(alias.to_string()))
}

impl JsonSchema {
    pub fn parse(schema: &Document) -> Result<JsonSchema, QueryError> {
        JsonSchema::parse_at(schema, 0)
    }

    fn parse_value(keyword: &str, value: &Bson, depth: usize) -> Result<JsonSchema, QueryError> {
        match value {
            Bson::Document(schema) => JsonSchema::parse_at(schema, depth),
            _ => Err(QueryError::type_mismatch(format!(
                "$jsonSchema keyword '{keyword}' must be an object"
            ))),
        }
    }

    fn parse_at(schema: &Document, depth: usize) -> Result<JsonSchema, QueryError> {
        if depth > SCHEMA_DEPTH_MAX {
            return Err(bad(format!("$jsonSchema nested more than {SCHEMA_DEPTH_MAX} levels")));
        }
        if schema.contains_key("type") && schema.contains_key("bsonType") {
            return Err(bad("Cannot specify both $jsonSchema keywords 'type' and 'bsonType'"));
        }
        let mut rules = Vec::new();
        for (keyword, value) in schema {
            if let Some(rule) = parse_rule(schema, keyword, value, depth)? {
                rules.push(rule);
            }
        }
        Ok(JsonSchema { rules })
    }

    /// True when `document` satisfies the schema.
    pub fn matches(&self, document: &Document) -> bool {
        self.failures(&Bson::Document(document.clone())).is_empty()
    }

    /// The rules `value` does not satisfy, each as MongoDB explains it.
    pub fn failures(&self, value: &Bson) -> Vec<Document> {
        self.rules.iter().filter_map(|rule| rule.failure(value)).collect()
    }
}

fn parse_rule(schema: &Document, keyword: &str, value: &Bson, depth: usize) -> Result<Option<Rule>, QueryError> {
    let rule = match keyword {
        "title" | "description" => return Ok(None),
        "bsonType" => Rule::Type("bsonType", value.clone(), TypeSet::parse(value)?),
        "type" => {
            let names = match value {
                Bson::Array(names) => names.iter().map(json_type).collect::<Result<Vec<_>, _>>()?,
                name => vec![json_type(name)?],
            };
            Rule::Type("type", value.clone(), TypeSet::parse(&Bson::Array(names))?)
        }
        "enum" => match value {
            Bson::Array(values) if !values.is_empty() => Rule::Enum(values.clone()),
            _ => return Err(bad("$jsonSchema keyword 'enum' must be a non-empty array")),
        },
        "required" => match value {
            Bson::Array(names) if !names.is_empty() => Rule::Required(
                names
                    .iter()
                    .map(|name| name.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("$jsonSchema keyword 'required' must be an array of strings"))?,
            ),
            _ => {
                return Err(bad(
                    "$jsonSchema keyword 'required' must be a non-empty array of strings",
                ))
            }
        },
        "properties" => {
            let Bson::Document(properties) = value else {
                return Err(QueryError::type_mismatch(
                    "$jsonSchema keyword 'properties' must be an object",
                ));
            };
            let mut parsed = Vec::new();
            for (name, schema) in properties {
                parsed.push((name.clone(), JsonSchema::parse_value("properties", schema, depth + 1)?));
            }
            Rule::Properties(parsed)
        }
        "patternProperties" => Rule::PatternProperties(pattern_properties(value, depth)?),
        "additionalProperties" => {
            let additional = additional(keyword, value, depth)?;
            let names = match schema.get("properties") {
                Some(Bson::Document(properties)) => properties.keys().cloned().collect(),
                _ => Vec::new(),
            };
            let patterns = match schema.get("patternProperties") {
                Some(patterns) => pattern_properties(patterns, depth)?
                    .into_iter()
                    .map(|(regex, _)| regex)
                    .collect(),
                None => Vec::new(),
            };
            match additional {
                Some(additional) => Rule::AdditionalProperties(additional, names, patterns),
                None => return Ok(None),
            }
        }
        "minProperties" => Rule::MinProperties(count(keyword, value)?),
        "maxProperties" => Rule::MaxProperties(count(keyword, value)?),
        "minimum" | "maximum" | "multipleOf" => {
            if as_number(value).is_none() {
                return Err(QueryError::type_mismatch(format!(
                    "$jsonSchema keyword '{keyword}' must be a number"
                )));
            }
            let exclusive = |name| matches!(schema.get(name), Some(Bson::Boolean(true)));
            match keyword {
                "minimum" => Rule::Minimum(value.clone(), exclusive("exclusiveMinimum")),
                "maximum" => Rule::Maximum(value.clone(), exclusive("exclusiveMaximum")),
                _ => Rule::MultipleOf(value.clone()),
            }
        }
        "exclusiveMinimum" | "exclusiveMaximum" => {
            let bound = if keyword == "exclusiveMinimum" {
                "minimum"
            } else {
                "maximum"
            };
            if !matches!(value, Bson::Boolean(_)) {
                return Err(QueryError::type_mismatch(format!(
                    "$jsonSchema keyword '{keyword}' must be a boolean"
                )));
            }
            if !schema.contains_key(bound) {
                return Err(bad(format!(
                    "$jsonSchema keyword '{bound}' must be a present if {keyword} is present"
                )));
            }
            return Ok(None);
        }
        "minLength" => Rule::MinLength(count(keyword, value)?),
        "maxLength" => Rule::MaxLength(count(keyword, value)?),
        "pattern" => {
            let Bson::String(pattern) = value else {
                return Err(QueryError::type_mismatch(
                    "$jsonSchema keyword 'pattern' must be a string",
                ));
            };
            Rule::Pattern(RegexMatcher::new(pattern, "")?, pattern.clone())
        }
        "items" => match value {
            Bson::Array(_) => {
                let additional = match schema.get("additionalItems") {
                    Some(items) => additional("additionalItems", items, depth)?,
                    None => None,
                };
                Rule::Items(Items::Tuple(schemas(keyword, value, depth)?, additional))
            }
            schema => Rule::Items(Items::Each(Box::new(JsonSchema::parse_value(
                keyword,
                schema,
                depth + 1,
            )?))),
        },
        "additionalItems" => {
            additional(keyword, value, depth)?;
            return Ok(None);
        }
        "minItems" => Rule::MinItems(count(keyword, value)?),
        "maxItems" => Rule::MaxItems(count(keyword, value)?),
        "uniqueItems" => match value {
            Bson::Boolean(true) => Rule::UniqueItems,
            Bson::Boolean(false) => return Ok(None),
            _ => {
                return Err(QueryError::type_mismatch(
                    "$jsonSchema keyword 'uniqueItems' must be a boolean",
                ))
            }
        },
        "allOf" => Rule::AllOf(schemas(keyword, value, depth)?),
        "anyOf" => Rule::AnyOf(schemas(keyword, value, depth)?),
        "oneOf" => Rule::OneOf(schemas(keyword, value, depth)?),
        "not" => Rule::Not(Box::new(JsonSchema::parse_value(keyword, value, depth + 1)?)),
        "dependencies" => {
            return Err(bad("$jsonSchema keyword 'dependencies' is not supported by Slipstream"));
        }
        other if UNSUPPORTED_KEYWORDS.contains(&other) => {
            return Err(bad(format!("$jsonSchema keyword '{other}' is not currently supported")));
        }
        other => return Err(bad(format!("Unknown $jsonSchema keyword: {other}"))),
    };
    Ok(Some(rule))
}

fn pattern_properties(value: &Bson, depth: usize) -> Result<Vec<(RegexMatcher, JsonSchema)>, QueryError> {
    let Bson::Document(patterns) = value else {
        return Err(QueryError::type_mismatch(
            "$jsonSchema keyword 'patternProperties' must be an object",
        ));
    };
    let mut parsed = Vec::new();
    for (pattern, schema) in patterns {
        parsed.push((
            RegexMatcher::new(pattern, "")?,
            JsonSchema::parse_value("patternProperties", schema, depth + 1)?,
        ));
    }
    Ok(parsed)
}

/// `additionalProperties` / `additionalItems`: `true` (`None`), `false`, or a schema.
fn additional(keyword: &str, value: &Bson, depth: usize) -> Result<Option<Additional>, QueryError> {
    match value {
        Bson::Boolean(true) => Ok(None),
        Bson::Boolean(false) => Ok(Some(Additional::Forbidden)),
        Bson::Document(_) => Ok(Some(Additional::Schema(Box::new(JsonSchema::parse_value(
            keyword,
            value,
            depth + 1,
        )?)))),
        _ => Err(QueryError::type_mismatch(format!(
            "$jsonSchema keyword '{keyword}' must be either an object or a boolean"
        ))),
    }
}

/// A failure naming the rule, what was specified, why, and the value.
fn failed(name: &str, specified: Bson, reason: &str, value: &Bson) -> Document {
    doc! {
        "operatorName": name,
        "specifiedAs": {name: specified},
        "reason": reason,
        "consideredValue": value.clone(),
    }
}

fn number_compare(value: &Bson, bound: &Bson) -> Option<std::cmp::Ordering> {
    (as_number(value).is_some() && canonical_type_rank(value) == canonical_type_rank(bound))
        .then(|| compare_values(value, bound))
}

fn is_multiple(value: &Bson, divisor: &Bson) -> bool {
    let as_f64 = |number| match number {
        Number::Int(n) => n as f64,
        Number::Float(f) => f,
    };
    match (as_number(value), as_number(divisor)) {
        (Some(value), Some(divisor)) => {
            let divisor = as_f64(divisor);
            divisor != 0.0 && (as_f64(value) % divisor) == 0.0
        }
        _ => true,
    }
}

impl Rule {
    fn failure(&self, value: &Bson) -> Option<Document> {
        match self {
            Rule::Type(keyword, specified, types) => (!types.matches(Some(value))).then(|| {
                let mut failure = failed(keyword, specified.clone(), "type did not match", value);
                failure.insert("consideredType", type_name(value));
                failure
            }),
            Rule::Enum(values) => (!values.iter().any(|candidate| values_equal(candidate, value))).then(|| {
                failed(
                    "enum",
                    Bson::Array(values.clone()),
                    "value was not found in enum",
                    value,
                )
            }),
            Rule::Minimum(bound, exclusive) => {
                let order = number_compare(value, bound)?;
                let below = order.is_lt() || (*exclusive && order.is_eq());
                below.then(|| failed("minimum", bound.clone(), "comparison failed", value))
            }
            Rule::Maximum(bound, exclusive) => {
                let order = number_compare(value, bound)?;
                let above = order.is_gt() || (*exclusive && order.is_eq());
                above.then(|| failed("maximum", bound.clone(), "comparison failed", value))
            }
            Rule::MultipleOf(divisor) => (!is_multiple(value, divisor)).then(|| {
                failed(
                    "multipleOf",
                    divisor.clone(),
                    "considered value is not a multiple of the specified value",
                    value,
                )
            }),
            Rule::MinLength(min) | Rule::MaxLength(min) => {
                let Bson::String(text) = value else { return None };
                let length = text.chars().count();
                let (name, bad) = match self {
                    Rule::MinLength(_) => ("minLength", length < *min),
                    _ => ("maxLength", length > *min),
                };
                bad.then(|| {
                    failed(
                        name,
                        Bson::Int64(*min as i64),
                        "specified string length was not satisfied",
                        value,
                    )
                })
            }
            Rule::Pattern(regex, pattern) => {
                let Bson::String(text) = value else { return None };
                (!regex.is_match_str(text)).then(|| {
                    failed(
                        "pattern",
                        Bson::String(pattern.clone()),
                        "regular expression did not match",
                        value,
                    )
                })
            }
            _ => self.structure_failure(value),
        }
    }

    /// The rules on documents and arrays, and the combinators.
    fn structure_failure(&self, value: &Bson) -> Option<Document> {
        match (self, value) {
            (Rule::Required(names), Bson::Document(document)) => {
                let missing: Vec<Bson> = names
                    .iter()
                    .filter(|name| !document.contains_key(name.as_str()))
                    .map(|n| Bson::String(n.clone()))
                    .collect();
                let specified: Vec<Bson> = names.iter().map(|n| Bson::String(n.clone())).collect();
                (!missing.is_empty()).then(|| {
                    doc! {"operatorName": "required", "specifiedAs": {"required": specified}, "missingProperties": missing}
                })
            }
            (Rule::Properties(properties), Bson::Document(document)) => {
                let failing: Vec<Bson> = properties
                    .iter()
                    .filter_map(|(name, schema)| {
                        let details = schema.failures(document.get(name)?);
                        (!details.is_empty()).then(|| Bson::Document(doc! {"propertyName": name, "details": details}))
                    })
                    .collect();
                (!failing.is_empty()).then(|| doc! {"operatorName": "properties", "propertiesNotSatisfied": failing})
            }
            (Rule::PatternProperties(patterns), Bson::Document(document)) => {
                let failing: Vec<Bson> = document
                    .iter()
                    .flat_map(|(name, field)| {
                        patterns
                            .iter()
                            .filter(|(regex, _)| regex.is_match_str(name))
                            .filter_map(move |(_, schema)| {
                                let details = schema.failures(field);
                                (!details.is_empty())
                                    .then(|| Bson::Document(doc! {"propertyName": name, "details": details}))
                            })
                    })
                    .collect();
                (!failing.is_empty())
                    .then(|| doc! {"operatorName": "patternProperties", "propertiesNotSatisfied": failing})
            }
            (Rule::AdditionalProperties(additional, names, patterns), Bson::Document(document)) => {
                let extra: Vec<&String> = document
                    .keys()
                    .filter(|key| !names.contains(key) && !patterns.iter().any(|regex| regex.is_match_str(key)))
                    .collect();
                match additional {
                    Additional::Forbidden => (!extra.is_empty()).then(|| {
                        let extra: Vec<Bson> = extra.iter().map(|name| Bson::String((*name).clone())).collect();
                        doc! {
                            "operatorName": "additionalProperties",
                            "specifiedAs": {"additionalProperties": false},
                            "additionalProperties": extra,
                        }
                    }),
                    Additional::Schema(schema) => {
                        let failing: Vec<Bson> = extra
                            .iter()
                            .filter_map(|name| {
                                let details = schema.failures(document.get(name.as_str())?);
                                (!details.is_empty())
                                    .then(|| Bson::Document(doc! {"propertyName": (*name).clone(), "details": details}))
                            })
                            .collect();
                        (!failing.is_empty())
                            .then(|| doc! {"operatorName": "additionalProperties", "propertiesNotSatisfied": failing})
                    }
                }
            }
            (Rule::MinProperties(n) | Rule::MaxProperties(n), Bson::Document(document)) => {
                let (name, bad) = match self {
                    Rule::MinProperties(_) => ("minProperties", document.len() < *n),
                    _ => ("maxProperties", document.len() > *n),
                };
                bad.then(|| {
                    let mut failure = failed(
                        name,
                        Bson::Int64(*n as i64),
                        "specified number of properties was not satisfied",
                        value,
                    );
                    failure.insert("numberOfProperties", document.len() as i32);
                    failure
                })
            }
            (Rule::MinItems(n) | Rule::MaxItems(n), Bson::Array(items)) => {
                let (name, bad) = match self {
                    Rule::MinItems(_) => ("minItems", items.len() < *n),
                    _ => ("maxItems", items.len() > *n),
                };
                bad.then(|| {
                    failed(
                        name,
                        Bson::Int64(*n as i64),
                        "array did not match specified length",
                        value,
                    )
                })
            }
            (Rule::UniqueItems, Bson::Array(items)) => {
                let duplicate = items.iter().enumerate().find_map(|(i, item)| {
                    items[..i]
                        .iter()
                        .any(|earlier| values_equal(earlier, item))
                        .then_some(item)
                })?;
                let mut failure = failed("uniqueItems", Bson::Boolean(true), "found a duplicate item", value);
                failure.insert("duplicatedValue", duplicate.clone());
                Some(failure)
            }
            (Rule::Items(items), Bson::Array(values)) => items_failure(items, values),
            (Rule::AllOf(schemas) | Rule::AnyOf(schemas) | Rule::OneOf(schemas), _) => {
                combinator_failure(self, schemas, value)
            }
            (Rule::Not(schema), _) => schema
                .failures(value)
                .is_empty()
                .then(|| doc! {"operatorName": "not", "reason": "child expression matched"}),
            _ => None,
        }
    }
}

fn items_failure(items: &Items, values: &[Bson]) -> Option<Document> {
    let (index, details) = values.iter().enumerate().find_map(|(index, value)| {
        let schema = match items {
            Items::Each(schema) => Some(schema.as_ref()),
            Items::Tuple(schemas, additional) => match (schemas.get(index), additional) {
                (Some(schema), _) => Some(schema),
                (None, Some(Additional::Schema(schema))) => Some(schema.as_ref()),
                (None, Some(Additional::Forbidden)) => return Some((index, Vec::new())),
                (None, None) => None,
            },
        }?;
        let details = schema.failures(value);
        (!details.is_empty()).then_some((index, details))
    })?;
    Some(doc! {
        "operatorName": "items",
        "reason": "At least one item did not match the sub-schema",
        "itemIndex": index as i32,
        "details": details,
    })
}

fn combinator_failure(rule: &Rule, schemas: &[JsonSchema], value: &Bson) -> Option<Document> {
    let results: Vec<Vec<Document>> = schemas.iter().map(|schema| schema.failures(value)).collect();
    let satisfied = results.iter().filter(|failures| failures.is_empty()).count();
    let (name, ok) = match rule {
        Rule::AllOf(_) => ("allOf", satisfied == schemas.len()),
        Rule::AnyOf(_) => ("anyOf", satisfied > 0),
        _ => ("oneOf", satisfied == 1),
    };
    if ok {
        return None;
    }
    let not_satisfied: Vec<Bson> = results
        .into_iter()
        .enumerate()
        .filter(|(_, failures)| !failures.is_empty())
        .map(|(index, details)| Bson::Document(doc! {"index": index as i32, "details": details}))
        .collect();
    Some(doc! {"operatorName": name, "schemasNotSatisfied": not_satisfied})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(spec: Document) -> JsonSchema {
        JsonSchema::parse(&spec).unwrap()
    }

    #[test]
    fn keywords_apply_to_their_own_types() {
        let s = schema(doc! {
            "bsonType": "object",
            "required": ["name"],
            "properties": {
                "name": {"bsonType": "string", "minLength": 2},
                "age": {"bsonType": "int", "minimum": 0, "maximum": 150},
                "tags": {"bsonType": "array", "items": {"bsonType": "string"}, "uniqueItems": true},
                "kind": {"enum": ["a", "b"]},
            },
        });
        assert!(s.matches(&doc! {"name": "Al", "age": 30, "tags": ["x", "y"], "kind": "a"}));
        assert!(s.matches(&doc! {"name": "Al"}));
        assert!(!s.matches(&doc! {"age": 3}));
        assert!(!s.matches(&doc! {"name": "A"}));
        assert!(!s.matches(&doc! {"name": "Al", "age": -1}));
        assert!(!s.matches(&doc! {"name": "Al", "tags": ["x", "x"]}));
        assert!(!s.matches(&doc! {"name": "Al", "tags": [1]}));
        assert!(!s.matches(&doc! {"name": "Al", "kind": "c"}));
        let failures = s.failures(&Bson::Document(doc! {"age": -1}));
        assert_eq!(failures[0].get_str("operatorName").unwrap(), "required");
        assert_eq!(failures[1].get_str("operatorName").unwrap(), "properties");
    }

    #[test]
    fn additional_properties_and_combinators() {
        let s = schema(doc! {"properties": {"_id": {}, "a": {}}, "additionalProperties": false});
        assert!(s.matches(&doc! {"_id": 1, "a": 1}));
        assert!(!s.matches(&doc! {"_id": 1, "b": 1}));
        let s = schema(doc! {"properties": {"a": {"anyOf": [{"bsonType": "int"}, {"bsonType": "string"}]}}});
        assert!(s.matches(&doc! {"a": "x"}));
        assert!(!s.matches(&doc! {"a": 1.5}));
        let s = schema(doc! {"properties": {"a": {"not": {"bsonType": "int"}}}});
        assert!(!s.matches(&doc! {"a": 1}));
    }

    #[test]
    fn refusals() {
        assert_eq!(JsonSchema::parse(&doc! {"frob": 1}).unwrap_err().code, 9);
        assert_eq!(JsonSchema::parse(&doc! {"$ref": "#"}).unwrap_err().code, 9);
        assert_eq!(JsonSchema::parse(&doc! {"type": "integer"}).unwrap_err().code, 9);
        assert!(JsonSchema::parse(&doc! {"type": "object", "bsonType": "object"}).is_err());
    }
}
