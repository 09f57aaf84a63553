// What an observation scope costs against the DGEMV it observes (issue 32: < 1 % at the default size).
//   BM_Scope_empty           start() + stop() of a scope around nothing (every group numaplace can read here)
//   BM_Dgemv_plain           the partitioned DGEMV, A = M x N doubles (default 20000 x 20000, 3.2 GB;
//                            NUMAPLACE_DGEMV_M / NUMAPLACE_DGEMV_N), all threads
//   BM_Dgemv_scoped          the same DGEMV with a scope started and stopped around every multiplication
// Both DGEMV rows read the same matrix; repetitions are interleaved at random (5 by default), so the
// ratio median(scoped) / median(plain) - 1 and median(empty) / median(plain) are measured under the same
// load. Manual time: each iteration's own wall time. JSON: --benchmark_format=json.
#include "dgemv_placements.hpp"

#include <numaplace/observe.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace {
using numaplace::bench::placed_matrix;
using numaplace::bench::placement_kind;

std::size_t env_size(const char* name, std::size_t fallback) {
    const char* v = std::getenv(name);
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

placed_matrix& matrix() {
    static const std::unique_ptr<placed_matrix> m = std::make_unique<placed_matrix>(
        placement_kind::partitioned, env_size("NUMAPLACE_DGEMV_M", 20000), env_size("NUMAPLACE_DGEMV_N", 20000));
    return *m;
}

template <class F>
void timed(benchmark::State& state, F&& f) {
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        benchmark::ClobberMemory();
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
}

void BM_Scope_empty(benchmark::State& state) {
    numaplace::observation_scope warm; // the first scope reads the topology and probes: not what we time
    (void)warm.stop();
    timed(state, [] {
        numaplace::observation_scope scope;
        benchmark::DoNotOptimize(scope.stop());
    });
}

void BM_Dgemv_plain(benchmark::State& state) {
    auto& m = matrix();
    timed(state, [&] { m.multiply(); });
}

void BM_Dgemv_scoped(benchmark::State& state) {
    auto& m = matrix();
    timed(state, [&] {
        numaplace::observation_scope scope;
        m.multiply();
        benchmark::DoNotOptimize(scope.stop());
    });
}
} // namespace

BENCHMARK(BM_Scope_empty)->UseManualTime()->Unit(benchmark::kMicrosecond)->MinTime(0.2);
BENCHMARK(BM_Dgemv_plain)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(BM_Dgemv_scoped)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);

int main(int argc, char** argv) {
    std::vector<char*> args(argv, argv + argc);
    char interleave[] = "--benchmark_enable_random_interleaving=true";
    char repetitions[] = "--benchmark_repetitions=5";
    args.insert(args.begin() + 1, {interleave, repetitions}); // the command line's own flags come after: they win
    int count = static_cast<int>(args.size());
    args.push_back(nullptr);
    benchmark::Initialize(&count, args.data());
    if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
