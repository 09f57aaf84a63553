// numaplace-info: the machine as numaplace sees it. Nodes, CPUs, memory, distances and every capability,
// the way `numactl --hardware` does, with each degradation spelled out.
#include <numaplace/numaplace.hpp>

#include <cstring>
#include <iostream>

int main(int argc, char** argv) {
    const bool brief = argc > 1 && std::strcmp(argv[1], "--brief") == 0;
    try {
        const auto& topo = numaplace::topology::get();
        if (brief) {
            std::cout << topo.size() << " node(s):";
            for (const auto& n : topo.nodes()) std::cout << ' ' << n.id << '[' << n.cpus.size() << " cpus]";
            std::cout << "; binding " << (topo.capabilities().memory_binding ? "works" : "REFUSED")
                      << "; arenas: " << numaplace::name(numaplace::arena_capabilities().pinning) << '\n';
            return 0;
        }
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
