//! Unit tests of single rules, driving one `Node` by hand. Whole-protocol
//! behaviour is tested by the scenario scripts and the simulator.

use crate::config::{MemberConfig, ReplSetConfig};
use crate::error::{NotSecondary, StepDownError, StepUpError};
use crate::io::{Action, Event, PullBatch, StepDownRequest};
use crate::message::{Heartbeat, MemberPosition, Message, UpdatePosition, VoteRequest, VoteResponse};
use crate::millis::Millis;
use crate::node::{Node, OplogPositions, Persisted};
use crate::state::MemberState;
use crate::write_concern::{WriteConcern, WriteConcernStatus, W};
use slipstream_clock::{OpTime, Timestamp};

/// The entry of `term` at second `secs` (increment 1); its wall-clock date
/// is `secs` seconds in ms (`wall`).
pub(crate) fn op(term: i64, secs: u32) -> OpTime {
    OpTime::new(Timestamp::new(secs, 1), term)
}

/// The wall-clock date this file gives an entry: its second, in ms.
pub(crate) fn wall(optime: OpTime) -> i64 {
    i64::from(optime.ts.secs) * 1_000
}

pub(crate) fn config(n: u32) -> ReplSetConfig {
    let mut c = ReplSetConfig::new("rs", (1..=n).map(|i| MemberConfig::new(i, format!("h{i}"))).collect());
    c.settings.election_timeout_ms = 1_000;
    c.settings.heartbeat_interval_ms = 100;
    c.settings.catch_up_timeout_ms = Some(0);
    c
}

/// Member `me` of `n`, restarted with `last` as its oplog's end and the
/// term of that entry durable.
pub(crate) fn node(n: u32, me: u32, last: OpTime) -> Node {
    let persisted = Persisted {
        term: last.term.max(0),
        voted_for: None,
    };
    Node::new(
        config(n),
        me,
        persisted,
        OplogPositions::at(last, wall(last)),
        0,
        Millis(0),
    )
    .unwrap()
}

pub(crate) fn receive(node: &mut Node, from: u32, message: Message, now: u64) -> Vec<Action> {
    node.step(Event::Receive { from, message }, Millis(now))
}

pub(crate) fn heartbeat(term: i64, state: MemberState, applied: OpTime, commit_point: OpTime) -> Heartbeat {
    Heartbeat {
        term,
        config_version: 1,
        config_term: 0,
        state,
        last_applied: applied,
        last_applied_wall_ms: wall(applied),
        last_durable: applied,
        last_durable_wall_ms: wall(applied),
        commit_point,
        sync_source: None,
    }
}

/// A vote request from `candidate` under the configuration `config(n)` gives.
fn vote_request(term: i64, candidate: u32, last_applied: OpTime, dry_run: bool) -> VoteRequest {
    VoteRequest {
        term,
        candidate,
        last_applied,
        config_version: 1,
        config_term: 0,
        dry_run,
    }
}

/// Member 1 of `n`, elected in term 1 with `last` as its last entry; the
/// no-op of term 1 written (as storage would, one second later) and
/// reported.
pub(crate) fn primary(n: u32, last: OpTime) -> (Node, OpTime) {
    let mut p = node(n, 1, last);
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_000));
    for voter in 2..=n {
        let r = VoteResponse {
            term: 0,
            request_term: 1,
            dry_run: true,
            granted: true,
            reason: "",
        };
        receive(&mut p, voter, Message::VoteResponse(r), 1_001);
    }
    let mut actions = Vec::new();
    for voter in 2..=n {
        let r = VoteResponse {
            term: 1,
            request_term: 1,
            dry_run: false,
            granted: true,
            reason: "",
        };
        actions.extend(receive(&mut p, voter, Message::VoteResponse(r), 1_002));
    }
    assert_eq!(p.state(), MemberState::Primary);
    let open = actions
        .iter()
        .position(|a| *a == Action::AcceptWrites(true))
        .expect("catch-up with a zero timeout ends at once");
    let noop_at = actions
        .iter()
        .position(|a| *a == Action::WriteNoop)
        .expect("the term's no-op");
    assert!(open < noop_at, "the no-op goes through the open write gate");
    let noop = op(1, last.ts.secs + 1);
    p.step(
        Event::Appended {
            last_applied: noop,
            wall_ms: wall(noop),
        },
        Millis(1_003),
    );
    p.step(
        Event::Durable {
            last_durable: noop,
            wall_ms: wall(noop),
        },
        Millis(1_003),
    );
    assert_eq!(p.election_time(), Some(noop));
    (p, noop)
}

