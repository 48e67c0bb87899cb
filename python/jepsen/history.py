"""The client history: every operation's invocation and completion, as
Jepsen records them. A completion is `ok` (it happened), `fail` (it
certainly did not) or `info` (unknown: a timeout, a lost connection, a
write concern that was not met; it may have happened). Times are
nanoseconds since the run's start on the monotonic clock.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

OK, FAIL, INFO, INVOKE = "ok", "fail", "info", "invoke"


class History:
    def __init__(self):
        self.start_ns = time.monotonic_ns()
        self.events: list[dict] = []
        self._lock = threading.Lock()

    def now(self) -> int:
        return time.monotonic_ns() - self.start_ns

    def _append(self, event: dict) -> dict:
        with self._lock:
            event["index"] = len(self.events)
            event["time"] = self.now()
            self.events.append(event)
        return event

    def invoke(self, process, f: str, value=None, **extra) -> dict:
        return self._append({"type": INVOKE, "process": process, "f": f, "value": value, **extra})

    def complete(self, invocation: dict, outcome: str, value=None, error: str | None = None) -> dict:
        assert outcome in (OK, FAIL, INFO), outcome
        event = {key: val for key, val in invocation.items() if key not in ("index", "time", "type", "value")}
        event.update(type=outcome, value=value if value is not None else invocation["value"])
        if error is not None:
            event["error"] = error
        return self._append(event)

    def pairs(self) -> list[tuple[dict, dict]]:
        """(invocation, completion) for every operation; one never completed
        (the run ended first) completes as `info` at the end."""
        with self._lock:
            events = list(self.events)
        open_ops: dict = {}
        result = []
        for event in events:
            if event["type"] == INVOKE:
                open_ops[event["process"]] = event
            else:
                invocation = open_ops.pop(event["process"])
                result.append((invocation, event))
        end = self.now()
        for invocation in open_ops.values():
            result.append((invocation, {**invocation, "type": INFO, "time": end, "error": "never completed"}))
        result.sort(key=lambda pair: pair[0]["time"])
        return result

    def counts(self) -> dict[str, int]:
        counts = {OK: 0, FAIL: 0, INFO: 0}
        for _, completion in self.pairs():
            if isinstance(completion["process"], int):
                counts[completion["type"]] += 1
        return counts

    def write_jsonl(self, path: Path) -> None:
        with self._lock:
            events = list(self.events)
        with open(path, "w") as out:
            for event in events:
                out.write(json.dumps(event, default=str) + "\n")
