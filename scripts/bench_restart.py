#!/usr/bin/env python3
"""Restart to SECONDARY versus initial sync, by data size (issue 8 "Speed",
seed 003's method: poll the member's state and time STARTUP2 -> RECOVERING
-> SECONDARY).

For each size: a one-member set is loaded with that many bytes of
documents (--doc-bytes each, one secondary index); a member with an empty
data directory is added (votes 0, priority 0) and timed from the reconfig
to SECONDARY (initial sync); then that member is killed (SIGKILL, as a lost
node), the primary takes --missed-writes updates, and the member is
restarted on its own data directory and timed from the restart to
SECONDARY (restart catch-up: recovery from its checkpoint and journal, then
the missed entries). One JSON line per size:

  {"bench": "restart-vs-initial-sync", "data_mb": ..., "documents": ...,
   "missed_writes": ..., "initial_sync_s": ..., "initial_sync_cpu_s": ...,
   "restart_s": ..., "restart_cpu_s": ..., "restart_states": {...}}

`*_cpu_s` are the member process's user+system CPU seconds over the phase
(from /proc), beside the wall time, because a loaded machine stretches the
wall time. `restart_states` holds the seconds after the restart at which
each state was first seen. With --plot, both curves go to a PNG. The data
directories are removed afterwards. The release binary is used unless --bin
says otherwise (cargo build -p slipstream --release --bin slipstream).

One run is noise: --restart-trials N repeats the kill / missed writes /
restart cycle N times on the same data, each from a clean restart (the
member's checkpoint at its last entry); with --replayed-writes M the
member also applies M updates before each kill, which its restart replays
from its journal; each run updates other documents than the runs before
it, and with --cold the member's checkpoint file leaves the OS page cache
before the restart (a node whose volume comes back on a new machine), with
--warm it is read into it (a node restarted where it ran a while; without
either, the page cache holds what the member read since its initial sync,
which by the default method wrote the file around the page cache); `restart_s` is then the median and
`logged_restart_s` the median of the same interval read from the member's log (its first line to its
SECONDARY line, to the millisecond, where the poll moves in steps of 50 ms), and
`restart_trials` holds every run, each with the member's own split of the
catch-up (`catch_up`: its log line's phases, and `serverStatus` apply and
getMore totals of the fresh process). `page_touch` is this machine's cost
of a random 4 KB page-cache read spread over the member's whole checkpoint
file, first touch and second (`scripts/page_touch_probe.py`): the catch-up
reads about two such pages per missed update, and on this VM that cost
grows with the file; `anon_touch` is its cost of a first write to a page of fresh
anonymous memory (`page_touch_probe.py --anon-mb`). --keep DIR keeps each size's cluster
in DIR/<size> (stopped, not removed) and, when it is already there, reuses
it: the load and the initial sync are skipped (their figures come from the
first run), the members restart on the binary of --bin, so that two
binaries can be compared on the same data, run after run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))

from slipstream_testing.bench_load import cpu_seconds, load  # noqa: E402

UPDATE_BATCH = 500
PHASE_TIMEOUT_S = 3600
POLL_S = 0.05
# What a kept cluster remembers of its first run (load, initial sync).
KEPT_FILE = "bench-restart.json"
CATCH_UP_LINE = "restart catch-up finished"
START_LINE = '"msg":"Slipstream starting"'
STATE_LINE = '"msg":"member state changed"'


def member_pid(rs, i: int) -> int:
    return int(rs.member(i)["pid"])


def missed_writes(rs, documents: int, writes: int, run: int = 0) -> None:
    """`writes` single-document updates on the primary (w: 1, batched),
    of documents spread over the whole collection; each `run` updates other
    documents than the runs before it (pages a run read are no help to the
    next)."""
    from pymongo import UpdateOne, WriteConcern

    coll = rs.client().get_database("bench", write_concern=WriteConcern(w=1)).docs
    first = run * writes
    for start in range(first, first + writes, UPDATE_BATCH):
        coll.bulk_write([UpdateOne({"_id": (i * 104_729) % documents}, {"$inc": {"v": 1}})
                         for i in range(start, min(first + writes, start + UPDATE_BATCH))], ordered=False)


def read_into_page_cache(path: Path) -> None:
    """Reads the whole file once, so that the OS page cache holds it, as it
    does on the machine where the member ran a while (an initial sync that
    copied the file wrote it around the page cache)."""
    with open(path, "rb", buffering=0) as file:
        while file.read(8 * 1024 * 1024):
            pass


def drop_cached_pages(path: Path) -> None:
    """Asks the kernel to drop the file's pages from its page cache, as a
    machine that lost the node and remounted its volume would start."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def time_states(rs, i: int, started: float) -> dict[str, float]:
    """Polls member `i` until SECONDARY; the first time each state was seen."""
    seen: dict[str, float] = {}
    deadline = started + PHASE_TIMEOUT_S
    while True:
        try:
            # A new connection per poll: the kept client learns that a
            # restarted member is up only at its next check, up to 500 ms
            # later (the driver's minimum heartbeat interval), which added
            # 0-0.5 s at random to earlier runs' restart times.
            state = rs.member_state(i, fresh=True)
        except Exception:  # not listening yet
            state = "DOWN"
        seen.setdefault(state, round(time.monotonic() - started, 2))
        if state == "SECONDARY":
            return seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"member {i} never became SECONDARY: {seen}")
        time.sleep(POLL_S)


