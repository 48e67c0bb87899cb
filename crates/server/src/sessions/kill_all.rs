//! `killAllSessions` and `killAllSessionsByPattern`: end every session
//! that matches a pattern and kill its open cursors, as `killSessions`
//! does for named sessions.
//!
//! Without authentication every session belongs to the anonymous user
//! (`lsid.rs`), so a pattern naming users or roles matches no session,
//! as it would in MongoDB for users who own none. The patterns:
//!
//! - `killAllSessions: []` every session; `[{user, db}, ...]` those of
//!   the named users (none);
//! - `killAllSessionsByPattern: []` or `[{}]` every session; a pattern
//!   with `lsid` that session, with `uid` the sessions of that user digest,
//!   with a non-empty `users` or `roles` none. A session matching any
//!   pattern is killed.

use bson::{Bson, Document};

use super::lsid;
use crate::commands::{CommandContext, CommandRequest, CommandResult};
use crate::error::CommandError;
use crate::exec::args::type_name;

pub async fn kill_all_sessions(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let users = patterns(req, "KillAllSessionsCmd")?;
    for user in users {
        user_name(user, "KillAllSessionsUser", "user")?;
    }
    let killed = if users.is_empty() { every_session(ctx) } else { Vec::new() };
    kill(ctx, &killed);
    Ok(Document::new())
}

pub async fn kill_all_sessions_by_pattern(ctx: &CommandContext, req: &CommandRequest) -> CommandResult {
    let patterns = patterns(req, "KillAllSessionsByPatternCmd")?
        .iter()
        .map(Pattern::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let killed: Vec<Document> = every_session(ctx)
        .into_iter()
        .filter(|session| patterns.is_empty() || patterns.iter().any(|pattern| pattern.matches(session)))
        .collect();
    kill(ctx, &killed);
    Ok(Document::new())
}

fn every_session(ctx: &CommandContext) -> Vec<Document> {
    ctx.state.sessions.list().into_iter().map(|view| view.lsid).collect()
}

fn kill(ctx: &CommandContext, sessions: &[Document]) {
    ctx.state.sessions.end(sessions);
    ctx.state.cursors.kill_sessions(sessions);
}

/// The command's array of pattern documents.
fn patterns<'a>(req: &'a CommandRequest, parser: &str) -> Result<&'a [Bson], CommandError> {
    match req.body.get(&req.name) {
        Some(Bson::Array(items)) => {
            if let Some(item) = items.iter().find(|item| !matches!(item, Bson::Document(_))) {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field '{parser}.{}' is the wrong type '{}', expected type 'object'",
                    req.name,
                    type_name(item)
                )));
            }
            Ok(items)
        }
        other => Err(CommandError::type_mismatch(format!(
            "BSON field '{parser}.{}' is the wrong type '{}', expected type 'array'",
            req.name,
            other.map_or("missing", type_name)
        ))),
    }
}

/// Checks a `{user, db}` (or `{role, db}`) document: both strings, nothing
/// else.
fn user_name(value: &Bson, parser: &str, name_field: &str) -> Result<(), CommandError> {
    let Bson::Document(user) = value else {
        return Err(CommandError::type_mismatch(format!(
            "BSON field '{parser}' is the wrong type '{}', expected type 'object'",
            type_name(value)
        )));
    };
    for field in [name_field, "db"] {
        match user.get(field) {
            Some(Bson::String(_)) => {}
            Some(other) => {
                return Err(CommandError::type_mismatch(format!(
                    "BSON field '{parser}.{field}' is the wrong type '{}', expected type 'string'",
                    type_name(other)
                )))
            }
            None => {
                return Err(CommandError::new(
                    40414,
                    format!("BSON field '{parser}.{field}' is missing but a required field"),
                ))
            }
        }
    }
    if let Some(field) = user.keys().find(|key| *key != name_field && *key != "db") {
        return Err(CommandError::new(40415, format!("BSON field '{parser}.{field}' is an unknown field.")));
    }
    Ok(())
}

