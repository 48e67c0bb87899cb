//! Single-value tests: what `$eq`, `$gt`, `$in`, `$type`, `$regex` and
//! `$mod` ask of one candidate value (`None` = the path is missing there).

use std::cmp::Ordering;

use bson::Bson;
use std::cell::RefCell;

use crate::pcre::Pcre;

use crate::compare::{as_number, canonical_type_rank, compare_values, values_equal, Number};
use crate::error::QueryError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

impl CompareOp {
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Gt => "$gt",
            CompareOp::Gte => "$gte",
            CompareOp::Lt => "$lt",
            CompareOp::Lte => "$lte",
        }
    }

    fn accepts(self, order: Ordering) -> bool {
        match self {
            CompareOp::Gt => order == Ordering::Greater,
            CompareOp::Gte => order != Ordering::Less,
            CompareOp::Lt => order == Ordering::Less,
            CompareOp::Lte => order != Ordering::Greater,
        }
    }
}

/// `null` in a query also matches a missing field and `undefined`
/// (MongoDB 7.0; 8.0 stopped matching `undefined`).
fn is_nullish(candidate: Option<&Bson>) -> bool {
    matches!(candidate, None | Some(Bson::Null) | Some(Bson::Undefined))
}

pub fn eq_matches(candidate: Option<&Bson>, target: &Bson) -> bool {
    if matches!(target, Bson::Null) {
        return is_nullish(candidate);
    }
    candidate.is_some_and(|value| values_equal(value, target))
}

fn is_nan(value: &Bson) -> bool {
    match as_number(value) {
        Some(Number::Float(f)) => f.is_nan(),
        _ => false,
    }
}

/// Ordered comparison with type bracketing: only values of the target's
/// canonical type qualify, except that every value is below MaxKey and above
/// MinKey. NaN is only `$gte`/`$lte` itself. A missing field compares as null.
pub fn compare_matches(op: CompareOp, candidate: Option<&Bson>, target: &Bson) -> bool {
    let value = candidate.unwrap_or(&Bson::Null);
    let value = if matches!(value, Bson::Undefined) {
        &Bson::Null
    } else {
        value
    };
    if canonical_type_rank(value) != canonical_type_rank(target) {
        return match target {
            Bson::MaxKey => matches!(op, CompareOp::Lt | CompareOp::Lte),
            Bson::MinKey => matches!(op, CompareOp::Gt | CompareOp::Gte),
            _ => false,
        };
    }
    if is_nan(value) || is_nan(target) {
        return is_nan(value) && is_nan(target) && matches!(op, CompareOp::Gte | CompareOp::Lte);
    }
    op.accepts(compare_values(value, target))
}

/// A compiled `$regex` with the source kept for equality with stored
/// regular-expression values and for explain.
#[derive(Clone, Debug)]
pub struct RegexMatcher {
    pub pattern: String,
    pub options: String,
    compiled: Pcre,
}

thread_local! {
    /// The first `$regex` failure (its backtracking cap, see `crate::pcre`)
    /// of the filter evaluation running on this thread. Matching is
    /// synchronous and returns a bool through many layers, so the failure
    /// is parked here and `Filter::matches_with_variables`, which cleared
    /// it before evaluating, takes it afterwards and fails the query.
    static MATCH_FAILURE: RefCell<Option<QueryError>> = const { RefCell::new(None) };
}

/// Forgets a failure left by an evaluation whose caller ignored errors.
pub(crate) fn clear_match_failure() {
    MATCH_FAILURE.with(|failure| failure.borrow_mut().take());
}

/// The failure of the evaluation that just ran on this thread, if any.
pub(crate) fn take_match_failure() -> Option<QueryError> {
    MATCH_FAILURE.with(|failure| failure.borrow_mut().take())
}

impl RegexMatcher {
    pub fn new(pattern: &str, options: &str) -> Result<RegexMatcher, QueryError> {
        Ok(RegexMatcher {
            pattern: pattern.to_string(),
            options: options.to_string(),
            compiled: Pcre::compile(pattern, options, "$regex", 51091)?,
        })
    }

    fn is_match(&self, text: &str) -> bool {
        match self.compiled.is_match(text) {
            Ok(matched) => matched,
            Err(error) => {
                MATCH_FAILURE.with(|failure| {
                    failure.borrow_mut().get_or_insert(error);
                });
                false
            }
        }
    }

    pub fn is_match_str(&self, text: &str) -> bool {
        self.is_match(text)
    }

    /// Strings and symbols match by pattern; a stored regular expression
    /// matches when it is the same expression.
    pub fn matches(&self, candidate: Option<&Bson>) -> bool {
        match candidate {
            Some(Bson::String(s)) | Some(Bson::Symbol(s)) => self.is_match(s),
            Some(Bson::RegularExpression(r)) => {
                r.pattern.as_str() == self.pattern
                    && sorted(r.options.as_str()) == sorted(&self.options)
            }
            _ => false,
        }
    }

