#!/usr/bin/env python3
"""Plot the DGEMV placement benchmark from Google Benchmark JSON.

Usage: plot_dgemv.py results.json out.png
       plot_dgemv.py --summary results.json     (text: limit, partitioned, OpenBLAS, ratios, cv)

results.json is the output of `bench_dgemv --benchmark_format=json` (or `--benchmark_out=results.json`).
Benchmarks are grouped by placement, read from the name (`BM_Dgemv_<placement>/...`): the words
read_limit, openblas, serial_init, parallel_init, interleaved, node0, partitioned. The thread count comes
from a `/threads:N` part of the name (also `threads=N`, `threads_N`), else from a `threads` user counter.
If any name contains "dgemv", other benchmarks in the file are ignored (the read limit is kept).
Used counters: `speedup`, `fraction_of_limit` and, when `fraction_of_limit` is missing, `GBps` divided by
the GBps of the row's read limit at the same thread count: read_limit (probes on small pages) for every
row but partitioned_hugepage, whose limit is read_limit_hugepage (the same probes on its MADV_HUGEPAGE
matrix: huge pages read faster, so a small-page limit is no limit for them), and partitioned_explicit_2m,
whose limit is read_limit_explicit_2m (the probes on its explicit 2 MiB pages). A probe's strategy is the
whole word after the limit's name, up to the `/` (`sum4_prefetch1k`, not `sum4`). Aggregates (mean/median/stddev of repetitions): the median
is used when present, else the plain iterations are averaged.

Writes one PNG with two panels: speedup vs threads per placement, fraction of the read limit vs threads.
"""
import json
import re
import sys
from collections import defaultdict

# Longest first so that e.g. "parallel_init" is not mistaken for something shorter.
PLACEMENTS = ["read_limit_explicit_2m", "partitioned_explicit_2m", "read_limit_hugepage", "partitioned_hugepage", "parallel_init", "serial_init", "partitioned", "interleaved", "read_limit", "openblas", "node0"]
ORDER = ["serial_init", "parallel_init", "interleaved", "node0", "partitioned", "partitioned_hugepage",
         "partitioned_explicit_2m", "openblas", "read_limit", "read_limit_hugepage", "read_limit_explicit_2m"]
LIMITS = ("read_limit", "read_limit_hugepage", "read_limit_explicit_2m")
# The limit each row is held against: the probes on the same kind of pages.
LIMIT_OF = {"partitioned_hugepage": "read_limit_hugepage", "partitioned_explicit_2m": "read_limit_explicit_2m"}


def limit_of(place):
    return LIMIT_OF.get(place, "read_limit")


STYLE = {
    "serial_init": dict(marker="o"),
    "parallel_init": dict(marker="s"),
    "interleaved": dict(marker="^"),
    "node0": dict(marker="v"),
    "partitioned": dict(marker="D"),
    "partitioned_hugepage": dict(marker="d", linestyle="-."),
    "openblas": dict(marker="x", linestyle="--"),
    "read_limit": dict(marker="+", linestyle=":", color="black"),
    "read_limit_hugepage": dict(marker="1", linestyle=":", color="grey"),
    "partitioned_explicit_2m": dict(marker="P", linestyle="-."),
    "read_limit_explicit_2m": dict(marker="2", linestyle=":", color="silver"),
}


def pyplot():
    try:
        import matplotlib
    except ImportError:  # e.g. a pyenv/venv python3 first on PATH while python3-matplotlib is the system's
        sys.exit("plot_dgemv.py: matplotlib not found; install python3-matplotlib (or pip install matplotlib), "
                 "or run it with the interpreter that has it, e.g. /usr/bin/python3 plot_dgemv.py ...")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # backend chosen first
    return plt


def placement_of(name):
    """Placement word in a benchmark name, or None. Matches whole '_'/'/'-separated words."""
    low = name.lower()
    for word in PLACEMENTS:
        if re.search(r"(^|[_/])" + re.escape(word) + r"($|[_/:])", low):
            return word
    return None


def threads_of(bench):
    """Thread count from a `/threads:N` name part, else from the `threads` field or user counter
    (a user counter named `threads` is written after Google Benchmark's own field and wins in json.load)."""
    m = re.search(r"(?:^|[/_])threads[:=_](\d+)", bench.get("name", ""))
    if m:
        return int(m.group(1))
    t = bench.get("threads")  # user counter (Google Benchmark puts counters at the top level)
    if isinstance(t, (int, float)) and t > 0:
        return int(round(t))
    return None


def number(bench, key):
    v = bench.get(key)
    return float(v) if isinstance(v, (int, float)) else None


