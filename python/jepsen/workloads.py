"""The workloads: client threads that issue operations through pymongo
and record each one in the history, and the final reads taken after the
faults are healed and the set is quiet.

How an error becomes an outcome (`classify`): a read that failed changed
nothing, so it is `fail`; a write the server refused before doing anything
(not primary, duplicate key, no server selected) is `fail`; anything else
(a lost or timed-out connection, an unmet write concern, an interrupted
operation) is `info`: it may have happened. After an `info` the thread
takes a new process number, as in Jepsen, because its old operation may
still be in flight.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

from pymongo import ReadPreference, ReturnDocument
from pymongo.errors import (DuplicateKeyError, NotPrimaryError, OperationFailure, PyMongoError,
                            ServerSelectionTimeoutError, WriteConcernError)
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from .cluster import Cluster
from .history import FAIL, INFO, OK, History

DATABASE = "jepsen"
# Codes that say a write was refused before it did anything.
REFUSED_CODES = {10107, 13435, 11000}
CLIENT_OPTIONS = {"serverSelectionTimeoutMS": 2_000, "connectTimeoutMS": 1_000, "socketTimeoutMS": 6_000,
                  "retryReads": False, "maxPoolSize": 50}
WTIMEOUT_MS = 4_000
# Pause between one thread's operations, in seconds (keeps histories checkable).
THINK_S = (0.0, 0.02)
# After a failed operation: no primary, so do not spin.
BACKOFF_S = 0.2


def classify(error: BaseException, read: bool) -> str:
    if read:
        return FAIL
    if isinstance(error, ServerSelectionTimeoutError):
        return FAIL
    if isinstance(error, DuplicateKeyError):
        return FAIL
    if isinstance(error, WriteConcernError):
        return INFO
    if isinstance(error, (NotPrimaryError, OperationFailure)):
        code = getattr(error, "code", None)
        if code is None and isinstance(getattr(error, "details", None), dict):
            code = error.details.get("code")
        return FAIL if code in REFUSED_CODES else INFO
    return INFO


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:200]


class Workload:
    name = "?"
    threads = 6
    retry_writes = False

    def __init__(self, cluster: Cluster, history: History, seed: int):
        self.cluster = cluster
        self.history = history
        self.rng = random.Random(seed ^ 0x5EED)
        self.stopping = threading.Event()
        self.client = cluster.client(retryWrites=self.retry_writes, **CLIENT_OPTIONS)
        self.db = self.client[DATABASE]
        self._workers: list[threading.Thread] = []
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def setup(self) -> None:
        pass

    def start(self) -> None:
        for index in range(self.threads):
            worker = threading.Thread(target=self._loop, args=(index,), name=f"{self.name}-{index}", daemon=True)
            worker.start()
            self._workers.append(worker)

    def stop(self) -> None:
        self.stopping.set()
        for worker in self._workers:
            worker.join()
        self.client.close()

    def next_value(self) -> int:
        with self._lock:
            return next(self._counter)

    def _loop(self, index: int) -> None:
        process = index
        rng = random.Random(self.rng.random())
        while not self.stopping.is_set():
            outcome = self.operation(index, process, rng)
            if outcome == INFO:
                process += self.threads
            if outcome != OK:
                time.sleep(BACKOFF_S)
            time.sleep(rng.uniform(*THINK_S))

    def call(self, process: int, f: str, value, body, read: bool = False, **extra) -> str:
        """Invokes, runs `body()`, completes with its result or the error's class."""
        invocation = self.history.invoke(process, f, value, **extra)
        try:
            outcome, result = body()
        except PyMongoError as error:
            outcome = classify(error, read)
            self.history.complete(invocation, outcome, error=describe(error))
            return outcome
        self.history.complete(invocation, outcome, value=result)
        return outcome

    def operation(self, index: int, process: int, rng: random.Random) -> str:
        raise NotImplementedError

    def final(self) -> dict:
        return {}


class Register(Workload):
    """Per-key registers: linearizable reads (find, and findAndModify through
    the primary), w:majority writes (upserts) and compare-and-set (an update
    with the expected value in the filter). Keys rotate so that each key's
    history stays small enough for the checker."""

    name = "register"
    threads = 8
    KEYS_AT_ONCE = 4
    OPS_PER_KEY = 120
    VALUES = 5

    def setup(self) -> None:
        self.majority = self.db.get_collection(
            "registers", write_concern=WriteConcern("majority", wtimeout=WTIMEOUT_MS),
            read_concern=ReadConcern("linearizable"))

    def operation(self, index: int, process: int, rng: random.Random) -> str:
        number = self.next_value()
        group = number // (self.OPS_PER_KEY * self.KEYS_AT_ONCE)
        key = f"k{group * self.KEYS_AT_ONCE + rng.randrange(self.KEYS_AT_ONCE)}"
        kind = rng.choice(("read", "read", "read-fam", "write", "cas", "cas"))
        coll = self.majority
        if kind == "read":
            def body():
                doc = coll.find_one({"_id": key})
                return OK, (doc or {}).get("value", -1)
            return self.call(process, "read", None, body, read=True, key=key)
        if kind == "read-fam":
            def body():
                doc = coll.find_one_and_update({"_id": key}, {"$inc": {"reads": 1}},
                                               return_document=ReturnDocument.BEFORE)
                return OK, (doc or {}).get("value", -1)
            return self.call(process, "read", None, body, read=True, key=key, via="findAndModify")
        if kind == "write":
            value = rng.randrange(self.VALUES)

            def body():
                coll.update_one({"_id": key}, {"$set": {"value": value}}, upsert=True)
                return OK, value
            return self.call(process, "write", value, body, key=key)
        expected, new = rng.randrange(self.VALUES), rng.randrange(self.VALUES)

        def body():
            result = coll.update_one({"_id": key, "value": expected}, {"$set": {"value": new}})
            # A filter that matched nothing is a definite answer: the value was another.
            return (OK, [expected, new]) if result.matched_count == 1 else (FAIL, [expected, new])
        return self.call(process, "cas", [expected, new], body, key=key)


