// error.hpp: every error numaplace throws, by type and message, from every place that throws it.
// Expectations are computed from topology::get(), so they hold on any number of nodes.

#include <numaplace/allocator.hpp>
#include <numaplace/error.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/topology.hpp>

#include <gtest/gtest.h>

#include <seccomp.hpp>

#include <sstream>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <memory_resource>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using numaplace::fallback;
using numaplace::node_policy;
using numaplace::node_set;
using numaplace::topology;

static_assert(std::is_base_of<std::invalid_argument, numaplace::unknown_node>::value, "");
static_assert(std::is_base_of<std::invalid_argument, numaplace::invalid_placement>::value, "");
static_assert(std::is_base_of<std::bad_alloc, numaplace::placement_error>::value, "");

namespace {

int node_count() { return static_cast<int>(topology::get().size()); }

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

// Runs `f`, which must throw unknown_node for `id`; checks type, accessors and message.
void expect_unknown_node(const std::function<void()>& f, int id, const char* what) {
    SCOPED_TRACE(what);
    const std::size_t n = topology::get().size();
    try {
        f();
        ADD_FAILURE() << "no exception for node " << id;
    } catch (const numaplace::unknown_node& e) {
        EXPECT_EQ(e.node(), id);
        EXPECT_EQ(e.node_count(), n);
        const std::string msg = e.what();
        EXPECT_TRUE(contains(msg, "unknown NUMA node id " + std::to_string(id))) << msg;
        EXPECT_TRUE(contains(msg, "0.." + std::to_string(n - 1))) << msg;
        // it is an invalid_argument
        const std::invalid_argument& base = e;
        EXPECT_EQ(std::string(base.what()), msg);
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type for node " << id << ": " << e.what();
    }
}

// Runs `f`, which must throw invalid_placement whose message contains `word`.
void expect_invalid(const std::function<void()>& f, const std::string& word, const char* what) {
    SCOPED_TRACE(what);
    try {
        f();
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::invalid_placement& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("numaplace: ", 0), 0u) << msg;
        EXPECT_TRUE(contains(msg, word)) << msg;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "wrong exception type: " << e.what();
    }
}

// Virtual memory size of this process in bytes (from /proc/self/status).
std::size_t virtual_size() {
    std::ifstream in("/proc/self/status");
    std::string key;
    while (in >> key) {
        if (key == "VmSize:") {
            std::size_t kb = 0;
            in >> kb;
            return kb * 1024;
        }
        std::string rest;
        std::getline(in, rest);
    }
    return 0;
}

} // namespace

// --- unknown node ids ---------------------------------------------------------------------------

TEST(error, unknown_node_message_names_the_id_and_the_valid_range) {
    numaplace::unknown_node e(7, 4);
    EXPECT_EQ(e.node(), 7);
    EXPECT_EQ(e.node_count(), 4u);
    EXPECT_EQ(std::string(e.what()), "numaplace: unknown NUMA node id 7 (valid ids: 0..3)");
    numaplace::unknown_node none(0, 0);
    EXPECT_TRUE(contains(none.what(), "none")) << none.what();
    numaplace::unknown_node negative(-1, 2);
    EXPECT_TRUE(contains(negative.what(), "id -1")) << negative.what();
    EXPECT_TRUE(contains(negative.what(), "0..1")) << negative.what();
}

TEST(error, on_node_rejects_ids_outside_the_topology) {
    const int n = node_count();
    expect_unknown_node([&] { numaplace::on_node x(n); (void)x; }, n, "on_node(N)");
    expect_unknown_node([&] { numaplace::on_node x(-1); (void)x; }, -1, "on_node(-1)");
    expect_unknown_node([&] { numaplace::on_node x(n + 100, node_policy::prefer, fallback::degrade); (void)x; },
                        n + 100, "on_node(N+100, prefer, degrade): degrading does not excuse a bad id");
    expect_unknown_node([&] { numaplace::node_allocator<int> a(n); (void)a; }, n, "node_allocator(N)");
    expect_unknown_node([&] { numaplace::node_allocator<double> a(-5); (void)a; }, -5, "node_allocator(-5)");
    // every valid id is accepted
    for (int k = 0; k < n; ++k) EXPECT_NO_THROW(numaplace::on_node x(k); (void)x;) << k;
}

