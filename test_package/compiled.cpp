// Conan test_package, component numaplace::compiled (-o numaplace/*:compiled=True): the separately
// compiled mode, the topology and the per-node arenas from libnumaplace.
#ifndef NUMAPLACE_SEPARATE_COMPILATION
#error "numaplace::compiled does not define NUMAPLACE_SEPARATE_COMPILATION"
#endif
#include <numaplace/numaplace.hpp>

#include <atomic>
#include <cstdio>

int main() {
    const std::size_t n = std::size_t(1) << 16;
    numaplace::partition<double> part(n);
    std::atomic<std::size_t> seen{0};
    numaplace::parallel_for(part, [&](numaplace::subrange r) { seen += r.end() - r.begin(); });
    std::printf("numaplace::compiled: %zu node(s), parallel_for covered %zu of %zu indices\n",
                numaplace::topology::get().size(), seen.load(), n);
    return seen.load() == n ? 0 : 1;
}
