// Data loaded by one thread (as serial code does: read a file, fill a vector) lands on that thread's
// node. `replace` moves its pages to the partition the parallel loop uses, keeping the contents, and
// the loop then reads local memory. Prints the locality before and after.
//
//   replace_serial_init [MiB]      (default 256)
//
// Where the kernel refuses page queries or moves (Docker's default seccomp profile blocks move_pages
// and mbind), the degrading replace reports it and the program still exits 0, saying so.

#include <numaplace/allocator.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/replace.hpp>
#include <numaplace/where.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
std::string locality_text(const double* data, const partition<double>& part) {
    if (!topology::get().capabilities().page_query)
        return std::string("unknown (page query refused: ") + std::strerror(topology::get().capabilities().page_query_errno) + ")";
    const partition_locality loc = where(data, part);
    std::string s = std::to_string(loc.fraction() * 100.0).substr(0, 5) + " % of " +
                    std::to_string(loc.histogram.touched()) + " pages on their block's node (";
    for (std::size_t k = 0; k < loc.histogram.per_node.size(); ++k)
        s += (k ? ", " : "") + std::string("node ") + std::to_string(k) + ": " + std::to_string(loc.histogram.per_node[k]);
    return s + ")";
}
} // namespace

int main(int argc, char** argv) {
    const std::size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
    if (mib == 0) {
        std::cerr << "usage: replace_serial_init [MiB > 0]\n";
        return 2;
    }
    const std::size_t n = (mib << 20) / sizeof(double);

    // 1. Serial load: one thread writes everything (first touch puts every page on its node).
    std::vector<double> a(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = 1.0 + static_cast<double>(i % 1000) * 1e-3;

    const partition<double> part(n); // the loop's blocks: nodes with CPUs, weighted by cores
    std::cout << "nodes with CPUs: " << part.nodes().size() << ", data: " << mib << " MiB\n";
    std::cout << "before replace: " << locality_text(a.data(), part) << '\n';

    // 2. Re-place the pages by the partition (degrading: a refusal is reported, not thrown).
    const replace_report r = replace(a, part, fallback::degrade);
    r.print(std::cout);
    std::cout << "after replace:  " << locality_text(a.data(), part) << '\n';

    // 3. The loop over the same partition reads local pages.
    const double sum = parallel_reduce(
        part, 0.0,
        [&](subrange s, double acc) {
            for (std::size_t i = s.begin(); i < s.end(); ++i) acc += a[i];
            return acc;
        },
        [](double x, double y) { return x + y; });
    std::cout << "sum = " << sum << '\n';

    if (!r.complete()) {
        std::cout << "NOTE: the kernel refused part of the re-placement (" << r.failed_pages()
                  << " pages not moved, policy " << (r.policy_kept ? "kept" : "not kept")
                  << "): data stays where it was; see degradations:\n";
        for (const auto& d : degradations()) std::cout << "  - " << d << '\n';
    }
    return 0;
}
