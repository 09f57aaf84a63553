// The DGEMV placement demo: c = A*b for every placement of A at 1..all threads, in the seeds' table
// form (threads, time, speedup) plus GB/s, the fraction of the read-bandwidth limit, the locality
// where() measures against the threads that compute, and the seeds' counters over each row's region
// (numaplace::observation_scope): RMA/LMA (the kernel's node events; needs a PMU), cpu-migrations, and
// numastat's local/other pages (system-wide); "n/a" where a group was not measured, its reason below the
// table. Each placement's "init" row is its allocation and initialisation. Timings here, never inside a guest.
//   dgemv_placement [--size N] [--threads T] [--reps R] [--replace] [--expect-locality] [--help]
// --replace adds the row "replaced": serial init, then numaplace::replace to the rows partition.
// Exit status: 0 done (or NUMA placement refused by a sandbox, said in one line), 1 a wrong result or a
// failed locality check or error, 2 bad arguments (one line on stderr).
// --expect-locality (used by the multi-node guest tests, which never look at the times): exit 1 unless
// the partitioned placement is 100 % local at every thread count and, where there are several nodes with
// CPUs, the serially initialised matrix is not (the seeds' problem, shown by where()).
// With --replace the replaced matrix must be 100 % local too. It then checks the seeds' contrast in
// numastat: A bound by its rows partition and written serially from node s raises node k's other_node by at
// least block k's pages; the partitioned initialisation raises node k's local_node by as much (lower bounds
// only: numastat counts every process; docs/observe.md).
#include "dgemv_placements.hpp"
#include "sandbox.hpp"

#include <numaplace/observation_counters.hpp>
#include <numaplace/observe.hpp>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>
#include <sys/resource.h>
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

/// Address space this process may still map under RLIMIT_AS (`ulimit -v`, as batch systems set it): the
/// limit less what is mapped now (VmSize) and a reserve for `threads` worker threads (stack and malloc
/// arena each) and the small vectors; SIZE_MAX without a limit.
std::size_t address_space_room(int threads) {
    rlimit limit{};
    if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
    std::size_t mapped = 0;
    std::ifstream in("/proc/self/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmSize:", 0) == 0) mapped = std::strtoull(line.c_str() + 7, nullptr, 10) * 1024;
    const std::size_t reserve = (std::size_t(64) << 20) + static_cast<std::size_t>(threads) * (std::size_t(80) << 20);
    const std::size_t cap = static_cast<std::size_t>(limit.rlim_cur);
    return cap > mapped + reserve ? cap - mapped - reserve : 0;
}

/// The RLIMIT_AS soft limit in KiB, as `ulimit -v` prints it.
std::string address_space_limit_kb() {
    rlimit limit{};
    if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "unlimited";
    return std::to_string(limit.rlim_cur / 1024);
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

const char* const usage_text =
    "usage: dgemv_placement [--size N] [--threads T] [--reps R] [--replace] [--expect-locality] [--help]\n"
    "  --size N          A is N x N doubles (default: 20000, or less so that A fits a third of MemAvailable)\n"
    "  --threads T       measure 1..T threads (default and maximum: the cores this process may use)\n"
    "  --reps R          best of R repetitions (default 5)\n"
    "  --replace         add the row \"replaced\": serial init, then numaplace::replace to the rows partition\n"
    "  --expect-locality exit 1 unless the partitioned placement is 100 % local (the guests' check)\n"
    "  --check-args      check the arguments and exit (0 if valid, 2 if not; scripts/demo uses it)\n";

/// One line on stderr, exit status 2: the arguments were wrong.
int bad_argument(const std::string& what) {
    std::fflush(stdout);
    std::fprintf(stderr, "dgemv_placement: %s (see --help)\n", what.c_str());
    return 2;
}

/// \returns true and the value if `text` is a whole decimal number in [1, max].
bool parse_count(const char* text, unsigned long long max, unsigned long long& value) {
    if (text == nullptr || *text < '0' || *text > '9') return false; // no sign, no blank, not empty
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < 1 || v > max) return false;
    value = v;
    return true;
}

int run(std::size_t n, int max_threads, int reps, bool expect_locality, bool with_replace);
bool numastat_contrast(std::size_t n);

