//! Parsing an operator update document (`{$set: {...}, $inc: {...}}`)
//! into modifiers, with MongoDB's argument checks and error codes.

use bson::{Bson, Document};

use super::target::TargetPath;
use crate::compare::{as_number, Number};
use crate::error::{codes, QueryError};
use crate::filter::Filter;

/// One field of one update operator.
#[derive(Clone, Debug)]
pub struct Modifier {
    pub path: TargetPath,
    pub action: Action,
}

#[derive(Clone, Debug)]
pub enum Action {
    Set(Bson),
    SetOnInsert(Bson),
    Unset,
    Inc(Bson),
    Mul(Bson),
    Min(Bson),
    Max(Bson),
    /// `$rename` to this path; the modifier's own path is the source.
    Rename(TargetPath),
    CurrentDate(DateKind),
    Push(PushSpec),
    AddToSet(Vec<Bson>),
    /// `$pop`: true removes the first element, false the last.
    Pop {
        first: bool,
    },
    Pull(PullCondition),
    PullAll(Vec<Bson>),
    Bit(Vec<(BitOp, Bson)>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DateKind {
    Date,
    Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOp {
    And,
    Or,
    Xor,
}

#[derive(Clone, Debug)]
pub struct PushSpec {
    pub each: Vec<Bson>,
    pub slice: Option<i64>,
    pub sort: Option<PushSort>,
    pub position: Option<i64>,
}

#[derive(Clone, Debug)]
pub enum PushSort {
    /// Sort the elements themselves; true for descending.
    Value { descending: bool },
    /// Sort document elements by these fields (dotted, descending flag).
    Fields(Vec<(String, bool)>),
}

#[derive(Clone, Debug)]
pub enum PullCondition {
    /// Remove elements equal to this value.
    Equals(Bson),
    /// Remove document elements matching this query.
    Query(Filter),
    /// Remove elements satisfying these operators (`{$gte: 6}`), matched
    /// through a wrapper document `{PULL_FIELD: element}`.
    Operators(Filter),
}

/// The field name elements are wrapped in for operator conditions.
pub const WRAPPER_FIELD: &str = "pullElement";

use crate::compare::type_name;

/// MongoDB's type name of a value, for error messages.
pub fn bson_type_name(value: &Bson) -> &'static str {
    type_name(value)
}

/// `{field: value}` rendered for error messages.
pub fn render_field(field: &str, value: &Bson) -> String {
    format!("{{{field}: {value}}}")
}

/// Parses every operator of an update document, in document order.
pub fn parse_operators(update: &Document) -> Result<Vec<Modifier>, QueryError> {
    let mut modifiers = Vec::new();
    for (op, arg) in update {
        if !op.starts_with('$') {
            return Err(QueryError::failed_to_parse(format!(
                "Unknown modifier: {op}. Expected a valid update modifier or pipeline-style update specified as an array"
            )));
        }
        if !is_known(op) {
            return Err(unknown_modifier(op));
        }
        let fields = match arg {
            Bson::Document(fields) => fields,
            other => {
                return Err(QueryError::failed_to_parse(format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{op}: {other}}}",
                    type_name(other)
                )))
            }
        };
        for (field, value) in fields {
            let path = TargetPath::parse(field)?;
            let action = parse_action(op, field, value)?;
            modifiers.push(Modifier { path, action });
        }
    }
    Ok(modifiers)
}

fn is_known(op: &str) -> bool {
    matches!(
        op,
        "$set"
            | "$setOnInsert"
            | "$unset"
            | "$inc"
            | "$mul"
            | "$min"
            | "$max"
            | "$rename"
            | "$currentDate"
            | "$push"
            | "$addToSet"
            | "$pop"
            | "$pull"
            | "$pullAll"
            | "$bit"
    )
}

fn unknown_modifier(op: &str) -> QueryError {
    QueryError::failed_to_parse(format!(
        "Unknown modifier: {op}. Expected a valid update modifier or pipeline-style update specified as an array"
    ))
}

fn parse_action(op: &str, field: &str, value: &Bson) -> Result<Action, QueryError> {
    Ok(match op {
        "$set" => Action::Set(value.clone()),
        "$setOnInsert" => Action::SetOnInsert(value.clone()),
        "$unset" => Action::Unset,
        "$inc" => {
            require_number(value, || {
                format!(
                    "Cannot increment with non-numeric argument: {}",
                    render_field(field, value)
                )
            })?;
            Action::Inc(value.clone())
        }
        "$mul" => {
            require_number(value, || {
                format!(
                    "Cannot multiply with non-numeric argument: {}",
                    render_field(field, value)
                )
            })?;
            Action::Mul(value.clone())
        }
        "$min" => Action::Min(value.clone()),
        "$max" => Action::Max(value.clone()),
        "$rename" => Action::Rename(parse_rename(field, value)?),
        "$currentDate" => Action::CurrentDate(parse_current_date(value)?),
        "$push" => Action::Push(parse_push(value)?),
        "$addToSet" => Action::AddToSet(parse_add_to_set(value)?),
        "$pop" => Action::Pop {
            first: parse_pop(value)?,
        },
        "$pull" => Action::Pull(parse_pull(value)?),
        "$pullAll" => match value {
            Bson::Array(items) => Action::PullAll(items.clone()),
            other => {
                return Err(QueryError::bad_value(format!(
                    "$pullAll requires an array argument but was given a {}",
                    type_name(other)
                )))
            }
        },
        "$bit" => Action::Bit(parse_bit(field, value)?),
        other => return Err(unknown_modifier(other)),
    })
}

