//! The node's running operations, by `opid`: what `currentOp` shows and
//! what `killOp` interrupts.
//!
//! `operation::execute` registers every command when it starts and the
//! returned guard removes it when the command ends (or is dropped). A kill
//! sets the operation's flag and wakes whoever waits on it:
//!
//! - the command's run is raced against that wake-up
//!   (`RunningOperation::killed`), so a command waiting anywhere (a fail
//!   point's block, a read or write concern wait, an awaitData `getMore`,
//!   a query off the async workers) answers Interrupted (11601) at once;
//! - the work itself checks the flag at its yield points, the places that
//!   already check `maxTimeMS` (`exec::query::check_deadline`, once per
//!   document or batch of a scan): the command's future runs inside
//!   `InOperation`, which makes the operation current on the thread that
//!   polls it, and `spawn_blocking` carries it to a blocking thread, so a
//!   killed scan stops there instead of running to its end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bson::{doc, Bson, DateTime, Document};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::CommandError;
use crate::exec::size::value_size;

/// The most operations tracked at once. A node serves at most
/// `MAX_CONNECTIONS_DEFAULT` connections, each running one command at a
/// time, so this is only reached if that limit is raised; beyond it a
/// command still runs, unregistered (not shown, not killable).
pub const RUNNING_OPERATIONS_MAX: usize = 100_000;

/// The largest command `currentOp` shows whole; a larger one is shown as
/// MongoDB shows it, `{$truncated: <the start of its JSON>}`.
pub const CURRENT_OP_COMMAND_BYTES_MAX: usize = 1024;

/// What MongoDB's `currentOp` calls the kind of an operation.
pub fn op_kind(command: &str) -> &'static str {
    match command {
        "find" => "query",
        "getMore" => "getmore",
        "insert" => "insert",
        "update" | "findAndModify" | "findandmodify" => "update",
        "delete" => "remove",
        _ => "command",
    }
}

/// One running command.
pub struct RunningOperation {
    pub opid: u32,
    pub connection_id: i64,
    pub client: String,
    pub app_name: Option<String>,
    pub op: &'static str,
    pub ns: String,
    /// The command as `currentOp` shows it (`command_preview`): taken once
    /// at registration, never a copy of a large command.
    pub command: Bson,
    /// The command's `lsid`, if any.
    pub lsid: Option<Bson>,
    pub started: Instant,
    pub started_wall: SystemTime,
    killed: AtomicBool,
    kill_signal: Notify,
}

impl RunningOperation {
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Resolves once the operation is killed (at once if it already is).
    pub async fn killed(&self) {
        loop {
            let notified = self.kill_signal.notified();
            if self.is_killed() {
                return;
            }
            notified.await;
        }
    }

    fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.kill_signal.notify_waiters();
    }

    /// The `currentOp` document of this operation, as of `now`.
    pub fn describe(&self, host: &str, now: Instant) -> Document {
        let running = now.saturating_duration_since(self.started);
        let mut described = doc! {
            "type": "op",
            "host": host,
            "desc": format!("conn{}", self.connection_id),
            "connectionId": connection_id(self.connection_id),
            "client": self.client.clone(),
        };
        if let Some(app_name) = &self.app_name {
            described.insert("appName", app_name.clone());
        }
        described.insert("active", true);
        described.insert(
            "currentOpTime",
            DateTime::from_system_time(SystemTime::now())
                .try_to_rfc3339_string()
                .unwrap_or_default(),
        );
        described.insert("opid", self.opid as i32);
        described.insert("secs_running", running.as_secs() as i64);
        described.insert("microsecs_running", running.as_micros() as i64);
        described.insert("op", self.op);
        described.insert("ns", self.ns.clone());
        described.insert("command", self.command.clone());
        if let Some(lsid) = &self.lsid {
            described.insert("lsid", lsid.clone());
        }
        described.insert("numYields", 0);
        described.insert("locks", Document::new());
        described.insert("waitingForLock", false);
        if self.is_killed() {
            described.insert("killPending", true);
        }
        described
    }
}

/// `connectionId` as MongoDB appends it: an Int32 while it fits.
fn connection_id(id: i64) -> Bson {
    match i32::try_from(id) {
        Ok(id) => Bson::Int32(id),
        Err(_) => Bson::Int64(id),
    }
}

