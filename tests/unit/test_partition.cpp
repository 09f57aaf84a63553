// partition.hpp: blocked split of [0,n) over nodes. Exact on any topology: expectations are computed
// from the topology the partition is built over (the process's, or synthetic/XML ones for 2, 4, 8 nodes).

#include <numaplace/partition.hpp>
#include <numaplace/topology.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

using numaplace::block;
using numaplace::edge_alignment;
using numaplace::node_set;
using numaplace::partition;
using numaplace::topology;

namespace {

const std::size_t page = numaplace::detail::page_size();
const std::size_t huge = numaplace::detail::huge_page_size();

// Two packages with 3 and 1 cores (hwloc's synthetic syntax cannot express different arities), and a
// memory-only node in a CPU-less group, which is how hwloc's Linux backend attaches a node whose
// sysfs cpumap is empty (CXL, HBM).
const char* const asymmetric_xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f" allowed_cpuset="0x0000000f" nodeset="0x00000007" complete_nodeset="0x00000007" allowed_nodeset="0x00000007" gp_index="1">
    <object type="Package" os_index="0" cpuset="0x00000007" complete_cpuset="0x00000007" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2">
      <object type="NUMANode" os_index="0" cpuset="0x00000007" complete_cpuset="0x00000007" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3" local_memory="1073741824"/>
      <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
        <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="5"/>
      </object>
      <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="6">
        <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="7"/>
      </object>
      <object type="Core" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="8">
        <object type="PU" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="9"/>
      </object>
    </object>
    <object type="Package" os_index="1" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="10">
      <object type="NUMANode" os_index="1" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="11" local_memory="1073741824"/>
      <object type="Core" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="12">
        <object type="PU" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008" nodeset="0x00000002" complete_nodeset="0x00000002" gp_index="13"/>
      </object>
    </object>
    <object type="Group" cpuset="0x0" complete_cpuset="0x0" nodeset="0x00000004" complete_nodeset="0x00000004" gp_index="14" kind="1001" subkind="0">
      <object type="NUMANode" os_index="2" cpuset="0x0" complete_cpuset="0x0" nodeset="0x00000004" complete_nodeset="0x00000004" gp_index="15" local_memory="536870912"/>
    </object>
  </object>
</topology>
)";

std::unique_ptr<topology> asymmetric_topology() {
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/numaplace_partition_XXXXXX";
    std::vector<char> path(name.begin(), name.end());
    path.push_back('\0');
    int fd = ::mkstemp(path.data());
    if (fd < 0) throw std::runtime_error("cannot create a temporary file for the XML topology");
    ::close(fd);
    {
        std::ofstream out(path.data());
        out << asymmetric_xml;
    }
    std::unique_ptr<topology> t;
    try {
        t = topology::from_xml(path.data());
    } catch (...) {
        std::remove(path.data());
        throw;
    }
    std::remove(path.data());
    return t;
}

const topology& synthetic(int nodes) {
    static const auto two = topology::from_synthetic("pack:2 numa:1 core:4 pu:1");
    static const auto four = topology::from_synthetic("pack:4 numa:1 core:2 pu:2");
    static const auto eight = topology::from_synthetic("pack:2 group:4 numa:1 core:1 pu:1");
    return nodes == 2 ? *two : nodes == 4 ? *four : *eight;
}

const topology& asymmetric() {
    static const auto t = asymmetric_topology();
    return *t;
}

__extension__ typedef unsigned __int128 wide;

// e * element_size % alignment, without overflowing (e * element_size may exceed 64 bits).
std::size_t misalignment(std::size_t e, std::size_t element_size, std::size_t alignment) {
    return static_cast<std::size_t>(static_cast<wide>(e) * element_size % alignment);
}

