// allocator.hpp: the STL allocators themselves (untouched pages until the container writes them, small
// blocks from the node's heap, element types, rebinding, cross-thread frees, sizes past max_size), on any
// topology: on a one-node host every expectation is "node 0", in the multi-node guests it is exact per
// node. Where each placement puts the pages: test_placement; the Allocator requirements with every std
// container: tests/conformance.
#include <numaplace/allocator.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/replace.hpp>
#include <numaplace/where.hpp>
#include <numaplace/detail/background_release.hpp> // the internals these tests look into, which the
#include <numaplace/detail/routed_mapping.hpp>     // separately compiled mode leaves out of the public headers

#include <gtest/gtest.h>

#include "child.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <list>
#include <map>
#include <new>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

namespace np = numaplace;
using namespace numaplace;

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;

template <class A>
using lazy_vector = std::vector<typename A::value_type, default_init_allocator<A>>;

std::size_t pages_of(std::size_t bytes) { return (bytes + detail::page_size() - 1) / detail::page_size(); }

constexpr std::size_t max_size = std::numeric_limits<std::size_t>::max();
} // namespace

TEST(allocator, node_allocator_puts_every_page_on_its_node_and_touches_nothing_itself) {
    const auto& topo = topology::get();
    const std::size_t n = 64 * mib / sizeof(double);
    for (const auto& node : topo.nodes()) {
        if (node.memory < 256 * mib) continue; // too small to hold 64 MiB beside the kernel
        lazy_vector<node_allocator<double>> v(n, node_allocator<double>(node.id));
        auto before = where(v);
        EXPECT_EQ(before.pages, pages_of(n * sizeof(double)));
        EXPECT_EQ(before.untouched, before.pages) << "allocation or construction touched pages";
        memory::touch(v.data(), n * sizeof(double));
        auto after = where(v);
        EXPECT_EQ(after.untouched, 0u);
        EXPECT_EQ(after.on(node.id), after.pages) << "node " << node.id;
        for (const auto& other : topo.nodes())
            if (other.id != node.id) EXPECT_EQ(after.on(other.id), 0u) << "node " << other.id;
    }
}

TEST(allocator, value_initialising_vector_is_touched_by_its_constructor) {
    const std::size_t n = 16 * mib / sizeof(double);
    std::vector<double, node_allocator<double>> v(n, node_allocator<double>(0));
    auto h = where(v);
    EXPECT_EQ(h.untouched, 0u);
    EXPECT_EQ(h.on(0), h.pages);
}

TEST(allocator, partitioned_allocator_default_constructs_to_the_default_partition_of_t) {
    partitioned_allocator<double> a;
    EXPECT_EQ(a.placement().partition().nodes(), topology::get().with_cpus());
    EXPECT_EQ(a.placement().element_size(), sizeof(double));
    EXPECT_EQ(a, partitioned_allocator<double>(partition<double>(0)));
    std::vector<double, partitioned_allocator<double>> v(1 << 20);
    EXPECT_EQ(v[12345], 0.0);
    EXPECT_EQ(where(v.data(), partition<double>(v.size())).remote, 0u);
}

TEST(allocator, partitioned_placement_of_another_element_size_is_rejected_at_construction) {
    // partitioned_allocator<double>(partition<float>) does not compile (tests/compile_fail); a placement
    // built from one is caught when the allocator is made
    static_assert(!std::is_constructible<partitioned_allocator<double>, partition<float>>::value, "");
    static_assert(!std::is_constructible<partitioned_allocator<double>, const partition<float>&, fallback>::value, "");
    static_assert(std::is_constructible<partitioned_allocator<double>, partition<double>, fallback>::value, "");
    partitioned p(partition<float>(100));
    EXPECT_THROW(partitioned_allocator<double> a(p), invalid_placement);
    EXPECT_THROW(partitioned_allocator<double> a{partitioned(partition<float>(100), fallback::degrade)}, invalid_placement);
    EXPECT_NO_THROW(partitioned_allocator<float> a(p));
    // rebinding (containers do it for their nodes) keeps the placement without a check
    partitioned_allocator<double> d(partition<double>(100));
    partitioned_allocator<char> c(d);
    EXPECT_EQ(c.placement(), d.placement());
    // ... and its element size: a vector of float through it is split by 8-byte units, so the loop
    // and partition_of refuse it, naming both sizes
    std::vector<float, partitioned_allocator<float>> v(1000, 1.0f, partitioned_allocator<float>(d));
    EXPECT_EQ(v.get_allocator().placement().element_size(), sizeof(double));
    try {
        (void)partition_of(v);
        ADD_FAILURE() << "partition_of took a partition of 8-byte elements for floats";
    } catch (const invalid_placement& e) {
        EXPECT_NE(std::string(e.what()).find("8-byte elements used for 4-byte elements"), std::string::npos) << e.what();
    }
    EXPECT_THROW(parallel_for(v, [&](std::size_t i) { v[i] = 2.0f; }), invalid_placement);
}

