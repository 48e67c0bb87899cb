//! Unit tests of the command decisions (`commands.rs`: freeze, step-up
//! request; maintenance in `node.rs`), the first start after
//! `replSetInitiate`, visible elections and their metrics, the status
//! views, and the lag rules on wall-clock dates.

use crate::config::{MemberConfig, ReplSetConfig};
use crate::election_metrics::{CatchUpOutcome, ElectionReason};
use crate::error::{NotSecondary, StepUpError};
use crate::io::{Action, Event};
use crate::message::{Message, VoteResponse};
use crate::millis::Millis;
use crate::node::{Node, OplogPositions, Persisted};
use crate::node_tests::{config, heartbeat, node, op, primary, receive, wall};
use crate::state::MemberState;
use slipstream_clock::{OpTime, Timestamp, UNINITIALIZED_TERM};

fn single(oplog: OplogPositions) -> Node {
    let c = ReplSetConfig::new("rs", vec![MemberConfig::new(1, "h1")]);
    Node::new(c, 1, Persisted::default(), oplog, 0, Millis(0)).unwrap()
}

fn granted(term: i64, dry_run: bool) -> Message {
    Message::VoteResponse(VoteResponse {
        term,
        request_term: 1,
        dry_run,
        granted: true,
        reason: "",
    })
}

#[test]
fn a_single_node_set_elects_itself_at_once_after_initiate() {
    let mut n = single(OplogPositions::default());
    let actions = n.step(Event::Tick { election_jitter_ms: 0 }, Millis(1));
    assert_eq!(n.state(), MemberState::Primary, "no election timeout wait");
    let reason = ElectionReason::SingleNode;
    assert!(actions.contains(&Action::ElectionStarted {
        term: 1,
        reason,
        dry_run: true
    }));
    assert!(actions.contains(&Action::ElectionStarted {
        term: 1,
        reason,
        dry_run: false
    }));
    assert!(actions.contains(&Action::ElectionFinished {
        term: 1,
        won: true,
        reason
    }));
    assert!(actions.contains(&Action::WriteNoop));
    assert!(n.is_writable_primary());
    // Its own durable no-op commits it.
    let noop = op(1, 1);
    n.step(
        Event::Appended {
            last_applied: noop,
            wall_ms: wall(noop),
        },
        Millis(2),
    );
    let actions = n.step(
        Event::Durable {
            last_durable: noop,
            wall_ms: wall(noop),
        },
        Millis(2),
    );
    assert!(actions.contains(&Action::AdvanceCommitPoint(noop)));
}

#[test]
fn the_first_start_takes_a_standalone_oplog_whose_entries_have_no_term() {
    let last = OpTime::new(Timestamp::new(1_700_000_000, 4), UNINITIALIZED_TERM);
    let mut n = single(OplogPositions::at(last, 1_700_000_000_000));
    assert_eq!(n.term(), 0);
    n.step(Event::Tick { election_jitter_ms: 0 }, Millis(1));
    assert_eq!(n.term(), 1);
    assert_eq!(n.state(), MemberState::Primary);
}

#[test]
fn freeze_keeps_a_secondary_from_standing_and_freeze_zero_ends_it() {
    let mut s = node(3, 2, op(1, 5));
    let actions = s.step(Event::Freeze { until: Millis(60_000) }, Millis(10));
    assert!(actions.contains(&Action::FreezeFinished(Ok(()))));
    assert_eq!(s.frozen_until(), Some(Millis(60_000)));
    let late = s.step(Event::Tick { election_jitter_ms: 0 }, Millis(5_000));
    assert!(
        !late.iter().any(|a| matches!(a, Action::ElectionStarted { .. })),
        "the timeout passed, frozen"
    );
    // Unfrozen with the election timeout long past: it stands at once.
    let actions = s.step(Event::Freeze { until: Millis(5_000) }, Millis(5_000));
    assert_eq!(s.frozen_until(), None);
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::ElectionStarted {
            reason: ElectionReason::ElectionTimeout,
            ..
        }
    )));
}

#[test]
fn a_primary_refuses_freeze_and_maintenance() {
    let (mut p, _) = primary(3, op(0, 1));
    let actions = p.step(Event::Freeze { until: Millis(60_000) }, Millis(1_010));
    assert!(actions.contains(&Action::FreezeFinished(Err(NotSecondary::Primary))));
    let actions = p.step(Event::ReportState(MemberState::Recovering), Millis(1_011));
    assert!(actions.contains(&Action::ReportStateFinished(Err(NotSecondary::Primary))));
    assert_eq!(p.state(), MemberState::Primary);
}

#[test]
fn maintenance_mode_keeps_a_secondary_recovering_and_out_of_elections() {
    let mut s = node(3, 2, op(1, 5));
    let actions = s.step(Event::ReportState(MemberState::Recovering), Millis(10));
    assert!(actions.contains(&Action::ReportStateFinished(Ok(()))));
    assert!(actions.contains(&Action::StateChanged {
        state: MemberState::Recovering,
        term: 1
    }));
    assert!(s.in_maintenance());
    let late = s.step(Event::Tick { election_jitter_ms: 0 }, Millis(5_000));
    assert!(!late.iter().any(|a| matches!(a, Action::ElectionStarted { .. })));
    let answer = s.step(Event::StepUpRequest, Millis(5_001));
    assert!(answer.contains(&Action::StepUpFinished(Err(StepUpError::NotElectable))));
    s.step(Event::ReportState(MemberState::Secondary), Millis(5_002));
    assert_eq!(s.state(), MemberState::Secondary);
}

