"""Clock faults: each member's wall clock runs at an offset that the harness
changes during the run, through libfaketime (Debian's `faketime`).

The member is started with libfaketime preloaded and a timestamp file of
its own; the file holds the offset ("+90", "-30": seconds). Rust's std
reads the wall clock with clock_gettime(CLOCK_REALTIME) through glibc's
symbol (which then uses the vDSO); LD_PRELOAD puts libfaketime's
clock_gettime in front of glibc's, so the node sees the offset. The
monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC): a jumping
wall clock is what NTP steps and VM migrations cause, while CLOCK_MONOTONIC
never goes back on a real machine, and timers (elections, heartbeats) run
on it. The nemesis checks on the live members that the offset reaches
them (`observed_offset`: the member's `hello.localTime` against ours) and
records what it saw in the run's schedule.
"""

from __future__ import annotations

import os
import time
from datetime import timezone
from pathlib import Path

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime")
# The multi-threaded build: the node runs many threads.
LIBRARY_NAME = "libfaketimeMT.so.1"
# How long the nemesis waits after changing a file before it looks at the
# member's clock (libfaketime reads the file on every call: FAKETIME_NO_CACHE;
# measured: no visible cost on w:majority inserts).
SETTLE_S = 0.3
# The largest offset a clock fault sets, in seconds (the issue asks for minutes).
MAX_OFFSET_S = 240


def library() -> str | None:
    for directory in LIBRARY_DIRS:
        path = Path(directory) / LIBRARY_NAME
        if path.exists():
            return str(path)
    return None


class Clock:
    """One member's clock offset, kept in its libfaketime timestamp file."""

    def __init__(self, path: Path):
        self.path = path
        self.offset_s = 0
        self.set(0)

    def environment(self) -> dict[str, str]:
        lib = library()
        if lib is None:
            raise RuntimeError("libfaketime is not installed: run scripts/setup.sh --with-fault-tools")
        return {
            "LD_PRELOAD": lib,
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def set(self, offset_s: int) -> None:
        assert abs(offset_s) <= MAX_OFFSET_S, offset_s
        self.offset_s = offset_s
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(f"{offset_s:+d}\n")
        os.replace(temporary, self.path)

    def reset(self) -> None:
        self.set(0)


def observed_offset(hello: dict) -> float:
    """The member's wall clock minus ours, in seconds, from its `hello`."""
    local = hello["localTime"]
    return round(local.replace(tzinfo=timezone.utc).timestamp() - time.time(), 1)
