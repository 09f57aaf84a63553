#!/usr/bin/env bash
# The allocation comparison as the README reports it, into one directory of Google Benchmark JSON:
#   large.json  1 GiB allocate + parallel touch + free (node/interleaved/partitioned vs plain mmap)
#   cycle.json  allocate + write first/last byte + free per size, all five allocators, interleaved
#   mixed-<Mixed|MixedEveryPage>-<allocator>-<round>.json  the mixed workload (blocks written at their
#               first and last byte, or on every page), each allocator in a process of its own: its peak and
#               final RSS are above that process's start, with nothing left by an earlier benchmark
#               (glibc keeps what an earlier run freed, which made its peak look like a few MiB)
# Then prints the ratios (node_allocator / glibc, / best peer) with benchmarks/allocation_summary.py.
# Usage: benchmarks/run_allocation.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/benchmarks/bench_allocation
mkdir -p "$out"
"$bench" --benchmark_filter='BM_Large_(mmap_touch|node_allocator|interleaved_allocator|partitioned)' \
  --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
  --benchmark_out="$out/large.json" --benchmark_out_format=json >/dev/null
"$bench" --benchmark_filter='BM_Cycle' --benchmark_repetitions=9 --benchmark_min_time=0.05 \
  --benchmark_enable_random_interleaving=true \
  --benchmark_out="$out/cycle.json" --benchmark_out_format=json >/dev/null
for a in node_alloc glibc_malloc jemalloc mimalloc tbbmalloc; do
  for round in 1 2 3; do
    for kind in Mixed MixedEveryPage; do
      "$bench" --benchmark_filter="BM_$kind<$a>" \
        --benchmark_out="$out/mixed-$kind-$a-$round.json" --benchmark_out_format=json >/dev/null
    done
  done
done
/usr/bin/python3 "$here/allocation_summary.py" "$out"
