//! The replication commands a member runs (the server's `replSet*` rows
//! call `Topology::run_command`): the administrator's (`replSetInitiate`,
//! `replSetGetConfig`, `replSetReconfig`, `replSetGetStatus`,
//! `replSetStepDown`, `replSetStepUp`, `replSetFreeze`, `replSetSyncFrom`,
//! `replSetMaintenance`, `replSetGetRBID`, `appendOplogNote`) and the three
//! members send each other (`replSetHeartbeat`, `replSetRequestVotes`,
//! `replSetUpdatePosition`), and `replSetInitialSyncHold`, with which a
//! member in initial sync leases its begin point on its source's oplog,
//! and `replSetCheckpointCopy`, with which it copies the source's
//! checkpoint file.
//! Replies are the fields without `ok`.

use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use slipstream_consensus::config::{MemberConfig, MemberId, ReplSetConfig};
use slipstream_consensus::{Event, ForceReconfig, MemberState, Message, StepDownRequest};

use crate::config_document::{
    client_config_document, keep_replica_set_id, mark_newly_added, parse_config, parse_reconfig, refuse_newly_added,
};
use crate::coordinator::Input;
use crate::error::ReplError;
use crate::heartbeat_sender::fetch_initial_config;
use crate::noop_writer::write_note;
use crate::protocol::{
    decode_heartbeat_request, decode_update_position, decode_vote_request, encode_heartbeat_reply,
    encode_heartbeat_request, encode_vote_response, integral, HeartbeatReply, UNINITIALIZED_CONFIG_VERSION,
};
use crate::replica_set::{ReplicaSet, RECONFIG_COMMIT_POLL_MS, RECONFIG_COMMIT_WAIT_MS_DEFAULT};

/// Longest `replSetInitiate` waits for each other member to answer.
pub const INITIATE_CHECK_TIMEOUT_MS: u64 = 10_000;
/// MongoDB's `replSetStepDown` default (seconds).
pub const STEP_DOWN_SECS_DEFAULT: u64 = 60;
/// MongoDB's `secondaryCatchUpPeriodSecs` default.
pub const STEP_DOWN_CATCH_UP_SECS_DEFAULT: u64 = 10;

pub async fn run(set: &ReplicaSet, name: &str, body: &Document) -> Result<Document, ReplError> {
    match name {
        "replSetInitiate" => initiate(set, body).await,
        "replSetGetConfig" => get_config(set, body),
        "replSetReconfig" => reconfig(set, body).await,
        "replSetGetStatus" => get_status(set, body),
        "replSetStepDown" => step_down(set, body).await,
        "replSetStepUp" => step_up(set, body).await,
        "replSetFreeze" => freeze(set, body).await,
        "replSetSyncFrom" => sync_from(set, body).await,
        "replSetMaintenance" => maintenance(set, body).await,
        "replSetGetRBID" => initialized(set).map(|_| doc! {"rbid": set.shared().rbid()}),
        "appendOplogNote" => append_oplog_note(set, body).await,
        "replSetHeartbeat" => heartbeat(set, body).await,
        "replSetRequestVotes" => request_votes(set, body).await,
        "replSetUpdatePosition" => update_position(set, body).await,
        "replSetInitialSyncHold" => crate::initial_sync::oplog_hold::serve(set.shared(), body),
        "replSetCheckpointCopy" => crate::initial_sync::checkpoint_copy::serve(set.shared(), body).await,
        other => Err(ReplError::CommandNotSupported(format!("{other} is not supported"))),
    }
}

fn initialized(set: &ReplicaSet) -> Result<ReplSetConfig, ReplError> {
    set.shared()
        .snapshot()
        .config
        .as_deref()
        .cloned()
        .ok_or(ReplError::NotYetInitialized)
}