    /// A literal prefix every match must start with (`^abc` without
    /// case-insensitivity or alternation), for index bounds.
    pub fn literal_prefix(&self) -> Option<String> {
        if self.options.contains('i') || self.options.contains('x') || self.options.contains('m') {
            return None;
        }
        let rest = self.pattern.strip_prefix('^')?;
        if self.pattern.contains('|') {
            return None;
        }
        let mut prefix = String::new();
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == ' ' || c == '_' || c == '-' {
                // A quantifier after a character makes it optional or repeated.
                if matches!(chars.peek(), Some('*' | '?' | '{')) {
                    break;
                }
                prefix.push(c);
            } else {
                break;
            }
        }
        Some(prefix)
    }
}

fn sorted(options: &str) -> Vec<char> {
    let mut chars: Vec<char> = options.chars().collect();
    chars.sort_unstable();
    chars
}

/// The values of `$in` / `$nin`: plain values compared by equality, regexes
/// by matching.
#[derive(Clone, Debug, Default)]
pub struct InList {
    pub values: Vec<Bson>,
    pub regexes: Vec<RegexMatcher>,
}

impl InList {
    pub fn matches(&self, candidate: Option<&Bson>) -> bool {
        self.values.iter().any(|v| eq_matches(candidate, v))
            || self.regexes.iter().any(|r| r.matches(candidate))
    }
}

/// The BSON type codes of a `$type` query; `number` expands to the four
/// numeric codes.
#[derive(Clone, Debug, Default)]
pub struct TypeSet {
    pub codes: Vec<i32>,
}

impl TypeSet {
    pub fn parse(spec: &Bson) -> Result<TypeSet, QueryError> {
        let mut codes = Vec::new();
        match spec {
            Bson::Array(items) => {
                for item in items {
                    add_type(item, &mut codes)?;
                }
            }
            other => add_type(other, &mut codes)?,
        }
        Ok(TypeSet { codes })
    }

    pub fn matches(&self, candidate: Option<&Bson>) -> bool {
        candidate.is_some_and(|value| self.codes.contains(&type_code(value)))
    }
}

fn add_type(spec: &Bson, codes: &mut Vec<i32>) -> Result<(), QueryError> {
    if let Bson::String(alias) = spec {
        if alias == "number" {
            codes.extend([1, 16, 18, 19]);
            return Ok(());
        }
        let code = type_alias(alias)
            .ok_or_else(|| QueryError::bad_value(format!("Unknown type name alias: {alias}")))?;
        codes.push(code);
        return Ok(());
    }
    let number = match as_number(spec) {
        Some(Number::Int(n)) => n as f64,
        Some(Number::Float(f)) => f,
        None => {
            return Err(QueryError::bad_value(format!(
                "type must be represented as a number or a string, not {spec}"
            )))
        }
    };
    if number.fract() != 0.0 || !VALID_TYPE_CODES.contains(&(number as i32)) {
        return Err(QueryError::bad_value(format!(
            "Invalid numerical type code: {number}"
        )));
    }
    codes.push(number as i32);
    Ok(())
}

const VALID_TYPE_CODES: [i32; 21] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, -1, 127,
];

/// MongoDB's `$type` string aliases.
pub fn type_alias(alias: &str) -> Option<i32> {
    Some(match alias {
        "double" => 1,
        "string" => 2,
        "object" => 3,
        "array" => 4,
        "binData" => 5,
        "undefined" => 6,
        "objectId" => 7,
        "bool" => 8,
        "date" => 9,
        "null" => 10,
        "regex" => 11,
        "dbPointer" => 12,
        "javascript" => 13,
        "symbol" => 14,
        "javascriptWithScope" => 15,
        "int" => 16,
        "timestamp" => 17,
        "long" => 18,
        "decimal" => 19,
        "minKey" => -1,
        "maxKey" => 127,
        _ => return None,
    })
}

/// The BSON element type code of a value.
pub fn type_code(value: &Bson) -> i32 {
    match value {
        Bson::Double(_) => 1,
        Bson::String(_) => 2,
        Bson::Document(_) => 3,
        Bson::Array(_) => 4,
        Bson::Binary(_) => 5,
        Bson::Undefined => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Null => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::Symbol(_) => 14,
        Bson::JavaScriptCodeWithScope(_) => 15,
        Bson::Int32(_) => 16,
        Bson::Timestamp(_) => 17,
        Bson::Int64(_) => 18,
        Bson::Decimal128(_) => 19,
        Bson::MinKey => -1,
        Bson::MaxKey => 127,
    }
}

/// `$mod`: numbers are truncated towards zero before the remainder is
/// taken; NaN and infinities never match.
pub fn mod_matches(candidate: Option<&Bson>, divisor: i64, remainder: i64) -> bool {
    let value = match candidate.and_then(as_number) {
        Some(Number::Int(n)) => n,
        Some(Number::Float(f)) if f.is_finite() => f.trunc() as i64,
        _ => return false,
    };
    value.wrapping_rem(divisor) == remainder
}
