//! One command's run, in MongoDB's order:
//!
//! 1. find the command's table row (unknown: CommandNotFound, 59), and
//!    check the generic arguments (Stable API parameters, `maxTimeMS`);
//! 2. pass a received `$clusterTime` to the topology (gossip);
//! 3. check the session arguments (`txnNumber`, transactions);
//! 4. test-only fail points (`failCommand`, `maxTimeAlwaysTimeOut`);
//! 5. check the command's access against the topology (a secondary
//!    refuses writes, and reads without secondaryOk); a write waits while
//!    storage memory is far past its bound (`flow_control`);
//! 6. decide the read concern (the topology's read point, which may wait)
//!    and the write concern (refused now if it cannot be satisfied); then
//!    check out the command's session and, for a retryable write, load its
//!    history (`sessions::begin`);
//! 7. run the handler, its panics caught;
//! 8. wait for the write concern at the command's last write;
//! 9. prove a `linearizable` read (`linearizable_barrier`) before replying;
//! 10. add the reply's labels and, on a replica set member, its metadata
//!     (`operationTime`, `$clusterTime`, and the oplog fetcher's
//!     `$replData` / `$oplogQueryData`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};
use serde_json::json;
use slipstream_repl::{CommandAccess, ReplError, Topology, WriteConcern};
use slipstream_storage::{bson_timestamp, from_bson_timestamp, OpTime};

use crate::commands::{find_command, CommandContext, CommandRequest, CommandSpec, Operation, ReadConcernUse};
use crate::concern;
use crate::error::{is_not_primary_error, retryable_write_labels, CommandError};
use crate::metrics::SELF_COUNTING_COMMANDS;
use crate::session::{self, SessionArguments};
use crate::sessions;

/// Bytes of the (unsigned) `$clusterTime.signature.hash`.
const CLUSTER_TIME_SIGNATURE_BYTES: usize = 20;
/// How many times one command reads at a fresh majority point after a
/// checkpoint passed the one it had (each retry takes the newest commit
/// point, which no checkpoint has passed; more than one retry means the
/// commit point and checkpoints raced past it again).
const MAJORITY_READ_ATTEMPTS_MAX: u32 = 5;
/// `SnapshotTooOld`.
const SNAPSHOT_TOO_OLD: i32 = 239;

/// Runs one command and forms its reply document: the handler's fields plus
/// `ok: 1`, or the error fields. `None` means the connection is to be
/// closed without a reply (test fail point).
pub async fn execute(ctx: &CommandContext, request: &CommandRequest) -> Option<Document> {
    if !SELF_COUNTING_COMMANDS.contains(&request.name.as_str()) {
        ctx.state.metrics.count_command();
    }
    note_handshake(ctx, request);
    *ctx.operation.lock() = Operation::default();
    let session = SessionArguments::of(&request.body);
    let retryable_write = session.as_ref().is_ok_and(SessionArguments::is_retryable_write);
    let registered = register_operation(ctx, request);
    let started = Instant::now();
    let ran = crate::operations::InOperation {
        operation: registered.as_ref().map(|registered| registered.operation.clone()),
        inner: Box::pin(run(ctx, request, session)),
    };
    let mut reply = match &registered {
        // A killOp ends the run wherever it waits (see `operations`).
        Some(registered) => tokio::select! {
            reply = ran => reply?,
            _ = registered.operation.killed() => crate::operations::interrupted().to_reply(),
        },
        None => ran.await?,
    };
    drop(registered);
    crate::profiler::after_command(ctx, request, &reply, started.elapsed());
    if retryable_write && !reply.contains_key("errorLabels") {
        add_retryable_write_label(&mut reply);
    }
    add_topology_version(ctx, &mut reply);
    add_replication_metadata(ctx, request, &mut reply);
    Some(reply)
}

