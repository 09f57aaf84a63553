// DGEMV c = A*b for each placement at 1..all threads, beside the read-bandwidth probe (the limit) and
// OpenBLAS cblas_dgemv on the same matrix, all in one run. A is M x N doubles (default 20000 x 20000,
// 3.2 GB); override with NUMAPLACE_DGEMV_M / NUMAPLACE_DGEMV_N.
//
// Names: BM_Dgemv_<read_limit|openblas|partitioned|serial_init|parallel_init|interleaved|node0>/threads:T
// Counters: GBps, GFLOPs, fraction_of_limit (GB/s over the probe's at the same thread count, this run),
// locality (pages on the node of the thread that computes them, from where()), speedup (over 1 thread,
// same placement, this run); locality_before (before the timed iterations) and the kernel's NUMA balancing
// counters over them (numa_pages_migrated, numa_hint_faults, numa_hint_faults_local from /proc/vmstat,
// system-wide; 0 unless kernel.numa_balancing is on). One matrix lives at a time (registration is grouped by placement).
// Plot: benchmarks/plot_dgemv.py results.json out.png
#include "dgemv_placements.hpp"

#include <numaplace/balancing.hpp>

#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#ifdef NUMAPLACE_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {
using numaplace::bench::placed_matrix;
using numaplace::bench::placement_kind;

std::size_t env_size(const char* name, std::size_t fallback) {
    const char* v = std::getenv(name);
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}
const std::size_t M = env_size("NUMAPLACE_DGEMV_M", 20000);
const std::size_t N = env_size("NUMAPLACE_DGEMV_N", 20000);

// The one live matrix: replaced when a benchmark of another placement starts.
placed_matrix& matrix(placement_kind kind) {
    static std::unique_ptr<placed_matrix> current;
    if (!current || current->kind() != kind) {
        current.reset();
        current = std::make_unique<placed_matrix>(kind, M, N);
    }
    return *current;
}

std::map<int, double>& limit_gbps() { static std::map<int, double> m; return m; } // threads -> GB/s
std::map<std::string, double>& one_thread_seconds() { static std::map<std::string, double> m; return m; }

void finish(benchmark::State& state, const std::string& key, int threads, double seconds, std::size_t bytes,
            double locality) {
    const double per_iter = seconds / static_cast<double>(state.iterations());
    const double gbps = static_cast<double>(bytes) / per_iter / 1e9;
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
    state.counters["threads"] = threads;
    state.counters["GBps"] = gbps;
    state.counters["GFLOPs"] = 2.0 * static_cast<double>(M) * static_cast<double>(N) / per_iter / 1e9;
    if (limit_gbps().count(threads)) state.counters["fraction_of_limit"] = gbps / limit_gbps()[threads];
    if (threads == 1) one_thread_seconds()[key] = per_iter;
    if (one_thread_seconds().count(key)) state.counters["speedup"] = one_thread_seconds()[key] / per_iter;
    if (locality >= 0) state.counters["locality"] = locality;
}

double elapsed(const std::chrono::steady_clock::time_point& t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times each iteration of f (manual time), \returns the total seconds.
template <class F>
double timed(benchmark::State& state, F&& f) {
    double seconds = 0;
    for (auto _ : state) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        benchmark::ClobberMemory();
        const double dt = elapsed(t0);
        state.SetIterationTime(dt);
        seconds += dt;
    }
    return seconds;
}

void BM_Dgemv_read_limit(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    auto& m = matrix(placement_kind::partitioned);
    const double seconds = timed(state, [&] { benchmark::DoNotOptimize(m.read_all()); });
    const double gbps = static_cast<double>(m.bytes()) / (seconds / static_cast<double>(state.iterations())) / 1e9;
    if (gbps > limit_gbps()[threads]) limit_gbps()[threads] = gbps; // best of the repetitions
    finish(state, "read_limit", threads, seconds, m.bytes(), -1);
}

void run_placement(benchmark::State& state, placement_kind kind) {
    const int threads = static_cast<int>(state.range(0));
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    auto& m = matrix(kind);
    m.multiply();
    if (!m.check()) {
        state.SkipWithError("wrong result");
        return;
    }
    const double locality_before = m.locality();
    const auto balancing_before = numaplace::balancing_counters::read();
    const double seconds = timed(state, [&] { m.multiply(); });
    const auto bal = numaplace::balancing_counters::read().since(balancing_before);
    finish(state, numaplace::bench::name(kind), threads, seconds, m.bytes(), m.locality());
    state.counters["locality_before"] = locality_before;
    state.counters["numa_pages_migrated"] = static_cast<double>(bal.pages_migrated);
    state.counters["numa_hint_faults"] = static_cast<double>(bal.hint_faults);
    state.counters["numa_hint_faults_local"] = static_cast<double>(bal.hint_faults_local);
}

#ifdef NUMAPLACE_HAVE_OPENBLAS
void BM_Dgemv_openblas(benchmark::State& state) {
    const int threads = static_cast<int>(state.range(0));
    openblas_set_num_threads(threads);
    auto& m = matrix(placement_kind::partitioned);
    const auto n = static_cast<blasint>(N), rows = static_cast<blasint>(M);
    auto gemv = [&] { cblas_dgemv(CblasRowMajor, CblasNoTrans, rows, n, 1.0, m.a(), n, m.x(), 1, 0.0, m.y(), 1); };
    gemv();
    if (!m.check()) {
        state.SkipWithError("wrong result from cblas_dgemv");
        return;
    }
    const double seconds = timed(state, gemv);
    finish(state, "openblas", threads, seconds, m.bytes(), -1);
}
#endif

void register_all() {
    const int all = tbb::info::default_concurrency();
    auto threads = [all](benchmark::internal::Benchmark* b) {
        for (int t = 1; t <= all; ++t) b->Arg(t);
        b->ArgName("threads")->Unit(benchmark::kMillisecond)->UseManualTime()->Repetitions(5)->Iterations(3);
    };
    // The probe and OpenBLAS read the partitioned matrix: the same data as our kernel on it.
    threads(benchmark::RegisterBenchmark("BM_Dgemv_read_limit", BM_Dgemv_read_limit));
#ifdef NUMAPLACE_HAVE_OPENBLAS
    threads(benchmark::RegisterBenchmark("BM_Dgemv_openblas", BM_Dgemv_openblas));
#endif
    for (placement_kind kind : {placement_kind::partitioned, placement_kind::serial_init, placement_kind::parallel_init,
                                placement_kind::interleaved, placement_kind::node0})
        threads(benchmark::RegisterBenchmark((std::string("BM_Dgemv_") + numaplace::bench::name(kind)).c_str(),
                                             [kind](benchmark::State& s) { run_placement(s, kind); }));
}
} // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("matrix", std::to_string(M) + "x" + std::to_string(N) + " doubles");
    benchmark::AddCustomContext("numa_nodes", std::to_string(numaplace::topology::get().size()));
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
