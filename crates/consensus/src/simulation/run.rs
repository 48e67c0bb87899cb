//! One randomized run (tigerbeetle's VOPR in miniature): a configuration
//! and a fault profile drawn from the seed, then three phases, every
//! invariant checked after every step:
//!
//! 1. Safety: partitions that change every few seconds, message loss,
//!    duplication and reordering, clock drift, crashes between steps and in
//!    the middle of one, stepdowns, `replSetSyncFrom`, maintenance mode, and
//!    (in half the seeds) reconfigurations adding or removing one member at a
//!    time, with a spare process to add. Those seeds then heal until every
//!    member of the newest configuration holds it (bounded: configuration
//!    propagation must converge), so that the next phase draws its shape on
//!    one configuration.
//! 2. Lasting partial partition: a shape drawn once (some links cut, some
//!    members down) that stays for the whole phase. When it owes progress
//!    (`topology`), a primary must commit a write that every member of the
//!    core holds and knows committed before the phase ends.
//! 3. Liveness: the network heals, everyone restarts, and a write's commit
//!    point must reach every data-bearing member within a bounded time.

use crate::config::{MemberConfig, MemberId, ReplSetConfig, Settings};
use crate::io::{Event, StepDownRequest};
use crate::simulation::cluster::{Cluster, Faults};
use crate::simulation::reconfigs;
use crate::simulation::rng::Rng;
use crate::simulation::topology::Partition;
use crate::state::MemberState;
use slipstream_clock::OpTime;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Global clock resolution of the simulation.
pub const SLOT_MS: u64 = 5;
/// How often each member gets a `Tick`.
pub const TICK_MS: u64 = 10;

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Replica set size (1..=7 all voting, or more with non-voters).
    pub members: usize,
    /// The seed everything is drawn from.
    pub seed: u64,
    /// Simulated length of the safety phase.
    pub safety_ms: u64,
    /// Simulated length of the lasting partial partition phase, which is
    /// also the bound on its progress (0 skips the phase).
    pub partition_ms: u64,
    /// Bound on the liveness phase.
    pub liveness_ms: u64,
    /// Keep a trace of every message and action (slow; for replays).
    pub trace: bool,
}