TEST(allocator, small_allocations_come_from_the_node_pool_not_one_mapping_each) {
    node_allocator<int> a(0);
    std::vector<int*> ps;
    for (int i = 0; i < 1000; ++i) ps.push_back(a.allocate(4));
    // 1000 blocks of 16 bytes share pages: 16000 bytes fit in a handful of pages, not 1000 mappings
    std::set<std::uintptr_t> pages;
    for (int* p : ps) pages.insert(reinterpret_cast<std::uintptr_t>(p) / detail::page_size());
    EXPECT_LE(pages.size(), 16u);
    for (int* p : ps) *p = 7;
    auto h = where(ps.front(), sizeof(int));
    EXPECT_EQ(h.on(0), 1u);
    for (int* p : ps) a.deallocate(p, 4);
}

TEST(allocator, every_node_pool_serves_its_own_node) {
    for (const auto& node : topology::get().nodes()) {
        node_allocator<long> a(node.id);
        long* p = a.allocate(16);
        for (int i = 0; i < 16; ++i) p[i] = i;
        EXPECT_EQ(where(p, 16 * sizeof(long)).on(node.id), where(p, 16 * sizeof(long)).pages) << node.id;
        a.deallocate(p, 16);
    }
}

// The small-object heap moves blocks between threads: allocate on some threads, free on others, on
// several nodes at once (ThreadSanitizer runs this too).
TEST(allocator, small_blocks_cross_threads_without_loss) {
    const auto& topo = topology::get();
    constexpr int threads = 4, per_thread = 20000;
    std::vector<std::vector<long*>> made(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            node_allocator<long> a(t % static_cast<int>(topo.size()));
            for (int i = 0; i < per_thread; ++i) {
                long* p = a.allocate(1 + static_cast<std::size_t>(i % 7));
                *p = t * per_thread + i;
                made[static_cast<std::size_t>(t)].push_back(p);
            }
        });
    for (auto& th : pool) th.join();
    pool.clear();
    std::set<long*> distinct;
    for (auto& v : made) distinct.insert(v.begin(), v.end());
    EXPECT_EQ(distinct.size(), static_cast<std::size_t>(threads * per_thread)) << "a block was handed out twice";
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            // free another thread's blocks
            const int owner = (t + 1) % threads;
            node_allocator<long> a(owner % static_cast<int>(topo.size()));
            auto& v = made[static_cast<std::size_t>(owner)];
            for (std::size_t i = 0; i < v.size(); ++i) {
                EXPECT_EQ(*v[i], owner * per_thread + static_cast<long>(i));
                a.deallocate(v[i], 1 + i % 7);
            }
        });
    for (auto& th : pool) th.join();
}

TEST(allocator, size_overflow_throws_bad_array_new_length) {
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

// --- attacks -----------------------------------------------------------------------------------------

TEST(allocator_attack, value_semantics_and_bad_sizes) {
    using A = np::partitioned_allocator<double>;
    A a; // the default partition of double
    A b = std::move(a);
    EXPECT_TRUE(a == b);
    a = a;
    EXPECT_TRUE(a == b);
    EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(max_size), std::bad_array_new_length);
    EXPECT_THROW((void)a.allocate(a.max_size()), std::bad_alloc); // fits size_t, not memory
    double* p = a.allocate(0);
    a.deallocate(p, 0);
    for (std::size_t n : {std::size_t(1), std::size_t(511), std::size_t(512), std::size_t(513), std::size_t(262145)}) {
        double* q = a.allocate(n);
        ASSERT_NE(q, nullptr);
        for (std::size_t i = 0; i < n; ++i) q[i] = double(i);
        EXPECT_EQ(q[n - 1], double(n - 1));
        b.deallocate(q, n); // equal allocator frees
    }
    np::interleaved_allocator<char> il;
    np::interleaved_allocator<char> il2 = il;
    EXPECT_TRUE(il == il2);
    EXPECT_THROW(np::node_allocator<int>(-1), np::unknown_node);
    EXPECT_THROW(np::node_allocator<int>(static_cast<int>(np::topology::get().size())), np::unknown_node);
}

