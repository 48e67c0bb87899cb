//! The command dispatch table and the types every command family shares.
//!
//! `COMMANDS` is the list of commands a node understands, one row each: the
//! name (and the historical spellings MongoDB also accepts), what the
//! command does to data (`CommandAccess`, which the topology checks before
//! the handler runs: a secondary refuses writes), which concern arguments
//! it takes, and the family file that implements it. `operation::execute`
//! runs a row; nothing else in the server decides by command name.

pub mod admin;
pub mod aggregate;
pub mod capped;
pub mod catalog;
pub mod collmod;
pub mod compact;
pub mod crud;
pub mod diagnostic_stages;
pub mod diagnostics;
pub mod engine_owned;
pub mod explain;
pub mod find;
pub mod fsync;
pub mod handshake;
pub mod indexes;
pub mod oplog_collection;
pub mod repl;
pub mod resize_oplog;
pub mod rw_defaults;

use std::sync::Arc;

use bson::Document;
use slipstream_repl::{BoxFuture, CommandAccess};
use slipstream_storage::OpTime;

use crate::error::CommandError;
use crate::exec::read_concern::ReadPoint;
use crate::sessions::{self, CommandSession, RetryableWrite};
use crate::state::ServerState;

/// One command as a handler sees it: the database (`$db`), the command
/// name (the first key of the body) and the body with every OP_MSG
/// document sequence merged in as an array field of the same name.
#[derive(Clone, Debug)]
pub struct CommandRequest {
    pub db: String,
    pub name: String,
    pub body: Document,
    /// The client lets a secondary answer: `$readPreference` with a mode
    /// other than `primary` (OP_MSG), or the secondaryOk flag (OP_QUERY).
    pub secondary_ok: bool,
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
    /// `slipstreamMember` from the handshake of another member's internal
    /// client: the member this connection comes from, so that the
    /// `blockMembers` fault hook can cut it off. Owned by the connection.
    pub member: parking_lot::Mutex<Option<String>>,
    /// A `hello` (or `isMaster`) already ran on this connection: only the
    /// first may carry the client metadata (`handshake.rs`).
    pub hello_seen: std::sync::atomic::AtomicBool,
    /// The command running on this connection (a connection runs one at a
    /// time): reset by `operation::execute` before each handler, read and
    /// updated by the handler.
    pub operation: parking_lot::Mutex<Operation>,
    /// The running command's session and retryable write, set by
    /// `sessions::begin` before the handler.
    pub session: parking_lot::Mutex<Option<CommandSession>>,
}

/// What a handler learns from, and tells, the code that runs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Operation {
    /// Where a read reads: the topology's answer to the read concern.
    pub read_point: ReadPoint,
    /// The OpTime of the command's last write, if it wrote: write concern
    /// waits for it and `operationTime` reports it.
    pub last_write: Option<OpTime>,
    /// The reply must prove it is linearizable (`linearizable_barrier`):
    /// the read concern's level, or the `getMore` of a cursor opened so.
    pub linearizable: bool,
}

impl CommandContext {
    pub fn new(state: Arc<ServerState>, connection_id: i64, client_address: String) -> Self {
        CommandContext {
            state,
            connection_id,
            client_address,
            app_name: parking_lot::Mutex::new(None),
            member: parking_lot::Mutex::new(None),
            hello_seen: std::sync::atomic::AtomicBool::new(false),
            operation: parking_lot::Mutex::new(Operation::default()),
            session: parking_lot::Mutex::new(None),
        }
    }

    /// The read point `operation::execute` chose for this command.
    pub fn read_point(&self) -> ReadPoint {
        self.operation.lock().read_point
    }

    /// The running command's retryable write, if it is one.
    pub fn retryable_write(&self) -> Option<Arc<RetryableWrite>> {
        self.session.lock().as_ref().and_then(|session| session.retryable_write.clone())
    }

    /// The running command's session (`{id, uid}`), if it has one.
    pub fn session_lsid(&self) -> Option<Document> {
        self.session.lock().as_ref().map(|session| session.lsid.clone())
    }

    /// Records a write of this command (the latest one counts).
    pub fn note_write(&self, op_time: Option<OpTime>) {
        let Some(op_time) = op_time else { return };
        let mut operation = self.operation.lock();
        operation.last_write = Some(operation.last_write.map_or(op_time, |last| last.max(op_time)));
    }
}

/// A successful reply body (without `ok`, which the dispatcher adds).
pub type CommandResult = Result<Document, CommandError>;

/// A command's implementation.
pub type Handler = for<'a> fn(&'a CommandContext, &'a CommandRequest) -> BoxFuture<'a, CommandResult>;