impl RunOptions {
    /// Defaults used by `cargo test` and the simulator.
    pub fn new(members: usize, seed: u64) -> RunOptions {
        RunOptions {
            members,
            seed,
            safety_ms: 20_000,
            partition_ms: 10_000,
            liveness_ms: 20_000,
            trace: false,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Members.
    pub members: usize,
    /// Node steps taken.
    pub steps: u64,
    /// Invariant violations (empty: the run passed).
    pub violations: Vec<String>,
    /// Acknowledged majority writes.
    pub acked_writes: usize,
    /// Simulated milliseconds.
    pub simulated_ms: u64,
    /// A short description of the configuration and faults drawn.
    pub profile: String,
    /// The trace's last lines, when asked for.
    pub trace_tail: Vec<String>,
    /// Terms in which a primary was elected.
    pub elections: u64,
    /// Rollbacks carried out.
    pub rollbacks: u64,
    /// Sync source cycles that formed (and were broken in time).
    pub cycles_formed: u64,
    /// Committed entries dropped from a member that had not heard of the
    /// term they were committed in (allowed; see the checker).
    pub late_commit_rollbacks: u64,
    /// Crashes in the middle of a step.
    pub crashes_in_step: u64,
    /// The lasting partial partition drawn (empty if the phase was skipped).
    pub partition: String,
    /// The partition owed progress (`topology`), which was checked.
    pub partition_owed_progress: bool,
    /// The partition had a core member that reaches the electable members
    /// only through a third member.
    pub partition_needs_chain: bool,
    /// Reconfigurations proposed to a primary.
    pub reconfigs_proposed: u64,
    /// Configurations with a new membership or version that a primary wrote.
    pub reconfigs_accepted: u64,
}

/// Runs one seed; a panic inside a node (a failed assertion) is reported
/// as a violation rather than aborting the caller.
pub fn run_seed(options: RunOptions) -> RunReport {
    let mut report = RunReport {
        seed: options.seed,
        members: options.members,
        ..RunReport::default()
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| run(options)));
    match outcome {
        Ok(r) => r,
        Err(panic) => {
            let text = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            report.violations.push(format!("panic: {text}"));
            report
        }
    }
}

/// Draws a configuration: priorities, an arbiter, a non-voter, chaining.
pub fn random_config(rng: &mut Rng, members: usize) -> ReplSetConfig {
    assert!(members >= 1);
    let mut list: Vec<MemberConfig> = (1..=members as u32)
        .map(|id| MemberConfig::new(id, format!("m{id}:27017")))
        .collect();
    if rng.chance(300_000) {
        for m in &mut list {
            m.priority = rng.range(1, 3) as f64;
        }
    }
    if (4..=7).contains(&members) && rng.chance(50_000) {
        // Arbiter-heavy: two data-bearing members, the rest arbiters, so
        // the write majority is both data members (fewer than a majority).
        for m in list.iter_mut().skip(2) {
            m.arbiter_only = true;
            m.priority = 0.0;
        }
    } else {
        if members >= 3 && rng.chance(150_000) {
            let last = list.last_mut().unwrap();
            last.arbiter_only = true;
            last.priority = 0.0;
        }
        if members >= 4 && rng.chance(150_000) {
            let m = &mut list[1];
            m.votes = 0;
            m.priority = 0.0;
        }
        if members >= 3 && rng.chance(100_000) {
            list[0].priority = 0.0;
            list[0].hidden = rng.chance(500_000);
        }
    }
    // More than seven members: the extra ones do not vote.
    for m in list.iter_mut().skip(7) {
        m.votes = 0;
        m.priority = 0.0;
    }
    let settings = Settings {
        chaining_allowed: rng.chance(700_000),
        heartbeat_interval_ms: 100,
        election_timeout_ms: 500,
        // MongoDB's default: the silence limit is the election timeout (a
        // draw here would change every recorded seed's scenario).
        heartbeat_timeout_ms: 10_000,
        catch_up_timeout_ms: if rng.chance(200_000) {
            None
        } else {
            Some(rng.range(0, 1_000))
        },
        catch_up_takeover_delay_ms: Some(1_000),
        max_sync_source_lag_ms: 5_000,
        change_sync_source_threshold_ms: 20,
        replica_set_id: None,
    };
    let mut config = ReplSetConfig::new("sim", list);
    config.settings = settings;
    config.validate().expect("drawn configuration is valid");
    assert!(crate::simulation::reconfigs::electable_and_arbiters_are_a_majority(
        &config
    ));
    config
}

fn random_faults(rng: &mut Rng) -> Faults {
    let delay_min_ms = rng.range(1, 3);
    Faults {
        drop_per_million: rng.range(0, 60_000),
        duplicate_per_million: rng.range(0, 20_000),
        delay_min_ms,
        delay_max_ms: rng.range(delay_min_ms + 2, 120),
        clock_jitter_ms: rng.range(0, 50),
        crash_after_vote_per_million: if rng.chance(300_000) { rng.range(0, 300_000) } else { 0 },
        crash_in_step_per_million: if rng.chance(500_000) { rng.range(0, 300) } else { 0 },
        election_jitter_max_ms: if rng.chance(300_000) {
            Some(rng.range(0, 30))
        } else {
            None
        },
    }
}

/// Shared by both phases: advance one slot, tick, flush, deliver.
fn advance(cluster: &mut Cluster) {
    cluster.now += SLOT_MS;
    let jitter = cluster.faults.clock_jitter_ms;
    for i in 0..cluster.members.len() {
        if jitter > 0 && cluster.rng.chance(100_000) {
            let m = &mut cluster.members[i];
            m.clock_offset = if cluster.rng.chance(500_000) {
                (m.clock_offset + 1).min(jitter)
            } else {
                m.clock_offset.saturating_sub(1)
            };
        }
        let m = &mut cluster.members[i];
        m.clock = m.clock.max(cluster.now + m.clock_offset);
        if let Some(at) = cluster.restart_at[i] {
            if cluster.now >= at {
                cluster.restart_at[i] = None;
                cluster.restart(i);
            }
        }
    }
    cluster.deliver_due();
    if cluster.now.is_multiple_of(TICK_MS) {
        for i in 0..cluster.members.len() {
            if cluster.is_alive(i) {
                let election_jitter_ms = cluster.election_jitter();
                cluster.step(i, Event::Tick { election_jitter_ms });
            }
        }
    }
    for i in 0..cluster.members.len() {
        if cluster.rng.chance(200_000) {
            cluster.flush(i);
        }
    }
}

fn new_partition(cluster: &mut Cluster) {
    let n = cluster.members.len();
    let roll = cluster.rng.below(100);
    if roll < 35 || n < 3 {
        cluster.heal();
    } else if roll < 55 {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..n {
            if cluster.rng.chance(500_000) {
                a.push(i)
            } else {
                b.push(i)
            }
        }
        cluster.partition(&[a, b]);
    } else if roll < 70 {
        let lone = cluster.rng.below(n as u64) as usize;
        let rest: Vec<usize> = (0..n).filter(|&i| i != lone).collect();
        cluster.partition(&[vec![lone], rest]);
    } else if roll < 85 {
        // Majorities ring: member i sees i-k..=i+k around a ring, so each
        // sees a majority and no two see the same one.
        let k = n / 2;
        for a in 0..n {
            for b in 0..n {
                let d = (a + n - b) % n;
                cluster.link[a][b] = d.min(n - d) <= k / 2 + (k % 2) || a == b;
            }
        }
    } else {
        // Asymmetric: a few one-way links fail.
        cluster.heal();
        for _ in 0..n {
            let a = cluster.rng.below(n as u64) as usize;
            let b = cluster.rng.below(n as u64) as usize;
            if a != b {
                cluster.link[a][b] = false;
            }
        }
    }
}

fn run(options: RunOptions) -> RunReport {
    let mut rng = Rng::new(options.seed ^ 0x5EED_0000_0000_0000);
    let config = random_config(&mut rng, options.members);
    let faults = random_faults(&mut rng);
    let crash_per_million = rng.range(0, 2_000);
    // A stream of its own, so that the draws above and the faults below do
    // not depend on whether a seed reconfigures.
    let mut reconfig_rng = Rng::new(options.seed ^ 0xC0F1_0000_0000_0000);
    let reconfig_per_million = if reconfig_rng.chance(500_000) {
        reconfig_rng.range(200, 3_000)
    } else {
        0
    };
    let profile = format!(
        "members={} arbiters={} non_voter={} chaining={} catch_up_timeout_ms={:?} drop={} dup={} delay={}..{} clock_jitter={} crash={} crash_after_vote={} crash_in_step={} election_jitter_max={:?} reconfig={}",
        options.members,
        config.members.iter().filter(|m| m.arbiter_only).count(),
        config.members.iter().any(|m| m.votes == 0),
        config.settings.chaining_allowed,
        config.settings.catch_up_timeout_ms,
        faults.drop_per_million,
        faults.duplicate_per_million,
        faults.delay_min_ms,
        faults.delay_max_ms,
        faults.clock_jitter_ms,
        crash_per_million,
        faults.crash_after_vote_per_million,
        faults.crash_in_step_per_million,
        faults.election_jitter_max_ms,
        reconfig_per_million,
    );
    let n = options.members;
    let mut cluster = Cluster::new(config, options.seed, faults, false);
    cluster.tracing = options.trace;
    if reconfig_per_million > 0 {
        let id = n as MemberId + 1;
        cluster.add_spare(id, format!("m{id}:27017"));
    }
    let mut plan = Plan {
        crash_per_million,
        reconfig_per_million,
        reconfig_rng,
        reconfigs_proposed: 0,
    };
    let mut partition = PartitionOutcome::default();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        phases(&mut cluster, &mut rng, options, &mut plan, &mut partition)
    }));
    if let Err(panic) = outcome {
        let text = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        cluster.checker.violation(format!("panic: {text}"));
    }
    RunReport {
        seed: options.seed,
        members: n,
        steps: cluster.steps,
        violations: std::mem::take(&mut cluster.checker.violations),
        acked_writes: cluster.checker.acked_count(),
        simulated_ms: cluster.now,
        profile,
        elections: cluster.checker.elections() as u64,
        rollbacks: cluster.checker.rollbacks,
        cycles_formed: cluster.checker.cycles_formed,
        late_commit_rollbacks: cluster.checker.late_commit_rollbacks,
        crashes_in_step: cluster.crashes_in_step,
        partition: partition.description,
        partition_owed_progress: partition.owed,
        partition_needs_chain: partition.needs_chain,
        reconfigs_proposed: plan.reconfigs_proposed,
        reconfigs_accepted: cluster.reconfigs_accepted,
        trace_tail: cluster
            .trace
            .split_off(cluster.trace.len().saturating_sub(TRACE_TAIL_LINES)),
    }
}

