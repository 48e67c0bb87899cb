"""Collation in aggregation expressions and sub-pipelines: every comparison an
expression makes ($eq..$cmp, $in, $indexOfArray, $min/$max, $addToSet, the set
operators, $sortArray, $bucket, $setWindowFields, $lookup, $graphLookup) and
every sub-pipeline ($lookup, $facet, $unionWith) follows the operation's
collation, or else the collection's default, as in MongoDB 7.0."""

from __future__ import annotations

import pytest
from pymongo.collation import Collation
from pymongo.errors import DuplicateKeyError, OperationFailure

CI = Collation(locale="en", strength=2)


def one(collection, pipeline, **kwargs):
    docs = list(collection.aggregate(pipeline, **kwargs))
    assert len(docs) == 1, docs
    return docs[0]


def test_comparison_operators_follow_collation(db):
    db.c.insert_one({"_id": 1, "a": "abc", "b": "ABC", "c": "abd"})
    project = {
        "$project": {
            "_id": 0,
            "eq": {"$eq": ["$a", "$b"]},
            "ne": {"$ne": ["$a", "$b"]},
            "cmp": {"$cmp": ["$a", "$b"]},
            "lt": {"$lt": ["$b", "$c"]},
            "gte": {"$gte": ["$a", "$b"]},
            "cond": {"$cond": [{"$eq": ["$a", "ABC"]}, "same", "different"]},
            "switch": {"$switch": {"branches": [{"case": {"$eq": ["$b", "abc"]}, "then": 1}], "default": 0}},
        }
    }
    simple = one(db.c, [project])
    assert simple == {"eq": False, "ne": True, "cmp": 1, "lt": True, "gte": True, "cond": "different", "switch": 0}
    collated = one(db.c, [project], collation=CI)
    assert collated == {"eq": True, "ne": False, "cmp": 0, "lt": True, "gte": True, "cond": "same", "switch": 1}


def test_array_and_set_operators_follow_collation(db):
    db.c.insert_one({"_id": 1, "xs": ["a", "B", "c"], "ys": ["A", "b"]})
    project = {
        "$project": {
            "_id": 0,
            "in": {"$in": ["b", "$xs"]},
            "index": {"$indexOfArray": ["$xs", "C"]},
            "union": {"$size": {"$setUnion": ["$xs", "$ys"]}},
            "inter": {"$size": {"$setIntersection": ["$xs", "$ys"]}},
            "diff": {"$setDifference": ["$xs", "$ys"]},
            "equals": {"$setEquals": [["a", "b"], "$ys"]},
            "subset": {"$setIsSubset": ["$ys", "$xs"]},
            "max": {"$max": "$xs"},
            "min": {"$min": ["Z", "y"]},
            "sorted": {"$sortArray": {"input": "$xs", "sortBy": -1}},
            "maxN": {"$maxN": {"n": 1, "input": "$xs"}},
        }
    }
    simple = one(db.c, [project])
    assert simple["in"] is False and simple["index"] == -1 and simple["union"] == 5
    assert simple["sorted"] == ["c", "a", "B"] and simple["max"] == "c" and simple["min"] == "Z"
    got = one(db.c, [project], collation=CI)
    assert got == {
        "in": True,
        "index": 2,
        "union": 3,
        "inter": 2,
        "diff": ["c"],
        "equals": True,
        "subset": True,
        "max": "c",
        "min": "y",
        "sorted": ["c", "B", "a"],
        "maxN": ["c"],
    }


def test_accumulators_follow_collation(db):
    db.c.insert_many([{"g": 1, "s": s} for s in ["b", "B", "a", "Z"]])
    group = {"$group": {"_id": "$g", "set": {"$addToSet": "$s"}, "max": {"$max": "$s"}, "min": {"$min": "$s"}}}
    simple = one(db.c, [group])
    assert len(simple["set"]) == 4 and simple["max"] == "b" and simple["min"] == "B"
    got = one(db.c, [group], collation=CI)
    assert sorted(got["set"]) == ["Z", "a", "b"] and got["max"] == "Z" and got["min"] == "a"
    window = [
        {"$setWindowFields": {"sortBy": {"s": 1}, "output": {"rank": {"$rank": {}}}}},
        {"$project": {"_id": 0, "s": 1, "rank": 1}},
    ]
    ranked = [(d["s"].lower(), d["rank"]) for d in db.c.aggregate(window, collation=CI)]
    assert ranked == [("a", 1), ("b", 2), ("b", 2), ("z", 4)]


