//! Index bounds: which encoded index keys can belong to documents that
//! satisfy one predicate.
//!
//! Bounds must never leave out a key of a matching document (the executor
//! filters what the scan returns, so extra keys only cost time). They are
//! built in two steps: a predicate gives *value intervals* in BSON order
//! (`value_intervals`), then each interval becomes a half-open byte range
//! `[lo, hi)` over one field's encoding (`field_ranges`), which the planner
//! prefixes with the encodings of equality fields before it.
//!
//! Edges that are not single values: a *type edge* is the first or last
//! value of a canonical BSON type (`$gt: 5` runs to the end of the
//! numbers: type bracketing), and a *prefix edge* covers every string that
//! starts with a literal (`/^abc/`).

use std::ops::Bound;

use bson::Bson;

use crate::filter::Predicate;
use crate::index_key::{encode_value, prefix_end};

/// One end of a value interval, in BSON order.
#[derive(Clone, Debug)]
pub enum Edge {
    Unbounded,
    /// A value, included or not.
    Value(Bson, bool),
    /// The start (as a lower edge) or end (as an upper edge) of the
    /// canonical type of the value given.
    Type(Bson),
    /// Strings starting with this literal: as a lower edge the literal
    /// itself, as an upper edge the last such string.
    Prefix(String),
}

/// A value interval; `point` when both edges are the same included value.
#[derive(Clone, Debug)]
pub struct ValueInterval {
    pub low: Edge,
    pub high: Edge,
}

impl ValueInterval {
    fn point(value: Bson) -> ValueInterval {
        ValueInterval {
            low: Edge::Value(value.clone(), true),
            high: Edge::Value(value, true),
        }
    }

    fn range(low: Edge, high: Edge) -> ValueInterval {
        ValueInterval { low, high }
    }

    /// The single value this interval holds, if it is a point.
    pub fn point_value(&self) -> Option<&Bson> {
        match (&self.low, &self.high) {
            (Edge::Value(a, true), Edge::Value(b, true)) if crate::compare::values_equal(a, b) => {
                Some(a)
            }
            _ => None,
        }
    }

    /// MongoDB's explain notation: `[1, 1]`, `(5, inf.0]`, `["ab", "ac")`.
    pub fn describe(&self) -> String {
        let (open, low) = describe_edge(&self.low, false);
        let (close, high) = describe_edge(&self.high, true);
        format!("{open}{low}, {high}{close}")
    }
}

fn describe_edge(edge: &Edge, upper: bool) -> (char, String) {
    let bracket = |included: bool| match (included, upper) {
        (true, false) => '[',
        (false, false) => '(',
        (true, true) => ']',
        (false, true) => ')',
    };
    match edge {
        Edge::Unbounded => (
            bracket(true),
            if upper {
                "MaxKey".into()
            } else {
                "MinKey".into()
            },
        ),
        Edge::Value(value, included) => (bracket(*included), value.to_string()),
        Edge::Type(rep) => (bracket(true), type_edge_text(rep, upper)),
        Edge::Prefix(prefix) => {
            if upper {
                (')', format!("\"{prefix}\\u{{10FFFF}}\""))
            } else {
                ('[', format!("\"{prefix}\""))
            }
        }
    }
}

fn type_edge_text(rep: &Bson, upper: bool) -> String {
    match (crate::compare::canonical_type_rank(rep), upper) {
        (10, false) => "-inf.0".into(),
        (10, true) => "inf.0".into(),
        (15, false) => "\"\"".into(),
        (15, true) => "{}".into(),
        (_, false) => format!("start of {}", type_label(rep)),
        (_, true) => format!("end of {}", type_label(rep)),
    }
}

fn type_label(rep: &Bson) -> &'static str {
    match rep {
        Bson::Document(_) => "objects",
        Bson::Binary(_) => "binData",
        Bson::ObjectId(_) => "objectIds",
        Bson::Boolean(_) => "booleans",
        Bson::DateTime(_) => "dates",
        Bson::Timestamp(_) => "timestamps",
        Bson::RegularExpression(_) => "regexes",
        _ => "type",
    }
}

/// Null equality also matches `undefined` and a missing field, which the
/// index stores as null: `[undefined, null]`.
fn null_interval() -> ValueInterval {
    ValueInterval::range(
        Edge::Value(Bson::Undefined, true),
        Edge::Value(Bson::Null, true),
    )
}

