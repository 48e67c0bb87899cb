"""The aggregation write stages $out and $merge."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def source(db):
    db.src.insert_many([{"_id": 1, "x": 11}, {"_id": 2, "x": 22}, {"_id": 3, "x": 33}])
    return db.src


def test_out_replaces_the_target_and_keeps_its_indexes(db, source):
    db.dst.insert_many([{"_id": 9, "old": True}])
    db.dst.create_index("x", unique=True)
    cursor = source.aggregate([{"$match": {"_id": {"$gt": 1}}}, {"$out": "dst"}], batchSize=0)
    assert list(cursor) == []
    assert list(db.dst.find().sort("_id", 1)) == [{"_id": 2, "x": 22}, {"_id": 3, "x": 33}]
    assert "x_1" in db.dst.index_information()
    # No temporary collection is left behind.
    assert sorted(db.list_collection_names()) == ["dst", "src"]


def test_failed_out_leaves_the_target_as_it_was(db, source):
    db.dst.insert_one({"_id": 9, "x": 0})
    db.dst.create_index("k", unique=True)
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$project": {"k": {"$literal": 1}}}, {"$out": "dst"}])
    assert info.value.code == 11000
    assert list(db.dst.find()) == [{"_id": 9, "x": 0}]
    assert sorted(db.list_collection_names()) == ["dst", "src"]


def test_out_to_another_database(client, db, source):
    other = client[db.name + "_o"]
    try:
        source.aggregate([{"$out": {"db": other.name, "coll": "copy"}}])
        assert other.copy.count_documents({}) == 3
    finally:
        client.drop_database(other.name)


def test_merge_modes(db, source):
    db.dst.insert_many([{"_id": 1, "x": 0, "keep": "a"}, {"_id": 2, "x": 0, "keep": "b"}])
    source.aggregate([{"$match": {"_id": 1}}, {"$merge": {"into": "dst"}}])
    assert db.dst.find_one({"_id": 1}) == {"_id": 1, "x": 11, "keep": "a"}
    source.aggregate([{"$match": {"_id": 2}}, {"$merge": {"into": "dst", "whenMatched": "replace"}}])
    assert db.dst.find_one({"_id": 2}) == {"_id": 2, "x": 22}
    source.aggregate([{"$merge": {"into": "dst", "whenMatched": "keepExisting", "whenNotMatched": "discard"}}])
    assert db.dst.count_documents({}) == 2
    source.aggregate(
        [{"$merge": {"into": "dst", "whenMatched": [{"$set": {"sum": {"$add": ["$x", "$$new.x"]}}}]}}]
    )
    assert db.dst.find_one({"_id": 1})["sum"] == 22
    assert db.dst.find_one({"_id": 3}) == {"_id": 3, "x": 33}


def test_merge_errors(db, source):
    db.dst.insert_one({"_id": 2})
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$merge": {"into": "dst", "whenMatched": "fail"}}])
    assert info.value.code == 11000
    assert info.value.details["keyValue"] == {"_id": 2}
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$merge": {"into": "none", "whenNotMatched": "fail"}}])
    assert info.value.code == 13113
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$out": "x"}, {"$match": {}}])
    assert info.value.code == 40601


def test_database_aggregate_documents_into_merge(db):
    db.dst.insert_one({"_id": 1, "a": 1})
    db.aggregate([{"$documents": [{"_id": 1, "b": 2}, {"_id": 5}]}, {"$merge": {"into": "dst"}}])
    assert list(db.dst.find().sort("_id", 1)) == [{"_id": 1, "a": 1, "b": 2}, {"_id": 5}]


def test_merge_on_fields_of_a_unique_index(db, source):
    db.dst.create_index([("k", 1), ("j", 1)], unique=True)
    db.dst.insert_one({"_id": "t", "k": 22, "j": 1, "keep": True})
    pipeline = [{"$project": {"_id": 0, "k": "$x", "j": {"$literal": 1}, "new": {"$literal": True}}}]
    source.aggregate(pipeline + [{"$merge": {"into": "dst", "on": ["j", "k"]}}])
    matched = db.dst.find_one({"k": 22})
    assert matched == {"_id": "t", "k": 22, "j": 1, "keep": True, "new": True}
    assert db.dst.count_documents({}) == 3
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$merge": {"into": "dst", "on": "x"}}])
    assert info.value.code == 51183
    with pytest.raises(OperationFailure) as info:
        source.aggregate([{"$project": {"k": 1}}, {"$merge": {"into": "dst", "on": ["k", "j"]}}])
    assert info.value.code == 51132


def test_out_closes_cursors_of_the_replaced_target(db, source):
    db.dst.insert_many([{"i": i} for i in range(10)])
    cursor_id = db.command("find", "dst", batchSize=2)["cursor"]["id"]
    source.aggregate([{"$out": "dst"}])
    with pytest.raises(OperationFailure) as info:
        db.command("getMore", cursor_id, collection="dst")
    assert info.value.code == 175  # QueryPlanKilled, as MongoDB (it was 43)


def test_out_keeps_the_target_options(db, source):
    db.create_collection("dst", storageEngine={"wiredTiger": {}})
    source.aggregate([{"$out": "dst"}])
    assert db.dst.options() == {"storageEngine": {"wiredTiger": {}}}
    assert db.dst.count_documents({}) == 3
