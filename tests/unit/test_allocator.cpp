// Placement behaviour of the allocators: exact page counts per node, on any topology. On a one-node host
// every expectation degenerates to "node 0"; in the multi-node guests the same assertions are exact
// per node.
#include <numaplace/allocator.hpp>
#include <numaplace/where.hpp>

#include "smaps.hpp"

#include <gtest/gtest.h>

#include <seccomp.hpp>

#include <cerrno>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <type_traits>
#include <thread>
#include <string>
#include <vector>

using namespace numaplace;

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;

template <class A>
using lazy_vector = std::vector<typename A::value_type, default_init_allocator<A>>;

std::size_t pages_of(std::size_t bytes) { return (bytes + detail::page_size() - 1) / detail::page_size(); }
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

TEST(allocator, preferred_node_puts_pages_there_while_it_has_memory) {
    const auto& topo = topology::get();
    for (const auto& node : topo.nodes()) {
        if (node.memory < 256 * mib) continue;
        std::vector<char, node_allocator<char>> v(8 * mib, 1, node_allocator<char>(node.id, node_policy::prefer));
        auto h = where(v);
        EXPECT_EQ(h.on(node.id), h.pages) << "node " << node.id;
    }
}

TEST(allocator, interleaved_spreads_pages_round_robin_within_one_page) {
    const auto& topo = topology::get();
    const node_set all = topo.all();
    const std::size_t bytes = 16 * mib + 3 * detail::page_size(); // not a multiple of the node count
    std::vector<char, interleaved_allocator<char>> v(bytes, 1, interleaved_allocator<char>(all));
    auto h = where(v);
    ASSERT_EQ(h.untouched, 0u);
    std::size_t lo = h.pages, hi = 0;
    for (int id : all) {
        lo = std::min(lo, h.on(id));
        hi = std::max(hi, h.on(id));
    }
    EXPECT_LE(hi - lo, 1u);
    EXPECT_EQ(h.touched(), h.pages);
    // round-robin order: page i+1 is on the node after page i's (in node-id order)
    if (all.size() > 1) {
        std::vector<int> seq;
        const std::size_t page = detail::page_size();
        const char* base = v.data();
        const std::size_t first = (page - reinterpret_cast<std::uintptr_t>(base) % page) % page;
        for (std::size_t off = first; off + page <= bytes && seq.size() < 64; off += page) {
            auto one = where(base + off, 1);
            for (int id : all)
                if (one.on(id)) seq.push_back(id);
        }
        for (std::size_t i = 1; i < seq.size(); ++i) {
            auto pos = [&](int id) { return std::find(all.begin(), all.end(), id) - all.begin(); };
            EXPECT_EQ((pos(seq[i - 1]) + 1) % static_cast<long>(all.size()), pos(seq[i])) << "page " << i;
        }
    }
}

TEST(allocator, weighted_interleave_places_runs_by_weight) {
    const auto& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "one NUMA node: weights cannot be observed";
    node_set two{0, 1};
    interleaved_allocator<char> a(interleaved(two, {2, 1}));
    const std::size_t pages = 3000;
    const std::size_t bytes = pages * detail::page_size();
    char* p = a.allocate(bytes);
    // placed eagerly at allocation: every page is already there
    auto h = where(p, bytes);
    EXPECT_EQ(h.untouched, 0u);
    EXPECT_EQ(h.on(0), 2000u);
    EXPECT_EQ(h.on(1), 1000u);
    // pattern 0,0,1 per period of three pages
    for (std::size_t i = 0; i < 30; ++i) {
        auto one = where(p + i * detail::page_size(), 1);
        EXPECT_EQ(one.on(i % 3 == 2 ? 1 : 0), 1u) << "page " << i;
    }
    a.deallocate(p, bytes);
}

TEST(allocator, equal_weights_reduce_to_plain_interleave) {
    interleaved i(topology::get().all(), std::vector<std::size_t>(topology::get().size(), 4));
    EXPECT_TRUE(i.weights().empty());
    EXPECT_EQ(i, interleaved(topology::get().all()));
}

