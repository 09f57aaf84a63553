// numaplace-info: the machine as numaplace sees it. Nodes, CPUs, memory, distances and every capability,
// the way `numactl --hardware` does, with each degradation spelled out.
#include <numaplace/numaplace.hpp>

#include <iostream>

int main() {
    try {
        const auto& topo = numaplace::topology::get();
        numaplace::print_report(std::cout, topo);
        const auto& arenas = numaplace::arena_capabilities();
        std::cout << "oneTBB interface version:    " << arenas.tbb_interface_version << '\n'
                  << "tbbbind loaded:              " << (arenas.tbbbind_loaded ? "yes" : "NO") << '\n'
                  << "oneTBB numa nodes:          ";
        for (int id : arenas.tbb_numa_nodes) std::cout << ' ' << id;
        std::cout << (arenas.tbb_numa_nodes.size() == 1 && arenas.tbb_numa_nodes[0] == -1 ? "  (TBB sees no NUMA)" : "")
                  << "\narena pinning:               " << numaplace::name(arenas.pinning) << " — " << arenas.reason
                  << '\n';
    } catch (const std::exception& e) {
        std::cerr << "numaplace-info: " << e.what() << '\n';
        return 1;
    }
    return 0;
}
