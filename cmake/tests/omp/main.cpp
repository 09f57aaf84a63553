// Consumer of numaplace::omp: an unchanged schedule(static) loop writes a vector whose pages follow the
// team's static schedule (omp::static_partition); then omp::parallel_for over the same partition. Exits 0
// when every index was written once by each loop.
#include <numaplace/allocator.hpp>
#include <numaplace/omp.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

int main() {
    const std::size_t n = 100003;
    const numaplace::omp::team team = numaplace::omp::team::current();
    const auto part = numaplace::omp::static_partition<double>(n, team);
    std::vector<double, numaplace::partitioned_allocator<double>> v(n, numaplace::partitioned_allocator<double>(part));
    const auto count = static_cast<long>(n);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = 1.0;
    numaplace::omp::parallel_for(part, [&](numaplace::subrange r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) v[i] += 1.0;
    }, team);
    for (double x : v)
        if (x != 2.0) return 1;
    std::printf("numaplace::omp: %d thread(s) on %zu node(s), %zu elements\n", team.size(), team.nodes().size(), n);
    return 0;
}
