//! The `replSetInitiate` document `cluster up` sends: one member per
//! process, the per-member options of `--member`, the timing settings.

use bson::{doc, Bson, Document};

use super::state::ClusterState;

/// Options of one member from `--member ID:key=value,...`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MemberOptions {
    pub id: u32,
    pub priority: Option<f64>,
    pub votes: Option<i32>,
    pub hidden: bool,
}

/// Parses `3:priority=0,votes=0,hidden` (`hidden` alone means true).
pub fn parse_member_options(spec: &str) -> Result<MemberOptions, String> {
    let (id, options) = spec
        .split_once(':')
        .ok_or_else(|| format!("--member {spec}: expected ID:key=value,..."))?;
    let id = id
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("--member {spec}: '{id}' is not a member number"))?;
    let mut parsed = MemberOptions {
        id,
        ..MemberOptions::default()
    };
    for option in options.split(',').map(str::trim).filter(|option| !option.is_empty()) {
        let (key, value) = option.split_once('=').unwrap_or((option, "true"));
        match key {
            "priority" => {
                let priority = value
                    .parse::<f64>()
                    .map_err(|_| format!("--member {spec}: bad priority '{value}'"))?;
                parsed.priority = Some(priority);
            }
            "votes" => {
                let votes = value
                    .parse::<i32>()
                    .map_err(|_| format!("--member {spec}: bad votes '{value}'"))?;
                parsed.votes = Some(votes);
            }
            "hidden" => {
                parsed.hidden = value
                    .parse::<bool>()
                    .map_err(|_| format!("--member {spec}: bad hidden '{value}'"))?;
            }
            other => {
                return Err(format!(
                    "--member {spec}: unknown option '{other}' (priority, votes, hidden)"
                ))
            }
        }
    }
    Ok(parsed)
}

/// The timing settings of the set.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub election_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub chaining_allowed: bool,
}

/// The config document for `replSetInitiate`. A hidden or non-voting member
/// without an explicit priority gets priority 0, which the rules require;
/// an arbiter always has priority 0. The server validates the rest.
pub fn initiate_config(state: &ClusterState, options: &[MemberOptions], settings: Settings) -> Document {
    let members: Vec<Bson> = state
        .members
        .iter()
        .map(|member| {
            let mut entry = doc! {"_id": member.id as i32, "host": member.host()};
            if member.arbiter {
                entry.insert("arbiterOnly", true);
                entry.insert("priority", 0.0);
                return Bson::Document(entry);
            }
            if let Some(option) = options.iter().find(|option| option.id == member.id) {
                let needs_zero = option.hidden || option.votes == Some(0);
                if let Some(priority) = option.priority.or(needs_zero.then_some(0.0)) {
                    entry.insert("priority", priority);
                }
                if let Some(votes) = option.votes {
                    entry.insert("votes", votes);
                }
                if option.hidden {
                    entry.insert("hidden", true);
                }
            }
            Bson::Document(entry)
        })
        .collect();
    doc! {
        "_id": state.set_name.clone(),
        "members": members,
        "settings": {
            "electionTimeoutMillis": settings.election_timeout_ms as i64,
            "heartbeatIntervalMillis": settings.heartbeat_interval_ms as i64,
            "chainingAllowed": settings.chaining_allowed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::state::{MemberState, STATE_FORMAT};

    #[test]
    fn parses_member_options() {
        assert_eq!(
            parse_member_options("3:priority=0.5,votes=0,hidden").unwrap(),
            MemberOptions {
                id: 3,
                priority: Some(0.5),
                votes: Some(0),
                hidden: true
            }
        );
        assert_eq!(
            parse_member_options("2:hidden=false").unwrap(),
            MemberOptions {
                id: 2,
                ..Default::default()
            }
        );
        assert!(parse_member_options("priority=0").is_err());
        assert!(parse_member_options("x:priority=0").is_err());
        assert!(parse_member_options("1:priority=high").is_err());
        assert!(parse_member_options("1:slaveDelay=5")
            .unwrap_err()
            .contains("unknown option"));
    }

    #[test]
    fn config_names_every_member_with_its_options() {
        let member = |id: u32, arbiter| MemberState {
            id,
            port: 27016 + id as u16,
            pid: 1,
            dbpath: "/d".into(),
            logpath: "/l".into(),
            outpath: "/o".into(),
            arbiter,
            paused: false,
        };
        let state = ClusterState {
            format: STATE_FORMAT,
            set_name: "rs0".into(),
            binary: "/b".into(),
            serve_args: vec![],
            members: vec![member(1, false), member(2, false), member(3, true)],
            partition: None,
        };
        let options = [MemberOptions {
            id: 2,
            hidden: true,
            ..Default::default()
        }];
        let settings = Settings {
            election_timeout_ms: 1000,
            heartbeat_interval_ms: 200,
            chaining_allowed: false,
        };
        let config = initiate_config(&state, &options, settings);
        assert_eq!(
            config,
            doc! {
                "_id": "rs0",
                "members": [
                    {"_id": 1, "host": "127.0.0.1:27017"},
                    {"_id": 2, "host": "127.0.0.1:27018", "priority": 0.0, "hidden": true},
                    {"_id": 3, "host": "127.0.0.1:27019", "arbiterOnly": true, "priority": 0.0},
                ],
                "settings": {"electionTimeoutMillis": 1000_i64, "heartbeatIntervalMillis": 200_i64, "chainingAllowed": false},
            }
        );
    }
}