#[test]
fn a_step_up_request_stands_now_with_a_dry_run_and_answers_when_won() {
    let mut s = node(3, 2, op(1, 5));
    let actions = s.step(Event::StepUpRequest, Millis(10));
    let reason = ElectionReason::StepUpRequest;
    assert!(actions.contains(&Action::ElectionStarted {
        term: 2,
        reason,
        dry_run: true
    }));
    assert!(
        !actions.iter().any(|a| matches!(a, Action::StepUpFinished(_))),
        "answered when the election ends"
    );
    let actions = receive(
        &mut s,
        1,
        Message::VoteResponse(VoteResponse {
            request_term: 2,
            ..vote(1, true)
        }),
        11,
    );
    assert!(actions.contains(&Action::ElectionStarted {
        term: 2,
        reason,
        dry_run: false
    }));
    let actions = receive(
        &mut s,
        1,
        Message::VoteResponse(VoteResponse {
            request_term: 2,
            ..vote(2, false)
        }),
        12,
    );
    assert!(actions.contains(&Action::ElectionFinished {
        term: 2,
        won: true,
        reason
    }));
    let became = actions.iter().position(|a| {
        matches!(
            a,
            Action::StateChanged {
                state: MemberState::Primary,
                ..
            }
        )
    });
    let answered = actions.iter().position(|a| *a == Action::StepUpFinished(Ok(())));
    assert!(
        became.expect("primary") < answered.expect("answered"),
        "the state is published before the answer"
    );
    // A primary answers at once.
    assert!(s
        .step(Event::StepUpRequest, Millis(13))
        .contains(&Action::StepUpFinished(Ok(()))));
}

fn vote(term: i64, dry_run: bool) -> VoteResponse {
    VoteResponse {
        term,
        request_term: term,
        dry_run,
        granted: true,
        reason: "",
    }
}

#[test]
fn a_lost_step_up_election_is_reported() {
    let mut s = node(3, 2, op(1, 5));
    s.step(Event::StepUpRequest, Millis(10));
    // Nobody answers: the attempt is abandoned after an election timeout.
    let actions = s.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_011));
    assert!(actions.contains(&Action::ElectionFinished {
        term: 2,
        won: false,
        reason: ElectionReason::StepUpRequest
    }));
    assert!(actions.contains(&Action::StepUpFinished(Err(StepUpError::ElectionLost))));
    // A priority-0 member fails at once.
    let mut c = config(3);
    c.members[1].priority = 0.0;
    let mut passive = Node::new(c, 2, Persisted::default(), OplogPositions::default(), 0, Millis(0)).unwrap();
    assert!(passive
        .step(Event::StepUpRequest, Millis(1))
        .contains(&Action::StepUpFinished(Err(StepUpError::NotElectable))));
}

#[test]
fn election_candidate_metrics_follow_the_election_and_catch_up() {
    let (p, noop) = primary(3, op(0, 1));
    let metrics = p.election_candidate_metrics().expect("a primary keeps its metrics");
    assert_eq!(metrics.reason, ElectionReason::ElectionTimeout);
    assert_eq!(metrics.term, 1);
    assert_eq!(metrics.votes_needed, 2);
    assert_eq!(metrics.last_applied_at_election, op(0, 1));
    assert_eq!(metrics.won_at, Some(Millis(1_002)));
    assert_eq!(
        metrics.catch_up,
        Some(CatchUpOutcome::Skipped),
        "catchUpTimeoutMillis 0"
    );
    assert_eq!(metrics.new_term_start, Some((noop, wall(noop))));
    assert_eq!(p.election_time(), Some(noop));
    // Leaving PRIMARY clears them, as MongoDB does.
    let mut p = p;
    receive(
        &mut p,
        2,
        Message::HeartbeatRequest(heartbeat(2, MemberState::Secondary, noop, OpTime::NULL)),
        1_010,
    );
    assert_eq!(p.state(), MemberState::Secondary);
    assert!(p.election_candidate_metrics().is_none());
    assert_eq!(p.election_time(), None);
}

