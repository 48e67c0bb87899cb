//! `$bucket`: groups documents into ranges of a `groupBy` expression.
//!
//! As in MongoDB, it is a `$group` whose `_id` is a `$switch` over the
//! boundaries (each bucket is named by its inclusive lower boundary,
//! documents outside every range go to the `default` bucket) followed by
//! a `$sort` on `_id`.

use bson::{doc, Bson, Document};

use super::accumulators::AccumulatorSpec;
use super::group::GroupStage;
use super::sort_stage::SortStage;
use super::Stage;
use crate::compare::{canonical_type_rank, compare_values};
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
    if let Some(default) = default {
        let below = compare_values(default, &boundaries[0]).is_lt();
        let above = compare_values(default, &boundaries[boundaries.len() - 1]).is_ge();
        let different_type = canonical_type_rank(default) != canonical_type_rank(&boundaries[0]);
        if !(below || above || different_type) {
            return Err(QueryError::new(40199, "The $bucket 'default' field must be less than the lowest boundary or greater than or equal to the highest boundary."));
        }
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
    Ok(vec![
        Box::new(GroupStage::from_parts(id, accumulators)),
        Box::new(SortStage::parse(&Bson::Document(doc! {"_id": 1}), None)?),
    ])
}

fn parse_output(fields: &Document) -> Result<Vec<AccumulatorSpec>, QueryError> {
    fields.iter().map(|(name, spec)| AccumulatorSpec::parse(name, spec)).collect()
}

/// Boundaries: at least two constants of one type, strictly ascending.
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
        if !compare_values(&pair[0], &pair[1]).is_lt() {
            return Err(QueryError::new(40194, "The 'boundaries' option to $bucket must be sorted in ascending order"));
        }
    }
    Ok(values.clone())
}
