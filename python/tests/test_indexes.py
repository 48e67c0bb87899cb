"""Indexes: create, list, drop, unique, sparse, multikey, and the planner via explain (issue 2, item 5)."""

import pytest
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError, OperationFailure


def index_names(coll):
    return sorted(ix["name"] for ix in coll.list_indexes())


def test_id_index_always_exists(coll):
    coll.insert_one({"x": 1})
    indexes = list(coll.list_indexes())
    assert indexes[0]["name"] == "_id_"
    assert indexes[0]["key"] == {"_id": 1}
    assert indexes[0]["v"] == 2


def test_create_list_drop(coll):
    assert coll.create_index([("a", ASCENDING)]) == "a_1"
    assert coll.create_index([("a", ASCENDING), ("b", DESCENDING)]) == "a_1_b_-1"
    assert index_names(coll) == ["_id_", "a_1", "a_1_b_-1"]
    reply = coll.database.command({"createIndexes": coll.name, "indexes": [{"key": {"c": 1}, "name": "c_1"}]})
    assert reply["numIndexesBefore"] == 3 and reply["numIndexesAfter"] == 4
    coll.drop_index("a_1")
    assert index_names(coll) == ["_id_", "a_1_b_-1", "c_1"]
    coll.drop_indexes()
    assert index_names(coll) == ["_id_"]
    with pytest.raises(OperationFailure):
        coll.drop_index("_id_")


def test_create_index_creates_collection(db):
    reply = db.command({"createIndexes": "fresh", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
    assert reply["createdCollectionAutomatically"] is True
    assert "fresh" in db.list_collection_names()


def test_unique_index_reports_key_pattern_and_value(coll):
    coll.create_index("email", unique=True)
    coll.insert_one({"email": "a@x"})
    with pytest.raises(DuplicateKeyError) as failure:
        coll.insert_one({"email": "a@x"})
    assert failure.value.details["keyPattern"] == {"email": 1}
    assert failure.value.details["keyValue"] == {"email": "a@x"}
    # An update that would collide is refused and changes nothing.
    coll.insert_one({"_id": 2, "email": "b@x"})
    with pytest.raises(DuplicateKeyError):
        coll.update_one({"_id": 2}, {"$set": {"email": "a@x"}})
    assert coll.find_one({"_id": 2})["email"] == "b@x"


def test_unique_index_build_fails_on_existing_duplicates(coll):
    coll.insert_many([{"a": 1}, {"a": 1}])
    with pytest.raises(OperationFailure) as failure:
        coll.create_index("a", unique=True)
    assert failure.value.code == 11000
    assert index_names(coll) == ["_id_"]


def test_sparse_unique_allows_many_missing(coll):
    coll.create_index("s", unique=True, sparse=True)
    coll.insert_many([{"x": 1}, {"x": 2}, {"s": 1}])
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"s": 1})


