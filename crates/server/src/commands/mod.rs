//! The command dispatch table and the types every command family shares.
//!
//! `dispatch` is the list of commands a node understands, one line each,
//! routed to the family file that implements them.

pub mod aggregate;
pub mod crud;
pub mod explain;
pub mod find;
pub mod indexes;

use std::sync::Arc;

use bson::Document;

use crate::error::CommandError;
use crate::state::ServerState;

/// One command as a handler sees it: the database (`$db`), the command
/// name (the first key of the body) and the body with every OP_MSG
/// document sequence merged in as an array field of the same name.
#[derive(Clone, Debug)]
pub struct CommandRequest {
    pub db: String,
    pub name: String,
    pub body: Document,
}

/// Who sent a command.
pub struct CommandContext {
    pub state: Arc<ServerState>,
    pub connection_id: i64,
    /// The client's address, `host:port`.
    pub client_address: String,
}

/// A successful reply body (without `ok`, which the dispatcher adds).
pub type CommandResult = Result<Document, CommandError>;

/// Routes one command to its handler. Command names are matched exactly,
/// except the historical lower-case aliases MongoDB accepts.
pub async fn dispatch(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    match req.name.as_str() {
        // CRUD (commands/crud.rs)
        "insert" => crud::insert(ctx, req).await,
        "update" => crud::update(ctx, req).await,
        "delete" => crud::delete(ctx, req).await,
        "findAndModify" | "findandmodify" => crud::find_and_modify(ctx, req).await,
        // Reads and cursors (commands/find.rs)
        "find" => find::find(ctx, req).await,
        "getMore" => find::get_more(ctx, req).await,
        "killCursors" => find::kill_cursors(ctx, req).await,
        "count" => find::count(ctx, req).await,
        "distinct" => find::distinct(ctx, req).await,
        // Aggregation (commands/aggregate.rs)
        "aggregate" => aggregate::aggregate(ctx, req).await,
        // Indexes (commands/indexes.rs)
        "createIndexes" => indexes::create_indexes(ctx, req).await,
        "listIndexes" => indexes::list_indexes(ctx, req).await,
        "dropIndexes" | "deleteIndexes" => indexes::drop_indexes(ctx, req).await,
        // Plans (commands/explain.rs)
        "explain" => explain::explain(ctx, req).await,
        _ => Err(CommandError::new(
            59,
            format!("no such command: '{}'", req.name),
        )),
    }
}
