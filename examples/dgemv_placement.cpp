// The DGEMV placement demo: c = A*b for every placement of A at 1..all threads, in the seeds' table
// form (threads, time, speedup) plus GB/s, the fraction of the read-bandwidth limit and the locality
// where() measures against the threads that compute. Timings here, never inside a guest.
//   dgemv_placement [--size N] [--threads T] [--reps R] [--replace] [--expect-locality]
// --replace adds the row "replaced": serial init, then numaplace::replace to the rows partition.
// --expect-locality (used by the multi-node guest tests, which never look at the times): exit 1 unless
// the partitioned placement is 100 % local at every thread count and, where there are several nodes with
// CPUs, the serially initialised matrix is not (the seeds' problem, shown by where()).
// With --replace the replaced matrix must be 100 % local too.
#include "dgemv_placements.hpp"

#include <numaplace/balancing.hpp>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

namespace {
using namespace numaplace::bench;

std::size_t mem_available() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::size_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb * 1024;
    return std::size_t(4) << 30;
}

double best_seconds(int reps, const std::function<void()>& f) {
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// Progress goes to stderr, only when it is a terminal.
template <class... Args>
void progress(const char* format, Args... args) {
    static const bool tty = isatty(2) != 0;
    if (!tty) return;
    std::fprintf(stderr, format, args...);
}

int usage() {
    std::fprintf(stderr, "usage: dgemv_placement [--size N] [--threads T] [--reps R] [--replace] [--expect-locality]\n");
    return 2;
}
} // namespace

