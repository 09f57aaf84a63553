// The seeds' OpenMP DGEMV, c = A·b, unchanged: one `#pragma omp parallel for schedule(static)` over the
// rows. Only where A's pages are differs:
//   serial init       A filled by one thread (the seeds' baseline: every page on that thread's node);
//   static rows       A allocated by omp::static_rows (the loop's own schedule as a partition of whole
//                     rows) and filled by the same parallel loop: each row on the node of the thread
//                     that reads it.
// Prints, per variant, the best time of the kernel, its GB/s and A's locality (where(): pages on the
// node whose threads read them). Bind the team (OMP_PROC_BIND=close OMP_PLACES=cores) on a machine with
// more than one node: an unbound team is refused, saying which thread spans nodes.
//
//   dgemv_openmp [--rows M] [--cols N] [--reps R] [--expect-locality]    (default 4000 x 4000, 10 reps)
//
// --expect-locality (the multi-node guest tests, which never look at the times): exit 1 unless every
// page of the static-rows A is touched and on its rows' node.
// Exits 0; 2 on a bad option (one line); 1 when the team is unbound or placement fails (0 when a
// sandbox refuses placement, as every example meant to run in containers: sandbox.hpp).
#include <numaplace/allocator.hpp>
#include <numaplace/omp.hpp>
#include <numaplace/where.hpp>

#include "sandbox.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace numaplace;

namespace {

// c = A·b over the rows, as the seeds wrote it.
void dgemv(const double* a, const double* b, double* c, long m, long n) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < m; ++i) {
        const double* row = a + i * n;
        double s = 0.0;
        for (long j = 0; j < n; ++j) s += row[j] * b[j];
        c[i] = s;
    }
}

// The seeds' matrix: a(i, j) = (i + j) mod 7, exactly representable, so every variant gives the same c.
double value(long i, long j) { return static_cast<double>((i + j) % 7); }

struct result {
    double seconds = std::numeric_limits<double>::infinity();
    double checksum = 0.0;
};

result run(const double* a, long m, long n, int reps) {
    std::vector<double> b(static_cast<std::size_t>(n), 1.0), c(static_cast<std::size_t>(m), 0.0);
    result r;
    for (int k = 0; k < reps; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        dgemv(a, b.data(), c.data(), m, n);
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        r.seconds = std::min(r.seconds, dt.count());
    }
    for (double x : c) r.checksum += x;
    return r;
}

// \returns A's locality against the rows partition, as text; `all_local` tells whether every page is
// touched and on its block's node.
std::string locality_text(const double* a, const row_partition<double>& rows, bool& all_local) {
    all_local = false;
    if (!topology::get().capabilities().page_query)
        return std::string("unknown (page query refused: ") + std::strerror(topology::get().capabilities().page_query_errno) + ")";
    const partition_locality loc = where(a, rows);
    all_local = loc.remote == 0 && loc.histogram.untouched == 0;
    char text[64];
    std::snprintf(text, sizeof text, "%5.1f %% of %zu pages", loc.fraction() * 100.0, loc.histogram.touched());
    std::string s = text;
    for (std::size_t k = 0; k < loc.histogram.per_node.size(); ++k)
        s += (k ? ", node " : " (node ") + std::to_string(k) + ": " + std::to_string(loc.histogram.per_node[k]);
    return s + ")";
}

void print(const char* name, const result& r, long m, long n, const std::string& locality) {
    const double bytes = static_cast<double>(m) * static_cast<double>(n) * sizeof(double);
    std::printf("%-12s %9.3f ms %8.2f GB/s  checksum %.0f  A local: %s\n", name, r.seconds * 1e3,
                bytes / r.seconds / 1e9, r.checksum, locality.c_str());
}

const char* const usage = "usage: dgemv_openmp [--rows M] [--cols N] [--reps R] [--expect-locality]";

bool parse(int argc, char** argv, long& m, long& n, long& reps, bool& expect_locality) {
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--help") {
            std::printf("%s\n", usage);
            std::exit(0);
        }
        if (flag == "--expect-locality") {
            expect_locality = true;
            continue;
        }
        const bool known = flag == "--rows" || flag == "--cols" || flag == "--reps";
        if (!known || i + 1 == argc) {
            std::fprintf(stderr, "dgemv_openmp: %s '%s' (%s)\n", known ? "no value for" : "unknown option", argv[i], usage);
            return false;
        }
        char* end = nullptr;
        const long v = std::strtol(argv[++i], &end, 10);
        const long limit = flag == "--reps" ? 1000 : 1L << 20;
        if (*end != '\0' || v < 1 || v > limit) {
            std::fprintf(stderr, "dgemv_openmp: %s must be a whole number from 1 to %ld, not '%s'\n", flag.c_str(),
                         limit, argv[i]);
            return false;
        }
        (flag == "--rows" ? m : flag == "--cols" ? n : reps) = v;
    }
    const double mib = static_cast<double>(m) * static_cast<double>(n) * sizeof(double) / 1048576.0;
    const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1048576.0;
    if (2 * mib > ram) { // A twice: the serial and the placed copy live one after the other
        std::fprintf(stderr, "dgemv_openmp: %ld x %ld needs %.0f MiB for A, more than half of this machine's %.0f MiB\n",
                     m, n, mib, ram);
        return false;
    }
    return true;
}

} // namespace

int main(int argc, char** argv) {
    long m = 4000, n = 4000, reps_arg = 10;
    bool expect_locality = false, all_local = false;
    if (!parse(argc, argv, m, n, reps_arg, expect_locality)) return 2;
    const int reps = static_cast<int>(reps_arg);
    try {
        const omp::team team = omp::team::current();
        std::printf("dgemv_openmp: %ld x %ld doubles (%.1f MiB), %d thread(s) on %zu node(s), best of %d\n", m, n,
                    static_cast<double>(m) * static_cast<double>(n) * 8.0 / 1048576.0, team.size(),
                    team.nodes().size(), reps);
        const auto um = static_cast<std::size_t>(m), un = static_cast<std::size_t>(n);
        const row_partition<double> rows = omp::static_rows<double>(um, un, team);
        {
            std::vector<double> a(um * un); // the seeds' baseline: one thread writes every page
            for (long i = 0; i < m; ++i)
                for (long j = 0; j < n; ++j) a[static_cast<std::size_t>(i * n + j)] = value(i, j);
            print("serial init", run(a.data(), m, n, reps), m, n, locality_text(a.data(), rows, all_local));
        }
        {
            partitioned_vector<double> a(um * un, partitioned_allocator<double>(rows)); // not zero-filled
#pragma omp parallel for schedule(static)
            for (long i = 0; i < m; ++i)
                for (long j = 0; j < n; ++j) a[static_cast<std::size_t>(i * n + j)] = value(i, j);
            print("static rows", run(a.data(), m, n, reps), m, n, locality_text(a.data(), rows, all_local));
        }
        if (expect_locality && !all_local) {
            std::printf("dgemv_openmp: --expect-locality: the static-rows A is not all local\n");
            return 1;
        }
    } catch (const omp::unbound_team& e) {
        std::fprintf(stderr, "dgemv_openmp: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        return numaplace_examples::report("dgemv_openmp", e);
    }
    return 0;
}
