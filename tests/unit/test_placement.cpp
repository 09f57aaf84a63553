// placement.hpp (the placement values on_node, preferred_many, interleaved, partitioned, and
// partition_of) and place.hpp (the one strict-or-degrade decision): where each placement puts every page,
// exact per node on any topology (computed from topology::get(): on a one-node host every expectation is
// "node 0", in the multi-node guests it is exact per node), which ids and node sets each rejects, and what
// a strict or a degrading placement does when the kernel refuses.
#include <numaplace/place.hpp>
#include <numaplace/placement.hpp>

#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/replace.hpp>
#include <numaplace/report.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>
#include <expect.hpp>
#include <owned_pages.hpp>
#include <seccomp.hpp>
#include <smaps.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <sched.h>
#include <sys/syscall.h>

namespace np = numaplace;
using namespace numaplace;
using numaplace_test::contains;
using numaplace_test::expect_invalid;
using numaplace_test::expect_tiles;
using numaplace_test::expect_unknown_node;

namespace {
constexpr std::size_t mib = std::size_t(1) << 20;

template <class A>
using lazy_vector = std::vector<typename A::value_type, default_init_allocator<A>>;

std::size_t pages_of(std::size_t bytes) { return (bytes + detail::page_size() - 1) / detail::page_size(); }

int node_count() { return static_cast<int>(topology::get().size()); }
} // namespace

// --- ids and node sets each placement rejects ------------------------------------------------------

TEST(placement, on_node_rejects_ids_outside_the_topology) {
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

TEST(placement, interleaved_and_preferred_many_reject_unknown_ids) {
    const int n = node_count();
    expect_unknown_node([&] { numaplace::interleaved x(node_set{0, n}); (void)x; }, n, "interleaved({0, N})");
    expect_unknown_node([&] { numaplace::interleaved x(node_set{-2, 0}); (void)x; }, -2, "interleaved({-2, 0})");
    expect_unknown_node([&] { numaplace::interleaved_allocator<int> a(node_set{0, n}); (void)a; }, n,
                        "interleaved_allocator({0, N})");
    expect_unknown_node([&] { numaplace::preferred_many x(node_set{n}); (void)x; }, n, "preferred_many({N})");
}

// A request no mapping can serve (the size overflows when rounded to pages, or the kernel refuses the
// mapping) names the placement's node when it has one, -1 ("node any") when it spans several: for every
// allocator and resource and every node, at the sizes around the end of the address space.
TEST(placement, errors_of_a_one_node_placement_name_that_node_at_every_size_boundary) {
    const std::size_t page = detail::page_size();
    const std::size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - page + 2, SIZE_MAX - page + 1, SIZE_MAX - 2 * page + 1};
    auto expect_names = [](int node, std::size_t bytes, const char* what, auto&& allocate) {
        try {
            allocate(bytes);
            ADD_FAILURE() << what << ": " << bytes << " bytes allocated";
        } catch (const placement_error& e) {
            EXPECT_EQ(e.node(), node) << what << ", " << bytes << ": " << e.what();
            EXPECT_EQ(e.bytes(), bytes) << what;
            EXPECT_EQ(e.error_number(), ENOMEM) << what << ": " << e.what();
            const std::string named = node < 0 ? "(node any," : "(node " + std::to_string(node) + ",";
            EXPECT_TRUE(contains(e.what(), named)) << what << ": " << e.what();
        }
    };
    const int n = node_count();
    for (int node = 0; node < n; ++node)
        for (std::size_t bytes : sizes) {
            expect_names(node, bytes, "node_allocator", [&](std::size_t b) { (void)node_allocator<char>(node).allocate(b); });
            expect_names(node, bytes, "node_allocator prefer degrade", [&](std::size_t b) {
                (void)node_allocator<char>(node, node_policy::prefer, fallback::degrade).allocate(b);
            });
            expect_names(node, bytes, "interleaved over one node",
                         [&](std::size_t b) { (void)interleaved_allocator<char>(node_set{node}).allocate(b); });
            expect_names(node, bytes, "memory::allocate preferred_many one node",
                         [&](std::size_t b) { (void)memory::allocate(b, preferred_many(node_set{node})); });
            page_resource<on_node> pages{on_node(node)};
            expect_names(node, bytes, "page_resource", [&](std::size_t b) { (void)pages.allocate(b, 64); });
            node_pool_resource pool(node);
            expect_names(node, bytes, "node_pool_resource", [&](std::size_t b) { (void)pool.allocate(b, 64); });
        }
    if (n < 2) return; // several nodes: -1
    for (std::size_t bytes : sizes)
        expect_names(-1, bytes, "interleaved over every node",
                     [&](std::size_t b) { (void)interleaved_allocator<char>(topology::get().all()).allocate(b); });
}

