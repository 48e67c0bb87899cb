//! The cluster's state file, `<dir>/cluster.json`: what `cluster up` started
//! (each member's id, port, process id, data and log paths) and the
//! partition in force, so that later `cluster` commands find the members.
//!
//! The file is the only record of the member processes (they outlive the
//! command that started them), so every change is written whole to a
//! temporary file and renamed over the old one: a command interrupted while
//! saving leaves the previous state, never half of one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The state file's name inside the cluster directory.
pub const STATE_FILE: &str = "cluster.json";
/// The format this code writes and reads; a different number is refused.
pub const STATE_FORMAT: u32 = 1;
/// A replica set's most members.
pub const MEMBERS_MAX: usize = 50;
/// A state file larger than this is not one we wrote (50 members are a few
/// kilobytes).
const STATE_BYTES_MAX: u64 = 1024 * 1024;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ClusterState {
    pub format: u32,
    /// The replica set's name (`--replSet`, the config's `_id`).
    pub set_name: String,
    /// The `slipstream` binary the members run; restarts use the same one.
    pub binary: PathBuf,
    /// Extra `serve` arguments every member was started with.
    pub serve_args: Vec<String>,
    pub members: Vec<MemberState>,
    /// The sides of the partition in force (member ids), or none.
    pub partition: Option<Vec<Vec<u32>>>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MemberState {
    /// The member's number on the command line, also its config `_id`.
    pub id: u32,
    pub port: u16,
    /// The process id of its last start (it may have exited since).
    pub pid: u32,
    pub dbpath: PathBuf,
    pub logpath: PathBuf,
    /// Where the process's stdout and stderr go: errors that stop a start
    /// before the log is open.
    pub outpath: PathBuf,
    pub arbiter: bool,
    /// Stopped with SIGSTOP by `cluster pause` and not resumed since.
    pub paused: bool,
}

#[derive(Debug)]
pub enum StateError {
    /// No `cluster.json` in the directory.
    Missing(PathBuf),
    Io(PathBuf, io::Error),
    Invalid(PathBuf, String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Missing(path) => {
                write!(
                    f,
                    "no cluster at {} (no {STATE_FILE}; start one with `cluster up`)",
                    path.display()
                )
            }
            StateError::Io(path, err) => write!(f, "{}: {err}", path.display()),
            StateError::Invalid(path, why) => {
                write!(f, "{} is not a cluster state file: {why}", path.display())
            }
        }
    }
}

impl MemberState {
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl ClusterState {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    pub fn load(dir: &Path) -> Result<ClusterState, StateError> {
        let path = ClusterState::path(dir);
        let metadata = match fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(StateError::Missing(dir.to_owned())),
            Err(err) => return Err(StateError::Io(path, err)),
        };
        if metadata.len() > STATE_BYTES_MAX {
            return Err(StateError::Invalid(
                path,
                format!("{} bytes, at most {STATE_BYTES_MAX}", metadata.len()),
            ));
        }
        let text = fs::read_to_string(&path).map_err(|err| StateError::Io(path.clone(), err))?;
        let state: ClusterState =
            serde_json::from_str(&text).map_err(|err| StateError::Invalid(path.clone(), err.to_string()))?;
        state.check().map_err(|why| StateError::Invalid(path, why))?;
        Ok(state)
    }