fn require_number(value: &Bson, message: impl FnOnce() -> String) -> Result<(), QueryError> {
    if as_number(value).is_some() {
        Ok(())
    } else {
        Err(QueryError::type_mismatch(message()))
    }
}

fn parse_rename(from: &str, value: &Bson) -> Result<TargetPath, QueryError> {
    let to = match value {
        Bson::String(to) => to,
        other => {
            return Err(QueryError::bad_value(format!(
                "The 'to' field for $rename must be a string: {}",
                render_field(from, other)
            )))
        }
    };
    let source = TargetPath::parse(from)?;
    let target = TargetPath::parse(to)?;
    if source.is_dynamic() {
        return Err(QueryError::bad_value(format!(
            "The source field for $rename may not be dynamic: {from}"
        )));
    }
    if target.is_dynamic() {
        return Err(QueryError::bad_value(format!(
            "The destination field for $rename may not be dynamic: {to}"
        )));
    }
    if from == to {
        return Err(QueryError::bad_value(format!(
            "The source and target field for $rename must differ: {from}: \"{to}\""
        )));
    }
    let nested = |short: &str, long: &str| {
        long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b'.')
    };
    if nested(from, to) || nested(to, from) {
        return Err(QueryError::bad_value(format!(
            "The source and target field for $rename must not be on the same path: {from}: \"{to}\""
        )));
    }
    Ok(target)
}

fn parse_current_date(value: &Bson) -> Result<DateKind, QueryError> {
    match value {
        Bson::Boolean(_) => Ok(DateKind::Date),
        Bson::Document(spec) => {
            let bad = || {
                QueryError::bad_value(
                    "The '$type' string field is required to be 'date' or 'timestamp': {$currentDate: {field : {$type: 'date'}}}",
                )
            };
            if spec.len() != 1 {
                return Err(bad());
            }
            match spec.get("$type") {
                Some(Bson::String(kind)) if kind == "date" => Ok(DateKind::Date),
                Some(Bson::String(kind)) if kind == "timestamp" => Ok(DateKind::Timestamp),
                _ => Err(bad()),
            }
        }
        other => Err(QueryError::bad_value(format!("{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).", type_name(other)))),
    }
}

/// An integral number as i64 (doubles must be whole), for `$slice`,
/// `$position` and `$pop`.
fn integral(value: &Bson) -> Option<i64> {
    match as_number(value)? {
        Number::Int(i) => Some(i),
        Number::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => Some(f as i64),
        Number::Float(_) => None,
    }
}

fn parse_push(value: &Bson) -> Result<PushSpec, QueryError> {
    let spec = match value {
        Bson::Document(spec) if spec.contains_key("$each") => spec,
        other => {
            return Ok(PushSpec {
                each: vec![other.clone()],
                slice: None,
                sort: None,
                position: None,
            })
        }
    };
    let mut push = PushSpec {
        each: Vec::new(),
        slice: None,
        sort: None,
        position: None,
    };
    for (key, arg) in spec {
        match key.as_str() {
            "$each" => match arg {
                Bson::Array(items) => push.each = items.clone(),
                other => {
                    return Err(QueryError::bad_value(format!(
                        "The argument to $each in $push must be an array but it was of type: {}",
                        type_name(other)
                    )))
                }
            },
            "$slice" => {
                push.slice = Some(integral(arg).ok_or_else(|| {
                    QueryError::bad_value(format!(
                        "The value for $slice must be an integer value but was given type: {}",
                        type_name(arg)
                    ))
                })?)
            }
            "$position" => {
                push.position = Some(integral(arg).ok_or_else(|| {
                    QueryError::bad_value(format!(
                        "The value for $position must be an integer value, not of type: {}",
                        type_name(arg)
                    ))
                })?)
            }
            "$sort" => push.sort = Some(parse_push_sort(arg)?),
            other => {
                return Err(QueryError::bad_value(format!(
                    "Unrecognized clause in $push: {other}"
                )))
            }
        }
    }
    Ok(push)
}

fn sort_direction(value: &Bson) -> Option<bool> {
    match integral(value)? {
        1 => Some(false),
        -1 => Some(true),
        _ => None,
    }
}