/// The seeds' columns of one row: RMA/LMA, cpu-migrations, numastat local/other pages over the row's
/// region, each "n/a" when its group was not measured (the reason is kept in `reasons`, printed once).
std::string seeds_columns(const numaplace::counter_set& c, std::map<std::string, std::string>& reasons) {
    auto cell = [&](const char* value, numaplace::counter_group g, const char* format) {
        char text[32];
        if (const auto v = c.get(value)) {
            std::snprintf(text, sizeof text, format, *v);
            return std::string(text);
        }
        const auto why = c.absent_reason(g);
        reasons[numaplace::name(g)] = why ? *why : "measured, but this counter was not read";
        return std::string("n/a");
    };
    char row[96];
    std::snprintf(row, sizeof row, " %8s %8s %9s %9s", cell("rma_lma", numaplace::counter_group::node_access, "%.2f").c_str(),
                  cell("cpu_migrations", numaplace::counter_group::software, "%.0f").c_str(),
                  cell("numastat.local_node", numaplace::counter_group::numastat, "%.0f").c_str(),
                  cell("numastat.other_node", numaplace::counter_group::numastat, "%.0f").c_str());
    return row;
}
} // namespace

int main(int argc, char** argv) {
    // Default: the seeds' 20000 x 20000 (3.2 GB) if a third of the available memory holds it, and the
    // address-space limit too.
    std::size_t n = 20000;
    const std::size_t avail = mem_available();
    const int cores = tbb::info::default_concurrency();
    const std::size_t room = address_space_room(cores);
    while (n > 2000 && n * n * sizeof(double) > std::min(avail / 3, room)) n -= 1000;
    int max_threads = cores;
    int reps = 5;
    bool expect_locality = false, with_replace = false;
    bool check_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--help" || arg == "-h") {
            std::printf("%s", usage_text);
            return 0;
        }
        if (arg == "--expect-locality" || arg == "--replace" || arg == "--check-args") {
            (arg == "--expect-locality" ? expect_locality : arg == "--replace" ? with_replace : check_only) = true;
            continue;
        }
        if (arg != "--size" && arg != "--threads" && arg != "--reps") return bad_argument("unknown option '" + arg + "'");
        if (i + 1 >= argc) return bad_argument(arg + " needs a value");
        const char* text = argv[++i];
        unsigned long long v = 0;
        if (arg == "--size") {
            // A must fit in the memory available now (and N*N*8 in a size_t).
            if (!parse_count(text, 1ull << 31, v))
                return bad_argument("--size wants a whole number from 1 to 2147483648, not '" + std::string(text) + "'");
            if (v * v > avail / sizeof(double))
                return bad_argument("--size " + std::to_string(v) + " needs " + std::to_string(v * v * sizeof(double) >> 20) +
                                    " MiB for A; " + std::to_string(avail >> 20) + " MiB are available");
            if (v * v > room / sizeof(double)) // checked before any allocation, as the memory above
                return bad_argument("--size " + std::to_string(v) + " needs " + std::to_string(v * v * sizeof(double) >> 20) +
                                    " MiB for A; the address-space limit (ulimit -v " + address_space_limit_kb() +
                                    ") leaves " + std::to_string(room >> 20) + " MiB");
            n = static_cast<std::size_t>(v);
        } else if (arg == "--threads") {
            if (!parse_count(text, static_cast<unsigned long long>(cores), v))
                return bad_argument("--threads wants a whole number from 1 to " + std::to_string(cores) +
                                    " (the cores this process may use), not '" + std::string(text) + "'");
            max_threads = static_cast<int>(v);
        } else {
            if (!parse_count(text, 1000000, v))
                return bad_argument("--reps wants a whole number from 1 to 1000000, not '" + std::string(text) + "'");
            reps = static_cast<int>(v);
        }
    }
    if (check_only) return 0;
    try {
        return run(n, max_threads, reps, expect_locality, with_replace);
    } catch (const std::exception& e) {
        return numaplace_examples::report("dgemv_placement", e);
    }
}