TEST(allocator, partitioned_puts_block_k_on_node_k) {
    const std::size_t n = 48 * mib / sizeof(double) + 123;
    partition<double> part(n);
    lazy_vector<partitioned_allocator<double>> v(n, partitioned_allocator<double>(part));
    EXPECT_EQ(where(v).untouched, where(v).pages);
    memory::touch(v.data(), n * sizeof(double)); // one thread: binding, not first touch, decides
    auto loc = where(v.data(), part);
    EXPECT_EQ(loc.histogram.untouched, 0u);
    EXPECT_EQ(loc.remote, 0u);
    EXPECT_EQ(loc.local, loc.histogram.pages);
    for (const auto& b : part.blocks()) {
        if (b.empty()) continue;
        auto h = where(v.data() + b.begin, b.size() * sizeof(double));
        EXPECT_EQ(h.on(b.node), h.pages) << "block of node " << b.node;
    }
}

TEST(allocator, partitioned_allocation_of_another_size_is_split_by_the_same_weights) {
    partition<double> part(1000);
    partitioned_allocator<double> a(part);
    EXPECT_EQ(a.placement().partition_for(4000 * sizeof(double)), part.resized(4000).untyped());
    // a partial element counts as one (rebound allocators of other sizes)
    EXPECT_EQ(a.placement().partition_for(4000 * sizeof(double) + 1).units(), 4001u);
}

