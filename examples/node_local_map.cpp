// One std::unordered_map per node, each allocated on its node and filled by a thread on that node:
// small objects (map nodes) come from the node's small-object heap, not one mmap each.
#include <numaplace/numaplace.hpp>

#include "sandbox.hpp"

#include <cstdio>
#include <functional>
#include <unordered_map>
#include <vector>

namespace {
int run() {
    using value = std::pair<const long, long>;
    using node_map = std::unordered_map<long, long, std::hash<long>, std::equal_to<long>, numaplace::node_allocator<value>>;
    const auto& topo = numaplace::topology::get();
    const auto nodes = topo.with_cpus();
    std::vector<node_map> maps;
    for (int id : nodes) maps.emplace_back(0, std::hash<long>(), std::equal_to<long>(), numaplace::node_allocator<value>(id));

    // One element per node, so parallel_for runs one block on each node: that block fills its node's map.
    numaplace::partition<char> part(nodes.size() * 4096);
    numaplace::parallel_for(part, [&](numaplace::subrange r) {
        if (r.begin() % 4096 != 0) return; // the first index of each block does the work
        auto& m = maps[static_cast<std::size_t>(std::find(nodes.begin(), nodes.end(), r.node()) - nodes.begin())];
        for (long i = 0; i < 100000; ++i) m.emplace(i, i * i);
    }, 4096);

    for (std::size_t k = 0; k < maps.size(); ++k) {
        const auto& m = maps[k];
        std::size_t on_node = 0, total = 0;
        for (const auto& kv : m) {
            auto h = numaplace::where(&kv, sizeof kv);
            on_node += h.on(nodes[k]);
            total += 1;
        }
        std::printf("node %d: %zu entries, %zu of them on node %d\n", nodes[k], total, on_node, nodes[k]);
        if (on_node != total) return 1;
    }
    return 0;
}
} // namespace

int main() {
    try {
        return run();
    } catch (const std::exception& e) {
        return numaplace_examples::report("node_local_map", e);
    }
}
