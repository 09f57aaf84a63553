#!/usr/bin/env bash
# The program-shaped workloads of issue 20 (benchmarks/workloads.cpp) for eight allocators, each run in a
# process of its own, in interleaved rounds, into one directory of Google Benchmark JSON:
#   <workload>-<allocator>-<round>.json   (a run past WORKLOADS_TIMEOUT_S: <workload>-<allocator>-<round>.timeout)
# allocators: glibc (the std family, no preload), jemalloc, mimalloc, tbbmalloc (the std family with the
# allocator in LD_PRELOAD), numaplace (the numaplace family: node_allocator<T>(0), no preload), and the
# NUMA-aware ones bound to node 0 (issue 33): memkind, tbb_pool, libnuma (benchmarks/numa_aware_allocators.hpp).
# Then prints the tables and the issue's targets with benchmarks/workloads_summary.py.
# Usage: benchmarks/run_workloads.sh BUILD_DIR OUT_DIR [--quick]
# Environment: WORKLOADS_SCALE (counts x scale; --quick = 0.1; a smoke run, not a measurement),
#   WORKLOADS_ROUNDS (3), WORKLOADS (workloads to run, space-separated; default all),
#   WORKLOADS_ALLOCATORS (default "glibc jemalloc mimalloc tbbmalloc memkind tbb_pool libnuma numaplace"),
#   WORKLOADS_TIMEOUT_S (a run's limit, default 120: libnuma maps every block and takes minutes),
#   WORKLOADS_DECAY_MS (sleep after freeing, then measure decayed_rss_mib; default 1500: numaplace's
#   decay is 1 s, run by background_release), WORKLOADS_LIBDIR.
set -euo pipefail
build=${1:?usage: run_workloads.sh BUILD_DIR OUT_DIR [--quick]}
out=${2:?usage: run_workloads.sh BUILD_DIR OUT_DIR [--quick]}
if [[ ${3:-} == --quick ]]; then export WORKLOADS_SCALE=${WORKLOADS_SCALE:-0.1}; fi
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/benchmarks/bench_workloads
libdir=${WORKLOADS_LIBDIR:-/usr/lib/x86_64-linux-gnu}
rounds=${WORKLOADS_ROUNDS:-3}
export WORKLOADS_DECAY_MS=${WORKLOADS_DECAY_MS:-1500}
read -r -a workloads <<<"${WORKLOADS:-work_buffers vector_growth map producer_consumer producer_consumer_oversubscribed fragmentation larson}"
read -r -a allocators <<<"${WORKLOADS_ALLOCATORS:-glibc jemalloc mimalloc tbbmalloc memkind tbb_pool libnuma numaplace}"
limit=${WORKLOADS_TIMEOUT_S:-120}
[[ -x $bench ]] || { echo "no $bench (ninja -C $build bench_workloads)" >&2; exit 1; }
mkdir -p "$out"

preload_of() {
  case $1 in
    jemalloc) echo "$libdir/libjemalloc.so.2" ;;
    mimalloc) echo "$libdir/libmimalloc.so.2" ;;
    tbbmalloc) echo "$libdir/libtbbmalloc_proxy.so.2" ;;
    *) echo "" ;;
  esac
}
family_of() { case $1 in numaplace | memkind | tbb_pool | libnuma) echo "$1" ;; *) echo std ;; esac; }

n=${#allocators[@]}
for w in "${workloads[@]}"; do
  for ((round = 1; round <= rounds; ++round)); do
    for ((i = 0; i < n; ++i)); do
      a=${allocators[$(((i + round - 1) % n))]} # the order rotates from round to round
      pre=$(preload_of "$a")
      if [[ -n $pre && ! -e $pre ]]; then
        echo "skip $a: no $pre" >&2
        continue
      fi
      json=$out/$w-$a-$round.json
      t0=$(date +%s%N)
      log=$out/$w-$a-$round.log # the console output, kept; shown if the run fails
      rc=0
      env ${pre:+LD_PRELOAD=$pre} timeout "$limit" "$bench" --benchmark_filter="^$w/$(family_of "$a")/" \
        --benchmark_out="$json" --benchmark_out_format=json >"$log" 2>&1 || rc=$?
      if [[ $rc -eq 124 ]]; then
        echo "$limit" >"$out/$w-$a-$round.timeout"
        rm -f "$json"
        echo "TIMED OUT after $limit s: $w $a round $round" >&2
        continue
      fi
      if [[ $rc -ne 0 ]]; then
        cat "$log" >&2
        echo "FAILED: $w $a round $round" >&2
        continue
      fi
      ms=$((($(date +%s%N) - t0) / 1000000))
      printf '%-34s %-10s round %d  %d.%03d s\n' "$w" "$a" "$round" $((ms / 1000)) $((ms % 1000)) >&2
    done
  done
done
/usr/bin/python3 "$here/workloads_summary.py" "$out"
