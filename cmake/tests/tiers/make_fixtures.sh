#!/bin/sh
# Writes the HMAT fixtures of cli.numaplace-info.tiers_* (hwloc 2.9's lstopo and hwloc-annotate): four
# nodes with one CPU each, memory attributes from the CPUs of nodes 0 and 1 only (an initiator is a
# cpuset, as Linux gives hwloc the HMAT's). Each line: node, attribute, initiator cpuset, value.
#   cmake/tests/tiers/make_fixtures.sh cmake/tests/tiers
set -eu
out=$1
base=$(mktemp)
trap 'rm -f "$base"' EXIT
lstopo-no-graphics --input "numa:4 core:1 pu:1" -f --of xml "$base"
make() { # make <file> <node attribute initiator value>...
    file=$out/$1
    shift
    cp "$base" "$file"
    while [ $# -ge 4 ]; do
        hwloc-annotate "$file" "$file" "NUMANode:$1" memattr "$2" "$3" "$4"
        shift 4
    done
}
# both: from node 0 nodes 1 and 2 share a bandwidth but not a latency, node 3 has a latency only; from
# node 1 node 1 has a bandwidth only; nodes 2 and 3 initiate nothing.
make both.xml 0 Bandwidth 0x1 102400  1 Bandwidth 0x1 51200  2 Bandwidth 0x1 51200 \
              0 Latency 0x1 100  1 Latency 0x1 150  2 Latency 0x1 200  3 Latency 0x1 300 \
              1 Bandwidth 0x2 102400  0 Bandwidth 0x2 51200  0 Latency 0x2 150
# latency only: nodes 1 and 2 at one latency, node 3 none
make latency_only.xml 0 Latency 0x1 100  1 Latency 0x1 150  2 Latency 0x1 150  1 Latency 0x2 90
# bandwidth only: nodes 1 and 2 at one bandwidth, node 3 none
make bandwidth_only.xml 0 Bandwidth 0x1 102400  1 Bandwidth 0x1 51200  2 Bandwidth 0x1 51200  1 Bandwidth 0x2 80000
