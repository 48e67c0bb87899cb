//! Scenario scripts in `testdata/*.txt`, in the datadriven style of
//! etcd-io/raft's interaction tests: each block is a command, a `----`
//! line and the expected output (the full trace of delivered messages and
//! actions), ended by a blank line. `REWRITE=1 cargo test -p
//! slipstream-consensus --test scenarios` regenerates the expected output
//! when behaviour changes on purpose; review the diff.
//!
//! Commands:
//! - `add-members N [priorities=P,..] [arbiters=ID,..] [non-voters=ID,..]
//!   [chaining=false] [catch-up-timeout=MS] [takeover-delay=MS]`
//! - `tick IDS|all MS` advance those members' clocks and tick them
//! - `deliver [from=ID] [to=ID] [count=N]`, `drop [from=ID] [to=ID]`
//! - `stabilize` deliver until nothing is pending, dropping what a
//!   `block [from=ID] [to=ID] [kind=PullRequest]` rule matches (`unblock` clears)
//! - `partition 1,2 | 3,4,5`, `cut A B` (one link, both ways), `heal`,
//!   `crash ID`, `restart ID`
//! - `write ID [N]` client writes with w:"majority" tracked
//! - `step-down ID [force=true] [catch-up=MS] [step-down=MS]`
//! - `sync-from ID TARGET`, `status`
//! - `write-concern ID TERM:SECS.INC majority|N [wtimeout=MS] [started=MS]`
//! - `add-spare ID` a process outside the configuration, never initiated
//! - `reconfig ID [add=ID] [add-non-voter=ID] [remove=ID] [votes=ID:N]
//!   [priority=ID:P] [force=INCREMENT]` on member ID's configuration,
//!   version + 1 (force: the node raises it by INCREMENT)
//! - `freeze ID MS` (`replSetFreeze`; 0 unfreezes), `step-up ID`
//!   (`replSetStepUp`), `maintenance ID on|off` (`replSetMaintenance`)

use slipstream_consensus::simulation::{Cluster, Faults};
use slipstream_consensus::{
    Event, ForceReconfig, MemberConfig, MemberState, Millis, OpTime, ReplSetConfig, ShortOpTime, StepDownRequest,
    Timestamp, WriteConcern, W,
};
use std::collections::BTreeMap;
use std::path::Path;

struct Block {
    comments: Vec<String>,
    command: String,
    expected: String,
}

fn parse(text: &str) -> (Vec<Block>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut comments = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with('#') || line.trim().is_empty() {
            comments.push(line.to_string());
            continue;
        }
        let command = line.to_string();
        assert_eq!(lines.next(), Some("----"), "expected ---- after {command}");
        let mut expected = Vec::new();
        for out in lines.by_ref() {
            if out.is_empty() {
                break;
            }
            expected.push(out);
        }
        blocks.push(Block {
            comments: std::mem::take(&mut comments),
            command,
            expected: expected.join("\n"),
        });
    }
    (blocks, comments)
}

fn options(words: &[&str]) -> BTreeMap<String, String> {
    words
        .iter()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

fn ids(list: &str) -> Vec<u32> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.trim().parse().expect("member id"))
        .collect()
}

fn ms(word: &str) -> u64 {
    word.trim_end_matches("ms").parse().expect("milliseconds")
}

fn optime(word: &str) -> OpTime {
    let (t, ts) = word.split_once(':').expect("TERM:SECS.INC");
    let (secs, inc) = ts.split_once('.').expect("TERM:SECS.INC");
    OpTime::new(
        Timestamp::new(secs.parse().unwrap(), inc.parse().unwrap()),
        t.parse().unwrap(),
    )
}

/// `ID:VALUE`.
fn pair(word: &str) -> (u32, &str) {
    let (id, value) = word.split_once(':').expect("ID:VALUE");
    (id.parse().expect("member id"), value)
}

