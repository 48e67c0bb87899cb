"""Databases and collections: create, list, drop, rename, stats, hashes (issue 2, item 3)."""

import pytest
from pymongo.errors import CollectionInvalid, OperationFailure


def test_create_and_list_collections(db):
    db.create_collection("alpha")
    db.create_collection("beta")
    names = sorted(db.list_collection_names())
    assert names == ["alpha", "beta"]
    infos = {info["name"]: info for info in db.list_collections()}
    assert infos["alpha"]["type"] == "collection"
    assert "uuid" in infos["alpha"]["info"]
    assert infos["alpha"]["idIndex"]["key"] == {"_id": 1}


def test_create_existing_collection(db):
    db.create_collection("dup")
    # pymongo checks listCollections itself before sending create.
    with pytest.raises(CollectionInvalid):
        db.create_collection("dup")
    # MongoDB 7.0: create with identical options succeeds without action,
    # with different options it fails with NamespaceExists.
    assert db.command("create", "dup")["ok"] == 1.0
    with pytest.raises(OperationFailure) as failure:
        db.command("create", "dup", validator={"a": {"$exists": True}})
    assert failure.value.code in (48, 115)


def test_list_collections_filter(db):
    for name in ("a1", "a2", "b1"):
        db.create_collection(name)
    assert sorted(db.list_collection_names(filter={"name": {"$regex": "^a"}})) == ["a1", "a2"]


def test_insert_creates_collection_implicitly(db):
    db.implicit.insert_one({"x": 1})
    assert "implicit" in db.list_collection_names()


def test_drop_collection(db):
    db.gone.insert_one({"x": 1})
    db.gone.drop()
    assert "gone" not in db.list_collection_names()
    assert db.gone.find_one() is None
    # Dropping a missing collection is not an error for drivers.
    db.gone.drop()


def test_drop_database_and_list_databases(client, db):
    db.things.insert_one({"x": 1})
    names = client.list_database_names()
    assert db.name in names
    listing = client.admin.command("listDatabases")
    assert "totalSize" in listing
    entry = next(d for d in listing["databases"] if d["name"] == db.name)
    assert "sizeOnDisk" in entry and "empty" in entry
    client.drop_database(db.name)
    assert db.name not in client.list_database_names()


def test_list_databases_name_only_filters_on_the_name_alone(client, db):
    db.things.insert_one({"x": 1})
    listing = client.admin.command("listDatabases", nameOnly=True, filter={"name": db.name})
    assert listing["databases"] == [{"name": db.name}]
    assert "totalSize" not in listing
    # As on MongoDB, with nameOnly the filter sees only the name: no size is
    # computed (sizes scan every document), so a filter on it matches nothing.
    by_size = client.admin.command("listDatabases", nameOnly=True, filter={"sizeOnDisk": {"$gt": 0}})
    assert by_size["databases"] == []
    full = client.admin.command("listDatabases", filter={"name": db.name, "sizeOnDisk": {"$gt": 0}})
    assert [d["name"] for d in full["databases"]] == [db.name]


def test_rename_collection(client, db):
    db.src.insert_many([{"_id": i} for i in range(3)])
    db.src.rename("dst")
    assert db.list_collection_names() == ["dst"]
    assert db.dst.count_documents({}) == 3


def test_rename_onto_existing_needs_drop_target(client, db):
    db.a.insert_one({"_id": 1})
    db.b.insert_one({"_id": 2})
    with pytest.raises(OperationFailure) as failure:
        db.a.rename("b")
    assert failure.value.code == 48
    db.a.rename("b", dropTarget=True)
    assert list(db.b.find()) == [{"_id": 1}]


def test_coll_stats_and_db_stats(db):
    db.s.insert_many([{"_id": i, "pad": "x" * 100} for i in range(10)])
    stats = db.command("collStats", "s")
    assert stats["count"] == 10
    assert stats["size"] > 1000
    assert stats["nindexes"] == 1
    assert "_id_" in stats["indexSizes"]
    dbstats = db.command("dbStats")
    assert dbstats["collections"] == 1
    assert dbstats["objects"] == 10


def test_db_hash_changes_with_content(db):
    db.h.insert_many([{"_id": i} for i in range(5)])
    first = db.command("dbHash")
    assert set(first["collections"]) == {"h"}
    assert len(first["md5"]) == 32
    again = db.command("dbHash")
    assert again["collections"]["h"] == first["collections"]["h"]
    db.h.update_one({"_id": 1}, {"$set": {"y": 1}})
    changed = db.command("dbHash")
    assert changed["collections"]["h"] != first["collections"]["h"]


def test_db_hash_lists_capped_collections_and_uuids_and_skips_views(db):
    """As MongoDB's: `capped` names the capped collections, `uuids` gives
    each collection's UUID, and a view (no data of its own) is not hashed."""
    db.create_collection("ring", capped=True, size=4096)
    db.plain.insert_one({"_id": 1})
    db.command("create", "seen", viewOn="plain", pipeline=[])
    reply = db.command("dbHash")
    assert set(reply["collections"]) == {"ring", "plain"}, reply
    assert reply["capped"] == ["ring"]
    infos = {c["name"]: c["info"]["uuid"] for c in db.list_collections() if c.get("type") == "collection"}
    assert reply["uuids"] == {name: infos[name] for name in ("plain", "ring")}


def test_validate(db):
    db.v.insert_many([{"_id": i, "a": i} for i in range(20)])
    db.v.create_index("a")
    report = db.command("validate", "v")
    assert report["valid"] is True
    assert report["nrecords"] == 20
    assert report["keysPerIndex"]["_id_"] == 20
    assert report["keysPerIndex"]["a_1"] == 20


@pytest.mark.parametrize("options, code", [
    ({"background": True, "full": True}, 72),
    ({"background": True, "repair": True}, 72),
    ({"background": True, "enforceFastCount": True}, 72),
    ({"repair": True}, 115),
    ({"full": "yes"}, 14),
])
def test_validate_refuses_what_mongodb_refuses_and_repair(db, options, code):
    db.v.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as raised:
        db.command({"validate": "v", **options})
    assert raised.value.code == code, raised.value.details
    for accepted in ({"full": True}, {"background": True}, {"metadata": True}, {"full": False, "repair": False}):
        assert db.command({"validate": "v", **accepted})["valid"] is True


def test_invalid_collection_names(db):
    with pytest.raises(OperationFailure):
        db.command("create", "")
    with pytest.raises(OperationFailure):
        db.command({"insert": "bad$name", "documents": [{"x": 1}]})


def test_id_index_options_only_as_every_collection_has_them(db):
    """autoIndexId: false answers 50001 outside `local`, as MongoDB 4.0+
    does; idIndex is taken only as the default _id index, 115 otherwise."""
    with pytest.raises(OperationFailure) as raised:
        db.command({"create": "noid", "autoIndexId": False})
    assert raised.value.code == 50001, raised.value.details
    with pytest.raises(OperationFailure) as raised:
        db.command({"create": "named", "idIndex": {"key": {"_id": 1}, "name": "primary"}})
    assert raised.value.code == 115, raised.value.details
    assert not {"noid", "named"} & set(db.list_collection_names())
    db.command({"create": "plain", "autoIndexId": True, "idIndex": {"key": {"_id": 1}, "name": "_id_", "v": 2}})
    assert [index["name"] for index in db.plain.list_indexes()] == ["_id_"]
