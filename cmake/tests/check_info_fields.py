"""numaplace-info: the text report and --json hold the same fields (ctest cli.numaplace-info.json_fields).

    python3 check_info_fields.py [wrapper ...] <numaplace-info>

(e.g. `env HWLOC_COMPONENTS=-linux numaplace-info`, or in_empty_node_dir.sh numaplace-info: a wrapper
that prints "SKIP: ..." instead is passed on, and ctest reports a skip).

Runs numaplace-info twice (text, then --json), parses both and compares the key sets: every field the
text report prints (a "label: value" line, per node and per memory line too) must map to its JSON keys in
TEXT_TO_JSON below, and every JSON key must be the image of some text field. A field added to one form
only fails here with its name; add it to the other form and to the table.
"""
import json
import re
import subprocess
import sys

# text label (node numbers replaced by N) -> the JSON keys that hold the same information
# ("nodes[]." = a key of every node object; dotted = nested objects).
TEXT_TO_JSON = {
    "nodes": ["capabilities.nodes", "capabilities.system_nodes"],
    "node N (os N)": ["nodes[].id", "nodes[].os_index", "nodes[].cpus", "nodes[].cores",
                      "nodes[].memory_total_bytes"],
    "distances": ["distances", "distances_known"],
    "distances (not given by firmware; assumed)": ["distances", "distances_known"],
    "memory binding (mbind)": ["capabilities.memory_binding", "capabilities.memory_binding_errno", "capabilities.probed"],
    "page query (move_pages)": ["capabilities.page_query", "capabilities.page_query_errno"],
    "cpu binding (hwloc)": ["capabilities.cpu_binding", "capabilities.cpu_binding_errno"],
    "MPOL_PREFERRED_MANY": ["capabilities.preferred_many"],
    "MPOL_WEIGHTED_INTERLEAVE": ["capabilities.weighted_interleave"],
    "MPOL_F_NUMA_BALANCING": ["capabilities.numa_balancing_bind"],
    "transparent huge pages": ["capabilities.transparent_huge_pages"],
    # explicit huge pages (huge_pages.hpp): the sizes line stands alone when the topology is not this
    # system's (no pools read), so it carries the limits too
    "explicit huge pages": ["huge_pages.sizes", "huge_pages.pools", "huge_pages.usable", "huge_pages.memlock_limit_bytes",
                            "huge_pages.memlock_applies_to", "huge_pages.hugetlbfs_mounted"],
    "node N pools": ["huge_pages.pools[].node", "huge_pages.pools[].page_bytes", "huge_pages.pools[].total",
                     "huge_pages.pools[].free", "huge_pages.pools[].surplus"],
    "usable N MiB": ["huge_pages.usable[].page_bytes", "huge_pages.usable[].cgroup_visible",
                     "huge_pages.usable[].cgroup_limit_bytes", "huge_pages.usable[].cgroup_usage_bytes"],
    "usable N GiB": ["huge_pages.usable[].page_bytes", "huge_pages.usable[].cgroup_visible",
                     "huge_pages.usable[].cgroup_limit_bytes", "huge_pages.usable[].cgroup_usage_bytes"],
    "RLIMIT_MEMLOCK": ["huge_pages.memlock_limit_bytes", "huge_pages.memlock_applies_to", "huge_pages.hugetlbfs_mounted"],
    "kernel.numa_balancing": ["capabilities.numa_balancing"],
    "memory attributes (HMAT)": ["capabilities.memory_attributes"],
    "memory tiers from node N": ["memory_tiers[].initiator", "memory_tiers[].ranked_by", "memory_tiers[].tiers[].nodes",
                                 "memory_tiers[].tiers", "memory_tiers[].tiers[].rank",
                                 "memory_tiers[].tiers[].bandwidth", "memory_tiers[].tiers[].latency",
                                 "memory_tiers[].unknown"],
    "degradations so far": ["degradations.count", "degradations.messages"],
    "observation numastat": ["observation.numastat.available", "observation.numastat.system_wide", "observation.numastat.errno",
                         "observation.numastat.reason"],
    "observation vmstat": ["observation.vmstat.available", "observation.vmstat.system_wide", "observation.vmstat.errno",
                         "observation.vmstat.reason"],
    "observation software": ["observation.software.available", "observation.software.system_wide", "observation.software.errno",
                         "observation.software.reason"],
    "observation node_access": ["observation.node_access.available", "observation.node_access.system_wide", "observation.node_access.errno",
                         "observation.node_access.reason"],
    "topology readable": ["capabilities.topology_readable", "capabilities.topology_backend"],
    "heap shards per node": ["heap.shards", "heap.shards_limit", "heap.shards_chosen", "heap.thread_caches",
                             "heap.cpus", "heap.shards_reason"],
    "memory per node (numactl -H)": [],
    "node N size": ["nodes[].memory_total_bytes", "nodes[].memory_free_bytes"],
    "oneTBB interface version": ["tbb.interface_version"],
    "oneTBB library": ["tbb.library"],
    "tbbbind loaded": ["tbb.tbbbind_loaded", "tbb.tbbbind_library"],
    "oneTBB numa nodes": ["tbb.numa_nodes"],
    "arena pinning": ["tbb.pinning", "tbb.pinning_reason"],
    "process binding": ["binding.cpus", "binding.nodes", "binding.weights", "binding.whole", "binding.rebound"],
}


def text_fields(text):
    """The labels of the text report: 'label: value' lines; distance rows and degradation items are values."""
    labels = set()
    for line in text.splitlines():
        if not line.strip() or re.match(r"^\s+(\d+:|-\s|\d+(\s+\d+)*$)", line):
            continue  # a distance row or header, a degradation message
        m = re.match(r"^\s*([^:]+?):(\s|$)", line)
        if not m:
            sys.exit(f"unparsable text line: {line!r}")
        labels.add(re.sub(r"\d+", "N", m.group(1)))
    return labels


def json_keys(value, prefix=""):
    """Every key path of the JSON object: objects nested with '.', lists of objects as '[]'."""
    keys = set()
    if isinstance(value, dict):
        for k, v in value.items():
            path = prefix + k
            if isinstance(v, dict):
                keys |= json_keys(v, path + ".")
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                for x in v:
                    keys |= json_keys(x, path + "[].")
            else:
                keys.add(path)
    return keys


def main():
    command = sys.argv[1:]
    text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    if text.startswith("SKIP: "):
        print(text.strip())
        return
    report = json.loads(subprocess.run(command + ["--json"], check=True, capture_output=True, text=True).stdout)
    labels = text_fields(text)
    keys = json_keys(report)
    problems = []
    for label in sorted(labels - TEXT_TO_JSON.keys()):
        problems.append(f"text field {label!r} has no JSON counterpart in this table (add it to --json and here)")
    mapped = set()
    for label in labels & TEXT_TO_JSON.keys():
        for key in TEXT_TO_JSON[label]:
            mapped.add(key)
            if key not in keys and not any(k.startswith(key + "[].") for k in keys):  # a list empty here, of objects there
                problems.append(f"text field {label!r} is missing from --json: no key {key!r}")
    for key in sorted(keys - mapped):
        problems.append(f"JSON key {key!r} is not shown by the text report (or not in this table)")
    if problems:
        sys.exit("\n".join(problems) + f"\ntext labels: {sorted(labels)}\nJSON keys: {sorted(keys)}")
    print(f"{len(labels)} text fields, {len(keys)} JSON keys: the same information")


if __name__ == "__main__":
    main()
