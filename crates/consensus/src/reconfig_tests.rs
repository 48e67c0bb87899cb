//! Unit tests of reconfiguration (`reconfig.rs`), configuration
//! propagation, REMOVED members (`removed.rs`) and votes across
//! configurations, driving one `Node` by hand.

use crate::config::{MemberConfig, ReplSetConfig};
use crate::error::ReconfigError;
use crate::io::{Action, Event, ForceReconfig};
use crate::message::{Heartbeat, Message, UpdatePosition, VoteRequest};
use crate::millis::Millis;
use crate::mutation::{self, Mutation};
use crate::node::Node;
use crate::node_tests::{config, heartbeat, node, op, position, primary, receive, wall};
use crate::state::MemberState;
use crate::Incompatibility;
use slipstream_clock::OpTime;

/// A heartbeat from a member holding configuration `(version, term)`.
fn heartbeat_with_config(term: i64, state: MemberState, applied: OpTime, version: i64, config_term: i64) -> Heartbeat {
    Heartbeat {
        config_version: version,
        config_term,
        ..heartbeat(term, state, applied, OpTime::NULL)
    }
}

/// Primary 1 of `n` whose configuration (version 1, term 1) every member
/// reported and whose no-op is durable everywhere: reconfig allowed.
fn settled_primary(n: u32) -> (Node, OpTime) {
    let (mut p, noop) = primary(n, op(0, 1));
    for member in 2..=n {
        let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 1, 1);
        receive(&mut p, member, Message::HeartbeatResponse(hb), 1_010);
    }
    assert_eq!(p.commit_point(), noop);
    assert_eq!(p.check_reconfig_allowed(), Ok(()));
    (p, noop)
}

fn reconfig(node: &mut Node, config: ReplSetConfig, now: u64) -> Vec<Action> {
    node.step(Event::Reconfig { config, force: None, answered: Vec::new() }, Millis(now))
}

fn outcome(actions: &[Action]) -> Result<(), ReconfigError> {
    actions
        .iter()
        .find_map(|a| {
            if let Action::ReconfigFinished(r) = a {
                Some(r.clone())
            } else {
                None
            }
        })
        .expect("every reconfig is answered")
}

/// `config(n)` plus member `id`, version `version`.
fn with_member(n: u32, id: u32, version: i64) -> ReplSetConfig {
    let mut c = config(n);
    c.members.push(MemberConfig::new(id, format!("h{id}")));
    c.version = version;
    c
}

#[test]
fn only_a_writable_primary_reconfigures() {
    let mut s = node(3, 2, op(1, 5));
    let actions = reconfig(&mut s, with_member(3, 4, 2), 10);
    assert_eq!(outcome(&actions), Err(ReconfigError::NotPrimary));
    assert!(!actions.iter().any(|a| matches!(a, Action::PersistConfig(_))));
}

#[test]
fn the_current_config_and_the_oplog_must_be_committed_first() {
    let (mut p, noop) = primary(3, op(0, 1));
    // Step-up raised the configuration's term: nobody else reported it yet.
    assert_eq!(
        p.config().version_and_term(),
        crate::ConfigVersionAndTerm { version: 1, term: 1 }
    );
    assert_eq!(
        outcome(&reconfig(&mut p, with_member(3, 4, 2), 1_010)),
        Err(ReconfigError::ConfigNotCommitted)
    );
    // Member 2 reports holding it, but the no-op is on no one else yet.
    let hb = heartbeat_with_config(1, MemberState::Secondary, op(0, 1), 1, 1);
    receive(&mut p, 2, Message::HeartbeatResponse(hb), 1_011);
    assert!(p.is_config_committed());
    assert_eq!(
        outcome(&reconfig(&mut p, with_member(3, 4, 2), 1_012)),
        Err(ReconfigError::OplogNotCommitted)
    );
    let update = UpdatePosition {
        term: 1,
        positions: vec![position(2, noop)],
    };
    receive(&mut p, 2, Message::UpdatePosition(update), 1_013);
    assert_eq!(p.commit_point(), noop);
    let actions = reconfig(&mut p, with_member(3, 4, 2), 1_014);
    assert_eq!(outcome(&actions), Ok(()));
    let persist = actions
        .iter()
        .position(|a| matches!(a, Action::PersistConfig(c) if c.version == 2 && c.term == 1));
    let answer = actions.iter().position(|a| matches!(a, Action::ReconfigFinished(_)));
    assert!(
        persist.expect("persisted") < answer.unwrap(),
        "durable before the answer"
    );
    assert_eq!(p.config().members.len(), 4);
    // The new configuration is not committed: another change must wait.
    assert_eq!(p.check_reconfig_allowed(), Err(ReconfigError::ConfigNotCommitted));
}

