// Attack tests for replace: bad targets for partitioned containers, budgets at the edges, a throwing
// progress callback, ranges that wrap or are partly unmapped. Contents stay exact throughout.

#include <numaplace/numaplace.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <sys/mman.h>

namespace np = numaplace;
using np::partition;

namespace {
template <class V>
void expect_iota(const V& v) {
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<typename V::value_type>(i)) << i;
}
template <class V>
void expect_loop_covers(V& v) {
    std::vector<std::atomic<int>> seen(v.size());
    np::parallel_for(v, [&](std::size_t i) { seen[i].fetch_add(1); });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
}
} // namespace

TEST(AttackReplace, EmptyPartitionTargetIsRefusedForAContainer) {
    np::partitioned_vector<int> v(100000);
    std::iota(v.begin(), v.end(), 0);
    const auto before = np::partition_of(v);
    // an empty partition has no node: re-placing by it would leave the loop with no block
    EXPECT_THROW(np::replace(v, partition<int>()), np::invalid_placement);
    EXPECT_EQ(np::partition_of(v), before);
    expect_loop_covers(v);
    expect_iota(v);
    std::vector<int> plain(10);
    EXPECT_THROW(np::replace(plain, partition<int>()), np::invalid_placement); // 0 elements for 10
}

TEST(AttackReplace, BudgetsAtTheEdgesAndAThrowingProgress) {
    const np::topology& topo = np::topology::get();
    const int last = topo.with_cpus()[topo.with_cpus().size() - 1];
    np::partitioned_vector<int> v(1 << 20);
    std::iota(v.begin(), v.end(), 0);
    // every element's block on the last node with CPUs: pages move when there are two nodes
    std::vector<std::size_t> w(topo.with_cpus().size(), 0);
    w.back() = 1;
    const partition<int> target(v.size(), topo.with_cpus(), w);
    np::replace_options opts;
    opts.progress = [](const np::replace_progress&) -> bool { throw std::runtime_error("stop"); };
    EXPECT_THROW(np::replace(v, target, np::fallback::strict, opts), std::runtime_error);
    expect_iota(v);
    expect_loop_covers(v);
    // the container now follows the target (the record is set before pages move); finish the move
    for (std::size_t budget : {std::size_t(1), std::numeric_limits<std::size_t>::max(), std::size_t(0)}) {
        np::replace_options o;
        o.page_budget = budget;
        const np::replace_report r = np::replace(v, target, np::fallback::degrade, o);
        EXPECT_LE(r.resume_at, r.pages);
        if (budget == 1) EXPECT_LE(r.moved, 512u);
        expect_iota(v);
    }
    EXPECT_EQ(np::partition_of(v).block_on(last).size(), v.size());
    expect_loop_covers(v);
    if (topo.capabilities().memory_binding && topo.capabilities().page_query) {
        const np::partition_locality l = np::where(v.data(), np::partition_of(v));
        EXPECT_EQ(l.remote, 0u);
        EXPECT_EQ(l.histogram.on(last), l.histogram.pages);
    }
}

TEST(AttackReplace, RawRangesAtTheEdges) {
    const std::size_t page = np::detail::page_size();
    const np::on_node n0(np::topology::get().with_cpus()[0]);
    char* m = static_cast<char*>(::mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(m, MAP_FAILED);
    for (std::size_t i = 0; i < 4 * page; ++i) m[i] = static_cast<char>(i % 251);
    // zero bytes: nothing
    EXPECT_EQ(np::replace(m, 0, n0).pages, 0u);
    // wrapping range: a typed error
    EXPECT_THROW(np::replace(m, std::numeric_limits<std::size_t>::max(), n0), np::invalid_placement);
    // an unaligned range of 2 bytes across a page edge: 2 pages
    EXPECT_EQ(np::replace(m + page - 1, 2, n0, {}).pages, 2u);
    // partly unmapped: the hole is not a page to move, the rest is exact
    ASSERT_EQ(::munmap(m + page, page), 0);
    np::replace_report r;
    try {
        r = np::replace(m, 4 * page, np::on_node(n0.node(), np::node_policy::bind, np::fallback::degrade));
        EXPECT_EQ(r.pages, 4u);
    } catch (const std::exception& e) {
        ADD_FAILURE() << "degrading replace threw: " << e.what();
    }
    for (std::size_t i = 0; i < page; ++i) ASSERT_EQ(m[i], static_cast<char>(i % 251));
    for (std::size_t i = 2 * page; i < 4 * page; ++i) ASSERT_EQ(m[i], static_cast<char>(i % 251));
    // read-only mapping: contents unchanged
    ASSERT_EQ(::mprotect(m + 2 * page, 2 * page, PROT_READ), 0);
    (void)np::replace(m + 2 * page, 2 * page, np::on_node(n0.node(), np::node_policy::bind, np::fallback::degrade));
    for (std::size_t i = 2 * page; i < 4 * page; ++i) ASSERT_EQ(m[i], static_cast<char>(i % 251));
    ::munmap(m, page);
    ::munmap(m + 2 * page, 2 * page);
}
