"""Fixtures: one real node per test session, a fresh database per test."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from pymongo import MongoClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slipstream_testing import Node  # noqa: E402


@pytest.fixture(scope="session")
def node():
    """A node shared by the whole session (tests use their own databases)."""
    with Node() as running:
        yield running


@pytest.fixture(scope="session")
def client(node):
    mongo = MongoClient(node.uri, serverSelectionTimeoutMS=10_000)
    yield mongo
    mongo.close()


@pytest.fixture
def db(client):
    """A database of its own for each test, dropped afterwards."""
    name = "t_" + uuid.uuid4().hex[:12]
    database = client[name]
    yield database
    client.drop_database(name)


@pytest.fixture
def coll(db):
    return db["c"]


@pytest.fixture
def fresh_node():
    """A node of its own, for tests that kill or restart it."""
    running = Node()
    yield running
    running.cleanup()