async fn initiate(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let shared = set.shared();
    if shared.snapshot().config.is_some() {
        return Err(ReplError::AlreadyInitialized);
    }
    // No configuration (an empty one, or any value that is not a
    // document, as `rs.initiate()` and `{replSetInitiate: 1}` send): a
    // one-member set of this node, as MongoDB makes.
    let document = match body.get("replSetInitiate") {
        Some(Bson::Document(document)) if !document.is_empty() => document.clone(),
        _ => doc! {
            "_id": shared.options.set_name.clone(),
            "members": [{"_id": 0, "host": format!("localhost:{}", shared.options.port)}],
        },
    };
    refuse_newly_added(&document)?;
    // A set starts at version 1 of its configuration, in term 0. MongoDB's
    // `validateConfigForInitiate` finds these (and the member checks
    // below) and `replSetInitiate` answers them all as
    // InvalidReplicaSetConfig (93), with the check's reason.
    if let Some(version) = document.get("version").filter(|version| integral(version) != Some(1)) {
        return Err(ReplError::InvalidReplicaSetConfig(format!(
            "Configuration used to initiate a replica set must have version 1, but found {version}"
        )));
    }
    if let Some(term) = document.get("term").filter(|term| integral(term) != Some(0)) {
        return Err(ReplError::InvalidReplicaSetConfig(format!(
            "Configuration used to initiate a replica set must have term 0, but found {term}"
        )));
    }
    let mut config = parse_config(&document)?;
    config.term = 0;
    config.settings.replica_set_id.get_or_insert_with(|| bson::oid::ObjectId::new().bytes());
    if config.set_name != shared.options.set_name {
        return Err(ReplError::InvalidReplicaSetConfig(format!(
            "Attempting to initiate a replica set with name {}, but command line reports {}; rejecting",
            config.set_name, shared.options.set_name
        )));
    }
    let mine: Vec<&MemberConfig> = config.members.iter().filter(|member| shared.is_me(&member.host)).collect();
    let me = match mine.as_slice() {
        [] => {
            return Err(ReplError::InvalidReplicaSetConfig(format!(
                "No host described in new configuration with {{version: 1, term: 0}} for replica set {} maps to \
                 this node",
                config.set_name
            )))
        }
        [me] => me.id,
        [first, .., last] => {
            // Two spellings of this node (`localhost:P` and `127.0.0.1:P`)
            // make a set whose elections count this node twice and never
            // finish.
            return Err(ReplError::InvalidReplicaSetConfig(format!(
                "The hosts {} and {} all map to this node in new configuration with {{version: 1, term: 0}} for \
                 replica set {}",
                first.host, last.host, config.set_name
            )));
        }
    };
    check_members_uninitialized(set, &config, me).await?;
    *shared.me_host.write() = config.member(me).expect("found above").host.clone();
    if shared.engine.last_applied().is_null() {
        // The set's first entry, as MongoDB writes it, before any term.
        shared
            .engine
            .open_write_gate_with_noop(slipstream_clock::UNINITIALIZED_TERM, "initiating set")?;
        shared.engine.set_write_gate(slipstream_storage::WriteGate::Closed);
    }
    set.ask(|reply| Input::Initiate { config, me, reply }).await??;
    Ok(Document::new())
}

/// MongoDB's checks of each `replSetUpdatePosition` entry: its `cfgver`
/// is our configuration's version (93 InvalidReplicaSetConfig otherwise: a
/// position reported under another configuration may name another member
/// by the same id), and its member is in our configuration (74
/// NodeNotFound). Positions of a command that fails a check are not used.
fn check_positions_in_config(body: &Document, config: &ReplSetConfig) -> Result<(), ReplError> {
    let Some(Bson::Array(entries)) = body.get("optimes") else { return Ok(()) };
    for entry in entries.iter().filter_map(Bson::as_document) {
        let member = entry.get("memberId").and_then(integral).unwrap_or(-1);
        let version = match entry.get("cfgver").and_then(integral) {
            Some(version) => version,
            None => return Err(ReplError::failed_to_parse("replSetUpdatePosition entry needs cfgver (a number)")),
        };
        if version != config.version {
            return Err(ReplError::InvalidReplicaSetConfig(format!(
                "Received replSetUpdatePosition for node with memberId {member} whose config version of {version} \
                 doesn't match our config version of {}",
                config.version
            )));
        }
        if !config.members.iter().any(|m| i64::from(m.id) == member) {
            return Err(ReplError::NodeNotFound(format!(
                "Received replSetUpdatePosition for node with memberId {member} which doesn't exist in our config"
            )));
        }
    }
    Ok(())
}

/// The heartbeat of a quorum check (initiate, reconfig): from a member
/// without a configuration, so that the answer says only whether the
/// target is up and what it holds.
fn quorum_probe() -> slipstream_consensus::Heartbeat {
    slipstream_consensus::Heartbeat {
        term: 0,
        config_version: UNINITIALIZED_CONFIG_VERSION,
        config_term: -1,
        state: MemberState::Startup,
        last_applied: slipstream_clock::OpTime::NULL,
        last_applied_wall_ms: 0,
        last_durable: slipstream_clock::OpTime::NULL,
        last_durable_wall_ms: 0,
        commit_point: slipstream_clock::OpTime::NULL,
        sync_source: None,
    }
}

