"""Views: read-only pipelines over a collection (or another view)."""

from __future__ import annotations

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def view(db):
    db.base.insert_many([{"_id": i, "x": i, "tags": ["a", "b"] if i % 2 else ["c"]} for i in range(1, 7)])
    db.create_collection("big", viewOn="base", pipeline=[{"$match": {"x": {"$gt": 2}}}])
    return db.big


def test_find_count_distinct_read_through_the_view(db, view):
    assert [d["_id"] for d in view.find().sort("x", -1)] == [6, 5, 4, 3]
    assert list(view.find({"x": {"$lt": 5}}, {"_id": 0, "x": 1})) == [{"x": 3}, {"x": 4}]
    assert [d["x"] for d in view.find().sort("x", 1).skip(1).limit(2)] == [4, 5]
    assert view.count_documents({}) == 4
    assert view.estimated_document_count() == 4
    assert view.count_documents({"x": {"$gte": 5}}) == 2
    assert sorted(view.distinct("tags")) == ["a", "b", "c"]
    # Batches through getMore on the view's namespace.
    assert len(list(view.find().batch_size(1))) == 4


def test_aggregate_and_stacked_views(db, view):
    out = list(view.aggregate([{"$group": {"_id": None, "sum": {"$sum": "$x"}}}]))
    assert out == [{"_id": None, "sum": 18}]
    db.create_collection("bigger", viewOn="big", pipeline=[{"$match": {"x": {"$gt": 4}}}])
    assert [d["_id"] for d in db.bigger.find().sort("_id", 1)] == [5, 6]
    looked_up = list(db.base.aggregate([
        {"$match": {"_id": 1}},
        {"$lookup": {"from": "bigger", "localField": "tags", "foreignField": "tags", "as": "same"}},
    ]))
    assert [d["_id"] for d in looked_up[0]["same"]] == [5]


def test_list_collections_shows_the_view(db, view):
    entries = {c["name"]: c for c in db.list_collections()}
    assert entries["big"]["type"] == "view"
    assert entries["big"]["options"] == {"viewOn": "base", "pipeline": [{"$match": {"x": {"$gt": 2}}}]}
    assert entries["base"]["type"] == "collection"


def test_writes_and_indexes_on_a_view_are_refused(db, view):
    for attempt in (
        lambda: view.insert_one({"x": 1}),
        lambda: view.update_one({}, {"$set": {"y": 1}}),
        lambda: view.delete_many({}),
        lambda: view.find_one_and_delete({}),
        lambda: view.create_index("x"),
        lambda: list(view.list_indexes()),
        lambda: db.base.aggregate([{"$out": "big"}]),
    ):
        with pytest.raises(OperationFailure) as info:
            attempt()
        assert info.value.code == 166
    assert db.base.count_documents({}) == 6


def test_bad_definitions_are_refused(db, view):
    with pytest.raises(OperationFailure):
        db.create_collection("loop", viewOn="loop")
    with pytest.raises(OperationFailure):
        db.create_collection("w", viewOn="base", pipeline=[{"$out": "x"}])
    with pytest.raises(OperationFailure):
        db.create_collection("p", pipeline=[])
    with pytest.raises(OperationFailure):
        db.create_collection("bad", viewOn="base", pipeline=[{"$nope": 1}])


def test_dropping_a_view_leaves_its_collection(db, view):
    view.drop()
    assert "big" not in db.list_collection_names()
    assert db.base.count_documents({}) == 6


def test_a_view_that_reads_itself_fails_instead_of_recursing(db, view):
    db.create_collection("selfish", viewOn="base", pipeline=[{"$lookup": {"from": "selfish", "pipeline": [], "as": "me"}}])
    with pytest.raises(OperationFailure) as info:
        list(db.selfish.find())
    assert info.value.code == 5
    # The node is still serving.
    assert db.command("ping")["ok"] == 1