// The contract: one block per node in node order, contiguous, covering [0,n) exactly once, every inner
// edge on an alignment boundary of the element array.
void expect_well_formed(const partition& p) {
    SCOPED_TRACE("n=" + std::to_string(p.size()) + " element_size=" + std::to_string(p.element_size()) +
                 " alignment=" + std::to_string(p.alignment()));
    const auto& blocks = p.blocks();
    ASSERT_EQ(blocks.size(), p.nodes().size());
    ASSERT_FALSE(blocks.empty());
    EXPECT_EQ(blocks.front().begin, 0u);
    EXPECT_EQ(blocks.back().end, p.size());
    EXPECT_TRUE(p.alignment() == page || p.alignment() == huge) << p.alignment();
    EXPECT_EQ(p.needs_no_huge_pages(), p.alignment() < huge);
    std::size_t covered = 0;
    for (std::size_t k = 0; k < blocks.size(); ++k) {
        EXPECT_EQ(blocks[k].node, p.nodes()[k]) << "block " << k;
        EXPECT_LE(blocks[k].begin, blocks[k].end) << "block " << k;
        if (k > 0) {
            EXPECT_EQ(blocks[k].begin, blocks[k - 1].end) << "block " << k;
            EXPECT_LT(blocks[k - 1].node, blocks[k].node) << "block " << k;
        }
        if (blocks[k].end != p.size())
            EXPECT_EQ(misalignment(blocks[k].end, p.element_size(), p.alignment()), 0u)
                << "edge " << blocks[k].end << " of block " << k;
        covered += blocks[k].size();
    }
    EXPECT_EQ(covered, p.size());
}

std::vector<std::size_t> sizes_to_try(std::size_t nodes) {
    std::vector<std::size_t> n = {0, 1, 2, 3, 7, 4096, 4097, 3 * 4096, 65536, 7919, 104729, 1000003,
                                  10000000, std::size_t(1) << 20, (std::size_t(1) << 20) + 1};
    for (std::size_t i = 1; i < nodes; ++i) n.push_back(i); // fewer than nodes
    for (std::size_t k = 1; k <= 8; ++k) n.push_back(k * page); // page multiples
    n.push_back(8 * huge * nodes);     // on the automatic threshold (element size 1)
    n.push_back(8 * huge * nodes - 1); // just below
    return n;
}

const std::vector<std::size_t> element_sizes = {1, 3, 8, 24, 4096, 3000, 5000};

std::vector<const topology*> all_topologies() {
    return {&topology::get(), &synthetic(2), &synthetic(4), &synthetic(8), &asymmetric()};
}

// The documented automatic rule: huge-page edges iff THP is "always" and every block with a non-zero
// weight still gets at least eight huge pages.
std::size_t expected_automatic_alignment(std::size_t n, std::size_t element_size,
                                         const std::vector<std::size_t>& weights) {
    if (topology::get().capabilities().thp != "always") return page;
    const long double bytes = static_cast<long double>(n) * static_cast<long double>(element_size);
    const long double total = static_cast<long double>(std::accumulate(weights.begin(), weights.end(), std::size_t(0)));
    for (std::size_t w : weights)
        if (w != 0 && bytes * static_cast<long double>(w) / total < 8.0L * static_cast<long double>(huge)) return page;
    return huge;
}

} // namespace

TEST(partition, synthetic_topologies_have_the_nodes_and_cores_the_tests_assume) {
    EXPECT_EQ(synthetic(2).size(), 2u);
    EXPECT_EQ(synthetic(4).size(), 4u);
    EXPECT_EQ(synthetic(8).size(), 8u);
    for (int n : {2, 4, 8}) {
        for (const auto& node : synthetic(n).nodes()) {
            EXPECT_TRUE(node.has_cpus());
            EXPECT_GT(node.cores, 0u);
        }
    }
    EXPECT_EQ(synthetic(2).at(0).cores, 4u);
    EXPECT_EQ(synthetic(4).at(3).cores, 2u); // cores, not PUs (pu:2)
    EXPECT_EQ(synthetic(4).at(3).cpus.size(), 4u);
    ASSERT_EQ(asymmetric().size(), 3u);
    EXPECT_EQ(asymmetric().at(0).cores, 3u);
    EXPECT_EQ(asymmetric().at(1).cores, 1u);
    EXPECT_FALSE(asymmetric().at(2).has_cpus());
    EXPECT_EQ(asymmetric().at(2).cores, 0u);
    EXPECT_EQ(asymmetric().with_cpus(), (node_set{0, 1}));
}

