//! The command dispatch table and the types every command family shares.
//!
//! `dispatch` is the list of commands a node understands, one line each,
//! routed to the family file that implements them.

pub mod admin;
pub mod aggregate;
pub mod catalog;
pub mod crud;
pub mod explain;
pub mod find;
pub mod handshake;
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
    /// `client.application.name` from the connection's handshake (for
    /// fail points that target one application); owned by the connection.
    pub app_name: parking_lot::Mutex<Option<String>>,
}

/// A successful reply body (without `ok`, which the dispatcher adds).
pub type CommandResult = Result<Document, CommandError>;

/// Checks the generic arguments a standalone cannot honour before any
/// handler runs. Transactions and retryable-write transaction numbers
/// need a replica set: MongoDB's standalone refuses them with this same
/// error, and executing such a command without its transaction would give
/// the client wrong semantics.
pub fn check_generic_arguments(req: &CommandRequest) -> Result<(), CommandError> {
    for key in ["txnNumber", "startTransaction", "autocommit"] {
        if req.body.contains_key(key) {
            return Err(CommandError::new(20, "Transaction numbers are only allowed on a replica set member or mongos"));
        }
    }
    Ok(())
}

/// Routes one command to its handler. Command names are matched exactly,
/// except the historical lower-case aliases MongoDB accepts.
pub async fn dispatch(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    match req.name.as_str() {
        // Handshake (commands/handshake.rs)
        "hello" | "isMaster" | "ismaster" => handshake::hello(ctx, req).await,
        // Administration and diagnostics (commands/admin.rs)
        "ping" => admin::ping(ctx, req).await,
        "buildInfo" | "buildinfo" => admin::build_info(ctx, req).await,
        "getParameter" => admin::get_parameter(ctx, req).await,
        "getCmdLineOpts" => admin::get_cmd_line_opts(ctx, req).await,
        "hostInfo" => admin::host_info(ctx, req).await,
        "whatsmyuri" => admin::whats_my_uri(ctx, req).await,
        "connectionStatus" => admin::connection_status(ctx, req).await,
        "endSessions" | "killSessions" => admin::end_sessions(ctx, req).await,
        "shutdown" => admin::shutdown(ctx, req).await,
        "getLog" => admin::get_log(ctx, req).await,
        "configureFailPoint" if ctx.state.options.enable_test_commands => admin::configure_fail_point(ctx, req).await,
        "serverStatus" => admin::server_status(ctx, req).await,
        // Catalog (commands/catalog.rs)
        "listDatabases" => catalog::list_databases(ctx, req).await,
        "listCollections" => catalog::list_collections(ctx, req).await,
        "create" => catalog::create(ctx, req).await,
        "drop" => catalog::drop(ctx, req).await,
        "dropDatabase" => catalog::drop_database(ctx, req).await,
        "renameCollection" => catalog::rename_collection(ctx, req).await,
        "collStats" => catalog::coll_stats(ctx, req).await,
        "dbStats" => catalog::db_stats(ctx, req).await,
        "dbHash" | "dbhash" => catalog::db_hash(ctx, req).await,
        "validate" => catalog::validate(ctx, req).await,
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