/// A command as `currentOp` and the profiler show it: whole when it
/// encodes within `CURRENT_OP_COMMAND_BYTES_MAX`, else, as MongoDB shows a
/// large one, `{$truncated: <the start of its JSON>}`. The cost is bounded
/// by the limit, not by the command: array elements (an `insert`'s
/// documents) are measured one by one only until the budget is spent,
/// and nothing beyond it is copied.
pub fn command_preview(command: &Document) -> Bson {
    let mut budget = CURRENT_OP_COMMAND_BYTES_MAX;
    let mut preview = Document::new();
    let mut truncated = false;
    for (key, value) in command {
        let Bson::Array(items) = value else {
            let size = value_size(value) + key.len() + 2;
            if size > budget {
                truncated = true;
                break;
            }
            budget -= size;
            preview.insert(key.clone(), value.clone());
            continue;
        };
        let mut kept = Vec::new();
        for item in items {
            let size = value_size(item) + 8;
            if size > budget {
                truncated = true;
                break;
            }
            budget -= size;
            kept.push(item.clone());
        }
        preview.insert(key.clone(), kept);
        if truncated {
            break;
        }
    }
    if !truncated {
        return Bson::Document(preview);
    }
    let json = preview.to_string();
    let cut = (0..=CURRENT_OP_COMMAND_BYTES_MAX.min(json.len()))
        .rev()
        .find(|at| json.is_char_boundary(*at))
        .unwrap_or(0);
    Bson::Document(doc! {"$truncated": &json[..cut]})
}

/// Every running operation of the node (locks internally; the lock is
/// held only to add, remove, list or flag, never across an await).
#[derive(Default)]
pub struct OperationRegistry {
    next_opid: AtomicU32,
    running: Mutex<BTreeMap<u32, Arc<RunningOperation>>>,
}

/// What describes a command to the registry.
pub struct NewOperation<'a> {
    pub connection_id: i64,
    pub client: &'a str,
    pub app_name: Option<String>,
    pub command_name: &'a str,
    pub ns: String,
    pub command: &'a Document,
}

/// Removes its operation from the registry when dropped.
pub struct Registered<'a> {
    registry: &'a OperationRegistry,
    pub operation: Arc<RunningOperation>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.registry.running.lock().remove(&self.operation.opid);
    }
}

