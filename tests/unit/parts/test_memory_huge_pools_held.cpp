// Explicit huge pages this process holds ready count as free (issue 48): freed explicit-page blocks wait in
// the cache of own mappings (detail/placed_cache.hpp) still holding their pool pages, and a request that
// finds the pools short gives them back first (place.hpp's pool_shortage, the pool relief of memory.hpp)
// instead of refusing. Pools reserved as in test_memory_huge_pools.cpp (guests, or
// NUMAPLACE_TEST_RESERVE_HUGE_PAGES=1 on a host); each case fails without the relief ("2 needed, 0 free").
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <huge_pools.hpp>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace numaplace;

namespace {
using numaplace_test::free_pages;
using numaplace_test::frees;
using numaplace_test::two_mib;
using numaplace_test::write_count;

std::size_t nodes() { return topology::get().size(); }
} // namespace

// The outside suite's case: a 4-page pool, 4 pages allocated and freed through allocator<char, on_node>,
// then 2 pages of the same placement (another size: the cache cannot hand the block out as it is), and
// memory::allocate likewise.
TEST(huge_pages_held, a_cache_holding_the_whole_pool_gives_it_back_to_a_strict_request) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(nodes(), 4));
    const on_node placement = on_node(0).with_pages(page_size::explicit_2m);
    allocator<char, on_node> huge(placement);
    char* a = huge.allocate(4 * two_mib);
    a[0] = 1;
    huge.deallocate(a, 4 * two_mib);
    ASSERT_EQ(free_pages(0), 0) << "the freed block is cached, its 4 pages still held";
    char* b = huge.allocate(2 * two_mib);
    EXPECT_EQ(where_page_sizes(b, 2 * two_mib).bytes_on(two_mib), 2 * two_mib);
    b[0] = 1;
    EXPECT_EQ(where(b, 2 * two_mib).on(0), where(b, 2 * two_mib).pages);
    EXPECT_EQ(free_pages(0), 2) << "the cached block given back, 2 of its pages taken again";
    huge.deallocate(b, 2 * two_mib); // cached again: 2 pages held, 2 free
    // memory::allocate, which never uses the cache, of the whole pool
    void* p = memory::allocate(4 * two_mib, placement);
    EXPECT_EQ(where_page_sizes(p, 4 * two_mib).bytes_on(two_mib), 4 * two_mib);
    EXPECT_EQ(free_pages(0), 0);
    memory::unmap(p, 4 * two_mib);
    EXPECT_EQ(free_pages(0), 4);
    // what is really missing is still refused, and names the pool's count: 5 pages of a 4-page pool
    char* c = huge.allocate(4 * two_mib);
    huge.deallocate(c, 4 * two_mib); // cached: the whole pool held again
    try {
        memory::allocate(5 * two_mib, placement);
        ADD_FAILURE() << "5 pages from a pool of 4";
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM);
        EXPECT_NE(std::string(e.what()).find("explicit 2 MiB pages on node 0: 5 needed, 4 free"), std::string::npos) << e.what();
    }
    release_cached_memory();
    EXPECT_EQ(free_pages(0), 4);
}

// As a user meets it: a vector growing by push_back on a 12-page pool (reserve() first: one page). At 8
// pages the 4-page block is still in use and the 1- and 2-page blocks freed before wait in the cache:
// 8 needed, 5 free without the relief. A degrading placement must not fall back for that reason either.
TEST(huge_pages_held, a_vector_grows_by_push_back_through_its_own_freed_blocks) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(nodes(), 12));
    const std::size_t per_page = two_mib / sizeof(double);
    for (const fallback fb : {fallback::strict, fallback::degrade}) {
        SCOPED_TRACE(fb == fallback::strict ? "strict" : "degrade");
        const std::size_t degradations = degradation_count();
        {
            std::vector<double, allocator<double, on_node>> v(
                allocator<double, on_node>(on_node(0, node_policy::bind, fb).with_pages(page_size::explicit_2m)));
            v.reserve(per_page);
            for (std::size_t i = 0; i < 8 * per_page; ++i) v.push_back(static_cast<double>(i));
            ASSERT_EQ(v.capacity(), 8 * per_page) << "growth by doubling: 1, 2, 4, 8 pages";
            EXPECT_EQ(where_page_sizes(v.data(), 8 * two_mib).bytes_on(two_mib), 8 * two_mib);
            EXPECT_EQ(where(v.data(), 8 * two_mib).on(0), where(v.data(), 8 * two_mib).pages);
            EXPECT_EQ(v[8 * per_page - 1], static_cast<double>(8 * per_page - 1));
            EXPECT_EQ(free_pages(0), 12 - 8 - 4) << "8 in use, the 4-page block cached";
        }
        EXPECT_EQ(degradation_count(), degradations) << "nothing degraded: the pool had the pages";
        release_cached_memory();
        EXPECT_EQ(free_pages(0), 12);
    }
}

