//! Test-only fail points (`configureFailPoint`), present only when the node
//! runs with `--enable-test-commands`:
//! - `failCommand` makes chosen commands fail with an error code, close the
//!   connection, block for a while, or report a write concern error, as
//!   drivers' test suites (retryable writes, transactions, discovery)
//!   expect;
//! - `maxTimeAlwaysTimeOut` makes every command that carries `maxTimeMS`
//!   fail with MaxTimeMSExpired (50);
//! - `onPrimaryTransactionalWrite` acts on each statement a retryable
//!   write executes (not on those answered from history): the connection
//!   closes after the command (`closeConnection`, default true), and with
//!   `failBeforeCommitExceptionCode` the statement fails with that code
//!   instead of running, as MongoDB's fail point of that name does for
//!   drivers' retryable-write tests.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;

use crate::error::CommandError;

/// How many times a fail point fires.
#[derive(Clone, Debug, PartialEq)]
enum Mode {
    AlwaysOn,
    /// Fires this many more times, then turns itself off.
    Times(i64),
    /// Lets this many matching commands through, then fires always.
    Skip(i64),
}

/// What one matching event does under a mode.
enum Turn {
    Fire,
    /// Not this time (`skip` still counting).
    Pass,
    /// `times` used up: the fail point turns itself off.
    Exhausted,
}

impl Mode {
    /// Counts one matching event against `times`/`skip` and says whether
    /// the fail point fires for it.
    fn take_turn(&mut self) -> Turn {
        match self {
            Mode::AlwaysOn => Turn::Fire,
            Mode::Skip(left) if *left > 0 => {
                *left -= 1;
                Turn::Pass
            }
            Mode::Skip(_) => Turn::Fire,
            Mode::Times(left) if *left <= 0 => Turn::Exhausted,
            Mode::Times(left) => {
                *left -= 1;
                Turn::Fire
            }
        }
    }
}

#[derive(Clone, Debug)]
struct FailCommand {
    mode: Mode,
    commands: Vec<String>,
    error_code: Option<i32>,
    close_connection: bool,
    block_ms: Option<u64>,
    error_labels: Option<Bson>,
    write_concern_error: Option<Document>,
    app_name: Option<String>,
}

/// What a fired `failCommand` does to one command.
#[derive(Clone, Debug, Default)]
pub struct FailAction {
    /// Sleep this long before going on.
    pub block_ms: Option<u64>,
    /// Close the connection without a reply.
    pub close_connection: bool,
    /// Answer with this error reply instead of running the command.
    pub error_reply: Option<Document>,
    /// Run the command, then add this `writeConcernError` to its reply.
    pub write_concern_error: Option<Document>,
}

/// What `onPrimaryTransactionalWrite` does to one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementFailure {
    /// Close the connection once the command is done, without a reply.
    pub close_connection: bool,
    /// Fail the statement with this code instead of running it.
    pub fail_before_commit_code: Option<i32>,
}

/// `onPrimaryTransactionalWrite`, shared with the retryable writes that
/// consult it (locks internally).
#[derive(Debug, Default)]
pub struct TransactionalWriteFailPoint {
    configured: Mutex<Option<(Mode, StatementFailure)>>,
}

impl TransactionalWriteFailPoint {
    /// Whether the fail point fires for the statement about to run;
    /// counts the firing against `times`/`skip`.
    pub fn fires(&self) -> Option<StatementFailure> {
        let mut guard = self.configured.lock();
        let (mode, failure) = guard.as_mut()?;
        let failure = *failure;
        match mode.take_turn() {
            Turn::Fire => Some(failure),
            Turn::Pass => None,
            Turn::Exhausted => {
                *guard = None;
                None
            }
        }
    }
}

/// The node's fail points (guarded by one mutex, held only to decide).
#[derive(Default)]
pub struct FailPoints {
    /// `onPrimaryTransactionalWrite` (handed to retryable writes).
    pub transactional_write: Arc<TransactionalWriteFailPoint>,
    fail_command: Mutex<Option<FailCommand>>,
    max_time_always_time_out: Mutex<Option<Mode>>,
    /// How many times `failCommand` fired since it was last configured.
    times_entered: Mutex<i64>,
}

/// The longest `blockTimeMS` accepted.
pub const BLOCK_TIME_MS_MAX: u64 = 60_000;