/// What a command does to data.
#[derive(Clone, Copy)]
pub enum Access {
    Fixed(CommandAccess),
    /// Decided by the body: an `aggregate` with `$out` writes.
    ByBody(fn(&Document) -> CommandAccess),
}

/// Which `readConcern` a command takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConcernUse {
    /// Reads at the read point every level gives (find, aggregate,
    /// distinct).
    AnyLevel,
    /// Every level but `snapshot`, which MongoDB's `count` refuses ("read
    /// concern snapshot not supported", 72).
    AnyLevelButSnapshot,
    /// MongoDB's default for other commands: only `local` (or no level);
    /// `afterClusterTime` is waited for (causal sessions send it on writes).
    LocalOnly,
    /// Continues a cursor, which keeps its own read point: only `local`,
    /// and no `afterClusterTime` (getMore).
    CursorOwn,
}

/// Whether a command takes `writeConcern`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConcernUse {
    /// Refused with InvalidOptions (72), as MongoDB refuses it.
    None,
    /// When this run writes (its access is `Write`).
    WhenWriting,
    /// Always (replication commands that write an oplog note).
    Always,
}

/// One row of the dispatch table.
pub struct CommandSpec {
    pub name: &'static str,
    /// Other spellings MongoDB accepts for the same command.
    pub aliases: &'static [&'static str],
    pub access: Access,
    pub read_concern: ReadConcernUse,
    pub write_concern: WriteConcernUse,
    /// A retryable write: `txnNumber` is accepted (on a replica set).
    pub retryable_write: bool,
    /// Exists only with `--enable-test-commands`.
    pub test_only: bool,
    /// Runs without authentication in MongoDB (`requiresAuth() == false`),
    /// so it takes no transaction fields (`session::check`).
    pub without_authentication: bool,
    pub handler: Handler,
}

impl CommandSpec {
    const fn new(name: &'static str, access: CommandAccess, handler: Handler) -> Self {
        CommandSpec {
            name,
            aliases: &[],
            access: Access::Fixed(access),
            read_concern: ReadConcernUse::LocalOnly,
            write_concern: match access {
                CommandAccess::Write => WriteConcernUse::WhenWriting,
                CommandAccess::Read | CommandAccess::Always => WriteConcernUse::None,
            },
            retryable_write: false,
            test_only: false,
            without_authentication: false,
            handler,
        }
    }

    const fn without_authentication(self) -> Self {
        CommandSpec { without_authentication: true, ..self }
    }

    const fn aliases(self, aliases: &'static [&'static str]) -> Self {
        CommandSpec { aliases, ..self }
    }

    /// Reads at a read point: every read concern level.
    const fn at_read_point(self) -> Self {
        CommandSpec { read_concern: ReadConcernUse::AnyLevel, ..self }
    }

    const fn at_read_point_but_snapshot(self) -> Self {
        CommandSpec { read_concern: ReadConcernUse::AnyLevelButSnapshot, ..self }
    }

    const fn access_by(self, access: fn(&Document) -> CommandAccess) -> Self {
        CommandSpec { access: Access::ByBody(access), ..self }
    }

    const fn write_concern(self, write_concern: WriteConcernUse) -> Self {
        CommandSpec { write_concern, ..self }
    }

    const fn retryable(self) -> Self {
        CommandSpec { retryable_write: true, ..self }
    }

    const fn continues_cursor(self) -> Self {
        CommandSpec { read_concern: ReadConcernUse::CursorOwn, ..self }
    }

    const fn test_only(self) -> Self {
        CommandSpec { test_only: true, ..self }
    }

    /// What this run of the command does to data.
    pub fn access_of(&self, body: &Document) -> CommandAccess {
        match self.access {
            Access::Fixed(access) => access,
            Access::ByBody(access) => access(body),
        }
    }

    /// Whether this run takes a write concern.
    pub fn takes_write_concern(&self, access: CommandAccess) -> bool {
        match self.write_concern {
            WriteConcernUse::None => false,
            WriteConcernUse::WhenWriting => access == CommandAccess::Write,
            WriteConcernUse::Always => true,
        }
    }

    fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.contains(&name)
    }
}

/// Boxes an `async fn(&CommandContext, &CommandRequest) -> CommandResult`
/// into a table entry.
macro_rules! handler {
    ($function:path) => {{
        fn run<'a>(ctx: &'a CommandContext, req: &'a CommandRequest) -> BoxFuture<'a, CommandResult> {
            Box::pin($function(ctx, req))
        }
        run as Handler
    }};
}

