//! The session commands (`startSession`, `refreshSessions`, `endSessions`,
//! `killSessions`), the `$listLocalSessions` aggregation stage, and the
//! refusal of `commitTransaction` / `abortTransaction`.

use bson::{doc, Bson, Document, Uuid};

use super::lsid;
use super::session_catalog::LOGICAL_SESSION_TIMEOUT_MINUTES;
use crate::commands::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;

/// The most sessions one command may name (MongoDB's limit on a
/// `LogicalSessionIdVector` argument).
pub const SESSIONS_PER_COMMAND_MAX: usize = 10_000;

/// The session ids a command names: an array of `{id, uid?}`.
fn named_sessions(req: &CommandRequest) -> Result<Vec<Document>, CommandError> {
    let Some(Bson::Array(items)) = req.body.get(&req.name) else {
        return Err(CommandError::type_mismatch(format!(
            "{} must be an array of session ids",
            req.name
        )));
    };
    if items.len() > SESSIONS_PER_COMMAND_MAX {
        return Err(CommandError::bad_value(format!(
            "{} names {} sessions; at most {SESSIONS_PER_COMMAND_MAX} are allowed",
            req.name,
            items.len()
        )));
    }
    items.iter().map(lsid::parse).collect()
}

/// `startSession`: a new session id, known from now on.
pub async fn start_session(ctx: &CommandContext, _req: &CommandRequest) -> CommandResult {
    let id = doc! {"id": Uuid::new()};
    let key = lsid::parse(&Bson::Document(id.clone()))?;
    ctx.state.sessions.refresh(&[key])?;
    Ok(doc! {"id": id, "timeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES})
}

/// `refreshSessions: [lsid, ...]`: the sessions stay alive for another
/// timeout.
pub async fn refresh_sessions(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let sessions = named_sessions(req)?;
    ctx.state.sessions.refresh(&sessions)?;
    Ok(Document::new())
}

/// `endSessions: [lsid, ...]`: the sessions are forgotten (unknown ones
/// are ignored, as in MongoDB).
pub async fn end_sessions(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let sessions = named_sessions(req)?;
    ctx.state.sessions.end(&sessions);
    Ok(Document::new())
}

/// `killSessions: [lsid, ...]` (`[]`: every session): the sessions are
/// forgotten and their open cursors killed. A command running in one is
/// not interrupted (Slipstream's commands cannot be interrupted yet); its
/// session is forgotten when it finishes.
pub async fn kill_sessions(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let mut sessions = named_sessions(req)?;
    if sessions.is_empty() {
        sessions = ctx.state.sessions.list().into_iter().map(|view| view.lsid).collect();
    }
    ctx.state.sessions.end(&sessions);
    ctx.state.cursors.kill_sessions(&sessions);
    Ok(Document::new())
}

/// A `{aggregate: 1}` pipeline starting with `$listLocalSessions`: the
/// same pipeline with that stage replaced by `$documents` holding the
/// sessions it lists, so the rest of the pipeline runs as usual. `None`
/// for any other pipeline.
pub fn expand_list_local_sessions(
    ctx: &CommandContext,
    req: &CommandRequest,
) -> Result<Option<Document>, CommandError> {
    let Some(Bson::Array(stages)) = req.body.get("pipeline") else {
        return Ok(None);
    };
    let Some(Bson::Document(stage)) = stages.first().filter(|stage| is_list_local_sessions(stage)) else {
        if stages.iter().any(is_list_local_sessions) {
            return Err(CommandError::new(
                40602,
                "$listLocalSessions is only valid as the first stage in a pipeline.",
            ));
        }
        return Ok(None);
    };
    if !matches!(
        req.body.get("aggregate"),
        Some(Bson::Int32(1) | Bson::Int64(1) | Bson::Double(_))
    ) {
        return Err(CommandError::new(
            73,
            "$listLocalSessions must be run against the database with {aggregate: 1}, not a collection",
        ));
    }
    let filter = ListFilter::parse(stage.get("$listLocalSessions").unwrap_or(&Bson::Null))?;
    let documents: Vec<Bson> = ctx
        .state
        .sessions
        .list()
        .into_iter()
        .filter(|_| filter.admits_anonymous())
        .map(|view| {
            Bson::Document(doc! {
                "_id": view.lsid,
                "lastUse": bson::DateTime::from_system_time(view.last_use),
            })
        })
        .collect();
    let mut body = req.body.clone();
    let mut pipeline = stages.clone();
    pipeline[0] = Bson::Document(doc! {"$documents": documents});
    body.insert("pipeline", pipeline);
    Ok(Some(body))
}

fn is_list_local_sessions(stage: &Bson) -> bool {
    matches!(stage, Bson::Document(stage) if stage.contains_key("$listLocalSessions"))
}

/// Which sessions `$listLocalSessions` lists: `{}` and `{allUsers: true}`
/// every session (without authentication, all of them are the anonymous
/// user's); `{users: [{user, db}, ...]}` those of the named users, which
/// are none since no session of this node belongs to a named user.
enum ListFilter {
    All,
    Users,
}

impl ListFilter {
    fn parse(spec: &Bson) -> Result<ListFilter, CommandError> {
        let spec = match spec {
            Bson::Document(spec) => spec,
            _ => return Err(CommandError::type_mismatch("$listLocalSessions takes an object")),
        };
        for key in spec.keys() {
            if key != "allUsers" && key != "users" {
                return Err(CommandError::new(
                    40415,
                    format!("BSON field 'ListSessionsSpec.{key}' is an unknown field."),
                ));
            }
        }
        let all_users = match spec.get("allUsers") {
            None => false,
            Some(Bson::Boolean(all)) => *all,
            Some(_) => return Err(CommandError::type_mismatch("allUsers must be a boolean")),
        };
        match spec.get("users") {
            None => Ok(ListFilter::All),
            Some(_) if all_users => Err(CommandError::bad_value(
                "allUsers=true and users=[...] are mutually exclusive",
            )),
            Some(Bson::Array(users)) => {
                for user in users {
                    let named = matches!(user, Bson::Document(user)
                        if user.get_str("user").is_ok() && user.get_str("db").is_ok());
                    if !named {
                        return Err(CommandError::type_mismatch("users entries must be {user, db}"));
                    }
                }
                Ok(ListFilter::Users)
            }
            Some(_) => Err(CommandError::type_mismatch("users must be an array")),
        }
    }

    /// Every session of this node is the anonymous user's.
    fn admits_anonymous(&self) -> bool {
        matches!(self, ListFilter::All)
    }
}

/// `commitTransaction` / `abortTransaction`: multi-document transactions
/// are not implemented, so there is never one to end. The same refusal as
/// every other transaction entry point (115; they answered 59, no such
/// command, which a driver reads as a server too old for transactions).
pub async fn end_transaction(_ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    Err(CommandError::new(
        115,
        format!("{}: multi-document transactions are not supported by Slipstream yet", req.name),
    ))
}
