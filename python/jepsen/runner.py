"""One run: start the set, run a workload under a fault schedule, heal,
wait for quiet, take the final reads, check, and write the results.

A run's directory (`jepsen-results/<workload>-<seed>-<time>/`) holds:
seed and config (`config.json`), the fault schedule as drawn and as it
happened (`schedule.json`), every member's log (`logs/`), the history
(`history.jsonl`), the final reads (`final.json`), the verdict with the
smallest failing window (`verdict.json`), the timeline (`timeline.png`),
and last `summary.json`, the one-line summary that is also printed last.
The members' data directories are deleted after a valid run and kept
after an invalid one.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

from . import checkers, members, network, nemesis, plot, powerloss
from .cluster import Cluster
from .history import History
from .workloads import WORKLOADS

QUIET_AFTER_HEAL_S = 3.0


class Interrupted(Exception):
    pass


def _on_signal(number, frame):
    raise Interrupted(f"signal {number}")


def cleanup() -> dict:
    """Ends every process in this lane's namespaces, unmounts its lossy disks
    and removes its namespaces, veths and bridge. Touches nothing else (no
    other lane's)."""
    killed = members.kill_namespace_processes()
    unmounted = powerloss.ours()
    for mount in unmounted:
        powerloss.unmount(Path(mount))
    removed = network.cleanup()
    return {"killed": killed, "unmounted": unmounted, "removed": removed}


def _write(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, default=str) + "\n")


def run(workload: str, seed: int, seconds: float, faults: list[str], size: int, results: Path) -> dict:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    run_dir = results / f"{workload}-{seed}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=False)
    print(f"jepsen: workload {workload} seed {seed} seconds {seconds} faults {','.join(faults) or 'none'} "
          f"members {size} -> {run_dir}", flush=True)
    windows = nemesis.schedule(seed, seconds, faults, size)
    config = {"workload": workload, "seed": seed, "seconds": seconds, "faults": faults, "members": size,
              "binary": members.binary(), "lane": network.LANE, "argv": sys.argv}
    _write(run_dir / "config.json", config)
    _write(run_dir / "schedule.json", {"drawn": windows})
    if workload == "register":
        checkers.porcupine_binary()
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    cluster = Cluster(size, run_dir, clock_faults="clock" in faults, lossy_disks="power" in faults)
    history = History()
    verdict: dict = {}
    load = None
    chaos = None
    try:
        cluster.start()
        load = WORKLOADS[workload](cluster, history, seed)
        load.setup()
        history = load.history = History()
        chaos = nemesis.Nemesis(cluster, history, windows)
        load.start()
        chaos.start()
        time.sleep(seconds)
        chaos.stop()
        load.stop()
        if chaos.error is not None:
            raise chaos.error
        cluster.heal()
        time.sleep(QUIET_AFTER_HEAL_S)
        try:
            cluster.wait_quiet()
            final = load.final()
        except TimeoutError as error:
            final = None
            verdict = {"valid": False, "liveness": f"not quiet after heal: {error}"}
        _write(run_dir / "final.json", final)
        pairs = history.pairs()
        if final is not None:
            verdict = checkers.CHECKERS[workload](pairs, final, run_dir)
        verdict["availability"] = checkers.availability(pairs)
    finally:
        if chaos is not None and chaos._thread.is_alive():
            chaos.stop()
        if load is not None and not load.stopping.is_set():
            load.stop()
        history.write_jsonl(run_dir / "history.jsonl")
        _write(run_dir / "schedule.json", {"drawn": windows, "happened": chaos.done if chaos else []})
        try:
            cluster.stop()
        finally:
            cleanup()
            for number, handler in previous.items():
                signal.signal(number, handler)
    _write(run_dir / "verdict.json", verdict)
    pairs = history.pairs()
    plot.timeline(pairs, chaos.done, load.threads, run_dir / "timeline.png",
                  f"{workload} seed {seed}: {'valid' if verdict.get('valid') else 'INVALID'}")
    if verdict.get("valid"):
        shutil.rmtree(run_dir / "data", ignore_errors=True)
    counts = history.counts()
    summary = {"workload": workload, "faults": faults, "seconds": seconds, "ops": sum(counts.values()),
               "ok": counts["ok"], "failed": counts["fail"], "unknown": counts["info"],
               "valid": bool(verdict.get("valid"))}
    _write(run_dir / "summary.json", summary)
    print(json.dumps({k: v for k, v in verdict.items() if k in ("window", "liveness")}, default=str)
          if not summary["valid"] else f"jepsen: valid; results in {run_dir}", flush=True)
    print(json.dumps(summary), flush=True)
    return summary