// memory::allocate refuses an alignment that is not a power of two whatever its size (one below a page
// used to vanish under the placement's page alignment), and honours every power of two.
TEST(placement, memory_allocate_takes_only_power_of_two_alignments) {
    const std::size_t page = detail::page_size();
    for (int node = 0; node < node_count(); ++node) {
        for (std::size_t bad : {std::size_t(0), std::size_t(3), std::size_t(100), page - 1, page + 1, 6000 + page, 3 * page,
                                SIZE_MAX}) {
            try {
                void* p = memory::allocate(100, on_node(node), bad);
                memory::unmap(p, 100);
                ADD_FAILURE() << "alignment " << bad << " taken";
            } catch (const placement_error& e) {
                EXPECT_EQ(e.error_number(), EINVAL) << bad << ": " << e.what();
                EXPECT_EQ(e.node(), node) << bad;
                EXPECT_TRUE(contains(e.what(), "alignment not a power of two")) << e.what();
            }
            void* out = reinterpret_cast<void*>(1);
            EXPECT_EQ(memory::try_map(100, bad, out), EINVAL) << bad;
            EXPECT_EQ(out, nullptr);
        }
        for (std::size_t good : {std::size_t(1), std::size_t(2), std::size_t(64), page / 2, page, 2 * page, 2 * mib}) {
            void* p = memory::allocate(3 * page + 5, on_node(node), good);
            EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % std::max(good, page), 0u) << good;
            memory::unmap(p, 3 * page + 5);
        }
    }
}

