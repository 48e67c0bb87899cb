"""Faults on a schedule drawn from the run's seed.

The schedule is a list of fault windows, one after another with quiet
gaps between: each starts a fault and ends it (heal, restart, thaw, clock
back to true, the removed member added back). Which member a fault hits
is drawn from the seed too; "the primary" is resolved when the fault
starts. Every start and end is recorded in the history under the process
"nemesis", and the windows are kept for the timeline's shading.
"""

from __future__ import annotations

import random
import threading
import time

from pymongo.errors import PyMongoError

from .cluster import Cluster
from .history import INFO, OK, History
from .clock import MAX_OFFSET_S, SETTLE_S, observed_offset

KINDS = ("partition", "kill", "pause", "clock", "stepdown", "reconfig", "power")
PARTITIONS = ("halves", "isolate-primary", "ring", "one-way")
FIRST_FAULT_S = (3.0, 6.0)
FAULT_S = (4.0, 12.0)
GAP_S = (2.0, 6.0)
# No fault starts this close to the end: the last one must end before it.
TAIL_S = 3.0
STEPDOWN_S = 5


def schedule(seed: int, seconds: float, kinds: list[str], size: int) -> list[dict]:
    """The fault windows of a run, from its seed alone."""
    for kind in kinds:
        assert kind in KINDS, kind
    rng = random.Random(seed)
    windows = []
    t = rng.uniform(*FIRST_FAULT_S)
    while kinds and t + FAULT_S[0] < seconds - TAIL_S:
        kind = rng.choice(kinds)
        end = min(t + rng.uniform(*FAULT_S), seconds - TAIL_S)
        window = {"kind": kind, "start": round(t, 3), "end": round(end, 3)}
        members = list(range(1, size + 1))
        if kind == "partition":
            window["shape"] = rng.choice(PARTITIONS)
            rng.shuffle(members)
            window["order"] = members
        elif kind in ("kill", "pause", "power"):
            window["target"] = "primary" if rng.random() < 0.5 else rng.choice(members)
            # Whom a "primary" fault hits when there is no primary (an election is on).
            window["fallback"] = rng.choice(members)
        elif kind == "clock":
            chosen = rng.sample(members, rng.randint(1, size))
            window["offsets"] = {str(i): rng.choice((-1, 1)) * rng.randint(1, MAX_OFFSET_S) for i in chosen}
        elif kind == "reconfig":
            window["pick"] = rng.random()
        windows.append(window)
        t = end + rng.uniform(*GAP_S)
    return windows


def ring(order: list[int]) -> dict[int, set[int]]:
    """Whom each member hears: with five, its two neighbours on a ring (every
    member sees a majority, no two the same one); with three, a bridge (one
    member hears both others, they do not hear each other)."""
    if len(order) >= 5:
        n = len(order)
        return {order[k]: {order[(k - 1) % n], order[(k + 1) % n]} for k in range(n)}
    bridge, a, b = order[0], order[1], order[2]
    return {bridge: {a, b}, a: {bridge}, b: {bridge}}


