//! Commands to one member over the wire (the bench's small client), each on
//! a fresh connection and bounded in time: a paused member accepts the
//! connection (the kernel does) but never answers.

use std::fmt;
use std::time::Duration;

use bson::{doc, Bson, Document};
use tokio::runtime::Runtime;

use crate::bench::client::Client;

/// Longest one command to a member may take, connection included.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub enum AdminError {
    /// No connection, or it broke.
    Unreachable(String),
    /// No answer within the bound.
    TimedOut,
    /// The member answered `ok: 0`.
    Failed {
        code: i32,
        code_name: String,
        message: String,
    },
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Unreachable(why) => write!(f, "unreachable: {why}"),
            AdminError::TimedOut => write!(f, "no answer within {} s", COMMAND_TIMEOUT.as_secs()),
            AdminError::Failed {
                code,
                code_name,
                message,
            } => write!(f, "{code_name} ({code}): {message}"),
        }
    }
}

/// Runs commands on the members; owns the small runtime the client needs.
pub struct Admin {
    runtime: Runtime,
}

impl Admin {
    pub fn new() -> std::io::Result<Admin> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(Admin { runtime })
    }

    /// Runs `body` against the `admin` database of the member on `port`.
    pub fn command(&self, port: u16, body: Document) -> Result<Document, AdminError> {
        let mut body = body;
        body.insert("$db", "admin");
        let address = format!("127.0.0.1:{port}");
        let exchange = async {
            let mut client = Client::connect(&address)
                .await
                .map_err(|err| AdminError::Unreachable(err.to_string()))?;
            client
                .command(&body, &[])
                .await
                .map_err(|err| AdminError::Unreachable(err.to_string()))
        };
        let reply = self
            .runtime
            .block_on(async { tokio::time::timeout(COMMAND_TIMEOUT, exchange).await });
        let reply = reply.map_err(|_| AdminError::TimedOut)??;
        if is_ok(&reply) {
            Ok(reply)
        } else {
            Err(AdminError::Failed {
                code: reply.get_i32("code").unwrap_or(0),
                code_name: reply.get_str("codeName").unwrap_or("").to_owned(),
                message: reply.get_str("errmsg").unwrap_or("").to_owned(),
            })
        }
    }

    /// `ping`: whether the member answers commands at all.
    pub fn ping(&self, port: u16) -> bool {
        self.command(port, doc! {"ping": 1}).is_ok()
    }

    /// Sets the member's `blockMembers` fail point to `hosts` (empty: off).
    pub fn block_members(&self, port: u16, hosts: &[String]) -> Result<(), AdminError> {
        let body = if hosts.is_empty() {
            doc! {"configureFailPoint": "blockMembers", "mode": "off"}
        } else {
            doc! {"configureFailPoint": "blockMembers", "mode": "alwaysOn", "data": {"hosts": hosts.to_vec()}}
        };
        self.command(port, body).map(|_| ())
    }
}

fn is_ok(reply: &Document) -> bool {
    match reply.get("ok") {
        Some(Bson::Double(ok)) => *ok == 1.0,
        Some(Bson::Int32(ok)) => *ok == 1,
        Some(Bson::Int64(ok)) => *ok == 1,
        _ => false,
    }
}
