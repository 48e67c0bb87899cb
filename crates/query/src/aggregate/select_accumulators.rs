//! The `$group` accumulators that keep a few chosen values: `$firstN`,
//! `$lastN`, `$maxN`, `$minN` (over an `input` expression) and `$top`,
//! `$topN`, `$bottom`, `$bottomN` (the `output` of the documents first or
//! last in a `sortBy` order). `n` may depend on the group key, so it is
//! evaluated on a group's first document. Each state trims itself to `n`
//! whenever it holds twice that, bounding its memory.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::approximate_size;
use crate::compare::compare_values;
use crate::error::QueryError;
use crate::expr::{Expr, Variables};
use crate::sort::SortSpec;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum SelectKind {
    FirstN,
    LastN,
    MaxN,
    MinN,
    Top,
    TopN,
    Bottom,
    BottomN,
}

impl SelectKind {
    pub(crate) fn from_name(name: &str) -> Option<SelectKind> {
        Some(match name {
            "$firstN" => SelectKind::FirstN,
            "$lastN" => SelectKind::LastN,
            "$maxN" => SelectKind::MaxN,
            "$minN" => SelectKind::MinN,
            "$top" => SelectKind::Top,
            "$topN" => SelectKind::TopN,
            "$bottom" => SelectKind::Bottom,
            "$bottomN" => SelectKind::BottomN,
            _ => return None,
        })
    }

    fn sorted(self) -> bool {
        matches!(self, SelectKind::Top | SelectKind::TopN | SelectKind::Bottom | SelectKind::BottomN)
    }

