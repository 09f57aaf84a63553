// Three processes share one segment of 4, 3 and 3 pages (the notes' example); each owns one block,
// which should be on its own node. The segment's creator binds each block to its owner's node, so it
// does not matter who touches first. Prints where each block is. Exits 0 under a container's seccomp
// profile too: binding then degrades to first touch and the report says so.
#include <numaplace/shared_segment.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <system_error>
#include <vector>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

int main() {
    using namespace numaplace;
    try {
        const auto& topo = topology::get();
        const node_set nodes = topo.with_cpus().empty() ? topo.all() : topo.with_cpus();
        const std::size_t pages[3] = {4, 3, 3};
        std::vector<segment_part> parts;
        for (std::size_t k = 0; k < 3; ++k) parts.push_back({nodes[k % nodes.size()], pages[k]});
        shared_segment segment = shared_segment::create(segment_layout(parts), fallback::degrade);
        std::printf("segment: %zu pages, fd %d, %s\n", segment.bytes() / detail::page_size(), segment.fd(),
                    segment.bound() ? "each block bound to its node"
                                    : "binding refused: blocks left to first touch (see degradations below)");
        for (const auto& m : degradations()) std::printf("  degraded: %s\n", m.c_str());

        // the owners touch their blocks last to first, each on a CPU of its node where pinning works
        for (std::size_t i = 0; i < 3; ++i) {
            const std::size_t k = 2 - i;
            pid_t pid = ::fork();
            if (pid < 0) {
                std::perror("fork");
                return 1;
            }
            if (pid == 0) {
                const node& n = topo.at(parts[k].node);
                if (n.has_cpus()) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    for (unsigned cpu : n.cpus) CPU_SET(cpu, &set);
                    ::sched_setaffinity(0, sizeof set, &set); // best effort: the binding does not need it
                }
                segment_block b = segment.block(k);
                std::memset(b.data, static_cast<int>('A' + k), b.bytes);
                ::_exit(0);
            }
            int status = 0;
            ::waitpid(pid, &status, 0);
        }
        for (std::size_t k = 0; k < 3; ++k) {
            segment_block b = segment.block(k);
            std::printf("process %zu: %zu pages, wants node %d: ", k, b.bytes / detail::page_size(), b.node);
            try {
                page_histogram h = segment.where(k);
                for (std::size_t id = 0; id < h.per_node.size(); ++id)
                    if (h.per_node[id]) std::printf("%zu on node %zu  ", h.per_node[id], id);
                if (h.untouched) std::printf("%zu untouched", h.untouched);
                std::printf("%s\n", h.on(b.node) == h.pages ? "(all local)" : "(NOT all local)");
            } catch (const std::system_error& e) {
                std::printf("page query refused (%s): placement unknown\n", e.what());
            }
        }
        return 0;
    } catch (const std::exception& e) {
        std::printf("shared_segment example: %s\n", e.what());
        return 1;
    }
}
