//! `$count` and `$sortByCount`, both built from `$group` (and `$sort`).

use bson::{doc, Bson};

use super::accumulators::AccumulatorSpec;
use super::group::GroupStage;
use super::project::ProjectStage;
use super::sort_stage::SortStage;
use super::Stage;
use crate::error::QueryError;
use crate::expr::Expr;

/// `$count: "name"` = `$group {_id: null, name: {$sum: 1}}` then
/// `$project {_id: 0}`: no output at all for an empty input.
pub(crate) fn parse_count(spec: &Bson) -> Result<Vec<Box<dyn Stage>>, QueryError> {
    let Bson::String(name) = spec else {
        return Err(QueryError::new(40156, "the count field must be a non-empty string"));
    };
    if name.is_empty() {
        return Err(QueryError::new(40157, "the count field must be a non-empty string"));
    }
    if name.starts_with('$') {
        return Err(QueryError::new(40158, "the count field cannot be a $-prefixed path"));
    }
    if name.contains('.') {
        return Err(QueryError::new(40160, "the count field cannot contain '.'"));
    }
    let sum = AccumulatorSpec::parse(name, &Bson::Document(doc! {"$sum": 1}))?;
    Ok(vec![
        Box::new(GroupStage::from_parts(Expr::literal(Bson::Null), vec![sum])),
        Box::new(ProjectStage::parse(&Bson::Document(doc! {"_id": 0}))?),
    ])
}

/// `$sortByCount: <expr>` = `$group {_id: <expr>, count: {$sum: 1}}`
/// then `$sort {count: -1}`.
pub(crate) fn parse_sort_by_count(spec: &Bson) -> Result<Vec<Box<dyn Stage>>, QueryError> {
    let valid = match spec {
        Bson::String(s) => s.starts_with('$'),
        Bson::Document(d) => d.len() == 1 && d.keys().all(|k| k.starts_with('$')),
        _ => false,
    };
    if !valid {
        return Err(QueryError::new(
            40148,
            "the sortByCount field must be defined as a $-prefixed path or an expression",
        ));
    }
    let count = AccumulatorSpec::parse("count", &Bson::Document(doc! {"$sum": 1}))?;
    Ok(vec![
        Box::new(GroupStage::from_parts(Expr::parse(spec)?, vec![count])),
        Box::new(SortStage::parse(&Bson::Document(doc! {"count": -1}), None)?),
    ])
}
