//! The command dispatch table and the types every command family shares.

use bson::Document;

use crate::error::CommandError;

/// One command as a handler sees it: the database (`$db`), the command
/// name (the first key of the body) and the body with every OP_MSG
/// document sequence merged in as an array field of the same name.
#[derive(Clone, Debug)]
pub struct CommandRequest {
    pub db: String,
    pub name: String,
    pub body: Document,
}

/// A successful reply body (without `ok`, which the dispatcher adds).
pub type CommandResult = Result<Document, CommandError>;