#[test]
fn a_safe_reconfig_changes_one_voter_keeps_the_primary_electable_and_needs_a_quorum() {
    let (mut p, _) = settled_primary(3);
    let mut two = with_member(3, 4, 2);
    two.members.push(MemberConfig::new(5, "h5"));
    assert_eq!(
        outcome(&reconfig(&mut p, two, 1_020)),
        Err(ReconfigError::Incompatible(Incompatibility::MoreThanOneVoterChanged {
            added: 2,
            removed: 0
        }))
    );
    let mut demoted = config(3);
    demoted.version = 2;
    demoted.members[0].priority = 0.0;
    assert_eq!(
        outcome(&reconfig(&mut p, demoted, 1_021)),
        Err(ReconfigError::NotElectable)
    );
    let mut without_me = config(3);
    without_me.version = 2;
    without_me.members.remove(0);
    assert_eq!(
        outcome(&reconfig(&mut p, without_me, 1_022)),
        Err(ReconfigError::SelfNotFound)
    );
    let mut renamed = with_member(3, 4, 2);
    renamed.set_name = "other".into();
    assert!(matches!(
        outcome(&reconfig(&mut p, renamed, 1_023)),
        Err(ReconfigError::SetNameDiffers { .. })
    ));
    let stale = with_member(3, 4, 1);
    assert!(matches!(
        outcome(&reconfig(&mut p, stale, 1_024)),
        Err(ReconfigError::Incompatible(Incompatibility::VersionNotGreater { .. }))
    ));
    // Member 3 silent for an election timeout while 2 stays: adding voter
    // 4, never heard, leaves 2 of the 4 voters up.
    let hb = heartbeat_with_config(1, MemberState::Secondary, p.last_applied(), 1, 1);
    receive(&mut p, 2, Message::HeartbeatResponse(hb), 2_100);
    assert!(p.is_writable_primary());
    assert_eq!(
        outcome(&reconfig(&mut p, with_member(3, 4, 2), 2_100)),
        Err(ReconfigError::QuorumCheckFailed { up: 2, needed: 3 })
    );
}

#[test]
fn a_force_reconfig_runs_anywhere_raises_the_version_and_drops_the_term() {
    let mut s = node(3, 2, op(1, 5));
    let mut two = config(2);
    two.members[0] = MemberConfig::new(2, "h2");
    two.members[1] = MemberConfig::new(3, "h3");
    let actions = s.step(
        Event::Reconfig {
            config: two,
            force: Some(ForceReconfig {
                version_increment: 12_345,
            }),
            answered: Vec::new(),
        },
        Millis(5),
    );
    assert_eq!(outcome(&actions), Ok(()));
    assert_eq!(s.config().version, 1 + 12_345);
    assert_eq!(s.config().term, -1);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::PersistConfig(c) if c.version == 12_346)));
}

/// A fourth voter added while one of three is down (and MongoDB's
/// tutorial, a one-member set adding a second): the new member counts as
/// up once it answered the caller's heartbeat. The quorum check counted
/// only members already configured, so these always failed with 74;
/// without that answer the check still fails.
#[test]
fn a_new_voter_that_answered_counts_for_the_quorum() {
    let (mut p, noop) = settled_primary(3);
    // Member 3 falls silent; member 2 keeps answering.
    let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 1, 1);
    receive(&mut p, 2, Message::HeartbeatResponse(hb), 2_500);
    let four = with_member(3, 4, 2);
    assert_eq!(
        outcome(&reconfig(&mut p, four.clone(), 2_600)),
        Err(ReconfigError::QuorumCheckFailed { up: 2, needed: 3 })
    );
    let actions = p.step(Event::Reconfig { config: four, force: None, answered: vec![4] }, Millis(2_601));
    assert_eq!(outcome(&actions), Ok(()));
    assert_eq!(p.config().members.len(), 4);
}

