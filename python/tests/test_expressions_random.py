"""`$rand`, `$sampleRate`, the `$sample` stage and `$jsonSchema` in queries
(issue 10, item 7), through pymongo against a real node.

Random outcomes are checked against bounds many standard deviations wide,
so that a correct node fails them with negligible probability."""

import pytest
from pymongo.errors import OperationFailure

N = 1000


@pytest.fixture
def coll(db):
    db.c.insert_many([{"_id": i, "a": i % 10} for i in range(N)])
    return db.c


def codes_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def test_rand_is_a_fresh_double_in_the_unit_interval_per_document(coll):
    values = [d["r"] for d in coll.aggregate([{"$project": {"r": {"$rand": {}}}}])]
    assert len(values) == N
    assert all(isinstance(v, float) and 0.0 <= v < 1.0 for v in values)
    assert len(set(values)) > N - 5
    assert 0.4 < sum(values) / N < 0.6
    # `[]` is the other spelling of no arguments.
    assert 0.0 <= coll.aggregate([{"$limit": 1}, {"$project": {"r": {"$rand": []}}}]).next()["r"] < 1.0
    # In a filter's `$expr` it draws per document too.
    half = coll.count_documents({"$expr": {"$lt": [{"$rand": {}}, 0.5]}})
    assert 350 < half < 650, half


def test_rand_refuses_arguments_as_mongodb(coll):
    assert codes_of(lambda: list(coll.aggregate([{"$project": {"r": {"$rand": {"x": 1}}}}]))) == 3040501
    assert codes_of(lambda: list(coll.aggregate([{"$project": {"r": {"$rand": [1]}}}]))) == 3040501
    assert codes_of(lambda: list(coll.aggregate([{"$project": {"r": {"$rand": 1}}}]))) == 10065


def test_rand_and_sample_rate_are_refused_in_validators(db):
    assert codes_of(lambda: db.create_collection(
        "v", validator={"$expr": {"$lt": [{"$rand": {}}, 0.5]}})) == 3040500
    assert codes_of(lambda: db.create_collection("w", validator={"$sampleRate": 0.5})) == 3040500


def test_sample_rate_selects_about_that_share(coll):
    assert 350 < coll.count_documents({"$sampleRate": 0.5}) < 650
    assert coll.count_documents({"$sampleRate": 0}) == 0
    assert coll.count_documents({"$sampleRate": 1}) == N
    assert 0 < len(list(coll.find({"$and": [{"a": {"$gte": 5}}, {"$sampleRate": 0.5}]}))) < 500
    # A leading `$match` is applied once, not once by the scan and again
    # by the stage (that would select about 1/16 here).
    quarter = len(list(coll.aggregate([{"$match": {"$sampleRate": 0.25}}])))
    assert 150 < quarter < 350, quarter


def test_sample_rate_refusals(coll):
    assert codes_of(lambda: coll.find_one({"$sampleRate": "x"})) == 2
    assert codes_of(lambda: coll.find_one({"$sampleRate": 1.5})) == 2
    assert codes_of(lambda: coll.find_one({"$sampleRate": -0.1})) == 2
    assert codes_of(lambda: coll.find_one({"$sampleRate": float("nan")})) == 2


def test_sample_stage_picks_distinct_documents_at_random(coll):
    first = [d["_id"] for d in coll.aggregate([{"$sample": {"size": 10}}])]
    second = [d["_id"] for d in coll.aggregate([{"$sample": {"size": 10}}])]
    assert len(first) == 10 and len(set(first)) == 10 and all(0 <= i < N for i in first)
    assert first != second
    everything = [d["_id"] for d in coll.aggregate([{"$sample": {"size": N + 5}}])]
    assert sorted(everything) == list(range(N)) and everything != list(range(N))
    assert list(coll.aggregate([{"$sample": {"size": 0}}])) == []
    assert len(list(coll.aggregate([{"$match": {"a": 3}}, {"$sample": {"size": 5.9}}]))) == 5
    # Every document is about as likely to be picked.
    hits = [0] * 10
    for _ in range(50):
        for d in coll.aggregate([{"$sample": {"size": 20}}, {"$project": {"a": 1}}]):
            hits[d["a"]] += 1
    assert all(40 < h < 170 for h in hits), hits


def test_sample_stage_refusals(coll):
    def code(spec):
        return codes_of(lambda: list(coll.aggregate([{"$sample": spec}])))

    assert code(5) == 28745
    assert code({"size": 1, "other": 1}) == 28748
    assert code({"size": "1"}) == 28746
    assert code({"size": -1}) == 28747
    assert code({}) == 28749


