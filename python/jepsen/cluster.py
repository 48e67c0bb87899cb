"""The replica set under test: the network, its members, the set's config,
and the harness's own view of it (who is primary, whether it is quiet).

The harness talks to members directly over the bridge; its checks never
go through the workload's clients.
"""

from __future__ import annotations

import time
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from . import network
from .members import SET_NAME, Member

ELECTION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500
PRIMARY_TIMEOUT_S = 60.0
QUIET_TIMEOUT_S = 90.0
POLL_S = 0.1
PRIMARY_STATE = 1
SECONDARY_STATE = 2


class Cluster:
    def __init__(self, size: int, run_dir: Path, clock_faults: bool, lossy_disks: bool = False):
        assert size in (3, 5), size
        self.size = size
        self.network = network.Network(size)
        for sub in ("data", "logs", "clock"):
            (run_dir / sub).mkdir(parents=True, exist_ok=True)
        self.members = {i: Member(i, run_dir, clock_faults, lossy_disks) for i in range(1, size + 1)}
        # Members taken out of the config by a reconfig fault.
        self.removed: set[int] = set()

    @property
    def uri(self) -> str:
        hosts = ",".join(m.host for m in self.members.values())
        return f"mongodb://{hosts}/?replicaSet={SET_NAME}"

    def client(self, **options) -> MongoClient:
        return MongoClient(self.uri, **options)

    def start(self) -> None:
        self.network.create()
        for member in self.members.values():
            member.start()
        for member in self.members.values():
            member.wait_listening()
        config = {"_id": SET_NAME, "members": [self._config_member(i) for i in self.members],
                  "settings": {"electionTimeoutMillis": ELECTION_TIMEOUT_MS,
                               "heartbeatIntervalMillis": HEARTBEAT_INTERVAL_MS}}
        self.members[1].direct().admin.command("replSetInitiate", config)
        self.primary(timeout=PRIMARY_TIMEOUT_S)

    def _config_member(self, i: int) -> dict:
        return {"_id": i, "host": self.members[i].host}

    # ----- views

    def state_of(self, i: int) -> int | None:
        member = self.members[i]
        if member.paused or not member.running():
            return None
        try:
            return member.direct().admin.command("replSetGetStatus")["myState"]
        except PyMongoError:
            return None

    def primaries(self) -> list[int]:
        return [i for i in self.members if self.state_of(i) == PRIMARY_STATE]

    def current_primary(self) -> int | None:
        """The primary with the highest term among those that say they are
        primary (a deposed one may not know yet); None when there is none."""
        best = None
        for i in self.members:
            member = self.members[i]
            if member.paused or not member.running():
                continue
            try:
                hello = member.direct().admin.command("hello")
            except PyMongoError:
                continue
            if hello.get("isWritablePrimary"):
                # electionId carries the term: the newest election wins.
                election = str(hello.get("electionId", ""))
                if best is None or election > best[1]:
                    best = (i, election)
        return best[0] if best else None

    def primary(self, timeout: float = PRIMARY_TIMEOUT_S) -> int:
        deadline = time.monotonic() + timeout
        while True:
            found = self.current_primary()
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no primary after {timeout} s; states {self.states()}")
            time.sleep(POLL_S)

    def states(self) -> dict[int, int | None]:
        return {i: self.state_of(i) for i in self.members}

    # ----- reconfig

    def config(self, primary: int) -> dict:
        return self.members[primary].direct().admin.command("replSetGetConfig")["config"]

    def reconfig(self, primary: int, member_ids: list[int]) -> dict:
        """Sets the config's members to `member_ids` through `primary`."""
        config = self.config(primary)
        config["version"] += 1
        config["members"] = [m for m in config["members"] if m["_id"] in member_ids]
        present = {m["_id"] for m in config["members"]}
        config["members"] += [self._config_member(i) for i in member_ids if i not in present]
        config["members"].sort(key=lambda m: m["_id"])
        config.pop("term", None)
        return self.members[primary].direct().admin.command("replSetReconfig", config, maxTimeMS=10_000)

    # ----- after the faults

    def heal(self) -> None:
        """Ends every fault: network healed, clocks reset, every member running
        and thawed, every removed member back in the config."""
        self.network.heal()
        for member in self.members.values():
            if member.clock is not None:
                member.clock.reset()
            member.resume()
            if not member.running():
                member.close()
                member.start()
        for member in self.members.values():
            member.wait_listening()
        if self.removed:
            deadline = time.monotonic() + PRIMARY_TIMEOUT_S
            while True:
                try:
                    self.reconfig(self.primary(), sorted(self.members))
                    self.removed.clear()
                    break
                except PyMongoError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(1.0)

    def applied(self, i: int):
        status = self.members[i].direct().admin.command("replSetGetStatus")
        own = next(m for m in status["members"] if m.get("self"))
        return (own["optime"]["t"], own["optime"]["ts"]), status["myState"]

    def wait_quiet(self, timeout: float = QUIET_TIMEOUT_S) -> None:
        """Waits for one primary and every member applied to the same entry."""
        deadline = time.monotonic() + timeout
        seen: dict = {}
        while True:
            try:
                seen = {i: self.applied(i) for i in self.members}
                optimes = {optime for optime, _ in seen.values()}
                states = sorted(state for _, state in seen.values())
                if len(optimes) == 1 and states == [PRIMARY_STATE] + [SECONDARY_STATE] * (self.size - 1):
                    return
            except PyMongoError as error:
                seen = {"error": str(error)}
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the set never became quiet in {timeout} s: {seen}")
            time.sleep(POLL_S)

    def db_hashes(self, database: str) -> dict[int, str]:
        return {i: m.direct()[database].command("dbHash")["md5"] for i, m in self.members.items()}

    def stop(self) -> None:
        for member in self.members.values():
            member.stop()
        network.cleanup()
