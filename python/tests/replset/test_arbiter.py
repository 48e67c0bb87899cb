"""A primary-secondary-arbiter set on real members: the arbiter votes and
holds no data; a majority write needs both data-bearing members."""

from __future__ import annotations

import sys
from pathlib import Path

import pymongo
import pytest
from pymongo import MongoClient
from pymongo.errors import WriteConcernError
from pymongo.write_concern import WriteConcern

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repl_members import Members  # noqa: E402


def test_primary_secondary_arbiter():
    with Members(3, "psa") as members:
        members.initiate([
            {"_id": 0, "host": members.host(0)},
            {"_id": 1, "host": members.host(1)},
            {"_id": 2, "host": members.host(2), "arbiterOnly": True},
        ])
        primary = members.primary([0, 1])
        members.wait_for("the arbiter to report ARBITER", lambda: members.state(2) == 7)
        hello = members.hello(2)
        assert hello["arbiterOnly"] is True and hello["arbiters"] == [members.host(2)]
        with MongoClient(members.uri()) as client:
            coll = client.psa.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=10_000))
            coll.insert_one({"_id": 1})
            with members.direct(2) as arbiter:
                assert arbiter.local["oplog.rs"].count_documents({}) == 0
            # MongoDB's implicit default in such a set is w:1, so that plain
            # writes go on with one data-bearing member down.
            default = client.psa.get_collection("d")
            members.nodes[1 - primary].kill()
            with pymongo.timeout(10):
                default.insert_one({"_id": "implicit w:1"})
            with pytest.raises(WriteConcernError) as raised:
                client.psa.get_collection("c", write_concern=WriteConcern(w="majority", wtimeout=500)).insert_one(
                    {"_id": 2})
            assert raised.value.code == 64