pub(crate) fn position(member: u32, at: OpTime) -> MemberPosition {
    MemberPosition {
        member,
        applied: at,
        applied_wall_ms: wall(at),
        durable: at,
        durable_wall_ms: wall(at),
    }
}

#[test]
fn vote_is_persisted_before_the_reply_that_grants_it() {
    let mut voter = node(3, 2, op(1, 5));
    let request = vote_request(2, 1, op(1, 5), false);
    let actions = receive(&mut voter, 1, Message::RequestVote(request), 10);
    let persist = actions.iter().position(|a| {
        matches!(
            a,
            Action::PersistTermAndVote {
                term: 2,
                voted_for: Some(1)
            }
        )
    });
    let reply = actions
        .iter()
        .position(|a| matches!(a, Action::Send { message: Message::VoteResponse(r), .. } if r.granted));
    assert!(persist.expect("persisted") < reply.expect("granted"));
    assert_eq!(voter.voted_for(), Some(1));
}

#[test]
fn one_vote_per_term_and_never_for_a_candidate_behind() {
    let mut voter = node(3, 2, op(1, 5));
    let behind = vote_request(2, 1, op(1, 4), false);
    let actions = receive(&mut voter, 1, Message::RequestVote(behind), 10);
    assert!(actions.iter().any(|a| matches!(a, Action::Send { message: Message::VoteResponse(r), .. } if !r.granted && r.reason == "candidate oplog behind")));
    let fresh = vote_request(2, 3, op(1, 5), false);
    receive(&mut voter, 3, Message::RequestVote(fresh), 11);
    assert_eq!(voter.voted_for(), Some(3));
    let again = vote_request(2, 1, op(2, 9), false);
    let actions = receive(&mut voter, 1, Message::RequestVote(again), 12);
    assert!(actions.iter().any(|a| matches!(a, Action::Send { message: Message::VoteResponse(r), .. } if !r.granted && r.reason == "already voted")));
}

#[test]
fn an_empty_member_that_heard_of_entries_does_not_stand_until_it_holds_one() {
    let stands = |actions: &[Action]| actions.iter().any(|a| matches!(a, Action::ElectionStarted { .. }));
    // Members 2 and 3 joined empty; member 1 initiated the set and holds
    // the "initiating set" no-op (term -1).
    let initiate = OpTime::new(Timestamp::new(5, 1), -1);
    let mut s = node(3, 2, OpTime::NULL);
    let hb = heartbeat(0, MemberState::Secondary, initiate, OpTime::NULL);
    receive(&mut s, 1, Message::HeartbeatRequest(hb), 10);
    let actions = s.step(Event::Tick { election_jitter_ms: 0 }, Millis(5_000));
    assert!(!stands(&actions), "an empty member stood: {actions:?}");
    // Once it has applied the entry it may stand.
    let appended = Event::Appended {
        last_applied: initiate,
        wall_ms: wall(initiate),
    };
    let actions = s.step(appended, Millis(5_001));
    assert!(stands(&actions), "a synced member did not stand: {actions:?}");
    // A set whose members all start empty still elects.
    let mut fresh = node(3, 2, OpTime::NULL);
    let hb = heartbeat(0, MemberState::Secondary, OpTime::NULL, OpTime::NULL);
    receive(&mut fresh, 1, Message::HeartbeatRequest(hb), 10);
    let actions = fresh.step(Event::Tick { election_jitter_ms: 0 }, Millis(5_000));
    assert!(stands(&actions), "an empty set never elects: {actions:?}");
}