TEST(partition, default_partition_is_empty) {
    partition p;
    EXPECT_EQ(p.size(), 0u);
    EXPECT_TRUE(p.blocks().empty());
    EXPECT_TRUE(p.nodes().empty());
    EXPECT_EQ(p, partition());
}

TEST(partition, covers_every_index_exactly_once_on_every_topology) {
    for (const topology* topo : all_topologies()) {
        const std::size_t nodes = topo->with_cpus().size();
        for (std::size_t n : sizes_to_try(nodes))
            for (std::size_t s : element_sizes) {
                partition p(n, s, *topo);
                EXPECT_EQ(p.size(), n);
                EXPECT_EQ(p.element_size(), s);
                EXPECT_EQ(p.nodes(), topo->with_cpus());
                expect_well_formed(p);
            }
    }
}

TEST(partition, covers_a_brute_force_check_of_small_ranges) {
    // every index in exactly one block, and block_of agrees
    for (const topology* topo : all_topologies())
        for (std::size_t s : {std::size_t(1), std::size_t(8), std::size_t(3000)})
            for (std::size_t n : {std::size_t(0), std::size_t(5), std::size_t(3 * 4096 + 5), std::size_t(50000)}) {
                partition p(n, s, *topo, edge_alignment::page);
                std::vector<int> hits(n, 0);
                for (const auto& b : p.blocks())
                    for (std::size_t i = b.begin; i < b.end; ++i) ++hits[i];
                for (std::size_t i = 0; i < n; ++i) {
                    ASSERT_EQ(hits[i], 1) << "index " << i << " n " << n << " s " << s;
                    const block& b = p.block_of(i);
                    ASSERT_TRUE(b.begin <= i && i < b.end) << "index " << i;
                }
            }
}

TEST(partition, huge_ranges_do_not_overflow) {
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    for (const topology* topo : all_topologies()) {
        for (std::size_t n : {std::size_t(1) << 60, max, max - 1, max / 3})
            for (std::size_t s : element_sizes)
                for (edge_alignment a : {edge_alignment::automatic, edge_alignment::page, edge_alignment::huge}) {
                    partition p(n, s, *topo, a);
                    expect_well_formed(p);
                    // blocks are balanced by cores: each within one alignment unit of its share
                    const auto& w = p.weights();
                    const std::size_t total = std::accumulate(w.begin(), w.end(), std::size_t(0));
                    const std::size_t step = p.alignment() / std::gcd(s, p.alignment());
                    for (std::size_t k = 0; k < p.blocks().size(); ++k) {
                        const long double share = static_cast<long double>(n) * static_cast<long double>(w[k]) /
                                                  static_cast<long double>(total);
                        const long double diff = static_cast<long double>(p.blocks()[k].size()) - share;
                        EXPECT_LE(diff < 0 ? -diff : diff, 2.0L * static_cast<long double>(step) + share * 1e-15L)
                            << "block " << k << " n " << n << " s " << s;
                    }
                }
    }
    // element size 1 over 2^60: exact edges (units of one page)
    const std::size_t n = std::size_t(1) << 60;
    partition p(n, 1, synthetic(4), edge_alignment::page);
    for (std::size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(p.blocks()[k].begin, k * (n / 4));
        EXPECT_EQ(p.blocks()[k].end, (k + 1) * (n / 4));
    }
}

TEST(partition, inner_edges_fall_on_page_boundaries_of_the_element_array) {
    for (const topology* topo : all_topologies())
        for (std::size_t s : element_sizes)
            for (std::size_t n : sizes_to_try(topo->with_cpus().size())) {
                partition p(n, s, *topo, edge_alignment::page);
                EXPECT_EQ(p.alignment(), page);
                EXPECT_TRUE(p.needs_no_huge_pages() || page == huge);
                expect_well_formed(p);
                for (const auto& b : p.blocks())
                    if (b.end != n) EXPECT_EQ(b.end * s % page, 0u) << "edge " << b.end << " s " << s << " n " << n;
            }
}

