//! The replication commands (`replSetInitiate`, `replSetGetStatus`,
//! `replSetHeartbeat`, `appendOplogNote`, ...): the topology answers them,
//! since only it knows the set. A standalone answers NoReplicationEnabled
//! (76), as a `mongod` started without `--replSet` does.

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;

pub async fn replication_command(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    if req.db != "admin" {
        return Err(CommandError::new(
            13,
            format!("{} may only be run against the admin database.", req.name),
        ));
    }
    Ok(ctx.state.topology.run_command(&req.name, &req.body).await?)
}
