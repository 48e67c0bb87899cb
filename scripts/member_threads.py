#!/usr/bin/env python3
"""Where a set's members spend CPU and wake-ups, per thread name, over one command.

Usage: scripts/member_threads.py CLUSTER_DIR SLIPSTREAM_BIN -- COMMAND...

Reads every member thread's CPU ticks and voluntary context switches from
/proc/PID/task/* before and after COMMAND (typically `slipstream bench ...`,
whose last stdout line is a JSON summary with "ops"), and prints per
(member, thread name) the switches and CPU microseconds per operation.
Threads with a number in their name are grouped (tokio-rt-worker-3 counts
as tokio-rt-worker); threads that exit during the run are not counted.
"""
import collections
import glob
import json
import os
import subprocess
import sys

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def members(cluster_dir, binary):
    status = subprocess.run([binary, "cluster", "status", "--dir", cluster_dir],
                            capture_output=True, text=True, check=True).stdout
    summary = json.loads(next(line for line in status.splitlines() if line.startswith("{")))
    return [(f"{m['state'][:3]}{m['id']}", m["pid"]) for m in summary["members"] if m.get("up")]


def snapshot(pids):
    switches, ticks = collections.Counter(), collections.Counter()
    for role, pid in pids:
        for task in glob.glob(f"/proc/{pid}/task/*"):
            try:
                with open(f"{task}/comm") as f:
                    name = f.read().strip().rstrip("0123456789-_")
                with open(f"{task}/status") as f:
                    status = f.read()
                with open(f"{task}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            line = next(l for l in status.splitlines() if l.startswith("voluntary_ctxt_switches"))
            switches[(role, name)] += int(line.split()[1])
            ticks[(role, name)] += int(fields[11]) + int(fields[12])
    return switches, ticks


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit(__doc__)
    cluster_dir, binary, command = sys.argv[1], sys.argv[2], sys.argv[4:]
    pids = members(cluster_dir, binary)
    switches_before, ticks_before = snapshot(pids)
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    switches_after, ticks_after = snapshot(pids)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    ops = max(1, summary["ops"])
    print(json.dumps({key: summary.get(key) for key in ("ops_per_sec", "p50_us", "write_concern", "connections")}))
    rows = []
    for key in switches_after:
        per_op = (switches_after[key] - switches_before[key]) / ops
        cpu_us = (ticks_after[key] - ticks_before[key]) / TICKS_PER_SECOND * 1e6 / ops
        rows.append((per_op, cpu_us, key))
    for per_op, cpu_us, (role, name) in sorted(rows, reverse=True):
        if per_op >= 0.005 or cpu_us >= 0.5:
            print(f"{role:6} {name:18} switches/op {per_op:6.3f}  cpu_us/op {cpu_us:7.1f}")


if __name__ == "__main__":
    main()