def collect(benchmarks):
    """{placement: {threads: {counter: value}}}, preferring median aggregates over iterations.

    Read-limit probes (`BM_Dgemv_read_limit_<strategy>`, `BM_Dgemv_read_limit_hugepage_<strategy>`,
    `BM_Dgemv_read_limit_explicit_2m_<strategy>`) are merged into the limit of their kind (LIMITS): per thread count the best strategy's median GBps (its name in "strategy", its cv in "cv"). "cv" is the coefficient of
    variation of GBps over the repetitions (Google Benchmark's cv aggregate). "speedup" and
    "fraction_of_limit" are computed here from the medians of the whole run when the benchmark did not
    report them (with random interleaving the 1-thread run and the limit may come later)."""
    medians = defaultdict(lambda: defaultdict(dict))
    runs = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    # A file holding other benchmarks too (e.g. BM_Alloc_node0): keep the DGEMV ones and the read limit.
    if any("dgemv" in (b.get("run_name") or b.get("name", "")).lower() for b in benchmarks):
        benchmarks = [b for b in benchmarks
                      if "dgemv" in (b.get("run_name") or b.get("name", "")).lower()
                      or placement_of(b.get("run_name") or b.get("name", "")) in LIMITS]
    for b in benchmarks:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name") or b.get("name", "")
        place = placement_of(name)
        threads = threads_of(dict(b, name=name))
        if place is None or threads is None:
            continue
        if place in LIMITS:
            # The whole strategy name, up to the "/threads:" part: "sum4_prefetch1k" is not "sum4".
            m = re.search(place + r"_([A-Za-z0-9_]+?)(?:/|$)", name)
            place = place + ":" + (m.group(1) if m else "")
        kind = b.get("run_type", "iteration")
        agg = b.get("aggregate_name")
        for key in ("speedup", "fraction_of_limit", "GBps"):
            v = number(b, key)
            if v is None:
                continue
            if kind == "aggregate":
                if agg == "median":
                    medians[place][threads][key] = v
                elif agg == "cv" and key == "GBps":
                    medians[place][threads]["cv"] = v
            else:
                runs[place][threads][key].append(v)
    data = defaultdict(dict)
    for place in set(medians) | set(runs):
        for t in set(medians[place]) | set(runs[place]):
            vals = {k: sum(v) / len(v) for k, v in runs[place][t].items() if v}
            vals.update(medians[place][t])
            target = place
            if ":" in place:  # a probe of one of LIMITS
                target = place.split(":", 1)[0]
                best = data[target].get(t)
                if "GBps" not in vals or (best and best.get("GBps", 0) >= vals["GBps"]):
                    continue
                vals = dict(vals, strategy=place.split(":", 1)[1])
            data[target][t] = vals
    for place, per_t in data.items():
        one = per_t.get(1, {}).get("GBps")
        limit = data.get(place if place in LIMITS else limit_of(place), {})
        for t, vals in per_t.items():
            if "fraction_of_limit" not in vals and "GBps" in vals:
                ref = limit.get(t, {}).get("GBps")
                if ref:
                    vals["fraction_of_limit"] = vals["GBps"] / ref
            if "speedup" not in vals and "GBps" in vals and one:
                vals["speedup"] = vals["GBps"] / one  # same bytes per iteration at every thread count
    return data


def summary(data):
    """The comparison as text: per thread count, the limits (best probe on small pages, and on
    MADV_HUGEPAGE), every row with the limit it is held against, OpenBLAS, medians with cv, and ratios."""
    lines = []
    for t in sorted({t for place in LIMITS for t in data.get(place, {})}):
        lines.append(f"threads {t}:")
        for place in LIMITS:
            lim = data.get(place, {}).get(t)
            if lim:
                lines.append(f"  {place:20s} {lim['GBps']:7.2f} GB/s  cv {100 * lim.get('cv', float('nan')):5.1f}%  "
                             f"(best probe: {lim.get('strategy', '?')})")
        ref = data.get("openblas", {}).get(t, {}).get("GBps")
        for place in ORDER:
            if place in LIMITS or t not in data.get(place, {}):
                continue
            v = data[place][t]
            lim = data.get(limit_of(place), {}).get(t)
            if "GBps" not in v:
                continue
            text = f"  {place:20s} {v['GBps']:7.2f} GB/s  cv {100 * v.get('cv', float('nan')):5.1f}%  "
            text += f"{v['GBps'] / lim['GBps']:.3f} of {limit_of(place)}" if lim else f"no {limit_of(place)}"
            if ref and place != "openblas":
                text += f", {v['GBps'] / ref:.3f} of OpenBLAS"
            lines.append(text)
    return "\n".join(lines)


def main(argv):
    if len(argv) == 3 and argv[1] == "--summary":
        with open(argv[2]) as f:
            print(summary(collect(json.load(f).get("benchmarks", []))))
        return 0
    if len(argv) != 3:
        sys.stderr.write("usage: plot_dgemv.py results.json out.png | plot_dgemv.py --summary results.json\n")
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    data = collect(doc.get("benchmarks", []))
    if not data:
        sys.stderr.write("plot_dgemv.py: no BM_Dgemv_<placement> benchmarks with a thread count found\n")
        return 1

    plt = pyplot()
    fig, (ax_s, ax_f) = plt.subplots(1, 2, figsize=(12, 4.8))
    places = [p for p in ORDER if p in data]
    max_t = max(t for p in places for t in data[p])
    for place in places:
        ts = sorted(data[place])
        for ax, key in ((ax_s, "speedup"), (ax_f, "fraction_of_limit")):
            pts = [(t, data[place][t][key]) for t in ts if key in data[place][t]]
            if pts and not (key == "fraction_of_limit" and place in LIMITS):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=place, **STYLE.get(place, {}))
    ax_s.plot([1, max_t], [1, max_t], color="grey", linewidth=0.8, linestyle=":", label="linear")
    ax_f.axhline(1.0, color="black", linewidth=0.8, linestyle=":", label="read limit (of the same kind of pages)")

    ctx = doc.get("context", {})
    host = ctx.get("host_name", "")
    ax_s.set(title="DGEMV speedup vs 1 thread", xlabel="threads", ylabel="speedup")
    ax_f.set(title="DGEMV bandwidth / read limit (same run, same kind of pages)", xlabel="threads",
             ylabel="fraction of read limit")
    ax_f.set_ylim(bottom=0, top=max(1.1, ax_f.get_ylim()[1]))
    for ax in (ax_s, ax_f):
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize="small")
    if host:
        fig.suptitle(f"{host}: {ctx.get('num_cpus', '?')} CPUs", fontsize="medium")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