// partitioned and interleaved count their pools through the same admission. partitioned counts each
// node's pool: node 0's, held by a cached on_node block, is given back to it; node 1's cached block is
// kept (node 1 has the free page its block needs) and reused as it is after. Equal-weight interleave
// counts the pools of its nodes together: every cached block of its nodes is given back to it.
TEST(huge_pages_held, partitioned_and_interleaved_get_the_pages_of_the_nodes_they_need) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(nodes(), 2));
    allocator<char, on_node> node0(on_node(0).with_pages(page_size::explicit_2m));
    allocator<char, on_node> node1(on_node(1).with_pages(page_size::explicit_2m));
    const std::size_t bytes = 2 * two_mib; // one page on node 0, one on node 1
    char* kept1 = node1.allocate(two_mib);
    node1.deallocate(kept1, two_mib);                           // node 1: 1 page cached, 1 free
    node0.deallocate(node0.allocate(2 * two_mib), 2 * two_mib); // node 0: its whole pool cached
    ASSERT_EQ(free_pages(0), 0);
    ASSERT_EQ(free_pages(1), 1);
    const partition<double> split(bytes / sizeof(double), node_set{0, 1});
    void* p = memory::allocate(bytes, partitioned(split).with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(p, bytes).bytes_on(two_mib), bytes);
    EXPECT_EQ(free_pages(0), 1) << "node 0's cached block given back, one page taken";
    EXPECT_EQ(free_pages(1), 0) << "node 1 had a free page: its cached block kept";
    memory::unmap(p, bytes);
    char* again1 = node1.allocate(two_mib);
    EXPECT_EQ(again1, kept1) << "node 1's cached block was never given back";
    node1.deallocate(again1, two_mib);                          // node 1: 1 page cached, 1 free
    node0.deallocate(node0.allocate(2 * two_mib), 2 * two_mib); // node 0: its whole pool cached again
    ASSERT_EQ(free_pages(0), 0);
    ASSERT_EQ(free_pages(1), 1);
    void* q = memory::allocate(bytes, interleaved(node_set{0, 1}).with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(q, bytes).bytes_on(two_mib), bytes);
    EXPECT_EQ(free_pages(0), 1) << "one page a node";
    EXPECT_EQ(free_pages(1), 1) << "one page a node";
    memory::unmap(q, bytes);
    release_cached_memory();
    EXPECT_EQ(free_pages(0), 2);
    EXPECT_EQ(free_pages(1), 2);
}

// The hugetlb cgroup charges the pages a cached block holds too: under a limit of 2 pages, 2 pages
// allocated and freed, then 1 page of another size (in a child moved into the cgroup; guests only).
TEST(huge_pages_held, cached_pages_charged_to_the_hugetlb_cgroup_are_given_back_first) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    if (!std::getenv("NUMAPLACE_GUEST_LAYOUT")) GTEST_SKIP() << "changes cgroups: guests only";
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(nodes(), 4));
    const int code = numaplace_test::run_child(
        [] {
            if (access("/sys/fs/cgroup/cgroup.controllers", R_OK) != 0 && mount("none", "/sys/fs/cgroup", "cgroup2", 0, nullptr) != 0)
                return 80;
            std::FILE* f = std::fopen("/sys/fs/cgroup/cgroup.subtree_control", "w");
            if (!f || std::fputs("+hugetlb", f) < 0 || std::fclose(f) != 0) return 81;
            mkdir("/sys/fs/cgroup/numaplace_held", 0755);
            if (!write_count("/sys/fs/cgroup/numaplace_held/hugetlb.2MB.max", static_cast<long>(2 * two_mib))) return 82;
            if (!write_count("/sys/fs/cgroup/numaplace_held/cgroup.procs", getpid())) return 83;
            allocator<char, on_node> huge(on_node(0).with_pages(page_size::explicit_2m));
            char* a = huge.allocate(2 * two_mib);
            a[0] = 1;
            huge.deallocate(a, 2 * two_mib); // cached: the whole limit still charged
            if (huge_page_usage_limits(two_mib).cgroup_room() != 0) return 84;
            if (free_pages(0) != 2) return 85; // the pool has pages: only the cgroup is short
            try {
                char* b = huge.allocate(two_mib);
                const bool on_pages = where_page_sizes(b, two_mib).bytes_on(two_mib) == two_mib;
                huge.deallocate(b, two_mib);
                return on_pages ? 0 : 86;
            } catch (const placement_error&) {
                return 87; // "the hugetlb cgroup limit ... leaves 0 bytes": refused for its own cache
            }
        },
        60);
    EXPECT_EQ(code, 0) << "84/85: set-up, 86: not on 2 MiB pages, 87: refused for pages its own cache held";
}
