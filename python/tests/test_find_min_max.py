"""find's min and max: bounds on the hinted index's key order."""

from __future__ import annotations

import pytest
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import OperationFailure


@pytest.fixture
def coll(db):
    db.items.insert_many([{"j": j, "k": j % 3} for j in range(10)] + [{"j": "text", "k": 0}])
    db.items.create_index([("j", ASCENDING)])
    db.items.create_index([("k", DESCENDING), ("j", ASCENDING)])
    return db.items


def js(cursor):
    return [d["j"] for d in cursor]


def test_min_inclusive_max_exclusive_in_index_order(coll):
    assert js(coll.find().min([("j", 3)]).max([("j", 6)]).hint([("j", 1)])) == [3, 4, 5]
    # Index order puts strings after numbers, so an open max reaches them.
    assert js(coll.find().min([("j", 8)]).hint([("j", 1)])) == [8, 9, "text"]
    # The filter, skip and limit still apply within the bounds.
    assert js(coll.find({"k": 1}).min([("j", 2)]).hint([("j", 1)])) == [4, 7]
    assert js(coll.find().min([("j", 2)]).hint([("j", 1)]).skip(1).limit(2)) == [3, 4]


def test_compound_descending_bounds(coll):
    # Index {k: -1, j: 1}: k from 2 down, then j ascending.
    cursor = coll.find({}, {"_id": 0}).min([("k", 2), ("j", 5)]).max([("k", 1), ("j", 4)]).hint([("k", -1), ("j", 1)])
    assert list(cursor) == [{"j": 5, "k": 2}, {"j": 8, "k": 2}, {"j": 1, "k": 1}]


def test_bounds_need_a_hint_matching_their_fields(coll):
    with pytest.raises(OperationFailure) as info:
        coll.database.command("find", coll.name, min={"j": 3})
    assert info.value.code == 51173
    with pytest.raises(OperationFailure) as info:
        list(coll.find().min([("j", 1), ("k", 1)]).hint([("k", -1), ("j", 1)]))
    assert info.value.code == 51174
