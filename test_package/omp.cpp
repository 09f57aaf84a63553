// Conan test_package, component numaplace::omp: a schedule(static) loop into a vector placed by the
// team's static partition; every element written once.
#include <numaplace/allocator.hpp>
#include <numaplace/omp.hpp>

#include <cstdio>
#include <vector>

int main() {
    const long n = 10007;
    const auto part = numaplace::omp::static_partition<int>(static_cast<std::size_t>(n));
    std::vector<int, numaplace::partitioned_allocator<int>> v(static_cast<std::size_t>(n), 0,
                                                              numaplace::partitioned_allocator<int>(part));
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] += 1;
    for (int x : v)
        if (x != 1) return 1;
    std::printf("numaplace::omp: %zu node(s) in the team\n", numaplace::omp::team::current().nodes().size());
    return 0;
}