TEST(allocator_attack, std_containers_with_weighted_interleave) {
    const np::node_set all = np::topology::get().all();
    std::vector<std::size_t> w(all.size(), 1);
    w[0] = 3;
    const np::interleaved il(all, w);
    using S = std::basic_string<char, std::char_traits<char>, np::interleaved_allocator<char>>;
    np::interleaved_allocator<char> ca(il);
    std::map<int, S, std::less<int>, np::interleaved_allocator<std::pair<const int, S>>> m(ca);
    for (int i = 0; i < 2000; ++i) m.emplace(i, S(std::size_t(i % 300), char('a' + i % 26), ca));
    EXPECT_EQ(m.size(), 2000u);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(m.at(i), S(std::size_t(i % 300), char('a' + i % 26), ca));
    auto node = m.extract(5);
    EXPECT_EQ(node.key(), 5);
    m.insert(std::move(node));
    EXPECT_EQ(m.size(), 2000u);
    std::deque<int, np::interleaved_allocator<int>> d(ca);
    std::list<int, np::interleaved_allocator<int>> l(ca);
    for (int i = 0; i < 100000; ++i) { d.push_back(i); l.push_front(i); }
    EXPECT_EQ(std::accumulate(d.begin(), d.end(), 0LL), 4999950000LL);
    EXPECT_EQ(std::accumulate(l.begin(), l.end(), 0LL), 4999950000LL);
    while (!d.empty()) d.pop_front();
    S big(1 << 20, 'x', ca);
    EXPECT_EQ(std::count(big.begin(), big.end(), 'x'), 1 << 20);
}

// ---- Reuse of own mappings (detail/placed_cache.hpp): the same placement, size and alignment only ----
namespace {
bool is_mapped(const void* p) {
    unsigned char v = 0;
    return ::mincore(const_cast<void*>(p), 1, &v) == 0;
}
} // namespace

TEST(allocator_reuse, an_interleaved_block_is_reused_with_its_layout_and_only_for_the_same_placement) {
    const int code = numaplace_test::run_child([] {
        np::release_cached_memory();
        const std::size_t n = (4 * mib + 12345) / sizeof(double);
        interleaved_allocator<double> a;
        double* p = a.allocate(n);
        memory::touch(p, n * sizeof(double));
        const page_histogram first = where(p, n * sizeof(double));
        if (first.untouched != 0) return 10;
        a.deallocate(p, n);
        if (!is_mapped(p)) return 11; // kept for reuse
        double* q = a.allocate(n);
        if (q != p) return 12; // the same placement, size and alignment: the same block
        const page_histogram again = where(q, n * sizeof(double));
        if (again.per_node != first.per_node || again.untouched != 0) return 13; // its pages where they were
        // another size, or another placement, never gets it
        double* other_size = a.allocate(n + 1);
        if (other_size == q) return 14;
        a.deallocate(q, n);
        // another placement: node 0 alone, degrading (unequal even on a host with one node)
        interleaved_allocator<double> one(interleaved(node_set{topology::get().all()[0]}, {}, fallback::degrade));
        double* other_placement = one.allocate(n);
        if (other_placement == q) return 15;
        memory::touch(other_placement, n * sizeof(double));
        const page_histogram h = where(other_placement, n * sizeof(double));
        if (h.on(topology::get().all()[0]) != h.pages) return 16; // placed by its own placement
        one.deallocate(other_placement, n);
        a.deallocate(other_size, n + 1);
        np::release_cached_memory();
        if (is_mapped(q) || is_mapped(other_placement)) return 17; // given back
        if (detail::placed_cache::instance().cached_bytes() != 0) return 18;
        return 0;
    });
    EXPECT_EQ(code, 0) << "11: unmapped at free, 12: not reused, 13: layout changed, 14/15: reused for another "
                          "size/placement, 16: misplaced, 17/18: release_cached_memory kept it";
}