/// MongoDB's `newlyAdded`: members a reconfig adds with a vote and the
/// mark count for no majority (two at once are no voter change), so the
/// quorum and the configuration's commitment need only the old voters;
/// giving one of them its vote is one voter change.
#[test]
fn newly_added_members_count_for_no_majority_until_given_their_vote() {
    let (mut p, noop) = settled_primary(3);
    let mut two = with_member(3, 4, 2);
    two.members.push(MemberConfig::new(5, "h5"));
    two.members.iter_mut().filter(|m| m.id >= 4).for_each(|m| m.newly_added = true);
    assert_eq!((two.voter_count(), two.majority()), (3, 2));
    // Neither new member was ever heard from: the old voters are the quorum.
    assert_eq!(outcome(&reconfig(&mut p, two.clone(), 1_020)), Ok(()));
    let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 2, 1);
    receive(&mut p, 2, Message::HeartbeatResponse(hb), 1_030);
    assert!(p.is_config_committed());
    let mut both = two.clone();
    both.version = 3;
    both.members.iter_mut().for_each(|m| m.newly_added = false);
    assert_eq!(
        outcome(&reconfig(&mut p, both, 1_040)),
        Err(ReconfigError::Incompatible(Incompatibility::MoreThanOneVoterChanged {
            added: 2,
            removed: 0
        }))
    );
    let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 2, 1);
    receive(&mut p, 4, Message::HeartbeatResponse(hb), 1_050);
    let mut one = two;
    one.version = 3;
    one.members[3].newly_added = false;
    assert_eq!(outcome(&reconfig(&mut p, one, 1_051)), Ok(()));
    assert_eq!((p.config().voter_count(), p.config().majority()), (4, 3));
}

/// A voter moved to a new host counts only by an answer from that host:
/// heartbeats from its old host say nothing of the new one.
#[test]
fn a_moved_voter_counts_only_by_an_answer_from_its_new_host() {
    let (mut p, noop) = settled_primary(3);
    let mut moved = config(3);
    moved.version = 2;
    moved.members[1].host = "elsewhere:1".into();
    moved.members[2].host = "elsewhere:2".into();
    let _ = noop;
    assert_eq!(
        outcome(&reconfig(&mut p, moved.clone(), 1_100)),
        Err(ReconfigError::QuorumCheckFailed { up: 1, needed: 2 })
    );
    let actions = p.step(Event::Reconfig { config: moved, force: None, answered: vec![2] }, Millis(1_101));
    assert_eq!(outcome(&actions), Ok(()));
}

/// After a force reconfig (term -1) and an election, the new primary's
/// configuration has the same version and its term; the others keep the
/// force one, which is not older by MongoDB's order, so they never fetch
/// it. They hold the same configuration: it counts as committed, and safe
/// reconfigs go on (an exact match refused them for good).
#[test]
fn a_force_configuration_counts_as_the_same_one_with_the_primarys_term() {
    let (mut p, noop) = primary(3, op(0, 1));
    for member in 2..=3 {
        let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 1, -1);
        receive(&mut p, member, Message::HeartbeatResponse(hb), 1_010);
    }
    assert_eq!(p.config().term, 1);
    assert!(p.is_config_committed());
    assert_eq!(p.check_reconfig_allowed(), Ok(()));
    // Another version is still another configuration.
    let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 2, -1);
    let (mut q, _) = primary(3, op(0, 1));
    for member in 2..=3 {
        receive(&mut q, member, Message::HeartbeatResponse(hb.clone()), 1_010);
    }
    assert!(!q.is_config_committed());
}

#[test]
fn a_newer_config_seen_in_a_heartbeat_is_fetched_persisted_and_adopted() {
    let mut s = node(3, 2, op(1, 5));
    let hb = heartbeat_with_config(1, MemberState::Primary, op(1, 5), 2, 1);
    let actions = receive(&mut s, 1, Message::HeartbeatRequest(hb.clone()), 10);
    assert!(actions.contains(&Action::FetchConfig { from: 1 }));
    // Asked once per heartbeat interval, not on every heartbeat.
    assert!(!receive(&mut s, 1, Message::HeartbeatRequest(hb), 20).contains(&Action::FetchConfig { from: 1 }));
    let mut newer = with_member(3, 4, 2);
    newer.term = 1;
    let actions = s.step(Event::ConfigReceived { config: newer.clone() }, Millis(30));
    assert!(actions.contains(&Action::PersistConfig(newer.clone())));
    assert_eq!(s.config(), &newer);
    // An older or equal one is ignored.
    let actions = s.step(Event::ConfigReceived { config: config(3) }, Millis(40));
    assert!(!actions.iter().any(|a| matches!(a, Action::PersistConfig(_))));
    assert_eq!(s.config().version, 2);
}

