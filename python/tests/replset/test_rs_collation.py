"""A collection's default collation on a replica set: every member keys the
collated `_id` table from the replicated `create` (the oplog carries nothing
new), so a member that becomes primary refuses an `_id` equal under the
collation just as the old primary did."""

from __future__ import annotations

import pytest
from pymongo import WriteConcern
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError


def test_collated_id_uniqueness_survives_failover(rs):
    db = rs.client().get_database("coll_rs", write_concern=WriteConcern(w=3, wtimeout=20_000))
    db.drop_collection("ids")
    db.create_collection("ids", collation=Collation(locale="en", strength=2))
    db.ids.insert_one({"_id": "a"})
    old = rs.step_down()
    new = rs.primary(exclude=(old,))
    assert new != old
    db = rs.client().get_database("coll_rs", write_concern=WriteConcern(w=3, wtimeout=20_000))
    with pytest.raises(DuplicateKeyError):
        db.ids.insert_one({"_id": "A"})
    db.ids.insert_one({"_id": "b"})
    assert sorted(d["_id"] for d in db.ids.find()) == ["a", "b"]