TEST(error, interleaved_and_preferred_many_reject_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { numaplace::interleaved x(node_set{0, n}); (void)x; }, n, "interleaved({0, N})");
    expect_unknown_node([&] { numaplace::interleaved x(node_set{-2, 0}); (void)x; }, -2, "interleaved({-2, 0})");
    expect_unknown_node([&] { numaplace::interleaved_allocator<int> a(node_set{0, n}); (void)a; }, n,
                        "interleaved_allocator({0, N})");
    expect_unknown_node([&] { numaplace::preferred_many x(node_set{n}); (void)x; }, n, "preferred_many({N})");
}

TEST(error, partition_rejects_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { numaplace::partition<double> p(100, node_set{0, n}, {}); (void)p; }, n, "partition({0, N})");
    expect_unknown_node([&] { numaplace::partition<double> p(100, node_set{n + 1}, {1}); (void)p; }, n + 1,
                        "partition({N+1}, {1})");
    // against a synthetic topology: its own range
    const auto two = topology::from_synthetic("pack:2 numa:1 core:2 pu:1");
    try {
        numaplace::partition<double> p(100, node_set{0, 2}, {}, numaplace::edge_alignment::page, *two);
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::unknown_node& e) {
        EXPECT_EQ(e.node(), 2);
        EXPECT_EQ(e.node_count(), 2u);
        EXPECT_TRUE(contains(e.what(), "0..1")) << e.what();
    }
}

TEST(error, topology_lookups_reject_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { (void)topology::get().at(n); }, n, "at(N)");
    expect_unknown_node([&] { (void)topology::get().at(-1); }, -1, "at(-1)");
    expect_unknown_node([&] { topology::get().check(n); }, n, "check(N)");
    expect_unknown_node([&] { (void)topology::get().distance(0, n); }, n, "distance(0, N)");
    expect_unknown_node([&] { (void)topology::get().native_node(n); }, n, "native_node(N)");
    for (int k = 0; k < n; ++k) EXPECT_EQ(topology::get().at(k).id, k);
}

TEST(error, node_pool_rejects_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { (void)numaplace::node_pool(n); }, n, "node_pool(N)");
    expect_unknown_node([&] { (void)numaplace::node_pool(-1); }, -1, "node_pool(-1)");
    for (int k = 0; k < n; ++k) EXPECT_NO_THROW((void)numaplace::node_pool(k)) << k;
}

TEST(error, memory_bind_rejects_unknown_ids) {
    const int n = node_count();
    const std::size_t page = numaplace::detail::page_size();
    void* p = numaplace::memory::map(page);
    expect_unknown_node([&] { numaplace::memory::bind(p, page, numaplace::memory::policy_mode::bind, node_set{n}); },
                        n, "memory::bind({N})");
    numaplace::memory::unmap(p, page);
}

// --- empty node sets and malformed arguments -----------------------------------------------------

TEST(error, empty_node_set_is_invalid_placement) {
    expect_invalid([] { numaplace::interleaved x(node_set{}); (void)x; }, "empty", "interleaved({})");
    expect_invalid([] { numaplace::interleaved_allocator<int> a(node_set{}); (void)a; }, "empty",
                   "interleaved_allocator({})");
    expect_invalid([] { numaplace::preferred_many x(node_set{}); (void)x; }, "empty", "preferred_many({})");
    expect_invalid([] { numaplace::partition<double> p(100, node_set{}, {}); (void)p; }, "empty", "partition({})");
    expect_invalid([] { numaplace::partitioned x{numaplace::partition<double>()}; (void)x; }, "empty",
                   "partitioned(empty partition)");
    // and it is an invalid_argument
    EXPECT_THROW(numaplace::interleaved x(node_set{}), std::invalid_argument);
}