const fn always(name: &'static str, handler: Handler) -> CommandSpec {
    CommandSpec::new(name, CommandAccess::Always, handler)
}

const fn reads(name: &'static str, handler: Handler) -> CommandSpec {
    CommandSpec::new(name, CommandAccess::Read, handler)
}

const fn writes(name: &'static str, handler: Handler) -> CommandSpec {
    CommandSpec::new(name, CommandAccess::Write, handler)
}

/// A replication command: answered by the topology (NoReplicationEnabled
/// on a standalone).
const fn replication(name: &'static str) -> CommandSpec {
    always(name, handler!(repl::replication_command))
}

/// Every command a node understands. Command names are matched exactly,
/// except the historical spellings MongoDB also accepts.
pub static COMMANDS: &[CommandSpec] = &[
    // Handshake (commands/handshake.rs)
    always("hello", handler!(handshake::hello)).aliases(&["isMaster", "ismaster"]).without_authentication(),
    // Administration and diagnostics (commands/admin.rs)
    always("ping", handler!(admin::ping)).without_authentication(),
    always("buildInfo", handler!(admin::build_info)).aliases(&["buildinfo"]).without_authentication(),
    always("getParameter", handler!(diagnostics::get_parameter)),
    always("setParameter", handler!(diagnostics::set_parameter)),
    always("listCommands", handler!(diagnostics::list_commands)),
    // Sizes and counts MongoDB answers on any member, secondaryOk or not.
    always("dataSize", handler!(diagnostics::data_size)).aliases(&["datasize"]),
    always("currentOp", handler!(diagnostics::current_op)),
    always("killOp", handler!(diagnostics::kill_op)),
    always("profile", handler!(diagnostics::profile)),
    always("getCmdLineOpts", handler!(admin::get_cmd_line_opts)),
    always("hostInfo", handler!(admin::host_info)),
    always("whatsmyuri", handler!(admin::whats_my_uri)),
    always("connectionStatus", handler!(admin::connection_status)),
    // Sessions (sessions/commands.rs)
    always("startSession", handler!(sessions::commands::start_session)),
    always("refreshSessions", handler!(sessions::commands::refresh_sessions)),
    always("endSessions", handler!(sessions::commands::end_sessions)),
    always("killSessions", handler!(sessions::commands::kill_sessions)),
    always("killAllSessions", handler!(sessions::kill_all::kill_all_sessions)),
    always("killAllSessionsByPattern", handler!(sessions::kill_all::kill_all_sessions_by_pattern)),
    always("commitTransaction", handler!(sessions::commands::end_transaction)),
    always("abortTransaction", handler!(sessions::commands::end_transaction)),
    // Cluster-wide default concerns (commands/rw_defaults.rs)
    always("getDefaultRWConcern", handler!(rw_defaults::get_default_rw_concern)),
    writes("setDefaultRWConcern", handler!(rw_defaults::set_default_rw_concern)),
    always("shutdown", handler!(admin::shutdown)),
    always("getLog", handler!(admin::get_log)),
    always("serverStatus", handler!(admin::server_status)),
    always("configureFailPoint", handler!(admin::configure_fail_point)).test_only(),
    // Catalog (commands/catalog.rs)
    reads("listDatabases", handler!(catalog::list_databases)),
    reads("listCollections", handler!(catalog::list_collections)),
    writes("create", handler!(catalog::create)),
    writes("drop", handler!(catalog::drop)),
    writes("dropDatabase", handler!(catalog::drop_database)),
    writes("renameCollection", handler!(catalog::rename_collection)),
    writes("cloneCollectionAsCapped", handler!(capped::clone_collection_as_capped)),
    writes("convertToCapped", handler!(capped::convert_to_capped)),
    always("collStats", handler!(catalog::coll_stats)),
    always("dbStats", handler!(catalog::db_stats)).aliases(&["dbstats"]),
    always("dbHash", handler!(catalog::db_hash)).aliases(&["dbhash"]),
    always("validate", handler!(catalog::validate)),
    // Free space of the checkpoint file (commands/compact.rs): any member
    always("compact", handler!(compact::compact)),
    // Durability of everything written so far (commands/fsync.rs)
    always("fsync", handler!(fsync::fsync)),
    always("fsyncUnlock", handler!(fsync::fsync_unlock)),
    // CRUD (commands/crud.rs)
    writes("insert", handler!(crud::insert)).retryable(),
    writes("update", handler!(crud::update)).retryable(),
    writes("delete", handler!(crud::delete)).retryable(),
    writes("findAndModify", handler!(crud::find_and_modify)).aliases(&["findandmodify"]).retryable(),
    // Reads and cursors (commands/find.rs)
    reads("find", handler!(find::find)).at_read_point(),
    always("getMore", handler!(find::get_more)).continues_cursor(),
    always("killCursors", handler!(find::kill_cursors)),
    reads("count", handler!(find::count)).at_read_point_but_snapshot(),
    reads("distinct", handler!(find::distinct)).at_read_point(),
    // Aggregation (commands/aggregate.rs): `$out` / `$merge` write
    reads("aggregate", handler!(aggregate::aggregate))
        .at_read_point()
        .access_by(aggregate::access)
        .write_concern(WriteConcernUse::WhenWriting),
    // Indexes (commands/indexes.rs)
    writes("createIndexes", handler!(indexes::create_indexes)),
    reads("listIndexes", handler!(indexes::list_indexes)),
    writes("dropIndexes", handler!(indexes::drop_indexes)).aliases(&["deleteIndexes"]),
    // Options after creation (commands/collmod.rs)
    writes("collMod", handler!(collmod::coll_mod)),
    // Plans (commands/explain.rs): explaining a write is a write, but
    // writes nothing
    reads("explain", handler!(explain::explain)).access_by(explain::access),
    // Replication (commands/repl.rs, answered by the topology)
    replication("replSetInitiate"),
    replication("replSetGetConfig"),
    replication("replSetReconfig"),
    replication("replSetGetStatus"),
    replication("replSetStepDown"),
    replication("replSetStepUp"),
    replication("replSetFreeze"),
    replication("replSetSyncFrom"),
    replication("replSetMaintenance"),
    replication("replSetGetRBID"),
    replication("replSetHeartbeat"),
    replication("replSetRequestVotes"),
    replication("replSetUpdatePosition"),
    replication("replSetInitialSyncHold"),
    replication("replSetCheckpointCopy"),
    replication("appendOplogNote").write_concern(WriteConcernUse::Always),
    // The oplog's cap and retention (commands/resize_oplog.rs)
    always("replSetResizeOplog", handler!(resize_oplog::resize_oplog)),
];

