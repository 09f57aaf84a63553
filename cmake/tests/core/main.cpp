// numaplace::core without oneTBB: every header but parallel_for.hpp, replicated.hpp and numaplace.hpp.
#include <numaplace/allocator.hpp>
#include <numaplace/balancing.hpp>
#include <numaplace/error.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/replace.hpp>
#include <numaplace/shared_segment.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>

#include <cstdio>
#include <map>
#include <vector>

int main() {
    const auto& topo = numaplace::topology::get();
    std::vector<double, numaplace::interleaved_allocator<double>> v(
        std::size_t(1) << 18, 1.0, numaplace::interleaved_allocator<double>(topo.all()));
    std::pmr::map<int, int> m(&numaplace::node_pool(topo.nodes().front().id));
    m[1] = 2;
    const numaplace::page_histogram h = numaplace::where(v);
    std::printf("core consumer: %zu node(s), %zu pages, %zu untouched\n", topo.size(), h.pages, h.untouched);
    return h.pages > 0 && h.untouched == 0 && m[1] == 2 ? 0 : 1;
}
