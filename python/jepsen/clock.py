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
on it. `probe()` checks on a live member that the offset reaches it.
"""

from __future__ import annotations

import os
from pathlib import Path

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime")
# The multi-threaded build: the node runs many threads.
LIBRARY_NAME = "libfaketimeMT.so.1"
# How often libfaketime reads the timestamp file again, in seconds: reading it
# on every clock call (FAKETIME_NO_CACHE) costs a file read per timestamp.
CACHE_SECONDS = 1
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
            "FAKETIME_CACHE_DURATION": str(CACHE_SECONDS),
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