#[test]
fn an_election_every_voter_refused_or_failed_ends_at_once_and_answers_each_step_up() {
    let refused = |term: i64, dry_run: bool| VoteResponse {
        term: 1,
        request_term: term,
        dry_run,
        granted: false,
        reason: "candidate oplog behind",
    };
    let lost = |actions: &[Action]| actions.iter().any(|a| matches!(a, Action::ElectionFinished { won: false, .. }));
    let step_up_answers = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::StepUpFinished(Err(StepUpError::ElectionLost))))
            .count()
    };
    let mut c = node(3, 1, op(1, 5));
    let actions = c.step(Event::StepUpRequest, Millis(10));
    assert!(actions.iter().any(|a| matches!(a, Action::ElectionStarted { dry_run: true, .. })), "{actions:?}");
    // A second administrator's request waits for the same election.
    assert!(c.step(Event::StepUpRequest, Millis(11)).is_empty());
    // One voter unreachable (its request failed): not over yet.
    let failed = Event::VoteRequestFailed {
        voter: 2,
        term: 2,
        dry_run: true,
    };
    let actions = c.step(failed.clone(), Millis(12));
    assert!(!lost(&actions), "{actions:?}");
    // A repeated failure of the same voter does not count twice.
    assert!(!lost(&c.step(failed, Millis(13))));
    // The last voter refuses: lost now, not at the election's deadline,
    // and both waiting requests are answered.
    let actions = receive(&mut c, 3, Message::VoteResponse(refused(2, true)), 14);
    assert!(lost(&actions), "{actions:?}");
    assert_eq!(step_up_answers(&actions), 2, "{actions:?}");
    assert_eq!(c.term(), 1, "a dry run leaves the term");
    // A real election lost the same way leaves a secondary at once.
    c.step(Event::StepUpRequest, Millis(20));
    let granted = VoteResponse {
        term: 1,
        request_term: 2,
        dry_run: true,
        granted: true,
        reason: "",
    };
    let actions = receive(&mut c, 2, Message::VoteResponse(granted), 21);
    assert!(actions.iter().any(|a| matches!(a, Action::ElectionStarted { dry_run: false, .. })), "{actions:?}");
    assert_eq!(c.term(), 2);
    let failed = Event::VoteRequestFailed {
        voter: 2,
        term: 2,
        dry_run: false,
    };
    assert!(!lost(&c.step(failed, Millis(22))));
    // A failure reported for the dry run, late, is not an answer to the
    // real election.
    let late = Event::VoteRequestFailed {
        voter: 3,
        term: 2,
        dry_run: true,
    };
    assert!(!lost(&c.step(late, Millis(23))));
    let actions = receive(&mut c, 3, Message::VoteResponse(refused(2, false)), 24);
    assert!(lost(&actions), "{actions:?}");
    assert_eq!(step_up_answers(&actions), 1, "{actions:?}");
    assert_eq!(c.state(), MemberState::Secondary);
    // Nothing is left running: the next request starts a new attempt.
    let actions = c.step(Event::StepUpRequest, Millis(30));
    assert!(actions.iter().any(|a| matches!(a, Action::ElectionStarted { dry_run: true, .. })), "{actions:?}");
}

/// Member 1 of 3 at `last`, elected in term 2 by member 2 alone, with a
/// catch-up timeout long enough not to matter.
fn elected_by_member_2(last: OpTime) -> Node {
    let mut c = config(3);
    c.settings.catch_up_timeout_ms = Some(60_000);
    let persisted = Persisted {
        term: 1,
        voted_for: None,
    };
    let mut p = Node::new(c, 1, persisted, OplogPositions::at(last, wall(last)), 0, Millis(0)).unwrap();
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_000));
    for dry_run in [true, false] {
        let granted = VoteResponse {
            term: 1,
            request_term: 2,
            dry_run,
            granted: true,
            reason: "",
        };
        receive(&mut p, 2, Message::VoteResponse(granted), 1_001);
    }
    assert_eq!(p.state(), MemberState::Primary);
    assert!(!p.is_writable_primary(), "catching up");
    p
}

#[test]
fn catch_up_waits_for_every_member_to_answer_or_fail_not_for_a_majority() {
    let last = op(1, 5);
    let hb = |applied| Message::HeartbeatResponse(heartbeat(2, MemberState::Secondary, applied, OpTime::NULL));
    // Member 2 (with member 1, a majority) answers first; member 3, which
    // holds more (an old primary's w:1 writes), is not heard from yet.
    let mut p = elected_by_member_2(last);
    receive(&mut p, 2, hb(last), 1_002);
    assert!(!p.is_writable_primary(), "a majority answered, but not member 3");
    // Member 3 answers ahead: catch-up goes on until we hold its entry.
    receive(&mut p, 3, hb(op(1, 9)), 1_003);
    assert!(!p.is_writable_primary(), "behind member 3");
    p.step(
        Event::Appended {
            last_applied: op(1, 9),
            wall_ms: wall(op(1, 9)),
        },
        Millis(1_004),
    );
    assert!(p.is_writable_primary(), "caught up with every member");
    // A member whose heartbeat fails (down, refused) is heard from too.
    let mut p = elected_by_member_2(last);
    receive(&mut p, 2, hb(last), 1_002);
    let actions = p.step(Event::HeartbeatFailed { member: 3 }, Millis(1_003));
    assert!(actions.contains(&Action::AcceptWrites(true)), "{actions:?}");
}

