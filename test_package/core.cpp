// Conan test_package, component numaplace::core: the topology without oneTBB.
#ifdef _OPENMP
#error "numaplace::core brings OpenMP flags: only numaplace::omp may"
#endif
#include <numaplace/topology.hpp>

#include <cstdio>

int main() {
    std::printf("numaplace::core: %zu node(s)\n", numaplace::topology::get().size());
    return numaplace::topology::get().size() > 0 ? 0 : 1;
}