TEST(partition, element_sizes_that_do_not_divide_the_page_use_the_lcm_as_unit) {
    // 3000-byte elements: lcm(3000, 4096) = 1536000 bytes = 512 elements; 5000: 2560000 = 512 elements.
    if (page != 4096) GTEST_SKIP() << "page size " << page;
    const auto& topo = synthetic(2);
    for (std::size_t s : {std::size_t(3000), std::size_t(5000), std::size_t(24), std::size_t(3)}) {
        const std::size_t step = page / std::gcd(s, page);
        partition p(10 * step, s, topo, edge_alignment::page);
        ASSERT_EQ(p.blocks().size(), 2u);
        EXPECT_EQ(p.blocks()[0].end, 5 * step) << s;
        // an odd number of units: the first block gets the smaller share (floor of the cumulative weight)
        partition q(11 * step, s, topo, edge_alignment::page);
        EXPECT_EQ(q.blocks()[0].end, 5 * step) << s;
        // a partial last unit counts as a unit
        partition r(10 * step + 1, s, topo, edge_alignment::page);
        EXPECT_EQ(r.blocks()[0].end, 5 * step) << s;
        EXPECT_EQ(r.blocks()[1].end, 10 * step + 1) << s;
    }
}

TEST(partition, explicit_huge_alignment) {
    for (const topology* topo : all_topologies())
        for (std::size_t s : element_sizes)
            for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(10000000), std::size_t(123456789)}) {
                partition p(n, s, *topo, edge_alignment::huge);
                EXPECT_EQ(p.alignment(), huge);
                EXPECT_FALSE(p.needs_no_huge_pages());
                expect_well_formed(p);
                for (const auto& b : p.blocks())
                    if (b.end != n) EXPECT_EQ(misalignment(b.end, s, huge), 0u) << "edge " << b.end << " s " << s;
            }
    // 4 nodes, 8-byte elements, 64 MiB: 32 huge pages, 8 per node, edges exact
    const std::size_t n = 32 * huge / 8;
    partition p(n, 8, synthetic(4), edge_alignment::huge);
    for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(p.blocks()[k].end, (k + 1) * n / 4);
    // fewer huge pages than nodes: the first nodes get nothing, the last takes everything
    partition small(huge / 8, 8, synthetic(4), edge_alignment::huge);
    EXPECT_EQ(small.blocks()[3].size(), huge / 8);
    for (std::size_t k = 0; k < 3; ++k) EXPECT_TRUE(small.blocks()[k].empty()) << k;
}

TEST(partition, automatic_alignment_follows_thp_mode_and_block_size) {
    const std::string thp = topology::get().capabilities().thp;
    for (const topology* topo : all_topologies()) {
        const auto cpu_nodes = topo->with_cpus();
        const auto weights = partition::core_weights(*topo, cpu_nodes);
        const std::size_t used = cpu_nodes.size();
        // Element size 1: the threshold is in bytes. Equal weights: 8 huge pages per block exactly.
        bool equal = true;
        for (auto w : weights) equal = equal && w == weights[0];
        for (std::size_t n : {std::size_t(0), std::size_t(4096), 8 * huge * used - 1, 8 * huge * used,
                              64 * huge * used, std::size_t(1) << 40}) {
            for (std::size_t s : {std::size_t(1), std::size_t(8)}) {
                partition p(n, s, *topo);
                const std::size_t expected = expected_automatic_alignment(n, s, weights);
                EXPECT_EQ(p.alignment(), expected) << "thp " << thp << " n " << n << " s " << s;
                expect_well_formed(p);
                if (thp != "always") EXPECT_TRUE(p.needs_no_huge_pages() || page == huge);
            }
        }
        if (equal && thp == "always") {
            EXPECT_EQ(partition(8 * huge * used, 1, *topo).alignment(), huge);
            EXPECT_EQ(partition(8 * huge * used - 1, 1, *topo).alignment(), page);
        }
        if (thp != "always") EXPECT_EQ(partition(std::size_t(1) << 40, 8, *topo).alignment(), page);
    }
}