/// Lines of trace kept for a report.
pub const TRACE_TAIL_LINES: usize = 20_000;

/// The fault plan of a run beyond `Faults`.
struct Plan {
    /// Chance per member per slot of a crash in the safety phase, in millionths.
    crash_per_million: u64,
    /// Chance per slot of a reconfiguration proposed to the primary (0: none).
    reconfig_per_million: u64,
    /// The reconfigurations' own random stream.
    reconfig_rng: Rng,
    /// Reconfigurations proposed, for the report.
    reconfigs_proposed: u64,
}

/// What the lasting partial partition phase drew, for the report.
#[derive(Default)]
struct PartitionOutcome {
    description: String,
    owed: bool,
    needs_chain: bool,
}

/// The three phases (with the settling of configurations between the
/// first two when the run reconfigures).
fn phases(
    cluster: &mut Cluster,
    rng: &mut Rng,
    options: RunOptions,
    plan: &mut Plan,
    partition: &mut PartitionOutcome,
) {
    safety_phase(cluster, rng, options, plan);
    if plan.reconfig_per_million > 0 && cluster.checker.violations.is_empty() {
        settle_configs(cluster);
    }
    if options.partition_ms > 0 && options.members >= 3 && cluster.checker.violations.is_empty() {
        partition_phase(cluster, rng, options, partition);
    }
    if cluster.checker.violations.is_empty() {
        liveness_phase(cluster, options);
    }
}