fn whole_type(rep: Bson) -> ValueInterval {
    ValueInterval::range(Edge::Type(rep.clone()), Edge::Type(rep))
}

fn is_nan(value: &Bson) -> bool {
    matches!(crate::compare::as_number(value), Some(crate::compare::Number::Float(f)) if f.is_nan())
}

fn equality_intervals(value: &Bson, out: &mut Vec<ValueInterval>) {
    match value {
        Bson::Null | Bson::Undefined => out.push(null_interval()),
        // A whole-array equality matches a multikey document whose keys are
        // the array's elements: scan for the first element too (or for
        // `undefined`, the key of an empty array), as MongoDB does.
        Bson::Array(items) => {
            out.push(ValueInterval::point(value.clone()));
            out.push(ValueInterval::point(
                items.first().cloned().unwrap_or(Bson::Undefined),
            ));
        }
        other => out.push(ValueInterval::point(other.clone())),
    }
}

/// The value intervals that hold every index key of a document the
/// predicate can match; `None` when the predicate does not bound the
/// field (negations, `$exists`, `$size`, `$elemMatch`, comparisons with
/// arrays). An empty vector means no document can match.
pub fn value_intervals(predicate: &Predicate) -> Option<Vec<ValueInterval>> {
    let mut out = Vec::new();
    match predicate {
        Predicate::Eq(value) => equality_intervals(value, &mut out),
        Predicate::In(list) => {
            for value in &list.values {
                equality_intervals(value, &mut out);
            }
            for regex in &list.regexes {
                out.extend(regex_intervals(regex));
            }
        }
        Predicate::Compare(op, value) => return compare_intervals(*op, value),
        Predicate::Regex(regex) => out.extend(regex_intervals(regex)),
        Predicate::Mod { .. } => out.push(whole_type(Bson::Int32(0))),
        Predicate::Type(types) => {
            for code in &types.codes {
                out.push(type_code_interval(*code)?);
            }
        }
        Predicate::Collated(collated) => return collated_intervals(&collated.collated),
        Predicate::Exists
        | Predicate::Size(_)
        | Predicate::Bits(_)
        | Predicate::ElemMatchDocument(_)
        | Predicate::ElemMatchValue(_) => return None,
    }
    Some(out)
}

/// Bounds on keys built with the filter's collation: values were collated
/// like the keys; a regex matches text, so any string key may hold a match.
fn collated_intervals(predicate: &Predicate) -> Option<Vec<ValueInterval>> {
    let any_string_or_regex = || {
        let mut out = vec![whole_type(Bson::String(String::new()))];
        out.extend(regex_value().map(whole_type));
        out
    };
    match predicate {
        Predicate::Regex(_) => Some(any_string_or_regex()),
        Predicate::In(list) if !list.regexes.is_empty() => {
            let mut out = any_string_or_regex();
            for value in &list.values {
                equality_intervals(value, &mut out);
            }
            Some(out)
        }
        other => value_intervals(other),
    }
}

fn compare_intervals(op: crate::filter::CompareOp, value: &Bson) -> Option<Vec<ValueInterval>> {
    use crate::filter::CompareOp::{Gt, Gte, Lt, Lte};
    let interval = match (value, op) {
        (Bson::Array(_), _) => return None,
        // MinKey and MaxKey escape type bracketing, so `$gt: MinKey` also
        // matches a whole array such as `[MinKey]`, whose only index key
        // (its element, MinKey) lies outside `(MinKey, MaxKey]`; likewise
        // `$lt: MaxKey` and `[MaxKey]`. These predicates select almost
        // everything, so they simply do not bound the field.
        (Bson::MinKey, Gt | Gte) | (Bson::MaxKey, Lt | Lte) => return None,
        (Bson::MinKey, Lt) | (Bson::MaxKey, Gt) => return Some(Vec::new()),
        (Bson::MinKey, Lte) | (Bson::MaxKey, Gte) => ValueInterval::point(value.clone()),
        (Bson::Null | Bson::Undefined, Gte | Lte) => null_interval(),
        (Bson::Null | Bson::Undefined, Gt | Lt) => return Some(Vec::new()),
        (nan, Gte | Lte) if is_nan(nan) => ValueInterval::point(nan.clone()),
        (nan, Gt | Lt) if is_nan(nan) => return Some(Vec::new()),
        (v, Gt) => ValueInterval::range(Edge::Value(v.clone(), false), Edge::Type(v.clone())),
        (v, Gte) => ValueInterval::range(Edge::Value(v.clone(), true), Edge::Type(v.clone())),
        (v, Lt) => ValueInterval::range(Edge::Type(v.clone()), Edge::Value(v.clone(), false)),
        (v, Lte) => ValueInterval::range(Edge::Type(v.clone()), Edge::Value(v.clone(), true)),
    };
    Some(vec![interval])
}