/// Member `id`'s configuration changed as `opts` say, version + 1.
fn reconfigured(c: &Cluster, id: u32, opts: &BTreeMap<String, String>) -> ReplSetConfig {
    let node = c.members[c.index(id)].node.as_ref().expect("running");
    let mut config = node.config().clone();
    config.version += 1;
    let host = |id: u32| c.members[c.index(id)].host.clone();
    if let Some(id) = opts.get("add") {
        let id = id.parse().unwrap();
        config.members.push(MemberConfig::new(id, host(id)));
    }
    if let Some(id) = opts.get("add-non-voter") {
        let id = id.parse().unwrap();
        config.members.push(MemberConfig {
            votes: 0,
            priority: 0.0,
            ..MemberConfig::new(id, host(id))
        });
    }
    if let Some(id) = opts.get("remove") {
        let id: u32 = id.parse().unwrap();
        config.members.retain(|m| m.id != id);
    }
    if let Some(word) = opts.get("votes") {
        let (id, votes) = pair(word);
        let m = config.members.iter_mut().find(|m| m.id == id).expect("member");
        m.votes = votes.parse().unwrap();
        m.priority = if m.votes > 0 { 1.0 } else { 0.0 };
    }
    if let Some(word) = opts.get("priority") {
        let (id, priority) = pair(word);
        config.members.iter_mut().find(|m| m.id == id).expect("member").priority = priority.parse().unwrap();
    }
    config
}

/// A standing rule that drops matching messages at delivery.
struct DeliveryBlock {
    from: Option<usize>,
    to: Option<usize>,
    kind: Option<String>,
}

struct Script {
    cluster: Option<Cluster>,
    blocks: Vec<DeliveryBlock>,
}

impl DeliveryBlock {
    fn matches(&self, envelope: &slipstream_consensus::simulation::Envelope) -> bool {
        self.from.is_none_or(|f| f == envelope.from)
            && self.to.is_none_or(|t| t == envelope.to)
            && self
                .kind
                .as_ref()
                .is_none_or(|k| envelope.payload.to_string().starts_with(k.as_str()))
    }
}

impl Script {
    fn cluster(&mut self) -> &mut Cluster {
        self.cluster.as_mut().expect("add-members first")
    }