#[test]
fn maintenance_is_refused_during_a_dry_run_and_the_election_goes_on() {
    let mut c = node(3, 1, op(1, 5));
    let actions = c.step(Event::StepUpRequest, Millis(10));
    assert!(actions.iter().any(|a| matches!(a, Action::ElectionStarted { dry_run: true, .. })));
    let actions = c.step(Event::ReportState(MemberState::Recovering), Millis(11));
    let refused = Action::ReportStateFinished(Err(NotSecondary::RunningForElection));
    assert!(actions.contains(&refused), "{actions:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::ElectionFinished { .. })), "{actions:?}");
}

#[test]
fn a_waiting_step_down_ends_in_an_error_when_a_newer_term_deposes_the_primary() {
    let (mut p, noop) = primary(3, op(0, 1));
    let request = StepDownRequest {
        step_down_ms: 60_000,
        secondary_catch_up_period_ms: 10_000,
        force: false,
    };
    p.step(Event::StepDown(request), Millis(1_010));
    let hb = heartbeat(2, MemberState::Primary, noop, OpTime::NULL);
    let actions = receive(&mut p, 2, Message::HeartbeatRequest(hb), 1_020);
    let other_reasons = Action::StepDownFinished(Err(StepDownError::SteppedDownForOtherReasons));
    assert!(actions.contains(&other_reasons), "{actions:?}");
}

#[test]
fn dry_run_changes_neither_term_nor_vote() {
    let mut voter = node(3, 2, op(1, 5));
    let request = vote_request(2, 1, op(1, 5), true);
    let actions = receive(&mut voter, 1, Message::RequestVote(request), 10);
    assert!(actions.iter().all(|a| !matches!(a, Action::PersistTermAndVote { .. })));
    assert_eq!(voter.term(), 1);
    assert_eq!(voter.voted_for(), None);
}

#[test]
fn figure_2_higher_term_update_position_steps_down_without_commit() {
    // Seed 000 section 3.3: positions at our entry, sent under a newer term.
    let (mut p, noop) = primary(5, op(0, 1));
    let update = UpdatePosition {
        term: 3,
        positions: vec![position(3, noop), position(4, noop)],
    };
    let actions = receive(&mut p, 3, Message::UpdatePosition(update), 1_010);
    assert!(actions.iter().all(|a| !matches!(a, Action::AdvanceCommitPoint(_))));
    assert_eq!(p.state(), MemberState::Secondary);
    assert_eq!(p.term(), 3);
    assert!(p.commit_point() < noop);
}

#[test]
fn commit_needs_a_majority_of_durable_positions_in_the_current_term() {
    let (mut p, noop) = primary(5, op(0, 1));
    let applied_only = MemberPosition {
        durable: op(0, 1),
        durable_wall_ms: wall(op(0, 1)),
        ..position(2, noop)
    };
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![applied_only],
        }),
        1_010,
    );
    assert!(p.commit_point() < noop, "applied is not durable");
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![position(2, noop)],
        }),
        1_011,
    );
    assert!(p.commit_point() < noop, "two of five");
    // Member 3's position reaches us forwarded by member 2 (a chain).
    let forwarded = UpdatePosition {
        term: 1,
        positions: vec![position(2, noop), position(3, noop)],
    };
    let actions = receive(&mut p, 2, Message::UpdatePosition(forwarded), 1_012);
    assert!(actions.contains(&Action::AdvanceCommitPoint(noop)));
    assert_eq!(p.commit_point(), noop);
}

#[test]
fn an_older_term_entry_on_a_majority_is_not_committed_by_counting() {
    // The primary of term 1 holds an entry of term 0 that a majority has;
    // it only commits once an entry of term 1 reaches a majority.
    let old = op(0, 7);
    let mut p = node(3, 1, old);
    p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_000));
    receive(
        &mut p,
        2,
        Message::VoteResponse(VoteResponse {
            term: 0,
            request_term: 1,
            dry_run: true,
            granted: true,
            reason: "",
        }),
        1_001,
    );
    receive(
        &mut p,
        2,
        Message::VoteResponse(VoteResponse {
            term: 1,
            request_term: 1,
            dry_run: false,
            granted: true,
            reason: "",
        }),
        1_002,
    );
    assert_eq!(p.state(), MemberState::Primary);
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![position(2, old)],
        }),
        1_003,
    );
    assert_eq!(p.commit_point(), OpTime::NULL);
}

