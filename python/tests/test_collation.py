"""Collation through pymongo: comparisons, sort, grouping, distinct, writes,
indexes and collection defaults follow the collation document, which is
validated and reported as MongoDB 7.0 does."""

from __future__ import annotations

import pytest
from pymongo import ASCENDING
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

CASE_INSENSITIVE = Collation(locale="en", strength=2)

FULL_EN = {
    "locale": "en",
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 2,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}


def names(cursor):
    return [doc["name"] for doc in cursor]


@pytest.fixture
def people(db):
    db.people.insert_many(
        [
            {"_id": 1, "name": "anne"},
            {"_id": 2, "name": "Anne"},
            {"_id": 3, "name": "ANNE"},
            {"_id": 4, "name": "bob"},
            {"_id": 5, "name": "Émile"},
            {"_id": 6, "name": "emile"},
        ]
    )
    return db.people


def test_find_equality_and_ranges_follow_strength(people):
    assert people.count_documents({"name": "anne"}) == 1
    found = people.find({"name": "anne"}, collation=CASE_INSENSITIVE)
    assert sorted(doc["_id"] for doc in found) == [1, 2, 3]
    primary = Collation(locale="fr", strength=1)
    assert sorted(doc["_id"] for doc in people.find({"name": "EMILE"}, collation=primary)) == [5, 6]
    assert people.count_documents({"name": {"$in": ["BOB"]}}, collation=CASE_INSENSITIVE) == 1
    assert people.count_documents({"name": {"$gt": "B"}}, collation=CASE_INSENSITIVE) == 3


def test_regex_ignores_collation(people):
    assert people.count_documents({"name": {"$regex": "^a"}}, collation=CASE_INSENSITIVE) == 1


def test_sort_uses_collation(db):
    db.words.insert_many([{"name": n} for n in ["b", "B", "a", "A", "é", "e", "10", "9"]])
    simple = names(db.words.find({}, {"_id": 0}).sort("name", ASCENDING))
    assert simple == ["10", "9", "A", "B", "a", "b", "e", "é"]
    english = names(db.words.find({}).sort("name", ASCENDING).collation(Collation(locale="en")))
    assert english == ["10", "9", "a", "A", "b", "B", "e", "é"]
    numeric = Collation(locale="en", numericOrdering=True)
    assert names(db.words.find({"name": {"$lt": "a"}}).sort("name", 1).collation(numeric)) == ["9", "10"]
    pipeline = [{"$sort": {"name": -1}}, {"$limit": 2}]
    assert names(db.words.aggregate(pipeline, collation=Collation(locale="en"))) == ["é", "e"]


def test_group_and_distinct_merge_equal_strings(people):
    groups = list(people.aggregate([{"$group": {"_id": "$name", "n": {"$sum": 1}}}], collation=CASE_INSENSITIVE))
    counts = sorted((group["_id"].lower(), group["n"]) for group in groups)
    assert counts == [("anne", 3), ("bob", 1), ("emile", 1), ("émile", 1)]
    distinct = people.distinct("name", collation=Collation(locale="en", strength=1))
    assert len(distinct) == 3
    matched = people.aggregate([{"$match": {"name": "BOB"}}], collation=CASE_INSENSITIVE)
    assert [doc["_id"] for doc in matched] == [4]


def test_writes_use_collation(people):
    result = people.update_many({"name": "ANNE"}, {"$set": {"seen": True}}, collation=CASE_INSENSITIVE)
    assert result.matched_count == 3
    assert people.delete_many({"name": "EMILE"}, collation=Collation(locale="en", strength=1)).deleted_count == 2
    found = people.find_one_and_update(
        {"name": "BOB"}, {"$set": {"x": 1}}, collation=CASE_INSENSITIVE, return_document=True
    )
    assert found["_id"] == 4 and found["x"] == 1
    people.update_one({"name": "CAROL"}, {"$set": {"y": 1}}, upsert=True, collation=CASE_INSENSITIVE)
    assert people.find_one({"y": 1})["name"] == "CAROL"


def test_case_insensitive_unique_index(db):
    db.users.create_index("email", unique=True, collation=CASE_INSENSITIVE, name="email_ci")
    db.users.insert_one({"email": "a@example.com"})
    with pytest.raises(DuplicateKeyError) as raised:
        db.users.insert_one({"email": "A@EXAMPLE.COM"})
    assert raised.value.code == 11000
    db.users.insert_one({"email": "b@example.com"})
    index = next(ix for ix in db.users.list_indexes() if ix["name"] == "email_ci")
    assert index["collation"] == FULL_EN


def test_index_used_only_with_matching_collation(db):
    db.c.create_index("name", collation=CASE_INSENSITIVE)
    db.c.insert_many([{"name": "x"}, {"name": "X"}, {"name": "y"}])
    plan = db.c.find({"name": "X"}).collation(CASE_INSENSITIVE).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" in str(plan)
    assert db.c.count_documents({"name": "X"}, collation=CASE_INSENSITIVE) == 2
    simple = db.c.find({"name": "X"}).explain()["queryPlanner"]["winningPlan"]
    assert "IXSCAN" not in str(simple)
    assert db.c.count_documents({"name": "X"}) == 1
    # A hint forces the index; its order is not the query's, results are.
    assert [d["name"] for d in db.c.find({"name": "X"}).hint("name_1")] == ["X"]


def test_collection_default_collation(db):
    db.create_collection("ci", collation=CASE_INSENSITIVE)
    info = db.command("listCollections", filter={"name": "ci"})["cursor"]["firstBatch"][0]
    assert info["options"]["collation"] == FULL_EN
    db.ci.insert_many([{"k": "q"}, {"k": "Q"}])
    assert db.ci.count_documents({"k": "q"}) == 2
    assert db.ci.count_documents({"k": "q"}, collation=Collation(locale="simple")) == 1
    db.ci.create_index("k", unique=False)
    index = next(ix for ix in db.ci.list_indexes() if ix["name"] == "k_1")
    assert index["collation"] == FULL_EN
    db.ci.create_index("k", name="k_simple", collation=Collation(locale="simple"))
    simple = next(ix for ix in db.ci.list_indexes() if ix["name"] == "k_simple")
    assert "collation" not in simple
    assert db.ci.delete_many({"k": "Q"}).deleted_count == 2


@pytest.mark.parametrize(
    "collation, code",
    [
        ({"locale": "xx"}, 2),
        ({"locale": "en", "strength": 9}, 9),
        ({"locale": "en", "caseFirst": "sideways"}, 9),
        ({"locale": "en", "unknownField": 1}, 9),
        ({"locale": "simple", "strength": 1}, 9),
        ({"locale": 5}, 14),
        ({"locale": "en", "strength": 1, "caseFirst": "upper"}, 2),
        ({"locale": "en", "version": "1.0"}, 161),
    ],
)
def test_invalid_collations_are_refused(db, collation, code):
    with pytest.raises(OperationFailure) as raised:
        db.command("find", "c", collation=collation)
    assert raised.value.code == code
    with pytest.raises(OperationFailure) as raised:
        db.c.create_index("a", collation=collation)
    assert raised.value.code == code


def test_invalid_locale_message(db):
    with pytest.raises(OperationFailure) as raised:
        db.command("find", "c", collation={"locale": "xx"})
    assert "Field 'locale' is invalid" in str(raised.value)
