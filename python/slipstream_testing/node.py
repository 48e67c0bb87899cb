"""Start, stop and kill a real `slipstream serve` process.

Tests drive nodes through real sockets and real files: a Node is a child
process on a free loopback port with its own data directory.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# How long a node may take to start answering or to stop, in seconds.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


def binary_path() -> Path:
    """The slipstream binary: $SLIPSTREAM_BIN, else the debug build."""
    configured = os.environ.get("SLIPSTREAM_BIN")
    if configured:
        return Path(configured)
    return REPO_ROOT / "target" / "debug" / "slipstream"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node:
    """One `slipstream serve` process.

    The data directory survives stop/kill so that a restart recovers from
    it; `cleanup()` removes it when the node owns it.
    """

    def __init__(self, dbpath: str | None = None, port: int | None = None,
                 extra_args: list[str] | None = None):
        self._owns_dbpath = dbpath is None
        self.dbpath = dbpath or tempfile.mkdtemp(prefix="slipstream-node-")
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.process: subprocess.Popen | None = None
        # The log lives beside, not inside, the data directory so that a
        # test may wipe or inspect the directory freely.
        self.log_path = os.path.join(
            tempfile.gettempdir(), f"slipstream-{os.path.basename(self.dbpath)}-{self.port}.log")

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def command_line(self) -> list[str]:
        return [str(binary_path()), "serve", "--port", str(self.port),
                "--bind-ip", "127.0.0.1", "--dbpath", self.dbpath,
                "--enable-test-commands", *self.extra_args]

    def start(self) -> "Node":
        assert self.process is None or self.process.poll() is not None, "already running"
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command_line(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.wait_until_ready()
        return self

    def wait_until_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"slipstream exited with {self.process.returncode}; log:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"slipstream did not listen on {self.port}; log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as handle:
                return "".join(handle.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> int:
        """SIGTERM, then wait for a clean exit; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        """SIGKILL: no checkpoint, no flush, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def restart(self, how: str) -> "Node":
        """Stops the node as `how` says ("clean shutdown": SIGTERM, which
        must exit 0; "sigkill": a crash) and starts it on the same dbpath."""
        if how == "sigkill":
            self.kill()
        else:
            assert how == "clean shutdown", how
            assert self.stop() == 0, "the clean shutdown failed"
        return self.start()

    def cleanup(self) -> None:
        self.kill()
        if self._owns_dbpath:
            subprocess.run(["rm", "-rf", self.dbpath], check=False)

    def __enter__(self) -> "Node":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
