// Explicit huge pages with pools reserved (huge_pages.hpp, place.hpp's place_on_pages): in the guests
// (NUMAPLACE_GUEST_LAYOUT set; the guest's test process is root) each test reserves 2 MiB pages per node
// through sysfs and restores the pools after. On the host nothing is reserved (the machine is shared)
// unless NUMAPLACE_TEST_RESERVE_HUGE_PAGES=1 asks for it; without a pool these tests skip there.
// Every block is checked three ways: where() (its node), where_page_sizes() (KernelPageSize from
// /proc/self/smaps) and the node's free_hugepages read from sysfs here, dropping by the exact count.
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/replicated.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <expect.hpp>
#include <huge_pools.hpp>
#include <seccomp_filter.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

using namespace numaplace;
using numaplace_test::contains;

namespace {
using numaplace_test::free_pages;
using numaplace_test::frees;
using numaplace_test::pool_file;
using numaplace_test::read_count;
using numaplace_test::reserved_pools;
using numaplace_test::two_mib;
using numaplace_test::write_count;

#define RESERVE_OR_SKIP NUMAPLACE_RESERVE_OR_SKIP
using numaplace_test::may_reserve;

int nodes() { return static_cast<int>(topology::get().size()); }
} // namespace

TEST(huge_pages_pools, on_node_takes_the_nodes_own_pool_and_gives_it_back) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 3));
    const std::size_t bytes = 2 * two_mib + 100 * 1024; // two pages and a tail on small pages
    for (int node = 0; node < nodes(); ++node) {
        const std::vector<long> before = frees();
        void* p = memory::allocate(bytes, on_node(node).with_pages(page_size::explicit_2m));
        for (int k = 0; k < nodes(); ++k)
            EXPECT_EQ(free_pages(k), before[static_cast<std::size_t>(k)] - (k == node ? 2 : 0)) << "node " << k;
        const page_size_histogram sizes = where_page_sizes(p, bytes);
        EXPECT_EQ(sizes.bytes_on(two_mib), 2 * two_mib) << "KernelPageSize 2048 kB";
        EXPECT_EQ(sizes.bytes_on(detail::page_size()), memory::page_round(bytes) - 2 * two_mib) << "the tail";
        memory::touch(p, bytes);
        EXPECT_EQ(where(p, bytes).on(node), where(p, bytes).pages);
        memory::unmap(p, bytes);
        EXPECT_EQ(frees(), before) << "every page back in its pool";
    }
    // largest_explicit: no 1 GiB page free on node 0 (none reserved), so 2 MiB pages of its own pool
    const std::vector<long> before = frees();
    void* q = memory::allocate(bytes, on_node(0).with_pages(page_size::largest_explicit));
    EXPECT_EQ(where_page_sizes(q, bytes).bytes_on(two_mib), 2 * two_mib);
    EXPECT_EQ(free_pages(0), before[0] - 2);
    memory::unmap(q, bytes);
}

TEST(huge_pages_pools, partitioned_every_block_on_its_nodes_pages) {
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 4));
    const std::size_t per_block = 3, n = static_cast<std::size_t>(nodes()) * per_block * two_mib / sizeof(double);
    const partition<double> part(n, topology::get().all(), std::vector<std::size_t>(static_cast<std::size_t>(nodes()), 1));
    const std::vector<long> before = frees();
    const std::size_t degraded = degradation_count();
    {
        partitioned_vector<double> v(n, partitioned_allocator<double>(partitioned(part).with_pages(page_size::explicit_2m)));
        for (int k = 0; k < nodes(); ++k)
            EXPECT_EQ(free_pages(k), before[static_cast<std::size_t>(k)] - static_cast<long>(per_block)) << "node " << k;
        const partition<double> placed = partition_of(v);
        EXPECT_EQ(placed.alignment(), two_mib);
        for (const block& b : placed.blocks()) {
            const std::size_t bytes = (b.end - b.begin) * sizeof(double);
            EXPECT_EQ(bytes, per_block * two_mib) << "block of node " << b.node;
            EXPECT_EQ(where_page_sizes(v.data() + b.begin, bytes).bytes_on(two_mib), bytes) << "node " << b.node;
            EXPECT_EQ(where(v.data() + b.begin, bytes).on(b.node), per_block * two_mib / detail::page_size()) << "node " << b.node;
        }
        EXPECT_EQ(where(v.data(), placed).fraction(), 1.0);
    }
    EXPECT_EQ(degradation_count(), degraded);
    // freed into the cache of own mappings, or unmapped: either way no page left on a node
    release_cached_memory();
    EXPECT_EQ(frees(), before);
}

