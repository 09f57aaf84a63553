#!/bin/sh
# Runs a command with /sys/devices/system/node replaced by an empty directory, in a private mount
# namespace (a container hiding the node directory; hwloc 2.9's Linux discovery asserts on it).
# Where that cannot be done (not root, no unshare, no mount) it prints "SKIP: <why>" and exits 0:
# the ctest that uses it is then reported as skipped (SKIP_REGULAR_EXPRESSION).
#   in_empty_node_dir.sh command [args...]
command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare here"; exit 0; }
unshare -m true 2>/dev/null || { echo "SKIP: unshare -m refused (needs root)"; exit 0; }
exec unshare -m sh -c '
  mount -t tmpfs numaplace-empty-node-dir /sys/devices/system/node 2>/dev/null ||
    { echo "SKIP: cannot mount a tmpfs over /sys/devices/system/node"; exit 0; }
  exec "$@"' sh "$@"