TEST(partition, automatic_alignment_gives_every_weighted_block_eight_huge_pages) {
    // {3,1} over 16 huge pages: the small block would get 4 huge pages, fewer than 8: page edges.
    // Over 32 huge pages it gets 8: huge edges when THP is always.
    const auto& topo = synthetic(2);
    const bool always = topology::get().capabilities().thp == "always";
    partition small(16 * huge, 1, node_set{0, 1}, {3, 1}, edge_alignment::automatic, topo);
    EXPECT_EQ(small.alignment(), page);
    partition large(32 * huge, 1, node_set{0, 1}, {3, 1}, edge_alignment::automatic, topo);
    EXPECT_EQ(large.alignment(), always ? huge : page);
    if (always) {
        EXPECT_EQ(large.blocks()[0].size(), 24 * huge);
        EXPECT_EQ(large.blocks()[1].size(), 8 * huge);
    }
    // zero weights do not count as blocks
    partition with_zero(16 * huge, 1, node_set{0, 1}, {0, 1}, edge_alignment::automatic, topo);
    EXPECT_EQ(with_zero.alignment(), always ? huge : page);
    EXPECT_TRUE(with_zero.blocks()[0].empty());
}

TEST(partition, default_weights_are_cores_per_node) {
    for (const topology* topo : all_topologies()) {
        partition p(1000000, 8, *topo);
        std::vector<std::size_t> cores;
        for (int id : topo->with_cpus()) cores.push_back(topo->at(id).cores);
        EXPECT_EQ(p.weights(), cores);
        EXPECT_EQ(p.nodes(), topo->with_cpus());
        // explicit node set with empty weights: the same default
        partition q(1000000, 8, topo->with_cpus(), {}, edge_alignment::automatic, *topo);
        EXPECT_EQ(q.weights(), cores);
        EXPECT_EQ(p, q);
    }
    EXPECT_EQ(partition(100, 1, synthetic(2)).weights(), (std::vector<std::size_t>{4, 4}));
    EXPECT_EQ(partition(100, 1, synthetic(4)).weights(), (std::vector<std::size_t>{2, 2, 2, 2}));
    EXPECT_EQ(partition(100, 1, synthetic(8)).weights(), std::vector<std::size_t>(8, 1));
    EXPECT_EQ(partition(100, 1, asymmetric()).weights(), (std::vector<std::size_t>{3, 1}));
}

TEST(partition, asymmetric_cores_split_three_to_one) {
    const auto& topo = asymmetric();
    const std::size_t n = 400 * page; // 8-byte elements: 800 pages, 600 + 200
    partition p(n, 8, topo, edge_alignment::page);
    ASSERT_EQ(p.blocks().size(), 2u);
    EXPECT_EQ(p.blocks()[0], (block{0, 0, 3 * n / 4}));
    EXPECT_EQ(p.blocks()[1], (block{1, 3 * n / 4, n}));
}

TEST(partition, memory_only_node_gets_no_block_by_default) {
    const auto& topo = asymmetric();
    partition p(1000000, 8, topo);
    EXPECT_FALSE(p.nodes().contains(2));
    EXPECT_TRUE(p.block_on(2).empty());
    EXPECT_EQ(p.block_on(2).node, 2);
    // named explicitly with default weights: it gets weight 0, an empty block
    partition q(1000000, 8, topo.all(), {}, edge_alignment::page, topo);
    EXPECT_EQ(q.weights(), (std::vector<std::size_t>{3, 1, 0}));
    ASSERT_EQ(q.blocks().size(), 3u);
    EXPECT_TRUE(q.blocks()[2].empty());
    EXPECT_EQ(q.blocks()[2].node, 2);
    expect_well_formed(q);
    EXPECT_EQ(partition::core_weights(topo, topo.all()), (std::vector<std::size_t>{3, 1, 0}));
    // but explicit weights may place blocks on it (allocators may target memory-only nodes)
    partition r(1000, 8, node_set{1, 2}, {1, 1}, edge_alignment::page, topo);
    EXPECT_FALSE(r.block_on(2).empty());
    // and a partition over only memory-only nodes has no weight at all
    EXPECT_THROW(partition(1000, 8, node_set{2}, {}, edge_alignment::page, topo), numaplace::invalid_placement);
}