int main(int argc, char** argv) {
    // Default: the seeds' 20000 x 20000 (3.2 GB) if a third of the available memory holds it.
    std::size_t n = 20000;
    const std::size_t avail = mem_available();
    while (n > 2000 && n * n * sizeof(double) > avail / 3) n -= 1000;
    int max_threads = tbb::info::default_concurrency();
    int reps = 5;
    bool expect_locality = false, with_replace = false;
    for (int i = 1; i < argc; ++i) {
        auto value = [&](const char* flag) -> const char* {
            if (std::strcmp(argv[i], flag) != 0) return nullptr;
            if (i + 1 >= argc) return nullptr;
            return argv[++i];
        };
        if (const char* v = value("--size")) n = std::strtoull(v, nullptr, 10);
        else if (const char* t = value("--threads")) max_threads = std::atoi(t);
        else if (const char* r = value("--reps")) reps = std::atoi(r);
        else if (std::strcmp(argv[i], "--expect-locality") == 0) expect_locality = true;
        else if (std::strcmp(argv[i], "--replace") == 0) with_replace = true;
        else return usage();
    }
    if (n == 0 || max_threads < 1 || reps < 1) return usage();

    const auto& topo = numaplace::topology::get();
    std::printf("machine: %zu NUMA node(s), %d threads; A = %zu x %zu doubles (%.2f GB), best of %d\n", topo.size(),
                tbb::info::default_concurrency(), n, n, static_cast<double>(n * n * sizeof(double)) / 1e9, reps);
    if (topo.with_cpus().size() < 2)
        std::printf("one NUMA node: placements cannot differ in speed here; locality shows what a two-socket "
                    "machine would see.\n");
    std::printf("\n%-14s %7s %10s %8s %8s %9s %9s\n", "placement", "threads", "time (ms)", "speedup", "GB/s",
                "of limit", "locality");

    std::vector<double> limit(static_cast<std::size_t>(max_threads) + 1, 0.0);
    bool all_correct = true;
    double partitioned_min = 1.0, serial_at_max = 1.0;
    // The read-bandwidth limit first, on the partitioned matrix, then each placement in turn (one
    // matrix at a time).
    std::vector<placement_kind> order{placement_kind::partitioned, placement_kind::serial_init,
                                      placement_kind::parallel_init, placement_kind::interleaved, placement_kind::node0};
    if (with_replace) order.push_back(placement_kind::replaced);
    double replaced_min = 1.0;
    for (placement_kind kind : order) {
        progress("[%s] allocating and initialising %.2f GB...\r", name(kind),
                     static_cast<double>(n * n * sizeof(double)) / 1e9);
        placed_matrix m(kind, n, n);
        if (kind == placement_kind::partitioned) {
            // A is placed by partition<double>::rows(n, n): where() checks all n*n elements' pages against
            // the node of their row's block (the rows partition the allocator and the loop share).
            const double by_rows = numaplace::where(m.a(), m.row_partition()).fraction();
            partitioned_min = std::min(partitioned_min, by_rows);
            std::printf("%-14s %7s %10s %8s %8s %9s %9.2f\n", "A by rows", "", "", "", "", "", by_rows);
            for (int t = 1; t <= max_threads; ++t) {
                tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(t));
                const double s = best_seconds(reps, [&] { volatile double v = m.read_all(); (void)v; });
                limit[static_cast<std::size_t>(t)] = static_cast<double>(m.bytes()) / s / 1e9;
                std::printf("%-14s %7d %10.1f %8s %8.2f %9s %9s\n", "read_limit", t, s * 1e3, "", limit[static_cast<std::size_t>(t)],
                            "1.00", "");
            }
        }
        if (kind == placement_kind::replaced) { // serial init, then replace(): pages by the rows partition
            const double by_rows = numaplace::where(m.a(), m.row_partition()).fraction();
            replaced_min = std::min(replaced_min, by_rows);
            std::printf("%-14s %7s %10s %8s %8s %9s %9.2f\n", "A replaced", "", "", "", "", "", by_rows);
        }
        const double locality_before = m.locality();
        const auto balancing_before = numaplace::balancing_counters::read();
        double one = 0;
        for (int t = 1; t <= max_threads; ++t) {
            progress("[%s] %d thread(s)...                              \r", name(kind), t);
            tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(t));
            m.multiply();
            const bool correct = m.check();
            all_correct = all_correct && correct;
            const double s = best_seconds(reps, [&] { m.multiply(); });
            if (t == 1) one = s;
            const double gbps = static_cast<double>(m.bytes()) / s / 1e9;
            const double local = m.locality();
            if (kind == placement_kind::partitioned) partitioned_min = std::min(partitioned_min, local);
            if (kind == placement_kind::replaced) replaced_min = std::min(replaced_min, local);
            if (kind == placement_kind::serial_init && t == max_threads) serial_at_max = local;
            std::printf("%-14s %7d %10.1f %8.2f %8.2f %9.2f %9.2f%s\n", name(kind), t, s * 1e3, one / s, gbps,
                        gbps / limit[static_cast<std::size_t>(t)], local, correct ? "" : "  WRONG RESULT");
            std::fflush(stdout);
        }
        const auto bal = numaplace::balancing_counters::read().since(balancing_before);
        std::printf("%-14s locality %.2f -> %.2f over the runs; kernel: numa_pages_migrated +%llu, numa_hint_faults "
                    "+%llu (+%llu local)\n", "", locality_before, m.locality(), (unsigned long long)bal.pages_migrated,
                    (unsigned long long)bal.hint_faults, (unsigned long long)bal.hint_faults_local);
    }
    progress("%60s\r", "");
    std::printf("\nlocality = fraction of A's pages on the node of the thread that computes them.\n"
                "seeds' two-socket reference (2x Xeon E5-2620 v4, 16 threads): speedup 4.6 with serial init, "
                "11.2 with parallel init.\n");
    if (expect_locality) {
        const bool several = topo.with_cpus().size() > 1;
        const bool ok = partitioned_min == 1.0 && replaced_min == 1.0 && (!several || serial_at_max < 0.9);
        std::printf("locality check: partitioned min %.3f (want 1), serial_init at %d threads %.3f (want < 0.9 "
                    "with several nodes): %s\n", partitioned_min, max_threads, serial_at_max, ok ? "ok" : "FAILED");
        if (with_replace) std::printf("locality check: replaced min %.3f (want 1)\n", replaced_min);
        if (!ok) return 1;
    }
    return all_correct ? 0 : 1;
}