namespace {
int run(std::size_t n, int max_threads, int reps, bool expect_locality, bool with_replace) {
    const auto& topo = numaplace::topology::get();
    std::printf("machine: %zu NUMA node(s), %d threads; A = %zu x %zu doubles (%.2f GB), best of %d\n", topo.size(),
                tbb::info::default_concurrency(), n, n, static_cast<double>(n * n * sizeof(double)) / 1e9, reps);
    if (topo.with_cpus().size() < 2)
        std::printf("one NUMA node: placements cannot differ in speed here; locality shows what a two-socket "
                    "machine would see.\n");
    std::printf("\n%-14s %7s %10s %8s %8s %9s %9s %8s %8s %9s %9s\n", "placement", "threads", "time (ms)", "speedup", "GB/s",
                "of limit", "locality", "rma/lma", "cpu-mig", "ns.local", "ns.other");
    std::map<std::string, std::string> reasons; // counter group -> why it was not measured
    std::fflush(stdout); // the header survives whatever fails next

    std::vector<double> limit(static_cast<std::size_t>(max_threads) + 1, 0.0);
    bool all_correct = true;
    double partitioned_min = 1.0, serial_at_max = 1.0;
    // The read-bandwidth limit first, on the partitioned matrix, then each placement in turn (one
    // matrix at a time).
    std::vector<placement_kind> order{placement_kind::partitioned, placement_kind::serial_init,
                                      placement_kind::parallel_init, placement_kind::interleaved, placement_kind::node0};
    if (with_replace) order.push_back(placement_kind::replaced);
    // The partitioned matrix on explicit 2 MiB pages (each block from its node's own pool), held against a
    // read limit measured on that same memory; only where the pools can hold it.
    const std::string no_explicit = numaplace::bench::compared(placement_kind::partitioned_explicit_2m)
                                        .unavailable(numaplace::partition<double>::rows(n, n));
    if (no_explicit.empty()) order.push_back(placement_kind::partitioned_explicit_2m);
    std::vector<double> limit_explicit(limit.size(), 0.0);
    double replaced_min = 1.0;
    for (placement_kind kind : order) {
        progress("[%s] allocating and initialising %.2f GB...\r", name(kind),
                     static_cast<double>(n * n * sizeof(double)) / 1e9);
        numaplace::observation_scope init_scope;
        const auto init_start = std::chrono::steady_clock::now();
        placed_matrix m(kind, n, n);
        const double init_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - init_start).count();
        std::printf("%-14s %7s %10.1f %8s %8s %9s %9s%s\n", name(kind), "init", init_s * 1e3, "", "", "", "",
                    seeds_columns(numaplace::observation_counters(init_scope.stop()), reasons).c_str());
        auto& lim = kind == placement_kind::partitioned_explicit_2m ? limit_explicit : limit;
        if (kind == placement_kind::partitioned || kind == placement_kind::partitioned_explicit_2m) {
            // A is placed by partition<double>::rows(n, n): where() checks all n*n elements' pages against
            // the node of their row's block (the rows partition the allocator and the loop share).
            const double by_rows = numaplace::where(m.a(), m.row_partition()).fraction();
            partitioned_min = std::min(partitioned_min, by_rows);
            std::printf("%-14s %7s %10s %8s %8s %9s %9.2f\n", "A by rows", "", "", "", "", "", by_rows);
            // The read limit: the fastest of every read strategy (probe::strategies), each reading all of A
            // in parallel over the same rows partition, measured here on this memory, the strategies
            // interleaved (a round of each, `reps` rounds). A kernel above it would show a faster way to
            // read that the probes miss.
            const auto& ways = numaplace::bench::probe::strategies();
            for (int t = 1; t <= max_threads; ++t) {
                tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(t));
                std::vector<double> best(ways.size(), 1e300);
                for (int round = 0; round < reps; ++round)
                    for (std::size_t w = 0; w < ways.size(); ++w)
                        best[w] = std::min(best[w], best_seconds(1, [&] { volatile double v = m.read_all(ways[w].read); (void)v; }));
                const std::size_t win = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
                lim[static_cast<std::size_t>(t)] = static_cast<double>(m.bytes()) / best[win] / 1e9;
                std::printf("%-14s %7d %10.1f %8s %8.2f %9s %9s  (%s, the fastest of %zu read strategies)\n",
                            &lim == &limit ? "read_limit" : "read_limit_2m", t, best[win] * 1e3, "",
                            lim[static_cast<std::size_t>(t)], "1.00", "", ways[win].name, ways.size());
            }
        }
        if (kind == placement_kind::replaced) { // serial init, then replace(): pages by the rows partition
            const double by_rows = numaplace::where(m.a(), m.row_partition()).fraction();
            replaced_min = std::min(replaced_min, by_rows);
            std::printf("%-14s %7s %10s %8s %8s %9s %9.2f\n", "A replaced", "", "", "", "", "", by_rows);
        }
        const double locality_before = m.locality();
        numaplace::observation_scope placement_scope; // the balancing counters over every row of this placement
        double one = 0;
        for (int t = 1; t <= max_threads; ++t) {
            progress("[%s] %d thread(s)...                              \r", name(kind), t);
            tbb::global_control gc(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(t));
            m.multiply();
            const bool correct = m.check();
            all_correct = all_correct && correct;
            numaplace::observation_scope row_scope;
            const double s = best_seconds(reps, [&] { m.multiply(); });
            const std::string seeds = seeds_columns(numaplace::observation_counters(row_scope.stop()), reasons);
            if (t == 1) one = s;
            const double gbps = static_cast<double>(m.bytes()) / s / 1e9;
            const double local = m.locality();
            if (kind == placement_kind::partitioned || kind == placement_kind::partitioned_explicit_2m)
                partitioned_min = std::min(partitioned_min, local);
            if (kind == placement_kind::replaced) replaced_min = std::min(replaced_min, local);
            if (kind == placement_kind::serial_init && t == max_threads) serial_at_max = local;
            std::printf("%-14s %7d %10.1f %8.2f %8.2f %9.2f %9.2f%s%s\n", name(kind), t, s * 1e3, one / s, gbps,
                        gbps / lim[static_cast<std::size_t>(t)], local, seeds.c_str(), correct ? "" : "  WRONG RESULT");
            std::fflush(stdout);
        }
        const numaplace::counter_set bal = numaplace::observation_counters(placement_scope.stop());
        auto count = [&bal](const char* c) {
            const auto v = bal.get(c);
            return v ? "+" + std::to_string(static_cast<unsigned long long>(*v)) : std::string("n/a");
        };
        std::printf("%-14s locality %.2f -> %.2f over the runs; kernel: numa_pages_migrated %s, numa_hint_faults "
                    "%s (%s local)\n", "", locality_before, m.locality(), count("vmstat.numa_pages_migrated").c_str(),
                    count("vmstat.numa_hint_faults").c_str(), count("vmstat.numa_hint_faults_local").c_str());
    }
    progress("%60s\r", "");
    std::printf("\nread_limit = the fastest of the read strategies (bench::probe::strategies: streams, rows read as the kernel reads them, unrolling, "
                "prefetch, vector loads) reading all of A in parallel in this run, best of %d rounds each, interleaved; "
                "of limit = the placement's GB/s over it at the same thread count (the same memory kind: small pages "
                "or THP; read_limit_2m for explicit 2 MiB pages).\n", reps);
    std::printf("locality = fraction of A's pages on the node of the thread that computes them.\n"
                "rma/lma = memory accesses served by other nodes / by the local node (node events); cpu-mig = "
                "cpu-migrations; ns.local / ns.other = numastat local_node / other_node pages (system-wide), "
                "each over the row's region.\n");
    for (const auto& r : reasons) std::printf("n/a (%s): %s\n", r.first.c_str(), r.second.c_str());
    if (no_explicit.empty())
        std::printf("partitioned_explicit_2m: every block on explicit 2 MiB pages of its node's pool; read_limit_2m "
                    "is the read limit on that memory, its \"of limit\".\n");
    else
        std::printf("partitioned_explicit_2m not run: %s (reserve 2 MiB pages per node: "
                    "/sys/devices/system/node/node<k>/hugepages/hugepages-2048kB/nr_hugepages).\n", no_explicit.c_str());
    std::printf(
                "seeds' two-socket reference (2x Xeon E5-2620 v4, 16 threads): speedup 4.6 with serial init, "
                "11.2 with parallel init.\n");
    if (expect_locality) {
        const bool several = topo.with_cpus().size() > 1;
        const bool ok = partitioned_min == 1.0 && replaced_min == 1.0 && (!several || serial_at_max < 0.9);
        std::printf("locality check: partitioned min %.3f (want 1), serial_init at %d threads %.3f (want < 0.9 "
                    "with several nodes): %s\n", partitioned_min, max_threads, serial_at_max, ok ? "ok" : "FAILED");
        if (with_replace) std::printf("locality check: replaced min %.3f (want 1)\n", replaced_min);
        if (!numastat_contrast(n) || !ok) return 1;
    }
    return all_correct ? 0 : 1;
}

