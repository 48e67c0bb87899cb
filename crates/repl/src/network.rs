//! `trait Network`: how the companions reach other members, one command
//! at a time, answered or one-way. `TcpNetwork` is the real one (the internal client over TCP,
//! connections reused per host, a timeout on every command, and the
//! `MemberBlocklist` fault hook refusing blocked hosts); tests put an
//! in-memory one in its place.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bson::{Document, RawDocumentBuf};
use parking_lot::Mutex;

use crate::client::Connection;
use crate::fault::MemberBlocklist;
use crate::topology::BoxFuture;

/// Idle connections kept per host (the fetcher, heartbeats, votes and
/// position reports each hold at most one at a time).
pub const IDLE_CONNECTIONS_PER_HOST_MAX: usize = 8;

#[derive(Debug)]
pub enum NetError {
    /// The fault hook blocks this member.
    Blocked,
    /// No connection (refused, reset, closed).
    Unreachable(String),
    /// No reply within the command's timeout.
    Timeout,
    /// The bytes made no sense.
    Protocol(String),
    /// The member answered `ok: 0`.
    Command {
        code: i32,
        message: String,
        reply: Document,
    },
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetError::Blocked => write!(f, "blocked by the blockMembers fail point"),
            NetError::Unreachable(why) => write!(f, "unreachable: {why}"),
            NetError::Timeout => write!(f, "timed out"),
            NetError::Protocol(why) => write!(f, "protocol error: {why}"),
            NetError::Command { code, message, .. } => {
                write!(f, "command failed ({code}): {message}")
            }
        }
    }
}

/// Runs commands on other members.
pub trait Network: Send + Sync {
    /// Runs `body` against database `db` on `host`; the reply of an
    /// `ok: 1`, else the error. Cancel-safe: a dropped call leaves no
    /// half-used connection behind.
    fn run<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Document, NetError>>;

    /// `run` whose reply stays raw BSON (the oplog fetcher's batches go to
    /// storage as they arrived). By default the document reply, encoded.
    fn run_raw<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<RawDocumentBuf, NetError>> {
        Box::pin(async move {
            let reply = self.run(host, db, body, timeout).await?;
            RawDocumentBuf::try_from(&reply).map_err(|err| NetError::Protocol(err.to_string()))
        })
    }

    /// Sends `body` to `host` expecting no reply (OP_MSG moreToCome): Ok
    /// once the bytes left, whatever the other side makes of them. By
    /// default `run`, its reply dropped (the in-memory test network).
    fn send_one_way<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), NetError>> {
        Box::pin(async move {
            match self.run(host, db, body, timeout).await {
                Ok(_) | Err(NetError::Command { .. }) => Ok(()),
                Err(err) => Err(err),
            }
        })
    }
}

/// The real network: TCP to each member.
pub struct TcpNetwork {
    /// This member's `host:port` as its configuration names it, sent in
    /// the handshake (set once the configuration is known).
    me: Arc<parking_lot::RwLock<String>>,
    blocklist: Arc<MemberBlocklist>,
    idle: Mutex<HashMap<String, Vec<Connection>>>,
}

impl TcpNetwork {
    pub fn new(me: Arc<parking_lot::RwLock<String>>, blocklist: Arc<MemberBlocklist>) -> TcpNetwork {
        TcpNetwork {
            me,
            blocklist,
            idle: Mutex::new(HashMap::new()),
        }
    }

    /// An idle connection whose handshake named this member as it is
    /// named now: one opened before the configuration gave this member its
    /// name would escape the other side's `blockMembers` check.
    fn take_idle(&self, host: &str) -> Option<Connection> {
        let me = self.me.read().clone();
        let mut idle = self.idle.lock();
        let list = idle.get_mut(host)?;
        list.retain(|connection| connection.me == me);
        list.pop()
    }

    fn put_idle(&self, host: &str, connection: Connection) {
        let mut idle = self.idle.lock();
        let list = idle.entry(host.to_owned()).or_default();
        if list.len() < IDLE_CONNECTIONS_PER_HOST_MAX {
            list.push(connection);
        }
    }