TEST(partition, system_topology_partition_uses_nodes_with_cpus) {
    const auto& topo = topology::get();
    partition p(12345678, sizeof(double));
    EXPECT_EQ(p.nodes(), topo.with_cpus());
    expect_well_formed(p);
    for (const auto& b : p.blocks()) EXPECT_TRUE(topo.at(b.node).has_cpus());
    // the default-topology constructor and the explicit one agree
    EXPECT_EQ(p, partition(12345678, sizeof(double), topo));
}

TEST(partition, weights_three_to_one_within_one_alignment_unit) {
    const auto& topo = synthetic(2);
    for (std::size_t s : element_sizes)
        for (std::size_t n : {std::size_t(1000), std::size_t(99991), std::size_t(10000000), std::size_t(1) << 40}) {
            partition p(n, s, node_set{0, 1}, {3, 1}, edge_alignment::page, topo);
            expect_well_formed(p);
            const std::size_t step = page / std::gcd(s, page); // elements per alignment unit
            const long double share = static_cast<long double>(n) * 3.0L / 4.0L;
            const long double diff = static_cast<long double>(p.blocks()[0].size()) - share;
            EXPECT_LE(diff < 0 ? -diff : diff, static_cast<long double>(step)) << "n " << n << " s " << s;
            EXPECT_EQ(p.weights(), (std::vector<std::size_t>{3, 1}));
        }
    // exact when n is a multiple of 4 units
    partition p(4 * 1024 * page, 1, node_set{0, 1}, {3, 1}, edge_alignment::page, topo);
    EXPECT_EQ(p.blocks()[0].size(), 3 * 1024 * page);
    EXPECT_EQ(p.blocks()[1].size(), 1024 * page);
    // the weights are relative: {6,2} gives the same blocks
    partition q(4 * 1024 * page, 1, node_set{0, 1}, {6, 2}, edge_alignment::page, topo);
    EXPECT_EQ(p.blocks(), q.blocks());
}

TEST(partition, zero_weight_gives_an_empty_block) {
    const auto& topo = synthetic(4);
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(100000), std::size_t(10000000)}) {
        partition p(n, 8, node_set{0, 1, 2, 3}, {1, 0, 2, 0}, edge_alignment::page, topo);
        expect_well_formed(p);
        EXPECT_TRUE(p.blocks()[1].empty());
        EXPECT_TRUE(p.blocks()[3].empty());
        EXPECT_TRUE(p.block_on(1).empty());
        EXPECT_EQ(p.blocks()[0].size() + p.blocks()[2].size(), n);
        // the empty blocks sit at the edges of their neighbours
        EXPECT_EQ(p.blocks()[1].begin, p.blocks()[0].end);
        EXPECT_EQ(p.blocks()[3].begin, n);
    }
    partition first_empty(100000, 8, node_set{0, 1}, {0, 1}, edge_alignment::page, synthetic(2));
    EXPECT_EQ(first_empty.blocks()[0], (block{0, 0, 0}));
    EXPECT_EQ(first_empty.blocks()[1], (block{1, 0, 100000}));
    EXPECT_EQ(first_empty.block_of(0).node, 1);
}

TEST(partition, subset_of_nodes_in_id_order) {
    const auto& topo = synthetic(8);
    partition p(1000000, 8, node_set{6, 1, 3}, {}, edge_alignment::page, topo);
    ASSERT_EQ(p.blocks().size(), 3u);
    EXPECT_EQ(p.blocks()[0].node, 1);
    EXPECT_EQ(p.blocks()[1].node, 3);
    EXPECT_EQ(p.blocks()[2].node, 6);
    expect_well_formed(p);
    EXPECT_TRUE(p.block_on(0).empty());
    EXPECT_EQ(p.block_on(3), p.blocks()[1]);
}

