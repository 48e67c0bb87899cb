"""Rollback keeps what it undoes (issue 8, item 1): a primary cut off from
the others takes w:1 writes; the others elect a new primary and write;
after healing, the old primary rolls back. Every document an undone write
touched is in its rollback files (`<dbpath>/rollback/<db>.<coll>/removed.
<time>.bson`, read back with `bson`) as it was there before the rollback;
its data then equals the new primary's, no majority write is lost, and its
rollback id moved. Collections created or dropped, and indexes built or
dropped, while it was alone roll back too. A member killed between two
steps of a rollback finishes it when restarted."""

from __future__ import annotations

import time
from pathlib import Path

import bson
import pytest
from pymongo import WriteConcern
from pymongo.errors import PyMongoError

MAJORITY = WriteConcern(w="majority")
W1 = WriteConcern(w=1)
ROLLBACK_TIMEOUT_S = 30
POLL_S = 0.05
# Long enough that the isolated primary takes its w:1 writes before it
# notices it is alone, on a loaded machine.
ELECTION_TIMEOUT_MS = 2500
# One member never stands: once the primary is cut off, a single candidate
# is left, so no split votes under load (seen: four in a row, 25 s).
SHAPE = {"election_timeout_ms": ELECTION_TIMEOUT_MS, "members": {3: "priority=0"}}


def rollback_files(rs, member: int, ns: str) -> list[Path]:
    directory = Path(rs.member(member)["dbpath"]) / "rollback" / ns
    return sorted(directory.glob("removed.*.bson")) if directory.exists() else []


def saved_documents(rs, member: int, ns: str) -> list[dict]:
    documents = []
    for path in rollback_files(rs, member, ns):
        documents += bson.decode_all(path.read_bytes())
    return documents


def rbid(rs, member: int) -> int:
    return rs.direct(member).admin.command("replSetGetRBID")["rbid"]


def isolate(rs) -> tuple[int, list[int]]:
    """Cuts the primary off (once the set is quiet, so that its writes are
    the only divergent ones); returns it and the others. It is still the
    writable primary when this returns."""
    rs.wait_quiet(rs.data_members())
    old = rs.primary()
    others = [i for i in rs.ids() if i != old]
    rs.partition([[old], others])
    assert rs.direct(old).admin.command("hello")["isWritablePrimary"], "it stepped down before the partition"
    return old, others


def heal_and_wait_rolled_back(rs, old: int, new: int, rbid_before: int) -> None:
    """Heals, then waits until `old` rolled back (its rollback id moved) and
    holds what `new` holds."""
    rs.heal()
    deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
    while True:
        try:
            if rbid(rs, old) != rbid_before and rs.member_state(old) == "SECONDARY":
                break
        except PyMongoError:
            pass  # in ROLLBACK it may refuse
        assert time.monotonic() < deadline, f"member {old} never rolled back: {rs.states()}"
        time.sleep(POLL_S)
    rs.wait_quiet([old, new])


def db_hash(rs, member: int, db: str) -> str:
    return rs.direct(member)[db].command("dbHash")["md5"]


def index_names(rs, member: int, db: str, coll: str) -> list[str]:
    return sorted(index["name"] for index in rs.direct(member)[db][coll].list_indexes())


def test_rollback_saves_every_undone_document_and_matches_the_new_primary(make_replset):
    rs = make_replset(**SHAPE)
    committed = rs.client().t.get_collection("c", write_concern=MAJORITY)
    committed.insert_many([{"_id": f"keep-{n}", "v": 0} for n in range(5)])
    old, others = isolate(rs)
    rbid_before = rbid(rs, old)
    coll = rs.direct(old).t.get_collection("c", write_concern=W1)
    # Quick enough to land before the isolated primary steps down.
    coll.insert_many([{"_id": f"doomed-{n}", "v": n} for n in range(3)])
    coll.update_one({"_id": "keep-0"}, {"$set": {"v": 99}})
    coll.delete_one({"_id": "keep-1"})
    new = rs.primary(exclude=(old,))
    rs.direct(new).t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "after"})

    heal_and_wait_rolled_back(rs, old, new, rbid_before)

    saved = {d["_id"]: d for d in saved_documents(rs, old, "t.c")}
    # The current versions of what was inserted and updated; nothing for
    # the delete (MongoDB writes the document as the member had it).
    assert saved == {"doomed-0": {"_id": "doomed-0", "v": 0}, "doomed-1": {"_id": "doomed-1", "v": 1},
                     "doomed-2": {"_id": "doomed-2", "v": 2}, "keep-0": {"_id": "keep-0", "v": 99}}
    ids = {d["_id"] for d in rs.direct(old).t.c.find()}
    assert ids == {f"keep-{n}" for n in range(5)} | {"after"}, "a majority write was lost or a w:1 one kept"
    assert rs.direct(old).t.c.find_one({"_id": "keep-0"})["v"] == 0
    assert db_hash(rs, old, "t") == db_hash(rs, new, "t")
    assert rbid(rs, old) != rbid_before

    status = rs.direct(old).admin.command("replSetGetStatus")
    last = status["lastRollback"]
    assert last["inProgress"] is False
    assert last["undoneEntries"] >= 5
    assert last["documentsSaved"] == 4
    assert [f["path"] for f in last["files"]] == [str(p) for p in rollback_files(rs, old, "t.c")]
    server_status = rs.direct(old).admin.command("serverStatus")
    assert server_status["repl"]["rollback"]["num"] == 1
    assert server_status["metrics"]["repl"]["rollback"]["documentsSaved"] == 4
    assert "rollback complete" in Path(rs.log_path(old)).read_text()


