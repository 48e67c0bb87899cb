#!/usr/bin/env python3
"""What a random 4 KB read from the OS page cache costs, by how much of a file the reads spread over.

Usage: scripts/page_touch_probe.py FILE [--reads N] [--spans-gb 0.25,1,2,4,8]

For each span (capped at the file's size): reads the span's first bytes
sequentially in 1 MB pieces (so that they are in the page cache, and the
rate of that read is printed), then N random 4 KB preads inside it, then
the same N offsets again. One JSON line per span, with the microseconds per
read of both passes and the kernel's pgpgin delta (KB read from devices:
0 means every read was served from memory). A restarted member's catch-up
reads about one or two random pages per missed update, so the first pass is
what each such update pays on this machine for the data's size.

`anon_touch` (also `--anon-mb`) times the first write to each page of
fresh anonymous memory: what a new process pays per page its caches grow
by. On this Firecracker VM free pages of 8 MB blocks go back to the host
(`page_reporting.page_reporting_order=11` on the kernel command line), so
memory freed a few seconds ago costs several times a host-backed page
again, and a restarted member pays it for every buffer its catch-up fills.
"""
import argparse
import json
import mmap
import os
import random
import time


def pgpgin_kb() -> int:
    with open("/proc/vmstat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("pgpgin "))


def probe(fd: int, span: int, reads: int, seed: int) -> dict:
    started = time.perf_counter()
    for offset in range(0, span, 1 << 20):
        os.pread(fd, 1 << 20, offset)
    warm_s = time.perf_counter() - started
    rng = random.Random(seed)
    offsets = [rng.randrange(0, max(1, span // 4096)) * 4096 for _ in range(reads)]
    before = pgpgin_kb()
    result = {"span_gb": round(span / 2**30, 2), "sequential_gb_per_s": round(span / warm_s / 1e9, 2), "reads": reads}
    for label in ("first", "second"):
        started = time.perf_counter()
        for offset in offsets:
            os.pread(fd, 4096, offset)
        result[f"{label}_pass_us_per_read"] = round((time.perf_counter() - started) / reads * 1e6, 2)
    result["device_read_kb"] = pgpgin_kb() - before
    return result


def anon_touch(mb: int) -> dict:
    """Microseconds per 4 KB page of the first write to `mb` MB of fresh
    anonymous memory, and of a second write to the same pages (resident
    by then: the loop's own cost)."""
    size = mb << 20
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        result = {"mb": mb}
        for label in ("first", "second"):
            started = time.perf_counter()
            for offset in range(0, size, 4096):
                area[offset] = 1
            result[f"{label}_write_us_per_page"] = round((time.perf_counter() - started) / (size // 4096) * 1e6, 2)
        return result
    finally:
        area.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--reads", type=int, default=20000)
    parser.add_argument("--spans-gb", default="0.25,1,2,4,8")
    parser.add_argument("--anon-mb", type=int, default=256, help="fresh anonymous memory to time (0: none)")
    args = parser.parse_args()
    if args.anon_mb > 0:
        print(json.dumps({"bench": "anon-touch-probe", **anon_touch(args.anon_mb)}), flush=True)
    size = os.path.getsize(args.file)
    fd = os.open(args.file, os.O_RDONLY)
    try:
        for n, span_gb in enumerate(float(s) for s in args.spans_gb.split(",")):
            span = min(size, int(span_gb * 2**30)) // 4096 * 4096
            line = {"bench": "page-touch-probe", "file": args.file, "file_gb": round(size / 2**30, 2)}
            line.update(probe(fd, span, args.reads, seed=n + 1))
            print(json.dumps(line), flush=True)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