fn as_i64(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(n) if n.fract() == 0.0 => Some(*n as i64),
        _ => None,
    }
}

impl FailPoints {
    /// `configureFailPoint`; returns the reply (`count`: times the previous
    /// configuration fired).
    pub fn configure(&self, body: &Document) -> Result<Document, CommandError> {
        let name = body.get_str("configureFailPoint").map_err(|_| CommandError::type_mismatch("configureFailPoint must be a string"))?;
        if !matches!(name, "failCommand" | "maxTimeAlwaysTimeOut" | "onPrimaryTransactionalWrite") {
            return Err(CommandError::bad_value(format!(
                "Cannot find fail point named {name} (failCommand, maxTimeAlwaysTimeOut and \
                 onPrimaryTransactionalWrite exist)"
            )));
        }
        let mode = match body.get("mode") {
            Some(Bson::String(mode)) if mode == "off" => None,
            Some(Bson::String(mode)) if mode == "alwaysOn" => Some(Mode::AlwaysOn),
            Some(Bson::Document(mode)) => {
                if let Some(times) = mode.get("times").and_then(as_i64) {
                    Some(Mode::Times(times.max(0)))
                } else if let Some(skip) = mode.get("skip").and_then(as_i64) {
                    Some(Mode::Skip(skip.max(0)))
                } else {
                    return Err(CommandError::bad_value("mode must be 'off', 'alwaysOn', {times: n} or {skip: n}"));
                }
            }
            _ => return Err(CommandError::bad_value("mode must be 'off', 'alwaysOn', {times: n} or {skip: n}")),
        };
        let data = match body.get("data") {
            None => Document::new(),
            Some(Bson::Document(data)) => data.clone(),
            Some(_) => return Err(CommandError::type_mismatch("data must be an object")),
        };
        if name == "maxTimeAlwaysTimeOut" {
            *self.max_time_always_time_out.lock() = mode;
            return Ok(doc! {"count": 0_i64});
        }
        if name == "onPrimaryTransactionalWrite" {
            let failure = StatementFailure {
                close_connection: data.get_bool("closeConnection").unwrap_or(true),
                fail_before_commit_code: data.get("failBeforeCommitExceptionCode").and_then(as_i64).map(|code| code as i32),
            };
            *self.transactional_write.configured.lock() = mode.map(|mode| (mode, failure));
            return Ok(doc! {"count": 0_i64});
        }
        let configured = match mode {
            None => None,
            Some(mode) => Some(parse_fail_command(mode, &data)?),
        };
        let previous = std::mem::replace(&mut *self.times_entered.lock(), 0);
        *self.fail_command.lock() = configured;
        Ok(doc! {"count": previous})
    }

    /// `maxTimeAlwaysTimeOut`: the error for a command carrying maxTimeMS.
    pub fn check_max_time(&self, body: &Document) -> Option<Document> {
        if !body.contains_key("maxTimeMS") {
            return None;
        }
        self.max_time_fires().then(|| CommandError::new(50, "operation exceeded time limit").to_reply())
    }

    /// Whether `maxTimeAlwaysTimeOut` fires for an operation with a time
    /// limit (a command's maxTimeMS, or a cursor opened with one); counts
    /// the firing against `times`/`skip`.
    pub fn max_time_fires(&self) -> bool {
        let mut guard = self.max_time_always_time_out.lock();
        let Some(mode) = guard.as_mut() else {
            return false;
        };
        match mode.take_turn() {
            Turn::Fire => true,
            Turn::Pass => false,
            Turn::Exhausted => {
                *guard = None;
                false
            }
        }
    }

    /// Decides whether `failCommand` fires for this command.
    pub fn check(&self, command: &str, app_name: Option<&str>) -> Option<FailAction> {
        let mut guard = self.fail_command.lock();
        let fail = guard.as_mut()?;
        if !fail.commands.iter().any(|name| name == command) {
            return None;
        }
        if fail.app_name.is_some() && fail.app_name.as_deref() != app_name {
            return None;
        }
        match fail.mode.take_turn() {
            Turn::Fire => {}
            Turn::Pass => return None,
            Turn::Exhausted => {
                *guard = None;
                return None;
            }
        }
        let action = FailAction {
            block_ms: fail.block_ms,
            close_connection: fail.close_connection,
            error_reply: fail.error_code.map(|code| {
                let mut reply = CommandError::new(code, "Failing command via 'failCommand' failpoint").to_reply();
                if let Some(labels) = &fail.error_labels {
                    reply.insert("errorLabels", labels.clone());
                }
                reply
            }),
            write_concern_error: fail.write_concern_error.clone(),
        };
        if fail.mode == Mode::Times(0) {
            *guard = None;
        }
        drop(guard);
        *self.times_entered.lock() += 1;
        Some(action)
    }
}

