"""find and its filters, projection, sort, skip, limit; count and distinct (issue 2, item 4)."""

import re

import pytest
from bson import Int64, ObjectId, Regex
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import OperationFailure


@pytest.fixture
def people(coll):
    coll.insert_many([
        {"_id": 1, "name": "ann", "age": 31, "tags": ["a", "b"], "addr": {"city": "Oslo", "zip": 1},
         "scores": [{"k": "x", "v": 5}, {"k": "y", "v": 9}]},
        {"_id": 2, "name": "bob", "age": 25, "tags": ["b"], "addr": {"city": "Rome"},
         "scores": [{"k": "x", "v": 2}]},
        {"_id": 3, "name": "cy", "age": 40.0, "tags": [], "addr": None},
        {"_id": 4, "name": "Dee", "age": Int64(25), "tags": ["c", "a", "b"]},
        {"_id": 5, "name": "eve", "age": "unknown"},
    ])
    return coll


def ids(cursor):
    return [d["_id"] for d in cursor]


def test_comparison_operators_bracket_types(people):
    assert ids(people.find({"age": {"$gt": 30}}).sort("_id")) == [1, 3]
    assert ids(people.find({"age": 25}).sort("_id")) == [2, 4]
    assert ids(people.find({"age": {"$gte": 25, "$lt": 40}}).sort("_id")) == [1, 2, 4]
    assert ids(people.find({"age": {"$ne": 25}}).sort("_id")) == [1, 3, 5]
    assert ids(people.find({"age": {"$gt": "a"}})) == [5]


def test_in_nin_and_regex_in_in(people):
    assert ids(people.find({"name": {"$in": ["ann", "cy"]}}).sort("_id")) == [1, 3]
    assert ids(people.find({"name": {"$in": [re.compile("^D")]}})) == [4]
    assert ids(people.find({"_id": {"$nin": [1, 2, 3]}}).sort("_id")) == [4, 5]


def test_logical_operators(people):
    assert ids(people.find({"$or": [{"age": 31}, {"name": "eve"}]}).sort("_id")) == [1, 5]
    assert ids(people.find({"$and": [{"tags": "a"}, {"tags": "b"}]}).sort("_id")) == [1, 4]
    assert ids(people.find({"$nor": [{"tags": "b"}, {"age": "unknown"}]}).sort("_id")) == [3]
    assert ids(people.find({"age": {"$not": {"$gt": 30}}}).sort("_id")) == [2, 4, 5]


def test_exists_type_size_all_mod(people):
    assert ids(people.find({"addr": {"$exists": False}}).sort("_id")) == [4, 5]
    assert ids(people.find({"age": {"$type": "string"}})) == [5]
    assert ids(people.find({"age": {"$type": "number"}}).sort("_id")) == [1, 2, 3, 4]
    assert ids(people.find({"age": {"$type": "long"}})) == [4]
    assert ids(people.find({"tags": {"$size": 0}})) == [3]
    assert ids(people.find({"tags": {"$all": ["a", "b"]}}).sort("_id")) == [1, 4]
    assert ids(people.find({"age": {"$mod": [5, 0]}}).sort("_id")) == [2, 3, 4]


def test_regex(people):
    assert ids(people.find({"name": {"$regex": "^d", "$options": "i"}})) == [4]
    assert ids(people.find({"name": Regex("e$")}).sort("_id")) == [4, 5]


def test_dotted_paths_and_arrays(people):
    assert ids(people.find({"addr.city": "Oslo"})) == [1]
    assert ids(people.find({"scores.v": {"$gt": 8}})) == [1]
    assert ids(people.find({"scores.0.k": "x"}).sort("_id")) == [1, 2]
    assert ids(people.find({"tags": "c"})) == [4]
    assert ids(people.find({"tags": ["b"]})) == [2]
    assert ids(people.find({"addr.zip": None}).sort("_id")) == [2, 3, 4, 5]
    assert ids(people.find({"addr": None}).sort("_id")) == [3, 4, 5]


def test_elem_match(people):
    assert ids(people.find({"scores": {"$elemMatch": {"k": "x", "v": {"$gte": 5}}}})) == [1]
    # Without $elemMatch the conditions may be met by different elements.
    assert ids(people.find({"scores.k": "y", "scores.v": 5})) == [1]
    assert ids(people.find({"scores": {"$elemMatch": {"k": "y", "v": 5}}})) == []


def test_expr(people):
    people.insert_one({"_id": 6, "a": 5, "b": 3})
    people.insert_one({"_id": 7, "a": 1, "b": 3})
    assert ids(people.find({"$expr": {"$gt": ["$a", "$b"]}})) == [6]


def test_unknown_operator_is_an_error(people):
    with pytest.raises(OperationFailure) as failure:
        list(people.find({"age": {"$frobnicate": 1}}))
    assert failure.value.code == 2
    assert "$frobnicate" in str(failure.value)


