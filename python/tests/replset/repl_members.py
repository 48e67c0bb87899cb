"""A few real `serve --replSet` members for the replication tests of this
directory: start, initiate, find the primary, isolate a member with the
`blockMembers` fail point. Every wait is bounded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slipstream_testing import Node  # noqa: E402

ELECTION_TIMEOUT_MS = 1000
HEARTBEAT_INTERVAL_MS = 200
WAIT_TIMEOUT_S = 30.0
POLL_S = 0.05


class Members:
    def __init__(self, count: int, set_name: str):
        self.set_name = set_name
        self.nodes = [Node(extra_args=["--replSet", set_name]) for _ in range(count)]

    def __enter__(self) -> "Members":
        for node in self.nodes:
            node.start()
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.kill()
            node.cleanup()

    def host(self, i: int) -> str:
        return f"127.0.0.1:{self.nodes[i].port}"

    def direct(self, i: int) -> MongoClient:
        return MongoClient(f"mongodb://{self.host(i)}/?directConnection=true&retryWrites=false",
                           serverSelectionTimeoutMS=5_000)

    def initiate(self, members: list[dict] | None = None, **settings) -> None:
        members = members or [{"_id": i, "host": self.host(i)} for i in range(len(self.nodes))]
        config = {
            "_id": self.set_name,
            "members": members,
            "settings": {"electionTimeoutMillis": ELECTION_TIMEOUT_MS,
                         "heartbeatIntervalMillis": HEARTBEAT_INTERVAL_MS, **settings},
        }
        with self.direct(0) as client:
            client.admin.command("replSetInitiate", config)

    def hello(self, i: int) -> dict:
        with self.direct(i) as client:
            return client.admin.command("hello")

    def state(self, i: int) -> int:
        with self.direct(i) as client:
            return client.admin.command("replSetGetStatus")["myState"]

    def wait_for(self, what: str, done, timeout_s: float = WAIT_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        last_error = None
        while time.monotonic() < deadline:
            try:
                result = done()
                if result:
                    return result
            except PyMongoError as err:
                last_error = err
            time.sleep(POLL_S)
        raise AssertionError(f"timed out waiting for {what} (last error: {last_error!r})")

    def primary(self, among: list[int] | None = None) -> int:
        among = among if among is not None else list(range(len(self.nodes)))

        def find():
            for i in among:
                try:
                    if self.hello(i).get("isWritablePrimary"):
                        return i + 1
                except PyMongoError:
                    pass
            return None

        return self.wait_for(f"a primary among {among}", find) - 1

    def elect(self, i: int) -> None:
        """Asks member `i` to stand (`replSetStepUp`) until it is the
        writable primary: a set with a long election timeout would wait it
        out otherwise."""

        def stepped_up():
            with self.direct(i) as client:
                if client.admin.command("hello").get("isWritablePrimary"):
                    return True
                client.admin.command("replSetStepUp")
                return False

        self.wait_for(f"member {i} to be elected and open for writes", stepped_up)

    def block(self, i: int, hosts: list[str]) -> None:
        with self.direct(i) as client:
            client.admin.command("configureFailPoint", "blockMembers", mode="alwaysOn", data={"hosts": hosts})

    def isolate(self, i: int) -> None:
        others = [self.host(j) for j in range(len(self.nodes)) if j != i]
        self.block(i, others)
        for j in range(len(self.nodes)):
            if j != i:
                self.block(j, [self.host(i)])

    def heal(self) -> None:
        for i in range(len(self.nodes)):
            with self.direct(i) as client:
                client.admin.command("configureFailPoint", "blockMembers", mode="off")

    def heal_among(self, members: list[int]) -> None:
        """`heal` on the members named (the others may be gone)."""
        for i in members:
            with self.direct(i) as client:
                client.admin.command("configureFailPoint", "blockMembers", mode="off")

    def uri(self) -> str:
        hosts = ",".join(self.host(i) for i in range(len(self.nodes)))
        return f"mongodb://{hosts}/?replicaSet={self.set_name}&retryWrites=false&serverSelectionTimeoutMS=20000"
