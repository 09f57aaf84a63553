#!/usr/bin/env bash
# Builds main.cpp with nothing but pkg-config (PKG_CONFIG_PATH pointing at the installed numaplace.pc)
# and runs it. Usage: build-with-pkg-config.sh OUTDIR
set -euo pipefail
out=${1:?output directory}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC2046
c++ -O2 "$here/main.cpp" -o "$out/consumer-pc" $(pkg-config --cflags --libs numaplace)
"$out/consumer-pc"
