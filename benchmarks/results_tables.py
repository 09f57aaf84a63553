#!/usr/bin/env python3
"""Markdown tables for README.md and docs/ from the current results in docs/results/<benchmark>/.

Usage: results_tables.py workloads DIR    allocation workloads: numaplace vs glibc, the best general-purpose
                                          peer and the best NUMA-aware allocator (workloads_summary.py's
                                          parsing and medians)
       results_tables.py dgemv DIR        DGEMV: partitioned vs the read limit and OpenBLAS (plot_dgemv.py's)
       results_tables.py replace DIR      replace vs the fastest move_pages (bench_replace's Ratios counters)

Each table is followed by one line naming the run: its date and machine (DIR/COMMAND) and its data. The
tables between `<!-- results:NAME begin ... -->` and `<!-- results:NAME end -->` in the docs are this
script's output, verbatim; scripts/check-results regenerates them and fails on any difference
(`scripts/check-results --write` rewrites them after a re-run). It only formats: every number comes
from the summary scripts' own functions.
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_dgemv  # noqa: E402
import workloads_summary  # noqa: E402

# Allocators that place by node as numaplace does. A workload JSON of one of these (the name used by
# run_workloads.sh) fills the "best NUMA-aware" columns; without any, they say "—". workloads_summary.py
# may define NUMA_AWARE itself (then its list is used).
NUMA_AWARE = getattr(workloads_summary, "NUMA_AWARE",
                     ["memkind", "tbb_memory_pool", "tbb_pool", "numa_alloc_onnode", "libnuma"])
WORKLOAD_TEXT = {
    "work_buffers": "work buffers 16 KiB..4 MiB, 4 per iteration, 1500 x 2 threads",
    "vector_growth": "`vector<double>` push_back to 1 Mi, 100x",
    "map": "`std::map` insert/erase 1 Mi keys, 3x",
    "producer_consumer": "producer/consumer, cross-thread frees, 16 B..8 KiB",
    "producer_consumer_oversubscribed": "the same, 8 pairs (16 threads) on 2 cores",
    "fragmentation": "fragmentation: 2 Mi small, 90 % freed, 100k of 2..64 KiB",
    "larson": "larson-style server, 2 threads",
}
DASH = "—"


def command_info(directory):
    """The COMMAND file's `date:` and `machine:` lines."""
    info = {}
    path = os.path.join(directory, "COMMAND")
    with open(path) as f:
        for line in f:
            m = re.match(r"(\w+):\s*(.*)", line)
            if m and m.group(1) not in info:
                info[m.group(1)] = m.group(2).strip()
    for key in ("command", "date", "machine"):
        if key not in info:
            raise SystemExit("results_tables.py: %s has no '%s:' line" % (path, key))
    return info