#[test]
fn commit_point_from_a_heartbeat_needs_our_last_entry_in_its_term() {
    let mut s = node(3, 2, op(1, 5));
    let hb = heartbeat(2, MemberState::Secondary, op(2, 9), op(2, 8));
    receive(&mut s, 3, Message::HeartbeatResponse(hb), 10);
    assert_eq!(s.commit_point(), OpTime::NULL, "our 1.5 may be on a dead branch");
    let hb = heartbeat(2, MemberState::Secondary, op(1, 9), op(1, 8));
    receive(&mut s, 3, Message::HeartbeatResponse(hb), 11);
    assert_eq!(s.commit_point(), op(1, 5), "never past our last applied");
}

/// MongoDB's heartbeat request carries no commit point, and anyone who
/// names a member can send one: a deposed primary told by a request that
/// its own uncommitted entry is committed would serve it to majority reads.
#[test]
fn a_heartbeat_request_moves_no_commit_point() {
    let mut s = node(3, 2, op(1, 5));
    let hb = heartbeat(1, MemberState::Secondary, op(1, 5), op(1, 5));
    receive(&mut s, 3, Message::HeartbeatRequest(hb.clone()), 10);
    assert_eq!(s.commit_point(), OpTime::NULL);
    receive(&mut s, 3, Message::HeartbeatResponse(hb), 11);
    assert_eq!(s.commit_point(), op(1, 5), "an answer to our own heartbeat still counts");
}

/// Positions reported past the primary's own last entry (no member can
/// hold them: a forged or corrupt report) move the commit point no further
/// than that entry; the core used to assert, which aborted the process.
#[test]
fn reports_past_the_primarys_last_entry_commit_no_further_than_it() {
    let (mut p, noop) = primary(3, op(0, 1));
    let ahead = op(1, noop.ts.secs + 1_000);
    let update = UpdatePosition {
        term: 1,
        positions: vec![position(2, ahead), position(3, ahead)],
    };
    receive(&mut p, 2, Message::UpdatePosition(update), 1_100);
    assert_eq!(p.commit_point(), noop);
    let hb = heartbeat(1, MemberState::Secondary, op(1, noop.ts.secs + 2_000), ahead);
    receive(&mut p, 3, Message::HeartbeatRequest(hb), 1_101);
    assert_eq!(p.commit_point(), noop);
    assert_eq!(p.state(), MemberState::Primary);
}

/// A peer that claims to be primary in our term while we are (which the
/// vote rule rules out: a forged or corrupt message) leaves us primary; the
/// core used to assert on it, which aborted the process. The simulation's
/// checker still reports two primaries in one term.
#[test]
fn a_peer_claiming_our_term_as_primary_leaves_the_primary_in_office() {
    let (mut p, noop) = primary(3, op(0, 1));
    let hb = heartbeat(1, MemberState::Primary, noop, noop);
    receive(&mut p, 2, Message::HeartbeatRequest(hb.clone()), 1_100);
    receive(&mut p, 2, Message::HeartbeatResponse(hb), 1_101);
    assert_eq!(p.state(), MemberState::Primary);
    assert_eq!(p.term(), 1);
}

