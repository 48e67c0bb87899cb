"""Partial indexes: only matching documents are indexed, unique among them,
planned only when the query implies the filter; MongoDB 7.0's allowed
operators (issue 10, item 3)."""

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure


def winning_index(coll, filter, hint=None):
    cursor = coll.find(filter)
    if hint:
        cursor = cursor.hint(hint)
    plan = cursor.explain()["queryPlanner"]["winningPlan"]
    while "inputStage" in plan:
        plan = plan["inputStage"]
    return plan.get("indexName")


def keys_per_index(coll):
    return coll.database.command("validate", coll.name)["keysPerIndex"]


def test_only_matching_documents_are_indexed(coll):
    coll.insert_many([{"_id": i, "a": i} for i in range(10)])
    coll.create_index("a", partialFilterExpression={"a": {"$gte": 6}})
    listed = {ix["name"]: ix for ix in coll.list_indexes()}
    assert listed["a_1"]["partialFilterExpression"] == {"a": {"$gte": 6}}
    assert keys_per_index(coll)["a_1"] == 4
    coll.insert_many([{"_id": 10, "a": 10}, {"_id": 11, "a": 1}])
    coll.update_one({"_id": 0}, {"$set": {"a": 100}})  # moves into the index
    coll.update_one({"_id": 9}, {"$set": {"a": -1}})  # moves out of it
    coll.delete_one({"_id": 8})
    assert keys_per_index(coll)["a_1"] == 4
    assert coll.database.command("validate", coll.name)["valid"] is True


def test_unique_only_among_indexed_documents(coll):
    coll.create_index("email", unique=True, partialFilterExpression={"active": True})
    coll.insert_many(
        [
            {"email": "a@x", "active": False},
            {"email": "a@x", "active": False},
            {"email": "a@x", "active": True},
        ]
    )
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"email": "a@x", "active": True})
    with pytest.raises(DuplicateKeyError):
        coll.update_one({"active": False}, {"$set": {"active": True}})
    assert coll.count_documents({"active": True}) == 1


def test_planner_uses_it_only_when_the_query_implies_the_filter(coll):
    coll.insert_many([{"a": i, "s": "on" if i % 2 else "off"} for i in range(20)])
    coll.create_index("a", partialFilterExpression={"a": {"$gt": 5}})
    assert winning_index(coll, {"a": 7}) == "a_1"
    assert winning_index(coll, {"a": {"$gte": 10}}) == "a_1"
    assert winning_index(coll, {"a": 3}) is None
    assert winning_index(coll, {"a": {"$gt": 2}}) is None
    # The answer is whole either way: {a: 3} is not in the index.
    assert [d["a"] for d in coll.find({"a": 3})] == [3]
    assert coll.count_documents({"a": {"$gt": 2}}) == 17
    # Hinting the index for a query it cannot answer is refused as in 7.0.
    with pytest.raises(OperationFailure) as failure:
        list(coll.find({"a": 3}).hint("a_1"))
    assert failure.value.code == 2
    assert [d["a"] for d in coll.find({"a": 8}).hint("a_1")] == [8]
    coll.create_index("s", partialFilterExpression={"s": {"$in": ["on", "paused"]}})
    assert winning_index(coll, {"s": "on"}) == "s_1"
    assert winning_index(coll, {"s": "off"}) is None
    assert coll.count_documents({"s": "off"}) == 10


def test_filter_is_part_of_the_index_signature(coll):
    coll.create_index("a", name="a_big", partialFilterExpression={"a": {"$gt": 5}})
    coll.create_index("a", name="a_small", partialFilterExpression={"a": {"$lt": 0}})
    with pytest.raises(OperationFailure) as failure:
        coll.create_index("a", name="a_big", partialFilterExpression={"a": {"$gt": 6}})
    assert failure.value.code == 86
    assert sorted(ix["name"] for ix in coll.list_indexes()) == ["_id_", "a_big", "a_small"]


@pytest.mark.parametrize(
    "partial",
    [
        {"a": {"$eq": 1}},
        {"a": {"$exists": True}},
        {"a": {"$type": "string"}},
        {"a": {"$in": [1, 2]}},
        {"$and": [{"a": {"$gt": 1}}, {"b": {"$lte": 5}}]},
        {"$or": [{"a": 1}, {"b": {"$lt": 0}}]},
    ],
)
def test_allowed_operators(coll, partial):
    coll.create_index("a", partialFilterExpression=partial)
    assert {ix["name"]: ix for ix in coll.list_indexes()}["a_1"]["partialFilterExpression"] == partial


@pytest.mark.parametrize(
    "partial",
    [
        {"a": {"$ne": 1}},
        {"a": {"$exists": False}},
        {"a": {"$nin": [1]}},
        {"a": {"$regex": "^x"}},
        {"a": {"$not": {"$gt": 1}}},
        {"$nor": [{"a": 1}]},
        {"$expr": {"$eq": ["$a", 1]}},
        {"a": {"$size": 2}},
    ],
)
def test_refused_operators(coll, partial):
    with pytest.raises(OperationFailure) as failure:
        coll.create_index("a", partialFilterExpression=partial)
    assert failure.value.code == 67
    assert "unsupported expression in partial index" in str(failure.value)


def test_refusals_of_the_option_itself(coll):
    with pytest.raises(OperationFailure) as failure:
        coll.create_index("a", sparse=True, partialFilterExpression={"a": 1})
    assert failure.value.code == 67
    with pytest.raises(OperationFailure) as failure:
        coll.database.command(
            {"createIndexes": coll.name, "indexes": [{"key": {"a": 1}, "name": "a_1", "partialFilterExpression": 5}]}
        )
    assert failure.value.code == 14


def test_partial_ttl_expires_only_what_the_filter_admits(client, coll):
    from datetime import datetime, timedelta, timezone
    import time

    old = datetime.now(timezone.utc) - timedelta(hours=1)
    coll.insert_many([{"_id": 1, "at": old, "kind": "temp"}, {"_id": 2, "at": old, "kind": "keep"}])
    client.admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 1})
    try:
        coll.create_index("at", expireAfterSeconds=0, partialFilterExpression={"kind": "temp"})
        deadline = time.monotonic() + 15
        while coll.count_documents({}) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)
    finally:
        client.admin.command({"setParameter": 1, "ttlMonitorSleepSecs": 60})
    assert [d["_id"] for d in coll.find()] == [2]


def test_partial_index_survives_a_restart(fresh_node):
    from pymongo import MongoClient

    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        mongo.db.c.insert_many([{"a": 1}, {"a": 9}])
        mongo.db.c.create_index("a", partialFilterExpression={"a": {"$gt": 5}})
    fresh_node.stop()
    fresh_node.start()
    with MongoClient(fresh_node.uri) as mongo:
        assert mongo.db.command("validate", "c")["keysPerIndex"]["a_1"] == 1
        mongo.db.c.insert_one({"a": 10})
        assert mongo.db.command("validate", "c")["keysPerIndex"]["a_1"] == 2