#[test]
fn a_member_missing_from_its_config_is_removed_and_only_heartbeats() {
    let mut s = node(3, 3, op(1, 5));
    let mut without = config(2);
    without.version = 2;
    let actions = s.step(
        Event::ConfigReceived {
            config: without.clone(),
        },
        Millis(10),
    );
    assert!(actions.contains(&Action::StateChanged {
        state: MemberState::Removed,
        term: 1
    }));
    assert_eq!(s.state(), MemberState::Removed);
    assert_eq!(s.state().code(), 10);
    // Heartbeats go on; votes, step-up and elections do not.
    let later = s.step(Event::Tick { election_jitter_ms: 0 }, Millis(5_000));
    assert!(later.iter().any(|a| matches!(
        a,
        Action::Send {
            message: Message::HeartbeatRequest(_),
            ..
        }
    )));
    assert!(!later.iter().any(|a| matches!(a, Action::ElectionStarted { .. })));
    let request = VoteRequest {
        term: 2,
        candidate: 1,
        last_applied: op(1, 5),
        config_version: 2,
        config_term: 0,
        dry_run: false,
    };
    let votes = receive(&mut s, 1, Message::RequestVote(request), 5_001);
    assert!(!votes.iter().any(|a| matches!(
        a,
        Action::Send {
            message: Message::VoteResponse(_),
            ..
        }
    )));
    let answer = s.step(Event::StepUpRequest, Millis(5_002));
    assert!(answer.contains(&Action::StepUpFinished(Err(crate::StepUpError::NotElectable))));
    // A heartbeat of a member of its configuration is answered.
    let hb = heartbeat_with_config(1, MemberState::Primary, op(1, 5), 2, 0);
    let answered = receive(&mut s, 1, Message::HeartbeatRequest(hb), 5_003);
    assert!(answered.iter().any(|a| matches!(
        a,
        Action::Send {
            to: 1,
            message: Message::HeartbeatResponse(_)
        }
    )));
    // A configuration that adds it back makes it a secondary again.
    let mut back = config(3);
    back.version = 3;
    let actions = s.step(Event::ConfigReceived { config: back }, Millis(5_004));
    assert!(actions.contains(&Action::StateChanged {
        state: MemberState::Secondary,
        term: 1
    }));
}

#[test]
fn a_member_restarting_with_a_config_without_it_starts_removed() {
    let mut without = config(2);
    without.version = 2;
    let s = Node::new(
        without,
        3,
        crate::Persisted::default(),
        crate::OplogPositions::default(),
        0,
        Millis(0),
    )
    .unwrap();
    assert_eq!(s.state(), MemberState::Removed);
}

#[test]
fn what_is_known_of_members_that_stay_is_kept_by_id() {
    let (mut p, _) = settled_primary(3);
    assert!(p.members()[2].ping_ms.is_some());
    let mut swap = config(3);
    swap.version = 2;
    swap.members.remove(1);
    let actions = reconfig(&mut p, swap, 1_030);
    assert_eq!(outcome(&actions), Ok(()));
    let view = p.members();
    assert_eq!(view.iter().map(|m| m.id).collect::<Vec<_>>(), vec![1, 3]);
    assert!(view[1].ping_ms.is_some(), "member 3's data survived the rebuild");
    assert_eq!(view[1].config_version, Some(1));
}

#[test]
fn a_voter_refuses_a_candidate_with_an_older_config_and_grants_one_with_a_newer() {
    let mut voter = node(3, 2, op(1, 5));
    let mut newer = config(3);
    newer.version = 2;
    newer.term = 1;
    voter.step(Event::ConfigReceived { config: newer }, Millis(1));
    let stale = VoteRequest {
        term: 2,
        candidate: 1,
        last_applied: op(1, 5),
        config_version: 1,
        config_term: 0,
        dry_run: true,
    };
    let actions = receive(&mut voter, 1, Message::RequestVote(stale), 10);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Send { message: Message::VoteResponse(r), .. }
        if !r.granted && r.reason == "candidate's config is older than mine")));
    let fresh = VoteRequest {
        term: 2,
        candidate: 1,
        last_applied: op(1, 5),
        config_version: 3,
        config_term: 1,
        dry_run: false,
    };
    let actions = receive(&mut voter, 1, Message::RequestVote(fresh), 11);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::Send { message: Message::VoteResponse(r), .. } if r.granted)));
}