TEST(huge_pages_pools, a_pool_short_on_one_node_strict_throws_first_degrading_places_the_rest) {
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    std::vector<long> counts(static_cast<std::size_t>(nodes()), 3);
    counts[1] = 1; // node 1 short: its block needs 2
    RESERVE_OR_SKIP(pools, counts);
    const std::size_t n = static_cast<std::size_t>(nodes()) * 2 * two_mib / sizeof(double);
    const partition<double> part(n, topology::get().all(), std::vector<std::size_t>(static_cast<std::size_t>(nodes()), 1));
    const std::vector<long> before = frees();
    try {
        memory::allocate(n * sizeof(double), partitioned(part).with_pages(page_size::explicit_2m));
        ADD_FAILURE() << "strict: no exception";
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), ENOMEM);
        EXPECT_EQ(e.node(), 1);
        EXPECT_TRUE(contains(e.what(), "node 1: 2 needed, 1 free")) << e.what();
    }
    EXPECT_EQ(frees(), before) << "nothing mapped before the throw";
    const partitioned degrading = partitioned(part, fallback::degrade).with_pages(page_size::explicit_2m);
    void* p = memory::allocate(n * sizeof(double), degrading);
    for (int k = 0; k < nodes(); ++k)
        EXPECT_EQ(free_pages(k), before[static_cast<std::size_t>(k)] - (k == 1 ? 0 : 2)) << "node " << k;
    bool recorded = false;
    for (const auto& m : degradations()) recorded = recorded || contains(m, "the block of node 1 on transparent");
    EXPECT_TRUE(recorded);
    memory::touch(p, n * sizeof(double));
    const partition<double> split = partition<double>::from_untyped(degrading.partition_for(n * sizeof(double)));
    EXPECT_EQ(where(static_cast<const double*>(p), split).fraction(), 1.0) << "node 1's block still bound to node 1";
    memory::unmap(p, n * sizeof(double));
    EXPECT_EQ(frees(), before);
}

TEST(huge_pages_pools, fork_with_live_blocks_never_copies_a_huge_page_in_the_parent) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    // Every page of node 0's pool in use: a copy-on-write in the parent after fork() would need a free
    // page and raise SIGBUS. The child does not inherit the blocks, so the parent writes its own.
    const std::size_t bytes = 2 * two_mib;
    auto* p = static_cast<char*>(memory::allocate(bytes, on_node(0).with_pages(page_size::explicit_2m)));
    std::memset(p, 7, bytes);
    int ready[2], done[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(done), 0);
    const pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(done[1]);
        char c = 0;
        (void)!write(ready[1], &c, 1);
        (void)!read(done[0], &c, 1); // alive while the parent writes
        // not inherited (MADV_DONTFORK): nothing of the parent's huge pages is mapped here
        _exit(where_page_sizes(p, bytes).by_size.empty() ? 0 : 1);
    }
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    std::memset(p, 9, bytes); // SIGBUS here without MADV_DONTFORK
    EXPECT_EQ(p[bytes - 1], 9);
    (void)!write(done[1], &c, 1);
    EXPECT_EQ(numaplace_test::wait_child(pid, 60), 0);
    for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
    EXPECT_EQ(free_pages(0), 0);
    memory::unmap(p, bytes);
    EXPECT_EQ(free_pages(0), 2);
}

TEST(huge_pages_pools, a_forked_child_never_reuses_its_parents_cached_explicit_blocks) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 1));
    allocator<char, on_node> huge(on_node(0).with_pages(page_size::explicit_2m));
    char* a = huge.allocate(two_mib);
    a[0] = 1;
    huge.deallocate(a, two_mib); // cached, its page still held: node 0's pool has none free
    const int code = numaplace_test::run_child(
        [&] {
            // the parent's block is not mapped here (MADV_DONTFORK): the cache must not hand it out
            try {
                char* b = huge.allocate(two_mib);
                b[0] = 2; // SIGSEGV if it were the parent's block
                return b == a ? 1 : 2; // a fresh mapping cannot get a page: none free
            } catch (const placement_error& e) {
                return e.error_number() == ENOMEM ? 0 : 3;
            }
        },
        60);
    EXPECT_EQ(code, 0);
    char* c = huge.allocate(two_mib); // the parent still reuses it
    EXPECT_EQ(c, a);
    EXPECT_EQ(c[0], 1);
    huge.deallocate(c, two_mib);
    release_cached_memory();
    EXPECT_EQ(free_pages(0), 1);
}