TEST(placement, empty_node_set_is_invalid_placement) {
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

TEST(placement, weight_count_mismatch_and_all_zero_weights_are_invalid_placement) {
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

// --- where each placement puts the pages ----------------------------------------------------------

TEST(placement, preferred_node_puts_pages_there_while_it_has_memory) {
    const auto& topo = topology::get();
    for (const auto& node : topo.nodes()) {
        if (node.memory < 256 * mib) continue;
        std::vector<char, node_allocator<char>> v(8 * mib, 1, node_allocator<char>(node.id, node_policy::prefer));
        auto h = where(v);
        EXPECT_EQ(h.on(node.id), h.pages) << "node " << node.id;
    }
}

TEST(placement, preferred_many_puts_pages_on_its_nodes_while_they_have_memory) {
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

TEST(placement, interleaved_spreads_pages_round_robin_within_one_page) {
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

TEST(placement, weighted_interleave_places_runs_by_weight) {
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

TEST(placement, equal_weights_reduce_to_plain_interleave) {
    interleaved i(topology::get().all(), std::vector<std::size_t>(topology::get().size(), 4));
    EXPECT_TRUE(i.weights().empty());
    EXPECT_EQ(i, interleaved(topology::get().all()));
    // one node: any weight is that node's whole share, so plain interleave, placed at first touch
    const int n0 = topology::get().all()[0];
    for (std::size_t w : {std::size_t(1), std::size_t(2), std::size_t(3), SIZE_MAX}) {
        const interleaved one(node_set{n0}, {w});
        EXPECT_TRUE(one.weights().empty()) << w;
        EXPECT_EQ(one, interleaved(node_set{n0})) << w;
    }
}


TEST(placement, partitioned_puts_block_k_on_node_k) {
    const std::size_t n = 48 * mib / sizeof(double) + 123;
    partition<double> part(n);
    lazy_vector<partitioned_allocator<double>> v(n, partitioned_allocator<double>(part));
    EXPECT_EQ(where(v).untouched, where(v).pages);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % part.alignment(), 0u) << "an allocation starts on a grain";
    memory::touch(v.data(), n * sizeof(double)); // one thread: binding, not first touch, decides
    // each grain on the node of the block holding its first byte: exact page counts per node, no page
    // elsewhere, at most one shared grain per edge (a huge one where the partition places huge pages)
    numaplace_test::expect_pages_on_their_owners(v.data(), part, "48 MiB + 123 doubles, alignment " + std::to_string(part.alignment()));
}

TEST(placement, partitioned_allocation_of_another_size_is_split_by_the_same_weights) {
    partition<double> part(1000);
    partitioned_allocator<double> a(part);
    EXPECT_EQ(a.placement().partition_for(4000 * sizeof(double)), part.resized(4000).untyped());
    // a partial element counts as one (rebound allocators of other sizes)
    EXPECT_EQ(a.placement().partition_for(4000 * sizeof(double) + 1).units(), 4001u);
}

TEST(placement, partitioned_rows_allocation_is_split_in_whole_rows) {
    const std::size_t rows = 3000, cols = 1000; // 8000-byte rows
    const auto part = partition<double>::rows(rows, cols);
    partitioned_allocator<double> a(part);
    // m elements: ceil(m / cols) whole rows
    const basic_partition split = a.placement().partition_for((rows * cols - 7) * sizeof(double));
    EXPECT_EQ(split.units(), rows);
    EXPECT_EQ(split, part.untyped());
    lazy_vector<partitioned_allocator<double>> v(rows * cols, a);
    memory::touch(v.data(), v.size() * sizeof(double));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % part.alignment(), 0u) << "an allocation starts on a grain";
    auto loc = where(v.data(), part); // all rows * cols elements
    EXPECT_EQ(loc.histogram.pages, pages_of(rows * cols * sizeof(double)));
    const partition<double> elements = part.elements();
    for (std::size_t k = 0; k < part.block_count(); ++k) { // the element view has the same whole-row blocks
        EXPECT_EQ(elements.block(k).begin, part.block(k).begin * cols) << "block " << k;
        EXPECT_EQ(elements.block(k).end, part.block(k).end * cols) << "block " << k;
    }
    // 8000-byte rows: edges fall inside pages; each page on the node of the block holding its first byte
    numaplace_test::expect_pages_on_their_owners(v.data(), elements, "3000 rows of 8000 bytes, alignment " + std::to_string(part.alignment()));
}

namespace {
using numaplace_test::has_vm_flag;
using numaplace_test::smaps_field;
using numaplace_test::smaps_kb;
} // namespace

TEST(placement, partitioned_blocks_get_huge_pages_where_edges_are_huge_aligned) {
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

// --- place.hpp: strict throws, degrading falls back and says so ------------------------------------

// Binding refused from the start: a strict heap allocation maps a span (64 KiB) or a region (64 MiB)
// for a block, but its error names the request (bytes) and the node; a strict replace to one node
// names that node.
TEST(placement_attack, a_refused_allocation_names_the_bytes_asked_for_and_its_node) {
    if (numaplace_test::rerun_started_under_seccomp()) return;
    const topology& topo = topology::get();
    const std::size_t page = detail::page_size();
    for (std::size_t bytes : {std::size_t(1), std::size_t(8), std::size_t(100), page - 1, page, page + 1, std::size_t(20000),
                              std::size_t(65536), std::size_t(500000), std::size_t(1) << 20, (std::size_t(1) << 20) + 1,
                              std::size_t(4) << 20})
        for (int node : topo.all()) {
            SCOPED_TRACE("node " + std::to_string(node) + ", " + std::to_string(bytes) + " bytes");
            try {
                (void)node_allocator<char>(node).allocate(bytes);
                ADD_FAILURE() << "no exception";
            } catch (const placement_error& e) {
                EXPECT_EQ(e.bytes(), bytes);
                EXPECT_EQ(e.node(), node);
                EXPECT_EQ(e.error_number(), EPERM);
                EXPECT_NE(std::string(e.what()).find(", " + std::to_string(bytes) + " bytes,"), std::string::npos) << e.what();
            }
        }
    std::vector<char> v(16 * page, 1);
    replace_options keep;
    keep.keep_policy = true;
    for (int node : topo.all()) {
        try {
            (void)replace(v.data(), v.size(), on_node(node), keep);
            ADD_FAILURE() << "no exception for node " << node;
        } catch (const replace_error& e) {
            EXPECT_EQ(e.node(), node);
            EXPECT_EQ(e.error_number(), EPERM);
        }
    }
    if (topo.size() >= 2) {
        try {
            (void)replace(v.data(), v.size(), interleaved(topo.all()), keep);
            ADD_FAILURE() << "no exception for the interleave";
        } catch (const replace_error& e) {
            EXPECT_EQ(e.node(), -1);
        }
    }
}

// get_mempolicy refused alone (recent Docker profiles deny it): a weighted interleave, which fills its
// runs under a temporary thread policy, cannot read the thread's own policy to restore it. It must not
// wipe that policy (it set the default one, silently): strict throws, degrading records, and the thread
// keeps its binding (a later page lands on the node the thread bound itself to, not where it runs).
TEST(placement_attack, weighted_interleave_with_get_mempolicy_refused_keeps_the_threads_own_policy) {
    const topology& topo = topology::get();
    if (topo.size() < 2) GTEST_SKIP() << "one node: a weighted interleave over it is a plain binding";
    const int target = static_cast<int>(topo.size()) - 1; // not the node the thread runs on
    const int code = numaplace_test::run_denied({SYS_get_mempolicy}, [&] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(topo.at(topo.with_cpus()[0]).cpus.front(), &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) return 10;
        detail::kernel_nodemask mask;
        mask.set(topo.at(target).os_index);
        if (detail::os_set_mempolicy(detail::mpol_bind, mask) != 0) return 11;
        std::vector<std::size_t> weights(topo.size(), 1);
        weights[0] = 2;
        const std::size_t bytes = 64 * detail::page_size();
        try {
            interleaved_allocator<char> strict(interleaved(topo.all(), weights));
            (void)strict.allocate(bytes);
            return 1;
        } catch (const placement_error& e) {
            if (e.error_number() != EPERM) return 2;
            if (std::string(e.what()).find("get_mempolicy") == std::string::npos) return 3;
        }
        const std::size_t before = degradation_count();
        interleaved_allocator<char> soft(interleaved(topo.all(), weights, fallback::degrade));
        char* p = soft.allocate(bytes);
        std::memset(p, 1, bytes);
        soft.deallocate(p, bytes);
        if (degradation_count() != before + 1 || degradations().back().find("get_mempolicy") == std::string::npos) return 4;
        // the thread's own binding still holds
        void* fresh = memory::map(16 * detail::page_size());
        std::memset(fresh, 1, 16 * detail::page_size());
        const auto h = where(fresh, 16 * detail::page_size());
        memory::unmap(fresh, 16 * detail::page_size());
        if (h.on(target) != 16) return 5;
        return 0;
    });
    EXPECT_EQ(code, 0);
}

// Binding refused, as under a container's seccomp profile: strict placements throw placement_error
// with EPERM and lose nothing; degrading ones fall back and say so.
TEST(place, binding_refused_strict_throws_eperm_degrade_falls_back_and_records) {
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

TEST(place, strict_placement_refused_by_the_kernel_is_placement_error) {
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

// --- attacks -----------------------------------------------------------------------------------------

TEST(placement_attack, partition_of_across_container_lifecycle) {
    np::partitioned_vector<int> v;
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    expect_tiles(np::partition_of(v));
    v.resize(100000);
    expect_tiles(np::partition_of(v));
    EXPECT_EQ(np::partition_of(v).size(), 100000u);
    std::vector<std::atomic<int>> seen(100000);
    np::parallel_for(v, [&](std::size_t i) { seen[i].fetch_add(1); });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
    v.resize(10);
    EXPECT_EQ(np::partition_of(v).size(), 10u);
    v.clear();
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    int calls = 0;
    np::parallel_for(v, [&](std::size_t) { ++calls; });
    EXPECT_EQ(calls, 0);
    v.shrink_to_fit();
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    np::partitioned_vector<int> w = std::move(v);
    EXPECT_EQ(np::partition_of(v).size(), 0u);
    EXPECT_EQ(np::partition_of(w).size(), 0u);
    np::first_touch(v);
    np::first_touch(w);
}

// Weighted interleave at the edges of size_t: weights whose sum (or products in the fill) would wrap
// are placed exactly as the weights say, page by page, checked against an independent 128-bit oracle,
// and never hang (each case runs in a child with a deadline). Needs two nodes (one node reduces any
// weights to a plain interleave).
TEST(placement_attack, weighted_interleave_at_size_max_matches_a_128_bit_oracle) {
    const auto& topo = topology::get();
    if (topo.size() < 2 || !topo.capabilities().memory_binding || !topo.capabilities().page_query)
        GTEST_SKIP() << "needs two nodes, binding and page queries";
    using u128 = detail::wide_uint;
    const std::size_t page = detail::page_size();
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    const std::size_t half = std::size_t(1) << 63;
    std::vector<std::vector<std::size_t>> cases{{max, 1}, {max, 2}, {half + 1, half - 1}, {1, max}, {max, max - 1},
                                                {3, 5}, {1, 0}, {0, 7}, {257, 1}, {max / 3, max / 3 + 1}};
    std::uint64_t seed = 12345;
    auto next = [&] { return seed = seed * 6364136223846793005ull + 1442695040888963407ull; };
    for (int i = 0; i < 6; ++i) cases.push_back({next() >> (next() % 64), (next() >> (next() % 64)) | 1});
    const node_set nodes{0, 1};
    for (const auto& weights : cases) {
        const std::size_t pages = 300;
        const int code = numaplace_test::run_child([&] {
            interleaved il(nodes, weights);
            void* p = memory::allocate(pages * page, il);
            // Oracle: the reduced weights (gcd), clipped to `pages` rounds at most, in 128 bits.
            u128 g = 0;
            for (std::size_t w : weights) {
                u128 a = w, b = g;
                while (b) { u128 t = a % b; a = b; b = t; }
                g = a;
            }
            std::vector<u128> prefix{0};
            for (std::size_t w : weights) prefix.push_back(prefix.back() + w / g);
            const u128 period = prefix.back();
            std::vector<void*> addr(pages);
            std::vector<int> status(pages, -1);
            for (std::size_t i = 0; i < pages; ++i) addr[i] = static_cast<char*>(p) + i * page;
            if (detail::os_query_pages(pages, addr.data(), status.data()) != 0) return 30;
            for (std::size_t i = 0; i < pages; ++i) {
                const u128 at = u128(i) % period;
                std::size_t k = 0;
                while (!(prefix[k] <= at && at < prefix[k + 1])) ++k;
                if (topology::get().from_os_index(static_cast<unsigned>(status[i])) != nodes[k]) {
                    std::fprintf(stderr, "page %zu: on os node %d, oracle node %d\n", i, status[i], nodes[k]);
                    return 31;
                }
            }
            memory::unmap(p, pages * page);
            return 0;
        }, 30);
        EXPECT_EQ(code, 0) << "weights " << weights[0] << ", " << weights[1] << " (255: hung)";
    }
}