def test_multikey_index_answers_element_queries(coll):
    coll.create_index("tags")
    coll.insert_many([{"_id": 1, "tags": ["a", "b"]}, {"_id": 2, "tags": ["b"]}, {"_id": 3, "tags": "a"}])
    assert sorted(d["_id"] for d in coll.find({"tags": "a"})) == [1, 3]
    assert sorted(d["_id"] for d in coll.find({"tags": {"$gt": "a"}})) == [1, 2]
    plan = coll.find({"tags": "a"}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(plan) and "tags_1" in str(plan)


def test_sparse_multikey_index_finds_documents_through_elements_missing_the_field(coll):
    # A sparse index gives {} no key, yet {} meets `$gte: null` while {a: 0} meets `$lte: 0`.
    coll.create_index("a.a", sparse=True)
    coll.insert_many([{"_id": 0}, {"_id": 1, "a": [{"b": 0, "a": 0}, {}]}, {"_id": 2, "a": [{"a": 5}]}])
    for query in ({"a.a": {"$gte": None, "$lte": 0}}, {"$and": [{"a.a": None}, {"a.a": {"$gte": -5}}]}):
        assert [d["_id"] for d in coll.find(query)] == [1], query
        assert [d["_id"] for d in coll.find(query).hint([("$natural", 1)])] == [1], query


def test_a_hinted_index_on_a_numeric_path_keeps_the_sort(coll):
    coll.create_index("a.0")
    coll.insert_many([{"_id": 0, "a": [0]}, {"_id": 1, "a": [{"b": 0}, {"b": 0}]}])
    natural = [d["_id"] for d in coll.find().sort("a.0", 1).hint([("$natural", 1)])]
    hinted = [d["_id"] for d in coll.find().sort("a.0", 1).hint("a.0_1")]
    assert hinted == natural


def winning(cursor):
    return str(cursor.explain()["queryPlanner"]["winningPlan"])


def test_planner_uses_index_for_equality_range_and_sort(coll):
    coll.insert_many([{"_id": i, "a": i % 10, "b": i} for i in range(200)])
    assert "COLLSCAN" in winning(coll.find({"a": 3}))
    coll.create_index("a")
    equality = winning(coll.find({"a": 3}))
    assert "IXSCAN" in equality and "a_1" in equality
    assert sorted(d["_id"] for d in coll.find({"a": 3})) == list(range(3, 200, 10))
    assert "IXSCAN" in winning(coll.find({"a": {"$gt": 7}}))
    assert len(list(coll.find({"a": {"$gt": 7}}))) == 40
    coll.create_index([("b", DESCENDING)])
    sort_plan = coll.find().sort("b", -1).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(sort_plan) and "SORT" not in str(sort_plan).replace("SORT_KEY", "")
    assert [d["b"] for d in coll.find().sort("b", -1).limit(3)] == [199, 198, 197]
    assert "IXSCAN" in winning(coll.find({"_id": 5}))


def test_hint(coll):
    coll.insert_many([{"a": i, "b": i} for i in range(20)])
    coll.create_index("a")
    coll.create_index("b")
    assert "b_1" in winning(coll.find({"a": 1, "b": 1}).hint("b_1"))
    with pytest.raises(OperationFailure):
        list(coll.find().hint("nope_1"))


def test_explain_execution_stats(coll):
    coll.insert_many([{"a": i} for i in range(50)])
    coll.create_index("a")
    stats = coll.find({"a": {"$lt": 5}}).explain()["executionStats"]
    assert stats["nReturned"] == 5
    assert stats["totalDocsExamined"] == 5


def test_parallel_arrays_cannot_be_indexed(coll):
    coll.create_index([("x", 1), ("y", 1)])
    with pytest.raises(OperationFailure) as failure:
        coll.insert_one({"x": [1, 2], "y": [3, 4]})
    assert failure.value.code == 171


def test_unsupported_index_type_is_a_clear_error(coll):
    with pytest.raises(OperationFailure) as failure:
        coll.create_index([("loc", "2dsphere")])
    assert "2dsphere" in str(failure.value)


def create(coll, *specs):
    return coll.database.command({"createIndexes": coll.name, "indexes": list(specs)})


def test_existing_name_with_another_key_or_options_conflicts(coll):
    create(coll, {"key": {"a": 1}, "name": "a_1"})
    assert create(coll, {"key": {"a": 1.0}, "name": "a_1"})["note"] == "all indexes already exist"
    # Same name, another key or another identifying option: 86 IndexKeySpecsConflict.
    for spec in ({"key": {"b": 1}, "name": "a_1"}, {"key": {"a": 1}, "name": "a_1", "unique": True}):
        with pytest.raises(OperationFailure) as failure:
            create(coll, spec)
        assert failure.value.code == 86, spec
    # The same key under another name: 85 IndexOptionsConflict.
    with pytest.raises(OperationFailure) as failure:
        create(coll, {"key": {"a": 1}, "name": "other"})
    assert failure.value.code == 85
    # Another identifying option makes another index, which may share the key.
    create(coll, {"key": {"a": 1}, "name": "a_1_sparse", "sparse": True})
    assert index_names(coll) == ["_id_", "a_1", "a_1_sparse"]


def test_one_command_conflicting_with_itself_is_refused(coll):
    # Before: the second spec was dropped and the command answered ok.
    coll.insert_one({"x": 1})
    with pytest.raises(OperationFailure) as failure:
        create(coll, {"key": {"x": 1}, "name": "x"}, {"key": {"y": 1}, "name": "x"})
    assert failure.value.code == 86
    assert index_names(coll) == ["_id_"]
    with pytest.raises(OperationFailure) as failure:
        create(coll, {"key": {"x": 1}, "name": "x"}, {"key": {"x": 1}, "name": "x2"})
    assert failure.value.code == 85
    assert index_names(coll) == ["_id_"]


def winning_index(coll, filter):
    plan = coll.find(filter).explain()["queryPlanner"]["winningPlan"]
    while "inputStage" in plan:
        plan = plan["inputStage"]
    return plan.get("indexName")


def test_hidden_index_is_kept_and_listed_but_not_planned(coll):
    coll.insert_many([{"a": i} for i in range(20)])
    create(coll, {"key": {"a": 1}, "name": "a_1", "hidden": True})
    listed = {ix["name"]: ix for ix in coll.list_indexes()}
    assert listed["a_1"]["hidden"] is True
    assert winning_index(coll, {"a": 5}) is None
    with pytest.raises(OperationFailure) as failure:
        list(coll.find({"a": 5}).hint("a_1"))
    assert failure.value.code == 2
    # Writes while hidden are still indexed: unhiding needs no rebuild.
    coll.insert_one({"a": 100})
    reply = coll.database.command({"collMod": coll.name, "index": {"name": "a_1", "hidden": False}})
    assert reply["hidden_old"] is True and reply["hidden_new"] is False
    assert "hidden" not in {ix["name"]: ix for ix in coll.list_indexes()}["a_1"]
    assert winning_index(coll, {"a": 100}) == "a_1"
    assert [d["a"] for d in coll.find({"a": 100}).hint("a_1")] == [100]
    reply = coll.database.command({"collMod": coll.name, "index": {"keyPattern": {"a": 1}, "hidden": True}})
    assert reply["hidden_old"] is False and reply["hidden_new"] is True
    assert winning_index(coll, {"a": 5}) is None
    # Hiding is not a new identity: the same spec but hidden under the name is 85.
    with pytest.raises(OperationFailure) as failure:
        create(coll, {"key": {"a": 1}, "name": "a_1"})
    assert failure.value.code == 85


def test_hidden_refusals(coll):
    coll.insert_one({"a": 1})
    for spec, code in (({"key": {"_id": 1}, "name": "_id_", "hidden": True}, 2),):
        with pytest.raises(OperationFailure) as failure:
            create(coll, spec)
        assert failure.value.code == code
    cases = (
        ({"name": "_id_", "hidden": True}, 2),
        ({"name": "missing", "hidden": True}, 27),
        ({"name": "_id_"}, 72),
    )
    for index, code in cases:
        with pytest.raises(OperationFailure) as failure:
            coll.database.command({"collMod": coll.name, "index": index})
        assert failure.value.code == code, index
    with pytest.raises(OperationFailure) as failure:
        coll.database.command({"collMod": coll.name, "changeStreamPreAndPostImages": {"enabled": True}})
    assert failure.value.code == 115
