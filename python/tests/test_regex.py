"""Regular expressions with PCRE semantics through pymongo: `$regex` and
`/.../` in filters, the `$regex*` aggregation expressions, MongoDB's
options and codes, and a cap on runaway backtracking."""

from __future__ import annotations

import re
import time

import pytest
from bson.regex import Regex
from pymongo.errors import OperationFailure


@pytest.fixture
def words(db):
    db.w.insert_many(
        [
            {"_id": 1, "s": "password1"},
            {"_id": 2, "s": "password"},
            {"_id": 3, "s": "hey hey"},
            {"_id": 4, "s": "foobar"},
            {"_id": 5, "s": "a bar"},
            {"_id": 6, "s": "First line\nsecond line"},
            {"_id": 7, "s": "Ünïcode"},
        ]
    )
    return db.w


def ids(cursor):
    return sorted(doc["_id"] for doc in cursor)


def test_lookahead_and_lookbehind(words):
    assert ids(words.find({"s": {"$regex": r"^(?=.*\d)(?=.*[a-z])"}})) == [1]
    assert ids(words.find({"s": {"$regex": r"^(?!pass)"}})) == [3, 4, 5, 6, 7]
    assert ids(words.find({"s": {"$regex": r"(?<!foo)bar"}})) == [5]
    assert ids(words.find({"s": {"$regex": r"(?<=foo)bar"}})) == [4]


def test_backreferences_and_atomic_groups(words):
    assert ids(words.find({"s": {"$regex": r"^(\w+) \1$"}})) == [3]
    assert ids(words.find({"s": {"$regex": r"^(?<w>\w+) \k<w>$"}})) == [3]
    assert ids(words.find({"s": {"$regex": r"^(?>pass\w+)d$"}})) == []
    assert ids(words.find({"s": {"$regex": r"^pas++"}})) == [1, 2]
    assert ids(words.find({"s": {"$regex": r"^pas++s"}})) == []


def test_options_and_native_regex(words):
    assert ids(words.find({"s": re.compile(r"^SECOND", re.IGNORECASE | re.MULTILINE)})) == [6]
    assert ids(words.find({"s": {"$regex": "^second"}})) == []
    assert ids(words.find({"s": {"$regex": "line.second", "$options": "s"}})) == [6]
    assert ids(words.find({"s": {"$regex": " F i r s t  # spaced", "$options": "xi"}})) == [6]
    assert ids(words.find({"s": Regex("^ünï", "iu")})) == [7]
    assert ids(words.find({"s": {"$in": [re.compile("^hey"), "foobar"]}})) == [3, 4]


def test_invalid_patterns_refused_with_mongodb_codes(db):
    db.w.insert_one({"s": "x"})
    cases = [
        ({"s": {"$regex": "[)"}}, 51091),
        ({"s": {"$regex": "(ab"}}, 51091),
        ({"s": {"$regex": "ab\0c"}}, 2),
        ({"s": {"$regex": "a", "$options": "z"}}, 51108),
    ]
    for query, code in cases:
        with pytest.raises(OperationFailure) as raised:
            list(db.w.find(query))
        assert raised.value.code == code, query
    with pytest.raises(OperationFailure) as raised:
        list(db.w.aggregate([{"$project": {"m": {"$regexMatch": {"input": "$s", "regex": "[)"}}}}]))
    assert raised.value.code == 51111


def test_regex_expressions(words):
    pipeline = [
        {"$match": {"_id": {"$in": [3, 6]}}},
        {"$sort": {"_id": 1}},
        {
            "$project": {
                "_id": 0,
                "repeat": {"$regexMatch": {"input": "$s", "regex": r"^(\w+) \1$"}},
                "first": {"$regexFind": {"input": "$s", "regex": r"(?<=\s)(\w)(\w*)"}},
                "all": {"$regexFindAll": {"input": "$s", "regex": r"line(?=\n|$)", "options": "m"}},
            }
        },
    ]
    hey, lines = list(words.aggregate(pipeline))
    assert hey["repeat"] is True
    assert hey["first"] == {"match": "hey", "idx": 4, "captures": ["h", "ey"]}
    assert hey["all"] == []
    assert lines["repeat"] is False
    assert [m["idx"] for m in lines["all"]] == [6, 18]


def test_catastrophic_backtracking_fails_fast(db):
    db.r.insert_one({"s": "a" * 60 + "!"})
    evil = r"^(\w+\s?)*(?=x)$"
    started = time.monotonic()
    with pytest.raises(OperationFailure) as raised:
        list(db.r.find({"s": {"$regex": evil}}))
    assert raised.value.code == 51156
    assert "backtracking" in str(raised.value)
    with pytest.raises(OperationFailure) as raised:
        list(db.r.aggregate([{"$project": {"m": {"$regexMatch": {"input": "$s", "regex": evil}}}}]))
    assert raised.value.code == 51156
    assert time.monotonic() - started < 20
    # The node still answers.
    assert db.r.count_documents({"s": {"$regex": "^a+!$"}}) == 1


def _ids(collection, pattern, options=""):
    return [d["_id"] for d in collection.find({"text": {"$regex": pattern, "$options": options}}).sort("_id", 1)]


def test_classes_are_ascii_unless_ucp(db):
    """PCRE2 without UCP (MongoDB 7.0): \\d, \\w, \\s, \\b and POSIX classes
    match ASCII only; a leading (*UCP) makes them Unicode, (*UTF) is accepted."""
    db.w.insert_many([{"_id": 0, "text": "kyle"}, {"_id": 1, "text": "박정수"}, {"_id": 2, "text": "suárez"}])
    assert _ids(db.w, r"\w") == [0, 2]
    assert _ids(db.w, r"^\w+$") == [0]
    assert _ids(db.w, r"(*UCP)^\w+$") == [0, 1, 2]
    assert _ids(db.w, "^[[:alpha:]]+$") == [0]
    assert _ids(db.w, r"(*UTF)^[\w]+$") == [0]
    assert _ids(db.w, r"su\b") == [2]
    assert _ids(db.w, r"su.\b") == [2]
    db.d.insert_many([{"_id": 0, "text": "02191996"}, {"_id": 1, "text": "༢༣༤༥"}, {"_id": 2, "text": "9୩୪୬୯6"}])
    assert _ids(db.d, r"\d") == [0, 2]
    assert _ids(db.d, r"^\d+$") == [0]
    assert _ids(db.d, r"(*UCP)^\d+$") == [0, 1, 2]
    assert _ids(db.d, r"^\D+$") == [1]
    found = db.d.aggregate([{"$match": {"_id": 2}}, {"$project": {"m": {"$regexFind": {"input": "$text", "regex": r"\d+"}}}}])
    assert next(found)["m"]["match"] == "9"


def test_dollar_matches_before_final_newline(db):
    db.n.insert_many([{"_id": 0, "text": "end\n"}, {"_id": 1, "text": "end\n\n"}, {"_id": 2, "text": "end\nmore"}])
    assert _ids(db.n, "end$") == [0]
    assert _ids(db.n, r"end\Z") == [0]
    assert _ids(db.n, "end$", "m") == [0, 1, 2]
    found = db.n.aggregate([{"$match": {"_id": 0}}, {"$project": {"m": {"$regexFind": {"input": "$text", "regex": "d$"}}}}])
    assert next(found)["m"] == {"match": "d", "idx": 2, "captures": []}