impl OperationRegistry {
    /// Registers a starting command; `None` when `RUNNING_OPERATIONS_MAX`
    /// operations already run.
    pub fn register(&self, new: NewOperation<'_>) -> Option<Registered<'_>> {
        let mut running = self.running.lock();
        if running.len() >= RUNNING_OPERATIONS_MAX {
            return None;
        }
        // Opids are positive Int32s, as MongoDB shows them; skipping ids
        // still in use keeps them unique after a wrap.
        let opid = loop {
            let candidate = self.next_opid.fetch_add(1, Ordering::Relaxed) % (i32::MAX as u32) + 1;
            if !running.contains_key(&candidate) {
                break candidate;
            }
        };
        let operation = Arc::new(RunningOperation {
            opid,
            connection_id: new.connection_id,
            client: new.client.to_owned(),
            app_name: new.app_name,
            op: op_kind(new.command_name),
            ns: new.ns,
            command: command_preview(new.command),
            lsid: new.command.get("lsid").cloned(),
            started: Instant::now(),
            started_wall: SystemTime::now(),
            killed: AtomicBool::new(false),
            kill_signal: Notify::new(),
        });
        running.insert(opid, operation.clone());
        Some(Registered {
            registry: self,
            operation,
        })
    }

    /// Every running operation, by opid.
    pub fn snapshot(&self) -> Vec<Arc<RunningOperation>> {
        self.running.lock().values().cloned().collect()
    }

    /// Flags operation `opid` as killed; false when no such operation runs.
    pub fn kill(&self, opid: u32) -> bool {
        match self.running.lock().get(&opid) {
            Some(operation) => {
                operation.kill();
                true
            }
            None => false,
        }
    }
}

/// Interrupted (11601), as a killed operation answers.
pub fn interrupted() -> CommandError {
    CommandError::new(11601, "operation was interrupted")
}

thread_local! {
    /// The operation whose code this thread runs now (set by `InOperation`
    /// for one poll, or by `spawn_blocking` for one closure).
    static CURRENT: std::cell::RefCell<Option<Arc<RunningOperation>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `work` with `operation` current on this thread, restoring the one
/// before (nesting is allowed).
fn with_current<T>(operation: Option<Arc<RunningOperation>>, work: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|current| current.replace(operation));
    let result = work();
    CURRENT.with(|current| *current.borrow_mut() = previous);
    result
}

/// The yield-point check: Interrupted when the operation running on this
/// thread has been killed.
pub fn check_for_interrupt() -> Result<(), CommandError> {
    let killed = CURRENT.with(|current| current.borrow().as_ref().is_some_and(|operation| operation.is_killed()));
    if killed {
        return Err(interrupted());
    }
    Ok(())
}

/// A command's future, polled with its operation current on the polling
/// thread.
pub struct InOperation<F> {
    pub operation: Option<Arc<RunningOperation>>,
    pub inner: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> std::future::Future for InOperation<F> {
    type Output = F::Output;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<F::Output> {
        let operation = self.operation.clone();
        with_current(operation, || self.inner.as_mut().poll(cx))
    }
}

/// `tokio::task::spawn_blocking` that keeps the current operation current
/// in the closure, so that its yield points see a kill.
pub fn spawn_blocking<T, W>(work: W) -> tokio::task::JoinHandle<T>
where
    W: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let operation = CURRENT.with(|current| current.borrow().clone());
    tokio::task::spawn_blocking(move || with_current(operation, work))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new<'a>(command: &'a Document) -> NewOperation<'a> {
        NewOperation {
            connection_id: 7,
            client: "127.0.0.1:5000",
            app_name: None,
            command_name: command.keys().next().unwrap(),
            ns: "db.c".into(),
            command,
        }
    }

    #[test]
    fn operations_are_listed_while_they_run() {
        let registry = OperationRegistry::default();
        let find = doc! {"find": "c"};
        let first = registry.register(new(&find)).unwrap();
        let second = registry.register(new(&find)).unwrap();
        assert_ne!(first.operation.opid, second.operation.opid);
        assert_eq!(registry.snapshot().len(), 2);
        drop(first);
        assert_eq!(registry.snapshot().len(), 1);
        let described = second.operation.describe("h:1", Instant::now());
        assert_eq!(described.get_str("op").unwrap(), "query");
        assert_eq!(described.get_str("desc").unwrap(), "conn7");
        assert_eq!(described.get("connectionId"), Some(&Bson::Int32(7)));
        assert!(described.get_bool("active").unwrap());
    }

    #[test]
    fn a_kill_wakes_the_waiter() {
        let registry = OperationRegistry::default();
        let find = doc! {"find": "c"};
        let registered = registry.register(new(&find)).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let operation = registered.operation.clone();
            let waiter = tokio::spawn(async move { operation.killed().await });
            tokio::task::yield_now().await;
            assert!(registry.kill(registered.operation.opid));
            waiter.await.unwrap();
        });
        assert!(registered.operation.is_killed());
        assert!(!registry.kill(u32::MAX));
    }

    #[test]
    fn yield_points_see_a_kill_of_the_current_operation() {
        let registry = OperationRegistry::default();
        let find = doc! {"find": "c"};
        let registered = registry.register(new(&find)).unwrap();
        let operation = Some(registered.operation.clone());
        assert!(check_for_interrupt().is_ok(), "no operation is current");
        with_current(operation.clone(), || assert!(check_for_interrupt().is_ok()));
        registry.kill(registered.operation.opid);
        with_current(operation.clone(), || {
            assert_eq!(check_for_interrupt().unwrap_err().code, 11601)
        });
        assert!(check_for_interrupt().is_ok(), "the previous (none) is restored");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let _inside = runtime.enter();
        let on_blocking_thread = with_current(operation, || spawn_blocking(check_for_interrupt));
        assert_eq!(runtime.block_on(on_blocking_thread).unwrap().unwrap_err().code, 11601);
    }

    #[test]
    fn large_commands_are_truncated() {
        let large = doc! {"insert": "c", "documents": [{"_id": 1}, {"s": "x".repeat(5000)}]};
        let Bson::Document(shown) = command_preview(&large) else {
            panic!("a document")
        };
        let truncated = shown.get_str("$truncated").unwrap();
        assert!(truncated.len() <= CURRENT_OP_COMMAND_BYTES_MAX);
        assert!(truncated.contains("\"_id\": 1"), "{truncated}");
        let small = doc! {"find": "c", "filter": {"x": [1, 2, 3]}, "lsid": {"id": 1}};
        assert_eq!(command_preview(&small), Bson::Document(small));
        let many =
            doc! {"insert": "c", "documents": (0..10_000).map(|i| Bson::Document(doc! {"_id": i})).collect::<Vec<_>>()};
        let Bson::Document(shown) = command_preview(&many) else {
            panic!("a document")
        };
        assert!(shown.contains_key("$truncated"));
    }
}