TEST(partition, is_deterministic) {
    for (const topology* topo : all_topologies())
        for (std::size_t s : element_sizes)
            for (std::size_t n : {std::size_t(0), std::size_t(77777), std::size_t(10000000)}) {
                partition a(n, s, *topo), b(n, s, *topo);
                EXPECT_EQ(a, b);
                EXPECT_FALSE(a != b);
                EXPECT_EQ(a.blocks(), b.blocks());
                partition copy = a;
                EXPECT_EQ(copy, a);
                EXPECT_EQ(&copy.blocks(), &a.blocks()); // copies share their state
            }
    const auto& topo = synthetic(2);
    EXPECT_NE(partition(1000, 8, topo), partition(1001, 8, topo));
    EXPECT_NE(partition(1000, 8, topo), partition(1000, 4, topo));
    EXPECT_NE(partition(10000000, 8, node_set{0, 1}, {1, 1}, edge_alignment::page, topo),
              partition(10000000, 8, node_set{0, 1}, {3, 1}, edge_alignment::page, topo));
    EXPECT_NE(partition(10000000, 8, topo, edge_alignment::page), partition(10000000, 8, topo, edge_alignment::huge));
    EXPECT_NE(partition(10000000, 8, node_set{0}, {}, edge_alignment::page, topo),
              partition(10000000, 8, node_set{1}, {}, edge_alignment::page, topo));
}

TEST(partition, resized_recomputes_with_the_same_nodes_weights_and_policy) {
    for (const topology* topo : all_topologies())
        for (std::size_t s : {std::size_t(1), std::size_t(8), std::size_t(3000)})
            for (edge_alignment a : {edge_alignment::automatic, edge_alignment::page, edge_alignment::huge}) {
                partition p(1000, s, *topo, a);
                for (std::size_t m : {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(77777),
                                      std::size_t(50000000)}) {
                    partition r = p.resized(m);
                    EXPECT_EQ(r.size(), m);
                    EXPECT_EQ(r.element_size(), s);
                    EXPECT_EQ(r.nodes(), p.nodes());
                    EXPECT_EQ(r.weights(), p.weights());
                    EXPECT_EQ(r, partition(m, s, *topo, a)) << "m " << m;
                    expect_well_formed(r);
                }
                EXPECT_EQ(&p.resized(1000).blocks(), &p.blocks()); // same size: the same object
                EXPECT_EQ(p.resized(5).resized(1000), p);
            }
    partition w(1000, 8, node_set{0, 1}, {3, 1}, edge_alignment::page, synthetic(2));
    EXPECT_EQ(w.resized(4000000), partition(4000000, 8, node_set{0, 1}, {3, 1}, edge_alignment::page, synthetic(2)));
}

TEST(partition, clipped_keeps_edges_and_drops_the_tail) {
    for (const topology* topo : all_topologies()) {
        const std::size_t n = 10000000;
        partition p(n, 8, *topo, edge_alignment::page);
        for (std::size_t m : {std::size_t(0), std::size_t(1), std::size_t(4096), n / 2, n - 1, n, n + 5}) {
            partition c = p.clipped(m);
            const std::size_t expected_size = m < n ? m : n;
            EXPECT_EQ(c.size(), expected_size);
            ASSERT_EQ(c.blocks().size(), p.blocks().size());
            for (std::size_t k = 0; k < p.blocks().size(); ++k) {
                EXPECT_EQ(c.blocks()[k].node, p.blocks()[k].node);
                EXPECT_EQ(c.blocks()[k].begin, std::min(p.blocks()[k].begin, expected_size));
                EXPECT_EQ(c.blocks()[k].end, std::min(p.blocks()[k].end, expected_size));
            }
            EXPECT_EQ(c.blocks().front().begin, 0u);
            EXPECT_EQ(c.blocks().back().end, expected_size);
            EXPECT_EQ(c.alignment(), p.alignment());
            for (std::size_t i : {std::size_t(0), expected_size / 3, expected_size - 1})
                if (i < expected_size) EXPECT_EQ(c.block_of(i).node, p.block_of(i).node) << i;
        }
        EXPECT_EQ(&p.clipped(n).blocks(), &p.blocks());
        // the capacity/size idiom: compute stays where the pages are
        partition cap = partition(n, 8, *topo, edge_alignment::page).resized(2 * n);
        partition run = cap.clipped(n + 12345);
        for (std::size_t i : {std::size_t(0), n / 2, n, n + 12344})
            EXPECT_EQ(run.block_of(i).node, cap.block_of(i).node) << i;
    }
}