/// Steps 1 to 9; `None` closes the connection.
async fn run(
    ctx: &CommandContext,
    request: &CommandRequest,
    session: Result<SessionArguments, CommandError>,
) -> Option<Document> {
    let state = &ctx.state;
    let topology: &dyn Topology = state.topology.as_ref();
    let Some(spec) = find_command(&request.name, state.options.enable_test_commands) else {
        return Some(CommandError::new(59, format!("no such command: '{}'", request.name)).to_reply());
    };
    if let Err(error) = check_generic_arguments(ctx, request) {
        return Some(error.to_reply());
    }
    if let Err(error) = observe_cluster_time(topology, &request.body) {
        return Some(error.to_reply());
    }
    let session =
        match session.and_then(|session| session::check(spec, &session, topology.is_replica_set()).map(|()| session)) {
            Ok(session) => session,
            Err(error) => return Some(error.to_reply()),
        };
    let mut injected_write_concern_error = None;
    if state.options.enable_test_commands {
        let app_name = ctx.app_name.lock().clone();
        if let Some(action) = state.fail_points.check(&request.name, app_name.as_deref()) {
            if let Some(ms) = action.block_ms {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if action.close_connection {
                return None;
            }
            if let Some(reply) = action.error_reply {
                return Some(reply);
            }
            injected_write_concern_error = action.write_concern_error;
        }
        if let Some(reply) = state.fail_points.check_max_time(&request.body) {
            return Some(reply);
        }
    }
    let access = spec.access_of(&request.body);
    // The member's own collections of `local` (the oplog, its replication
    // state) are refused further on, with MongoDB's IllegalOperation.
    let own_local = || match request.body.values().next() {
        Some(Bson::String(collection)) => {
            collection == "oplog.rs" || state.engine.collection_info(&format!("local.{collection}")).is_some()
        }
        _ => false,
    };
    let local_write = access == CommandAccess::Write && request.db == "local" && request.name != "dropDatabase";
    if local_write && topology.is_replica_set() && !own_local() {
        // MongoDB lets every member write its own unreplicated `local`;
        // Slipstream keeps only its replication state there. One clear
        // refusal on every member: a secondary's "not primary" made
        // drivers rediscover the set and retry on the primary.
        return Some(
            CommandError::new(
                115,
                "writes to the local database of a replica set member are not supported by Slipstream: it holds \
                 only the member's own replication state (MongoDB keeps unreplicated collections there)",
            )
            .to_reply(),
        );
    }
    // A cursor's continuation reads: not on a member that cannot serve
    // reads (RECOVERING, ROLLBACK: 13436), whatever the cursor's opening
    // allowed, as MongoDB's getMore checks `checkCanServeReadsFor` with
    // secondaryOk. The member's own `local` stays readable in any state.
    let (access, secondary_ok) = match spec.read_concern {
        ReadConcernUse::CursorOwn => (CommandAccess::Read, true),
        _ => (access, request.secondary_ok),
    };
    if let Err(error) = topology.check_access(access, &request.db, secondary_ok) {
        if hands_on_to_primary(ctx, request, access, &error) {
            return Some(run_on_primary(ctx, request).await);
        }
        return Some(CommandError::from(error).to_reply());
    }
    let deadline = max_time_deadline(&request.body);
    if access == CommandAccess::Write {
        if let Err(error) = crate::commands::engine_owned::check(&state.engine, request) {
            return Some(error.to_reply());
        }
        state.flow_control.admit(&state.engine, deadline).await;
    }
    let read = match concern::decide_read(spec, &request.body, topology, deadline).await {
        Ok(read) => read,
        Err(error) => return Some(error.to_reply()),
    };
    let write_concern = match concern::decide_write(spec, access, &request.body, topology) {
        Ok(write_concern) => write_concern,
        Err(error) => return Some(error.to_reply()),
    };
    let checked_out = match sessions::begin(ctx, spec, &request.body, &session, deadline).await {
        Ok(checked_out) => checked_out,
        Err(error) => return Some(error.to_reply()),
    };
    {
        let mut operation = ctx.operation.lock();
        operation.read_point = read.point;
        operation.linearizable = read.linearizable;
    }
    let mut outcome = run_handler(ctx, spec, request).await;
    let mut attempts = 1;
    while attempts < MAJORITY_READ_ATTEMPTS_MAX && majority_point_passed(ctx, read.point, &outcome) {
        // A `majority` read asks for the newest committed state, not for
        // the timestamp it happened to choose: the commit point moved on
        // and a checkpoint followed it before the read opened its snapshot.
        // Nothing was read or written yet, so the read runs again at the
        // commit point as it is now.
        attempts += 1;
        match concern::decide_read(spec, &request.body, topology, deadline).await {
            Ok(again) => {
                ctx.operation.lock().read_point = again.point;
                outcome = run_handler(ctx, spec, request).await;
            }
            Err(error) => outcome = Err(error),
        }
    }
    let retryable_write = ctx.session.lock().take().and_then(|session| session.retryable_write);
    // Checked in before the write concern wait, as MongoDB's checkout ends
    // with the command's own run: a retry of this write, or the session's
    // next command, does not wait behind the concern.
    drop(checked_out);
    if retryable_write.is_some_and(|write| write.close_connection_requested()) {
        return None;
    }
    let write_concern_error = match (injected_write_concern_error, &write_concern) {
        (Some(injected), _) => Some(injected),
        (None, Some(concern)) if !concern.is_unacknowledged() => {
            let last_write = ctx
                .operation
                .lock()
                .last_write
                .unwrap_or_else(|| topology.last_applied());
            let waited = wait_for_write_concern_until(topology, last_write, concern, deadline).await;
            waited.err().map(|error| concern::write_concern_error(error, concern))
        }
        (None, _) => None,
    };
    // The read concern's, or the cursor's a `getMore` continued.
    let linearizable = ctx.operation.lock().linearizable;
    if linearizable && outcome.is_ok() {
        if let Err(error) = topology.linearizable_barrier(deadline).await {
            outcome = Err(error.into());
        }
    }
    let mut reply = match outcome {
        Ok(reply) => reply,
        Err(error) => error.to_reply(),
    };
    if let Some(error) = write_concern_error {
        reply.insert("writeConcernError", error);
    }
    if !reply.contains_key("ok") {
        reply.insert("ok", 1.0);
    }
    Some(reply)
}

/// True when the command failed with `SnapshotTooOld` at a `majority` read
/// point (a chosen timestamp the cursor does not pin; `snapshot` reads are
/// pinned and keep their answer) and wrote nothing.
fn majority_point_passed(
    ctx: &CommandContext,
    point: crate::exec::read_concern::ReadPoint,
    outcome: &Result<Document, CommandError>,
) -> bool {
    point.follows_commit_point()
        && matches!(outcome, Err(error) if error.code == SNAPSHOT_TOO_OLD)
        && ctx.operation.lock().last_write.is_none()
}

/// Registers the command with the node's running operations (for
/// `currentOp` and `killOp`).
fn register_operation<'a>(
    ctx: &'a CommandContext,
    request: &CommandRequest,
) -> Option<crate::operations::Registered<'a>> {
    ctx.state.operations.register(crate::operations::NewOperation {
        connection_id: ctx.connection_id,
        client: &ctx.client_address,
        app_name: ctx.app_name.lock().clone(),
        command_name: &request.name,
        ns: operation_namespace(request),
        command: &request.body,
    })
}

