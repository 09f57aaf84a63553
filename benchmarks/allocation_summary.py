#!/usr/bin/env python3
"""Ratios from benchmarks/run_allocation.sh's JSON directory.

cycle: median M ops/s per allocator and size; node_allocator / glibc and / the fastest of the four peers.
mixed: per allocator and thread count, the median over the rounds (one process each) of M ops/s, peak
and final RSS above the start; node_allocator / glibc for speed and for peak RSS.
large: median ms per variant and the ratio to plain mmap + touch.
"""
import glob
import json
import os
import re
import statistics
import sys

PEERS = ["glibc_malloc", "jemalloc", "mimalloc", "tbbmalloc"]


def load(path):
    with open(path) as f:
        return json.load(f).get("benchmarks", [])


def cycle(out):
    rates = {}
    for b in load(os.path.join(out, "cycle.json")):
        if b.get("aggregate_name") != "median":
            continue
        m = re.match(r"BM_Cycle<(\w+)>/(\d+)_median", b["name"])
        if m:
            rates.setdefault(int(m.group(2)), {})[m.group(1)] = b["items_per_second"] / 1e6
    print("cycle (M ops/s, medians)   size: node  glibc  jemalloc  mimalloc  tbbmalloc | vs glibc  vs best")
    worst = None
    for size in sorted(rates):
        r = rates[size]
        node = r.get("node_alloc", 0)
        best = max(r.get(p, 0) for p in PEERS)
        vs_glibc = node / r["glibc_malloc"] if r.get("glibc_malloc") else float("nan")
        worst = vs_glibc if worst is None else min(worst, vs_glibc)
        print("  %8d: %6.0f %6.0f %6.0f %6.0f %6.0f | %5.2f %5.2f" % (
            size, node, r.get("glibc_malloc", 0), r.get("jemalloc", 0), r.get("mimalloc", 0), r.get("tbbmalloc", 0),
            vs_glibc, node / best if best else float("nan")))
    print("  lowest node/glibc: %.2f" % worst)


def mixed(out, kind):
    runs = {}
    for path in glob.glob(os.path.join(out, "mixed-%s-*.json" % kind)):
        for b in load(path):
            m = re.match(r"BM_%s<(\w+)>/.*threads:(\d+)" % kind, b["name"])
            if m and "items_per_second" in b:
                runs.setdefault((m.group(1), int(m.group(2))), []).append(
                    (b["items_per_second"] / 1e6, b["peak_rss_mib"], b["final_rss_mib"],
                     b.get("released_rss_mib", b["final_rss_mib"])))
    print("%s (medians of rounds, one process each): allocator threads: M ops/s, peak MiB, final MiB, "
          "after release_cached_memory MiB" % kind)
    med = {}
    for key in sorted(runs):
        v = runs[key]
        med[key] = tuple(statistics.median(x[i] for x in v) for i in range(4))
        print("  %-13s %d: %6.2f %7.1f %6.1f %6.1f   (%d rounds)" % (key[0], key[1], *med[key], len(v)))
    for t in (1, 2):
        n, g = med.get(("node_alloc", t)), med.get(("glibc_malloc", t))
        if n and g:
            print("  %d thread(s): speed %.2fx glibc, peak RSS %.2fx glibc, final %.1f MiB above start "
                  "(%.1f after release_cached_memory)" % (t, n[0] / g[0], n[1] / g[1], n[2], n[3]))


def large(out):
    times = {}
    for b in load(os.path.join(out, "large.json")):
        if b.get("aggregate_name") == "median":
            times[b["name"].split("/")[0]] = b["real_time"]
    base = times.get("BM_Large_mmap_touch")
    print("large (1 GiB allocate + parallel touch + free, median ms, ratio to plain mmap + touch)")
    for name, t in sorted(times.items()):
        print("  %-45s %7.1f  %.3f" % (name, t, t / base if base else float("nan")))


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: allocation_summary.py OUT_DIR\n")
        return 2
    large(argv[1])
    cycle(argv[1])
    mixed(argv[1], "Mixed")
    mixed(argv[1], "MixedEveryPage")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
