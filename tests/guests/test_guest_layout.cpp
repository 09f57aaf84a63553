// Guest-only suite: what only means something with several nodes. Runs on the host too, where every
// test skips (one node). In the guests the harness sets NUMAPLACE_GUEST_LAYOUT, and each test asserts the
// exact facts of that layout (tests/guests/numa-guest):
//   2node       nodes 0,1: cpus 0-1 / 2-3, 1 GiB each, distance 21
//   4node       nodes 0-3: one cpu each, 512 MiB each, 21 within pairs (0-1, 2-3), 31 across
//   memonly     nodes 0,1 with cpus 0-1 / 2-3, node 2 memory-only (512 MiB), 21 and 30
//   restricted  2node, run inside a cpuset of cpus 2-3 and memory node 1
#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <owned_pages.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <hwloc.h>

using namespace numaplace;

namespace {
std::string layout() {
    const char* l = std::getenv("NUMAPLACE_GUEST_LAYOUT");
    return l ? l : "";
}
#define REQUIRE_SEVERAL_NODES()                                                                          \
    do {                                                                                                 \
        if (topology::get().size() < 2 && layout() != "restricted")                                      \
            GTEST_SKIP() << "one NUMA node here: this suite runs in the multi-node guests";             \
        if (layout().empty()) GTEST_SKIP() << "not in a numaplace guest (NUMAPLACE_GUEST_LAYOUT unset)"; \
    } while (0)

constexpr std::size_t mib = std::size_t(1) << 20;

std::string run(const std::string& command) {
    std::string out;
    FILE* p = popen(command.c_str(), "r");
    if (!p) return out;
    char buf[4096];
    std::size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    return out;
}
} // namespace

TEST(guest_layout, topology_matches_the_layout) {
    REQUIRE_SEVERAL_NODES();
    const auto& topo = topology::get();
    const std::string l = layout();
    if (l == "2node") {
        ASSERT_EQ(topo.size(), 2u);
        EXPECT_EQ(topo.at(0).cpus, (std::vector<unsigned>{0, 1}));
        EXPECT_EQ(topo.at(1).cpus, (std::vector<unsigned>{2, 3}));
        EXPECT_EQ(topo.distance(0, 1), 21u);
        EXPECT_EQ(topo.distance(1, 0), 21u);
    } else if (l == "4node") {
        ASSERT_EQ(topo.size(), 4u);
        for (int k = 0; k < 4; ++k) EXPECT_EQ(topo.at(k).cpus, (std::vector<unsigned>{static_cast<unsigned>(k)}));
        for (int a = 0; a < 4; ++a)
            for (int b = 0; b < 4; ++b) {
                unsigned expect = a == b ? 10u : (a / 2 == b / 2 ? 21u : 31u);
                EXPECT_EQ(topo.distance(a, b), expect) << a << "->" << b;
            }
    } else if (l == "memonly") {
        ASSERT_EQ(topo.size(), 3u);
        EXPECT_TRUE(topo.at(0).has_cpus());
        EXPECT_TRUE(topo.at(1).has_cpus());
        EXPECT_FALSE(topo.at(2).has_cpus());
        EXPECT_EQ(topo.with_cpus(), (node_set{0, 1}));
        EXPECT_EQ(topo.distance(0, 2), 30u);
        EXPECT_EQ(topo.distance(0, 1), 21u);
    } else if (l == "restricted") {
        ASSERT_EQ(topo.size(), 1u) << "only node 1 is usable in the cpuset";
        EXPECT_EQ(topo.at(0).os_index, 1u);
        EXPECT_EQ(topo.at(0).cpus, (std::vector<unsigned>{2, 3}));
        EXPECT_EQ(topo.capabilities().system_nodes, 2u);
    } else {
        FAIL() << "unknown layout " << l;
    }
    EXPECT_TRUE(topo.capabilities().memory_binding);
    EXPECT_TRUE(topo.capabilities().page_query);
}

TEST(guest_layout, node_allocator_puts_all_pages_on_each_node_memory_only_included) {
    REQUIRE_SEVERAL_NODES();
    for (const auto& node : topology::get().nodes()) {
        std::vector<char, node_allocator<char>> v(64 * mib, 1, node_allocator<char>(node.id));
        auto h = where(v);
        EXPECT_EQ(h.on(node.id), h.pages) << "node " << node.id << (node.has_cpus() ? "" : " (memory-only)");
        EXPECT_EQ(h.untouched, 0u);
    }
}