/// Pages of A (m x m doubles, aligned) per node id that `rows`' blocks own: a page belongs to the block
/// holding its first byte (basic_partition::page_bytes), so no page is counted twice.
std::vector<std::size_t> block_pages(const numaplace::row_partition<double>& rows) {
    const std::size_t page = numaplace::detail::page_size();
    std::vector<std::size_t> per(numaplace::topology::get().size(), 0);
    const numaplace::basic_partition& e = rows.untyped(); // rows as units: the same bytes as its elements
    const std::size_t bytes = rows.element_count() * sizeof(double);
    for (std::size_t k = 0; k < e.block_count(); ++k) {
        const auto range = e.page_bytes(k, bytes);
        per[static_cast<std::size_t>(e.nodes()[k])] += (range.second - range.first + page - 1) / page;
    }
    return per;
}

/// One line per node of the bound `want` on `counter` (local_node or other_node) of `o`, and the other
/// counter as seen (not bounded: see numastat_contrast). \returns whether every bound holds.
bool numastat_bounds(const char* what, const numaplace::observation& o, const std::vector<std::size_t>& want,
                     const std::vector<bool>& local) {
    bool ok = true;
    for (const numaplace::numastat_delta& d : o.numastat()) {
        const auto k = static_cast<std::size_t>(d.node);
        if (d.node < 0 || k >= want.size() || want[k] == 0) continue;
        const std::uint64_t got = local[k] ? d.local_node : d.other_node, seen = local[k] ? d.other_node : d.local_node;
        ok = ok && got >= want[k];
        std::printf("numastat check: %s: node %d %s +%llu >= %zu pages of its block: %s (%s +%llu, not bounded)\n", what,
                    d.node, local[k] ? "local_node" : "other_node", static_cast<unsigned long long>(got), want[k],
                    got >= want[k] ? "ok" : "FAILED", local[k] ? "other_node" : "local_node",
                    static_cast<unsigned long long>(seen));
    }
    return ok;
}