def test_bucket_and_expr_filter_follow_collation(db):
    db.c.insert_many([{"_id": i, "s": s} for i, s in enumerate(["apple", "Banana", "cherry", "Date"])])
    bucket = {"$bucket": {"groupBy": "$s", "boundaries": ["a", "c", "z"], "default": "zzz"}}
    simple = {d["_id"]: d["count"] for d in db.c.aggregate([bucket])}
    assert simple == {"a": 1, "c": 1, "zzz": 2}
    collated = {d["_id"]: d["count"] for d in db.c.aggregate([bucket], collation=CI)}
    assert collated == {"a": 2, "c": 2}
    # Boundaries ascend under the collation: ["a", "B"] does, ["B", "a"] not.
    mixed = {"$bucket": {"groupBy": "$s", "boundaries": ["a", "B", "z"]}}
    assert {d["_id"]: d["count"] for d in db.c.aggregate([mixed], collation=CI)} == {"a": 1, "B": 3}
    assert _code(lambda: list(db.c.aggregate([mixed]))) == 40194
    reversed_ = {"$bucket": {"groupBy": "$s", "boundaries": ["B", "a"]}}
    assert _code(lambda: list(db.c.aggregate([reversed_], collation=CI))) == 40194
    expr = {"$expr": {"$eq": ["$s", "BANANA"]}}
    assert db.c.count_documents(expr) == 0
    assert db.c.count_documents(expr, collation=CI) == 1
    assert [d["_id"] for d in db.c.find(expr, collation=CI)] == [1]
    computed = db.c.find_one({"_id": 1}, {"same": {"$eq": ["$s", "banana"]}}, collation=CI)
    assert computed["same"] is True


def test_sub_pipelines_follow_collation(db):
    db.orders.insert_many([{"_id": 1, "item": "ABC"}, {"_id": 2, "item": "xyz"}])
    db.items.insert_many([{"_id": "i1", "sku": "abc"}, {"_id": "i2", "sku": "XYZ"}, {"_id": "i3", "sku": "abc"}])
    lookup = {"$lookup": {"from": "items", "localField": "item", "foreignField": "sku", "as": "found"}}
    sort = {"$sort": {"_id": 1}}
    simple = [len(d["found"]) for d in db.orders.aggregate([lookup, sort])]
    assert simple == [0, 0]
    assert [len(d["found"]) for d in db.orders.aggregate([lookup, sort], collation=CI)] == [2, 1]
    correlated = {
        "$lookup": {
            "from": "items",
            "let": {"item": "$item"},
            "pipeline": [{"$match": {"$expr": {"$eq": ["$sku", "$$item"]}}}, {"$match": {"sku": {"$in": ["ABC"]}}}],
            "as": "found",
        }
    }
    assert [len(d["found"]) for d in db.orders.aggregate([correlated, sort], collation=CI)] == [2, 0]
    facet = {"$facet": {"abc": [{"$match": {"item": "abc"}}, {"$count": "n"}]}}
    assert one(db.orders, [facet], collation=CI)["abc"] == [{"n": 1}]
    assert one(db.orders, [facet])["abc"] == []
    union = {"$unionWith": {"coll": "items", "pipeline": [{"$match": {"sku": "ABC"}}]}}
    assert len(list(db.orders.aggregate([{"$match": {"item": "none"}}, union], collation=CI))) == 2
    assert len(list(db.orders.aggregate([{"$match": {"item": "none"}}, union]))) == 0


def test_graph_lookup_follows_collation(db):
    db.people.insert_many(
        [
            {"_id": 1, "name": "Ann", "boss": "BOB"},
            {"_id": 2, "name": "bob", "boss": "carl"},
            {"_id": 3, "name": "Carl", "boss": None},
        ]
    )
    graph = {
        "$graphLookup": {
            "from": "people",
            "startWith": "$boss",
            "connectFromField": "boss",
            "connectToField": "name",
            "as": "chain",
        }
    }
    pipeline = [{"$match": {"_id": 1}}, graph]
    assert one(db.people, pipeline)["chain"] == []
    chain = one(db.people, pipeline, collation=CI)["chain"]
    assert sorted(d["_id"] for d in chain) == [2, 3]


