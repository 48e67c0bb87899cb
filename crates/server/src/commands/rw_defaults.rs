//! `getDefaultRWConcern` and `setDefaultRWConcern`: the cluster-wide
//! default read and write concerns (MongoDB 4.4+).
//!
//! Slipstream has no custom defaults yet, so the defaults in force are
//! always the implicit ones: read concern `local`, and write concern
//! `w: "majority"`, or `w: 1` in a set whose arbiters leave the
//! data-bearing voters no more than a majority (MongoDB 5.0's rule, the
//! topology's `default_write_concern`). `getDefaultRWConcern` reports them
//! as MongoDB does when no default was ever set (`...Source: "implicit"`);
//! `setDefaultRWConcern` is refused with CommandNotSupported (115) rather
//! than accepted and ignored. Both are admin-only, and a standalone has
//! no defaults to report (51300), as in MongoDB.

use bson::{doc, Bson, Document};

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::{refuse_unknown_fields, type_name};

pub async fn get_default_rw_concern(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    check_place(ctx, req)?;
    refuse_unknown_fields(&req.body, "getDefaultRWConcern", &["getDefaultRWConcern", "inMemory"])?;
    let in_memory = match req.body.get("inMemory") {
        None | Some(Bson::Null) => false,
        Some(Bson::Boolean(in_memory)) => *in_memory,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getDefaultRWConcern.inMemory' is the wrong type '{}', expected type 'bool'",
                type_name(other)
            )))
        }
    };
    let write_concern = shown(&ctx.state.topology.default_write_concern());
    // Nothing updates the defaults after the process starts.
    let since = std::time::SystemTime::now() - ctx.state.started_at.elapsed();
    let mut reply = doc! {
        "defaultReadConcern": {"level": "local"},
        "defaultWriteConcern": write_concern,
        "defaultReadConcernSource": "implicit",
        "defaultWriteConcernSource": "implicit",
        "localUpdateWallClockTime": bson::DateTime::from_system_time(since),
    };
    if in_memory {
        reply.insert("inMemory", true);
    }
    Ok(reply)
}

pub async fn set_default_rw_concern(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    check_place(ctx, req)?;
    Err(CommandError::new(
        115,
        "setDefaultRWConcern is not supported by Slipstream yet: the defaults are the implicit ones \
         (readConcern local; writeConcern w: \"majority\", or w: 1 in a primary-secondary-arbiter set), \
         which getDefaultRWConcern reports; give the concern on each command instead",
    ))
}

/// The default itself, without the per-request provenance or `j`.
fn shown(write_concern: &slipstream_repl::WriteConcern) -> Document {
    write_concern
        .to_document()
        .into_iter()
        .filter(|(key, _)| key == "w" || key == "wtimeout")
        .collect()
}

fn check_place(ctx: &CommandContext, req: &CommandRequest) -> Result<(), CommandError> {
    if req.db != "admin" {
        return Err(CommandError::new(13, format!("{} may only be run against the admin database.", req.name)));
    }
    if !ctx.state.topology.is_replica_set() {
        return Err(CommandError::new(
            51300,
            format!("'{}' is not supported on standalone nodes.", req.name),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::find_command;

    #[test]
    fn both_commands_have_rows() {
        assert_eq!(find_command("getDefaultRWConcern", false).unwrap().name, "getDefaultRWConcern");
        assert_eq!(find_command("setDefaultRWConcern", false).unwrap().name, "setDefaultRWConcern");
    }

    #[test]
    fn the_default_shown_keeps_w_and_wtimeout() {
        assert_eq!(shown(&slipstream_repl::WriteConcern::majority()), doc! {"w": "majority", "wtimeout": 0});
        assert_eq!(shown(&slipstream_repl::WriteConcern::w1()), doc! {"w": 1, "wtimeout": 0});
    }
}
