"""$bitsAllSet, $bitsAnySet, $bitsAllClear, $bitsAnyClear with number,
position-array and BinData masks (issue 10, item 7); MongoDB's examples."""

import pytest
from bson import Binary, Int64
from pymongo.errors import OperationFailure


@pytest.fixture
def bits(coll):
    coll.insert_many(
        [
            {"_id": 1, "a": 54, "binaryValueofA": "00110110"},
            {"_id": 2, "a": 20, "binaryValueofA": "00010100"},
            {"_id": 3, "a": 20.0, "binaryValueofA": "00010100"},
            {"_id": 4, "a": Binary(b"\x66"), "binaryValueofA": "01100110"},
            {"_id": 5, "a": Int64(-1)},
            {"_id": 6, "a": "54"},
            {"_id": 7, "a": 2.5},
            {"_id": 8, "a": [1, 16]},
        ]
    )
    return coll


def ids(coll, filter):
    return sorted(d["_id"] for d in coll.find(filter))


def test_all_set(bits):
    assert ids(bits, {"a": {"$bitsAllSet": [1, 5]}}) == [1, 4, 5]
    assert ids(bits, {"a": {"$bitsAllSet": 50}}) == [1, 5]
    assert ids(bits, {"a": {"$bitsAllSet": Binary(b"\x30")}}) == [1, 5]
    assert ids(bits, {"a": {"$bitsAllSet": [200]}}) == [5]  # a negative number's sign repeats


def test_any_set_and_clear(bits):
    assert ids(bits, {"a": {"$bitsAnySet": [1, 5]}}) == [1, 4, 5]
    assert ids(bits, {"a": {"$bitsAnySet": [4]}}) == [1, 2, 3, 5, 8]
    assert ids(bits, {"a": {"$bitsAllClear": [1, 5]}}) == [2, 3, 8]
    assert ids(bits, {"a": {"$bitsAnyClear": [1, 5]}}) == [2, 3, 8]
    # An array matches when one of its elements does (16 has bit 0 clear).
    assert ids(bits, {"a": {"$bitsAnyClear": Binary(b"\x01")}}) == [1, 2, 3, 4, 8]


def test_in_aggregation_and_negated(bits):
    matched = bits.aggregate([{"$match": {"a": {"$not": {"$bitsAllSet": [1, 5]}}}}, {"$project": {"_id": 1}}])
    assert sorted(d["_id"] for d in matched) == [2, 3, 6, 7, 8]


@pytest.mark.parametrize(
    "mask, code",
    [(-1, 9), (1.5, 9), ("x", 2), ([-1], 2), (["x"], 2), ([1.5], 2)],
)
def test_bad_masks(coll, mask, code):
    with pytest.raises(OperationFailure) as failure:
        list(coll.find({"a": {"$bitsAllSet": mask}}))
    assert failure.value.code == code