fn safety_phase(cluster: &mut Cluster, rng: &mut Rng, options: RunOptions, plan: &mut Plan) {
    let n = cluster.members.len();
    let mut next_partition_at = rng.range(500, 3_000);
    while cluster.now < options.safety_ms && cluster.checker.violations.is_empty() {
        advance(cluster);
        if cluster.now >= next_partition_at {
            new_partition(cluster);
            next_partition_at = cluster.now + rng.range(300, 4_000);
        }
        for i in 0..n {
            if cluster.is_alive(i) && rng.chance(plan.crash_per_million) {
                cluster.crash(i);
                cluster.restart_at[i] = Some(cluster.now + rng.range(100, 3_000));
            }
        }
        if rng.chance(150_000) {
            let target = match cluster.writable_primary() {
                Some(p) if rng.chance(900_000) => p,
                _ => rng.below(n as u64) as usize,
            };
            if cluster.is_alive(target) {
                cluster.client_write(target, true);
            }
        }
        if rng.chance(300) {
            if let Some(p) = cluster.writable_primary() {
                let request = StepDownRequest {
                    step_down_ms: rng.range(0, 2_000),
                    secondary_catch_up_period_ms: rng.range(0, 1_000),
                    force: rng.chance(500_000),
                };
                cluster.step(p, Event::StepDown(request));
            }
        }
        // Maintenance mode: a member reports RECOVERING for a while.
        if rng.chance(100) {
            let i = rng.below(n as u64) as usize;
            if cluster.is_alive(i) {
                cluster.step(i, Event::ReportState(MemberState::Recovering));
            }
        }
        if rng.chance(2_000) {
            let i = rng.below(n as u64) as usize;
            if cluster.is_alive(i) {
                cluster.step(i, Event::ReportState(MemberState::Secondary));
            }
        }
        if rng.chance(200) {
            let a = rng.below(n as u64) as usize;
            let b = rng.below(n as u64) as usize;
            if cluster.is_alive(a) {
                let member = Some(cluster.members[b].id);
                cluster.step(a, Event::SyncFrom { member });
            }
        }
        if plan.reconfig_per_million > 0 && plan.reconfig_rng.chance(plan.reconfig_per_million) {
            propose_reconfig(cluster, plan);
        }
        cluster.check_global_invariants();
    }
}

