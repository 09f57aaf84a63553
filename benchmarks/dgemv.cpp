// DGEMV c = A*b for each placement at 1..all threads, beside the read limit and OpenBLAS cblas_dgemv on
// the same matrix, all in one run. A is M x N doubles (default 20000 x 20000, 3.2 GB); override with
// NUMAPLACE_DGEMV_M / NUMAPLACE_DGEMV_N.
//
// Method: every benchmark is repeated (5 by default) and the repetitions of all benchmarks are run in
// random order (--benchmark_enable_random_interleaving, on by default here), so slow phases of a shared
// machine hit every kernel alike; Google Benchmark then reports mean, median, stddev and cv (coefficient
// of variation) per benchmark. The read limit is the best, per thread count, of several read
// strategies measured in the same run (1/2/4/8 interleaved streams, integer XOR, software prefetch,
// rows read 2/4/8 at a time as the kernel reads them, AVX2 where compiled in; dgemv_kernel.hpp,
// namespace probe), so no kernel should beat it. Ratios need the
// whole run: `plot_dgemv.py --summary results.json` prints each row / its limit / OpenBLAS with their cv.
//
// Two limits, one per kind of memory (huge pages read faster: fewer TLB misses), each row held against
// the one measured on its own kind of pages:
//   read_limit           BM_Dgemv_read_limit_<strategy>, on the partitioned matrix in small pages
//                        (MADV_NOHUGEPAGE): the limit of openblas, partitioned, serial_init,
//                        parallel_init, interleaved and node0, all in small pages.
//   read_limit_hugepage  BM_Dgemv_read_limit_hugepage_<strategy>, on the partitioned matrix with
//                        MADV_HUGEPAGE: the limit of partitioned_hugepage.
//   read_limit_explicit_2m  BM_Dgemv_read_limit_explicit_2m_<strategy>, on the partitioned matrix on
//                        explicit 2 MiB pages (hugetlb, each block from its node's pool): the limit of
//                        partitioned_explicit_2m. Both only where the pools hold A (else the reason is
//                        printed and in the JSON context "explicit_2m"; docs/huge-pages.md).
// The counters huge_pages (the fraction of A in transparent huge pages, AnonHugePages of /proc/self/smaps)
// and explicit_2m_pages (the fraction on explicit 2 MiB pages, KernelPageSize) show what each row got.
//
// Names: BM_Dgemv_<read_limit_<strategy>|read_limit_hugepage_<strategy>|openblas|partitioned|
//                  partitioned_hugepage|serial_init|parallel_init|interleaved|node0>/threads:T
// Counters: GBps, GFLOPs, huge_pages; from numaplace's Google Benchmark face (numaplace/benchmark.hpp):
// locality and pages.node<k> (where() against the rows partition), and the observation of the timed
// iterations per iteration (numastat.*, vmstat.* with the NUMA balancing counters, cpu_migrations,
// page_faults, context_switches, node_access.* and rma_lma: only the groups measured, the others named
// with their reason in the label); locality_threads (pages on the node of the thread that computes them)
// and locality_before (the same before the timed iterations).
// The matrix of the partitioned placement (read by the probes, OpenBLAS and our kernel) lives for the
// whole run, and so does its MADV_HUGEPAGE twin (the huge-page probes and kernel); the other placements
// share a third slot, rebuilt when another placement runs.
// Quick comparison: --benchmark_filter='read_limit|openblas|partitioned'.
// Plot: benchmarks/plot_dgemv.py results.json out.png
#include "dgemv_placements.hpp"

#include <numaplace/benchmark.hpp>

#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#ifdef NUMAPLACE_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace {
using numaplace::bench::page_kind;
using numaplace::bench::placed_matrix;
using numaplace::bench::placement_kind;

std::size_t env_size(const char* name, std::size_t fallback) {
    const char* v = std::getenv(name);
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}
const std::size_t M = env_size("NUMAPLACE_DGEMV_M", 20000);
const std::size_t N = env_size("NUMAPLACE_DGEMV_N", 20000);

// The partitioned matrix in small pages (shared by the small-page probes, OpenBLAS and our kernel) lives
// for the whole run; so does its MADV_HUGEPAGE twin (the huge-page probes and kernel) once used; the
// other placements, all in small pages, share one more slot, replaced when a benchmark of another
// placement starts.
placed_matrix& matrix(placement_kind kind, page_kind pages = page_kind::small) {
    static std::unique_ptr<placed_matrix> partitioned, partitioned_huge, partitioned_explicit, other;
    auto& slot = kind == placement_kind::partitioned_explicit_2m ? partitioned_explicit
                 : kind != placement_kind::partitioned          ? other
                 : pages == page_kind::huge                     ? partitioned_huge
                                                                : partitioned;
    if (!slot || slot->kind() != kind) {
        slot.reset();
        slot = std::make_unique<placed_matrix>(kind, M, N, pages);
    }
    return *slot;
}

