//! Capped collections on the command side: the `capped`, `size` and `max`
//! options as MongoDB 7.0 parses them, and tailable cursors over a capped
//! collection's natural order (storage keeps the order, `capped.rs` there).
//!
//! A tailable cursor holds the position of the last document it examined.
//! Each batch reads after it on a fresh reader; when trimming (or a delete)
//! removed that document, the cursor dies with CappedPositionLost (136), as
//! MongoDB's does. With `awaitData`, an empty batch waits for the next oplog
//! entry (every insert makes one, on a primary and on a member) or the
//! `getMore`'s `maxTimeMS`.

use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bson::{Bson, Document};
use slipstream_query::filter::Filter;
use slipstream_query::projection::Projection;
use slipstream_storage::{Engine, ReadAt};

use super::args;
use super::batch::{Batch, BatchLimits};
use super::query::project;
use crate::error::CommandError;

/// The largest `size` (1 PB), as MongoDB 7.0.
pub const CAPPED_SIZE_MAX: i64 = 1 << 50;
/// `max` must stay below 2^31.
pub const CAPPED_MAX_DOCS_LIMIT: i64 = 1 << 31;
/// Documents read from storage per step of a tailable batch.
const TAIL_READ_CHUNK: usize = 256;

/// A numeric argument as MongoDB's IDL `safeInt64` reads it (fractions
/// truncated); null counts as absent.
fn safe_i64(body: &Document, command: &str, field: &str) -> Result<Option<i64>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Int32(n)) => Ok(Some(i64::from(*n))),
        Some(Bson::Int64(n)) => Ok(Some(*n)),
        Some(Bson::Double(n)) if n.is_finite() => Ok(Some(*n as i64)),
        Some(Bson::Decimal128(n)) => Ok(n.to_string().parse::<f64>().ok().map(|n| n as i64)),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{command}.{field}' is the wrong type '{}', expected types '[long, int, decimal, double]'",
            args::type_name(other)
        ))),
    }
}

/// `capped` as MongoDB's `safeBool`: a boolean or a number.
fn safe_bool(body: &Document, command: &str, field: &str) -> Result<Option<bool>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Boolean(b)) => Ok(Some(*b)),
        Some(Bson::Int32(n)) => Ok(Some(*n != 0)),
        Some(Bson::Int64(n)) => Ok(Some(*n != 0)),
        Some(Bson::Double(n)) => Ok(Some(*n != 0.0)),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field '{command}.{field}' is the wrong type '{}', expected types '[bool, long, int, decimal, double]'",
            args::type_name(other)
        ))),
    }
}

/// The IDL range check MongoDB applies to `size` (and `cappedSize`).
fn check_size(field: &str, size: i64) -> Result<(), CommandError> {
    if size < 1 {
        return Err(CommandError::new(
            51024,
            format!("BSON field '{field}' value must be >= 1, actual value '{size}'"),
        ));
    }
    if size > CAPPED_SIZE_MAX {
        return Err(CommandError::new(
            51024,
            format!("BSON field '{field}' value must be <= {CAPPED_SIZE_MAX}, actual value '{size}'"),
        ));
    }
    Ok(())
}

fn check_max(field: &str, max: i64) -> Result<(), CommandError> {
    if max >= CAPPED_MAX_DOCS_LIMIT {
        return Err(CommandError::new(
            51024,
            format!("BSON field '{field}' value must be < {CAPPED_MAX_DOCS_LIMIT}, actual value '{max}'"),
        ));
    }
    Ok(())
}

/// MongoDB 7.0 rounds `size` up to a multiple of 256 bytes.
pub fn round_size(size: i64) -> i64 {
    (size + 0xff) & !0xff
}

/// `max` as stored: zero or negative means unlimited, kept as 2^31 - 1.
pub fn adjust_max(max: i64) -> i64 {
    if max <= 0 {
        slipstream_storage::capped::UNLIMITED_MAX
    } else {
        max
    }
}

/// A number as MongoDB's `appendNumber` writes it: an int when it fits.
pub fn number(value: i64) -> Bson {
    match i32::try_from(value) {
        Ok(small) => Bson::Int32(small),
        Err(_) => Bson::Int64(value),
    }
}

/// The capped options of a `create` (or of `cloneCollectionAsCapped`'s
/// target): `{capped: true, size, max?}` as the catalog keeps them, or an
/// empty document for an ordinary collection. Checks in MongoDB's order:
/// types, ranges, then the two rules that tie the options together.
pub fn create_options(body: &Document) -> Result<Document, CommandError> {
    let capped = safe_bool(body, "create", "capped")?.unwrap_or(false);
    let size = safe_i64(body, "create", "size")?;
    let max = safe_i64(body, "create", "max")?;
    if let Some(size) = size {
        check_size("size", size)?;
    }
    if let Some(max) = max {
        check_max("max", max)?;
    }
    if capped && size.is_none() {
        return Err(CommandError::new(
            72,
            "the 'size' field is required when 'capped' is true",
        ));
    }
    if (size.is_some() || max.is_some()) && !capped {
        return Err(CommandError::new(
            72,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are present",
        ));
    }
    let mut options = Document::new();
    if let Some(size) = size {
        options.insert("capped", true);
        options.insert("size", number(round_size(size)));
        if let Some(max) = max {
            options.insert("max", number(adjust_max(max)));
        }
    }
    Ok(options)
}