/// Proposes one change of membership, votes or priority to the writable
/// primary, on its configuration.
fn propose_reconfig(cluster: &mut Cluster, plan: &mut Plan) {
    let Some(p) = cluster.writable_primary() else { return };
    let node = cluster.members[p].node.as_ref().expect("a writable primary runs");
    let processes: Vec<(MemberId, String)> = cluster.members.iter().map(|m| (m.id, m.host.clone())).collect();
    let Some(config) = reconfigs::next_config(&mut plan.reconfig_rng, node.config(), node.id(), &processes) else {
        return;
    };
    plan.reconfigs_proposed += 1;
    cluster.step(p, Event::Reconfig { config, force: None, answered: Vec::new() });
}

/// Longest the settling of configurations may take before it counts as a
/// liveness failure of configuration propagation.
pub const CONFIG_SETTLE_MS_MAX: u64 = 5_000;

/// Heals the network, stops message loss and crashes, restarts everyone,
/// and waits until every running member of the newest configuration holds
/// it: heartbeats must spread a configuration to every member that missed
/// it, including a spare that a reconfig added and that has none.
fn settle_configs(cluster: &mut Cluster) {
    cluster.heal();
    cluster.faults.drop_per_million = 0;
    cluster.faults.crash_after_vote_per_million = 0;
    cluster.faults.crash_in_step_per_million = 0;
    for i in 0..cluster.members.len() {
        cluster.restart_at[i] = None;
        cluster.restart(i);
    }
    let deadline = cluster.now + CONFIG_SETTLE_MS_MAX;
    while cluster.checker.violations.is_empty() {
        advance(cluster);
        cluster.check_global_invariants();
        let newest = cluster.newest_config();
        let missing = cluster.members_missing_config(&newest);
        if missing.is_empty() {
            cluster.config = newest;
            return;
        }
        if cluster.now >= deadline {
            cluster.checker.violation(format!(
                "Liveness of configuration propagation: members {missing:?} lack {} after {CONFIG_SETTLE_MS_MAX} ms: {}",
                newest.version_and_term(),
                cluster.status().join(" | ")
            ));
        }
    }
}