    fn run(&mut self, command: &str) -> String {
        let words: Vec<&str> = command.split_whitespace().collect();
        let opts = options(&words);
        if let Some(c) = self.cluster.as_mut() {
            c.trace.clear();
        }
        let mut extra = Vec::new();
        match words[0] {
            "add-members" => {
                let n: u32 = words[1].parse().unwrap();
                let mut members: Vec<MemberConfig> =
                    (1..=n).map(|i| MemberConfig::new(i, format!("m{i}:27017"))).collect();
                if let Some(p) = opts.get("priorities") {
                    for (m, p) in members.iter_mut().zip(p.split(',')) {
                        m.priority = p.parse().unwrap();
                    }
                }
                for id in opts.get("arbiters").map(|s| ids(s)).unwrap_or_default() {
                    let m = &mut members[id as usize - 1];
                    m.arbiter_only = true;
                    m.priority = 0.0;
                }
                for id in opts.get("non-voters").map(|s| ids(s)).unwrap_or_default() {
                    let m = &mut members[id as usize - 1];
                    m.votes = 0;
                    m.priority = 0.0;
                }
                let mut config = ReplSetConfig::new("rs", members);
                config.settings.heartbeat_interval_ms = 1_000;
                config.settings.election_timeout_ms = 5_000;
                config.settings.catch_up_timeout_ms = Some(opts.get("catch-up-timeout").map_or(2_000, |v| ms(v)));
                config.settings.catch_up_takeover_delay_ms = Some(opts.get("takeover-delay").map_or(30_000, |v| ms(v)));
                config.settings.chaining_allowed = opts.get("chaining").is_none_or(|v| v != "false");
                self.cluster = Some(Cluster::new(config, 0, Faults::default(), true));
                extra = self.cluster().status();
            }
            "tick" => {
                let c = self.cluster();
                let which: Vec<usize> = if words[1] == "all" {
                    (0..c.members.len()).collect()
                } else {
                    ids(words[1]).into_iter().map(|id| c.index(id)).collect()
                };
                let step = ms(words[2]);
                for i in which {
                    c.members[i].clock += step;
                    c.step(i, Event::Tick { election_jitter_ms: 0 });
                }
            }
            "deliver" | "drop" => {
                let c = self.cluster();
                let from = opts.get("from").map(|v| c.index(v.parse().unwrap()));
                let to = opts.get("to").map(|v| c.index(v.parse().unwrap()));
                let mut count = opts.get("count").map_or(usize::MAX, |v| v.parse().unwrap());
                let pending: Vec<_> = c.pending.drain(..).collect();
                for envelope in pending {
                    let matches = from.is_none_or(|f| f == envelope.from) && to.is_none_or(|t| t == envelope.to);
                    if matches && count > 0 {
                        count -= 1;
                        if words[0] == "deliver" {
                            c.deliver(envelope);
                        } else {
                            let (a, b) = (c.members[envelope.from].id, c.members[envelope.to].id);
                            c.trace.push(format!("dropped {a}->{b}: {}", envelope.payload));
                        }
                    } else {
                        c.pending.push_back(envelope);
                    }
                }
            }
            "stabilize" => {
                let blocks = std::mem::take(&mut self.blocks);
                let c = self.cluster();
                for _ in 0..slipstream_consensus::simulation::cluster::STABILIZE_ROUNDS_MAX {
                    let Some(envelope) = c.pending.pop_front() else { break };
                    if blocks.iter().any(|b| b.matches(&envelope)) {
                        let (a, b) = (c.members[envelope.from].id, c.members[envelope.to].id);
                        c.trace.push(format!("blocked {a}->{b}: {}", envelope.payload));
                        continue;
                    }
                    c.deliver(envelope);
                }
                self.blocks = blocks;
            }
            "block" => {
                let c = self.cluster();
                let from = opts.get("from").map(|v| c.index(v.parse().unwrap()));
                let to = opts.get("to").map(|v| c.index(v.parse().unwrap()));
                let kind = opts.get("kind").cloned();
                self.blocks.push(DeliveryBlock { from, to, kind });
            }
            "unblock" => self.blocks.clear(),
            "partition" => {
                let c = self.cluster();
                let text = words[1..].join(" ");
                let groups: Vec<Vec<usize>> = text
                    .split('|')
                    .map(|g| ids(g.trim()).into_iter().map(|id| c.index(id)).collect())
                    .collect();
                c.partition(&groups);
            }
            "heal" => self.cluster().heal(),
            "cut" => {
                let c = self.cluster();
                let (a, b) = (c.index(words[1].parse().unwrap()), c.index(words[2].parse().unwrap()));
                c.link[a][b] = false;
                c.link[b][a] = false;
            }
            "crash" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                c.crash(i);
            }
            "restart" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                c.restart(i);
            }
            "write" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let n: usize = words.get(2).map_or(1, |v| v.parse().unwrap());
                for _ in 0..n {
                    match c.client_write(i, true) {
                        Some(o) => c.trace.push(format!("write at {} -> {}", words[1], ShortOpTime(o))),
                        None => c.trace.push(format!("write at {} -> NotWritablePrimary", words[1])),
                    }
                }
            }
            "step-down" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let request = StepDownRequest {
                    step_down_ms: opts.get("step-down").map_or(60_000, |v| ms(v)),
                    secondary_catch_up_period_ms: opts.get("catch-up").map_or(10_000, |v| ms(v)),
                    force: opts.get("force").is_some_and(|v| v == "true"),
                };
                c.step(i, Event::StepDown(request));
            }
            "sync-from" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let member = Some(words[2].parse().unwrap());
                c.step(i, Event::SyncFrom { member });
            }
            "status" => extra = self.cluster().status(),
            "add-spare" => {
                let c = self.cluster();
                let id: u32 = words[1].parse().unwrap();
                c.add_spare(id, format!("m{id}:27017"));
                extra = c.status();
            }
            "reconfig" => {
                let c = self.cluster();
                let id: u32 = words[1].parse().unwrap();
                let config = reconfigured(c, id, &opts);
                let force = opts.get("force").map(|v| ForceReconfig {
                    version_increment: v.parse().unwrap(),
                });
                let i = c.index(id);
                c.step(i, Event::Reconfig { config, force, answered: Vec::new() });
            }
            "freeze" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let until = Millis(c.members[i].clock + ms(words[2]));
                c.step(i, Event::Freeze { until });
            }
            "step-up" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                c.step(i, Event::StepUpRequest);
            }
            "maintenance" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let state = if words[2] == "on" {
                    MemberState::Recovering
                } else {
                    MemberState::Secondary
                };
                c.step(i, Event::ReportState(state));
            }
            "write-concern" => {
                let c = self.cluster();
                let i = c.index(words[1].parse().unwrap());
                let w = if words[3] == "majority" {
                    W::Majority
                } else {
                    W::Nodes(words[3].parse().unwrap())
                };
                let concern = WriteConcern {
                    w,
                    journal: false,
                    wtimeout_ms: opts.get("wtimeout").map(|v| ms(v)),
                };
                let started = Millis(opts.get("started").map_or(0, |v| ms(v)));
                let node = c.members[i].node.as_ref().expect("alive");
                let now = Millis(c.members[i].clock);
                extra.push(format!(
                    "{:?}",
                    node.evaluate_write_concern(optime(words[2]), &concern, started, now)
                ));
            }
            other => panic!("unknown command {other}"),
        }
        let c = self.cluster();
        c.check_global_invariants();
        let mut out: Vec<String> = c.trace.drain(..).collect();
        out.extend(extra);
        out.extend(c.checker.violations.drain(..).map(|v| format!("VIOLATION {v}")));
        if out.is_empty() {
            "ok".to_string()
        } else {
            out.join("\n")
        }
    }
}