#[test]
fn write_concern_w1_wn_majority_wtimeout() {
    let (mut p, noop) = primary(3, op(0, 1));
    assert!(p.is_writable_primary());
    // Storage's oplog clock gives the write its timestamp; the node learns it.
    let write = OpTime::new(Timestamp::new(noop.ts.secs, 2), 1);
    p.step(
        Event::Appended {
            last_applied: write,
            wall_ms: wall(write),
        },
        Millis(1_100),
    );
    let wc = |w, wtimeout_ms| WriteConcern {
        w,
        journal: false,
        wtimeout_ms,
    };
    let eval = |p: &Node, c: WriteConcern, now| p.evaluate_write_concern(write, &c, Millis(1_100), Millis(now));
    assert_eq!(eval(&p, wc(W::Nodes(1), None), 1_100), WriteConcernStatus::Satisfied);
    assert_eq!(eval(&p, wc(W::Nodes(2), None), 1_100), WriteConcernStatus::Waiting);
    assert_eq!(
        eval(&p, wc(W::Nodes(4), None), 1_100),
        WriteConcernStatus::Unsatisfiable
    );
    assert_eq!(eval(&p, wc(W::Majority, Some(50)), 1_149), WriteConcernStatus::Waiting);
    assert_eq!(eval(&p, wc(W::Majority, Some(50)), 1_150), WriteConcernStatus::TimedOut);
    let applied_only = MemberPosition {
        durable: noop,
        durable_wall_ms: wall(noop),
        ..position(2, write)
    };
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![applied_only],
        }),
        1_101,
    );
    assert_eq!(eval(&p, wc(W::Nodes(2), None), 1_101), WriteConcernStatus::Satisfied);
    assert_eq!(
        eval(
            &p,
            WriteConcern {
                w: W::Nodes(2),
                journal: true,
                wtimeout_ms: None
            },
            1_101
        ),
        WriteConcernStatus::Waiting
    );
    assert_eq!(
        eval(&p, wc(W::Majority, None), 1_101),
        WriteConcernStatus::Waiting,
        "durable needed for majority"
    );
    p.step(
        Event::Durable {
            last_durable: write,
            wall_ms: wall(write),
        },
        Millis(1_102),
    );
    receive(
        &mut p,
        2,
        Message::UpdatePosition(UpdatePosition {
            term: 1,
            positions: vec![position(2, write)],
        }),
        1_102,
    );
    assert_eq!(eval(&p, wc(W::Majority, None), 1_102), WriteConcernStatus::Satisfied);
    // A newer term: the waiter is interrupted.
    receive(
        &mut p,
        3,
        Message::HeartbeatRequest(heartbeat(2, MemberState::Secondary, write, OpTime::NULL)),
        1_103,
    );
    assert_eq!(eval(&p, wc(W::Nodes(1), None), 1_103), WriteConcernStatus::SteppedDown);
}

#[test]
fn primary_that_cannot_see_a_majority_steps_down() {
    let (mut p, _) = primary(3, op(0, 1));
    let actions = p.step(Event::Tick { election_jitter_ms: 0 }, Millis(1_002 + 1_000));
    assert!(actions.contains(&Action::StateChanged {
        state: MemberState::Secondary,
        term: 1
    }));
    // The log says why: both other voters silent since the election.
    let silent = actions.iter().find_map(|a| match a {
        Action::LostMajority { term: 1, silent } => Some(silent.clone()),
        _ => None,
    });
    let silent = silent.expect("a LostMajority action explains the stepdown");
    assert_eq!(silent.len(), 2, "{silent:?}");
    assert!(silent.iter().all(|(_, ms)| ms.is_none_or(|ms| ms >= 1_000)), "{silent:?}");
}

#[test]
fn writes_refused_unless_writable_primary() {
    let s = node(3, 2, OpTime::NULL);
    assert!(!s.is_writable_primary());
}

mod quorum_quick {
    //! The commit rule's quorum computation against a deliberately naive
    //! version (after etcd-io/raft `quorum/quick_test.go`).
    use super::*;
    use proptest::prelude::*;

    /// The highest OpTime that at least `write_majority` data-bearing
    /// voters have durably reached, by trying every candidate.
    fn naive(config: &ReplSetConfig, durable: &[OpTime]) -> OpTime {
        let voters: Vec<OpTime> = config
            .members
            .iter()
            .zip(durable)
            .filter(|(m, _)| m.is_voter() && m.is_data_bearing())
            .map(|(_, d)| *d)
            .collect();
        let mut best = OpTime::NULL;
        for &candidate in &voters {
            let holders = voters.iter().filter(|&&d| d >= candidate).count();
            if holders >= config.write_majority() && candidate > best {
                best = candidate;
            }
        }
        best
    }

    proptest! {
        #[test]
        fn majority_durable_matches_naive(
            kinds in proptest::collection::vec(0u8..4, 1..=9),
            times in proptest::collection::vec((0i64..4, 0u32..6), 9),
        ) {
            // kind 0, 1: data-bearing voter; 2: arbiter; 3: non-voter.
            let mut members: Vec<MemberConfig> = kinds
                .iter()
                .enumerate()
                .map(|(i, _)| MemberConfig::new(i as u32 + 1, format!("h{i}")))
                .collect();
            members[0].priority = 1.0;
            for (m, &k) in members.iter_mut().zip(&kinds).skip(1) {
                match k {
                    2 => { m.arbiter_only = true; m.priority = 0.0; }
                    3 => { m.votes = 0; m.priority = 0.0; }
                    _ => {}
                }
            }
            let mut config = ReplSetConfig::new("rs", members);
            for m in config.members.iter_mut().skip(7) {
                m.votes = 0;
                m.priority = 0.0;
                m.arbiter_only = false;
            }
            prop_assume!(config.validate().is_ok());
            let durable: Vec<OpTime> = times.iter().take(config.members.len()).map(|&(t, ts)| op(t, ts)).collect();
            let oplog = OplogPositions::at(durable[0], wall(durable[0]));
            let mut node = Node::new(config.clone(), 1, Persisted::default(), oplog, 0, Millis(0)).unwrap();
            for (i, d) in durable.iter().enumerate().skip(1) {
                node.members[i].durable = *d;
            }
            prop_assert_eq!(node.majority_durable(), naive(&config, &durable));
        }
    }
}