// The fraction of [p, p + bytes) in transparent huge pages: AnonHugePages of the mappings that overlap it
// (/proc/self/smaps; A has mappings of its own), over its size. Which memory a row really ran on.
double huge_page_fraction(const void* p, std::size_t bytes) {
    const auto begin = reinterpret_cast<std::uintptr_t>(p), end = begin + bytes;
    std::ifstream in("/proc/self/smaps");
    std::size_t huge_kb = 0;
    bool inside = false;
    for (std::string line; std::getline(in, line);) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
            inside = lo < end && begin < hi;
            continue;
        }
        if (inside && line.rfind("AnonHugePages:", 0) == 0) huge_kb += std::strtoull(line.c_str() + 14, nullptr, 10);
    }
    return bytes ? std::min(1.0, static_cast<double>(huge_kb) * 1024.0 / static_cast<double>(bytes)) : 0.0;
}

void finish(benchmark::State& state, int threads, double seconds, const placed_matrix& m, double locality) {
    const std::size_t bytes = m.bytes();
    const double per_iter = seconds / static_cast<double>(state.iterations());
    state.counters["huge_pages"] = huge_page_fraction(m.a(), bytes);
    // explicit huge pages (hugetlb) are not AnonHugePages: the fraction of A on 2 MiB explicit pages
    state.counters["explicit_2m_pages"] =
        static_cast<double>(numaplace::where_page_sizes(m.a(), bytes).bytes_on(std::size_t(2) << 20)) / static_cast<double>(bytes);
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
    state.counters["threads"] = threads;
    state.counters["GBps"] = static_cast<double>(bytes) / per_iter / 1e9;
    state.counters["GFLOPs"] = 2.0 * static_cast<double>(M) * static_cast<double>(N) / per_iter / 1e9;
    if (locality >= 0) state.counters["locality_threads"] = locality;
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

// A read probe on the partitioned matrix in `pages`: the limit of the rows in the same kind of pages.
void BM_Dgemv_read_limit(benchmark::State& state, const numaplace::bench::probe::strategy& how, page_kind pages,
                         placement_kind kind = placement_kind::partitioned) {
    const int threads = static_cast<int>(state.range(0));
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    auto& m = matrix(kind, pages);
    const double seconds = timed(state, [&] { benchmark::DoNotOptimize(m.read_all(how.read)); });
    finish(state, threads, seconds, m, -1);
}

void run_placement(benchmark::State& state, placement_kind kind, page_kind pages = page_kind::small) {
    const int threads = static_cast<int>(state.range(0));
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    auto& m = matrix(kind, pages);
    m.multiply();
    if (!m.check()) {
        state.SkipWithError("wrong result");
        return;
    }
    const double locality_before = m.locality();
    numaplace::observation_scope scope;
    const double seconds = timed(state, [&] { m.multiply(); });
    numaplace::add_observation_counters(state, scope.stop());
    numaplace::add_locality_counters(state, m.a(), m.row_partition());
    finish(state, threads, seconds, m, m.locality());
    state.counters["locality_before"] = locality_before;
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
    finish(state, threads, seconds, m, -1);
}
#endif

// Why the pools cannot hold A on explicit 2 MiB pages here (empty: they can).
std::string explicit_2m_unavailable() {
    const auto rows = numaplace::partition<double>::rows(M, N);
    const std::string why = numaplace::bench::compared(placement_kind::partitioned_explicit_2m).unavailable(rows);
    return why.empty() ? why : why + " (reserve them: /sys/devices/system/node/node<k>/hugepages/hugepages-2048kB/nr_hugepages)";
}

void register_all() {
    const int all = tbb::info::default_concurrency();
    auto threads = [all](benchmark::internal::Benchmark* b) {
        for (int t = 1; t <= all; ++t) b->Arg(t);
        b->ArgName("threads")->Unit(benchmark::kMillisecond)->UseManualTime()->Iterations(3);
    };
    // The probes and OpenBLAS read the partitioned matrix: the same data as our kernel on it. The probes
    // twice: in small pages (read_limit, every row's limit but one) and with MADV_HUGEPAGE
    // (read_limit_hugepage, the limit of partitioned_hugepage).
    for (const auto& how : numaplace::bench::probe::strategies()) {
        threads(benchmark::RegisterBenchmark((std::string("BM_Dgemv_read_limit_") + how.name).c_str(),
                                             [&how](benchmark::State& s) { BM_Dgemv_read_limit(s, how, page_kind::small); }));
        threads(benchmark::RegisterBenchmark((std::string("BM_Dgemv_read_limit_hugepage_") + how.name).c_str(),
                                             [&how](benchmark::State& s) { BM_Dgemv_read_limit(s, how, page_kind::huge); }));
    }
#ifdef NUMAPLACE_HAVE_OPENBLAS
    threads(benchmark::RegisterBenchmark("BM_Dgemv_openblas", BM_Dgemv_openblas));
#endif
    for (placement_kind kind : {placement_kind::partitioned, placement_kind::serial_init, placement_kind::parallel_init,
                                placement_kind::interleaved, placement_kind::node0})
        threads(benchmark::RegisterBenchmark((std::string("BM_Dgemv_") + numaplace::bench::name(kind)).c_str(),
                                             [kind](benchmark::State& s) { run_placement(s, kind); }));
    // What transparent huge pages (madvise mode) give the partitioned kernel: the same matrix with
    // MADV_HUGEPAGE before its first write (huge-page-aligned edges assumed: true on one node); held
    // against read_limit_hugepage, measured on that same matrix.
    threads(benchmark::RegisterBenchmark("BM_Dgemv_partitioned_hugepage", [](benchmark::State& s) {
        run_placement(s, placement_kind::partitioned, page_kind::huge);
    }));
    // The partitioned matrix on explicit 2 MiB pages of each node's own pool (hugetlb), held against
    // read_limit_explicit_2m, measured on that same matrix. Only where the pools can hold it: else the
    // reason is printed and put in the JSON context.
    const std::string why = explicit_2m_unavailable();
    if (!why.empty()) {
        std::fprintf(stderr, "BM_Dgemv_partitioned_explicit_2m not run: %s\n", why.c_str());
        return;
    }
    for (const auto& how : numaplace::bench::probe::strategies())
        threads(benchmark::RegisterBenchmark((std::string("BM_Dgemv_read_limit_explicit_2m_") + how.name).c_str(), [&how](benchmark::State& s) {
            BM_Dgemv_read_limit(s, how, page_kind::as_placed, placement_kind::partitioned_explicit_2m);
        }));
    threads(benchmark::RegisterBenchmark("BM_Dgemv_partitioned_explicit_2m", [](benchmark::State& s) {
        run_placement(s, placement_kind::partitioned_explicit_2m, page_kind::as_placed);
    }));
}
} // namespace

