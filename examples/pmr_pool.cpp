// std::pmr containers on numaplace resources: a pooled small-object resource per node, and a page
// resource with any placement for large buffers.
#include <numaplace/numaplace.hpp>

#include "sandbox.hpp"

#include <cstdio>
#include <map>
#include <memory_resource>
#include <string>
#include <vector>

namespace {
int run() {
    const auto& topo = numaplace::topology::get();
    const int last = static_cast<int>(topo.size()) - 1;

    // Small objects on the last node (a map of strings: nodes and string buffers from node_pool).
    std::pmr::map<int, std::pmr::string> names(&numaplace::node_pool(last));
    for (int i = 0; i < 1000; ++i) names.emplace(i, "a string long enough to need its own buffer #" + std::to_string(i));

    // A large buffer interleaved over all nodes.
    numaplace::page_resource<numaplace::interleaved> interleaved{numaplace::interleaved(topo.all())};
    std::pmr::vector<double> big(&interleaved);
    big.resize(std::size_t(1) << 22, 1.0);

    auto h = numaplace::where(big);
    std::printf("map of %zu strings on node %d: first entry's node page count %zu\n", names.size(), last,
                numaplace::where(&*names.begin(), 64).on(last));
    std::printf("interleaved vector: %zu pages:", h.pages);
    for (const auto& n : topo.nodes()) std::printf(" node %d: %zu", n.id, h.on(n.id));
    std::printf("\n");
    return 0;
}
} // namespace

int main() {
    try {
        return run();
    } catch (const std::exception& e) {
        return numaplace_examples::report("pmr_pool", e);
    }
}