/// Data-bearing members 1 and 2 and arbiters 3, 4, 5: the write majority
/// (both data-bearing voters) is not a voting majority (three).
fn arbiter_heavy() -> ReplSetConfig {
    let mut c = config(5);
    for m in c.members.iter_mut().skip(2) {
        m.arbiter_only = true;
        m.priority = 0.0;
    }
    c.members.push(MemberConfig {
        votes: 0,
        priority: 0.0,
        ..MemberConfig::new(6, "h6")
    });
    c
}

fn arbiter_heavy_primary() -> (Node, OpTime) {
    let mut p = Node::new(
        arbiter_heavy(),
        1,
        crate::Persisted::default(),
        crate::OplogPositions::default(),
        0,
        Millis(0),
    )
    .unwrap();
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_000));
    for (voter, dry_run, term) in [(3, true, 0), (4, true, 0), (3, false, 1), (4, false, 1)] {
        let r = crate::VoteResponse {
            term,
            request_term: 1,
            dry_run,
            granted: true,
            reason: "",
        };
        receive(&mut p, voter, Message::VoteResponse(r), 1_001);
    }
    assert_eq!(p.state(), MemberState::Primary);
    let noop = op(1, 2);
    p.step(
        Event::Appended {
            last_applied: noop,
            wall_ms: wall(noop),
        },
        Millis(1_002),
    );
    p.step(
        Event::Durable {
            last_durable: noop,
            wall_ms: wall(noop),
        },
        Millis(1_002),
    );
    (p, noop)
}

#[test]
fn with_arbiters_the_primary_commits_only_under_a_committed_config() {
    // Rule 5 of reconfig.rs: member 2 holds the no-op durably, which is the
    // write majority, but only 1 of 5 voters reported configuration (1, 1).
    let (mut p, noop) = arbiter_heavy_primary();
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![position(2, noop)],
        }),
        1_003,
    );
    assert_eq!(p.commit_point(), OpTime::NULL);
    let hb = heartbeat_with_config(1, MemberState::Arbiter, OpTime::NULL, 1, 1);
    receive(&mut p, 3, Message::HeartbeatResponse(hb.clone()), 1_004);
    assert_eq!(p.commit_point(), OpTime::NULL);
    // The third voter reporting it commits the configuration, and the
    // entry with it.
    let actions = receive(&mut p, 4, Message::HeartbeatResponse(hb), 1_005);
    assert!(p.is_config_committed());
    assert!(actions.contains(&Action::AdvanceCommitPoint(noop)));
    // Without the rule (MongoDB's behaviour) the entry commits at once.
    let (mut p, noop) = arbiter_heavy_primary();
    mutation::with(&[Mutation::CommitInUncommittedConfig], || {
        receive(
            &mut p,
            2,
            Message::UpdatePosition(UpdatePosition {
                term: 1,
                positions: vec![position(2, noop)],
            }),
            1_003,
        );
    });
    assert_eq!(p.commit_point(), noop);
}

#[test]
fn with_arbiters_a_data_member_gains_a_vote_only_once_it_holds_the_commit_point() {
    // Rule 4 of reconfig.rs.
    let (mut p, noop) = arbiter_heavy_primary();
    for member in [2, 3, 4] {
        let state = if member == 2 {
            MemberState::Secondary
        } else {
            MemberState::Arbiter
        };
        let applied = if member == 2 { noop } else { OpTime::NULL };
        let hb = heartbeat_with_config(1, state, applied, 1, 1);
        receive(&mut p, member, Message::HeartbeatResponse(hb), 1_003);
    }
    assert_eq!(p.commit_point(), noop);
    let mut vote_to_6 = arbiter_heavy();
    vote_to_6.version = 2;
    vote_to_6.members[5].votes = 1;
    vote_to_6.members[5].priority = 1.0;
    let mut unchecked = p.clone();
    let without_rule = mutation::with(&[Mutation::NewVoterWithoutCommitPoint], || {
        reconfig(&mut unchecked, vote_to_6.clone(), 1_004)
    });
    assert_eq!(outcome(&without_rule), Ok(()), "MongoDB's rules alone accept it");
    assert_eq!(
        outcome(&reconfig(&mut p, vote_to_6.clone(), 1_004)),
        Err(ReconfigError::NewVoterBehind(6))
    );
    let hb = heartbeat_with_config(1, MemberState::Secondary, noop, 1, 1);
    receive(&mut p, 6, Message::HeartbeatResponse(hb), 1_005);
    assert_eq!(outcome(&reconfig(&mut p, vote_to_6, 1_006)), Ok(()));
}