def test_collection_default_applies_to_expressions(db):
    db.create_collection("ci", collation=CI)
    db.ci.insert_many([{"_id": 1, "s": "Hello"}, {"_id": 2, "s": "world"}])
    assert db.ci.count_documents({"$expr": {"$eq": ["$s", "hello"]}}) == 1
    got = one(db.ci, [{"$match": {"_id": 1}}, {"$project": {"_id": 0, "in": {"$in": ["HELLO", ["$s"]]}}}])
    assert got == {"in": True}
    db.ci.update_one({"_id": 2}, [{"$set": {"w": {"$eq": ["$s", "WORLD"]}}}])
    assert db.ci.find_one({"_id": 2})["w"] is True


def _code(call):
    try:
        call()
    except OperationFailure as failure:
        return failure.code
    return None


def test_views_keep_their_own_collation(db):
    """A view's collation is the one given at create (simple otherwise, not its
    source's); an operation naming another one, a $lookup/$graphLookup onto a
    view of another collation, and a view on a view of another collation are
    refused with OptionNotSupportedOnView (167)."""
    db.create_collection("words", collation=CI)
    db.words.insert_many([{"_id": i, "f": f} for i, f in enumerate(["case", "Case", "CASE"])])
    db.command("create", "ci_view", viewOn="words", collation={"locale": "en", "strength": 2})
    db.command("create", "plain_view", viewOn="words")
    info = {c["name"]: c for c in db.list_collections()}
    assert info["ci_view"]["options"]["collation"]["strength"] == 2
    assert "collation" not in info["plain_view"]["options"]
    assert db.ci_view.count_documents({"f": "case"}) == 3
    assert db.plain_view.count_documents({"f": "case"}) == 1
    assert len(list(db.ci_view.find({"f": "CASE"}))) == 3
    assert len(db.ci_view.distinct("f")) == 1
    assert len(db.plain_view.distinct("f")) == 3
    assert len(list(db.ci_view.aggregate([{"$match": {"f": "case"}}]))) == 3
    assert db.ci_view.count_documents({"f": "case"}, collation=CI) == 3
    simple = Collation(locale="simple")
    assert db.plain_view.count_documents({"f": "case"}, collation=simple) == 1
    assert _code(lambda: list(db.ci_view.find({}, collation=simple))) == 167
    assert _code(lambda: list(db.plain_view.aggregate([], collation=CI))) == 167
    assert _code(lambda: db.ci_view.distinct("f", collation=Collation(locale="fr"))) == 167
    assert _code(lambda: db.command("create", "v2", viewOn="ci_view")) == 167
    db.command("create", "v3", viewOn="ci_view", collation={"locale": "en", "strength": 2})
    assert db.v3.count_documents({"f": "CaSe"}) == 3
    lookup = {"$lookup": {"from": "ci_view", "localField": "f", "foreignField": "f", "as": "m"}}
    assert _code(lambda: list(db.words.aggregate([lookup], collation=simple))) == 167
    assert [len(d["m"]) for d in db.words.aggregate([lookup])] == [3, 3, 3]
    assert _code(lambda: db.command("create", "v4", viewOn="words", pipeline=[lookup])) == 167
    union = [{"$unionWith": "plain_view"}, {"$match": {"f": "case"}}]
    assert len(list(db.words.aggregate(union))) == 6
    # Views on a name that is not a view yet fix the collation it may take.
    db.command("create", "A", viewOn="B", collation={"locale": "hsb"})
    assert _code(lambda: db.command("create", "C", viewOn="B", collation={"locale": "wae"})) is None
    assert _code(lambda: db.command("create", "B", viewOn="words", collation={"locale": "hsb"})) == 167
    db.drop_collection("C")
    db.command("create", "B", viewOn="words", collation={"locale": "hsb"})


def test_partial_filter_follows_index_collation(db):
    """A partial index admits documents by its filter under the index's
    collation, and the planner uses it only for queries that imply the filter
    under that collation."""
    db.create_collection("p", collation=CI)
    db.p.create_index("email", unique=True, partialFilterExpression={"kind": "user"}, name="email_users")
    db.p.insert_one({"kind": "USER", "email": "a@x"})
    with pytest.raises(DuplicateKeyError):
        db.p.insert_one({"kind": "User", "email": "A@X"})
    db.p.insert_one({"kind": "bot", "email": "a@x"})
    plan = db.p.find({"kind": "USER", "email": "a@x"}).explain()["queryPlanner"]["winningPlan"]
    assert "email_users" in str(plan)
    assert db.p.count_documents({"kind": "uSeR", "email": "A@x"}) == 1
    simple = Collation(locale="simple")
    plan = db.p.find({"kind": "user", "email": "a@x"}).collation(simple).explain()["queryPlanner"]["winningPlan"]
    assert "email_users" not in str(plan)


