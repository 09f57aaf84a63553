"""numaplace-info on an HMAT fixture: every node's bandwidth and latency from every initiator, in the text
report and in --json, exactly as the fixture gives them (ctest cli.numaplace-info.tiers_*).

    python3 check_tiers.py <fixture.xml> <numaplace-info>

The oracle is the fixture itself (hwloc XML: <memattr> values by target node and initiator cpuset), not
numaplace: a node shown with another node's latency, or a value dropped, fails naming both.
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET


def expected(path):
    """{initiator node id: {node id: (bandwidth or None, latency or None)}} for nodes with CPUs."""
    root = ET.parse(path).getroot()
    numa = [o for o in root.iter("object") if o.get("type") == "NUMANode"]
    node_of_gp = {o.get("gp_index"): i for i, o in enumerate(numa)}
    node_of_cpuset = {int(o.get("cpuset"), 16): i for i, o in enumerate(numa) if int(o.get("cpuset"), 16)}
    table = {i: {k: [None, None] for k in range(len(numa))} for i in node_of_cpuset.values()}
    for attr in root.iter("memattr"):
        slot = {"Bandwidth": 0, "Latency": 1}.get(attr.get("name"))
        if slot is None:
            continue
        for v in attr.iter("memattr_value"):
            initiator = node_of_cpuset[int(v.get("initiator_cpuset"), 16)]
            table[initiator][node_of_gp[v.get("target_obj_gp_index")]][slot] = int(v.get("value"))
    return {i: {k: tuple(v) for k, v in row.items()} for i, row in table.items()}




def parse_text_line(line):
    """{node: (bandwidth, latency)} of one 'memory tiers from node N: ...' line; checks its grammar."""
    row = r"nodes(?: \d+)+ \((?:\d+ MiB/s|bandwidth unknown), (?:\d+ ns|latency unknown)\)"
    rows = rf"{row}(?:(?:, | > ){row})*"
    grammar = rf"(?:{rows}|none)(?:; no (?:bandwidth|latency): {row}(?:, {row})*)?(?:; unknown:(?: \d+)+)?"
    m = re.fullmatch(r"memory tiers from node (\d+): (.*)", line)
    assert m and re.fullmatch(grammar, m.group(2)), f"not the report's grammar: {line!r}"
    got = {}
    for ids, bw, lat in re.findall(r"nodes((?: \d+)+) \((\d+ MiB/s|bandwidth unknown), (\d+ ns|latency unknown)\)", m.group(2)):
        for k in ids.split():
            assert int(k) not in got, f"node {k} twice: {line!r}"
            got[int(k)] = (int(bw.split()[0]) if bw[0].isdigit() else None, int(lat.split()[0]) if lat[0].isdigit() else None)
    u = re.search(r"; unknown:((?: \d+)+)$", m.group(2))
    for k in (u.group(1).split() if u else []):
        assert int(k) not in got, f"node {k} twice: {line!r}"
        got[int(k)] = (None, None)
    return int(m.group(1)), got


def main():
    fixture, command = sys.argv[1], sys.argv[2:]
    env = dict(os.environ, HWLOC_XMLFILE=fixture)
    want = expected(fixture)
    text = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    assert re.search(r"memory attributes \(HMAT\): +yes", text), text
    lines = [l for l in text.splitlines() if l.startswith("memory tiers from node")]
    shown = dict(parse_text_line(l) for l in lines)
    assert shown == want, f"text: {shown}\nfixture: {want}"

    report = json.loads(subprocess.run(command + ["--json"], check=True, capture_output=True, text=True, env=env).stdout)
    shown = {}
    for entry in report["memory_tiers"]:
        got = {}
        ranked_by = entry["ranked_by"]
        last = None
        for row in entry["tiers"]:
            for k in row["nodes"]:
                assert k not in got, f"node {k} twice: {entry}"
                got[k] = (row["bandwidth"], row["latency"])
            if ranked_by is not None and row["rank"] is not None:  # ranks ascending, one value per rank, best first
                key = row[ranked_by]
                if last is not None:
                    assert (row["rank"], key) == last or (row["rank"] == last[0] + 1 and
                            (key < last[1] if ranked_by == "bandwidth" else key > last[1])), entry
                last = (row["rank"], key)
        for k in entry["unknown"]:
            assert k not in got, f"node {k} twice: {entry}"
            got[k] = (None, None)
        shown[entry["initiator"]] = got
    assert shown == want, f"--json: {shown}\nfixture: {want}"
    print(f"{len(want)} initiators: every node's bandwidth and latency as the fixture gives them, text and --json")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"FAILED: {e}")
