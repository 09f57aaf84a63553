// A 2-D Jacobi stencil on an odd grid with halo rows, as real codes have it: M x N interior points in a
// (M + 2) x (N + 2) array of doubles (rows of N + 2 = an odd number of doubles, never a whole number of
// pages). One row partition places both grids and runs the sweeps: each node computes its exact share of
// rows, and the pages follow (a page belongs to the block holding its first byte; one page per block edge
// is shared). Prints where the pages are and on which nodes the rows ran.
//
//   stencil [M N sweeps] [--expect-locality]    (default 1001 1001 10)
//
// --expect-locality: exit 1 unless every page is on its owner's node (no remote page, at most one shared
// page per block edge) and every row ran on its block's node (the multi-node guests assert it).

#include <numaplace/allocator.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>

#include <sched.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
// \returns the node of the CPU the calling thread runs on, -1 if unknown.
int current_node() {
    const int cpu = sched_getcpu();
    return cpu < 0 ? -1 : topology::get().node_of_cpu(static_cast<unsigned>(cpu));
}
} // namespace

int main(int argc, char** argv) {
    std::vector<std::size_t> args;
    bool expect = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--expect-locality") == 0) expect = true;
        else args.push_back(std::strtoull(argv[i], nullptr, 10));
    }
    if (!(args.empty() || args.size() == 3) || (args.size() == 3 && (args[0] == 0 || args[1] == 0))) {
        std::cerr << "usage: stencil [M N sweeps] [--expect-locality]\n";
        return 2;
    }
    const std::size_t m = args.empty() ? 1001 : args[0], n = args.empty() ? 1001 : args[1];
    const std::size_t sweeps = args.empty() ? 10 : args[2], width = n + 2, height = m + 2;

    // one partition of the grid's rows, halo rows included: placement, loop and proof
    const row_partition<double> rows = partition<double>::rows(height, width);
    partitioned_vector<double> u(height * width, partitioned_allocator<double>(rows));
    partitioned_vector<double> v(height * width, partitioned_allocator<double>(rows));
    std::atomic<std::size_t> off_node{0};
    // initialise in parallel, row block k on node k: boundary 1, interior 0
    parallel_for(rows, [&](subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i)
            for (std::size_t j = 0; j < width; ++j) {
                const bool edge = i == 0 || i == height - 1 || j == 0 || j == width - 1;
                u[i * width + j] = v[i * width + j] = edge ? 1.0 : 0.0;
            }
    });
    for (std::size_t s = 0; s < sweeps; ++s) {
        parallel_for(rows, [&](subrange r) {
            const int node = current_node();
            if (node >= 0 && node != r.node()) off_node.fetch_add(r.size(), std::memory_order_relaxed);
            for (std::size_t i = std::max<std::size_t>(r.begin(), 1); i < std::min(r.end(), height - 1); ++i)
                for (std::size_t j = 1; j < width - 1; ++j)
                    v[i * width + j] = 0.25 * (u[(i - 1) * width + j] + u[(i + 1) * width + j] + u[i * width + j - 1] +
                                               u[i * width + j + 1]);
        });
        u.swap(v);
    }
    // the centre converges towards 1 from below, monotonically: a cheap check of the sweeps
    const double centre = u[(height / 2) * width + width / 2];
    std::cout << "grid " << m << " x " << n << " (rows of " << width << " doubles), " << sweeps << " sweeps, centre "
              << centre << "\n";
    std::cout << "row blocks:";
    for (const block& b : rows.blocks()) std::cout << " node" << b.node << "[" << b.begin << "," << b.end << ")";
    std::cout << "\n";
    if (!topology::get().capabilities().page_query) {
        std::cout << "pages: unknown (the kernel refuses page queries)\n";
        return expect ? 1 : 0;
    }
    const partition_locality loc = where(u.data(), u.size(), rows);
    std::size_t edges = 0;
    for (const block& b : rows.blocks()) edges += !b.empty() && b.begin != 0;
    std::cout << "pages: " << loc.local << " local, " << loc.shared << " shared at " << edges << " block edges, "
              << loc.remote << " remote, " << loc.histogram.untouched << " untouched; rows off their node: "
              << off_node.load() << "\n";
    const bool ok = loc.remote == 0 && loc.histogram.untouched == 0 && off_node.load() == 0 &&
                    loc.shared <= edges * rows.alignment() / loc.histogram.page_size && centre >= 0.0 && centre <= 1.0;
    if (expect && !ok) {
        std::cout << "FAILED: a page off its owner's node, untouched, or a row off its block's node\n";
        return 1;
    }
    return 0;
}