/// MongoDB's initiate quorum check: every other member answers, and none
/// already belongs to a set.
async fn check_members_uninitialized(set: &ReplicaSet, config: &ReplSetConfig, me: MemberId) -> Result<(), ReplError> {
    let shared = set.shared();
    let probe = quorum_probe();
    let host = config.member(me).expect("me is in the configuration").host.clone();
    for member in config.members.iter().filter(|m| m.id != me) {
        let body = encode_heartbeat_request(&config.set_name, &host, None, &probe);
        let timeout = Duration::from_millis(INITIATE_CHECK_TIMEOUT_MS);
        match shared.network.run(&member.host, "admin", body, timeout).await {
            Err(crate::network::NetError::Command { code: 94, .. }) => {}
            Ok(reply) => {
                return Err(ReplError::coded(
                    74,
                    format!(
                        "replSetInitiate quorum check failed: {} already has a replica set configuration ({})",
                        member.host,
                        reply.get_str("set").unwrap_or("?")
                    ),
                ))
            }
            Err(err) => {
                return Err(ReplError::NodeNotFound(format!(
                    "replSetInitiate quorum check failed because not all proposed set members responded \
                     affirmatively: {} failed with {err}",
                    member.host
                )))
            }
        }
    }
    Ok(())
}

fn get_config(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let config = initialized(set)?;
    let document = client_config_document(&config);
    if bool_option(body, "commitmentStatus")? {
        // Only a primary tracks who holds its configuration.
        let snapshot = set.shared().snapshot();
        if !snapshot.writable_primary {
            return Err(ReplError::coded(10107, "commitmentStatus is only supported on primary."));
        }
        return Ok(doc! {"config": document, "commitmentStatus": snapshot.config_committed});
    }
    Ok(doc! {"config": document})
}

/// A boolean option as MongoDB's `bsonExtractBooleanFieldWithDefault`
/// reads one: a boolean or a number (non-zero is true), false when absent.
fn bool_option(body: &Document, name: &str) -> Result<bool, ReplError> {
    match body.get(name) {
        None => Ok(false),
        Some(Bson::Boolean(on)) => Ok(*on),
        Some(Bson::Int32(n)) => Ok(*n != 0),
        Some(Bson::Int64(n)) => Ok(*n != 0),
        Some(Bson::Double(n)) => Ok(*n != 0.0),
        Some(_) => Err(ReplError::type_mismatch(format!("Expected boolean or number type for field \"{name}\""))),
    }
}

/// With `initialSyncStatus` while an initial sync runs (or after one,
/// with `initialSync: 1`), as MongoDB's.
fn get_status(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let mut reply = crate::report::status_document(&set.shared().report_snapshot())?;
    reply.insert("oplogWindow", crate::oplog_window::window_document(&set.shared().engine));
    if let Some(last) = set.shared().rollback.last() {
        reply.insert("lastRollback", crate::rollback::status_document(&last));
    }
    let asked = bool_option(body, "initialSync")?;
    if let Some(initial_sync) = set.shared().initial_sync.document(asked) {
        reply.insert("initialSyncStatus", initial_sync);
    }
    Ok(reply)
}

async fn reconfig(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    initialized(set)?;
    let document = match body.get("replSetReconfig") {
        Some(Bson::Document(document)) => document,
        _ => {
            return Err(ReplError::type_mismatch(
                "replSetReconfig takes a configuration document",
            ))
        }
    };
    // maxTimeMS bounds both waits below together, as it bounds MongoDB's command.
    let deadline = reconfig_deadline(body);
    refuse_newly_added(document)?;
    let mut config = parse_reconfig(document)?;
    keep_replica_set_id(&initialized(set)?, &mut config)?;
    check_self_in(set, &config)?;
    let force = matches!(body.get("force"), Some(Bson::Boolean(true)));
    let force = if force {
        // MongoDB adds 10,000 plus a random number below 100,000.
        let random = set.shared().started.elapsed().as_nanos() as i64 % 100_000;
        let current = set.shared().snapshot().config.as_ref().map_or(0, |config| config.version);
        if current.max(config.version) + 10_000 + random > i64::from(i32::MAX) {
            return Err(ReplError::InvalidReplicaSetConfig(format!(
                "a force reconfig raises the version past {} (an int's largest)",
                i32::MAX
            )));
        }
        Some(ForceReconfig {
            version_increment: 10_000 + random,
        })
    } else {
        wait_config_committed(set, deadline).await?;
        // A force reconfig takes the configuration as sent: it exists to
        // rescue a set, whose new voters must count at once.
        mark_newly_added(&initialized(set)?, &mut config);
        None
    };
    let answered = if force.is_none() { probe_new_members(set, &config).await? } else { Vec::new() };
    let version = config.version;
    set.ask(|reply| Input::Command {
        event: Event::Reconfig { config, force, answered },
        reply,
    })
    .await??;
    if force.is_none() {
        wait_new_config_committed(set, version, deadline).await?;
    }
    Ok(Document::new())
}

