"""A real replica set for tests: `slipstream cluster` starts and drives the
member processes; pymongo talks to them.

Members are numbered from 1, as on `slipstream cluster`'s command line and
in the set's config (`_id`). Every wait is bounded; a failed wait raises
with what the members said.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from .node import binary_path
from .ports import free_port_range

# Bounds of the waits, in seconds.
START_TIMEOUT_S = 60.0
STATE_TIMEOUT_S = 30.0
QUIET_TIMEOUT_S = 30.0
CLI_TIMEOUT_S = 120.0
POLL_S = 0.05

# Timing settings that keep failovers to a second or two.
ELECTION_TIMEOUT_MS = 1000
HEARTBEAT_INTERVAL_MS = 200

# Spare ports after the members' for `add_member`.
SPARE_PORTS = 3
# MongoDB's member state numbers (replSetGetStatus myState).
STATE_NAMES = {0: "STARTUP", 1: "PRIMARY", 2: "SECONDARY", 3: "RECOVERING", 5: "STARTUP2", 6: "UNKNOWN",
               7: "ARBITER", 8: "DOWN", 9: "ROLLBACK", 10: "REMOVED"}
NOT_YET_INITIALIZED = 94
INVALID_REPLICA_SET_CONFIG = 93


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class ClusterError(RuntimeError):
    """`slipstream cluster` failed; carries its exit code and output."""

    def __init__(self, args, code, stdout, stderr):
        super().__init__(f"slipstream cluster {' '.join(args)} exited {code}\n{stderr}{stdout}")
        self.code = code
        self.stdout = stdout
        self.stderr = stderr


class ReplicaSet:
    """`nodes` data-bearing members (and an arbiter with `arbiter=True`).

    `members` gives per-member options: `{3: "priority=0,votes=0", 2: "hidden"}`.
    """

    def __init__(self, nodes: int = 3, arbiter: bool = False, members: dict[int, str] | None = None,
                 election_timeout_ms: int = ELECTION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, chaining: bool = True,
                 set_name: str = "rs0", serve_args: list[str] | None = None):
        self.nodes = nodes
        self.arbiter = arbiter
        self.member_options = dict(members or {})
        self.election_timeout_ms = election_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.chaining = chaining
        self.set_name = set_name
        self.serve_args = list(serve_args or [])
        self.dir = tempfile.mkdtemp(prefix="slipstream-rs-")
        self.uri: str | None = None
        self._clients: list[MongoClient] = []
        self._direct: dict[int, MongoClient] = {}

    # ----- the cluster command

    def cli(self, *args: str, timeout: float = CLI_TIMEOUT_S) -> dict:
        """Runs `slipstream cluster ARGS --dir DIR`; returns its JSON line."""
        command = [str(binary_path()), "cluster", *args, "--dir", self.dir]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise ClusterError(args, result.returncode, result.stdout, result.stderr)
        lines = result.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}

    def start(self) -> "ReplicaSet":
        count = self.nodes + (1 if self.arbiter else 0)
        args = ["up", "--nodes", str(self.nodes), "--base-port", str(free_port_range(count + SPARE_PORTS)),
                "--set-name", self.set_name, "--election-timeout-ms", str(self.election_timeout_ms),
                "--heartbeat-interval-ms", str(self.heartbeat_interval_ms), "--wait-secs", str(int(START_TIMEOUT_S))]
        if self.arbiter:
            args.append("--arbiter")
        if not self.chaining:
            args.append("--no-chaining")
        for member, options in sorted(self.member_options.items()):
            args += ["--member", f"{member}:{options}"]
        for argument in self.serve_args:
            args.append(f"--serve-arg={argument}")
        status = self.cli(*args)
        self.uri = status["uri"]
        return self

    def state(self) -> dict:
        """The cluster's state file (members, pids, partition)."""
        return json.loads((Path(self.dir) / "cluster.json").read_text())

    def status(self) -> dict:
        return self.cli("status")

    # ----- members

    def member(self, i: int) -> dict:
        for entry in self.state()["members"]:
            if entry["id"] == i:
                return entry
        raise KeyError(f"no member {i}")

    def ids(self) -> list[int]:
        return [entry["id"] for entry in self.state()["members"]]

    def host(self, i: int) -> str:
        return f"127.0.0.1:{self.member(i)['port']}"

    def id_of(self, host: str) -> int:
        for entry in self.state()["members"]:
            if f"127.0.0.1:{entry['port']}" == host:
                return entry["id"]
        raise KeyError(f"no member on {host}")

    def is_running(self, i: int) -> bool:
        return next(m for m in self.status()["members"] if m["id"] == i)["up"]

    def log_path(self, i: int) -> str:
        return self.member(i)["logpath"]

    # ----- clients

    def client(self, **kwargs) -> MongoClient:
        """A replica-set client over the set's URI (closed at cleanup)."""
        options = {"serverSelectionTimeoutMS": 30_000}
        options.update(kwargs)
        client = MongoClient(self.uri, **options)
        self._clients.append(client)
        return client

    def direct(self, i: int) -> MongoClient:
        """A direct connection to member `i` (kept across its restarts)."""
        if i not in self._direct:
            self._direct[i] = self._new_direct_client(i)
        return self._direct[i]

    def _new_direct_client(self, i: int) -> MongoClient:
        return MongoClient(
            f"mongodb://{self.host(i)}/?directConnection=true", serverSelectionTimeoutMS=2_000,
            connectTimeoutMS=2_000, socketTimeoutMS=10_000, retryWrites=False, retryReads=False)

    def member_state(self, i: int, fresh: bool = False) -> str:
        """What member `i` says of itself: PRIMARY, SECONDARY, ...; DOWN when
        it does not answer, PAUSED when paused.

        `fresh`: ask over a new connection instead of the kept client. A
        driver that saw the member go down checks it again at most every
        500 ms (pymongo's minHeartbeatFrequencyMS), so the kept client can
        answer up to half a second after the member is up: fine for a
        wait, wrong for timing a restart."""
        member = self.member(i)
        if member["paused"]:
            return "PAUSED"
        if not _listening(member["port"]):
            # Refused at once: no need to wait out the driver's server
            # selection timeout.
            return "DOWN"
        client = self._new_direct_client(i) if fresh else self.direct(i)
        try:
            status = client.admin.command("replSetGetStatus")
        except OperationFailure as failure:
            if failure.code == NOT_YET_INITIALIZED:
                return "STARTUP"
            if failure.code == INVALID_REPLICA_SET_CONFIG:
                return "REMOVED"
            raise
        except ConnectionFailure:
            return "DOWN"
        finally:
            if fresh:
                client.close()
        return STATE_NAMES.get(status["myState"], str(status["myState"]))

    def states(self) -> dict[int, str]:
        return {i: self.member_state(i) for i in self.ids()}

    def wait_state(self, i: int, state: str, timeout: float = STATE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            seen = self.member_state(i)
            if seen == state:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"member {i} is {seen}, not {state}, after {timeout} s; states {self.states()}")
            time.sleep(POLL_S)

    def primary(self, timeout: float = STATE_TIMEOUT_S, exclude: tuple[int, ...] = ()) -> int:
        """The member that is PRIMARY and takes writes (waiting for one, not
        among `exclude`). A member reports PRIMARY as soon as it wins, but
        takes writes only once it has drained what it fetched (hello's
        `isWritablePrimary`, as drivers see it): a write sent between the
        two answers NotWritablePrimary, as MongoDB's does."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            primaries = [i for i, state in states.items() if state == "PRIMARY" and i not in exclude]
            if len(primaries) == 1 and self._writable(primaries[0]):
                return primaries[0]
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no single primary after {timeout} s: {states}")
            time.sleep(POLL_S)

    def _writable(self, i: int) -> bool:
        try:
            return bool(self.direct(i).admin.command("hello").get("isWritablePrimary"))
        except PyMongoError:
            return False

    def secondaries(self) -> list[int]:
        return [i for i, state in self.states().items() if state == "SECONDARY"]

    # ----- faults

    def kill(self, i: int) -> None:
        self.cli("kill", str(i))

    def restart(self, i: int) -> None:
        self.cli("restart", str(i))

    def pause(self, i: int) -> None:
        self.cli("pause", str(i))

    def resume(self, i: int) -> None:
        self.cli("resume", str(i))

    def add_member(self, arbiter: bool = False) -> int:
        """Starts one more member process outside the config; returns its id."""
        reply = self.cli("add", *(["--arbiter"] if arbiter else []))
        return reply["member"]["id"]

    def partition(self, sides: list[list[int]]) -> dict:
        """Cuts member-to-member traffic between the sides (clients keep theirs)."""
        return self.cli("partition", "|".join(",".join(str(i) for i in side) for side in sides))

    def heal(self) -> dict:
        return self.cli("heal")

    def step_down(self, seconds: int = 10, catch_up_seconds: int = 5) -> int:
        """`replSetStepDown` on the primary; returns the old primary's id."""
        old = self.primary()
        self.direct(old).admin.command("replSetStepDown", seconds, secondaryCatchUpPeriodSecs=catch_up_seconds)
        return old

    # ----- checks

    def config(self) -> dict:
        """The config as the primary has it."""
        return self.direct(self.primary()).admin.command("replSetGetConfig")["config"]

    def config_of_any(self) -> dict:
        """The newest config any answering member has (no primary needed)."""
        newest = None
        for i in self.ids():
            if self.member(i)["paused"]:
                continue
            try:
                config = self.direct(i).admin.command("replSetGetConfig")["config"]
            except PyMongoError:
                continue
            if newest is None or (config.get("term", -1), config["version"]) > (newest.get("term", -1),
                                                                                  newest["version"]):
                newest = config
        if newest is None:
            raise RuntimeError(f"no member answers replSetGetConfig: {self.states()}")
        return newest

    def data_members(self) -> list[int]:
        """Members of the current config that hold data and are running."""
        members = [m["_id"] for m in self.config()["members"] if not m.get("arbiterOnly")]
        running = {m["id"] for m in self.status()["members"] if m["up"] and not m["paused"]}
        return [i for i in members if i in running]

    def applied_optime(self, i: int):
        status = self.direct(i).admin.command("replSetGetStatus")
        own = next(m for m in status["members"] if m.get("self"))
        return own["optime"]["ts"], own["optime"]["t"]

    def wait_quiet(self, members: list[int], timeout: float = QUIET_TIMEOUT_S) -> None:
        """Waits until every member has applied the same last entry."""
        deadline = time.monotonic() + timeout
        while True:
            optimes = {}
            try:
                optimes = {i: self.applied_optime(i) for i in members}
                if len(set(optimes.values())) == 1:
                    return
            except PyMongoError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"members never agreed on their last applied entry: {optimes}; "
                                   f"states {self.states()}")
            time.sleep(POLL_S)

    def db_hashes(self, members: list[int]) -> dict[int, dict]:
        names = set()
        for i in members:
            names |= set(self.direct(i).list_database_names())
        names.discard("local")
        return {i: {name: self._db_hash(i, name) for name in sorted(names)} for i in members}

    def _db_hash(self, i: int, name: str) -> dict:
        reply = self.direct(i)[name].command("dbHash")
        return {"md5": reply["md5"], "collections": reply.get("collections", {})}

    def assert_db_hash_agree(self, timeout: float = QUIET_TIMEOUT_S) -> None:
        """Once the set is quiet, every data-bearing member's `dbHash` of every
        database agrees. Retries while the set may still be moving."""
        deadline = time.monotonic() + timeout
        while True:
            members = self.data_members()
            self.wait_quiet(members, timeout=max(1.0, deadline - time.monotonic()))
            hashes = self.db_hashes(members)
            reference = hashes[members[0]]
            differing = {i: h for i, h in hashes.items() if h != reference}
            if not differing:
                return
            if time.monotonic() >= deadline:
                raise AssertionError(f"dbHash differs between members: {json.dumps(hashes, indent=1, default=str)}")
            time.sleep(0.2)

    # ----- lifecycle

    def stop(self) -> None:
        self.close_clients()
        if (Path(self.dir) / "cluster.json").exists():
            self.cli("stop")

    def close_clients(self) -> None:
        for client in self._clients + list(self._direct.values()):
            client.close()
        self._clients.clear()
        self._direct.clear()

    def cleanup(self) -> None:
        """Stops the members and removes the directory, unless
        SLIPSTREAM_KEEP_CLUSTERS=1 asks to keep it for a look."""
        try:
            self.stop()
        finally:
            if os.environ.get("SLIPSTREAM_KEEP_CLUSTERS") != "1":
                shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ReplicaSet":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