def test_projection(people):
    assert people.find_one({"_id": 1}, {"name": 1}) == {"_id": 1, "name": "ann"}
    assert people.find_one({"_id": 1}, {"name": 1, "_id": 0}) == {"name": "ann"}
    excluded = people.find_one({"_id": 2}, {"scores": 0, "tags": 0, "addr": 0})
    assert excluded == {"_id": 2, "name": "bob", "age": 25}
    assert people.find_one({"_id": 1}, {"addr.city": 1}) == {"_id": 1, "addr": {"city": "Oslo"}}
    assert people.find_one({"_id": 4}, {"tags": {"$slice": 2}})["tags"] == ["c", "a"]
    with pytest.raises(OperationFailure):
        people.find_one({}, {"name": 1, "age": 0})


def test_sort_skip_limit(people):
    assert ids(people.find({"age": {"$type": "number"}}).sort([("age", DESCENDING), ("_id", ASCENDING)])) == [3, 1, 2, 4]
    assert ids(people.find().sort("_id", DESCENDING).skip(1).limit(2)) == [4, 3]
    # Mixed types sort by BSON order: numbers before strings.
    assert ids(people.find().sort([("age", ASCENDING), ("_id", ASCENDING)])) == [2, 4, 1, 3, 5]


def test_sort_on_arrays_uses_min_or_max(coll):
    coll.insert_many([{"_id": 1, "a": [1, 10]}, {"_id": 2, "a": [5]}, {"_id": 3, "a": 3}])
    assert ids(coll.find().sort("a", ASCENDING)) == [1, 3, 2]
    assert ids(coll.find().sort("a", DESCENDING)) == [1, 2, 3]


def test_batches_and_get_more(coll):
    coll.insert_many([{"_id": i} for i in range(250)])
    reply = coll.database.command({"find": coll.name, "batchSize": 10, "sort": {"_id": 1}})
    cursor = reply["cursor"]
    assert len(cursor["firstBatch"]) == 10
    assert cursor["id"] != 0
    assert cursor["ns"] == f"{coll.database.name}.{coll.name}"
    more = coll.database.command({"getMore": cursor["id"], "collection": coll.name, "batchSize": 100})
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == list(range(10, 110))
    # Default first batch is 101 documents.
    default = coll.database.command({"find": coll.name})
    assert len(default["cursor"]["firstBatch"]) == 101
    assert ids(coll.find().sort("_id").batch_size(7)) == list(range(250))


def test_single_batch_and_negative_limit(coll):
    coll.insert_many([{"_id": i} for i in range(50)])
    reply = coll.database.command({"find": coll.name, "batchSize": 5, "singleBatch": True})
    assert reply["cursor"]["id"] == 0
    assert len(reply["cursor"]["firstBatch"]) == 5
    assert len(list(coll.find().limit(-3))) == 3


def test_kill_cursors(coll):
    coll.insert_many([{"_id": i} for i in range(30)])
    reply = coll.database.command({"find": coll.name, "batchSize": 2})
    cursor_id = reply["cursor"]["id"]
    killed = coll.database.command({"killCursors": coll.name, "cursors": [cursor_id, Int64(12345)]})
    assert killed["cursorsKilled"] == [cursor_id]
    assert killed["cursorsNotFound"] == [12345]
    with pytest.raises(OperationFailure) as failure:
        coll.database.command({"getMore": cursor_id, "collection": coll.name})
    assert failure.value.code == 43


def test_count_and_count_documents(people):
    assert people.count_documents({}) == 5
    assert people.count_documents({"tags": "b"}) == 3
    assert people.database.command({"count": people.name, "query": {"tags": "b"}, "limit": 2})["n"] == 2
    assert people.database.command({"count": people.name, "skip": 4})["n"] == 1
    assert people.estimated_document_count() == 5


def test_distinct(people):
    assert sorted(people.distinct("tags")) == ["a", "b", "c"]
    assert sorted(people.distinct("addr.city")) == ["Oslo", "Rome"]
    assert sorted(people.distinct("tags", {"age": 25})) == ["a", "b", "c"]


def test_find_on_missing_collection_is_empty(db):
    assert list(db.nothing_here.find()) == []
    assert db.nothing_here.count_documents({}) == 0


def test_expr_evaluation_error_fails_the_query(coll):
    coll.insert_many([{"_id": 1, "a": 1, "z": 0}])
    with pytest.raises(OperationFailure) as failure:
        list(coll.find({"$expr": {"$gt": [{"$divide": ["$a", "$z"]}, 0]}}))
    assert "divide by zero" in str(failure.value)


def test_expr_sees_now(coll):
    import datetime
    coll.insert_many([{"_id": 1, "d": datetime.datetime(2000, 1, 1)},
                      {"_id": 2, "d": datetime.datetime(2999, 1, 1)}])
    assert ids(coll.find({"$expr": {"$lt": ["$d", "$$NOW"]}})) == [1]
