"""The Jepsen harness's checkers and fault schedule (python/jepsen) on
small hand-made histories: each checker must pass a correct history and
catch the anomaly it exists for. The runs themselves (real members in
network namespaces) are scripts/jepsen.sh's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from jepsen import checkers, nemesis
from jepsen.history import FAIL, INFO, INVOKE, OK

S = 1_000_000_000  # nanoseconds in a second


def pairs(*ops):
    """(process, f, value, outcome, start_s, end_s, result, extra) -> history pairs."""
    result = []
    for process, f, value, outcome, start, end, returned, extra in ops:
        invocation = {"type": INVOKE, "process": process, "f": f, "value": value, "time": int(start * S), **extra}
        completion = {"type": outcome, "process": process, "f": f, "time": int(end * S),
                      "value": value if returned is None else returned, **extra}
        result.append((invocation, completion))
    return result


needs_go = pytest.mark.skipif(not (shutil.which("go") or Path("/usr/local/go/bin/go").exists()),
                              reason="the register checker builds porcupine with Go")


@needs_go
def test_register_accepts_a_linearizable_history(tmp_path):
    history = pairs((0, "write", 3, OK, 0, 1, None, {"key": "k"}),
                    (1, "read", None, OK, 0.5, 1.5, 3, {"key": "k"}),
                    (2, "cas", [3, 4], OK, 2, 3, None, {"key": "k"}),
                    # An unknown write may take effect later: the read of 7 is allowed.
                    (3, "write", 7, INFO, 3.5, 4, None, {"key": "k"}),
                    (4, "read", None, OK, 5, 6, 7, {"key": "k"}),
                    (5, "cas", [1, 2], FAIL, 6, 7, None, {"key": "k"}))
    verdict = checkers.check_register(history, {}, tmp_path)
    assert verdict["valid"], verdict


@needs_go
def test_register_catches_a_stale_read_and_finds_its_window(tmp_path):
    history = pairs((0, "write", 1, OK, 0, 1, None, {"key": "a"}),
                    (1, "write", 2, OK, 2, 3, None, {"key": "a"}),
                    (2, "read", None, OK, 4, 5, 1, {"key": "a"}),
                    (3, "read", None, OK, 6, 7, 2, {"key": "a"}),
                    (0, "write", 5, OK, 0, 1, None, {"key": "b"}))
    verdict = checkers.check_register(history, {}, tmp_path)
    assert not verdict["valid"]
    assert verdict["non_linearizable_keys"] == ["a"]
    # The prefix ending with the stale read is the smallest that fails.
    assert verdict["window"]["to_s"] == 5.0
    assert list(tmp_path.glob("linearizability-a.html"))


@needs_go
def test_register_refuses_a_cas_that_reports_success_on_the_wrong_value(tmp_path):
    history = pairs((0, "write", 1, OK, 0, 1, None, {"key": "k"}),
                    (1, "cas", [2, 3], OK, 2, 3, None, {"key": "k"}))
    assert not checkers.check_register(history, {}, tmp_path)["valid"]


def test_set_catches_a_lost_acknowledged_insert_and_a_dbhash_difference(tmp_path):
    history = pairs((0, "add", 1, OK, 0, 1, None, {}), (1, "add", 2, OK, 0, 1, None, {}),
                    (2, "add", 3, INFO, 0, 1, None, {}), (3, "add", 4, FAIL, 0, 1, None, {}))
    good = {"members": {"1": [1, 2, 3], "2": [1, 2]}, "dbhash": {"1": "x", "2": "x"}}
    assert checkers.check_set(history, good, tmp_path)["valid"]
    lost = {"members": {"1": [1, 2], "2": [1]}, "dbhash": {"1": "x", "2": "x"}}
    verdict = checkers.check_set(history, lost, tmp_path)
    assert not verdict["valid"] and verdict["members"]["2"]["lost"] == [2]
    assert verdict["window"] == {"from_s": 0.0, "to_s": 1.0, "values": [2]}
    differ = {"members": {"1": [1, 2], "2": [1, 2]}, "dbhash": {"1": "x", "2": "y"}}
    assert not checkers.check_set(history, differ, tmp_path)["valid"]
    invented = {"members": {"1": [1, 2, 9], "2": [1, 2, 9]}, "dbhash": {"1": "x", "2": "x"}}
    assert not checkers.check_set(history, invented, tmp_path)["valid"]


def test_rc_majority_catches_a_causal_read_that_lost_what_an_earlier_read_saw(tmp_path):
    writes = [(10, "add", 1, OK, 0, 0.5, None, {"w": "majority"}), (11, "add", 2, OK, 0, 0.5, None, {"w": "1"})]
    final = {"members": {"1": [1, 2], "2": [1, 2]}}
    monotonic = pairs(*writes, (0, "read", None, OK, 1, 2, [1, 2], {"causal": True}),
                      (1, "read", None, OK, 1.5, 2.5, [1], {"causal": True}),  # concurrent: allowed
                      (2, "read", None, OK, 3, 4, [1, 2], {"causal": True}))
    assert checkers.check_rc_majority(monotonic, final, tmp_path)["valid"]
    regressed = pairs(*writes, (0, "read", None, OK, 1, 2, [1, 2], {"causal": True}),
                      (1, "read", None, OK, 3, 4, [1], {"causal": True}))
    verdict = checkers.check_rc_majority(regressed, final, tmp_path)
    assert not verdict["valid"] and verdict["nonmonotonic_reads"][0]["missing"] == [2]
    stale = pairs(*writes, (0, "read", None, OK, 1, 2, [1, 2], {"causal": True}),
                  (1, "read", None, OK, 3, 4, [1], {"causal": False}))
    verdict = checkers.check_rc_majority(stale, final, tmp_path)
    assert verdict["valid"] and verdict["stale_reads_outside_causality"][0]["missing"] == [2]
    rolled_back = {"members": {"1": [1], "2": [1, 2]}}
    verdict = checkers.check_rc_majority(monotonic, rolled_back, tmp_path)
    assert not verdict["valid"] and verdict["lost"] == {"1": [2]}


def test_retryable_catches_an_increment_applied_twice_and_a_lost_one(tmp_path):
    history = pairs((0, "incr", 1, OK, 0, 1, None, {"key": "c0"}), (1, "incr", 2, OK, 0, 1, None, {"key": "c0"}),
                    (2, "incr", 3, INFO, 0, 1, None, {"key": "c0"}))

    def final(*applied):
        return {"members": {"1": {"c0": {"n": len(applied), "applied": list(applied)}}}}
    for applied in ((1, 2), (2, 1, 3)):
        assert checkers.check_retryable(history, final(*applied), tmp_path)["valid"]
    twice = checkers.check_retryable(history, final(1, 2, 2), tmp_path)
    assert not twice["valid"] and twice["counters"]["c0"]["anomalies"]["1"] == {"applied twice": [2]}
    assert twice["window"]["values"] == [2]
    lost = checkers.check_retryable(history, final(1, 3), tmp_path)
    assert not lost["valid"] and lost["counters"]["c0"]["anomalies"]["1"] == {"lost": [2]}
    invented = checkers.check_retryable(history, final(1, 2, 9), tmp_path)
    assert invented["counters"]["c0"]["anomalies"]["1"] == {"never acknowledged nor unknown": [9]}
    miscounted = {"members": {"1": {"c0": {"n": 3, "applied": [1, 2]}}}}
    assert not checkers.check_retryable(history, miscounted, tmp_path)["valid"]


def test_the_schedule_follows_from_the_seed_alone():
    first = nemesis.schedule(42, 120, list(nemesis.KINDS), 5)
    assert first == nemesis.schedule(42, 120, list(nemesis.KINDS), 5)
    assert first != nemesis.schedule(43, 120, list(nemesis.KINDS), 5)
    for window, following in zip(first, first[1:]):
        assert window["start"] < window["end"] < following["start"]
    assert first[-1]["end"] <= 120 - nemesis.TAIL_S
    assert nemesis.schedule(42, 120, [], 3) == []


def test_a_ring_gives_every_member_a_majority_and_no_two_the_same():
    sees = nemesis.ring([3, 1, 5, 2, 4])
    majorities = [frozenset(s | {m}) for m, s in sees.items()]
    assert all(len(m) == 3 for m in majorities)
    assert len(set(majorities)) == 5
    bridge = nemesis.ring([2, 1, 3])
    assert bridge == {2: {1, 3}, 1: {2}, 3: {2}}


def test_availability_finds_the_longest_stretch_without_a_success():
    history = pairs((0, "add", 1, OK, 0, 1, None, {}), (1, "add", 2, FAIL, 1, 9, None, {}),
                    (2, "add", 3, OK, 2, 11, None, {}), (3, "add", 4, INFO, 11, 20, None, {}),
                    (4, "add", 5, OK, 12, 13, None, {}))
    assert checkers.availability(history) == {"ok_ops": 3, "longest_without_ok_s": 10.0, "from_s": 1.0}
    assert checkers.availability(pairs((0, "add", 1, FAIL, 0, 1, None, {}))) == {"ok_ops": 0}
    # The stretch after the last success counts too.
    tail = pairs((0, "add", 1, OK, 0, 1, None, {}), (1, "add", 2, FAIL, 1, 30, None, {}))
    assert checkers.availability(tail) == {"ok_ops": 1, "longest_without_ok_s": 29.0, "from_s": 1.0}