/// The namespace `currentOp` and the profiler show: the collection of a
/// command that names one, else `<db>.$cmd`, as MongoDB shows them.
pub fn operation_namespace(request: &CommandRequest) -> String {
    const ON_COLLECTION: &[&str] = &[
        "find", "insert", "update", "delete", "findAndModify", "findandmodify", "aggregate", "count", "distinct",
        "create", "drop", "collStats", "listIndexes", "createIndexes", "dropIndexes", "deleteIndexes", "validate",
        "killCursors",
    ];
    let collection = match request.name.as_str() {
        "getMore" => request.body.get_str("collection").ok(),
        name if ON_COLLECTION.contains(&name) => request.body.get_str(name).ok(),
        _ => None,
    };
    format!("{}.{}", request.db, collection.unwrap_or("$cmd"))
}

/// Remembers what a handshake (`hello` / `isMaster`) says about the
/// client: its application name, and the member an internal client comes
/// from (`slipstreamMember`).
fn note_handshake(ctx: &CommandContext, request: &CommandRequest) {
    if !matches!(request.name.as_str(), "hello" | "isMaster" | "ismaster") {
        return;
    }
    let name = request
        .body
        .get_document("client")
        .and_then(|client| client.get_document("application"))
        .and_then(|application| application.get_str("name"));
    if let Ok(name) = name {
        // The first handshake's: the metadata cannot change afterwards.
        ctx.app_name.lock().get_or_insert_with(|| name.to_owned());
    }
    if let Ok(member) = request.body.get_str("slipstreamMember") {
        *ctx.member.lock() = Some(member.to_owned());
    }
}

