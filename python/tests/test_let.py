"""The `let` option: constants visible as `$$name` to filters, pipeline
updates and aggregation stages (MongoDB 5.0+)."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def coll(db):
    db.items.insert_many([{"_id": 1, "x": 1}, {"_id": 2, "x": 2}, {"_id": 3, "x": 3}])
    return db.items


def test_find_filter_sees_let_constants(coll):
    found = list(coll.find({"$expr": {"$eq": ["$_id", "$$id"]}}, let={"id": 2}))
    assert found == [{"_id": 2, "x": 2}]
    # Inside $or, and a constant computed from an earlier one.
    found = coll.find(
        {"$or": [{"$expr": {"$eq": ["$_id", "$$twice"]}}, {"x": 3}]},
        let={"id": 1, "twice": {"$multiply": ["$$id", 2]}},
    )
    assert sorted(d["_id"] for d in found) == [2, 3]


def test_update_and_delete_see_let_constants(coll):
    result = coll.update_one(
        {"$expr": {"$eq": ["$_id", "$$id"]}}, [{"$set": {"y": "$$value"}}], let={"id": 1, "value": "foo"}
    )
    assert (result.matched_count, result.modified_count) == (1, 1)
    assert coll.find_one({"_id": 1}) == {"_id": 1, "x": 1, "y": "foo"}
    result = coll.update_many({"$expr": {"$gt": ["$x", "$$min"]}}, {"$set": {"big": True}}, let={"min": 1})
    assert result.modified_count == 2
    result = coll.delete_many({"$expr": {"$lt": ["$x", "$$limit"]}}, let={"limit": 3})
    assert result.deleted_count == 2
    assert [d["_id"] for d in coll.find()] == [3]


def test_find_one_and_update_sees_let_constants(coll):
    before = coll.find_one_and_update(
        {"$expr": {"$eq": ["$_id", "$$id"]}}, [{"$set": {"x": "$$x"}}], let={"id": 3, "x": "new"}
    )
    assert before == {"_id": 3, "x": 3}
    assert coll.find_one({"_id": 3})["x"] == "new"
    deleted = coll.find_one_and_delete({"$expr": {"$eq": ["$_id", "$$id"]}}, let={"id": 2})
    assert deleted == {"_id": 2, "x": 2}


def test_aggregate_stages_see_let_constants(coll):
    out = list(
        coll.aggregate(
            [{"$match": {"$expr": {"$eq": ["$_id", "$$id"]}}}, {"$project": {"_id": 0, "v": "$$v", "lit": "$$lit"}}],
            let={"id": 1, "v": "foo", "lit": {"$literal": "$bar"}},
        )
    )
    assert out == [{"v": "foo", "lit": "$bar"}]


def test_let_errors(coll):
    with pytest.raises(OperationFailure) as info:
        list(coll.find({}, let={"x": "$field"}))
    assert info.value.code == 4890500
    with pytest.raises(OperationFailure) as info:
        list(coll.find({}, let={"NOW": 1}))
    assert info.value.code == 4738901
    with pytest.raises(OperationFailure) as info:
        list(coll.find({}, let={"Upper": 1}))
    assert info.value.code == 9