int main(int argc, char** argv) {
    register_all();
    // Five interleaved repetitions unless the command line says otherwise.
    std::vector<char*> args(argv, argv + argc);
    char interleave[] = "--benchmark_enable_random_interleaving=true";
    char repetitions[] = "--benchmark_repetitions=5";
    auto given = [&](const char* flag) {
        for (int i = 1; i < argc; ++i)
            if (std::string(argv[i]).rfind(flag, 0) == 0) return true;
        return false;
    };
    if (!given("--benchmark_enable_random_interleaving")) args.insert(args.begin() + 1, interleave);
    if (!given("--benchmark_repetitions")) args.insert(args.begin() + 1, repetitions);
    int count = static_cast<int>(args.size());
    args.push_back(nullptr);
    argv = args.data();
    argc = count;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::AddCustomContext("matrix", std::to_string(M) + "x" + std::to_string(N) + " doubles");
    benchmark::AddCustomContext("numa_nodes", std::to_string(numaplace::topology::get().size()));
    benchmark::AddCustomContext("limits", "read_limit_<probe>: small pages (MADV_NOHUGEPAGE), the limit of every "
                                          "row but partitioned_hugepage and partitioned_explicit_2m; "
                                          "read_limit_hugepage_<probe>: MADV_HUGEPAGE, the limit of partitioned_hugepage; "
                                          "read_limit_explicit_2m_<probe>: explicit 2 MiB pages (hugetlb), the limit "
                                          "of partitioned_explicit_2m");
    const std::string why = explicit_2m_unavailable();
    benchmark::AddCustomContext("explicit_2m", why.empty() ? "run: every block on its node's 2 MiB pool" : "not run: " + why);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