TEST(guest_layout, interleave_over_all_nodes_is_round_robin_within_one_page) {
    REQUIRE_SEVERAL_NODES();
    const auto& topo = topology::get();
    const std::size_t page = detail::page_size();
    const std::size_t pages = 4099; // not a multiple of 2, 3 or 4
    std::vector<char, interleaved_allocator<char>> v(pages * page, 1, interleaved_allocator<char>(topo.all()));
    auto h = where(v);
    std::size_t lo = SIZE_MAX, hi = 0;
    for (const auto& n : topo.nodes()) {
        lo = std::min(lo, h.on(n.id));
        hi = std::max(hi, h.on(n.id));
    }
    EXPECT_LE(hi - lo, 1u);
    EXPECT_EQ(h.untouched, 0u);
    int previous = -1;
    for (std::size_t i = 0; i < 256; ++i) {
        auto one = where(v.data() + i * page, 1);
        int node = -1;
        for (const auto& n : topo.nodes())
            if (one.on(n.id)) node = n.id;
        if (previous >= 0 && topo.size() > 1) EXPECT_EQ(node, (previous + 1) % static_cast<int>(topo.size())) << "page " << i;
        previous = node;
    }
}


TEST(guest_layout, partitioned_blocks_land_on_their_nodes_at_huge_and_odd_sizes) {
    REQUIRE_SEVERAL_NODES();
    const std::size_t huge = detail::huge_page_size();
    for (std::size_t bytes : {64 * mib, 64 * mib + 3 * 4096 + 8, 8 * huge, 8 * huge - 8}) {
        const std::size_t n = bytes / sizeof(double);
        for (fallback fb : {fallback::strict, fallback::degrade}) {
            partition<double> part(n);
            // default-init: nothing touched until first_touch, block k from arena k
            partitioned_vector<double> v(n, partitioned_allocator<double>(part, fb));
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % part.alignment(), 0u) << "an allocation starts on a grain";
            first_touch(v);
            // each grain (a huge page where the partition places huge pages) on the node of the block
            // holding its first byte: exact page counts per node, at most one shared grain per edge
            numaplace_test::expect_pages_on_their_owners(v.data(), part,
                                         std::to_string(bytes) + " bytes, alignment " + std::to_string(part.alignment()) +
                                             (fb == fallback::strict ? ", strict" : ", degrade"));
        }
    }
}

TEST(guest_layout, rows_partition_pages_of_block_k_rows_on_node_k_at_odd_row_lengths) {
    REQUIRE_SEVERAL_NODES();
    // A of m x n doubles by whole rows (the seeds' DGEMV): rows of 8 KiB, of an odd 24 008 bytes, and of
    // half a page; allocated by the rows partition, initialised by the row loop, pages checked per block.
    for (std::size_t cols : {std::size_t(1024), std::size_t(3001), std::size_t(256)}) {
        const std::size_t m = 64 * mib / (cols * sizeof(double));
        const auto rows = partition<double>::rows(m, cols);
        // Compute edges are exact, not page aligned (the old rule put them on page boundaries): edge k is
        // ceil(m x (w_0 + ... + w_{k-1}) / total), so each block holds its weighted share to within one row.
        const auto& w = rows.weights();
        detail::wide_uint total = 0, prefix = 0;
        for (std::size_t x : w) total += x;
        for (std::size_t k = 0; k < rows.block_count(); ++k) {
            const auto edge = [&](detail::wide_uint p) { return static_cast<std::size_t>((m * p + total - 1) / total); };
            EXPECT_EQ(rows.block(k).begin, edge(prefix)) << "block " << k << ", " << cols << " columns";
            prefix += w[k];
            EXPECT_EQ(rows.block(k).end, edge(prefix)) << "block " << k << ", " << cols << " columns";
        }
        partitioned_vector<double> a(m * cols, partitioned_allocator<double>(rows));
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % rows.alignment(), 0u) << "an allocation starts on a grain";
        parallel_for(rows, [&](subrange r) {
            for (std::size_t i = r.begin(); i < r.end(); ++i)
                for (std::size_t j = 0; j < cols; ++j) a[i * cols + j] = 1.0;
        });
        // bound by the allocator: each grain on the node of the block holding its first byte (a page
        // straddling an edge belongs to the earlier block, whichever block wrote it first)
        numaplace_test::expect_pages_on_their_owners(a.data(), rows.elements(),
                                     std::to_string(cols) + " columns, alignment " + std::to_string(rows.alignment()));
    }
}

TEST(guest_layout, first_touch_alone_splits_plain_memory_by_block_with_thp_on) {
    REQUIRE_SEVERAL_NODES();
    // No binding at all: only which arena touches decides. THP is on in the guests, so the partition's
    // edges must be huge-page aligned or the range kept off huge pages.
    for (std::size_t bytes : {96 * mib, 96 * mib + 40 * 1024}) {
        const std::size_t n = bytes / sizeof(float);
        void* raw = memory::map(bytes, detail::huge_page_size());
        auto* data = static_cast<float*>(raw);
        partition<float> part(n);
        first_touch(data, part);
        auto loc = where(data, part);
        EXPECT_EQ(loc.remote, 0u) << bytes << " bytes, alignment " << part.alignment() << ", thp "
                                  << topology::get().capabilities().thp;
        EXPECT_EQ(loc.histogram.untouched, 0u);
        memory::unmap(raw, bytes);
    }
}

