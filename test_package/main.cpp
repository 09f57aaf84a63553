// Conan test_package: the installed headers compile, link against hwloc and oneTBB, and run.
#include <numaplace/numaplace.hpp>

#include <cstdio>
#include <vector>

int main() {
    const auto& topo = numaplace::topology::get();
    const int node = topo.nodes().front().id;
    std::vector<int, numaplace::node_allocator<int>> v(1024, 7, numaplace::node_allocator<int>(node));
    long sum = 0;
    for (int x : v) sum += x;
    std::printf("numaplace: %zu node(s); 1024 ints on node %d, sum %ld\n", topo.size(), node, sum);
    return sum == 7 * 1024 ? 0 : 1;
}