/// Member 2 of 3 with its own branch `1.5 1.20`, having heard (at `term`)
/// that member 3 is ahead at `source_last`, pulls a batch from 3 that does
/// not overlap its log; returns it waiting for the common point search.
fn diverged_secondary(term: i64, source_last: OpTime, batch_commit_point: OpTime) -> Node {
    let mut s = node(3, 2, op(1, 20));
    let hb = heartbeat(term, MemberState::Secondary, source_last, OpTime::NULL);
    let actions = receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    assert!(actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
    let batch = PullBatch {
        source: 3,
        first: Some(op(1, 10)),
        last: Some(source_last),
        source_last,
        source_commit_point: batch_commit_point,
        source_term: term,
    };
    let actions = s.step(Event::Pulled(batch), Millis(11));
    assert!(actions.contains(&Action::FindCommonPoint { source: 3 }), "{actions:?}");
    assert_eq!(s.state(), MemberState::Rollback);
    s
}

/// Feeds the search's result (common point 1.10) and says whether it rolled back.
fn found(s: &mut Node, source_last: OpTime, source_commit_point: OpTime) -> bool {
    let common_point = op(1, 10);
    let event = Event::CommonPointFound {
        source: 3,
        common_point,
        source_last,
        source_commit_point,
    };
    let actions = s.step(event, Millis(12));
    let rolled_back = actions.contains(&Action::Rollback { common_point });
    assert_eq!(s.state() == MemberState::Rollback, rolled_back);
    rolled_back
}

#[test]
fn a_full_batch_of_older_entries_from_a_source_ahead_leads_to_the_common_point_search() {
    // Our last entry 2.20 is of term 2; the source's oplog holds term 1's
    // entries at those seconds (1.10 .. 1.40, one full batch), then term
    // 3's. By OpTime order the batch ends before 2.20; the source does not.
    let mut s = node(3, 2, op(2, 20));
    let hb = heartbeat(3, MemberState::Secondary, op(3, 50), OpTime::NULL);
    let mut actions = receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    actions.extend(s.step(Event::Tick { election_jitter_ms: 0 }, Millis(20)));
    assert!(actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
    let batch = |source_last| PullBatch {
        source: 3,
        first: Some(op(1, 10)),
        last: Some(op(1, 40)),
        source_last,
        source_commit_point: OpTime::NULL,
        source_term: 3,
    };
    let actions = s.step(Event::Pulled(batch(op(3, 50))), Millis(21));
    assert!(actions.contains(&Action::FindCommonPoint { source: 3 }), "{actions:?}");
    // A source whose whole oplog is behind ours is left for another.
    let mut s = node(3, 2, op(2, 20));
    let hb = heartbeat(3, MemberState::Secondary, op(3, 50), OpTime::NULL);
    receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    s.step(Event::Tick { election_jitter_ms: 0 }, Millis(20));
    let actions = s.step(Event::Pulled(batch(op(1, 40))), Millis(21));
    assert!(actions.contains(&Action::SetSyncSource(None)), "{actions:?}");
}

#[test]
fn an_empty_batch_from_a_source_with_a_newer_term_leads_to_the_common_point_search() {
    // Our last entry 1.20 (an old primary's, written while it was cut
    // off); the new primary wrote only 2.15 since: nothing at or after
    // second 20, yet its log is newer. The search starts at once (it
    // waited for the source to write past second 20).
    let mut s = node(3, 2, op(1, 20));
    let hb = heartbeat(2, MemberState::Secondary, op(2, 15), OpTime::NULL);
    receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    let batch = |source_last| PullBatch {
        source: 3,
        first: None,
        last: None,
        source_last,
        source_commit_point: OpTime::NULL,
        source_term: 2,
    };
    let actions = s.step(Event::Pulled(batch(op(2, 15))), Millis(11));
    assert!(actions.contains(&Action::FindCommonPoint { source: 3 }), "{actions:?}");
    assert_eq!(s.state(), MemberState::Rollback);
    // A source behind us after all (it rolled back since its heartbeat)
    // is left for another.
    let mut s = node(3, 2, op(1, 20));
    let hb = heartbeat(1, MemberState::Secondary, op(1, 25), OpTime::NULL);
    let actions = receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    assert!(actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
    let actions = s.step(Event::Pulled(batch(op(1, 15))), Millis(11));
    assert!(actions.contains(&Action::SetSyncSource(None)), "{actions:?}");
}

#[test]
fn rollback_against_a_secondary_whose_last_entry_is_in_our_term() {
    // The source is no primary and its commit point is behind the common
    // point, but its 2.30 was written by term 2's primary after 1.10, so
    // our 1.20 was never committed in term 2 or before (bug 6).
    let mut s = diverged_secondary(2, op(2, 30), op(1, 5));
    assert!(found(&mut s, op(2, 30), op(1, 5)));
}

#[test]
fn no_rollback_against_a_branch_older_than_our_term_without_a_commit_point_past_the_common_point() {
    // We know term 3; 1.20 may have been committed in term 3 by a primary
    // that never wrote to this source, whose branch ends in term 2 (bug 3).
    let mut s = diverged_secondary(3, op(2, 30), op(1, 5));
    assert!(!found(&mut s, op(2, 30), op(1, 5)));
    assert_eq!(s.sync_source(), None, "the source is given up");
}

#[test]
fn rollback_when_the_source_commit_point_lies_past_the_common_point() {
    let mut s = diverged_secondary(3, op(2, 30), op(2, 25));
    assert!(found(&mut s, op(2, 30), op(2, 25)));
}

#[test]
fn the_source_facts_read_with_the_search_decide_not_the_earlier_batch() {
    // The batch advertised a commit point past the common point; by the
    // search the source had restarted (its commit point forgotten) and its
    // log had shrunk back to the common point: nothing proves 1.20 uncommitted.
    let mut s = diverged_secondary(3, op(2, 30), op(2, 25));
    assert!(!found(&mut s, op(1, 10), OpTime::NULL));
}

/// `replSetSyncFrom` naming a member level with us (an idle set, where no
/// member is ahead) is followed: it was dropped unless the member was
/// strictly ahead, so the operator's request did nothing.
#[test]
fn a_requested_sync_source_level_with_us_is_taken() {
    let mut s = node(3, 2, op(1, 20));
    let hb = heartbeat(1, MemberState::Secondary, op(1, 20), OpTime::NULL);
    let actions = receive(&mut s, 3, Message::HeartbeatRequest(hb), 10);
    assert!(!actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
    let mut actions = s.step(Event::SyncFrom { member: Some(3) }, Millis(11));
    actions.extend(s.step(Event::Tick { election_jitter_ms: 0 }, Millis(12)));
    assert!(actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
}

/// A `replSetSyncFrom` that comes while the member named looks a moment
/// behind us (its last heartbeat predates our newest entry) is followed at
/// the next heartbeat that shows it level; it waited for the current
/// source to fail.
#[test]
fn a_requested_sync_source_a_heartbeat_behind_is_taken_once_it_is_level() {
    let mut s = node(3, 2, op(1, 20));
    let hb = heartbeat(1, MemberState::Secondary, op(1, 25), OpTime::NULL);
    let actions = receive(&mut s, 1, Message::HeartbeatRequest(hb), 10);
    assert!(actions.contains(&Action::SetSyncSource(Some(1))), "{actions:?}");
    let hb = heartbeat(1, MemberState::Secondary, op(1, 15), OpTime::NULL);
    receive(&mut s, 3, Message::HeartbeatRequest(hb), 11);
    let actions = s.step(Event::SyncFrom { member: Some(3) }, Millis(12));
    assert!(!actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
    let hb = heartbeat(1, MemberState::Secondary, op(1, 20), OpTime::NULL);
    let mut actions = receive(&mut s, 3, Message::HeartbeatRequest(hb), 13);
    actions.extend(s.step(Event::Tick { election_jitter_ms: 0 }, Millis(14)));
    assert!(actions.contains(&Action::SetSyncSource(Some(3))), "{actions:?}");
}