class Nemesis:
    def __init__(self, cluster: Cluster, history: History, windows: list[dict]):
        self.cluster = cluster
        self.history = history
        self.windows = windows
        self.done: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sleep_until(self, t: float) -> bool:
        """False when stopped first."""
        delay = t - self.history.now() / 1e9
        return delay <= 0 or not self._stop.wait(delay)

    def _run(self) -> None:
        try:
            for window in self.windows:
                if not self._sleep_until(window["start"]):
                    return
                record = dict(window)
                record["began"] = self.history.now() / 1e9
                self.done.append(record)
                undo = self._act(window, "start", record, lambda: self._begin(window, record))
                self._sleep_until(window["end"])
                self._act(window, "stop", record, undo)
                record["ended"] = self.history.now() / 1e9
        except BaseException as error:  # noqa: BLE001 - reported by the runner
            self.error = error

    def _act(self, window: dict, phase: str, record: dict, action):
        invocation = self.history.invoke("nemesis", f"{window['kind']}-{phase}", None)
        try:
            result = action() if action else None
        except (PyMongoError, TimeoutError) as error:
            self.history.complete(invocation, INFO, error=str(error)[:300])
            record.setdefault("errors", []).append(f"{phase}: {error}"[:300])
            return None
        self.history.complete(invocation, OK, value=record.get("detail"))
        return result

    def _primary(self) -> int | None:
        return self.cluster.current_primary()

    def _begin(self, window: dict, record: dict):
        """Starts the fault; returns what ends it."""
        kind = window["kind"]
        cluster = self.cluster
        if kind == "partition":
            return self._partition(window, record)
        if kind in ("kill", "pause", "power"):
            target = window["target"]
            if target == "primary":
                target = self._primary() or window["fallback"]
            member = cluster.members[target]
            record["detail"] = {"member": target}
            if kind in ("kill", "power"):
                if kind == "kill":
                    member.kill()
                else:
                    member.lose_power()
                return lambda: (member.close(), member.start())
            member.pause()
            return member.resume
        if kind == "clock":
            offsets = {int(i): s for i, s in window["offsets"].items()}
            for i, offset in offsets.items():
                if cluster.members[i].clock is not None:
                    cluster.members[i].clock.set(offset)
            record["detail"] = {"offsets": offsets, "observed": self._observe_clocks(offsets)}
            return lambda: [m.clock.reset() for m in cluster.members.values() if m.clock is not None]
        if kind == "stepdown":
            primary = self._primary()
            record["detail"] = {"member": primary}
            if primary is not None:
                try:
                    cluster.members[primary].direct().admin.command("replSetStepDown", STEPDOWN_S,
                                                                    secondaryCatchUpPeriodSecs=2)
                except PyMongoError as error:
                    # A stepdown closes connections; the reply may be lost.
                    record["detail"]["reply"] = str(error)[:200]
            return None
        if kind == "reconfig":
            return self._reconfig(window, record)
        raise AssertionError(kind)

    def _observe_clocks(self, offsets: dict[int, int]) -> dict[str, float | None]:
        """Each skewed member's clock as it reports it (None: it did not answer)."""
        time.sleep(SETTLE_S)
        observed = {}
        for i in offsets:
            member = self.cluster.members[i]
            try:
                observed[str(i)] = observed_offset(member.direct().admin.command("hello"))
            except PyMongoError:
                observed[str(i)] = None
        return observed

    def _partition(self, window: dict, record: dict):
        network = self.cluster.network
        order = window["order"]
        shape = window["shape"]
        if shape == "halves":
            half = len(order) // 2
            sides = [order[:half], order[half:]]
            network.partition(sides)
            record["detail"] = {"sides": sides}
        elif shape == "isolate-primary":
            primary = self._primary() or order[0]
            sides = [[primary], [i for i in order if i != primary]]
            network.partition(sides)
            record["detail"] = {"sides": sides}
        elif shape == "ring":
            sees = ring(order)
            network.connect_only(sees)
            record["detail"] = {"sees": {str(i): sorted(s) for i, s in sees.items()}}
        else:
            source, target = order[0], order[1]
            network.drop({target: {source}})
            record["detail"] = {"dropped": f"{source}->{target}"}
        return network.heal

    def _reconfig(self, window: dict, record: dict):
        cluster = self.cluster
        primary = self._primary()
        if primary is None:
            record["detail"] = {"skipped": "no primary"}
            return None
        others = sorted(i for i in cluster.members if i != primary and i not in cluster.removed)
        victim = others[int(window["pick"] * len(others))]
        keep = sorted(i for i in cluster.members if i != victim and i not in cluster.removed)
        record["detail"] = {"removed": victim, "via": primary}
        # Counted as removed before the answer: a reconfig that timed out
        # waiting for a majority to hold the new config (50) has installed
        # it, and the heal adds every member back either way.
        cluster.removed.add(victim)
        cluster.reconfig(primary, keep)

        def add_back():
            now_primary = cluster.primary(timeout=20)
            cluster.reconfig(now_primary, sorted(set(keep) | {victim}))
            cluster.removed.discard(victim)
        return add_back
