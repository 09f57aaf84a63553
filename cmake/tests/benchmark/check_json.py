#!/usr/bin/env python3
"""Checks the Google Benchmark JSON of docs/guide.md's placement example (compare_placements).

  check_json.py [--nodes N] results.json

Asserts, for the benchmark run of each placement (names my_kernel/placement:<p>):
- exactly the six placements node_local, interleaved, serial_first_touch, partitioned,
  partitioned_huge, preferred_node0 ran, none with an error;
- the locality counters: `locality` in [0, 1], `pages.node<k>` for k in [0, N), `pages.untouched` 0
  (the initialisation wrote every page), and the pages per node add up to the same total everywhere;
- every observation group is either measured (its counters are there: numastat.local_node,
  cpu_migrations, ...) or named in the label "unmeasured: <group> (<reason>)", never both, so an
  unmeasured counter is never reported as 0; node_access counters appear only with it not in the label;
- N = 1 (the host): every locality is 1. N >= 2 (a guest): serial_first_touch < 1, partitioned and
  partitioned_huge exactly 1, node_local has every page on node 0.
Exit 0 and one line per placement when all hold; 1 and what failed otherwise.
"""
import json
import sys

PLACEMENTS = ["node_local", "interleaved", "serial_first_touch", "partitioned", "partitioned_huge", "preferred_node0"]
PREFIXES = {"numastat": ("numastat.",), "vmstat": ("vmstat.",),
            "software": ("cpu_migrations", "page_faults", "context_switches"),
            "node_access": ("node_access.", "rma_lma")}


def main(argv):
    nodes = 1
    args = argv[1:]
    if len(args) == 3 and args[0] == "--nodes":
        nodes = int(args[1])
        args = args[2:]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2])
        return 2
    with open(args[0]) as f:
        doc = json.load(f)
    runs = {b["name"]: b for b in doc["benchmarks"] if b.get("run_type", "iteration") == "iteration"}
    failures = []
    totals = set()
    for p in PLACEMENTS:
        name = "my_kernel/placement:" + p
        b = runs.get(name)
        if b is None:
            failures.append(f"{name}: not in the JSON (have {sorted(runs)})")
            continue
        if b.get("error_occurred"):
            failures.append(f"{name}: error {b.get('error_message')}")
            continue
        loc = b.get("locality")
        pages = [b.get(f"pages.node{k}") for k in range(nodes)]
        if loc is None or any(v is None for v in pages) or b.get("pages.untouched") is None:
            failures.append(f"{name}: locality counters missing: {sorted(k for k in b if '.' in k or k == 'locality')}")
            continue
        if not 0.0 <= loc <= 1.0:
            failures.append(f"{name}: locality {loc} outside [0, 1]")
        if b["pages.untouched"] != 0:
            failures.append(f"{name}: {b['pages.untouched']} pages untouched after the initialisation")
        totals.add(sum(pages))
        label = b.get("label", "")
        for group, prefixes in PREFIXES.items():
            present = [k for k in b if k.startswith(prefixes)]
            unmeasured = (group + " (") in label
            if unmeasured and present:
                failures.append(f"{name}: {group} unmeasured (label '{label}') but counters {present} are there")
            if not unmeasured and not present and group in ("numastat", "software"):
                failures.append(f"{name}: {group} neither measured nor said unmeasured in the label '{label}'")
        if nodes == 1 and loc != 1.0:
            failures.append(f"{name}: locality {loc} on one node (want 1)")
        if nodes >= 2:
            if p == "serial_first_touch" and not loc < 1.0:
                failures.append(f"{name}: locality {loc} (want < 1: every page on the first toucher's node)")
            if p in ("partitioned", "partitioned_huge") and loc != 1.0:
                failures.append(f"{name}: locality {loc} (want exactly 1)")
            if p == "node_local" and pages[0] != sum(pages):
                failures.append(f"{name}: pages per node {pages} (want all on node 0)")
        print(f"{name}: locality {loc:.3f}, pages per node {pages}, label '{label}'")
    if len(totals) > 1:
        failures.append(f"the placements hold different page totals: {sorted(totals)}")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