/// `Topology::wait_for_write_concern` under the command's `maxTimeMS`
/// deadline, as MongoDB waits with the operation's deadline: past it,
/// MaxTimeMSExpired (the reply's `writeConcernError`, or a command's own
/// error for a `commitQuorum`).
pub(crate) async fn wait_for_write_concern_until(
    topology: &dyn Topology,
    last_write: OpTime,
    concern: &WriteConcern,
    deadline: Option<Instant>,
) -> Result<(), ReplError> {
    let wait = topology.wait_for_write_concern(last_write, concern);
    match deadline {
        None => wait.await,
        Some(deadline) => tokio::time::timeout_at(deadline.into(), wait)
            .await
            .unwrap_or(Err(ReplError::MaxTimeMsExpired)),
    }
}

/// The deadline `maxTimeMS` sets for waits before and after the handler
/// (a read point, a linearizable read, the write concern) and for a
/// handler's own waits (a streaming hello, a commit quorum). The handlers check the argument
/// itself; a malformed one only sets no deadline here.
pub(crate) fn max_time_deadline(body: &Document) -> Option<Instant> {
    let ms = match body.get("maxTimeMS")? {
        Bson::Int32(ms) => i64::from(*ms),
        Bson::Int64(ms) => *ms,
        Bson::Double(ms) if ms.fract() == 0.0 => *ms as i64,
        _ => return None,
    };
    (ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64))
}

/// How long a secondary waits for the primary to answer a command it handed
/// on (`run_on_primary`) without a `maxTimeMS`, and the margin it adds to one.
const ON_PRIMARY_TIMEOUT: Duration = Duration::from_secs(3600);
const ON_PRIMARY_MARGIN: Duration = Duration::from_secs(5);

/// Whether a secondary hands the command on to its primary instead of
/// refusing it: an `aggregate` with `$out` or `$merge` (a write) whose read
/// preference allows a secondary. MongoDB 5.0+ runs those on the secondary
/// and writes through the primary; this secondary hands the whole command
/// on, so its read part runs on the primary too (at least as fresh as any
/// secondary's, which every read preference allows). Never a command that
/// came from another member's internal client: what was handed on once is
/// not handed on again, so two members with stale views of who is primary
/// cannot pass a command back and forth.
fn hands_on_to_primary(
    ctx: &CommandContext,
    request: &CommandRequest,
    access: CommandAccess,
    error: &ReplError,
) -> bool {
    access == CommandAccess::Write
        && request.name == "aggregate"
        && request.secondary_ok
        && matches!(error, ReplError::NotWritablePrimary)
        && ctx.member.lock().is_none()
}

