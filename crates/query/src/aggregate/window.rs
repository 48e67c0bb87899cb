//! `$setWindowFields`: computes fields from a window of neighbouring
//! documents in each partition.
//!
//! Supported: `partitionBy`, `sortBy`, accumulator outputs (`$sum`,
//! `$avg`, `$min`, `$max`, `$count`, `$first`, `$last`, `$push`,
//! `$addToSet`, `$mergeObjects`, `$stdDevPop`, `$stdDevSamp`) over
//! `documents` windows (default: the whole partition), and `$rank`,
//! `$denseRank`, `$documentNumber`, `$shift`. `range` windows and the
//! other window operators answer CommandNotSupported. It is a blocking
//! stage: the output is ordered by partition, then by `sortBy`.

use crate::collation::Collation;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use bson::{Bson, Document};

use super::accumulators::{AccumulatorKind, AccumulatorSpec, AccumulatorState};
use super::fields::{set_path, split_path};
use super::group::GroupKey;
use super::{document_size, error_stream, DocStream, ExecContext, MemoryBudget, Stage};
use crate::error::{codes, QueryError};
use crate::expr::Expr;
use crate::sort::SortSpec;

/// One bound of a `documents` window, relative to the current document.
#[derive(Clone, Copy, Debug)]
enum Bound {
    Unbounded,
    Offset(i64),
}

#[derive(Debug)]
enum WindowOp {
    Accumulate { spec: AccumulatorSpec, lower: Bound, upper: Bound },
    Rank,
    DenseRank,
    DocumentNumber,
    Shift { output: Expr, by: i64, default: Bson },
}

#[derive(Debug)]
struct OutputField {
    path: Vec<String>,
    op: WindowOp,
}

#[derive(Debug)]
pub(crate) struct SetWindowFieldsStage {
    partition_by: Option<Expr>,
    sort_by: Option<SortSpec>,
    outputs: Vec<OutputField>,
}

fn unsupported(what: &str) -> QueryError {
    QueryError::new(codes::COMMAND_NOT_SUPPORTED, format!("$setWindowFields: {what} is not supported by Slipstream"))
}

fn parse_bound(value: &Bson, upper: bool) -> Result<Bound, QueryError> {
    match value {
        Bson::String(s) if s == "unbounded" => Ok(Bound::Unbounded),
        Bson::String(s) if s == "current" => Ok(Bound::Offset(0)),
        other => match crate::compare::as_number(other) {
            Some(crate::compare::Number::Int(n)) => Ok(Bound::Offset(n)),
            Some(crate::compare::Number::Float(f)) if f.fract() == 0.0 => Ok(Bound::Offset(f as i64)),
            _ => Err(QueryError::new(
                codes::FAILED_TO_PARSE,
                format!("Numeric document-based bounds must be an integer, 'unbounded' or 'current' ({} bound): {other}", if upper { "upper" } else { "lower" }),
            )),
        },
    }
}

fn parse_window(window: Option<&Bson>) -> Result<(Bound, Bound), QueryError> {
    let Some(window) = window else { return Ok((Bound::Unbounded, Bound::Unbounded)) };
    let Bson::Document(window) = window else {
        return Err(QueryError::new(codes::FAILED_TO_PARSE, "'window' field must be an object"));
    };
    if window.contains_key("range") || window.contains_key("unit") {
        return Err(unsupported("a 'range' window"));
    }
    match window.get("documents") {
        Some(Bson::Array(bounds)) if bounds.len() == 2 => {
            let lower = parse_bound(&bounds[0], false)?;
            let upper = parse_bound(&bounds[1], true)?;
            if let (Bound::Offset(l), Bound::Offset(u)) = (lower, upper) {
                if l > u {
                    return Err(QueryError::new(5339900, "Lower bound must not exceed upper bound"));
                }
            }
            Ok((lower, upper))
        }
        _ => Err(QueryError::new(codes::FAILED_TO_PARSE, "'window.documents' must be an array of two bounds")),
    }
}