TEST(error, weight_count_mismatch_and_all_zero_weights_are_invalid_placement) {
    const std::size_t n = topology::get().size();
    const node_set all = topology::get().all();
    expect_invalid([&] { numaplace::interleaved x(all, std::vector<std::size_t>(n + 1, 1)); (void)x; }, "weights",
                   "interleaved: one weight too many");
    expect_invalid([&] { numaplace::interleaved x(all, std::vector<std::size_t>(n, 0)); (void)x; }, "zero",
                   "interleaved: all weights zero");
    expect_invalid([&] { numaplace::partition<double> p(100, all, std::vector<std::size_t>(n + 1, 1)); (void)p; },
                   "weights", "partition: one weight too many");
    expect_invalid([&] { numaplace::partition<double> p(100, all, std::vector<std::size_t>(n, 0)); (void)p; }, "zero",
                   "partition: all weights zero");
    // the message says how many of each
    try {
        numaplace::partition<double> p(100, all, std::vector<std::size_t>(n + 2, 1));
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::invalid_placement& e) {
        EXPECT_TRUE(contains(e.what(), std::to_string(n + 2) + " weights for " + std::to_string(n) + " nodes"))
            << e.what();
    }
    if (n >= 2) {
        expect_invalid([&] { numaplace::interleaved x(node_set{0, 1}, {1}); (void)x; }, "1 weights for 2 nodes",
                       "interleaved({0,1}, {1})");
    }
}

TEST(error, element_size_zero_and_bad_topology_descriptions_are_invalid_placement) {
    expect_invalid([] { numaplace::basic_partition p(100, 0, 1, topology::get().with_cpus(), {}, numaplace::edge_alignment::page,
                                                     topology::get(), numaplace::page_geometry{}); (void)p; },
                   "element size", "partition element size 0");
    expect_invalid([] { (void)numaplace::partition<double>::rows(100, 0); }, "row length 0", "rows partition of row length 0");
    expect_invalid([] { (void)topology::from_synthetic("this is not a topology"); }, "synthetic", "from_synthetic");
    expect_invalid([] { (void)topology::from_xml("/nonexistent/numaplace/topology.xml"); }, "XML", "from_xml");
}

// --- size overflow ---------------------------------------------------------------------------------

TEST(error, size_overflow_throws_bad_array_new_length) {
    numaplace::node_allocator<double> a(0);
    EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(std::numeric_limits<std::size_t>::max()), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(std::numeric_limits<std::size_t>::max() / 2), std::bad_array_new_length);
    numaplace::interleaved_allocator<int> i{numaplace::interleaved(fallback::degrade)};
    EXPECT_THROW((void)i.allocate(i.max_size() + 1), std::bad_array_new_length);
    numaplace::partitioned_allocator<long> p;
    EXPECT_THROW((void)p.allocate(p.max_size() + 1), std::bad_array_new_length);
    // it is a bad_alloc
    EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_alloc);
    // what does not overflow n * sizeof(T) but cannot be mapped is still a bad_alloc (placement_error)
    EXPECT_THROW((void)a.allocate(a.max_size()), std::bad_alloc);
}

// --- strict placements the kernel (or numaplace, beforehand) refuses ------------------------------

TEST(error, placement_error_carries_node_bytes_and_errno) {
    numaplace::placement_error e(3, 12345, ENOMEM, "something refused");
    EXPECT_EQ(e.node(), 3);
    EXPECT_EQ(e.bytes(), 12345u);
    EXPECT_EQ(e.error_number(), ENOMEM);
    const std::string msg = e.what();
    EXPECT_TRUE(contains(msg, "numaplace: something refused")) << msg;
    EXPECT_TRUE(contains(msg, "node 3")) << msg;
    EXPECT_TRUE(contains(msg, "12345 bytes")) << msg;
    EXPECT_TRUE(contains(msg, "errno " + std::to_string(ENOMEM))) << msg;
    numaplace::placement_error several(-1, 1, EPERM, "x");
    EXPECT_TRUE(contains(several.what(), "node any")) << several.what();
    const std::bad_alloc& base = e;
    EXPECT_EQ(std::string(base.what()), msg);
}