TEST(huge_pages_pools, seccomp_refusing_map_hugetlb_after_start_up) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    const int code = numaplace_test::run_child(
        [] {
            if (!numaplace_test::refuse_mmap_flags_with(0x40000 /* MAP_HUGETLB */, EPERM)) return 90;
            try {
                memory::allocate(two_mib, on_node(0).with_pages(page_size::explicit_2m));
                return 91; // strict: must throw
            } catch (const placement_error& e) {
                if (e.error_number() != EPERM || !contains(e.what(), "MAP_HUGETLB")) return 92;
            }
            const std::size_t before = degradation_count();
            void* p = memory::allocate(two_mib, on_node(0, node_policy::bind, fallback::degrade).with_pages(page_size::explicit_2m));
            if (degradation_count() == before || where_page_sizes(p, two_mib).bytes_on(two_mib) != 0) return 93;
            memory::unmap(p, two_mib);
            return free_pages(0) == 2 ? 0 : 94;
        },
        60);
    EXPECT_EQ(code, 0);
}

TEST(huge_pages_pools, freed_blocks_are_reused_by_the_same_placement_only) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    allocator<char, on_node> huge(on_node(0).with_pages(page_size::explicit_2m));
    allocator<char, on_node> small{on_node(0)};
    char* a = huge.allocate(2 * two_mib);
    EXPECT_EQ(free_pages(0), 0);
    huge.deallocate(a, 2 * two_mib); // kept mapped and placed, by placement and size
    char* s = small.allocate(2 * two_mib);
    EXPECT_NE(s, a) << "a small-page placement never gets an explicit-page block";
    EXPECT_EQ(where_page_sizes(s, 2 * two_mib).bytes_on(two_mib), 0u);
    small.deallocate(s, 2 * two_mib);
    char* b = huge.allocate(2 * two_mib);
    EXPECT_EQ(b, a) << "reused as it is";
    EXPECT_EQ(where_page_sizes(b, 2 * two_mib).bytes_on(two_mib), 2 * two_mib);
    huge.deallocate(b, 2 * two_mib);
    release_cached_memory();
    EXPECT_EQ(free_pages(0), 2);
}

TEST(huge_pages_pools, interleaved_whole_pages_and_weighted_runs_from_each_nodes_pool) {
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 4));
    const std::vector<long> before = frees();
    // equal weights: the kernel interleaves whole explicit pages, 2 per node
    const std::size_t bytes = 2 * static_cast<std::size_t>(nodes()) * two_mib;
    void* p = memory::allocate(bytes, interleaved().with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(p, bytes).bytes_on(two_mib), bytes);
    for (int k = 0; k < nodes(); ++k) EXPECT_EQ(free_pages(k), before[static_cast<std::size_t>(k)] - 2) << "node " << k;
    memory::unmap(p, bytes);
    EXPECT_EQ(frees(), before);
    // weights {2, 1, ...}: runs of 2 pages on node 0, 1 on the others, two rounds
    std::vector<std::size_t> w(static_cast<std::size_t>(nodes()), 1);
    w[0] = 2;
    const std::size_t runs = 2 * (static_cast<std::size_t>(nodes()) + 1) * two_mib;
    void* q = memory::allocate(runs, interleaved(topology::get().all(), w).with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(q, runs).bytes_on(two_mib), runs);
    for (int k = 0; k < nodes(); ++k)
        EXPECT_EQ(free_pages(k), before[static_cast<std::size_t>(k)] - (k == 0 ? 4 : 2)) << "node " << k;
    memory::touch(q, runs);
    EXPECT_EQ(where(q, 2 * two_mib).on(0), 2 * two_mib / detail::page_size()) << "the first run on node 0";
    memory::unmap(q, runs);
    EXPECT_EQ(frees(), before);
}

TEST(huge_pages_pools, a_preferring_placement_takes_another_nodes_page_a_bound_one_never) {
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes";
    std::vector<long> counts(static_cast<std::size_t>(nodes()), 2);
    counts[0] = 0; // node 0's pool empty
    RESERVE_OR_SKIP(pools, counts);
    const std::vector<long> before = frees();
    EXPECT_THROW(memory::allocate(two_mib, on_node(0).with_pages(page_size::explicit_2m)), placement_error);
    EXPECT_EQ(frees(), before);
    void* p = memory::allocate(two_mib, on_node(0, node_policy::prefer).with_pages(page_size::explicit_2m));
    EXPECT_EQ(where_page_sizes(p, two_mib).bytes_on(two_mib), two_mib);
    long taken = 0;
    for (int k = 0; k < nodes(); ++k) taken += before[static_cast<std::size_t>(k)] - free_pages(k);
    EXPECT_EQ(taken, 1) << "one page, from another node's pool";
    memory::unmap(p, two_mib);
}