    /// Writes the whole state to a temporary file, then renames it over the
    /// old one.
    pub fn save(&self, dir: &Path) -> Result<(), StateError> {
        assert!(
            self.check().is_ok(),
            "saving an inconsistent cluster state: {:?}",
            self.check()
        );
        let path = ClusterState::path(dir);
        let temporary = dir.join(format!("{STATE_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self).expect("the state serializes");
        fs::write(&temporary, text + "\n").map_err(|err| StateError::Io(temporary.clone(), err))?;
        fs::rename(&temporary, &path).map_err(|err| StateError::Io(path, err))
    }

    /// The rules every state file keeps: a known format, unique ids and
    /// ports, a partition that names known members at most once.
    pub fn check(&self) -> Result<(), String> {
        if self.format != STATE_FORMAT {
            return Err(format!("format {} (this slipstream reads {STATE_FORMAT})", self.format));
        }
        if self.members.is_empty() || self.members.len() > MEMBERS_MAX {
            return Err(format!("{} members (1 to {MEMBERS_MAX})", self.members.len()));
        }
        for (index, member) in self.members.iter().enumerate() {
            if member.id == 0 {
                return Err("member ids start at 1".into());
            }
            for earlier in &self.members[..index] {
                if earlier.id == member.id {
                    return Err(format!("member id {} appears twice", member.id));
                }
                if earlier.port == member.port {
                    return Err(format!("port {} appears twice", member.port));
                }
            }
        }
        if let Some(sides) = &self.partition {
            let known: Vec<u32> = self.members.iter().map(|member| member.id).collect();
            crate::cluster::partition::check_sides(sides, &known)?;
        }
        Ok(())
    }

    pub fn member(&self, id: u32) -> Result<&MemberState, String> {
        self.members
            .iter()
            .find(|member| member.id == id)
            .ok_or_else(|| self.unknown_member(id))
    }

    pub fn member_mut(&mut self, id: u32) -> Result<&mut MemberState, String> {
        let unknown = self.unknown_member(id);
        self.members.iter_mut().find(|member| member.id == id).ok_or(unknown)
    }

    fn unknown_member(&self, id: u32) -> String {
        let ids: Vec<String> = self.members.iter().map(|member| member.id.to_string()).collect();
        format!("no member {id} (members: {})", ids.join(", "))
    }

    /// `mongodb://h1,h2,.../?replicaSet=NAME` over every member but arbiters
    /// (a driver learns the rest from any one of them).
    pub fn uri(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .filter(|member| !member.arbiter)
            .map(MemberState::host)
            .collect();
        format!("mongodb://{}/?replicaSet={}", hosts.join(","), self.set_name)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn member(id: u32, port: u16) -> MemberState {
        MemberState {
            id,
            port,
            pid: 1,
            dbpath: format!("/c/n{id}/db").into(),
            logpath: format!("/c/n{id}/mongod.log").into(),
            outpath: format!("/c/n{id}/output.log").into(),
            arbiter: false,
            paused: false,
        }
    }

    fn state() -> ClusterState {
        ClusterState {
            format: STATE_FORMAT,
            set_name: "rs0".into(),
            binary: "/bin/slipstream".into(),
            serve_args: vec![],
            members: vec![
                member(1, 27017),
                member(2, 27018),
                MemberState {
                    arbiter: true,
                    ..member(3, 27019)
                },
            ],
            partition: None,
        }
    }

    #[test]
    fn saves_and_loads_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut saved = state();
        saved.partition = Some(vec![vec![1], vec![2, 3]]);
        saved.save(dir.path()).unwrap();
        assert_eq!(ClusterState::load(dir.path()).unwrap(), saved);
        assert!(!dir.path().join("cluster.json.tmp").exists());
    }

    #[test]
    fn refuses_what_it_did_not_write() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(ClusterState::load(dir.path()), Err(StateError::Missing(_))));
        fs::write(dir.path().join(STATE_FILE), "{\"format\": 1}").unwrap();
        assert!(matches!(ClusterState::load(dir.path()), Err(StateError::Invalid(..))));
        let mut other = state();
        other.format = 2;
        fs::write(dir.path().join(STATE_FILE), serde_json::to_string(&other).unwrap()).unwrap();
        assert!(matches!(ClusterState::load(dir.path()), Err(StateError::Invalid(..))));
    }

    #[test]
    fn checks_ids_ports_and_partition() {
        let mut twice = state();
        twice.members[1].id = 1;
        assert!(twice.check().unwrap_err().contains("appears twice"));
        let mut port = state();
        port.members[1].port = 27017;
        assert!(port.check().unwrap_err().contains("port 27017"));
        let mut partition = state();
        partition.partition = Some(vec![vec![1], vec![4]]);
        assert!(partition.check().is_err());
    }

    #[test]
    fn uri_names_every_data_member() {
        assert_eq!(
            state().uri(),
            "mongodb://127.0.0.1:27017,127.0.0.1:27018/?replicaSet=rs0"
        );
        assert!(state().member(4).unwrap_err().contains("members: 1, 2, 3"));
    }
}
