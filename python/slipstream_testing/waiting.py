"""Polling for a condition that a background task makes true (a TTL pass,
a replicated write), with a deadline instead of a fixed sleep."""

import time

POLL_INTERVAL_S = 0.2


def poll_until(predicate, timeout: float, interval: float = POLL_INTERVAL_S) -> bool:
    """True as soon as `predicate()` is; after `timeout` seconds, its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