def one_size(size_mb: float, doc_bytes: int, writes: int, trials: int, keep: str | None, replayed: int,
             cold: bool, warm: bool) -> dict:
    from slipstream_testing import ReplicaSet

    rs = ReplicaSet(nodes=1, election_timeout_ms=5000)
    kept_dir = Path(keep) / f"{size_mb / 1024:g}gb" if keep else None
    try:
        if kept_dir is not None and (kept_dir / KEPT_FILE).exists():
            result = reuse(rs, kept_dir)
        else:
            if kept_dir is not None:
                # The cluster lives where it is kept from the start: its
                # state file names the members' directories.
                shutil.rmtree(rs.dir)
                shutil.rmtree(kept_dir, ignore_errors=True)
                kept_dir.mkdir(parents=True)
                rs.dir = str(kept_dir)
            rs.start()
            result = load_and_sync(rs, size_mb, doc_bytes)
            if kept_dir is not None:
                (kept_dir / KEPT_FILE).write_text(json.dumps(result))
        added = result.pop("member")
        first = result.setdefault("runs_so_far", 0)
        runs = [restart_once(rs, added, result["documents"], writes, replayed, first + run, cold, warm)
                for run in range(trials)]
        if kept_dir is not None:
            kept = json.loads((kept_dir / KEPT_FILE).read_text())
            kept["runs_so_far"] = first + trials
            (kept_dir / KEPT_FILE).write_text(json.dumps(kept))
        walls = sorted(run["restart_s"] for run in runs)
        logged = sorted(run["logged_restart_s"] for run in runs if run["logged_restart_s"] is not None)
        result.update({
            "missed_writes": writes,
            "replayed_writes": replayed,
            "cold_checkpoint_file": cold,
            "warm_checkpoint_file": warm,
            "restart_s": walls[len(walls) // 2],
            "restart_cpu_s": sorted(run["restart_cpu_s"] for run in runs)[len(runs) // 2],
            "restart_s_min": walls[0],
            "restart_s_max": walls[-1],
            "logged_restart_s": logged[len(logged) // 2] if logged else None,
            "restart_states": sorted(runs, key=lambda run: run["restart_s"])[len(runs) // 2]["restart_states"],
            "restart_trials": runs,
            "load_average_1m": round(os.getloadavg()[0], 1),
            "page_touch": page_touch(Path(rs.member(added)["dbpath"]) / "checkpoint.redb"),
            "anon_touch": anon_touch_probe(),
        })
        return result
    finally:
        if kept_dir is None:
            rs.cleanup()
        else:
            rs.stop()


def page_touch(path: Path) -> dict:
    """What this machine charges for one random page-cache read spread over
    the member's whole checkpoint file (`page_touch_probe.py`): the
    catch-up reads about two such pages per missed update, so this is the
    part of a restart that grows with the data whatever the member does."""
    sys.path.insert(0, str(REPO / "scripts"))
    from page_touch_probe import probe

    fd = os.open(path, os.O_RDONLY)
    try:
        return probe(fd, os.path.getsize(path) // 4096 * 4096, 20000, seed=1)
    finally:
        os.close(fd)


def anon_touch_probe() -> dict:
    """What this machine charges per page of fresh anonymous memory
    (`page_touch_probe.anon_touch`, 256 MB: the checkpoint store's cache):
    each page-cache read of the catch-up lands in a buffer of the new
    process, and on this VM a page the host took back costs several times
    one it still backs."""
    sys.path.insert(0, str(REPO / "scripts"))
    from page_touch_probe import anon_touch

    return anon_touch(256)


def load_and_sync(rs, size_mb: float, doc_bytes: int) -> dict:
    """Loads the one-member set, adds a member and times its initial sync."""
    documents = load(rs, int(size_mb * 1024 * 1024), doc_bytes)
    primary = rs.primary()
    # No socket timeout: dbStats may scan every document (gigabytes).
    stats = rs.client(socketTimeoutMS=0).bench.command("dbStats")
    data_bytes = int(stats.get("dataSize", 0))
    added = rs.add_member()
    config = rs.config()
    config["version"] += 1
    config["members"].append({"_id": added, "host": rs.host(added), "votes": 0, "priority": 0})
    cpu_before = cpu_seconds(member_pid(rs, added))
    started = time.monotonic()
    rs.direct(primary).admin.command("replSetReconfig", config)
    sync_states = time_states(rs, added, started)
    initial_sync_s = time.monotonic() - started
    initial_sync_cpu_s = cpu_seconds(member_pid(rs, added)) - cpu_before
    rs.wait_quiet([primary, added])
    return {
        "bench": "restart-vs-initial-sync",
        "data_mb": round(data_bytes / 1048576, 1),
        "documents": documents,
        "initial_sync_s": round(initial_sync_s, 2),
        "initial_sync_cpu_s": round(initial_sync_cpu_s, 2),
        "initial_sync_states": sync_states,
        "member": added,
    }


def reuse(rs, kept_dir: Path) -> dict:
    """Takes over a kept cluster: its members restart on this binary."""
    shutil.rmtree(rs.dir, ignore_errors=True)
    rs.dir = str(kept_dir)
    state_file = kept_dir / "cluster.json"
    state = json.loads(state_file.read_text())
    state["binary"] = os.environ["SLIPSTREAM_BIN"]
    for member in state["members"]:
        # Moved or not, the members' directories are under the kept one.
        home = kept_dir / Path(member["dbpath"]).parent.name
        member.update(dbpath=str(home / "db"), logpath=str(home / "mongod.log"), outpath=str(home / "output.log"))
    state_file.write_text(json.dumps(state, indent=1))
    result = json.loads((kept_dir / KEPT_FILE).read_text())
    for i in rs.ids():
        rs.restart(i)
    rs.uri = f"mongodb://{','.join(rs.host(i) for i in rs.ids())}/?replicaSet={rs.set_name}"
    rs.primary()
    rs.wait_state(result["member"], "SECONDARY", timeout=PHASE_TIMEOUT_S)
    rs.wait_quiet(rs.ids())
    result["reused"] = True
    return result


def restart_once(rs, added: int, documents: int, writes: int, replayed: int, run: int, cold: bool,
                 warm: bool) -> dict:
    """Kills the member, writes what it misses, restarts it: its timings.

    Every run starts alike: a clean restart first leaves the member's
    checkpoint at its last entry (a kill would leave the journal of every
    earlier run to replay: the checkpoint stays at the 300 s snapshot
    window's start). Then `replayed` updates that it applies before the
    kill, which its restart replays from its journal, as a member killed
    after a busy while does."""
    rs.restart(added)
    rs.wait_state(added, "SECONDARY", timeout=PHASE_TIMEOUT_S)
    if replayed:
        missed_writes(rs, documents, replayed, 2 * run + 1)
    rs.wait_quiet(rs.ids())
    rs.kill(added)
    missed_writes(rs, documents, writes, 2 * run)
    if cold:
        drop_cached_pages(Path(rs.member(added)["dbpath"]) / "checkpoint.redb")
    if warm:
        read_into_page_cache(Path(rs.member(added)["dbpath"]) / "checkpoint.redb")
    started = time.monotonic()
    rs.restart(added)
    pid = member_pid(rs, added)
    restart_states = time_states(rs, added, started)
    restart_s = time.monotonic() - started
    restart_cpu_s = cpu_seconds(pid)
    logged = logged_states(rs, added)
    return {
        "restart_s": round(restart_s, 2),
        "restart_cpu_s": round(restart_cpu_s, 2),
        "restart_states": restart_states,
        "logged_states": logged,
        "logged_restart_s": logged.get("SECONDARY"),
        "catch_up": catch_up_split(rs, added),
        "io": process_io(pid),
    }


def logged_states(rs, i: int) -> dict[str, float]:
    """The seconds from the member's last "Slipstream starting" log line to
    the first "member state changed" line of each state after it: the same
    intervals as the polled ones, to the millisecond instead of in steps of
    the poll (the process's start before its first line is not in them)."""
    def seconds(line: str) -> float:
        stamp = json.loads(line)["t"]["$date"]
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    lines = Path(rs.log_path(i)).read_text(errors="replace").splitlines()
    starts = [n for n, line in enumerate(lines) if START_LINE in line]
    if not starts:
        return {}
    started = seconds(lines[starts[-1]])
    states: dict[str, float] = {}
    for line in lines[starts[-1]:]:
        if STATE_LINE in line:
            state = json.loads(line)["attr"]["state"]
            states.setdefault(state, round(seconds(line) - started, 3))
    return states


def process_io(pid: int) -> dict:
    """What the member read from the device since it started
    (/proc/<pid>/io `read_bytes`). Its `syscr` and `rchar` stayed the same
    whatever the run read, so they are left out."""
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return {"read_bytes": int(fields["read_bytes"])}


def catch_up_split(rs, i: int) -> dict:
    """The member's own account of its catch-up: the fields of its last
    "restart catch-up finished" log line and its fresh process's apply and
    getMore totals (`serverStatus.metrics.repl`)."""
    split: dict = {}
    for line in reversed(Path(rs.log_path(i)).read_text(errors="replace").splitlines()):
        if CATCH_UP_LINE in line:
            try:
                fields = json.loads(line)
                split = dict(fields.get("attr", {}))
            except ValueError:
                split = {"line": line[-400:]}
            break
    status = rs.direct(i).admin.command("serverStatus")
    repl = status["metrics"]["repl"]
    split["apply_batches"] = repl["apply"]["batches"]["num"]
    split["apply_ms"] = repl["apply"]["batches"]["totalMillis"]
    split["apply_ops"] = repl["apply"]["ops"]
    split["getmores"] = repl["network"]["getmores"]["num"]
    split["getmore_ms"] = repl["network"]["getmores"]["totalMillis"]
    # Checkpoints the member took since it started (one during the catch-up
    # is counted in its restart time).
    split["checkpoints"] = status["slipstream"]["checkpoint"]["count"]
    return split


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r["data_mb"] / 1024 for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [r["initial_sync_s"] for r in results], "o-", label="initial sync (empty data directory)")
    ax.plot(sizes, [r["restart_s"] for r in results], "s-",
            label=f"restart on its own data ({results[0]['missed_writes']} missed writes)")
    ax.set_xlabel("data size (GB)")
    ax.set_ylabel("seconds to SECONDARY")
    ax.set_title("Slipstream: restart vs initial sync (release build, loopback)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-gb", default="0.1,1", help="comma-separated data sizes in GB")
    parser.add_argument("--doc-bytes", type=int, default=1000)
    parser.add_argument("--missed-writes", type=int, default=10_000)
    parser.add_argument("--plot", help="write a PNG of both curves here")
    parser.add_argument("--bin", default=str(REPO / "target" / "release" / "slipstream"))
    parser.add_argument("--restart-trials", type=int, default=1, help="kill / missed writes / restart cycles per size")
    parser.add_argument("--keep", help="keep each size's cluster under this directory and reuse it when there")
    parser.add_argument("--replayed-writes", type=int, default=0,
                        help="updates the member applies before each kill (its restart replays them)")
    parser.add_argument("--cold", action="store_true",
                        help="drop the member's checkpoint file from the OS page cache before each restart")
    parser.add_argument("--warm", action="store_true",
                        help="read the member's checkpoint file into the OS page cache before each restart")
    args = parser.parse_args()
    os.environ["SLIPSTREAM_BIN"] = args.bin
    results = []
    for size in (float(s) for s in args.sizes_gb.split(",")):
        result = one_size(size * 1024, args.doc_bytes, args.missed_writes, args.restart_trials, args.keep,
                          args.replayed_writes, args.cold, args.warm)
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