/// A lasting partial partition: the drawn shape stays for the whole phase;
/// the primary (and any candidate) restarts as it begins and messages in
/// flight are lost, so the shape holds from the first moment; members not
/// kept down run without crashes and leave maintenance mode; message loss
/// (at most 1%), duplication, delays and clock drift go on; election
/// timeouts get their full random range. Progress is checked inside the
/// partition, and the phase runs to its end after progress was made, so
/// that safety is checked under the partition too. The shape is drawn on
/// the newest configuration's members; processes outside it stay down.
fn partition_phase(cluster: &mut Cluster, rng: &mut Rng, options: RunOptions, outcome: &mut PartitionOutcome) {
    // A primary left over from before could keep writing from outside the
    // electable set and make a member the electable ones cannot reach the
    // freshest; the phase's first primary is elected under the partition.
    for i in 0..cluster.members.len() {
        if cluster.members[i]
            .node
            .as_ref()
            .is_some_and(|n| n.primary() == Some(n.id()) || n.is_candidate())
        {
            cluster.crash(i);
        }
    }
    let config = cluster.config.clone();
    let processes: Vec<usize> = config.members.iter().map(|m| cluster.index(m.id)).collect();
    let last_applied: Vec<OpTime> = processes.iter().map(|&p| cluster.members[p].last()).collect();
    let drawn = Partition::draw(rng, &config, &last_applied);
    let (partition, expectation) = match drawn {
        Some((partition, expectation)) => (partition, Some(expectation)),
        None => (Partition::random(rng, config.members.len()), None),
    };
    outcome.description = partition.describe(&config);
    outcome.owed = expectation.is_some();
    outcome.needs_chain = expectation.as_ref().is_some_and(|e| e.needs_chain);
    cluster.note(format!("lasting partial partition {}", outcome.description));
    cluster.faults.crash_after_vote_per_million = 0;
    cluster.faults.crash_in_step_per_million = 0;
    // A winner may need every vote it can reach; heavy loss would make the
    // bound a matter of luck. Likewise election timeouts are randomized
    // over a whole election timeout, far more than a message delay (Raft's
    // liveness argument; the safety phase's tiny jitter makes split votes
    // common on purpose, and two candidates needing each other's vote could
    // split for the whole phase).
    cluster.faults.drop_per_million = cluster.faults.drop_per_million.min(PARTITION_DROP_PER_MILLION_MAX);
    cluster.faults.election_jitter_max_ms = None;
    // Messages sent before the cut would blur the shape the expectation
    // was computed for (a member could still append from one now down).
    cluster.drop_in_flight();
    for i in 0..cluster.members.len() {
        cluster.restart_at[i] = None;
        match processes.iter().position(|&p| p == i) {
            Some(k) if !partition.down[k] => {
                cluster.restart(i);
                cluster.step(i, Event::ReportState(MemberState::Secondary));
            }
            _ => cluster.crash(i),
        }
    }
    apply_links(cluster, &processes, &partition);
    let end = cluster.now + options.partition_ms;
    let core: Vec<usize> = expectation
        .map(|e| e.core.iter().map(|&k| processes[k]).collect())
        .unwrap_or_default();
    let mut progress = Progress::new(core.clone());
    while cluster.checker.violations.is_empty() && cluster.now < end {
        advance(cluster);
        if rng.chance(50_000) {
            if let Some(p) = cluster.writable_primary() {
                cluster.client_write(p, true);
            }
        }
        cluster.check_global_invariants();
        if outcome.owed && cluster.now.is_multiple_of(PROGRESS_CHECK_MS) {
            progress.check(cluster);
        }
    }
    if outcome.owed && !progress.done && cluster.checker.violations.is_empty() {
        let ids: Vec<String> = core.iter().map(|&i| cluster.members[i].id.to_string()).collect();
        let status = cluster.status().join(" | ");
        cluster.checker.violation(format!(
            "Liveness in a lasting partial partition ({}): no write committed and known committed on core [{}] within {} ms: {status}",
            outcome.description,
            ids.join(" "),
            options.partition_ms
        ));
    }
}

/// The partition's links between the configuration's members (indexed as
/// in the configuration); a process outside it is cut from everyone.
fn apply_links(cluster: &mut Cluster, processes: &[usize], partition: &Partition) {
    let n = cluster.members.len();
    for a in 0..n {
        for b in 0..n {
            let linked = match (
                processes.iter().position(|&p| p == a),
                processes.iter().position(|&p| p == b),
            ) {
                (Some(ka), Some(kb)) => partition.link[ka][kb],
                _ => a == b,
            };
            cluster.link[a][b] = linked;
        }
    }
}