TEST(error, placement_error_copies_never_throw_and_share_the_message) {
    static_assert(std::is_nothrow_copy_constructible<numaplace::placement_error>::value, "");
    static_assert(std::is_nothrow_copy_assignable<numaplace::placement_error>::value, "");
    static_assert(std::is_nothrow_copy_constructible<numaplace::invalid_placement>::value, "");
    static_assert(std::is_nothrow_copy_constructible<numaplace::unknown_node>::value, "");
    const numaplace::placement_error e(1, 4096, EPERM, std::string(200, 'x'));
    numaplace::placement_error copy = e;
    // the copy shares the message buffer (reference counted): copying and what() allocate nothing
    EXPECT_EQ(copy.what(), e.what());
    numaplace::placement_error other(2, 1, ENOMEM, "other");
    other = e;
    EXPECT_EQ(other.what(), e.what());
    EXPECT_EQ(other.node(), 1);
    EXPECT_EQ(other.bytes(), 4096u);
    EXPECT_EQ(other.error_number(), EPERM);
    // moved-from stays valid
    numaplace::placement_error moved = std::move(copy);
    EXPECT_STREQ(copy.what(), e.what()); // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(moved.node(), 1);
}

TEST(error, strict_bind_of_more_than_the_node_has_throws_placement_error) {
    const auto& topo = topology::get();
    const std::size_t page = numaplace::detail::page_size();
    int tested = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) continue; // size unknown: numaplace cannot refuse beforehand
        const int k = node.id;
        const std::size_t bytes = static_cast<std::size_t>(node.memory) + page;
        SCOPED_TRACE("node " + std::to_string(k) + ", " + std::to_string(bytes) + " bytes");
        numaplace::node_allocator<char> strict(k);
        const std::size_t before = virtual_size();
        try {
            char* p = strict.allocate(bytes);
            strict.deallocate(p, bytes);
            ADD_FAILURE() << "strict bind of more than the node's memory succeeded";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.node(), k);
            EXPECT_EQ(e.bytes(), bytes);
            EXPECT_EQ(e.error_number(), ENOMEM);
            const std::string msg = e.what();
            EXPECT_TRUE(contains(msg, "node " + std::to_string(k))) << msg;
            EXPECT_TRUE(contains(msg, std::to_string(bytes) + " bytes")) << msg;
            EXPECT_TRUE(contains(msg, "errno " + std::to_string(ENOMEM))) << msg;
        }
        // nothing stays mapped (the failed mapping was as large as the node)
        const std::size_t after = virtual_size();
        EXPECT_LT(after, before + bytes / 2) << "before " << before << " after " << after;
        // caught as std::bad_alloc, as any allocation failure
        EXPECT_THROW((void)strict.allocate(bytes), std::bad_alloc);
        // the same through a page_resource
        numaplace::page_resource<numaplace::on_node> resource{numaplace::on_node(k)};
        EXPECT_THROW((void)resource.allocate(bytes), numaplace::placement_error);
        // and through an interleave over that node alone
        numaplace::interleaved_allocator<char> one{numaplace::interleaved(node_set{k})};
        try {
            (void)one.allocate(bytes);
            ADD_FAILURE() << "strict interleave over one node of more than its memory succeeded";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.node(), k);
            EXPECT_EQ(e.error_number(), ENOMEM);
        }
        EXPECT_LT(virtual_size(), before + bytes / 2);
        ++tested;
    }
    if (tested == 0) GTEST_SKIP() << "no node reports its memory size";
}

TEST(error, degrading_bind_of_more_than_the_node_is_refused_too) {
    // memory.hpp's contract: a fallback cannot make memory that does not exist (the pages would
    // OOM-kill at first touch), so a degrading placement refuses it with ENOMEM as a strict one does.
    const auto& topo = topology::get();
    const std::size_t page = numaplace::detail::page_size();
    int tested = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) continue;
        const int k = node.id;
        const std::size_t bytes = static_cast<std::size_t>(node.memory) + page;
        numaplace::node_allocator<char> degrading{numaplace::on_node(k, node_policy::bind, fallback::degrade)};
        const std::size_t count = numaplace::degradation_count();
        try {
            (void)degrading.allocate(bytes);
            ADD_FAILURE() << "node " << k << " served more than its memory";
        } catch (const numaplace::placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_EQ(e.node(), k);
        }
        EXPECT_EQ(numaplace::degradation_count(), count) << "node " << k;
        ++tested;
    }
    if (tested == 0) GTEST_SKIP() << "no node reports its memory size";
}

