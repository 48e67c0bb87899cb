//! `$group`: a blocking stage that folds documents into one output
//! document per distinct `_id` value. Groups are kept in a `BTreeMap`
//! ordered by BSON comparison, so `1` and `1.0` fall in one group (as in
//! MongoDB) and the output order is deterministic (ascending `_id`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use bson::{Bson, Document};

use super::accumulators::{AccumulatorSpec, AccumulatorState};
use super::{approximate_size, error_stream, DocStream, ExecContext, MemoryBudget, Stage};
use crate::compare::compare_values;
use crate::error::QueryError;
use crate::expr::Expr;

#[derive(Debug)]
pub(crate) struct GroupStage {
    id: Expr,
    accumulators: Vec<AccumulatorSpec>,
    /// Keys equal under this collation form one group (`None`: simple).
    collation: crate::collation::CollationRef,
}

/// A group key ordered by BSON comparison.
#[derive(Clone, Debug)]
pub(crate) struct GroupKey(pub(crate) Bson);

impl PartialEq for GroupKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for GroupKey {}

impl PartialOrd for GroupKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for GroupKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_values(&self.0, &other.0)
    }
}

impl GroupStage {
    pub(crate) fn parse(spec: &Bson) -> Result<GroupStage, QueryError> {
        let Bson::Document(spec) = spec else {
            return Err(QueryError::new(15947, "a group's fields must be specified in an object"));
        };
        let mut id = None;
        let mut accumulators = Vec::new();
        for (field, value) in spec {
            if field == "_id" {
                id = Some(Expr::parse(value)?);
                continue;
            }
            if field.contains('.') {
                return Err(QueryError::new(40235, format!("The field name '{field}' cannot contain '.'")));
            }
            if field.starts_with('$') {
                return Err(QueryError::new(40236, format!("The field name '{field}' cannot be an operator name")));
            }
            accumulators.push(AccumulatorSpec::parse(field, value)?);
        }
        let id = id.ok_or_else(|| QueryError::new(15955, "a group specification must include an _id"))?;
        Ok(GroupStage { id, accumulators, collation: None })
    }

    /// Builds a `$group` from parts (`$sortByCount`).
    pub(crate) fn from_parts(id: Expr, accumulators: Vec<AccumulatorSpec>) -> GroupStage {
        GroupStage { id, accumulators, collation: None }
    }

    fn group_all(&self, input: DocStream<'_>, cx: &ExecContext<'_>) -> Result<Vec<Document>, QueryError> {
        let mut budget = MemoryBudget::new("$group", cx.memory_limit_bytes);
        // Under a collation, groups are found by the collated key and keep
        // the first key seen as their `_id`.
        let mut groups: BTreeMap<GroupKey, (Bson, Vec<AccumulatorState>)> = BTreeMap::new();
        for item in input {
            let doc = item?;
            // A missing _id groups as null.
            let key = self.id.evaluate(&doc, &cx.vars)?;
            let lookup = crate::collation::collate_with(self.collation.as_deref(), &key).into_owned();
            let (_, states) = match groups.get_mut(&GroupKey(lookup.clone())) {
                Some(group) => group,
                None => {
                    budget.charge(approximate_size(&key) + 64 * self.accumulators.len())?;
                    let fresh = self.accumulators.iter().map(|a| AccumulatorState::new(a.kind)).collect();
                    groups.entry(GroupKey(lookup)).or_insert((key, fresh))
                }
            };
            for (spec, state) in self.accumulators.iter().zip(states.iter_mut()) {
                budget.charge(state.add_document(spec, &doc, &cx.vars)?)?;
            }
        }
        Ok(groups.into_values().map(|(key, states)| self.output(key, states)).collect())
    }

    fn output(&self, id: Bson, states: Vec<AccumulatorState>) -> Document {
        let mut out = Document::new();
        out.insert("_id", id);
        for (spec, state) in self.accumulators.iter().zip(states) {
            out.insert(spec.field.clone(), state.finish(spec));
        }
        out
    }
}

impl Stage for GroupStage {
    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        self.collation = Some(collation.clone());
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.group_all(input, cx) {
            Ok(docs) => Box::new(docs.into_iter().map(Ok)),
            Err(error) => error_stream(error),
        }
    }
}