/// The table row of a command name, if this node runs it.
pub fn find_command(name: &str, test_commands: bool) -> Option<&'static CommandSpec> {
    COMMANDS
        .iter()
        .find(|spec| spec.answers_to(name))
        .filter(|spec| test_commands || !spec.test_only)
}

/// What `name` with this body does to data (Read for an unknown command,
/// which fails later anyway): for `explain` of another command.
pub fn access_of(name: &str, body: &Document) -> CommandAccess {
    find_command(name, true).map_or(CommandAccess::Read, |spec| spec.access_of(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn every_name_has_one_row() {
        let mut names: Vec<&str> = COMMANDS.iter().flat_map(|spec| std::iter::once(spec.name).chain(spec.aliases.iter().copied())).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a name appears twice in COMMANDS");
    }

    #[test]
    fn lookup_by_name_and_alias() {
        assert_eq!(find_command("ismaster", false).unwrap().name, "hello");
        assert_eq!(find_command("findandmodify", false).unwrap().name, "findAndModify");
        assert!(find_command("configureFailPoint", false).is_none());
        assert!(find_command("configureFailPoint", true).is_some());
        assert!(find_command("Find", false).is_none());
    }

    #[test]
    fn access_depends_on_the_body_where_it_must() {
        let aggregate = find_command("aggregate", false).unwrap();
        assert_eq!(aggregate.access_of(&doc! {"aggregate": "c", "pipeline": []}), CommandAccess::Read);
        let out = doc! {"aggregate": "c", "pipeline": [{"$match": {}}, {"$out": "d"}]};
        assert_eq!(aggregate.access_of(&out), CommandAccess::Write);
        assert!(aggregate.takes_write_concern(CommandAccess::Write));
        assert!(!aggregate.takes_write_concern(CommandAccess::Read));
        let explain = find_command("explain", false).unwrap();
        assert_eq!(explain.access_of(&doc! {"explain": {"insert": "c", "documents": []}}), CommandAccess::Write);
        assert_eq!(explain.access_of(&doc! {"explain": {"find": "c"}}), CommandAccess::Read);
        assert_eq!(explain.access_of(&doc! {"explain": out.clone()}), CommandAccess::Read);
        assert!(!explain.takes_write_concern(CommandAccess::Write));
        assert_eq!(access_of("insert", &doc! {}), CommandAccess::Write);
        assert_eq!(access_of("replSetGetStatus", &doc! {}), CommandAccess::Always);
    }
}