/// MongoDB's reconfig quorum check heartbeats the new configuration's
/// members. This node already tracks the ones it configures; the members
/// new to it, or at a new host, are asked here, all at once, within the
/// silence limit: the voters among them that answer (a configured member
/// of our set, or one not yet initialized) count as up. Without this a
/// voter could not be added when the set needed it for the quorum (a
/// one-member set growing, a fourth voter while one of three is down). A
/// member of another set vetoes the reconfig (103), as MongoDB's quorum
/// checker does: a mistyped host would sit in the configuration forever.
async fn probe_new_members(set: &ReplicaSet, config: &ReplSetConfig) -> Result<Vec<MemberId>, ReplError> {
    let shared = set.shared();
    let snapshot = shared.snapshot();
    let Some(current) = snapshot.config.as_deref() else { return Ok(Vec::new()) };
    let me = shared.find_self(current);
    let probe = quorum_probe();
    let timeout = Duration::from_millis(current.settings.silence_limit_ms());
    let my_host = shared.me_host.read().clone();
    let mut probes = tokio::task::JoinSet::new();
    for member in config.members.iter().filter(|m| Some(m.id) != me) {
        if current.member(member.id).is_some_and(|known| known.host == member.host) {
            continue;
        }
        let body = encode_heartbeat_request(&config.set_name, &my_host, None, &probe);
        let (shared, id, host, set_name) = (shared.clone(), member.id, member.host.clone(), config.set_name.clone());
        let voter = member.is_voter();
        probes.spawn(async move {
            let outcome = match shared.network.run(&host, "admin", body, timeout).await {
                Ok(reply) if reply.get_str("set").unwrap_or(&set_name) == set_name => Probed::Up,
                Ok(_) | Err(crate::network::NetError::Command { code: 108, .. }) => Probed::Foreign,
                Err(crate::network::NetError::Command { code: 94, .. }) => Probed::Up,
                _ => Probed::Silent,
            };
            (id, host, voter, outcome)
        });
    }
    let mut answered = Vec::new();
    let mut foreign = None;
    while let Some(outcome) = probes.join_next().await {
        match outcome {
            Ok((id, _, true, Probed::Up)) => answered.push(id),
            Ok((_, host, _, Probed::Foreign)) => foreign = Some(host),
            _ => {}
        }
    }
    if let Some(host) = foreign {
        return Err(ReplError::NewReplicaSetConfigurationIncompatible(format!(
            "Our set name did not match that of {host}: it is a member of another replica set"
        )));
    }
    Ok(answered)
}

/// What a new member said to the reconfig's heartbeat.
enum Probed {
    /// A member of this set, or one with no configuration yet.
    Up,
    /// A member of another set.
    Foreign,
    /// No answer, or one that says nothing of its set.
    Silent,
}