fn parse_fail_command(mode: Mode, data: &Document) -> Result<FailCommand, CommandError> {
    let commands = match data.get("failCommands") {
        Some(Bson::Array(names)) => names.iter().filter_map(|name| name.as_str().map(str::to_owned)).collect(),
        _ => return Err(CommandError::bad_value("failCommand requires data.failCommands, an array of command names")),
    };
    let block_ms = if data.get_bool("blockConnection").unwrap_or(false) {
        let ms = data.get("blockTimeMS").and_then(as_i64).ok_or_else(|| CommandError::bad_value("blockConnection requires blockTimeMS"))?;
        Some((ms.max(0) as u64).min(BLOCK_TIME_MS_MAX))
    } else {
        None
    };
    Ok(FailCommand {
        mode,
        commands,
        error_code: data.get("errorCode").and_then(as_i64).map(|code| code as i32),
        close_connection: data.get_bool("closeConnection").unwrap_or(false),
        block_ms,
        error_labels: data.get("errorLabels").cloned(),
        write_concern_error: data.get_document("writeConcernError").ok().cloned(),
        app_name: data.get_str("appName").ok().map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_mode_fires_n_times_then_turns_off() {
        let points = FailPoints::default();
        let body = doc! {"configureFailPoint": "failCommand", "mode": {"times": 2},
                         "data": {"failCommands": ["insert"], "errorCode": 91, "errorLabels": ["RetryableWriteError"]}};
        points.configure(&body).unwrap();
        assert!(points.check("find", None).is_none());
        let action = points.check("insert", None).unwrap();
        let reply = action.error_reply.unwrap();
        assert_eq!(reply.get_i32("code").ok(), Some(91));
        assert!(reply.get_array("errorLabels").is_ok());
        assert!(points.check("insert", None).is_some());
        assert!(points.check("insert", None).is_none());
        let off = points.configure(&doc! {"configureFailPoint": "failCommand", "mode": "off"}).unwrap();
        assert_eq!(off.get_i64("count").ok(), Some(2));
    }

    #[test]
    fn transactional_writes_fail_per_statement_after_the_skip() {
        let points = FailPoints::default();
        let body = doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"skip": 2},
                         "data": {"failBeforeCommitExceptionCode": 1}};
        points.configure(&body).unwrap();
        let fail_point = Arc::clone(&points.transactional_write);
        assert_eq!(fail_point.fires(), None);
        assert_eq!(fail_point.fires(), None);
        let failure = StatementFailure { close_connection: true, fail_before_commit_code: Some(1) };
        assert_eq!(fail_point.fires(), Some(failure));
        assert_eq!(fail_point.fires(), Some(failure));
        points.configure(&doc! {"configureFailPoint": "onPrimaryTransactionalWrite", "mode": "off"}).unwrap();
        assert_eq!(fail_point.fires(), None);
    }

    #[test]
    fn skip_and_app_name_and_close() {
        let points = FailPoints::default();
        let body = doc! {"configureFailPoint": "failCommand", "mode": {"skip": 1},
                         "data": {"failCommands": ["ping"], "closeConnection": true, "appName": "app"}};
        points.configure(&body).unwrap();
        assert!(points.check("ping", Some("other")).is_none());
        assert!(points.check("ping", Some("app")).is_none(), "skipped once");
        assert!(points.check("ping", Some("app")).unwrap().close_connection);
        assert!(points.configure(&doc! {"configureFailPoint": "nope", "mode": "off"}).is_err());
        points.configure(&doc! {"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "alwaysOn"}).unwrap();
        assert!(points.check_max_time(&doc! {"find": "c"}).is_none());
        assert_eq!(points.check_max_time(&doc! {"find": "c", "maxTimeMS": 5}).unwrap().get_i32("code").ok(), Some(50));
        points.configure(&doc! {"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "off"}).unwrap();
        assert!(points.check_max_time(&doc! {"find": "c", "maxTimeMS": 5}).is_none());
    }
}