fn parse_push_sort(value: &Bson) -> Result<PushSort, QueryError> {
    let invalid = || {
        QueryError::bad_value(
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort embedded fields",
        )
    };
    if let Some(descending) = sort_direction(value) {
        return Ok(PushSort::Value { descending });
    }
    let Bson::Document(spec) = value else {
        return Err(invalid());
    };
    if spec.is_empty() {
        return Err(invalid());
    }
    let mut fields = Vec::with_capacity(spec.len());
    for (field, direction) in spec {
        crate::depth::check_field_path(field)?;
        if field.is_empty() || field.starts_with('$') || field.split('.').any(str::is_empty) {
            return Err(QueryError::bad_value(format!(
                "The $sort field is a dotted field but has an empty part: {field}"
            )));
        }
        fields.push((
            field.clone(),
            sort_direction(direction).ok_or_else(invalid)?,
        ));
    }
    Ok(PushSort::Fields(fields))
}

fn parse_add_to_set(value: &Bson) -> Result<Vec<Bson>, QueryError> {
    match value {
        Bson::Document(spec) if spec.contains_key("$each") => {
            if spec.len() != 1 {
                let other = spec
                    .keys()
                    .find(|k| *k != "$each")
                    .cloned()
                    .unwrap_or_default();
                return Err(QueryError::bad_value(format!(
                    "Found unexpected fields after $each in $addToSet: {other}"
                )));
            }
            match spec.get("$each") {
                Some(Bson::Array(items)) => Ok(items.clone()),
                Some(other) => Err(QueryError::type_mismatch(format!(
                    "The argument to $each in $addToSet must be an array but it was of type {}",
                    type_name(other)
                ))),
                None => unreachable!("checked contains_key above"),
            }
        }
        other => Ok(vec![other.clone()]),
    }
}

fn parse_pop(value: &Bson) -> Result<bool, QueryError> {
    match as_number(value) {
        Some(Number::Int(1)) => Ok(false),
        Some(Number::Int(-1)) => Ok(true),
        Some(Number::Float(1.0)) => Ok(false),
        Some(Number::Float(-1.0)) => Ok(true),
        Some(_) => Err(QueryError::failed_to_parse(format!(
            "$pop expects 1 or -1, found: {value}"
        ))),
        None => Err(QueryError::failed_to_parse(format!(
            "Expected a number in: {value}"
        ))),
    }
}

fn parse_pull(value: &Bson) -> Result<PullCondition, QueryError> {
    match value {
        Bson::Document(cond) => {
            let operators = cond
                .keys()
                .next()
                .map(|k| k.starts_with('$'))
                .unwrap_or(false);
            if operators
                && !cond.keys().any(|k| {
                    matches!(
                        k.as_str(),
                        "$and" | "$or" | "$nor" | "$expr" | "$where" | "$text" | "$comment"
                    )
                })
            {
                let wrapped = bson::doc! { WRAPPER_FIELD: cond.clone() };
                Ok(PullCondition::Operators(Filter::parse(&wrapped)?))
            } else {
                Ok(PullCondition::Query(Filter::parse(cond)?))
            }
        }
        other => Ok(PullCondition::Equals(other.clone())),
    }
}

fn parse_bit(field: &str, value: &Bson) -> Result<Vec<(BitOp, Bson)>, QueryError> {
    let Bson::Document(spec) = value else {
        return Err(QueryError::bad_value(format!(
            "The $bit modifier is not compatible with a {}. You must pass in an embedded document: {{$bit: {{field: {{and/or/xor: #}}}}",
            type_name(value)
        )));
    };
    if spec.is_empty() {
        return Err(QueryError::bad_value(format!(
            "You must pass in at least one bitwise operation. The format is: {{$bit: {{field: {{and/or/xor: #}}}}; field: {field}"
        )));
    }
    let mut ops = Vec::with_capacity(spec.len());
    for (name, operand) in spec {
        let op = match name.as_str() {
            "and" => BitOp::And,
            "or" => BitOp::Or,
            "xor" => BitOp::Xor,
            other => {
                return Err(QueryError::bad_value(format!(
                    "The $bit modifier only supports 'and', 'or', and 'xor', not '{other}' which is an unknown operator: {{{other}: {operand}}}"
                )))
            }
        };
        if !matches!(operand, Bson::Int32(_) | Bson::Int64(_)) {
            return Err(QueryError::bad_value(format!(
                "The $bit modifier field must be an Integer(32/64 bit); a '{}' is not supported here: {{{name}: {operand}}}",
                type_name(operand)
            )));
        }
        ops.push((op, operand.clone()));
    }
    Ok(ops)
}

/// Fails when the document has a top-level `$`-prefixed field: MongoDB
/// rejects those in replacement documents.
pub fn check_replacement(replacement: &Document) -> Result<(), QueryError> {
    for key in replacement.keys() {
        if key.starts_with('$') {
            return Err(QueryError::new(
                codes::DOLLAR_PREFIXED_FIELD_NAME,
                format!(
                    "The dollar ($) prefixed field '{key}' in '{key}' is not allowed in the context of an update's replacement document. Consider using an aggregation pipeline with $replaceWith."
                ),
            ));
        }
    }
    Ok(())
}