/// `collMod`'s `cappedSize` and `cappedMax`, as the catalog's `size` and
/// `max` (None when the command changes neither).
pub fn coll_mod_changes(body: &Document) -> Result<Option<Document>, CommandError> {
    let size = safe_i64(body, "collMod", "cappedSize")?;
    let max = safe_i64(body, "collMod", "cappedMax")?;
    if size.is_none() && max.is_none() {
        return Ok(None);
    }
    let mut changes = Document::new();
    if let Some(size) = size {
        check_size("cappedSize", size)?;
        changes.insert("size", number(round_size(size)));
    }
    if let Some(max) = max {
        check_max("cappedMax", max)?;
        changes.insert("max", number(adjust_max(max)));
    }
    Ok(Some(changes))
}

/// The `size` of `convertToCapped` / `cloneCollectionAsCapped`: required, a
/// number in range.
pub fn command_size(body: &Document, command: &str) -> Result<i64, CommandError> {
    let Some(size) = safe_i64(body, command, "size")? else {
        return Err(CommandError::new(
            40414,
            format!("BSON field '{command}.size' is missing but a required field"),
        ));
    };
    check_size("size", size)?;
    Ok(size)
}

/// CappedPositionLost: the document a tailable cursor stood on is gone.
fn position_lost(ns: &str) -> CommandError {
    CommandError::new(
        136,
        format!("CollectionScan died due to position in capped collection {ns} being deleted"),
    )
}

/// A tailable cursor over a capped collection.
pub struct CappedTail {
    ns: String,
    filter: Filter,
    projection: Option<Projection>,
    /// After which document the next read starts (None: at the start).
    position: Option<Vec<u8>>,
    await_data: bool,
    skip_remaining: u64,
    limit_remaining: Option<u64>,
    /// The first batch has been made.
    started: bool,
    pub examined: u64,
}

impl CappedTail {
    pub fn new(
        ns: String,
        filter: Filter,
        projection: Option<Projection>,
        skip: u64,
        limit: Option<u64>,
        await_data: bool,
    ) -> Self {
        CappedTail {
            ns,
            filter,
            projection,
            position: None,
            await_data,
            skip_remaining: skip,
            limit_remaining: limit,
            started: false,
            examined: 0,
        }
    }

    pub fn is_await_data(&self) -> bool {
        self.await_data
    }

    /// Fills `batch` with what is there now; true when the cursor is
    /// finished (its limit reached, its collection gone, or, on the first
    /// batch, an empty collection: MongoDB closes such a cursor at once).
    fn fill(&mut self, engine: &Arc<Engine>, batch: &mut Batch) -> Result<bool, CommandError> {
        let reader = engine.reader(ReadAt::Latest)?;
        if reader.collection_info(&self.ns).is_none() {
            return Ok(true);
        }
        if let Some(position) = &self.position {
            if !reader.natural_position_exists(&self.ns, position)? {
                return Err(position_lost(&self.ns));
            }
        }
        let first = !self.started;
        self.started = true;
        loop {
            if self.limit_remaining == Some(0) {
                return Ok(true);
            }
            if batch.is_full() {
                return Ok(false);
            }
            let start = match &self.position {
                Some(position) => Bound::Excluded(position.clone()),
                None => Bound::Unbounded,
            };
            let documents = reader.scan_natural(&self.ns, start, Bound::Unbounded, false, TAIL_READ_CHUNK)?;
            if documents.is_empty() {
                return Ok(first && self.position.is_none());
            }
            for (position, document) in documents {
                if batch.is_full() || self.limit_remaining == Some(0) {
                    return Ok(self.limit_remaining == Some(0));
                }
                self.examined += 1;
                let wanted = self.filter.matches(&document);
                if wanted && self.skip_remaining > 0 {
                    self.skip_remaining -= 1;
                    self.position = Some(position);
                    continue;
                }
                if wanted {
                    let output = project(self.projection.as_ref(), &self.filter, document)?;
                    if batch.push(output).is_err() {
                        return Ok(false);
                    }
                    if let Some(limit) = self.limit_remaining.as_mut() {
                        *limit -= 1;
                    }
                }
                self.position = Some(position);
            }
        }
    }
}

/// One batch of a tailable cursor on a capped collection, waiting up to
/// `wait` for new documents when it has none and is `awaitData`.
pub async fn tail_batch(
    engine: &Arc<Engine>,
    tail: &mut CappedTail,
    limits: BatchLimits,
    wait: Duration,
) -> Result<(Vec<Document>, bool), CommandError> {
    let await_data = tail.await_data;
    super::await_data::fill_or_wait(engine, limits, wait, await_data, |batch| tail.fill(engine, batch)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn create_options_round_and_refuse_as_mongodb() {
        let options = create_options(&doc! {"create": "c", "capped": true, "size": 1000, "max": 5}).unwrap();
        assert_eq!(options, doc! {"capped": true, "size": 1024, "max": 5});
        assert_eq!(create_options(&doc! {"create": "c"}).unwrap(), Document::new());
        let code = |body: Document| create_options(&body).unwrap_err().code;
        assert_eq!(code(doc! {"create": "c", "capped": true}), 72);
        assert_eq!(code(doc! {"create": "c", "capped": true, "size": 0}), 51024);
        assert_eq!(code(doc! {"create": "c", "capped": true, "size": -5}), 51024);
        assert_eq!(
            code(doc! {"create": "c", "capped": true, "size": CAPPED_SIZE_MAX + 1}),
            51024
        );
        assert_eq!(code(doc! {"create": "c", "size": 4096}), 72);
        assert_eq!(code(doc! {"create": "c", "capped": true, "size": "x"}), 14);
        assert_eq!(
            code(doc! {"create": "c", "capped": true, "size": 4096, "max": 1_i64 << 31}),
            51024
        );
        let unlimited = create_options(&doc! {"create": "c", "capped": true, "size": 256, "max": 0}).unwrap();
        assert_eq!(unlimited.get_i32("max").unwrap(), 0x7fff_ffff);
    }
}