#[test]
fn member_views_report_health_state_ping_positions_and_config() {
    let mut s = node(3, 2, op(1, 5));
    s.step(Event::Tick { election_jitter_ms: 0 }, Millis(10));
    let hb = heartbeat(1, MemberState::Primary, op(1, 7), OpTime::NULL);
    receive(&mut s, 1, Message::HeartbeatResponse(hb), 14);
    let views = s.members();
    assert_eq!(views.len(), 3);
    let (primary, me, silent) = (&views[0], &views[1], &views[2]);
    assert!(primary.health);
    assert_eq!(primary.state, MemberState::Primary);
    assert_eq!(primary.ping_ms, Some(4));
    assert_eq!(primary.last_heartbeat_at, Some(Millis(14)));
    assert_eq!((primary.applied, primary.applied_wall_ms), (op(1, 7), wall(op(1, 7))));
    assert_eq!((primary.config_version, primary.config_term), (Some(1), Some(0)));
    assert!(me.is_self && me.health);
    assert_eq!(me.applied, op(1, 5));
    assert_eq!(silent.state, MemberState::Unknown, "never heard");
    assert!(!silent.health);
    assert_eq!(s.primary(), Some(1));
    // Heard, then silent for an election timeout: DOWN.
    s.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_100));
    assert_eq!(s.members()[0].state, MemberState::Down);
}

#[test]
fn a_heartbeat_timeout_shorter_than_the_election_timeout_shows_members_down_sooner_but_the_primary_stays() {
    // Election timeout 1 s (`config`), heartbeat timeout 300 ms.
    let (mut p, _) = primary(3, op(0, 1));
    p.config.settings.heartbeat_timeout_ms = 300;
    let hb = heartbeat(1, MemberState::Secondary, op(1, 1), OpTime::NULL);
    receive(&mut p, 2, Message::HeartbeatResponse(hb.clone()), 1_100);
    receive(&mut p, 3, Message::HeartbeatResponse(hb), 1_100);
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_300));
    assert!(p.members()[1].health && p.members()[2].health);
    // Silent for 400 ms: past the heartbeat timeout, so DOWN in the views...
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_500));
    let views = p.members();
    assert!(!views[1].health && !views[2].health);
    assert_eq!((views[1].state, views[2].state), (MemberState::Down, MemberState::Down));
    // ...but within the election timeout, which alone decides whether the
    // primary still sees a majority.
    assert_eq!(p.state(), MemberState::Primary);
    let actions = p.step(Event::Tick { election_jitter_ms: 0 }, Millis(2_101));
    assert!(actions.iter().any(|a| matches!(a, Action::LostMajority { term: 1, .. })), "{actions:?}");
    assert_eq!(p.state(), MemberState::Secondary);
}

#[test]
fn a_heartbeat_timeout_longer_than_the_election_timeout_does_not_keep_a_silent_member_up() {
    let mut s = node(3, 2, op(1, 5));
    s.config.settings.heartbeat_timeout_ms = 30_000;
    let hb = heartbeat(1, MemberState::Primary, op(1, 7), OpTime::NULL);
    receive(&mut s, 1, Message::HeartbeatResponse(hb), 14);
    s.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_100));
    assert_eq!(s.members()[0].state, MemberState::Down);
}

#[test]
fn a_source_lagging_the_primary_by_wall_clock_dates_is_not_chosen() {
    // max_sync_source_lag_ms is 30 s by default; member 3's last entry was
    // written 40 s (of wall-clock dates) before the primary's.
    let mut s = node(3, 2, op(1, 5));
    let primary_hb = heartbeat(1, MemberState::Primary, op(1, 100), OpTime::NULL);
    receive(&mut s, 1, Message::HeartbeatRequest(primary_hb), 10);
    let lagging = heartbeat(1, MemberState::Secondary, op(1, 60), OpTime::NULL);
    let actions = receive(&mut s, 3, Message::HeartbeatRequest(lagging), 11);
    assert!(!actions.contains(&Action::SetSyncSource(Some(3))));
    assert_eq!(s.sync_source(), Some(1));
}

#[test]
fn priority_takeover_needs_our_last_entry_near_the_primarys_by_wall_clock_date() {
    let mut c = config(3);
    c.members[1].priority = 2.0;
    let start = |last: OpTime| {
        let persisted = Persisted {
            term: 1,
            voted_for: None,
        };
        Node::new(
            c.clone(),
            2,
            persisted,
            OplogPositions::at(last, wall(last)),
            0,
            Millis(0),
        )
        .unwrap()
    };
    let takeover_started = |node: &mut Node| {
        let hb = heartbeat(1, MemberState::Primary, op(1, 10), OpTime::NULL);
        let mut actions = Vec::new();
        for at in (100..1_000).step_by(100) {
            actions.extend(receive(node, 1, Message::HeartbeatRequest(hb.clone()), at));
        }
        actions.iter().any(|a| {
            matches!(
                a,
                Action::ElectionStarted {
                    reason: ElectionReason::PriorityTakeover,
                    ..
                }
            )
        })
    };
    assert!(takeover_started(&mut start(op(1, 9))), "1 s behind: fresh enough");
    assert!(!takeover_started(&mut start(op(1, 7))), "3 s behind: not fresh enough");
}

#[test]
fn single_node_grants_are_counted_once() {
    // Guards the dry-run-to-real hand-over: a late dry-run grant does not
    // count in the real election.
    let mut s = node(3, 2, op(1, 5));
    s.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_000));
    receive(&mut s, 1, granted(1, true), 1_001);
    let actions = receive(&mut s, 3, granted(1, true), 1_002);
    assert!(!actions.iter().any(|a| matches!(
        a,
        Action::StateChanged {
            state: MemberState::Primary,
            ..
        }
    )));
}