/// After a safe reconfig MongoDB answers once a majority of the new
/// configuration's voters hold it (`awaitConfigCommitment`), so that an
/// `ok` means the configuration stays whatever member wins next; until
/// `maxTimeMS` (or `RECONFIG_COMMIT_WAIT_MS_DEFAULT`). A member that stops
/// being primary before it sees the commitment (cut off from the others,
/// or deposed) fails with PrimarySteppedDown (189), as MongoDB's wait is
/// interrupted then: an `ok` there was a configuration no other member
/// had, which the next primary's replaced (found by probing from outside).
async fn wait_new_config_committed(set: &ReplicaSet, version: i64, deadline: Instant) -> Result<(), ReplError> {
    loop {
        let snapshot = set.shared().snapshot();
        let current = snapshot.config.as_ref().map_or(0, |config| config.version);
        if current > version || (current == version && snapshot.config_committed) {
            return Ok(());
        }
        if !snapshot.writable_primary {
            return Err(ReplError::PrimarySteppedDown);
        }
        if Instant::now() >= deadline {
            return Err(ReplError::coded(
                50,
                format!(
                    "Reconfig finished but failed to propagate to a majority: version {version} is not held by a \
                     majority of its voters within the time limit"
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(RECONFIG_COMMIT_POLL_MS)).await;
    }
}

/// `maxTimeMS` from the command's start, or `RECONFIG_COMMIT_WAIT_MS_DEFAULT`
/// without one.
fn reconfig_deadline(body: &Document) -> Instant {
    let wait_ms = body.get("maxTimeMS").and_then(integral).filter(|ms| *ms > 0);
    Instant::now() + Duration::from_millis(wait_ms.map_or(RECONFIG_COMMIT_WAIT_MS_DEFAULT, |ms| ms as u64))
}

/// The new configuration names this member, once, by a host that is ours
/// and under the `_id` it has now (MongoDB's `findSelfInConfig` in
/// `validateConfigForReconfig`, 103): a primary whose own entry moved to
/// another host would advertise a `me` and `primary` that no driver can
/// reach, and the core finds itself by `_id` alone.
fn check_self_in(set: &ReplicaSet, config: &ReplSetConfig) -> Result<(), ReplError> {
    let shared = set.shared();
    let incompatible = |why: String| {
        ReplError::NewReplicaSetConfigurationIncompatible(format!(
            "{why} in the new configuration version {} for replica set {}",
            config.version, config.set_name
        ))
    };
    let mine: Vec<_> = config.members.iter().filter(|member| shared.is_me(&member.host)).collect();
    let me = match mine.as_slice() {
        [] => return Err(incompatible(format!("No host maps to this node ({})", shared.me_host()))),
        [me] => me,
        _ => return Err(incompatible("Found multiple hosts that map to this node".into())),
    };
    match shared.snapshot().me {
        Some(current) if current != me.id => Err(incompatible(format!(
            "This node's _id is {current}, not {}, as host {}",
            me.id, me.host
        ))),
        _ => Ok(()),
    }
}

/// MongoDB first waits (up to `maxTimeMS`) until the configuration in
/// force is committed.
async fn wait_config_committed(set: &ReplicaSet, deadline: Instant) -> Result<(), ReplError> {
    loop {
        let result = set.ask(|reply| Input::CheckReconfig { reply }).await?;
        match result {
            Err(ReplError::BadArgument { code: 308, .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(RECONFIG_COMMIT_POLL_MS)).await;
            }
            other => return other,
        }
    }
}

/// A count of seconds, at most an int's worth (as MongoDB's
/// `safeNumberInt` clamps): in milliseconds past the node's clock, a
/// larger one overflowed (a panic caught as an internal error).
/// A count of seconds as MongoDB's `bsonExtractIntegerField` reads it:
/// absent is the default, a value that is not a number (null too) is
/// TypeMismatch, a number without an exact integer value is BadValue.
fn seconds(body: &Document, name: &str, default: u64) -> Result<u64, ReplError> {
    let Some(value) = body.get(name) else {
        return Ok(default);
    };
    match integral(value) {
        Some(secs) if secs >= 0 => Ok((secs as u64).min(i32::MAX as u64)),
        Some(_) => Err(ReplError::bad_value(format!("{name} must be non-negative"))),
        None if matches!(value, Bson::Double(_) | Bson::Decimal128(_)) => Err(ReplError::bad_value(format!(
            "Expected field \"{name}\" to have a value exactly representable as a 64-bit integer, but found {value}"
        ))),
        None => Err(ReplError::type_mismatch(format!("\"{name}\" had the wrong type. Expected number, found {value}"))),
    }
}

/// BSON's truth value, as MongoDB's `trueValue()`: false, 0, null and
/// undefined are false; everything else is true.
fn truth_value(value: &Bson) -> bool {
    match value {
        Bson::Boolean(b) => *b,
        Bson::Int32(n) => *n != 0,
        Bson::Int64(n) => *n != 0,
        Bson::Double(n) => *n != 0.0,
        Bson::Decimal128(n) => !n.to_string().parse::<f64>().is_ok_and(|n| n == 0.0),
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// MongoDB's `numberInt()` of the command's value: a number truncated
/// toward zero (and clamped to int32), anything else 0.
fn number_int(value: Option<&Bson>) -> i64 {
    let n = match value {
        Some(Bson::Int32(n)) => f64::from(*n),
        Some(Bson::Int64(n)) => *n as f64,
        Some(Bson::Double(n)) if n.is_finite() => *n,
        Some(Bson::Decimal128(n)) => n.to_string().parse::<f64>().ok().filter(|n| n.is_finite()).unwrap_or(0.0),
        _ => 0.0,
    };
    n.trunc().clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i64
}

async fn step_down(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    initialized(set)?;
    // MongoDB: 0 means the default period; `force` is read as a truth
    // value and, when set, waits for no secondary unless told to.
    // The period is read as MongoDB's `numberLong()` reads it: a double is
    // truncated, anything that is not a number is 0 (the default), and
    // what is left must be positive.
    let step_down_secs = match body.get("replSetStepDown") {
        Some(Bson::Double(secs)) if secs.is_finite() => secs.trunc() as i64,
        Some(value) => integral(value).unwrap_or(0),
        None => 0,
    };
    let step_down_secs = match step_down_secs {
        0 => STEP_DOWN_SECS_DEFAULT,
        secs if secs < 0 => return Err(ReplError::bad_value("stepdown period must be a positive integer")),
        secs => (secs as u64).min(i32::MAX as u64),
    };
    let force = body.get("force").is_some_and(truth_value);
    let catch_up_default = if force { 0 } else { STEP_DOWN_CATCH_UP_SECS_DEFAULT };
    let catch_up_secs = seconds(body, "secondaryCatchUpPeriodSecs", catch_up_default)?;
    if step_down_secs < catch_up_secs {
        return Err(ReplError::bad_value(
            "stepdown period must be longer than secondaryCatchUpPeriodSecs",
        ));
    }
    let request = StepDownRequest {
        step_down_ms: step_down_secs * 1000,
        secondary_catch_up_period_ms: catch_up_secs * 1000,
        force,
    };
    set.ask(|reply| Input::Command {
        event: Event::StepDown(request),
        reply,
    })
    .await??;
    Ok(Document::new())
}

async fn step_up(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    initialized(set)?;
    let skip_dry_run = match body.get("skipDryRun") {
        None => false,
        Some(Bson::Boolean(skip)) => *skip,
        Some(other) => {
            return Err(ReplError::type_mismatch(format!(
                "BSON field 'replSetStepUp.skipDryRun' is the wrong type '{}', expected type 'bool'",
                slipstream_query::compare::type_name(other)
            )))
        }
    };
    // Election handoff from a stepping-down primary, which names itself
    // (`fromId`) and its term and does not wait for the outcome. A client's
    // `skipDryRun: true` waits for the election like any step-up and
    // answers whether it was won, as MongoDB's `stepUpIfEligible` does.
    if let (true, Some(from)) = (skip_dry_run, body.get("fromId")) {
        let from = integral(from).map_or(u32::MAX, |id| id as MemberId);
        let term = crate::protocol::check_term(body.get("term").and_then(integral).unwrap_or(0), "term")?;
        let message = Message::StepUp { term };
        set.ask(|reply| Input::Receive {
            from,
            from_host: None,
            message,
            reply,
        })
        .await?;
        return Ok(Document::new());
    }
    set.ask(|reply| Input::Command {
        event: Event::StepUpRequest,
        reply,
    })
    .await??;
    Ok(Document::new())
}

async fn freeze(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    initialized(set)?;
    // MongoDB reads the seconds with `numberInt()`: 2.5 is 2, a string
    // or a boolean is 0 (unfreeze); a negative count freezes until a time
    // already past.
    let secs = number_int(body.get("replSetFreeze"));
    let until = set.shared().now().plus(secs.max(0) as u64 * 1000);
    set.ask(|reply| Input::Command {
        event: Event::Freeze { until },
        reply,
    })
    .await??;
    match secs {
        0 => Ok(doc! {"info": "unfreezing"}),
        1 => Ok(doc! {"warning": "you really want to freeze for only 1 second?"}),
        _ => Ok(Document::new()),
    }
}

/// `replSetSyncFrom`, refused as MongoDB's `prepareSyncFromResponse`
/// refuses it, in its order: an arbiter or a primary does not sync; the
/// target must be another configured member that holds data, builds
/// indexes as this one does, votes if this one votes, and is reachable.
async fn sync_from(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let config = initialized(set)?;
    let host = match body.get("replSetSyncFrom") {
        Some(Bson::String(host)) => host.clone(),
        _ => return Err(ReplError::type_mismatch("replSetSyncFrom takes a host:port string")),
    };
    let snapshot = set.shared().snapshot();
    let me = snapshot.me.and_then(|me| config.member(me));
    if me.is_some_and(|me| me.arbiter_only) {
        return Err(ReplError::coded(95, "arbiters don't sync"));
    }
    if snapshot.state == MemberState::Primary {
        return Err(ReplError::coded(95, "primaries don't sync"));
    }
    let member = config
        .members
        .iter()
        .find(|m| m.host == host)
        .ok_or_else(|| ReplError::NodeNotFound(format!("Could not find member \"{host}\" in replica set")))?;
    if snapshot.me == Some(member.id) {
        return Err(ReplError::invalid_options("I cannot sync from myself"));
    }
    if member.arbiter_only {
        return Err(ReplError::invalid_options(format!("Cannot sync from \"{host}\" because it is an arbiter")));
    }
    if me.is_some_and(|me| me.is_voter()) && !member.is_voter() {
        return Err(ReplError::invalid_options(format!("Cannot sync from \"{host}\" because it is not a voter")));
    }
    if snapshot.members.iter().any(|view| view.id == member.id && !view.health) {
        return Err(ReplError::coded(6, format!("I cannot reach the requested member: {host}")));
    }
    let previous = snapshot.sync_source.and_then(|s| config.member(s)).map(|m| m.host.clone());
    let event = Event::SyncFrom {
        member: Some(member.id),
    };
    set.ask(|reply| Input::Command { event, reply }).await??;
    let mut reply = doc! {"syncFromRequested": host};
    if let Some(previous) = previous {
        reply.insert("prevSyncTarget", previous);
    }
    Ok(reply)
}

/// `replSetMaintenance`, as MongoDB's `setMaintenanceMode`: refused while
/// running for election or primary (the node says which); otherwise a
/// counter of calls in force, RECOVERING from the first `true` until the
/// matching last `false`.
async fn maintenance(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    initialized(set)?;
    // MongoDB reads the value with `trueValue()` (a string is true).
    let on = match body.get("replSetMaintenance") {
        Some(value) => truth_value(value),
        None => return Err(ReplError::type_mismatch("replSetMaintenance takes a boolean")),
    };
    let shared = set.shared();
    let mut calls = shared.maintenance_calls.lock().await;
    let snapshot = shared.snapshot();
    if !snapshot.in_maintenance && snapshot.state != MemberState::Arbiter {
        // Left by another way (an initial sync, a resync): no call in force.
        // An arbiter never shows the mode but counts the calls, as MongoDB's.
        *calls = 0;
    }
    let report = |state| async move {
        set.ask(|reply| Input::Command {
            event: Event::ReportState(state),
            reply,
        })
        .await?
    };
    if on {
        if *calls == 0 {
            report(MemberState::Recovering).await?;
        }
        *calls += 1;
    } else if *calls == 0 && snapshot.state != MemberState::Primary {
        return Err(ReplError::coded(96, "already out of maintenance mode"));
    } else if *calls <= 1 {
        // The last call in force (or a primary, which the node refuses).
        report(MemberState::Secondary).await?;
        *calls = 0;
    } else {
        *calls -= 1;
    }
    Ok(Document::new())
}

async fn append_oplog_note(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    // MongoDB's bsonExtractTypedField: 4 NoSuchKey, 14 TypeMismatch.
    let data = match body.get("data") {
        Some(Bson::Document(data)) => data.clone(),
        None => return Err(ReplError::coded(4, "Missing expected field \"data\"")),
        Some(other) => {
            return Err(ReplError::type_mismatch(format!(
                "\"data\" had the wrong type. Expected object, found {:?}",
                other.element_type()
            )))
        }
    };
    let max_cluster_time = match body.get("maxClusterTime") {
        None => None,
        Some(Bson::Timestamp(ts)) => Some(slipstream_clock::Timestamp::new(ts.time, ts.increment)),
        Some(other) => {
            return Err(ReplError::type_mismatch(format!(
                "\"maxClusterTime\" had the wrong type. Expected timestamp, found {:?}",
                other.element_type()
            )))
        }
    };
    if !set.shared().snapshot().writable_primary {
        return Err(ReplError::NotWritablePrimary);
    }
    // With `maxClusterTime` the note is written only if the oplog has not
    // reached that time yet: its purpose is to move the clock past it.
    if let Some(max_cluster_time) = max_cluster_time {
        let last = set.shared().engine.last_applied().ts;
        if max_cluster_time <= last {
            return Err(ReplError::coded(
                209,
                format!(
                    "Requested maxClusterTime {max_cluster_time:?} is less or equal to the last primary OpTime: \
                     {last:?}"
                ),
            ));
        }
    }
    write_note(set.shared(), data).await?;
    Ok(Document::new())
}

async fn heartbeat(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let request = decode_heartbeat_request(body)?;
    let shared = set.shared();
    let snapshot = shared.snapshot();
    // The set named on our command line, which our configuration (if any)
    // names too: an uninitiated member of another set answers as one.
    if request.set_name != shared.options.set_name {
        return Err(ReplError::coded(
            108,
            format!(
                "Our set name of {} does not match name {} reported by remote node",
                shared.options.set_name, request.set_name
            ),
        ));
    }
    let Some(config) = &snapshot.config else {
        if request.heartbeat.config_version > 0 {
            fetch_initial_config(shared.clone(), request.from_host.clone(), request.set_name.clone());
        }
        return Err(ReplError::NotYetInitialized);
    };
    let requester_config = request.heartbeat.config_version_and_term();
    let send_config = config.version_and_term().is_newer_than(requester_config)
        || request.heartbeat.config_version == UNINITIALIZED_CONFIG_VERSION;
    // A sender whose id our configuration gives another host is not that
    // member (MongoDB finds the sender by host): a process left at a
    // voter's old host kept the moved voter counted up. It is answered, and
    // learns the configuration from the answer, but counts for nothing.
    let known_elsewhere = |from: MemberId| config.member(from).is_some_and(|m| m.host != request.from_host);
    let heartbeat = match request.from_id {
        Some(from) if request.heartbeat.config_version != UNINITIALIZED_CONFIG_VERSION && !known_elsewhere(from) => {
            let message = Message::HeartbeatRequest(request.heartbeat.clone());
            let from_host = Some(request.from_host.clone());
            match set
                .ask(|reply| Input::Receive {
                    from,
                    from_host,
                    message,
                    reply,
                })
                .await?
            {
                Some(Message::HeartbeatResponse(hb)) => hb,
                _ => own_heartbeat(set),
            }
        }
        // An uninitialized member asking for our configuration.
        _ => own_heartbeat(set),
    };
    let snapshot = shared.snapshot();
    let reply = HeartbeatReply {
        set_name: config.set_name.clone(),
        heartbeat,
        config: send_config.then(|| ReplSetConfig::clone(config)),
        election_time: snapshot
            .election_time
            .filter(|_| snapshot.writable_primary)
            .map(|op| op.ts),
    };
    let syncing_to = snapshot
        .sync_source
        .and_then(|s| snapshot.host_of(s))
        .unwrap_or("")
        .to_owned();
    Ok(encode_heartbeat_reply(&reply, &syncing_to))
}

/// This member's heartbeat fields from its last snapshot.
fn own_heartbeat(set: &ReplicaSet) -> slipstream_consensus::Heartbeat {
    let snapshot = set.shared().snapshot();
    let (version, term) = snapshot
        .config
        .as_ref()
        .map_or((UNINITIALIZED_CONFIG_VERSION, -1), |c| (c.version, c.term));
    slipstream_consensus::Heartbeat {
        term: snapshot.term,
        config_version: version,
        config_term: term,
        state: snapshot.state,
        last_applied: snapshot.last_applied,
        last_applied_wall_ms: snapshot.last_applied_wall_ms,
        last_durable: snapshot.last_durable,
        last_durable_wall_ms: snapshot.last_durable_wall_ms,
        commit_point: snapshot.commit_point,
        sync_source: snapshot.sync_source,
    }
}

async fn request_votes(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let config = initialized(set)?;
    let (set_name, request) = decode_vote_request(body, &config)?;
    if set_name != config.set_name {
        return Err(ReplError::coded(
            108,
            format!("vote request for set {set_name}, not {}", config.set_name),
        ));
    }
    let from = request.candidate;
    let message = Message::RequestVote(request);
    match set
        .ask(|reply| Input::Receive {
            from,
            from_host: None,
            message,
            reply,
        })
        .await?
    {
        Some(Message::VoteResponse(response)) => {
            // MongoDB logs every vote it is asked for, with its answer: an
            // election that gathers no majority is read from these lines.
            tracing::info!(
                target: "repl",
                candidate = from,
                term = response.request_term,
                dry_run = response.dry_run,
                granted = response.granted,
                reason = response.reason,
                "vote requested"
            );
            Ok(encode_vote_response(&response))
        }
        _ => Err(ReplError::coded(125, "the vote request was not answered")),
    }
}

async fn update_position(set: &ReplicaSet, body: &Document) -> Result<Document, ReplError> {
    let config = initialized(set)?;
    let update = decode_update_position(body)?;
    check_positions_in_config(body, &config)?;
    let from = match body.get("fromId").and_then(integral) {
        Some(id @ 0..=255) => id as MemberId,
        _ => update
            .positions
            .first()
            .map(|p| p.member)
            .ok_or_else(|| ReplError::failed_to_parse("replSetUpdatePosition without positions"))?,
    };
    let message = Message::UpdatePosition(update);
    set.ask_stepping(|reply| Input::Receive {
        from,
        from_host: None,
        message,
        reply,
    })
    .await?;
    // The step may have moved the commit point and woken majority writers
    // on this runtime worker: let their answers leave before this one (the
    // reporter that sent this needs nothing from it in a hurry; a client
    // is waiting on each of those).
    tokio::task::yield_now().await;
    Ok(Document::new())
}