class Set(Workload):
    """Unique inserts with w:majority; at the end every acknowledged one must
    be on every member."""

    name = "set"
    threads = 6

    def setup(self) -> None:
        self.coll = self.db.get_collection("set", write_concern=WriteConcern("majority", wtimeout=WTIMEOUT_MS))

    def operation(self, index: int, process: int, rng: random.Random) -> str:
        value = self.next_value()
        return self.call(process, "add", value, lambda: (self.coll.insert_one({"_id": value}), (OK, value))[1])

    def final(self) -> dict:
        return {"members": {str(i): sorted(d["_id"] for d in m.direct()[DATABASE]["set"].find({}, {"_id": 1}))
                            for i, m in self.cluster.members.items()},
                "dbhash": {str(i): h for i, h in self.cluster.db_hashes(DATABASE).items()}}


class ReadConcernMajority(Workload):
    """Writers insert (even threads w:majority, odd ones w:1) while readers read
    the whole collection with readConcern majority from the primary.

    MongoDB promises monotonic majority reads only within a causally
    consistent session: a primary elected a moment ago serves majority
    reads from the last point it knows to be committed, which can be older
    than what the deposed primary already served. So reader 0 reads without
    a session's causality (its stale reads are reported, not failed), and
    the other readers read causally, their sessions advanced to the latest
    operation time any completed read returned: each of their reads must
    hold everything any read that completed before it began held."""

    name = "rc-majority"
    threads = 8
    READERS = 3
    READ_PAUSE_S = 0.1

    def setup(self) -> None:
        self.majority = self.db.get_collection("rcm", write_concern=WriteConcern("majority", wtimeout=WTIMEOUT_MS))
        self.w1 = self.db.get_collection("rcm", write_concern=WriteConcern(1))
        self.reader = self.db.get_collection("rcm", read_concern=ReadConcern("majority"),
                                             read_preference=ReadPreference.PRIMARY)
        # The latest (operationTime, $clusterTime) a completed read returned.
        self._latest = None

    def operation(self, index: int, process: int, rng: random.Random) -> str:
        if index < self.READERS:
            time.sleep(self.READ_PAUSE_S)
            return self._read(process, causal=index > 0)
        value = self.next_value()
        coll, concern = (self.majority, "majority") if index % 2 == 0 else (self.w1, "1")
        return self.call(process, "add", value, lambda: (coll.insert_one({"_id": value}), (OK, value))[1], w=concern)

    def _read(self, process: int, causal: bool) -> str:
        with self.client.start_session(causal_consistency=causal) as session:
            with self._lock:
                latest = self._latest
            if causal and latest is not None:
                session.advance_cluster_time(latest[1])
                session.advance_operation_time(latest[0])

            def body():
                found = sorted(d["_id"] for d in self.reader.find({}, {"_id": 1}, session=session))
                with self._lock:
                    if session.operation_time is not None and (
                            self._latest is None or session.operation_time > self._latest[0]):
                        self._latest = (session.operation_time, session.cluster_time)
                return OK, found
            return self.call(process, "read", None, body, read=True, causal=causal)

    def final(self) -> dict:
        return {"members": {str(i): sorted(d["_id"] for d in m.direct()[DATABASE]["rcm"].find({}, {"_id": 1}))
                            for i, m in self.cluster.members.items()}}


class Retryable(Workload):
    """Counters incremented by retryable w:majority updates, each increment
    also pushing a token of its own: at the end each acknowledged token is
    in its counter exactly once and no token twice (a retry applied again
    shows as a duplicate whatever the unknown ones did), and the count
    equals the tokens."""

    name = "retryable"
    threads = 6
    retry_writes = True
    COUNTERS = 4

    def setup(self) -> None:
        self.coll = self.db.get_collection("counters", write_concern=WriteConcern("majority", wtimeout=WTIMEOUT_MS))
        for k in range(self.COUNTERS):
            self.coll.update_one({"_id": f"c{k}"}, {"$setOnInsert": {"n": 0, "applied": []}}, upsert=True)

    def operation(self, index: int, process: int, rng: random.Random) -> str:
        key = f"c{rng.randrange(self.COUNTERS)}"
        token = self.next_value()
        invocation = self.history.invoke(process, "incr", token, key=key)
        try:
            result = self.coll.update_one({"_id": key}, {"$inc": {"n": 1}, "$push": {"applied": token}})
        except ServerSelectionTimeoutError as error:
            # pymongo raises this only when no attempt was sent: after a sent
            # attempt failed it re-raises that attempt's error instead.
            self.history.complete(invocation, FAIL, error=describe(error))
            return FAIL
        except PyMongoError as error:
            # A retried write may have applied on its first attempt whatever the
            # retry said: any other error is unknown here.
            self.history.complete(invocation, INFO, error=describe(error))
            return INFO
        assert result.matched_count == 1, result.raw_result
        self.history.complete(invocation, OK)
        return OK

    def final(self) -> dict:
        return {"members": {str(i): {d["_id"]: {"n": d["n"], "applied": d["applied"]}
                                     for d in m.direct()[DATABASE]["counters"].find()}
                            for i, m in self.cluster.members.items()}}


WORKLOADS = {cls.name: cls for cls in (Register, Set, ReadConcernMajority, Retryable)}