/// The network heals, crashed members restart, and progress is demanded
/// of the data-bearing members of the newest configuration.
fn liveness_phase(cluster: &mut Cluster, options: RunOptions) {
    let start = cluster.now;
    cluster.heal();
    cluster.faults = Faults {
        delay_min_ms: 1,
        delay_max_ms: 10,
        ..cluster.faults.clone()
    };
    cluster.faults.drop_per_million = 0;
    cluster.faults.duplicate_per_million = 0;
    cluster.faults.crash_after_vote_per_million = 0;
    cluster.faults.crash_in_step_per_million = 0;
    for i in 0..cluster.members.len() {
        cluster.restart_at[i] = None;
        cluster.restart(i);
        cluster.step(i, Event::ReportState(MemberState::Secondary));
    }
    let config = cluster.newest_config();
    let data_bearing: Vec<usize> = config
        .members
        .iter()
        .filter(|m| m.is_data_bearing())
        .map(|m| cluster.index(m.id))
        .collect();
    let mut progress = Progress::new(data_bearing);
    while cluster.checker.violations.is_empty() && cluster.now < start + options.liveness_ms {
        advance(cluster);
        cluster.check_global_invariants();
        if cluster.now.is_multiple_of(PROGRESS_CHECK_MS) {
            progress.check(cluster);
            if progress.done {
                return;
            }
        }
    }
    if cluster.checker.violations.is_empty() {
        let status = cluster.status().join(" | ");
        cluster.checker.violation(format!(
            "Liveness: no commit point reached every member within {} ms: {status}",
            options.liveness_ms
        ));
    }
}

/// Most message loss in the lasting partial partition phase, in millionths.
pub const PARTITION_DROP_PER_MILLION_MAX: u64 = 10_000;

/// How often (simulated) progress is checked and a new write attempted.
pub const PROGRESS_CHECK_MS: u64 = 100;

/// The progress check shared by the partition and liveness phases: a write
/// accepted by a writable primary must become committed, and every one of
/// `members` must have a commit point at or past it (so it holds the write:
/// its commit point is in its log and on the one committed sequence). A
/// write whose primary lost its term is replaced by a new one.
struct Progress {
    members: Vec<usize>,
    target: Option<(usize, OpTime)>,
    done: bool,
}

impl Progress {
    fn new(members: Vec<usize>) -> Progress {
        Progress {
            members,
            target: None,
            done: false,
        }
    }

    fn check(&mut self, cluster: &mut Cluster) {
        if self.done {
            return;
        }
        if let Some((writer, optime)) = self.target {
            let knows = |i: usize| {
                cluster.members[i]
                    .node
                    .as_ref()
                    .is_some_and(|n| n.commit_point() >= optime)
            };
            let reached = cluster.checker.is_committed(optime) && self.members.iter().all(|&i| knows(i));
            if reached {
                self.done = true;
                return;
            }
            let still = cluster.members[writer]
                .node
                .as_ref()
                .is_some_and(|n| n.term() == optime.term && n.is_writable_primary());
            if !still {
                self.target = None;
            }
        }
        if self.target.is_none() {
            if let Some(p) = cluster.writable_primary() {
                self.target = cluster.client_write(p, true).map(|o| (p, o));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MemberConfig;

    /// Settings MongoDB accepts: the default 2 s heartbeat interval beside a
    /// 1 s election timeout. Heard from only every 2 s, each member counted
    /// the others down between heartbeats: a primary stepped down and a
    /// secondary stood every second of an idle, healthy set.
    #[test]
    fn a_heartbeat_interval_past_the_election_timeout_keeps_one_primary() {
        for seed in 0..20 {
            let mut config = ReplSetConfig::new("rs", (1..=3).map(|i| MemberConfig::new(i, format!("h{i}"))).collect());
            config.settings.heartbeat_interval_ms = 2_000;
            config.settings.election_timeout_ms = 1_000;
            let mut cluster = Cluster::new(config, seed, Faults::default(), false);
            while cluster.now < 30_000 {
                advance(&mut cluster);
            }
            assert_eq!(
                cluster.checker.elections(),
                1,
                "seed {seed}: one election in 30 s of a healthy set"
            );
            assert!(
                cluster.writable_primary().is_some(),
                "seed {seed}: a primary at the end"
            );
        }
    }
}