TEST(allocator_reuse, a_partitioned_block_is_reused_only_for_the_same_layout) {
    const auto& topo = topology::get();
    const int code = numaplace_test::run_child([&topo] {
        np::release_cached_memory();
        const std::size_t n = 8 * mib / sizeof(double);
        const partition<double> even(n);
        std::vector<std::size_t> skew(topo.with_cpus().size(), 1);
        skew[0] = 3;
        const partition<double> skewed(n, topo.with_cpus(), skew);
        partitioned_allocator<double> a(even), b(skewed);
        double* p = a.allocate(n);
        memory::touch(p, n * sizeof(double));
        if (where(p, even).remote != 0) return 20;
        a.deallocate(p, n);
        double* q = b.allocate(n); // another layout: not the cached block
        if (q == p && skew.size() > 1) return 21;
        memory::touch(q, n * sizeof(double));
        if (where(q, skewed).remote != 0) return 22;
        double* r = a.allocate(n); // the same layout: the cached block, still where the partition says
        if (r != p) return 23;
        if (where(r, even).remote != 0 || where(r, n * sizeof(double)).untouched != 0) return 24;
        a.deallocate(r, n);
        b.deallocate(q, n);
        // A buffer that replace() re-placed follows another layout: freed, it is not reused (its
        // mapping goes back); the next block of `a` is placed by `even` again.
        np::release_cached_memory();
        {
            std::vector<double, partitioned_allocator<double>> w(n, 1.0, a);
            if (replace(w, skewed).failed_pages() != 0) return 25;
            if (where(w.data(), skewed).remote != 0) return 26;
        }
        if (skew.size() > 1 && detail::placed_cache::instance().cached_bytes() != 0) return 27; // (one node: one layout)
        double* s2 = a.allocate(n);
        memory::touch(s2, n * sizeof(double));
        if (where(s2, even).remote != 0) return 28;
        a.deallocate(s2, n);
        return 0;
    });
    EXPECT_EQ(code, 0) << "21: reused for another layout, 22/24/28: misplaced, 23: not reused, 25/26: replace "
                          "failed, 27: a re-placed buffer was kept for reuse";
}

TEST(allocator_reuse, a_full_cache_gives_back_the_oldest_block_and_keeps_the_others) {
    const int code = numaplace_test::run_child([] {
        np::release_cached_memory();
        const std::size_t page = detail::page_size(), slots = detail::placed_cache::slots;
        interleaved_allocator<char> a;
        std::vector<char*> p(slots + 1);
        for (std::size_t k = 0; k <= slots; ++k) {
            p[k] = a.allocate((k + 1) * page); // sizes 1 .. slots + 1 pages: never equal
            p[k][0] = 1;
        }
        for (std::size_t k = 0; k <= slots; ++k) a.deallocate(p[k], (k + 1) * page); // p[0] is the oldest
        if (is_mapped(p[0])) return 40; // the table was full: the oldest went back
        std::size_t kept = 0;
        for (std::size_t k = 1; k <= slots; ++k) {
            if (!is_mapped(p[k])) return 41;
            kept += (k + 1) * page;
        }
        if (detail::placed_cache::instance().cached_bytes() != kept) return 42;
        for (std::size_t k = 1; k <= slots; ++k) {
            char* q = a.allocate((k + 1) * page);
            if (q != p[k] || q[0] != 1) return 43; // each the block of its size, as it was
            p[k] = q;
        }
        if (detail::placed_cache::instance().cached_bytes() != 0) return 44;
        for (std::size_t k = 1; k <= slots; ++k) a.deallocate(p[k], (k + 1) * page);
        np::release_cached_memory();
        return detail::placed_cache::instance().cached_bytes() == 0 ? 0 : 45;
    });
    EXPECT_EQ(code, 0) << "40: the oldest was kept, 41: a newer one was given back, 42: cached bytes wrong, "
                          "43: not reused, 44/45: bytes still counted";
}

TEST(allocator_reuse, cached_blocks_decay_are_bounded_and_survive_fork) {
    const int code = numaplace_test::run_child([] {
        np::release_cached_memory();
        interleaved_allocator<char> a;
        // beyond the bound (64 MiB when nothing is in use): unmapped at once
        const std::size_t big = 80 * mib;
        char* b = a.allocate(big);
        b[0] = 1;
        a.deallocate(b, big);
        if (is_mapped(b)) return 30;
        // kept, and a forked child gets it
        const std::size_t n = 3 * mib;
        char* p = a.allocate(n);
        std::memset(p, 1, n);
        a.deallocate(p, n);
        const pid_t pid = ::fork();
        if (pid == 0) {
            char* q = a.allocate(n);
            const bool same = q == p && q[n - 1] == 1;
            a.deallocate(q, n);
            ::_exit(same ? 0 : 1);
        }
        if (numaplace_test::wait_child(pid, 30) != 0) return 31;
        // unused for the decay time: unmapped at the next own mapping's allocation or free
        std::this_thread::sleep_for(std::chrono::milliseconds(detail::large_decay_ms + 100));
        char* other = a.allocate(n + 4096);
        const bool reused_address = p >= other && p < other + n + 4096; // the new mapping may take its place
        if (is_mapped(p) && !reused_address) return 32;
        a.deallocate(other, n + 4096);
        return 0;
    });
    EXPECT_EQ(code, 0) << "30: over the bound kept, 31: the child did not get the block, 32: no decay";
}