def footer(directory, files):
    info = command_info(directory)
    rel = os.path.relpath(directory, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    return "Run of %s on %s; data: `%s/` (%s, and `COMMAND`)." % (info["date"], info["machine"], rel, files)


def workloads(directory):
    runs, warnings = workloads_summary.load(directory)[:2]
    if not runs:
        raise SystemExit("results_tables.py: no workload JSON in %s" % directory)
    order = workloads_summary.ORDER
    names = sorted({w for w, _ in runs}, key=lambda w: (order.index(w) if w in order else len(order), w))
    general = [p for p in workloads_summary.PEERS if p not in NUMA_AWARE]
    numa_aware = sorted({a for _, a in runs if a in NUMA_AWARE})
    out = ["| workload | numaplace | glibc | best peer | vs glibc | vs best peer | best NUMA-aware | "
           "vs best NUMA-aware | peak RSS vs glibc | final / after the decay / released MiB |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    files = 0
    for w in names:
        m = workloads_summary.medians(runs, w)
        files += sum(len(v) for (ww, _), v in runs.items() if ww == w)
        if "numaplace" not in m or "glibc" not in m:
            continue
        np_, gl = m["numaplace"], m["glibc"]
        peers = sorted((m[p]["time"], p) for p in general if p in m)
        best_t, best = peers[0]
        aware = sorted((m[p]["time"], p) for p in numa_aware if p in m)
        aware_cells = ["%s %.3f s" % (aware[0][1], aware[0][0]),
                       "%.2fx" % workloads_summary.ratio(aware[0][0], np_["time"])] if aware else [DASH, DASH]
        mib = lambda x: DASH if x != x else ("%.1f" % x).replace("-0.0", "0.0")  # noqa: E731 (nan: not measured)
        out.append("| %s | %.3f s | %.3f s | %s %.3f s | %.2fx | %.2fx | %s | %s | %.2fx | %s / %s / %s |" % (
            WORKLOAD_TEXT.get(w, w), np_["time"], gl["time"], best, best_t,
            workloads_summary.ratio(gl["time"], np_["time"]), workloads_summary.ratio(best_t, np_["time"]),
            aware_cells[0], aware_cells[1], workloads_summary.ratio(np_["peak"], gl["peak"]),
            mib(np_["final"]), mib(np_["decayed"]), mib(np_["released"])))
    for msg in warnings:
        sys.stderr.write("results_tables.py: warning: %s\n" % msg)
    out.append("")
    out.append(footer(directory, "%d JSON files, one process each" % files))
    return out


def only_json(directory):
    paths = sorted(glob.glob(os.path.join(directory, "*.json")))
    if len(paths) != 1:
        raise SystemExit("results_tables.py: want exactly one JSON file in %s, found %d" % (directory, len(paths)))
    with open(paths[0]) as f:
        return os.path.basename(paths[0]), json.load(f)


# The memory kinds of the DGEMV table: the partitioned kernel's row and the limit it is held against.
DGEMV_KINDS = (("small pages", "partitioned"), ("THP (MADV_HUGEPAGE)", "partitioned_hugepage"),
               ("explicit 2 MiB", "partitioned_explicit_2m"))


def dgemv(directory):
    name, doc = only_json(directory)
    data = plot_dgemv.collect(doc.get("benchmarks", []))
    out = ["| threads | pages | read limit (best probe) | partitioned | of limit | partitioned / OpenBLAS |",
           "|---|---|---|---|---|---|"]
    cv = lambda v: "cv %.1f %%" % (100 * v["cv"]) if "cv" in v else "no cv"  # noqa: E731
    blas_rows = []
    for t in sorted(data.get("read_limit", {})):
        blas = data.get("openblas", {}).get(t)
        for pages, place in DGEMV_KINDS:
            part = data.get(place, {}).get(t)
            lim = data.get(plot_dgemv.limit_of(place), {}).get(t)
            if not part:
                continue
            out.append("| %d | %s | %s | %.2f GB/s (%s) | %s | %s |" % (
                t, pages, "%.2f GB/s (%s, %s)" % (lim["GBps"], lim.get("strategy", "?"), cv(lim)) if lim else DASH,
                part["GBps"], cv(part), "%.2f" % (part["GBps"] / lim["GBps"]) if lim else DASH,
                "%.2f" % (part["GBps"] / blas["GBps"]) if blas else DASH))
        if blas:
            blas_rows.append("%d thread%s %.2f GB/s (%s)" % (t, "" if t == 1 else "s", blas["GBps"], cv(blas)))
    ctx = doc.get("context", {})
    out.append("")
    if blas_rows:
        out.append("OpenBLAS `cblas_dgemv` on the small-page matrix: %s." % ", ".join(blas_rows))
        out.append("")
    out.append(footer(directory, "`%s`, A = %s, medians of the repetitions" % (name, ctx.get("matrix", "?"))))
    return out


def replace(directory):
    name, doc = only_json(directory)
    rows = [b for b in doc.get("benchmarks", []) if "Ratios" in b.get("name", "") and "replace_ms" in b]
    if not rows:
        raise SystemExit("results_tables.py: no BM_Replace_*_Ratios in %s" % name)
    out = ["| 1 GiB of small pages already in place | time (minimum of the interleaved runs) | speed of `replace` against it |",
           "|---|---|---|"]
    for b in rows:
        variants = [("`replace` (query, then move only misplaced pages)", "replace_ms"),
                    ("raw `move_pages`, one call", "raw_move_pages_one_call_ms"),
                    ("raw `move_pages`, batches of 4096", "raw_move_pages_4096_ms"),
                    ("libnuma `numa_move_pages`", "libnuma_move_pages_ms"),
                    ("`mbind(MPOL_MF_MOVE)` (no per-page report)", "raw_mbind_mf_move_ms")]
        for text, key in variants:
            if key not in b:
                continue
            speed = DASH if key == "replace_ms" else "%.2fx" % (b[key] / b["replace_ms"])
            out.append("| %s | %.1f ms | %s |" % (text, b[key], speed))
    out.append("")
    out.append(footer(directory, "`%s`" % name))
    return out


def main(argv):
    modes = {"workloads": workloads, "dgemv": dgemv, "replace": replace}
    if len(argv) != 3 or argv[1] not in modes:
        sys.stderr.write("usage: results_tables.py {%s} DIR\n" % ",".join(sorted(modes)))
        return 2
    print("\n".join(modes[argv[1]](argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
