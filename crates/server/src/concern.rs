//! A command's read and write concern, as `operation::execute` handles them
//! for every command family: parsed and checked against the command's table
//! row, then handed to the topology, which decides what they mean on this
//! node (a standalone refuses `w: 2`; a set waits for its majority).
//!
//! - Read concern: the row says which levels the command takes; the
//!   topology turns the arguments into a read point (waiting first for
//!   `afterClusterTime` where it must) before the handler runs.
//! - Write concern: refused before anything is written when the command
//!   takes none (InvalidOptions, 72) or the topology cannot satisfy it;
//!   after the handler, waited for at the command's last write (or the last
//!   applied one when it wrote nothing, so that `j: true` still means "my
//!   earlier writes are durable"). A failed wait is the reply's
//!   `writeConcernError`, beside `ok: 1`: the write itself happened.

use std::time::Instant;

use bson::{doc, Document};
use slipstream_repl::{CommandAccess, ReadConcernArgs, ReadConcernLevel, ReplError, Topology, WriteConcern};

use crate::commands::{CommandSpec, ReadConcernUse};
use crate::error::CommandError;
use crate::exec::read_concern::ReadPoint;

/// What the read concern decided for one command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadDecision {
    pub point: ReadPoint,
    /// `linearizable`: the reply waits for `Topology::linearizable_barrier`.
    pub linearizable: bool,
}

/// Parses the command's `readConcern`, refuses what its row does not take,
/// and asks the topology for the read point (which may wait, until
/// `deadline`).
pub async fn decide_read(
    spec: &CommandSpec,
    body: &Document,
    topology: &dyn Topology,
    deadline: Option<Instant>,
) -> Result<ReadDecision, CommandError> {
    let args = ReadConcernArgs::parse(body)?;
    check_supported(spec, &args)?;
    // No read concern: the newest state, with nothing to wait for; and a
    // cursor reads where its opening command read.
    if args == ReadConcernArgs::default() || spec.read_concern == ReadConcernUse::CursorOwn {
        return Ok(ReadDecision::default());
    }
    let at = topology.read_point(&args, deadline).await?;
    let level = args.effective_level();
    Ok(ReadDecision {
        point: ReadPoint {
            at,
            pinned: level == ReadConcernLevel::Snapshot,
        },
        linearizable: level == ReadConcernLevel::Linearizable,
    })
}

/// MongoDB's rule: every command takes `local` (or no level) and, but for
/// `getMore`, `afterClusterTime`; only reads at a read point take the other
/// levels, and `getMore`, which ignores them.
fn check_supported(spec: &CommandSpec, args: &ReadConcernArgs) -> Result<(), CommandError> {
    let level = args.effective_level();
    let any_level = match spec.read_concern {
        // getMore takes any level and reads at its cursor's (MongoDB's
        // getmore_cmd: drivers repeat a snapshot session's concern on it).
        ReadConcernUse::AnyLevel | ReadConcernUse::CursorOwn => true,
        ReadConcernUse::AnyLevelButSnapshot => level != ReadConcernLevel::Snapshot,
        ReadConcernUse::LocalOnly => false,
    };
    if !any_level && level != ReadConcernLevel::Local {
        return Err(CommandError::new(
            72,
            format!(
                "Command {} does not support {{ readConcern: {{ level: \"{}\" }} }} :: caused by :: read concern not supported",
                spec.name,
                level.as_str()
            ),
        ));
    }
    if spec.read_concern == ReadConcernUse::CursorOwn && args.after_cluster_time.is_some() {
        return Err(CommandError::new(
            72,
            "afterClusterTime is not allowed for this command",
        ));
    }
    Ok(())
}

/// The write concern of a command that takes one (the topology's default
/// where the command named no `w`), checked by the topology before the
/// command writes; `None` for a command that takes none.
pub fn decide_write(
    spec: &CommandSpec,
    access: CommandAccess,
    body: &Document,
    topology: &dyn Topology,
) -> Result<Option<WriteConcern>, CommandError> {
    let given = WriteConcern::parse(body)?;
    if !spec.takes_write_concern(access) {
        if given.is_some() {
            return Err(CommandError::new(72, "Command does not support writeConcern"));
        }
        return Ok(None);
    }
    let default = topology.default_write_concern();
    let concern = match given {
        // `{j: true}` alone keeps the default `w`.
        Some(concern) if concern.implicit => WriteConcern {
            w: default.w,
            ..concern
        },
        Some(concern) => concern,
        None => default,
    };
    topology.check_write_concern(&concern)?;
    Ok(Some(concern))
}

/// A failed write concern wait as the reply's `writeConcernError`:
/// `{code, codeName, errmsg, errInfo: {writeConcern, wtimeout?}}`.
pub fn write_concern_error(error: ReplError, concern: &WriteConcern) -> Document {
    let timed_out = matches!(error, ReplError::WriteConcernTimeout { .. });
    let error = CommandError::from(error);
    let mut info = doc! {"writeConcern": concern.to_document()};
    if timed_out {
        info.insert("wtimeout", true);
    }
    doc! {
        "code": error.code,
        "codeName": error.code_name().into_owned(),
        "errmsg": error.message,
        "errInfo": info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::find_command;
    use slipstream_repl::W;

    #[test]
    fn only_reads_take_levels_other_than_local() {
        let insert = find_command("insert", false).unwrap();
        let find = find_command("find", false).unwrap();
        let get_more = find_command("getMore", false).unwrap();
        let majority = ReadConcernArgs::parse(&doc! {"readConcern": {"level": "majority"}}).unwrap();
        assert!(check_supported(find, &majority).is_ok());
        assert_eq!(check_supported(insert, &majority).unwrap_err().code, 72);
        let causal = ReadConcernArgs::parse(
            &doc! {"readConcern": {"afterClusterTime": bson::Timestamp {time: 1, increment: 1}}},
        )
        .unwrap();
        assert!(
            check_supported(insert, &causal).is_ok(),
            "causal sessions send it on writes"
        );
        assert_eq!(check_supported(get_more, &causal).unwrap_err().code, 72);
    }

    #[test]
    fn write_concern_error_shape() {
        let concern = WriteConcern {
            w: W::Nodes(2),
            journal: None,
            wtimeout_ms: 100,
            implicit: false,
        };
        let error = write_concern_error(ReplError::WriteConcernTimeout { wtimeout_ms: 100 }, &concern);
        assert_eq!(error.get_i32("code").unwrap(), 64);
        assert_eq!(error.get_str("codeName").unwrap(), "WriteConcernFailed");
        let info = error.get_document("errInfo").unwrap();
        assert!(info.get_bool("wtimeout").unwrap());
        assert_eq!(info.get_document("writeConcern").unwrap().get_i32("w").unwrap(), 2);
        let stepped_down = write_concern_error(ReplError::PrimarySteppedDown, &concern);
        assert_eq!(stepped_down.get_i32("code").unwrap(), 189);
        assert!(!stepped_down.get_document("errInfo").unwrap().contains_key("wtimeout"));
    }
}