TEST(error, strict_weighted_interleave_of_more_than_all_nodes_have_throws) {
    const auto& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "weighted interleave needs two nodes";
    std::size_t total = 0;
    for (const auto& node : topo.nodes()) {
        if (node.memory == 0) GTEST_SKIP() << "node " << node.id << " reports no memory size";
        total += static_cast<std::size_t>(node.memory);
    }
    std::vector<std::size_t> weights(topo.size(), 1);
    weights[0] = 2;
    const std::size_t bytes = total + numaplace::detail::page_size();
    numaplace::interleaved_allocator<char> strict{numaplace::interleaved(topo.all(), weights)};
    ASSERT_FALSE(strict.placement().weights().empty());
    const std::size_t before = virtual_size();
    try {
        (void)strict.allocate(bytes);
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.node(), -1); // several nodes
        EXPECT_EQ(e.bytes(), bytes);
        EXPECT_EQ(e.error_number(), ENOMEM);
        EXPECT_TRUE(contains(e.what(), "node any")) << e.what();
    }
    EXPECT_LT(virtual_size(), before + bytes / 2);
    // degrading: refused the same way (memory.hpp's capacity contract), nothing recorded
    numaplace::interleaved_allocator<char> degrading{numaplace::interleaved(topo.all(), weights, fallback::degrade)};
    const std::size_t count = numaplace::degradation_count();
    try {
        (void)degrading.allocate(bytes);
        ADD_FAILURE() << "degrading weighted interleave served more than all nodes have";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM);
    }
    EXPECT_EQ(numaplace::degradation_count(), count);
}

TEST(error, strict_placement_refused_by_the_kernel_is_placement_error) {
    // A process started under a seccomp filter that refuses mbind/set_mempolicy with EPERM (as container
    // profiles do) must see memory_binding == false in its capabilities, and a strict placement must throw
    // placement_error with that errno, even for a small (pooled) allocation. The parent re-runs this very
    // test in such a process (this binary, filter installed before exec, so the probe runs under it).
    if (numaplace_test::rerun_started_under_seccomp()) return;
    const auto& caps = topology::get().capabilities();
    ASSERT_FALSE(caps.memory_binding);
    EXPECT_EQ(caps.memory_binding_errno, EPERM);
    numaplace::node_allocator<int> strict(0);
    try {
        (void)strict.allocate(1);
        ADD_FAILURE() << "no exception";
    } catch (const numaplace::placement_error& e) {
        EXPECT_EQ(e.error_number(), EPERM);
    }
    EXPECT_THROW((void)strict.allocate(1 << 20), numaplace::placement_error);
    // degrading: works, and says so
    numaplace::node_allocator<int> soft(0, numaplace::node_policy::bind, numaplace::fallback::degrade);
    int* p = soft.allocate(1 << 20);
    soft.deallocate(p, 1 << 20);
    EXPECT_GE(numaplace::degradation_count(), 1u);
    // Every degrading placement serves small blocks too; every strict one refuses them.
    numaplace::interleaved_allocator<char> soft_il(
        numaplace::interleaved(topology::get().all(), {}, numaplace::fallback::degrade));
    soft_il.deallocate(soft_il.allocate(16), 16);
    numaplace::allocator<char, numaplace::preferred_many> soft_pm(
        numaplace::preferred_many(topology::get().all(), numaplace::fallback::degrade));
    soft_pm.deallocate(soft_pm.allocate(16), 16);
    numaplace::interleaved_allocator<char> strict_il(topology::get().all());
    EXPECT_THROW((void)strict_il.allocate(16), numaplace::placement_error);
    std::ostringstream report;
    numaplace::print_report(report);
    EXPECT_NE(report.str().find("memory binding (mbind):      NO (errno 1"), std::string::npos) << report.str();
}