/// Runs the request on the primary and answers with its reply (its errors
/// included). The reply's operation time becomes this command's, so that
/// a causally consistent session reads its own output afterwards.
async fn run_on_primary(ctx: &CommandContext, request: &CommandRequest) -> Document {
    let topology: &dyn Topology = ctx.state.topology.as_ref();
    // The internal client sets `$db` itself.
    let body = request.body.clone();
    let deadline = max_time_deadline(&request.body);
    let timeout = deadline.map_or(ON_PRIMARY_TIMEOUT, |deadline| {
        deadline.saturating_duration_since(Instant::now()) + ON_PRIMARY_MARGIN
    });
    let handed_on = topology.run_on_primary(&request.db, body, timeout);
    // The client's maxTimeMS bounds the wait for a primary that does not
    // answer (it failed only at the network's own bound, 6 HostUnreachable).
    let outcome = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline.into(), handed_on).await {
            Ok(outcome) => outcome,
            Err(_) => return CommandError::new(50, "operation exceeded time limit").to_reply(),
        },
        None => handed_on.await,
    };
    match outcome {
        Ok(reply) => {
            // The primary's cluster time, to pass on in this reply.
            let _ = observe_cluster_time(topology, &reply);
            if let Some(Bson::Timestamp(ts)) = reply.get("operationTime") {
                let term = topology.last_applied().term;
                ctx.note_write(Some(OpTime { term, ts: from_bson_timestamp(*ts) }));
            }
            reply
        }
        Err(error) => CommandError::from(error).to_reply(),
    }
}

/// The generic arguments every command is checked for before anything
/// else is done with it: the Stable API parameters, and `maxTimeMS`.
fn check_generic_arguments(ctx: &CommandContext, request: &CommandRequest) -> Result<(), CommandError> {
    // Other members' internal clients are exempt, as MongoDB exempts
    // internal clients.
    let required = ctx.state.parameters.require_api_version() && ctx.member.lock().is_none();
    crate::api_version::check(&request.name, &request.body, required)?;
    crate::exec::args::get_max_time_ms(&request.body, &request.name)?;
    Ok(())
}

/// A received `$clusterTime` (a client's or another member's gossip). A
/// standalone keeps no cluster time and ignores it, as MongoDB's does.
fn observe_cluster_time(topology: &dyn Topology, body: &Document) -> Result<(), CommandError> {
    let Some(value) = body.get("$clusterTime").filter(|_| topology.is_replica_set()) else {
        return Ok(());
    };
    let cluster_time = match value {
        Bson::Document(gossip) => match gossip.get("clusterTime") {
            Some(Bson::Timestamp(ts)) => from_bson_timestamp(*ts),
            _ => return Err(CommandError::bad_value("$clusterTime.clusterTime must be a timestamp")),
        },
        _ => return Err(CommandError::type_mismatch("$clusterTime must be an object")),
    };
    Ok(topology.observe_cluster_time(cluster_time)?)
}

/// A reply's error code (when it failed) and its write concern error's.
fn error_codes(reply: &Document) -> (Option<i32>, Option<i32>) {
    let failed = reply.get_f64("ok").ok() != Some(1.0);
    let error_code = if failed { reply.get_i32("code").ok() } else { None };
    let write_concern_code = reply
        .get_document("writeConcernError")
        .ok()
        .and_then(|error| error.get_i32("code").ok());
    (error_code, write_concern_code)
}

/// `RetryableWriteError` on a retryable write's reply whose error or write
/// concern error has a retryable code (a fail point's own `errorLabels`
/// stand instead).
fn add_retryable_write_label(reply: &mut Document) {
    let (error_code, write_concern_code) = error_codes(reply);
    if let Some(labels) = retryable_write_labels(error_code, write_concern_code) {
        reply.insert("errorLabels", labels);
    }
}

/// `topologyVersion` on a reply whose error or write concern error says the
/// member is not (or no longer) primary or secondary, as MongoDB 4.4+ adds
/// it: a driver compares it with the version its monitor last saw and
/// ignores the error as stale when it is not newer, instead of marking the
/// member Unknown until the next `hello` (which, streaming, may wait its
/// full `maxAwaitTimeMS` when nothing changes). Left off while the
/// published state still says writable primary (a stepdown's write gate
/// closes before its new state is out): the driver must not take that
/// error for stale.
fn add_topology_version(ctx: &CommandContext, reply: &mut Document) {
    let (error_code, write_concern_code) = error_codes(reply);
    if [error_code, write_concern_code].into_iter().flatten().any(is_not_primary_error) {
        if let Some(counter) = ctx.state.topology.not_primary_topology_counter() {
            reply.insert("topologyVersion", crate::commands::handshake::topology_version(&ctx.state, counter));
        }
    }
}

