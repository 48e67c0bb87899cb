//! (skeleton: the CRUD engineer replaces this file)

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;

fn not_yet(req: &CommandRequest) -> CommandResult {
    Err(CommandError::new(115, format!("command {} is not implemented yet", req.name)))
}

pub async fn find(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}

pub async fn get_more(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}

pub async fn kill_cursors(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}

pub async fn count(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}

pub async fn distinct(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}