TEST(guest_layout, serial_initialisation_puts_everything_on_the_initialising_node) {
    REQUIRE_SEVERAL_NODES();
    // The seeds' baseline problem, as a fact: one thread fills a plain std::vector, every page lands on
    // that thread's node, and a loop over the other nodes' blocks then reads remote memory.
    for (int node : topology::get().with_cpus()) {
        std::vector<double> v;
        std::thread t([&] {
            hwloc_set_cpubind(topology::get().native(), topology::get().native_node(node)->cpuset, HWLOC_CPUBIND_THREAD);
            v.assign(32 * mib / sizeof(double), 1.0);
        });
        t.join();
        auto h = where(v);
        EXPECT_EQ(h.on(node), h.pages) << "initialised on node " << node;
        partition<double> part(v.size());
        if (topology::get().with_cpus().size() > 1) {
            auto loc = where(v.data(), part);
            EXPECT_LT(loc.fraction(), 1.0) << "the other nodes' blocks are remote";
        }
    }
}

TEST(guest_layout, parallel_for_runs_block_k_on_node_k_only) {
    REQUIRE_SEVERAL_NODES();
    const auto& topo = topology::get();
    const std::size_t n = 1u << 22;
    partition<int> part(n);
    std::vector<int> cpu(n, -1);
    parallel_for(part, [&](subrange r) {
        int c = sched_getcpu();
        for (std::size_t i = r.begin(); i < r.end(); ++i) cpu[i] = c;
    }, 1024);
    std::set<int> nodes_used;
    for (const auto& b : part.blocks()) {
        std::size_t off = 0;
        for (std::size_t i = b.begin; i < b.end; ++i) {
            int node = topo.node_of_cpu(static_cast<unsigned>(cpu[i]));
            off += node != b.node;
            nodes_used.insert(node);
        }
        EXPECT_EQ(off, 0u) << "block of node " << b.node;
    }
    EXPECT_EQ(nodes_used.size(), topo.with_cpus().size());
    if (layout() == "restricted") {
        for (int c : cpu) ASSERT_TRUE(c == 2 || c == 3) << "ran on cpu " << c << " outside the cpuset";
    }
}

TEST(guest_layout, restricted_nothing_lands_outside_the_cpuset) {
    REQUIRE_SEVERAL_NODES();
    if (layout() != "restricted") GTEST_SKIP() << "restricted layout only";
    // Every placement we can ask for lands on OS node 1 (our node 0): the kernel's mems_allowed holds.
    std::vector<char, interleaved_allocator<char>> a(16 * mib, 1, interleaved_allocator<char>(topology::get().all()));
    std::vector<char> b(16 * mib, 1);
    for (const auto* v : {static_cast<const void*>(a.data()), static_cast<const void*>(b.data())}) {
        auto h = where(v, 16 * mib);
        EXPECT_EQ(h.on(0), h.pages);
        EXPECT_EQ(h.elsewhere, 0u);
    }
    EXPECT_THROW(on_node(1), unknown_node) << "node 1 of the machine is not usable here";
}

TEST(guest_layout, numaplace_info_prints_the_nodes_and_distances) {
    REQUIRE_SEVERAL_NODES();
    const std::string exe = NUMAPLACE_INFO_EXE;
    ASSERT_FALSE(exe.empty()) << "numaplace-info not built";
    const std::string out = run(exe);
    const auto& topo = topology::get();
    EXPECT_NE(out.find("nodes: " + std::to_string(topo.size()) + " usable"), std::string::npos) << out;
    for (const auto& n : topo.nodes()) {
        EXPECT_NE(out.find("node " + std::to_string(n.id) + " (os " + std::to_string(n.os_index) + ")"), std::string::npos) << out;
        // the distance row as the kernel has it
        std::ifstream in("/sys/devices/system/node/node" + std::to_string(n.os_index) + "/distance");
        std::vector<unsigned> row;
        unsigned d;
        while (in >> d) row.push_back(d);
        std::string expect = (n.id < 10 ? "   " : "  ") + std::to_string(n.id) + ":";
        for (const auto& m : topo.nodes()) {
            unsigned dist = row.at(m.os_index);
            expect += std::string(dist < 10 ? "   " : dist < 100 ? "  " : " ") + std::to_string(dist);
        }
        EXPECT_NE(out.find(expect + "\n"), std::string::npos) << "missing row '" << expect << "' in\n" << out;
    }
    if (layout() == "memonly") EXPECT_NE(out.find("memory-only (no cpus)"), std::string::npos) << out;
    if (layout() == "restricted") EXPECT_NE(out.find("of 2 online (the cpuset or hwloc's settings hide the rest)"), std::string::npos) << out;
}