def test_json_schema_filters_find_aggregate_count_and_writes(db):
    db.s.insert_many([
        {"_id": 1, "name": "a", "age": 30},
        {"_id": 2, "name": "b", "age": "thirty"},
        {"_id": 3, "age": 40},
        {"_id": 4, "name": "d", "age": 3},
    ])
    schema = {"required": ["name", "age"],
              "properties": {"name": {"bsonType": "string"}, "age": {"bsonType": "int", "minimum": 18}}}
    assert [d["_id"] for d in db.s.find({"$jsonSchema": schema})] == [1]
    assert [d["_id"] for d in db.s.find({"$nor": [{"$jsonSchema": schema}]}).sort("_id", 1)] == [2, 3, 4]
    assert [d["_id"] for d in db.s.find({"$or": [{"$jsonSchema": schema}, {"_id": 3}]}).sort("_id", 1)] == [1, 3]
    assert db.s.count_documents({"$jsonSchema": {"required": ["name"]}}) == 3
    assert [d["_id"] for d in db.s.aggregate([{"$match": {"$jsonSchema": schema}}])] == [1]
    assert db.s.delete_many({"$jsonSchema": {"properties": {"age": {"bsonType": "string"}}},
                             "age": {"$type": "string"}}).deleted_count == 1
    assert codes_of(lambda: db.s.find_one({"$jsonSchema": 1})) == 14
    assert codes_of(lambda: db.s.find_one({"$jsonSchema": {"bsonType": "nosuchtype"}})) != 0


def test_percentile_and_median_accumulators_and_expressions(db):
    db.scores.insert_many([{"g": i % 2, "x": i} for i in range(1, 11)] + [{"g": 0, "x": "not a number"}])
    spec = {"input": "$x", "p": [0.5, 0.9], "method": "approximate"}
    groups = {d["_id"]: d for d in db.scores.aggregate([
        {"$group": {"_id": "$g", "p": {"$percentile": spec},
                    "m": {"$median": {"input": "$x", "method": "approximate"}}}}])}
    # g 0: 2, 4, 6, 8, 10 (the string is ignored); g 1: 1, 3, 5, 7, 9.
    assert groups[0]["p"] == [6.0, 10.0] and groups[0]["m"] == 6.0, groups
    assert groups[1]["p"] == [5.0, 9.0] and groups[1]["m"] == 5.0, groups
    empty = db.scores.aggregate([{"$match": {"x": {"$type": "string"}}},
                                 {"$group": {"_id": None, "p": {"$percentile": spec},
                                             "m": {"$median": {"input": "$x", "method": "approximate"}}}}]).next()
    assert empty["p"] == [None, None] and empty["m"] is None
    row = db.scores.aggregate([{"$limit": 1}, {"$project": {
        "_id": 0,
        "p": {"$percentile": {"input": [3, 1, "a", 2, 4], "p": [0.25, 1], "method": "approximate"}},
        "m": {"$median": {"input": [5, 1, 3], "method": "approximate"}},
        "scalar": {"$median": {"input": 7, "method": "approximate"}}}}]).next()
    assert row == {"p": [1.0, 4.0], "m": 3.0, "scalar": 7.0}, row


def test_percentile_and_median_refusals(db):
    db.c.insert_one({"x": 1})

    def group_code(accumulator):
        return codes_of(lambda: list(db.c.aggregate([{"$group": {"_id": None, "v": accumulator}}])))

    assert group_code({"$percentile": 1}) == 7429703
    assert group_code({"$median": 1}) == 7436100
    assert group_code({"$percentile": {"input": "$x", "p": [0.5], "method": "exact"}}) == 2
    assert group_code({"$percentile": {"input": "$x", "method": "approximate"}}) == 40414
    assert group_code({"$percentile": {"input": "$x", "p": [0.5], "method": "approximate", "y": 1}}) == 40415
    assert group_code({"$percentile": {"input": "$x", "p": "$x", "method": "approximate"}}) == 7750300
    assert group_code({"$percentile": {"input": "$x", "p": [], "method": "approximate"}}) == 7750301
    assert group_code({"$percentile": {"input": "$x", "p": ["a"], "method": "approximate"}}) == 7750302
    assert group_code({"$percentile": {"input": "$x", "p": [2], "method": "approximate"}}) == 7750303
    assert codes_of(lambda: list(db.c.aggregate([{"$project": {"v": {"$percentile": 1}}}]))) == 7436200
    assert codes_of(lambda: list(db.c.aggregate([{"$project": {"v": {"$median": 1}}}]))) == 7436201


def test_to_uuid_is_unknown_as_in_mongodb_7(db):
    """`$toUUID` arrived in MongoDB 8.0: 7.0 does not recognize it (168)."""
    db.c.insert_one({"u": "0e3b9063-8abd-4eb3-9f9f-f4c59fd30a60"})
    assert codes_of(lambda: list(db.c.aggregate([{"$project": {"v": {"$toUUID": "$u"}}}]))) == 168