    async fn run_once(&self, host: &str, db: &str, body: Document, raw: bool) -> Result<Reply, NetError> {
        if let Some(mut connection) = self.take_idle(host) {
            match run_on(&mut connection, db, body.clone(), raw).await {
                // A pooled connection may have died while idle: one retry on
                // a fresh connection for that case only.
                Err(NetError::Unreachable(_)) => {}
                Err(NetError::Protocol(why)) => return Err(NetError::Protocol(why)),
                result => {
                    self.put_idle(host, connection);
                    return result;
                }
            }
        }
        let me = self.me.read().clone();
        let mut connection = Connection::open(host, &me).await?;
        let result = run_on(&mut connection, db, body, raw).await;
        if !matches!(result, Err(NetError::Unreachable(_)) | Err(NetError::Protocol(_))) {
            self.put_idle(host, connection);
        }
        result
    }

    /// `send_one_way` without the blocklist check and the timeout: on an
    /// idle connection that still looks open, else on a fresh one.
    async fn send_once(&self, host: &str, db: &str, body: Document) -> Result<(), NetError> {
        while let Some(mut connection) = self.take_idle(host) {
            if !connection.idle_and_open() {
                continue;
            }
            if connection.send_one_way(db, body.clone()).await.is_ok() {
                self.put_idle(host, connection);
                return Ok(());
            }
        }
        let me = self.me.read().clone();
        let mut connection = Connection::open(host, &me).await?;
        connection.send_one_way(db, body).await?;
        self.put_idle(host, connection);
        Ok(())
    }

    /// The fault hook's refusal of a blocked host (its idle connections
    /// dropped), for commands and one-way sends alike.
    fn refuse_blocked(&self, host: &str) -> Result<(), NetError> {
        if self.blocklist.is_blocked(host) {
            self.idle.lock().remove(host);
            return Err(NetError::Blocked);
        }
        Ok(())
    }

    async fn run_checked(
        &self,
        host: &str,
        db: &str,
        body: Document,
        timeout: Duration,
        raw: bool,
    ) -> Result<Reply, NetError> {
        self.refuse_blocked(host)?;
        // A timed-out call drops its connection with it (never pooled
        // mid-reply).
        match tokio::time::timeout(timeout, self.run_once(host, db, body, raw)).await {
            Ok(result) => result,
            Err(_) => Err(NetError::Timeout),
        }
    }
}

/// A reply as a document, or as the raw BSON it arrived as.
enum Reply {
    Document(Document),
    Raw(RawDocumentBuf),
}

async fn run_on(connection: &mut Connection, db: &str, body: Document, raw: bool) -> Result<Reply, NetError> {
    if raw {
        connection.run_raw(db, body).await.map(Reply::Raw)
    } else {
        connection.run(db, body).await.map(Reply::Document)
    }
}

impl Network for TcpNetwork {
    fn run<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Document, NetError>> {
        Box::pin(async move {
            match self.run_checked(host, db, body, timeout, false).await? {
                Reply::Document(reply) => Ok(reply),
                Reply::Raw(_) => unreachable!("asked for a document"),
            }
        })
    }

    fn run_raw<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<RawDocumentBuf, NetError>> {
        Box::pin(async move {
            match self.run_checked(host, db, body, timeout, true).await? {
                Reply::Raw(reply) => Ok(reply),
                Reply::Document(_) => unreachable!("asked for raw BSON"),
            }
        })
    }

    fn send_one_way<'a>(
        &'a self,
        host: &'a str,
        db: &'a str,
        body: Document,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(), NetError>> {
        Box::pin(async move {
            self.refuse_blocked(host)?;
            match tokio::time::timeout(timeout, self.send_once(host, db, body)).await {
                Ok(result) => result,
                Err(_) => Err(NetError::Timeout),
            }
        })
    }
}