/// One `killAllSessionsByPattern` pattern.
#[derive(Debug, Default)]
struct Pattern {
    lsid: Option<Document>,
    uid: Option<Vec<u8>>,
    /// A non-empty `users` or `roles`: only sessions of named users or
    /// roles match, and there are none.
    names_owners: bool,
}

impl Pattern {
    fn parse(value: &Bson) -> Result<Pattern, CommandError> {
        let Bson::Document(spec) = value else {
            unreachable!("patterns() keeps documents only");
        };
        let mut pattern = Pattern::default();
        for (key, value) in spec {
            match key.as_str() {
                "lsid" => pattern.lsid = Some(lsid::parse(value)?),
                "uid" => match value {
                    Bson::Binary(binary) if binary.bytes.len() == lsid::UID_BYTES => {
                        pattern.uid = Some(binary.bytes.clone());
                    }
                    _ => {
                        return Err(CommandError::type_mismatch(
                            "BSON field 'KillAllSessionsByPattern.uid' must be a 32-byte digest",
                        ))
                    }
                },
                "users" | "roles" => {
                    let Bson::Array(owners) = value else {
                        return Err(CommandError::type_mismatch(format!(
                            "BSON field 'KillAllSessionsByPattern.{key}' is the wrong type '{}', expected type 'array'",
                            type_name(value)
                        )));
                    };
                    let name_field = if key == "users" { "user" } else { "role" };
                    for owner in owners {
                        user_name(owner, &format!("KillAllSessionsByPattern.{key}"), name_field)?;
                    }
                    pattern.names_owners |= !owners.is_empty();
                }
                _ => {
                    return Err(CommandError::new(
                        40415,
                        format!("BSON field 'KillAllSessionsByPattern.{key}' is an unknown field."),
                    ))
                }
            }
        }
        Ok(pattern)
    }

    fn matches(&self, session: &Document) -> bool {
        let uid = match session.get("uid") {
            Some(Bson::Binary(binary)) => binary.bytes.as_slice(),
            _ => &[],
        };
        !self.names_owners
            && self.lsid.as_ref().is_none_or(|lsid| lsid == session)
            && self.uid.as_deref().is_none_or(|wanted| wanted == uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, spec::BinarySubtype, Binary};

    fn session(byte: u8) -> Document {
        let id = Bson::Binary(Binary { subtype: BinarySubtype::Uuid, bytes: vec![byte; 16] });
        lsid::parse(&Bson::Document(doc! {"id": id})).unwrap()
    }

    fn pattern(spec: Document) -> Result<Pattern, CommandError> {
        Pattern::parse(&Bson::Document(spec))
    }

    #[test]
    fn patterns_match_by_session_and_user_digest() {
        let (one, two) = (session(1), session(2));
        assert!(pattern(doc! {}).unwrap().matches(&one));
        let by_lsid = pattern(doc! {"lsid": {"id": one.get("id").unwrap().clone()}}).unwrap();
        assert!(by_lsid.matches(&one) && !by_lsid.matches(&two));
        assert!(pattern(doc! {"uid": lsid::anonymous_uid()}).unwrap().matches(&two));
        let other_uid = Bson::Binary(Binary { subtype: BinarySubtype::Generic, bytes: vec![7; 32] });
        assert!(!pattern(doc! {"uid": other_uid}).unwrap().matches(&two));
        assert!(!pattern(doc! {"users": [{"user": "u", "db": "admin"}]}).unwrap().matches(&one));
        assert!(pattern(doc! {"users": []}).unwrap().matches(&one));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        assert_eq!(pattern(doc! {"bogus": 1}).unwrap_err().code, 40415);
        assert_eq!(pattern(doc! {"uid": 1}).unwrap_err().code, 14);
        assert_eq!(pattern(doc! {"users": [{"user": "u"}]}).unwrap_err().code, 40414);
        assert_eq!(pattern(doc! {"roles": [{"role": 1, "db": "x"}]}).unwrap_err().code, 14);
        assert_eq!(pattern(doc! {"users": {"user": "u", "db": "x"}}).unwrap_err().code, 14);
    }
}
