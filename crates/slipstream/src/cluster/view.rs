//! What one member says about itself (`replSetGetStatus`), for `cluster
//! status` and for the waits of `up` and `restart`.

use bson::{doc, Bson, Document};
use serde_json::{json, Value};

use super::admin::{Admin, AdminError};
use super::process;
use super::state::MemberState;

/// MongoDB's NotYetInitialized: a member without a config.
const NOT_YET_INITIALIZED: i32 = 94;
/// MongoDB's InvalidReplicaSetConfig: a member its config no longer names.
const INVALID_REPLICA_SET_CONFIG: i32 = 93;

#[derive(Debug, Clone)]
pub struct MemberView {
    pub id: u32,
    pub host: String,
    pub pid: u32,
    /// The process runs (paused or not).
    pub up: bool,
    pub paused: bool,
    pub arbiter: bool,
    /// MongoDB's state name (`PRIMARY`, `SECONDARY`, ...), or `DOWN`,
    /// `PAUSED`, `UNREACHABLE` for what the member could not say.
    pub state: String,
    /// Its last applied OpTime: (secs, inc, term).
    pub optime: Option<(u32, u32, i64)>,
    /// Why the state is not the member's own answer.
    pub note: Option<String>,
}

impl MemberView {
    pub fn of(admin: &Admin, member: &MemberState) -> MemberView {
        let mut view = MemberView {
            id: member.id,
            host: member.host(),
            pid: member.pid,
            up: process::is_running(member),
            paused: member.paused,
            arbiter: member.arbiter,
            state: String::new(),
            optime: None,
            note: None,
        };
        if !view.up {
            view.state = "DOWN".into();
        } else if member.paused {
            view.state = "PAUSED".into();
        } else {
            match admin.command(member.port, doc! {"replSetGetStatus": 1}) {
                Ok(status) => view.read_status(&status),
                Err(AdminError::Failed {
                    code: NOT_YET_INITIALIZED,
                    ..
                }) => view.state = "STARTUP".into(),
                Err(AdminError::Failed {
                    code: INVALID_REPLICA_SET_CONFIG,
                    ..
                }) => view.state = "REMOVED".into(),
                Err(err) => {
                    view.state = "UNREACHABLE".into();
                    view.note = Some(err.to_string());
                }
            }
        }
        view
    }

    fn read_status(&mut self, status: &Document) {
        let own = status.get_array("members").ok().and_then(|members| {
            members
                .iter()
                .filter_map(Bson::as_document)
                .find(|m| m.get_bool("self").unwrap_or(false))
        });
        let Some(own) = own else {
            self.state = "UNKNOWN".into();
            self.note = Some("replSetGetStatus names no member as self".into());
            return;
        };
        self.state = own.get_str("stateStr").unwrap_or("UNKNOWN").to_owned();
        if let Ok(optime) = own.get_document("optime") {
            if let Ok(ts) = optime.get_timestamp("ts") {
                let term = optime
                    .get_i64("t")
                    .or_else(|_| optime.get_i32("t").map(i64::from))
                    .unwrap_or(-1);
                self.optime = Some((ts.time, ts.increment, term));
            }
        }
    }

    pub fn is_primary(&self) -> bool {
        self.state == "PRIMARY"
    }

    /// PRIMARY, SECONDARY or ARBITER: a member doing its part.
    pub fn is_healthy(&self) -> bool {
        matches!(self.state.as_str(), "PRIMARY" | "SECONDARY" | "ARBITER")
    }

    /// One line for people.
    pub fn line(&self) -> String {
        let mut line = format!(
            "member {}  {}  pid {:<7}  {:<10}",
            self.id, self.host, self.pid, self.state
        );
        if let Some((secs, inc, term)) = self.optime {
            line.push_str(&format!("  optime Timestamp({secs}, {inc}) term {term}"));
        }
        if self.arbiter {
            line.push_str("  (arbiter)");
        }
        if let Some(note) = &self.note {
            line.push_str(&format!("  ({note})"));
        }
        line
    }

    pub fn json(&self) -> Value {
        json!({
            "id": self.id,
            "host": self.host,
            "pid": self.pid,
            "up": self.up,
            "paused": self.paused,
            "arbiter": self.arbiter,
            "state": self.state,
            "optime": self.optime.map(|(secs, inc, term)| json!({"ts": [secs, inc], "t": term})),
        })
    }
}