/// The seeds' contrast in numastat (--expect-locality; docs/observe.md, "The DGEMV's contrast in
/// numastat"). A bound by its rows partition on small pages (one allocation per page), first written
/// (1) serially by one thread on the first node with CPUs, s: block k's pages are allocated on node k for
/// a CPU of node s: node k's other_node rises by at least block k's pages (local_node for k = s);
/// (2) by the partitioned initialisation of the DGEMV (block k from node k's arena): node k's local_node
/// rises by at least block k's pages. numastat is system-wide: other processes may add to any counter,
/// never subtract, so only these lower bounds are checked; the contrasting counter is printed, not bounded.
/// where() must find exactly block k's pages on node k in both. \returns whether every check holds.
bool numastat_contrast(std::size_t n) {
    const auto& topo = numaplace::topology::get();
    const numaplace::row_partition<double> rows = numaplace::partition<double>::rows(n, n);
    const std::vector<std::size_t> want = block_pages(rows);
    const int s = topo.with_cpus()[0];
    bool ok = true;
    auto pages_where = [&](const double* a, const char* what) {
        const std::vector<std::size_t> got = numaplace::where(a, rows).histogram.per_node;
        const bool same = got == want;
        ok = ok && same;
        std::printf("numastat check: %s: where() finds each block's pages on its node: %s\n", what, same ? "ok" : "FAILED");
    };
    auto measured = [&](const numaplace::observation& o) {
        const numaplace::group_status& g = o.status(numaplace::counter_group::numastat);
        if (!g.measured) std::printf("numastat check: numastat NOT measured (%s): FAILED\n", g.reason.c_str());
        ok = ok && g.measured;
        return g.measured;
    };
    {
        numaplace::placed_array<double> a(numaplace::compared_placement::partitioned(), rows, numaplace::page_choice::small);
        int ran_on = -1;
        numaplace::observation_scope scope;
        std::thread([&] {
            cpu_set_t set;
            CPU_ZERO(&set);
            for (unsigned c : topo.at(s).cpus) CPU_SET(c, &set);
            if (::sched_setaffinity(0, sizeof set, &set) != 0) return;
            double* p = a.data();
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < n; ++j) p[i * n + j] = a_value(i, j);
            ran_on = topo.current_node();
        }).join();
        const numaplace::observation o = scope.stop();
        char what[64];
        std::snprintf(what, sizeof what, "serial init from node %d", s);
        std::printf("numastat check: %s: the thread ran on node %d: %s\n", what, ran_on, ran_on == s ? "ok" : "FAILED");
        ok = ok && ran_on == s;
        std::vector<bool> local(want.size(), false);
        local[static_cast<std::size_t>(s)] = true;
        if (measured(o)) ok = numastat_bounds(what, o, want, local) && ok;
        pages_where(a.data(), what);
    }
    numaplace::observation_scope scope;
    const placed_matrix m(placement_kind::partitioned, n, n, page_kind::small);
    const numaplace::observation o = scope.stop();
    if (measured(o)) ok = numastat_bounds("partitioned init", o, want, std::vector<bool>(want.size(), true)) && ok;
    pages_where(m.a(), "partitioned init");
    std::printf("numastat check (lower bounds only: numastat counts every process): %s\n", ok ? "ok" : "FAILED");
    return ok;
}
} // namespace
