// Explicit huge pages this process holds ready count as free (issue 48): freed explicit-page blocks wait in
// the cache of own mappings (detail/placed_cache.hpp) still holding their pool pages, and a request that
// finds the pools short gives them back first (place.hpp's pool_shortage, the pool relief of memory.hpp)
// instead of refusing. Pools reserved as in test_memory_huge_pools.cpp (guests, or
// NUMAPLACE_TEST_RESERVE_HUGE_PAGES=1 on a host); each case but the forked child's fails without the relief
// ("2 needed, 0 free"); that one fails if the relief unmaps what a child inherited.
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <huge_pools.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using namespace numaplace;

namespace {
using numaplace_test::free_pages;
using numaplace_test::frees;
using numaplace_test::two_mib;

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
            if (const int failed = numaplace_test::enter_hugetlb_cgroup("numaplace_held", static_cast<long>(2 * two_mib))) return failed;
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

// Which cached blocks a request gets back, by what each may hold: a preferring on_node's block (its pages
// may be any node's) and a largest_explicit one (pages of any size) go back to a request bound to their
// node; a preferring request counts every node's pool, so it gets every node's blocks back.
TEST(huge_pages_held, blocks_of_any_node_or_any_size_and_requests_of_any_node) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    std::vector<long> counts(nodes(), 0); // no other pool: a preferring request could take its pages
    counts[0] = counts[1] = 2;
    NUMAPLACE_RESERVE_OR_SKIP(pools, counts);
    const on_node bind0 = on_node(0).with_pages(page_size::explicit_2m), bind1 = on_node(1).with_pages(page_size::explicit_2m);
    allocator<char, on_node> prefer0(on_node(0, node_policy::prefer).with_pages(page_size::explicit_2m));
    prefer0.deallocate(prefer0.allocate(2 * two_mib), 2 * two_mib); // node 0's pool cached, as "any node"
    ASSERT_EQ(free_pages(0), 0);
    void* p = memory::allocate(two_mib, bind0);
    EXPECT_EQ(where_page_sizes(p, two_mib).bytes_on(two_mib), two_mib);
    EXPECT_EQ(free_pages(0), 1) << "the preferring block given back to a request bound to node 0";
    memory::unmap(p, two_mib);
    allocator<char, on_node> largest1(on_node(1).with_pages(page_size::largest_explicit));
    largest1.deallocate(largest1.allocate(2 * two_mib), 2 * two_mib); // node 1's pool cached, as "any size"
    ASSERT_EQ(free_pages(1), 0);
    void* q = memory::allocate(two_mib, bind1);
    EXPECT_EQ(where_page_sizes(q, two_mib).bytes_on(two_mib), two_mib);
    EXPECT_EQ(free_pages(1), 1) << "the largest_explicit block given back to a 2 MiB request";
    memory::unmap(q, two_mib);
    // both pools wholly cached by bound blocks, then 3 pages preferring node 0: every pool counts
    allocator<char, on_node> node0(bind0), node1(bind1);
    node0.deallocate(node0.allocate(2 * two_mib), 2 * two_mib);
    node1.deallocate(node1.allocate(2 * two_mib), 2 * two_mib);
    ASSERT_EQ(free_pages(0) + free_pages(1), 0);
    void* r = memory::allocate(3 * two_mib, on_node(0, node_policy::prefer).with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(r, 3 * two_mib).bytes_on(two_mib), 3 * two_mib);
    EXPECT_EQ(free_pages(0) + free_pages(1), 1) << "both nodes' blocks given back, 3 of their 4 pages taken";
    memory::unmap(r, 3 * two_mib);
    release_cached_memory();
    EXPECT_EQ(frees(), counts);
}

// A forked child inherits the cache's table but not its explicit-page blocks (MADV_DONTFORK): their pages
// stay the parent's. A request of the child that finds the pool short forgets them instead of unmapping
// their addresses (which may be the child's own mappings by then), is refused, and the parent keeps them.
TEST(huge_pages_held, a_forked_child_never_gives_back_its_parents_cached_blocks) {
    release_cached_memory(); // no block of an earlier test holds pool pages
    NUMAPLACE_RESERVE_OR_SKIP(pools, std::vector<long>(nodes(), 2));
    const on_node placement = on_node(0).with_pages(page_size::explicit_2m);
    allocator<char, on_node> huge(placement);
    char* kept = huge.allocate(2 * two_mib);
    huge.deallocate(kept, 2 * two_mib);
    ASSERT_EQ(free_pages(0), 0) << "the parent's cache holds node 0's pool";
    const int code = numaplace_test::run_child(
        [&] {
            // the block's range is free in the child: map something of its own there
            void* own = mmap(kept, 2 * two_mib, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (own != kept) return 80;
            static_cast<char*>(own)[two_mib] = 7;
            try {
                memory::allocate(two_mib, placement);
                return 81; // the parent's pages are not the child's to take
            } catch (const placement_error& e) {
                if (e.error_number() != ENOMEM || std::string(e.what()).find("1 needed, 0 free") == std::string::npos) return 82;
            }
            return static_cast<char*>(own)[two_mib] == 7 ? 0 : 83; // unmapped: SIGSEGV, 139
        },
        60);
    EXPECT_EQ(code, 0) << "80: set-up, 81: placed, 82: another refusal, 83/139: the child's own mapping unmapped";
    EXPECT_EQ(free_pages(0), 0) << "the parent's block still holds its pages";
    char* again = huge.allocate(2 * two_mib);
    EXPECT_EQ(again, kept) << "the parent's cached block is still there";
    huge.deallocate(again, 2 * two_mib);
    release_cached_memory();
    EXPECT_EQ(free_pages(0), 2);
}
