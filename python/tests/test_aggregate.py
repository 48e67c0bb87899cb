"""aggregate: the stages issue 2 lists (item 4)."""

import pytest
from pymongo.errors import OperationFailure


@pytest.fixture
def sales(coll):
    coll.insert_many([
        {"_id": 1, "item": "a", "qty": 2, "price": 10, "tags": ["x", "y"]},
        {"_id": 2, "item": "b", "qty": 1, "price": 20, "tags": ["y"]},
        {"_id": 3, "item": "a", "qty": 5, "price": 10, "tags": []},
        {"_id": 4, "item": "c", "qty": 3, "price": 5},
    ])
    return coll


def test_match_project_sort_limit_skip(sales):
    out = list(sales.aggregate([
        {"$match": {"qty": {"$gte": 2}}},
        {"$project": {"_id": 0, "item": 1, "total": {"$multiply": ["$qty", "$price"]}}},
        {"$sort": {"total": -1}},
        {"$skip": 1},
        {"$limit": 1},
    ]))
    assert out == [{"item": "a", "total": 20}]


def test_group_accumulators(sales):
    out = list(sales.aggregate([
        {"$group": {"_id": "$item", "n": {"$sum": 1}, "qty": {"$sum": "$qty"}, "avg": {"$avg": "$qty"},
                    "min": {"$min": "$qty"}, "max": {"$max": "$qty"}, "first": {"$first": "$_id"},
                    "last": {"$last": "$_id"}, "ids": {"$push": "$_id"}, "prices": {"$addToSet": "$price"}}},
        {"$sort": {"_id": 1}},
    ]))
    assert out[0] == {"_id": "a", "n": 2, "qty": 7, "avg": 3.5, "min": 2, "max": 5, "first": 1, "last": 3,
                      "ids": [1, 3], "prices": [10]}
    assert [d["_id"] for d in out] == ["a", "b", "c"]


def test_group_null_id_and_count(sales):
    assert list(sales.aggregate([{"$group": {"_id": None, "total": {"$sum": "$qty"}}}])) == [{"_id": None, "total": 11}]
    assert list(sales.aggregate([{"$match": {"item": "a"}}, {"$count": "n"}])) == [{"n": 2}]


def test_add_fields_set_unset(sales):
    out = list(sales.aggregate([{"$match": {"_id": 1}}, {"$addFields": {"t": {"$add": ["$qty", 1]}}},
                                {"$set": {"u": "$item"}}, {"$unset": ["tags", "price"]}]))
    assert out == [{"_id": 1, "item": "a", "qty": 2, "t": 3, "u": "a"}]


def test_unwind(sales):
    out = list(sales.aggregate([{"$unwind": "$tags"}, {"$project": {"tags": 1}}]))
    assert out == [{"_id": 1, "tags": "x"}, {"_id": 1, "tags": "y"}, {"_id": 2, "tags": "y"}]
    kept = list(sales.aggregate([{"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True,
                                              "includeArrayIndex": "i"}}, {"$project": {"tags": 1, "i": 1}}]))
    assert len(kept) == 5
    assert kept[3] == {"_id": 3, "i": None}


def test_lookup(db):
    db.orders.insert_many([{"_id": 1, "sku": "p1"}, {"_id": 2, "sku": "p2"}, {"_id": 3}])
    db.products.insert_many([{"_id": 10, "sku": "p1", "name": "pen"}, {"_id": 11, "sku": "p1", "name": "pen2"}])
    out = list(db.orders.aggregate([
        {"$lookup": {"from": "products", "localField": "sku", "foreignField": "sku", "as": "p"}},
        {"$project": {"n": {"$size": "$p"}}},
    ]))
    assert out == [{"_id": 1, "n": 2}, {"_id": 2, "n": 0}, {"_id": 3, "n": 0}]


def test_sort_by_count(sales):
    out = list(sales.aggregate([{"$sortByCount": "$item"}]))
    assert out[0] == {"_id": "a", "count": 2}
    assert len(out) == 3


def test_facet(sales):
    out = list(sales.aggregate([{"$facet": {
        "cheap": [{"$match": {"price": {"$lt": 10}}}, {"$count": "n"}],
        "items": [{"$group": {"_id": "$item"}}, {"$sort": {"_id": 1}}],
    }}]))
    assert out == [{"cheap": [{"n": 1}], "items": [{"_id": "a"}, {"_id": "b"}, {"_id": "c"}]}]


def test_unknown_stage_is_a_clear_error(sales):
    with pytest.raises(OperationFailure) as failure:
        list(sales.aggregate([{"$frobnicate": {}}]))
    assert "$frobnicate" in str(failure.value)


def test_aggregate_cursor_batches(coll):
    coll.insert_many([{"_id": i} for i in range(300)])
    reply = coll.database.command({"aggregate": coll.name, "pipeline": [{"$sort": {"_id": 1}}],
                                   "cursor": {"batchSize": 50}})
    assert len(reply["cursor"]["firstBatch"]) == 50
    assert [d["_id"] for d in coll.aggregate([{"$sort": {"_id": -1}}], batchSize=20)] == list(range(299, -1, -1))


def test_documents_runs_only_as_a_collectionless_source(db):
    """MongoDB 7.0 refuses a leading $documents on a collection (73) and
    runs it under {aggregate: 1} and inside $unionWith."""
    db.src.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as raised:
        db.command({"aggregate": "src", "pipeline": [{"$documents": [{"x": 1}]}], "cursor": {}})
    assert raised.value.code == 73, raised.value.details
    alone = db.command({"aggregate": 1, "pipeline": [{"$documents": [{"x": 1}]}], "cursor": {}})
    assert alone["cursor"]["firstBatch"] == [{"x": 1}]
    unioned = list(db.src.aggregate([{"$unionWith": {"pipeline": [{"$documents": [{"x": 1}]}]}}]))
    assert unioned == [{"_id": 1}, {"x": 1}]


def test_union_with_and_lookup_take_a_pipeline_of_documents_without_a_collection(db):
    """MongoDB 6.0+: $unionWith without coll and $lookup without from, when
    the pipeline begins with $documents; without it, still refused."""
    db.src.insert_one({"_id": 1, "k": 2})
    looked = list(db.src.aggregate([{"$lookup": {
        "let": {"k": "$k"}, "as": "j",
        "pipeline": [{"$documents": [{"v": 1}, {"v": 2}, {"v": 3}]}, {"$match": {"$expr": {"$gt": ["$v", "$$k"]}}}]}}]))
    assert looked == [{"_id": 1, "k": 2, "j": [{"v": 3}]}]
    for stage in ({"$unionWith": {"pipeline": [{"$match": {}}]}}, {"$lookup": {"as": "j", "pipeline": [{"$match": {}}]}}):
        with pytest.raises(OperationFailure) as raised:
            db.command({"aggregate": "src", "pipeline": [stage], "cursor": {}})
        assert raised.value.code == 9, (stage, raised.value.details)
    with pytest.raises(OperationFailure) as raised:
        db.command({"aggregate": "src", "cursor": {}, "pipeline": [{"$lookup": {
            "as": "j", "localField": "k", "foreignField": "v", "pipeline": [{"$documents": [{"v": 2}]}]}}]})
    assert raised.value.code == 115, raised.value.details