fn run_file(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let (blocks, trailing) = parse(&text);
    let mut script = Script {
        cluster: None,
        blocks: Vec::new(),
    };
    let rewrite = std::env::var("REWRITE").is_ok_and(|v| v == "1");
    let mut rewritten = String::new();
    let mut failures = Vec::new();
    for block in &blocks {
        let actual = script.run(&block.command);
        assert!(
            !actual.contains("VIOLATION"),
            "{}: {}\n{actual}",
            path.display(),
            block.command
        );
        for c in &block.comments {
            rewritten.push_str(c);
            rewritten.push('\n');
        }
        rewritten.push_str(&format!("{}\n----\n{actual}\n\n", block.command));
        if actual != block.expected {
            failures.push(format!(
                "{}: `{}`\n--- expected\n{}\n--- actual\n{actual}",
                path.display(),
                block.command,
                block.expected
            ));
        }
    }
    for c in &trailing {
        if !c.trim().is_empty() {
            rewritten.push_str(c);
            rewritten.push('\n');
        }
    }
    if rewrite {
        std::fs::write(path, rewritten.trim_end().to_string() + "\n").unwrap();
        return;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

macro_rules! scenario {
    ($name:ident) => {
        #[test]
        fn $name() {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata")
                .join(concat!(stringify!($name), ".txt"));
            run_file(&path);
        }
    };
}

scenario!(election_basic);
scenario!(figure2_stale_primary);
scenario!(chain_update_position);
scenario!(priority_takeover);
scenario!(lagging_priority_dry_run);
scenario!(election_handoff);
scenario!(catch_up_preserves_entries);
scenario!(arbiter_psa);
scenario!(non_voting_members);
scenario!(catch_up_takeover);
scenario!(partial_partition_stuck_member);
scenario!(reconfig_add_member);
scenario!(reconfig_not_committed);
scenario!(config_propagation);
scenario!(removed_member);
scenario!(freeze);
scenario!(step_up_request);
scenario!(single_node);
scenario!(new_term_postpones_election);
