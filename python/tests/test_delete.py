"""delete (issue 2, item 4)."""


def test_delete_one_and_many(coll):
    coll.insert_many([{"_id": i, "g": i % 3} for i in range(9)])
    assert coll.delete_one({"g": 0}).deleted_count == 1
    assert coll.delete_many({"g": 1}).deleted_count == 3
    assert coll.count_documents({}) == 5
    assert coll.delete_many({}).deleted_count == 5
    assert coll.count_documents({}) == 0


def test_raw_delete_reply(coll):
    coll.insert_many([{"_id": i} for i in range(4)])
    reply = coll.database.command({"delete": coll.name, "deletes": [
        {"q": {"_id": {"$lt": 2}}, "limit": 0},
        {"q": {"_id": 3}, "limit": 1},
        {"q": {"_id": 99}, "limit": 1},
    ]})
    assert reply["n"] == 3
    assert [d["_id"] for d in coll.find()] == [2]


def test_delete_then_reinsert_same_id(coll):
    coll.insert_one({"_id": "k", "v": 1})
    coll.delete_one({"_id": "k"})
    coll.insert_one({"_id": "k", "v": 2})
    assert coll.find_one({"_id": "k"}) == {"_id": "k", "v": 2}