    fn single(self) -> bool {
        matches!(self, SelectKind::Top | SelectKind::Bottom)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct SelectSpec {
    kind: SelectKind,
    n: Option<Expr>,
    sort: Option<SortSpec>,
    value: Expr,
}

impl SelectSpec {
    pub(crate) fn parse(name: &str, kind: SelectKind, argument: &Bson) -> Result<SelectSpec, QueryError> {
        let Bson::Document(options) = argument else {
            return Err(QueryError::new(5787801, format!("specification of {name} must be an object")));
        };
        let (value_key, allowed): (&str, &[&str]) = match (kind.sorted(), kind.single()) {
            (true, true) => ("output", &["sortBy", "output"]),
            (true, false) => ("output", &["n", "sortBy", "output"]),
            _ => ("input", &["n", "input"]),
        };
        if let Some(unknown) = options.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(QueryError::new(5787901, format!("Unknown argument for {name}: {unknown}")));
        }
        let value = options
            .get(value_key)
            .ok_or_else(|| QueryError::new(5788001, format!("Missing value for '{value_key}' in {name}")))?;
        let n = match options.get("n") {
            Some(n) => Some(Expr::parse(n)?),
            None if kind.single() => None,
            None => return Err(QueryError::new(5787906, format!("Missing value for 'n' in {name}"))),
        };
        let sort = if kind.sorted() {
            match options.get("sortBy") {
                Some(Bson::Document(pattern)) => Some(SortSpec::parse(pattern)?),
                _ => return Err(QueryError::new(5788604, format!("{name} requires a 'sortBy' object"))),
            }
        } else {
            None
        };
        Ok(SelectSpec { kind, n, sort, value: Expr::parse(value)? })
    }
}

/// One kept value with its sort keys and arrival position (for ties).
#[derive(Clone, Debug)]
struct Entry {
    keys: Vec<Bson>,
    position: usize,
    value: Bson,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct SelectState {
    n: Option<usize>,
    entries: Vec<Entry>,
    seen: usize,
}

fn positive_n(value: Bson) -> Result<usize, QueryError> {
    match crate::compare::as_number(&value) {
        Some(crate::compare::Number::Int(n)) if n >= 1 => Ok(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(crate::compare::Number::Float(f)) if f >= 1.0 && f.fract() == 0.0 => Ok(f as usize),
        _ => Err(QueryError::new(5787908, format!("Value for 'n' must be a positive integral value, found {value}"))),
    }
}

impl SelectState {
    /// Folds in one document; returns how many bytes the state grew by.
    pub(crate) fn add(&mut self, spec: &SelectSpec, doc: &Document, vars: &Variables) -> Result<usize, QueryError> {
        let n = match (self.n, &spec.n) {
            (Some(n), _) => n,
            (None, Some(expr)) => positive_n(expr.evaluate(doc, vars)?)?,
            (None, None) => 1,
        };
        self.n = Some(n);
        let position = self.seen;
        self.seen += 1;
        let value = spec.value.evaluate_optional(doc, vars)?;
        let value = match (spec.kind, value) {
            // $maxN/$minN skip null and missing values.
            (SelectKind::MaxN | SelectKind::MinN, None | Some(Bson::Null | Bson::Undefined)) => return Ok(0),
            (SelectKind::FirstN, _) if self.entries.len() >= n => return Ok(0),
            (_, value) => value.unwrap_or(Bson::Null),
        };
        let keys = Self::keys(spec, doc, &value, vars);
        let grown = approximate_size(&value) + keys.iter().map(approximate_size).sum::<usize>();
        self.entries.push(Entry { keys, position, value });
        if self.entries.len() >= n.saturating_mul(2).max(64) {
            self.trim(spec, n);
        }
        Ok(grown)
    }

    /// What entries are ordered by, collated by the operation's collation
    /// so that `order` compares them plainly: the value itself for
    /// `$maxN`/`$minN`, the `sortBy` keys for `$top`/`$bottom`.
    fn keys(spec: &SelectSpec, doc: &Document, value: &Bson, vars: &Variables) -> Vec<Bson> {
        let collate = |key: &Bson| crate::collation::collate_with(vars.collation(), key).into_owned();
        match (spec.kind, &spec.sort) {
            (SelectKind::MaxN | SelectKind::MinN, _) => vec![collate(value)],
            (_, None) => Vec::new(),
            (_, Some(sort)) if vars.collation().is_none() => sort.keys(doc),
            // Under a collation an array's sort key is its least (or
            // greatest) element by that collation.
            (_, Some(sort)) => {
                let collated = sort.clone().with_collation(vars.collation_ref());
                collated.keys(doc).iter().map(collate).collect()
            }
        }
    }

    fn order(spec: &SelectSpec, a: &Entry, b: &Entry) -> Ordering {
        let by_value = match spec.kind {
            SelectKind::MaxN => compare_values(&b.keys[0], &a.keys[0]),
            SelectKind::MinN => compare_values(&a.keys[0], &b.keys[0]),
            _ => match &spec.sort {
                Some(sort) => sort.compare_keys(&a.keys, &b.keys),
                None => Ordering::Equal,
            },
        };
        by_value.then(a.position.cmp(&b.position))
    }

    /// Orders the entries best first and keeps the `n` the accumulator
    /// answers with (the last `n` for `$lastN`/`$bottom(N)`).
    fn trim(&mut self, spec: &SelectSpec, n: usize) {
        self.entries.sort_by(|a, b| Self::order(spec, a, b));
        let keep_last = matches!(spec.kind, SelectKind::LastN | SelectKind::Bottom | SelectKind::BottomN);
        if keep_last {
            let skip = self.entries.len().saturating_sub(n);
            self.entries.drain(..skip);
        } else {
            self.entries.truncate(n);
        }
    }

    pub(crate) fn finish(mut self, spec: &SelectSpec) -> Bson {
        let n = self.n.unwrap_or(1);
        self.trim(spec, n);
        let mut values: Vec<Bson> = self.entries.into_iter().map(|e| e.value).collect();
        if spec.kind.single() {
            return values.pop().unwrap_or(Bson::Null);
        }
        Bson::Array(values)
    }
}
