// Conan test_package: the installed headers compile, link against hwloc and oneTBB, and run, on any
// machine and in containers. Under Docker's default seccomp profile the kernel refuses memory binding
// (EPERM): that is reported in one line and the program still exits 0.
#ifdef _OPENMP
#error "numaplace::numaplace brings OpenMP flags: only numaplace::omp may"
#endif
#include <numaplace/numaplace.hpp>

#include <cerrno>
#include <cstdio>
#include <vector>

int main() {
    const auto& topo = numaplace::topology::get();
    const int node = topo.nodes().front().id;
    std::printf("numaplace: %zu node(s), memory binding %s\n", topo.size(),
                topo.capabilities().memory_binding ? "allowed" : "refused");
    std::fflush(stdout);
    try {
        std::vector<int, numaplace::node_allocator<int>> v(1024, 7, numaplace::node_allocator<int>(node));
        long sum = 0;
        for (int x : v) sum += x;
        std::printf("numaplace: 1024 ints on node %d, sum %ld\n", node, sum);
        return sum == 7 * 1024 ? 0 : 1;
    } catch (const numaplace::placement_error& e) {
        if (e.error_number() != EPERM) throw;
        std::printf("numaplace: memory binding refused by the sandbox (EPERM; in Docker: --cap-add SYS_NICE): %s\n",
                    e.what());
        return 0;
    }
}