def test_id_follows_collection_default_collation(db):
    """MongoDB gives the _id index the collection's default collation: in a
    strength-2 collection "A" after "a" is a duplicate _id, and a query for
    _id "A" finds "a"; the simple collation still tells them apart."""
    db.create_collection("ids", collation=CI)
    db.ids.insert_one({"_id": "a", "n": 1})
    with pytest.raises(DuplicateKeyError) as raised:
        db.ids.insert_one({"_id": "A", "n": 2})
    assert raised.value.code == 11000
    assert db.ids.find_one({"_id": "A"})["_id"] == "a"
    assert db.ids.find_one({"_id": "A"}, collation=Collation(locale="simple")) is None
    db.ids.update_one({"_id": "A"}, {"$set": {"n": 3}}, upsert=True)
    assert list(db.ids.find({}, {"_id": 1, "n": 1})) == [{"_id": "a", "n": 3}]
    db.ids.delete_one({"_id": "A"})
    db.ids.insert_one({"_id": "A", "n": 4})
    assert db.ids.count_documents({}) == 1
    db.plain.insert_many([{"_id": "a"}, {"_id": "A"}])
    assert db.plain.count_documents({}) == 2
    id_index = next(ix for ix in db.ids.list_indexes() if ix["name"] == "_id_")
    assert id_index["collation"]["strength"] == 2 and id_index["collation"]["locale"] == "en"
    assert "collation" not in next(ix for ix in db.plain.list_indexes() if ix["name"] == "_id_")
    assert [d["_id"] for d in db.ids.find({"_id": {"$gte": "a"}}).hint("_id_")] == ["A"]
    assert [d["_id"] for d in db.ids.find({"_id": {"$lt": "a"}}, collation=Collation(locale="simple"))] == ["A"]


@pytest.mark.parametrize("how", ["clean shutdown", "sigkill"])
def test_collated_id_survives_a_restart(fresh_node, how):
    """The collated _id table is in the checkpointed catalog, and replaying
    the journal after a kill rebuilds its keys."""
    from pymongo import MongoClient, WriteConcern

    fresh_node.start()
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    db = client.get_database("t", write_concern=WriteConcern(j=True))
    db.create_collection("ids", collation=CI)
    db.ids.insert_one({"_id": "a"})
    client.close()
    fresh_node.restart(how)
    client = MongoClient(fresh_node.uri, serverSelectionTimeoutMS=10_000)
    with pytest.raises(DuplicateKeyError):
        client.t.ids.insert_one({"_id": "A"})
    client.t.ids.delete_one({"_id": "A"})
    client.t.ids.insert_one({"_id": "A"})
    client.close()


def test_update_operators_follow_collation(db):
    """Under an update's collation (or the collection default) $addToSet,
    $pull, $pullAll, $min/$max, $push's $sort and arrayFilters compare
    strings by it."""
    db.u.insert_one({"_id": 1, "tags": ["a", "B"], "m": "b", "xs": [{"k": "A", "v": 0}, {"k": "b", "v": 0}]})
    db.u.update_one({"_id": 1}, {"$addToSet": {"tags": "b"}, "$min": {"m": "A"}}, collation=CI)
    doc = db.u.find_one({"_id": 1})
    assert doc["tags"] == ["a", "B"] and doc["m"] == "A"
    db.u.update_one({"_id": 1}, {"$pull": {"tags": "A"}}, collation=CI)
    assert db.u.find_one({"_id": 1})["tags"] == ["B"]
    db.u.update_one({"_id": 1}, {"$pullAll": {"tags": ["b"]}}, collation=CI)
    assert db.u.find_one({"_id": 1})["tags"] == []
    db.u.update_one({"_id": 1}, {"$push": {"tags": {"$each": ["b", "C", "a"], "$sort": 1}}}, collation=CI)
    assert db.u.find_one({"_id": 1})["tags"] == ["a", "b", "C"]
    db.u.update_one({"_id": 1}, {"$set": {"xs.$[e].v": 1}}, array_filters=[{"e.k": "a"}], collation=CI)
    assert [x["v"] for x in db.u.find_one({"_id": 1})["xs"]] == [1, 0]
    db.u.update_one({"_id": 1}, {"$pull": {"xs": {"k": "B"}}}, collation=CI)
    assert [x["k"] for x in db.u.find_one({"_id": 1})["xs"]] == ["A"]
    db.u.update_one({"_id": 1}, {"$addToSet": {"tags": "A"}})
    assert db.u.find_one({"_id": 1})["tags"] == ["a", "b", "C", "A"]
