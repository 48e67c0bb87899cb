"""The member processes: `slipstream serve --replSet` inside its network
namespace, with libfaketime preloaded when clock faults are on (and any
extra `serve` arguments from JEPSEN_SERVE_ARGS, e.g. "-v"); started,
killed with SIGKILL, restarted on the same data, frozen and thawed.

A member is found again by the namespace it runs in (`ip netns pids`), so
`cleanup` from another process (the `cleanup` subcommand, a later run)
ends exactly the processes a run started and nothing else.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from pymongo import MongoClient

from . import network
from .clock import Clock
from .powerloss import Disk

# Each lane its own port (the namespaces already keep lanes apart; a port
# per lane also keeps a stray member of one lane from answering another).
PORT = 27017 + network.LANE
SET_NAME = "jepsen"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_S = 0.05


def binary() -> str:
    configured = os.environ.get("SLIPSTREAM_BIN")
    if configured:
        return configured
    return str(Path(__file__).resolve().parents[2] / "target" / "debug" / "slipstream")


class Member:
    """Member i: its namespace, address, data directory, log and process."""

    def __init__(self, i: int, run_dir: Path, clock_faults: bool, lossy_disk: bool = False):
        self.id = i
        self.ip = network.member_ip(i)
        self.host = f"{self.ip}:{PORT}"
        self.dbpath = run_dir / "data" / f"n{i}"
        self.logpath = run_dir / "logs" / f"n{i}.log"
        self.outpath = run_dir / "logs" / f"n{i}.out"
        self.clock = Clock(run_dir / "clock" / f"n{i}") if clock_faults else None
        # With power-loss faults the data directory is a lossy FUSE mount of
        # data/backing-nI (see powerloss.py).
        self.disk = Disk(run_dir / "data" / f"backing-n{i}", self.dbpath, run_dir / "logs" / f"n{i}.fuse.log") \
            if lossy_disk else None
        self.process: subprocess.Popen | None = None
        self.paused = False
        self.starts = 0
        self._direct: MongoClient | None = None

    def start(self) -> None:
        assert not self.running(), f"member {self.id} is already running"
        self.dbpath.mkdir(parents=True, exist_ok=True)
        if self.disk is not None and not (self.disk.process and self.disk.process.poll() is None):
            self.disk.start()
        environment = dict(os.environ)
        if self.clock is not None:
            environment.update(self.clock.environment())
        command = ["ip", "netns", "exec", network.namespace(self.id), binary(), "serve", "--replSet", SET_NAME,
                   "--bind-ip", self.ip, "--port", str(PORT), "--dbpath", str(self.dbpath),
                   "--logpath", str(self.logpath), "--enable-test-commands",
                   *os.environ.get("JEPSEN_SERVE_ARGS", "").split()]
        with open(self.outpath, "ab") as out:
            out.write(f"=== start {self.starts + 1} at {time.time():.3f}\n".encode())
            out.flush()
            # `ip netns exec` execs the server: the pid is the member's own.
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                            env=environment, start_new_session=True)
        self.starts += 1
        self.paused = False

    def wait_listening(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"member {self.id} exited {self.process.returncode}; see {self.outpath}")
            try:
                with socket.create_connection((self.ip, PORT), timeout=0.5):
                    return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"member {self.id} does not listen after {timeout} s")
            time.sleep(POLL_S)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, number: int) -> bool:
        if not self.running():
            return False
        os.kill(self.process.pid, number)
        return True

    def kill(self) -> None:
        """SIGKILL (a paused member dies too) and reap it."""
        if self.signal(signal.SIGKILL):
            self.process.wait(timeout=STOP_TIMEOUT_S)
        self.paused = False

    def lose_power(self) -> None:
        """SIGKILL, and every write it had not fsynced is gone."""
        assert self.disk is not None, "power loss needs the lossy disk"
        self.kill()
        self.disk.lose_power()

    def pause(self) -> None:
        if self.signal(signal.SIGSTOP):
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL when it does not exit in time."""
        self.resume()
        if self.signal(signal.SIGTERM):
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        self.close()
        if self.disk is not None:
            self.disk.stop()

    def direct(self) -> MongoClient:
        """A direct connection for the harness's own checks (not the workload's)."""
        if self._direct is None:
            self._direct = MongoClient(f"mongodb://{self.host}/?directConnection=true", serverSelectionTimeoutMS=2_000,
                                       connectTimeoutMS=2_000, socketTimeoutMS=10_000, retryWrites=False,
                                       retryReads=False)
        return self._direct

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
            self._direct = None


def kill_namespace_processes() -> list[int]:
    """SIGKILLs every process inside one of this lane's namespaces; returns their pids."""
    killed = []
    for ns in network.namespaces():
        pids = network.run("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while any(Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "X") for pid in killed):
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    return killed


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"
