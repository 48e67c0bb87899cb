"""Free loopback ports for test clusters and benchmarks, with no imports
beyond the standard library, so that scripts run it as
`python3 python/slipstream_testing/ports.py COUNT` (prints the first of
COUNT consecutive free ports) before any package is installed."""

from __future__ import annotations

import random
import socket
import sys

# Linux's ephemeral range starts here (32768-60999): an outgoing connection
# may take a port above it between the check and the bind.
EPHEMERAL_PORTS_FIRST = 32_768


def _ports_free(first: int, count: int) -> bool:
    for port in range(first, first + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port_range(count: int) -> int:
    """The first of `count` consecutive free loopback ports, below the
    ephemeral range."""
    for _ in range(200):
        first = random.randrange(20_000, EPHEMERAL_PORTS_FIRST - count)
        if _ports_free(first, count):
            return first
    raise RuntimeError(f"no {count} consecutive free ports found")


if __name__ == "__main__":
    print(free_port_range(int(sys.argv[1]) if len(sys.argv) > 1 else 1))