fn regex_value() -> Option<Bson> {
    let pattern = String::new().try_into().ok()?;
    let options = String::new().try_into().ok()?;
    Some(Bson::RegularExpression(bson::Regex { pattern, options }))
}

/// Strings the regex can match (all strings, or those with its literal
/// prefix), plus stored regular expressions (a regex matches an equal one).
fn regex_intervals(regex: &crate::filter::RegexMatcher) -> Vec<ValueInterval> {
    let strings = match regex.literal_prefix() {
        Some(prefix) => ValueInterval::range(Edge::Prefix(prefix.clone()), Edge::Prefix(prefix)),
        None => whole_type(Bson::String(String::new())),
    };
    let mut out = vec![strings];
    if let Some(rep) = regex_value() {
        out.push(whole_type(rep));
    }
    out
}

fn type_code_interval(code: i32) -> Option<ValueInterval> {
    let rep = match code {
        1 | 16 | 18 | 19 => Bson::Int32(0),
        2 | 14 => Bson::String(String::new()),
        3 => Bson::Document(bson::Document::new()),
        5 => Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: Vec::new(),
        }),
        6 => return Some(ValueInterval::point(Bson::Undefined)),
        7 => Bson::ObjectId(bson::oid::ObjectId::from_bytes([0; 12])),
        8 => Bson::Boolean(false),
        9 => Bson::DateTime(bson::DateTime::from_millis(0)),
        10 => return Some(null_interval()),
        11 => regex_value()?,
        13 => Bson::JavaScriptCode(String::new()),
        17 => Bson::Timestamp(bson::Timestamp {
            time: 0,
            increment: 0,
        }),
        -1 => return Some(ValueInterval::point(Bson::MinKey)),
        127 => return Some(ValueInterval::point(Bson::MaxKey)),
        // Arrays are indexed by their elements; other types are rare.
        _ => return None,
    };
    Some(whole_type(rep))
}

/// A half-open byte range `[low, high)` over one field's encoding, or over
/// whole keys once prefixed. `point` holds the encoding when the range is
/// exactly one value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteRange {
    pub low: Bound<Vec<u8>>,
    pub high: Bound<Vec<u8>>,
    pub point: Option<Vec<u8>>,
}

fn encoded(value: &Bson, descending: bool) -> Vec<u8> {
    let mut out = Vec::new();
    encode_value(&mut out, value, descending);
    out
}

/// The byte prefix shared by every encoding an edge stands for.
fn edge_prefix(edge: &Edge, descending: bool) -> Option<Vec<u8>> {
    match edge {
        Edge::Unbounded => None,
        Edge::Value(value, _) => Some(encoded(value, descending)),
        Edge::Type(rep) => Some(encoded(rep, descending)[..1].to_vec()),
        Edge::Prefix(prefix) => {
            // A string's encoding is type byte, escaped bytes, then the
            // two-byte terminator; without the terminator it prefixes
            // every longer string.
            let full = encoded(&Bson::String(prefix.clone()), descending);
            Some(full[..full.len() - 2].to_vec())
        }
    }
}

fn is_exclusive(edge: &Edge) -> bool {
    matches!(edge, Edge::Value(_, false))
}