/// A replica set member's reply metadata: `operationTime` (the command's
/// last write, else the last applied entry) and `$clusterTime` (unsigned:
/// a zero hash and key id), on every reply, errors too; and on an oplog
/// fetcher's `find` / `getMore` that asks for them, `$replData` and
/// `$oplogQueryData`.
fn add_replication_metadata(ctx: &CommandContext, request: &CommandRequest, reply: &mut Document) {
    let topology = &ctx.state.topology;
    if !topology.is_replica_set() {
        return;
    }
    let operation_time = ctx
        .operation
        .lock()
        .last_write
        .unwrap_or_else(|| topology.last_applied())
        .ts;
    reply.insert("operationTime", bson_timestamp(operation_time));
    let signature = Binary {
        subtype: BinarySubtype::Generic,
        bytes: vec![0; CLUSTER_TIME_SIGNATURE_BYTES],
    };
    reply.insert(
        "$clusterTime",
        doc! {
            "clusterTime": bson_timestamp(topology.cluster_time()),
            "signature": {"hash": signature, "keyId": 0_i64},
        },
    );
    if is_oplog_fetch(request) {
        if let Some(metadata) = topology.oplog_query_metadata() {
            for (key, value) in metadata {
                reply.insert(key, value);
            }
        }
    }
}

/// A `find` or `getMore` on `local.oplog.rs` carrying `$replData` or
/// `$oplogQueryData` (another member's oplog fetcher).
fn is_oplog_fetch(request: &CommandRequest) -> bool {
    if request.db != "local"
        || !(request.body.contains_key("$replData") || request.body.contains_key("$oplogQueryData"))
    {
        return false;
    }
    let collection = match request.name.as_str() {
        "find" => request.body.get_str("find"),
        "getMore" => request.body.get_str("collection"),
        _ => return false,
    };
    collection.is_ok_and(|collection| collection == "oplog.rs")
}

async fn run_handler(
    ctx: &CommandContext,
    spec: &CommandSpec,
    request: &CommandRequest,
) -> Result<Document, CommandError> {
    match (CatchUnwind {
        inner: (spec.handler)(ctx, request),
    })
    .await
    {
        Ok(outcome) => outcome,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            ctx.state.log.error(
                "COMMAND",
                4915702,
                &format!("conn{}", ctx.connection_id),
                "command panicked",
                json!({"command": request.name, "db": request.db, "panic": message}),
            );
            Err(CommandError::internal(format!(
                "command {} failed with an internal error: {message}",
                request.name
            )))
        }
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "unknown panic".into()
    }
}

/// A future adapter that turns a panic while polling into an `Err`, so a
/// command's panic is answered instead of killing the connection task.
struct CatchUnwind<F> {
    inner: F,
}

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = Pin::new(&mut self.inner);
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(value)) => Poll::Ready(Ok(value)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catch_unwind_turns_a_panic_into_an_error() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let result = runtime.block_on(CatchUnwind {
            inner: Box::pin(async { panic!("boom") }),
        });
        let panic: Box<dyn std::any::Any + Send> = result.unwrap_err();
        assert_eq!(panic_message(panic.as_ref()), "boom");
    }

    #[test]
    fn oplog_fetches_are_recognised() {
        let request = |db: &str, body: Document| CommandRequest {
            db: db.into(),
            name: body.keys().next().unwrap().clone(),
            body,
            secondary_ok: true,
        };
        assert!(is_oplog_fetch(&request(
            "local",
            doc! {"find": "oplog.rs", "$replData": 1}
        )));
        assert!(is_oplog_fetch(&request(
            "local",
            doc! {"getMore": 5_i64, "collection": "oplog.rs", "$oplogQueryData": 1}
        )));
        assert!(!is_oplog_fetch(&request("local", doc! {"find": "oplog.rs"})));
        assert!(!is_oplog_fetch(&request(
            "other",
            doc! {"find": "oplog.rs", "$replData": 1}
        )));
    }
}