TEST(allocator, partitioned_rows_allocation_is_split_in_whole_rows) {
    const std::size_t rows = 3000, cols = 1000; // 8000-byte rows
    const auto part = partition<double>::rows(rows, cols);
    partitioned_allocator<double> a(part);
    // m elements: ceil(m / cols) whole rows
    const basic_partition split = a.placement().partition_for((rows * cols - 7) * sizeof(double));
    EXPECT_EQ(split.units(), rows);
    EXPECT_EQ(split, part.untyped());
    lazy_vector<partitioned_allocator<double>> v(rows * cols, a);
    memory::touch(v.data(), v.size() * sizeof(double));
    auto loc = where(v.data(), part); // all rows * cols elements
    EXPECT_EQ(loc.histogram.pages, pages_of(rows * cols * sizeof(double)));
    EXPECT_EQ(loc.remote, 0u);
    for (const auto& b : part.blocks()) {
        if (b.empty()) continue;
        auto h = where(v.data() + b.begin * cols, b.size() * cols * sizeof(double));
        EXPECT_EQ(h.on(b.node), h.pages) << "rows of node " << b.node;
    }
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

TEST(allocator, preferred_many_puts_pages_on_its_nodes_while_they_have_memory) {
    // Prefer only the last node (and, with several nodes, the last two): every page must land there,
    // not on node 0 where this thread may run. Strict where the kernel has MPOL_PREFERRED_MANY.
    const auto& topo = topology::get();
    const int last = static_cast<int>(topo.size()) - 1;
    std::vector<node_set> sets{node_set{last}};
    if (topo.size() > 2) sets.push_back(node_set{last - 1, last});
    for (const auto& set : sets) {
        if (!topo.capabilities().preferred_many) {
            allocator<char, preferred_many> strict{preferred_many(set)};
            EXPECT_THROW((void)strict.allocate(4 * mib), placement_error);
            continue;
        }
        allocator<char, preferred_many> a{preferred_many(set)};
        const std::size_t bytes = 4 * mib;
        char* p = a.allocate(bytes);
        std::memset(p, 1, bytes);
        auto h = where(p, bytes);
        std::size_t on_set = 0;
        for (int id : set) on_set += h.on(id);
        EXPECT_EQ(on_set, h.pages);
        EXPECT_EQ(h.untouched, 0u);
        a.deallocate(p, bytes);
    }
}

// Binding refused, as under a container's seccomp profile: strict placements throw placement_error
// with EPERM and lose nothing; degrading ones fall back and say so.
TEST(allocator, binding_refused_strict_throws_eperm_degrade_falls_back_and_records) {
    (void)topology::get(); // loaded (and probed) before the filter, as in a process sandboxed later
    int code = numaplace_test::run_denied(numaplace_test::memory_policy_syscalls(), [] {
        const std::size_t bytes = 4 * mib;
        try {
            node_allocator<char> strict(0);
            (void)strict.allocate(bytes);
            return 1; // must not get here
        } catch (const placement_error& e) {
            if (e.error_number() != EPERM || e.node() != 0 || e.bytes() != bytes) return 2;
            if (std::string(e.what()).find("errno 1") == std::string::npos) return 3;
        }
        const std::size_t before = degradation_count();
        node_allocator<char> soft(0, node_policy::bind, fallback::degrade);
        char* p = soft.allocate(bytes);
        std::memset(p, 1, bytes);
        soft.deallocate(p, bytes);
        if (degradation_count() != before + 1) return 4;
        if (degradations().empty() || degradations().back().find("Operation not permitted") == std::string::npos) return 5;
        partitioned_allocator<double> part_soft(partition<double>(1 << 20), fallback::degrade);
        double* d = part_soft.allocate(1 << 20);
        part_soft.deallocate(d, 1 << 20);
        if (degradation_count() <= before + 1) return 6;
        try {
            interleaved_allocator<char> il(topology::get().all());
            (void)il.allocate(bytes);
            return 7;
        } catch (const placement_error& e) {
            if (e.error_number() != EPERM) return 8;
        }
        return 0;
    });
    EXPECT_EQ(code, 0);
}

TEST(allocator, request_beyond_node_memory_throws_enomem_strict_or_degrading) {
    const auto& node = topology::get().at(0);
    const std::size_t too_much = static_cast<std::size_t>(node.memory) + mib;
    for (auto fb : {fallback::strict, fallback::degrade}) {
        node_allocator<char> a(0, node_policy::bind, fb);
        try {
            (void)a.allocate(too_much);
            FAIL() << "allocated more than node 0 has";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.node(), 0);
            EXPECT_EQ(e.bytes(), too_much);
            EXPECT_EQ(e.error_number(), ENOMEM);
        }
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

namespace {
using numaplace_test::has_vm_flag;
using numaplace_test::smaps_field;
using numaplace_test::smaps_kb;
} // namespace

TEST(allocator, partitioned_blocks_get_huge_pages_where_edges_are_huge_aligned) {
    // THP `madvise`: huge-page edges ask for huge pages (MADV_HUGEPAGE, VmFlags "hg"); small-page edges
    // keep them off (MADV_NOHUGEPAGE, "nh") whenever THP is on, so a huge page never straddles two blocks.
    const auto& topo = topology::get();
    const std::string thp = topo.capabilities().thp;
    const bool thp_on = thp == "always" || thp == "madvise";
    const std::size_t bytes = 64 * mib;
    const partition<char> huge_edges(bytes, topo.with_cpus(), {}, edge_alignment::huge);
    const partition<char> page_edges(bytes, topo.with_cpus(), {}, edge_alignment::page);
    EXPECT_EQ(huge_edges.huge_pages(), thp == "madvise" ? huge_page_advice::request : huge_page_advice::none);
    EXPECT_EQ(page_edges.huge_pages(), thp_on ? huge_page_advice::forbid : huge_page_advice::none);
    partitioned_allocator<char> with_huge(huge_edges, fallback::degrade), with_small(page_edges, fallback::degrade);
    char* a = with_huge.allocate(bytes);
    char* b = with_small.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % detail::huge_page_size(), 0u);
    memory::touch(a, bytes);
    memory::touch(b, bytes);
    EXPECT_EQ(has_vm_flag(a, "hg"), thp == "madvise") << smaps_field(a, "VmFlags");
    EXPECT_FALSE(has_vm_flag(a, "nh")) << smaps_field(a, "VmFlags");
    EXPECT_EQ(has_vm_flag(b, "nh"), thp_on) << smaps_field(b, "VmFlags");
    EXPECT_EQ(smaps_kb(b, "AnonHugePages"), 0u) << "small-page edges keep huge pages off";
    // (whether the kernel then finds free huge pages for `a` is its business: bench_huge_pages reports it)
    with_huge.deallocate(a, bytes);
    with_small.deallocate(b, bytes);
}
