"""Fixtures for the multi-process replica set tests.

Every set a test starts is checked after the test, whatever the test did
to it: partitions healed, paused members resumed, killed members started
again, then, once the set is quiet, every data-bearing member's `dbHash`
of every database must agree.
"""

from __future__ import annotations

import pytest

from slipstream_testing import ReplicaSet


def settle(rs: ReplicaSet) -> None:
    """Undoes the faults a test left, so that every member can converge."""
    rs.close_clients()
    if rs.state().get("partition"):
        rs.heal()
    members = rs.status()["members"]
    for member in members:
        if member["paused"]:
            rs.resume(member["id"])
    in_config = {m["_id"] for m in rs.config_of_any()["members"]}
    for member in members:
        if not member["up"] and member["id"] in in_config:
            rs.restart(member["id"])
    rs.primary()


def check_and_clean(rs: ReplicaSet) -> None:
    try:
        settle(rs)
        rs.assert_db_hash_agree()
    finally:
        rs.cleanup()


@pytest.fixture
def make_replset():
    """Starts sets of the shape asked (ReplicaSet's arguments); checks and
    removes them after the test."""
    sets: list[ReplicaSet] = []

    def make(**options) -> ReplicaSet:
        rs = ReplicaSet(**options)
        try:
            rs.start()
        except BaseException:
            rs.cleanup()
            raise
        sets.append(rs)
        return rs

    yield make
    failures = []
    for rs in sets:
        try:
            check_and_clean(rs)
        except Exception as error:  # every set is cleaned even if one fails
            failures.append(error)
    if failures:
        raise failures[0]


@pytest.fixture(scope="session")
def shared_replset():
    """One 3-member set for the tests that leave its shape alone."""
    rs = ReplicaSet()
    try:
        rs.start()
        yield rs
    finally:
        rs.cleanup()


@pytest.fixture
def rs(shared_replset):
    """The shared set, checked after each test that uses it."""
    shared_replset.primary()
    yield shared_replset
    settle(shared_replset)
    shared_replset.assert_db_hash_agree()
