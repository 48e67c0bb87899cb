//! `replSetResizeOplog`: changes a member's oplog size cap and minimum
//! retention while it runs (MongoDB 7.0's command, its IDL's rules).
//!
//! `size` is the cap in MB, a double (an int is refused, which is why
//! MongoDB's manual has mongosh users write `Double(...)`), from 990 MB to
//! 1 PB. It is kept in the data directory, so later restarts use it rather
//! than `--oplogSize`. `minRetentionHours` (a double, at least 0) keeps
//! entries younger than that even over the cap, for this process's life;
//! a restart starts again from `--oplogMinRetentionHours`. Either field may
//! be left out; with neither the command changes nothing. A smaller cap
//! deletes old entries at the oplog's next look, never past what a
//! checkpoint, a rollback to the commit point or an initial sync still
//! needs. Each member has its own oplog: the command changes only the one
//! it runs on, primary or secondary. A standalone has no oplog
//! (NamespaceNotFound), as MongoDB's has none.

use bson::{Bson, Document};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::type_name;

/// MongoDB's bounds on `size`, in MB: 990 MB to 1 PB.
pub const SIZE_MB_MIN: f64 = 990.0;
pub const SIZE_MB_MAX: f64 = 1024.0 * 1024.0 * 1024.0;

pub async fn resize_oplog(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(13, format!("{} may only be run against the admin database.", req.name)));
    }
    if !ctx.state.topology.is_replica_set() {
        return Err(CommandError::new(26, "oplog does not exist"));
    }
    let (size_mb, min_retention_hours) = parse(&req.body)?;
    let size_bytes = size_mb.map(|mb| (mb * 1024.0 * 1024.0) as u64);
    ctx.state.engine.resize_oplog(size_bytes, min_retention_hours)?;
    let stats = ctx.state.engine.stats();
    tracing::info!(
        target: "storage",
        size = stats.oplog_size_cap_bytes,
        min_retention_hours = stats.oplog_min_retention_hours,
        "replSetResizeOplog success"
    );
    Ok(Document::new())
}

/// The new size in MB and retention in hours, each if given.
fn parse(body: &Document) -> Result<(Option<f64>, Option<f64>), CommandError> {
    match body.get("replSetResizeOplog") {
        Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_)) => {}
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'replSetResizeOplog.replSetResizeOplog' is the wrong type '{}', expected types '[long, \
                 int, decimal, double]'",
                type_name(other)
            )))
        }
        None => unreachable!("the command's name is its first field"),
    }
    let size = double(body, "size")?;
    if let Some(size) = size {
        // NaN is in no range: it fails the first check, as MongoDB's does.
        if size.is_nan() || size < SIZE_MB_MIN {
            return Err(out_of_range("size", ">=", SIZE_MB_MIN, size));
        }
        if size > SIZE_MB_MAX {
            return Err(out_of_range("size", "<=", SIZE_MB_MAX, size));
        }
    }
    let hours = double(body, "minRetentionHours")?;
    if let Some(hours) = hours {
        if hours.is_nan() || hours < 0.0 {
            return Err(out_of_range("minRetentionHours", ">=", 0.0, hours));
        }
    }
    Ok((size, hours))
}

/// A field the IDL types `double`: a BSON double only; absent or null is
/// none.
fn double(body: &Document, field: &str) -> Result<Option<f64>, CommandError> {
    match body.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(Bson::Double(value)) => Ok(Some(*value)),
        Some(other) => Err(CommandError::type_mismatch(format!(
            "BSON field 'replSetResizeOplog.{field}' is the wrong type '{}', expected type 'double'",
            type_name(other)
        ))),
    }
}

fn out_of_range(field: &str, relation: &str, bound: f64, actual: f64) -> CommandError {
    CommandError::new(51024, format!("BSON field '{field}' value must be {relation} {bound}, actual value '{actual}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn fields_are_read_with_the_idl_rules() {
        let code = |body: Document| parse(&body).unwrap_err().code;
        assert_eq!(parse(&doc! {"replSetResizeOplog": 1, "size": 990.0}).unwrap(), (Some(990.0), None));
        assert_eq!(parse(&doc! {"replSetResizeOplog": 1, "minRetentionHours": 1.5}).unwrap(), (None, Some(1.5)));
        assert_eq!(parse(&doc! {"replSetResizeOplog": 1}).unwrap(), (None, None));
        assert_eq!(parse(&doc! {"replSetResizeOplog": 1, "size": SIZE_MB_MAX}).unwrap(), (Some(SIZE_MB_MAX), None));
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": 900.0}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": -1024.0}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": SIZE_MB_MAX * 8.0}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": f64::NAN}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": 1000}), 14);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": "1000"}), 14);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "size": 990.0, "minRetentionHours": -1.0}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "minRetentionHours": f64::NAN}), 51024);
        assert_eq!(code(doc! {"replSetResizeOplog": 1, "minRetentionHours": 2}), 14);
        assert_eq!(code(doc! {"replSetResizeOplog": "x"}), 14);
    }
}