TEST(huge_pages_pools, the_hugetlb_cgroup_limit_is_admission_too) {
    // In a child moved into a cgroup whose hugetlb.2MB.max allows one page (guests only: it mounts
    // cgroup2 and changes the guest's cgroups). Two pages: strict throws naming the limit, degrading
    // records it; one page fits.
    if (!std::getenv("NUMAPLACE_GUEST_LAYOUT")) GTEST_SKIP() << "changes cgroups: guests only";
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    const int code = numaplace_test::run_child(
        [] {
            if (const int failed = numaplace_test::enter_hugetlb_cgroup("numaplace_huge", static_cast<long>(two_mib))) return failed;
            if (huge_page_usage_limits(two_mib).cgroup_room() != two_mib) return 84;
            try {
                memory::allocate(2 * two_mib, on_node(0).with_pages(page_size::explicit_2m));
                return 85;
            } catch (const placement_error& e) {
                if (e.error_number() != ENOMEM || !contains(e.what(), "hugetlb cgroup limit")) return 86;
            }
            const std::size_t before = degradation_count();
            void* p = memory::allocate(2 * two_mib, on_node(0, node_policy::bind, fallback::degrade).with_pages(page_size::explicit_2m));
            if (degradation_count() == before) return 87;
            memory::unmap(p, 2 * two_mib);
            void* q = memory::allocate(two_mib, on_node(0).with_pages(page_size::explicit_2m)); // fits
            const bool on_pages = where_page_sizes(q, two_mib).bytes_on(two_mib) == two_mib;
            memory::unmap(q, two_mib);
            return on_pages ? 0 : 88;
        },
        60);
    EXPECT_EQ(code, 0);
}

TEST(huge_pages_pools, replicated_copies_each_on_its_nodes_pool) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    const std::size_t n = 2 * two_mib / sizeof(double);
    const std::vector<double> source(n, 1.5);
    const std::vector<long> before = frees();
    {
        const replicated<double> r(source.data(), n, topology::get().all(), fallback::strict, page_size::explicit_2m);
        for (const auto& c : r.copies()) {
            EXPECT_EQ(where_page_sizes(c.data, n * sizeof(double)).bytes_on(two_mib), n * sizeof(double)) << "node " << c.node;
            EXPECT_EQ(where(c.data, n * sizeof(double)).on(c.node), n * sizeof(double) / detail::page_size());
            EXPECT_EQ(c.data[n - 1], 1.5);
            EXPECT_EQ(free_pages(c.node), before[static_cast<std::size_t>(c.node)] - 2) << "node " << c.node;
        }
    }
    EXPECT_EQ(frees(), before);
}

TEST(huge_pages_pools, one_gib_pages_where_the_machine_has_them) {
    // A 1 GiB page needs a CPU with pdpe1gb and a node with more than 1 GiB free: the guests' nodes have
    // 1 GiB or less, so there the request must be refused, naming the size (asserted either way).
    const std::size_t gib = std::size_t(1) << 30;
    if (!explicit_page_supported(gib)) {
        try {
            memory::allocate(gib, on_node(0).with_pages(page_size::explicit_1g));
            ADD_FAILURE() << "no 1 GiB pages, yet placed";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), EINVAL);
            EXPECT_TRUE(contains(e.what(), "1 GiB")) << e.what();
        }
        std::printf("1 GiB pages: the kernel has none (no pdpe1gb): refusal asserted\n");
        return;
    }
    const std::string f = pool_file(0, "nr_hugepages", gib);
    const long old = read_count(f);
    const bool got = may_reserve() && write_count(f, old + 1) && read_count(pool_file(0, "free_hugepages", gib)) >= 1;
    if (!got) {
        if (may_reserve()) write_count(f, old);
        try {
            memory::allocate(gib, on_node(0).with_pages(page_size::explicit_1g));
            ADD_FAILURE() << "no free 1 GiB page, yet placed";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.error_number(), ENOMEM);
            EXPECT_TRUE(contains(e.what(), "1 GiB pages on node 0")) << e.what();
        }
        std::printf("1 GiB pages: none could be reserved on node 0 (its memory): refusal asserted\n");
        return;
    }
    void* p = memory::allocate(gib, on_node(0).with_pages(page_size::explicit_1g));
    EXPECT_EQ(where_page_sizes(p, gib).bytes_on(gib), gib);
    memory::unmap(p, gib);
    write_count(f, old);
}