def test_collections_and_indexes_created_or_dropped_alone_roll_back(make_replset):
    rs = make_replset(**SHAPE)
    client = rs.client()
    client.t.get_collection("dropped", write_concern=MAJORITY).insert_many([{"_id": n} for n in range(4)])
    client.t.get_collection("indexed", write_concern=MAJORITY).insert_one({"_id": 1, "a": 1, "b": 1})
    client.t.indexed.create_index("a", name="a_1")
    rs.wait_quiet(rs.ids())
    old, others = isolate(rs)
    rbid_before = rbid(rs, old)
    t = rs.direct(old).get_database("t", write_concern=W1)
    t.dropped.drop()
    t.create_collection("created")
    t.created.insert_many([{"_id": n, "x": "new"} for n in range(3)])
    t.indexed.drop_index("a_1")
    t.indexed.create_index("b", name="b_1")
    new = rs.primary(exclude=(old,))
    rs.direct(new).t.get_collection("other", write_concern=MAJORITY).insert_one({"_id": 1})

    heal_and_wait_rolled_back(rs, old, new, rbid_before)

    names = set(rs.direct(old).t.list_collection_names())
    assert "dropped" in names and "created" not in names, names
    assert sorted(d["_id"] for d in rs.direct(old).t.dropped.find()) == [0, 1, 2, 3]
    assert index_names(rs, old, "t", "indexed") == ["_id_", "a_1"]
    assert sorted(d["_id"] for d in saved_documents(rs, old, "t.created")) == [0, 1, 2]
    assert saved_documents(rs, old, "t.dropped") == [], "a dropped collection comes back, nothing to save"
    assert db_hash(rs, old, "t") == db_hash(rs, new, "t")


def test_a_member_rolls_back_twice(make_replset):
    rs = make_replset(**SHAPE)
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "base"})
    undone = {}
    for round_ in range(2):
        old, others = isolate(rs)
        rbid_before = rbid(rs, old)
        rs.direct(old).t.get_collection("c", write_concern=W1).insert_one({"_id": f"doomed-{round_}"})
        new = rs.primary(exclude=(old,))
        rs.direct(new).t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": f"after-{round_}"})
        heal_and_wait_rolled_back(rs, old, new, rbid_before)
        undone.setdefault(old, set()).add(f"doomed-{round_}")
        assert {d["_id"] for d in saved_documents(rs, old, "t.c")} == undone[old]
        rs.primary()
    for member in rs.ids():
        assert {d["_id"] for d in rs.direct(member).t.c.find()} >= {"base", "after-0", "after-1"}


@pytest.mark.parametrize("step", [4, 6])
def test_a_member_killed_in_the_middle_of_a_rollback_finishes_it_on_restart(make_replset, step):
    rs = make_replset(**SHAPE)
    rs.client().t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "base"})
    old, others = isolate(rs)
    rs.direct(old).t.get_collection("c", write_concern=W1).insert_many([{"_id": f"doomed-{n}"} for n in range(3)])
    rs.direct(old).admin.command("configureFailPoint", "rollbackHangBeforeStep", mode="alwaysOn",
                                 data={"step": step})
    new = rs.primary(exclude=(old,))
    rs.direct(new).t.get_collection("c", write_concern=MAJORITY).insert_one({"_id": "after"})
    rs.heal()
    log = Path(rs.log_path(old))
    deadline = time.monotonic() + ROLLBACK_TIMEOUT_S
    while "rollback hangs before step" not in log.read_text():
        assert time.monotonic() < deadline, f"the rollback never reached step {step}: {rs.states()}"
        time.sleep(POLL_S)
    rs.kill(old)
    rs.restart(old)
    rs.wait_state(old, "SECONDARY", timeout=ROLLBACK_TIMEOUT_S)
    rs.wait_quiet([old, new])
    assert {d["_id"] for d in rs.direct(old).t.c.find()} == {"base", "after"}
    assert db_hash(rs, old, "t") == db_hash(rs, new, "t")
    # Before step 4 nothing marks the rollback: the restarted member rolls
    # back again and saves the documents again. After it, the restart
    # finishes the interrupted rollback from its marker.
    assert {d["_id"] for d in saved_documents(rs, old, "t.c")} == {f"doomed-{n}" for n in range(3)}
    last = rs.direct(old).admin.command("replSetGetStatus")["lastRollback"]
    assert last["inProgress"] is False
    if step > 4:
        assert "rollback interrupted by a restart finished" in log.read_text()