fn parse_output(name: &str, spec: &Bson) -> Result<OutputField, QueryError> {
    let path = split_path("$setWindowFields", name)?;
    let Bson::Document(spec) = spec else {
        return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("$setWindowFields output field '{name}' must be an object")));
    };
    let mut operators = spec.iter().filter(|(k, _)| *k != "window");
    let (Some((op, argument)), None) = (operators.next(), operators.next()) else {
        return Err(QueryError::new(codes::FAILED_TO_PARSE, format!("$setWindowFields output field '{name}' must name exactly one window function")));
    };
    let window = spec.get("window");
    let op = match op.as_str() {
        "$rank" | "$denseRank" | "$documentNumber" => {
            if window.is_some() {
                return Err(QueryError::new(5371601, format!("{op} does not accept a 'window' field")));
            }
            match op.as_str() {
                "$rank" => WindowOp::Rank,
                "$denseRank" => WindowOp::DenseRank,
                _ => WindowOp::DocumentNumber,
            }
        }
        "$shift" => {
            let Bson::Document(options) = argument else {
                return Err(QueryError::new(codes::FAILED_TO_PARSE, "$shift requires an object"));
            };
            let output = Expr::parse(options.get("output").ok_or_else(|| QueryError::new(codes::FAILED_TO_PARSE, "$shift requires 'output'"))?)?;
            let by = match options.get("by").and_then(crate::compare::as_number) {
                Some(crate::compare::Number::Int(n)) => n,
                _ => return Err(QueryError::new(codes::FAILED_TO_PARSE, "$shift requires 'by' to be an integer")),
            };
            let default = options.get("default").cloned().unwrap_or(Bson::Null);
            WindowOp::Shift { output, by, default }
        }
        accumulator => {
            let mut single = Document::new();
            single.insert(accumulator, argument.clone());
            let spec = AccumulatorSpec::parse(name, &Bson::Document(single)).map_err(|e| {
                if e.code == 15952 { unsupported(&format!("the window function {accumulator}")) } else { e }
            })?;
            if spec.kind == AccumulatorKind::Select {
                return Err(unsupported(&format!("the window function {accumulator}")));
            }
            let (lower, upper) = parse_window(window)?;
            WindowOp::Accumulate { spec, lower, upper }
        }
    };
    Ok(OutputField { path, op })
}

impl SetWindowFieldsStage {
    pub(crate) fn parse(spec: &Bson) -> Result<SetWindowFieldsStage, QueryError> {
        let Bson::Document(options) = spec else {
            return Err(QueryError::new(codes::FAILED_TO_PARSE, "the $setWindowFields stage specification must be an object"));
        };
        if let Some(unknown) = options.keys().find(|k| !matches!(k.as_str(), "partitionBy" | "sortBy" | "output")) {
            return Err(QueryError::new(40415, format!("BSON field '$setWindowFields.{unknown}' is an unknown field.")));
        }
        let partition_by = options.get("partitionBy").map(Expr::parse).transpose()?;
        let sort_by = match options.get("sortBy") {
            None => None,
            Some(Bson::Document(pattern)) => Some(SortSpec::parse(pattern)?),
            Some(_) => return Err(QueryError::new(codes::TYPE_MISMATCH, "$setWindowFields 'sortBy' must be an object")),
        };
        let Some(Bson::Document(output)) = options.get("output") else {
            return Err(QueryError::new(40414, "BSON field '$setWindowFields.output' is missing but a required field"));
        };
        let outputs = output.iter().map(|(name, spec)| parse_output(name, spec)).collect::<Result<Vec<_>, _>>()?;
        let needs_sort = outputs.iter().any(|o| matches!(o.op, WindowOp::Rank | WindowOp::DenseRank | WindowOp::DocumentNumber | WindowOp::Shift { .. }));
        if needs_sort && sort_by.is_none() {
            return Err(QueryError::new(5371602, "$rank, $denseRank, $documentNumber and $shift require a 'sortBy'"));
        }
        Ok(SetWindowFieldsStage { partition_by, sort_by, outputs })
    }

    fn run_all(&self, input: DocStream<'_>, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let mut budget = MemoryBudget::new("$setWindowFields", cx.memory_limit_bytes);
        let mut partitions: BTreeMap<GroupKey, Vec<(Vec<Bson>, Document)>> = BTreeMap::new();
        for item in input {
            let doc = item?;
            budget.charge(document_size(&doc))?;
            let key = match &self.partition_by {
                Some(expr) => expr.evaluate(&doc, &cx.vars)?,
                None => Bson::Null,
            };
            let sort_keys = self.sort_by.as_ref().map(|s| s.keys(&doc)).unwrap_or_default();
            // Partitions, like `$group` keys, are equal under the collation.
            let key = crate::collation::collate_with(cx.vars.collation(), &key).into_owned();
            partitions.entry(GroupKey(key)).or_default().push((sort_keys, doc));
        }
        let mut out = Vec::new();
        for (_, mut rows) in partitions {
            if let Some(sort) = &self.sort_by {
                // A stable sort keeps input order among ties.
                rows.sort_by(|a, b| sort.compare_keys(&a.0, &b.0));
            }
            out.extend(self.compute_partition(rows, cx)?);
        }
        Ok(out)
    }