/// Converts a value interval into a byte range over one field's encoding.
/// `None` when the range is empty.
pub fn field_range(interval: &ValueInterval, descending: bool) -> Option<ByteRange> {
    // A descending field stores inverted encodings: the value order's low
    // edge becomes the byte order's high edge.
    let (low_edge, high_edge) = if descending {
        (&interval.high, &interval.low)
    } else {
        (&interval.low, &interval.high)
    };
    let low = match edge_prefix(low_edge, descending) {
        None => Bound::Unbounded,
        Some(bytes) if is_exclusive(low_edge) => Bound::Included(prefix_end(&bytes)?),
        Some(bytes) => Bound::Included(bytes),
    };
    let high = match edge_prefix(high_edge, descending) {
        None => Bound::Unbounded,
        Some(bytes) if is_exclusive(high_edge) => Bound::Excluded(bytes),
        Some(bytes) => match prefix_end(&bytes) {
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        },
    };
    let point = interval
        .point_value()
        .map(|value| encoded(value, descending));
    let range = ByteRange { low, high, point };
    (!range.is_empty()).then_some(range)
}

impl ByteRange {
    pub fn full() -> ByteRange {
        ByteRange {
            low: Bound::Unbounded,
            high: Bound::Unbounded,
            point: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        match (&self.low, &self.high) {
            (Bound::Included(low), Bound::Excluded(high)) => low >= high,
            _ => false,
        }
    }

    /// The overlap of two ranges over the same field.
    pub fn intersect(&self, other: &ByteRange) -> Option<ByteRange> {
        let low = match (&self.low, &other.low) {
            (Bound::Unbounded, b) | (b, Bound::Unbounded) => b.clone(),
            (Bound::Included(a), Bound::Included(b)) => Bound::Included(a.max(b).clone()),
            _ => unreachable!("lower bounds are always included or unbounded"),
        };
        let high = match (&self.high, &other.high) {
            (Bound::Unbounded, b) | (b, Bound::Unbounded) => b.clone(),
            (Bound::Excluded(a), Bound::Excluded(b)) => Bound::Excluded(a.min(b).clone()),
            _ => unreachable!("upper bounds are always excluded or unbounded"),
        };
        let mut range = ByteRange {
            low,
            high,
            point: None,
        };
        if range.is_empty() {
            return None;
        }
        // The overlap is still a point if it equals one of the two points.
        for candidate in [self, other] {
            if candidate.point.is_some()
                && candidate.low == range.low
                && candidate.high == range.high
            {
                range.point = candidate.point.clone();
            }
        }
        Some(range)
    }

    /// Places this field range after the encodings of the equality fields
    /// before it.
    pub fn prefixed(&self, prefix: &[u8]) -> Option<ByteRange> {
        let low = match &self.low {
            Bound::Included(bytes) => Bound::Included([prefix, bytes].concat()),
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => Bound::Included(prefix.to_vec()),
        };
        let high = match &self.high {
            Bound::Excluded(bytes) => Bound::Excluded([prefix, bytes].concat()),
            _ if prefix.is_empty() => Bound::Unbounded,
            _ => match prefix_end(prefix) {
                Some(end) => Bound::Excluded(end),
                None => Bound::Unbounded,
            },
        };
        let range = ByteRange {
            low,
            high,
            point: None,
        };
        (!range.is_empty()).then_some(range)
    }
}

/// Sorts ranges by their start and merges overlapping or touching ones, so
/// the result is ascending and disjoint.
pub fn normalize(mut ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    ranges.sort_by(|a, b| match (&a.low, &b.low) {
        (Bound::Unbounded, Bound::Unbounded) => std::cmp::Ordering::Equal,
        (Bound::Unbounded, _) => std::cmp::Ordering::Less,
        (_, Bound::Unbounded) => std::cmp::Ordering::Greater,
        (Bound::Included(x), Bound::Included(y)) => x.cmp(y),
        _ => unreachable!("lower bounds are always included or unbounded"),
    });
    let mut out: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        if let Some(last) = out.last_mut() {
            let touches = match (&last.high, &range.low) {
                (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
                (Bound::Excluded(high), Bound::Included(low)) => low <= high,
                _ => unreachable!("bounds are half-open"),
            };
            if touches {
                let extends = match (&last.high, &range.high) {
                    (Bound::Unbounded, _) => false,
                    (_, Bound::Unbounded) => true,
                    (Bound::Excluded(a), Bound::Excluded(b)) => b > a,
                    _ => unreachable!("bounds are half-open"),
                };
                if extends {
                    last.high = range.high;
                }
                if last.point != range.point {
                    last.point = None;
                }
                continue;
            }
        }
        out.push(range);
    }
    out
}
