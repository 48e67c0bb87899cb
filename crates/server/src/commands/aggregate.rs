//! (skeleton: the CRUD engineer replaces this file)

use super::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;

fn not_yet(req: &CommandRequest) -> CommandResult {
    Err(CommandError::new(115, format!("command {} is not implemented yet", req.name)))
}

pub async fn aggregate(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    not_yet(req)
}