    fn compute_partition(&self, rows: Vec<(Vec<Bson>, Document)>, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let mut computed: Vec<Vec<Bson>> = vec![Vec::with_capacity(self.outputs.len()); rows.len()];
        for output in &self.outputs {
            let column = self.compute_column(&output.op, &rows, cx)?;
            for (slot, value) in computed.iter_mut().zip(column) {
                slot.push(value);
            }
        }
        Ok(rows
            .into_iter()
            .zip(computed)
            .map(|((_, mut doc), values)| {
                for (output, value) in self.outputs.iter().zip(values) {
                    set_path(&mut doc, &output.path, value);
                }
                doc
            })
            .collect())
    }

    /// One output field's value for every row of a sorted partition.
    fn compute_column(&self, op: &WindowOp, rows: &[(Vec<Bson>, Document)], cx: &ExecContext<'_>) -> Result<Vec<Bson>, QueryError> {
        let count = rows.len();
        let tie = |i: usize| -> bool {
            let sort = self.sort_by.as_ref().expect("checked at parse");
            i > 0 && sort.compare_keys(&rows[i - 1].0, &rows[i].0) == Ordering::Equal
        };
        Ok(match op {
            WindowOp::DocumentNumber => (1..=count).map(|n| Bson::Int32(i32::try_from(n).unwrap_or(i32::MAX))).collect(),
            WindowOp::Rank | WindowOp::DenseRank => {
                let mut ranks = Vec::with_capacity(count);
                let mut current = 0usize;
                for i in 0..count {
                    if !tie(i) {
                        current = if matches!(op, WindowOp::Rank) { i + 1 } else { current + 1 };
                    }
                    ranks.push(Bson::Int32(i32::try_from(current).unwrap_or(i32::MAX)));
                }
                ranks
            }
            WindowOp::Shift { output, by, default } => (0..count)
                .map(|i| {
                    let target = i as i64 + by;
                    if target < 0 || target >= count as i64 {
                        return Ok(default.clone());
                    }
                    output.evaluate(&rows[target as usize].1, &cx.vars)
                })
                .collect::<Result<_, QueryError>>()?,
            WindowOp::Accumulate { spec, lower, upper } => {
                let values = rows
                    .iter()
                    .map(|(_, doc)| spec.expr.evaluate_optional(doc, &cx.vars))
                    .collect::<Result<Vec<_>, _>>()?;
                match lower {
                    // A window that starts at the partition's first row
                    // only grows, so one running state serves every row.
                    Bound::Unbounded => running_values(spec, &values, *upper, cx.vars.collation())?,
                    Bound::Offset(_) => (0..count)
                        .map(|i| window_value(spec, &values, i, *lower, *upper, cx.vars.collation()))
                        .collect::<Result<_, _>>()?,
                }
            }
        })
    }
}

/// Folds the values of rows `i + lower ..= i + upper` (clamped).
fn window_value(
    spec: &AccumulatorSpec,
    values: &[Option<Bson>],
    i: usize,
    lower: Bound,
    upper: Bound,
    collation: Option<&Collation>,
) -> Result<Bson, QueryError> {
    let last = values.len() as i64 - 1;
    let start = match lower {
        Bound::Unbounded => 0,
        Bound::Offset(k) => (i as i64 + k).max(0),
    };
    let end = match upper {
        Bound::Unbounded => last,
        Bound::Offset(k) => (i as i64 + k).min(last),
    };
    let mut state = AccumulatorState::new(spec.kind);
    if start <= end {
        for value in &values[start as usize..=end as usize] {
            state.add(spec.kind, value.clone(), collation)?;
        }
    }
    Ok(state.finish(spec))
}

/// Values of windows `[unbounded, upper]`: the state is extended as the
/// window's end moves forward and finished (from a copy) for each row.
fn running_values(
    spec: &AccumulatorSpec,
    values: &[Option<Bson>],
    upper: Bound,
    collation: Option<&Collation>,
) -> Result<Vec<Bson>, QueryError> {
    let last = values.len() as i64 - 1;
    let mut state = AccumulatorState::new(spec.kind);
    let mut added: i64 = -1;
    let mut out = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        let end = match upper {
            Bound::Unbounded => last,
            Bound::Offset(k) => (i as i64 + k).min(last),
        };
        while added < end {
            added += 1;
            state.add(spec.kind, values[added as usize].clone(), collation)?;
        }
        out.push(state.clone().finish(spec));
    }
    Ok(out)
}

impl Stage for SetWindowFieldsStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<Collation>) {
        self.sort_by = self.sort_by.take().map(|sort| sort.with_collation(Some(collation.clone())));
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.run_all(input, cx) {
            Ok(docs) => Box::new(docs.into_iter().map(Ok)),
            Err(error) => error_stream(error),
        }
    }
}