TEST(partition, block_of_every_boundary) {
    for (const topology* topo : all_topologies())
        for (std::size_t s : element_sizes)
            for (std::size_t n : {std::size_t(1), std::size_t(4097), std::size_t(1000003), std::size_t(10000000)}) {
                partition p(n, s, *topo, edge_alignment::page);
                for (const auto& b : p.blocks()) {
                    if (b.empty()) continue;
                    EXPECT_EQ(p.block_of(b.begin), b);
                    EXPECT_EQ(p.block_of(b.end - 1), b);
                    EXPECT_EQ(p.block_of(b.begin + b.size() / 2), b);
                    if (b.end < n) EXPECT_NE(p.block_of(b.end), b);
                }
            }
    // with empty blocks at the same edge, block_of picks the non-empty block
    partition z(100000, 8, node_set{0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 0, 0, 1, 0, 0, 0}, edge_alignment::page,
                synthetic(8));
    expect_well_formed(z);
    for (std::size_t i : {std::size_t(0), std::size_t(1), z.block_on(1).end - 1, z.block_on(4).begin,
                          z.block_on(4).begin + 1, std::size_t(99999)}) {
        const block& b = z.block_of(i);
        EXPECT_FALSE(b.empty()) << i;
        EXPECT_TRUE(b.begin <= i && i < b.end) << i;
    }
    EXPECT_EQ(z.block_of(0).node, 1);
    EXPECT_EQ(z.block_of(99999).node, 4);
}

TEST(partition, block_on_each_node) {
    for (const topology* topo : all_topologies()) {
        partition p(10000000, 8, *topo);
        for (const auto& b : p.blocks()) EXPECT_EQ(p.block_on(b.node), b);
        for (const auto& n : topo->nodes())
            if (!p.nodes().contains(n.id)) EXPECT_TRUE(p.block_on(n.id).empty()) << n.id;
        const int outside = static_cast<int>(topo->size()) + 3;
        EXPECT_EQ(p.block_on(outside), (block{outside, 0, 0}));
    }
}

TEST(partition, block_value_type) {
    block b{2, 10, 30};
    EXPECT_EQ(b.size(), 20u);
    EXPECT_FALSE(b.empty());
    EXPECT_TRUE((block{1, 5, 5}).empty());
    EXPECT_NE(b, (block{3, 10, 30}));
    EXPECT_NE(b, (block{2, 11, 30}));
    EXPECT_NE(b, (block{2, 10, 31}));
}

TEST(partition, rejects_bad_arguments) {
    const auto& topo = synthetic(2);
    EXPECT_THROW(partition(10, 8, node_set{}, {}, edge_alignment::page, topo), numaplace::invalid_placement);
    EXPECT_THROW(partition(10, 8, node_set{0, 1}, {1}, edge_alignment::page, topo), numaplace::invalid_placement);
    EXPECT_THROW(partition(10, 8, node_set{0, 1}, {0, 0}, edge_alignment::page, topo), numaplace::invalid_placement);
    EXPECT_THROW(partition(10, 0, topo), numaplace::invalid_placement);
    EXPECT_THROW(partition(10, 8, node_set{0, 2}, {}, edge_alignment::page, topo), numaplace::unknown_node);
}
