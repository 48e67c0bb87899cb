//! `$bucket`: groups documents into ranges of a `groupBy` expression.
//!
//! As in MongoDB, it is a `$group` whose `_id` is a `$switch` over the
//! boundaries (each bucket is named by its inclusive lower boundary,
//! documents outside every range go to the `default` bucket) followed by
//! a `$sort` on `_id`. Boundaries must ascend, and a `default` must lie
//! outside them, under the operation's collation: with strings among them
//! that is checked by a first stage once the collation is known.

use bson::{doc, Bson, Document};

use super::accumulators::AccumulatorSpec;
use super::group::GroupStage;
use super::sort_stage::SortStage;
use super::Stage;
use super::{DocStream, ExecContext};
use crate::collation::{compare_with, contains_string, CollationRef};
use crate::compare::canonical_type_rank;
use crate::error::QueryError;
use crate::expr::Expr;

pub(crate) fn parse_bucket(spec: &Bson) -> Result<Vec<Box<dyn Stage>>, QueryError> {
    let Bson::Document(options) = spec else {
        return Err(QueryError::new(40201, "Argument to $bucket stage must be an object"));
    };
    let mut group_by = None;
    let mut boundaries = None;
    let mut default = None;
    let mut output = None;
    for (key, value) in options {
        match key.as_str() {
            "groupBy" => group_by = Some(value),
            "boundaries" => boundaries = Some(value),
            "default" => default = Some(value),
            "output" => output = Some(value),
            other => return Err(QueryError::new(40197, format!("Unrecognized option to $bucket: {other}."))),
        }
    }
    let (Some(group_by), Some(boundaries)) = (group_by, boundaries) else {
        return Err(QueryError::new(40198, "$bucket requires 'groupBy' and 'boundaries' to be specified."));
    };
    let group_by_is_expression = match group_by {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(_) => true,
        _ => false,
    };
    if !group_by_is_expression {
        return Err(QueryError::new(40202, "The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression"));
    }
    let boundaries = validate_boundaries(boundaries)?;
    let order = BucketOrder { boundaries: boundaries.clone(), default: default.cloned(), collation: None };
    let collatable = boundaries.iter().chain(default).any(contains_string);
    if !collatable {
        order.check()?;
    }
    let branches: Vec<Bson> = boundaries
        .windows(2)
        .map(|pair| {
            Bson::Document(doc! {
                "case": {"$and": [{"$gte": [group_by.clone(), {"$literal": pair[0].clone()}]}, {"$lt": [group_by.clone(), {"$literal": pair[1].clone()}]}]},
                "then": {"$literal": pair[0].clone()},
            })
        })
        .collect();
    let mut switch = doc! {"branches": branches};
    if let Some(default) = default {
        switch.insert("default", doc! {"$literal": default.clone()});
    }
    let id = Expr::parse(&Bson::Document(doc! {"$switch": switch}))?;
    let accumulators = match output {
        None => vec![AccumulatorSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?],
        Some(Bson::Document(fields)) => parse_output(fields)?,
        Some(_) => return Err(QueryError::new(40196, "The $bucket 'output' field must be an object")),
    };
    let mut stages: Vec<Box<dyn Stage>> = Vec::with_capacity(3);
    if collatable {
        stages.push(Box::new(order));
    }
    stages.push(Box::new(GroupStage::from_parts(id, accumulators)));
    stages.push(Box::new(SortStage::parse(&Bson::Document(doc! {"_id": 1}), None)?));
    Ok(stages)
}

/// The order rules of `$bucket`'s boundaries and `default`; a stage when
/// strings make them depend on the collation.
#[derive(Debug)]
struct BucketOrder {
    boundaries: Vec<Bson>,
    default: Option<Bson>,
    collation: CollationRef,
}

impl BucketOrder {
    fn check(&self) -> Result<(), QueryError> {
        let collation = self.collation.as_deref();
        for pair in self.boundaries.windows(2) {
            if !compare_with(collation, &pair[0], &pair[1]).is_lt() {
                return Err(QueryError::new(40194, "The 'boundaries' option to $bucket must be sorted in ascending order"));
            }
        }
        if let Some(default) = &self.default {
            let below = compare_with(collation, default, &self.boundaries[0]).is_lt();
            let above = compare_with(collation, default, &self.boundaries[self.boundaries.len() - 1]).is_ge();
            let different_type = canonical_type_rank(default) != canonical_type_rank(&self.boundaries[0]);
            if !(below || above || different_type) {
                return Err(QueryError::new(40199, "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary."));
            }
        }
        Ok(())
    }
}

impl Stage for BucketOrder {
    fn may_deepen(&self) -> bool {
        false
    }

    fn set_collation(&mut self, collation: &std::sync::Arc<crate::collation::Collation>) {
        self.collation = Some(collation.clone());
    }

    fn apply<'a>(&'a self, input: DocStream<'a>, _cx: &'a ExecContext<'a>) -> DocStream<'a> {
        match self.check() {
            Ok(()) => input,
            Err(error) => super::error_stream(error),
        }
    }
}

fn parse_output(fields: &Document) -> Result<Vec<AccumulatorSpec>, QueryError> {
    fields.iter().map(|(name, spec)| AccumulatorSpec::parse(name, spec)).collect()
}

/// Boundaries: at least two constants of one type (`BucketOrder` checks
/// that they ascend).
fn validate_boundaries(boundaries: &Bson) -> Result<Vec<Bson>, QueryError> {
    let Bson::Array(values) = boundaries else {
        return Err(QueryError::new(40200, "The $bucket 'boundaries' field must be an array"));
    };
    if values.len() < 2 {
        return Err(QueryError::new(40192, "The $bucket 'boundaries' field must have at least 2 values"));
    }
    for pair in values.windows(2) {
        if canonical_type_rank(&pair[0]) != canonical_type_rank(&pair[1]) {
            return Err(QueryError::new(40193, "All values in the the 'boundaries' option to $bucket must have the same type."));
        }
        // Strings ascend under the collation, which `BucketOrder` checks.
        if !contains_string(&pair[0]) && !crate::compare::compare_values(&pair[0], &pair[1]).is_lt() {
            return Err(QueryError::new(40194, "The 'boundaries' option to $bucket must be sorted in ascending order"));
        }
    }
    Ok(values.clone())
}
