// Explicit huge pages (huge_pages.hpp, place.hpp's place_on_pages, the placements' with_pages): the paths
// that need no pool, so they hold on the host as in every guest. A request the pools cannot serve (the
// host reserves none; where a pool exists, the request asks for one page more than is free), bad sizes,
// an unsupported page size, the typed option on every placement and face. With pools reserved (guests):
// test_memory_huge_pools.cpp.
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <expect.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

using namespace numaplace;
using numaplace_test::contains;

namespace {
constexpr std::size_t two_mib = std::size_t(2) << 20;
constexpr std::size_t one_gib = std::size_t(1) << 30;

// Bytes of explicit 2 MiB pages node `node`'s pool cannot serve: one page more than it has free.
std::size_t more_than_free(int node, std::size_t page = two_mib) { return (free_huge_pages(node, page) + 1) * page; }

// Runs f, which must throw placement_error with `err` and a message holding every word of `words`.
template <class F>
void expect_refused(F f, int err, const std::vector<std::string>& words, const char* what) {
    try {
        f();
        ADD_FAILURE() << what << ": no exception";
    } catch (const placement_error& e) {
        EXPECT_EQ(e.error_number(), err) << what << ": " << e.what();
        for (const auto& w : words) EXPECT_TRUE(contains(e.what(), w)) << what << ": no '" << w << "' in " << e.what();
    }
}
} // namespace

TEST(huge_pages, page_size_is_a_typed_option_of_every_placement) {
    const on_node a(0);
    const on_node b = a.with_pages(page_size::explicit_2m);
    EXPECT_EQ(a.pages(), page_size::transparent);
    EXPECT_EQ(b.pages(), page_size::explicit_2m);
    EXPECT_NE(a, b); // memory of one is never reused for the other (the caches compare placements)
    EXPECT_EQ(b, on_node(0).with_pages(page_size::explicit_2m));
    EXPECT_NE(interleaved(), interleaved().with_pages(page_size::explicit_1g));
    EXPECT_NE(preferred_many(node_set{0}), preferred_many(node_set{0}).with_pages(page_size::largest_explicit));
    const partitioned p(partition<double>(1000));
    EXPECT_NE(p, p.with_pages(page_size::explicit_2m));
    static_assert(std::is_trivially_copyable<on_node>::value && std::is_trivially_copyable<partitioned>::value, "");
    EXPECT_STREQ(name(page_size::explicit_1g), "explicit_1g");
    EXPECT_EQ(explicit_page_bytes(page_size::explicit_2m), two_mib);
    EXPECT_EQ(explicit_page_bytes(page_size::explicit_1g), one_gib);
    EXPECT_EQ(explicit_page_bytes(page_size::transparent), 0u);
    // alignment: a page below one explicit page, the explicit page from one up
    EXPECT_EQ(b.alignment(two_mib - 1), detail::page_size());
    EXPECT_EQ(b.alignment(two_mib), two_mib);
    EXPECT_EQ(on_node(0).with_pages(page_size::largest_explicit).alignment(one_gib), one_gib);
}

TEST(huge_pages, partitioned_edges_on_the_explicit_page) {
    const std::size_t n = 64 * two_mib / sizeof(double);
    const partitioned p = partitioned(partition<double>(n)).with_pages(page_size::explicit_2m);
    const basic_partition split = p.partition_for(n * sizeof(double));
    EXPECT_EQ(split.alignment(), two_mib);
    for (std::size_t k = 0; k + 1 < split.block_count(); ++k)
        EXPECT_EQ(split.block(k).end * sizeof(double) % two_mib, 0u) << "edge " << k;
    const partitioned g = partitioned(partition<double>(n)).with_pages(page_size::explicit_1g);
    EXPECT_EQ(g.partition_for(n * sizeof(double)).alignment(), one_gib);
    EXPECT_EQ(g.alignment(2 * one_gib), one_gib);
}

TEST(huge_pages, pools_are_read_per_node_and_size) {
    const std::vector<std::size_t> sizes = explicit_page_sizes();
    for (int node = 0; node < static_cast<int>(topology::get().size()); ++node) {
        const std::vector<huge_page_pool> pools = huge_page_pools(node);
        ASSERT_EQ(pools.size(), sizes.size());
        for (std::size_t i = 0; i < pools.size(); ++i) {
            EXPECT_EQ(pools[i].page_bytes, sizes[i]);
            EXPECT_GE(pools[i].total, 0) << "node " << node << " " << page_bytes_name(sizes[i]);
            EXPECT_GE(pools[i].free, 0);
            EXPECT_LE(pools[i].free, pools[i].total);
            EXPECT_GE(pools[i].surplus, 0);
        }
    }
    numaplace_test::expect_unknown_node([] { huge_page_pools(1 << 20); }, 1 << 20, "huge_page_pools");
    EXPECT_EQ(page_bytes_name(two_mib), "2 MiB");
    EXPECT_EQ(page_bytes_name(one_gib), "1 GiB");
    const huge_page_usability u = huge_page_usage_limits(two_mib);
    EXPECT_EQ(u.page_bytes, two_mib);
    EXPECT_GT(u.memlock_limit, 0u);
}

TEST(huge_pages, strict_request_beyond_the_pool_throws_enomem_naming_node_size_and_free) {
    for (int node = 0; node < static_cast<int>(topology::get().size()); ++node) {
        const std::size_t bytes = more_than_free(node);
        const std::string free = std::to_string(free_huge_pages(node, two_mib)) + " free";
        expect_refused([&] { memory::allocate(bytes, on_node(node).with_pages(page_size::explicit_2m)); }, ENOMEM,
                       {"node " + std::to_string(node), "2 MiB", free, std::to_string(bytes / two_mib) + " needed"},
                       "on_node explicit_2m");
        // the STL face: the same error, nothing left mapped
        allocator<double, on_node> a(on_node(node).with_pages(page_size::explicit_2m));
        expect_refused([&] { (void)a.allocate(bytes / sizeof(double)); }, ENOMEM, {"2 MiB", free}, "allocator");
        // the pmr face
        page_resource<on_node> r(on_node(node).with_pages(page_size::explicit_2m));
        expect_refused([&] { (void)r.allocate(bytes, 64); }, ENOMEM, {"2 MiB"}, "page_resource");
    }
}

TEST(huge_pages, degrading_request_beyond_the_pool_records_and_places_on_the_node) {
    const int node = static_cast<int>(topology::get().size()) - 1;
    const std::size_t bytes = more_than_free(node);
    const std::size_t before = degradation_count();
    void* p = memory::allocate(bytes, on_node(node, node_policy::bind, fallback::degrade).with_pages(page_size::explicit_2m));
    EXPECT_GT(degradation_count(), before);
    bool named = false;
    for (const auto& m : degradations())
        named = named || (contains(m, "explicit 2 MiB pages on node " + std::to_string(node)) && contains(m, "transparent"));
    EXPECT_TRUE(named) << "no degradation names the node, the size and the fallback";
    memory::touch(p, bytes);
    EXPECT_EQ(where(p, bytes).on(node), where(p, bytes).pages) << "fell back, still bound to the node";
    EXPECT_EQ(where_page_sizes(p, bytes).bytes_on(two_mib), 0u) << "no explicit page";
    EXPECT_EQ(where_page_sizes(p, bytes).bytes_on(detail::page_size()), bytes);
    memory::unmap(p, bytes);
}

TEST(huge_pages, sizes_below_one_page_are_refused_when_strict) {
    // 0 maps one small page (nothing to place on explicit pages); 1 and page-1 hold no whole page: refused
    // (strict, EINVAL) or left on small pages (degrading); never rounded up.
    const on_node strict = on_node(0).with_pages(page_size::explicit_2m);
    void* p = memory::allocate(0, strict);
    EXPECT_NE(p, nullptr);
    memory::unmap(p, 0);
    for (std::size_t bytes : {std::size_t(1), detail::page_size(), two_mib - 1})
        expect_refused([&] { memory::allocate(bytes, strict); }, EINVAL, {"less than one page", "2 MiB"}, "below a page");
    const on_node degrade = on_node(0, node_policy::bind, fallback::degrade).with_pages(page_size::explicit_2m);
    void* q = memory::allocate(two_mib - 1, degrade);
    EXPECT_EQ(where_page_sizes(q, two_mib - 1).bytes_on(two_mib), 0u);
    memory::unmap(q, two_mib - 1);
    // one page: the pool decides (host: none free, ENOMEM)
    if (free_huge_pages(0, two_mib) == 0) expect_refused([&] { memory::allocate(two_mib, strict); }, ENOMEM, {"1 needed"}, "one page");
    // sizes no mapping can hold: the size check comes first, for every face (docs/huge-pages.md, "Sizes"):
    // a size in bytes that overflows when rounded up to pages is placement_error ENOMEM, from
    // memory::allocate and the allocators alike; a count whose bytes overflow is bad_array_new_length
    allocator<char, on_node> in_bytes(strict);
    for (std::size_t bytes : numaplace_test::huge_sizes()) {
        numaplace_test::expect_enomem([&] { memory::allocate(bytes, strict); }, "SIZE_MAX-k");
        numaplace_test::expect_enomem([&] { (void)in_bytes.allocate(bytes); }, "allocator<char>: SIZE_MAX-k");
    }
    allocator<double, on_node> a(strict);
    for (std::size_t n : {a.max_size() + 1, SIZE_MAX / 2, SIZE_MAX})
        EXPECT_THROW((void)a.allocate(n), std::bad_array_new_length) << n << " doubles";
}

TEST(huge_pages, an_unsupported_page_size_is_a_typed_error) {
    // A size the kernel has no pool (hstate) for: 4 MiB on x86. explicit_1g on a CPU without pdpe1gb
    // takes the same path (asserted below where the host lacks 1 GiB pages).
    void* p = memory::map(8 * two_mib, 4 * two_mib);
    int err = 0;
    std::string why;
    EXPECT_EQ(detail::try_explicit(p, 8 * two_mib, 2 * two_mib, memory::policy_mode::bind, node_set{0}, false, err, why), 0u);
    EXPECT_EQ(err, EINVAL);
    EXPECT_TRUE(contains(why, "no pool of that size")) << why;
    memory::unmap(p, 8 * two_mib);
    if (!explicit_page_supported(one_gib))
        expect_refused([] { memory::allocate(one_gib, on_node(0).with_pages(page_size::explicit_1g)); }, EINVAL,
                       {"1 GiB", "pdpe1gb"}, "explicit_1g without 1 GiB pages");
    else
        expect_refused([] { memory::allocate(more_than_free(0, one_gib), on_node(0).with_pages(page_size::explicit_1g)); }, ENOMEM,
                       {"1 GiB", "node 0"}, "explicit_1g beyond the pool");
}

TEST(huge_pages, partitioned_strict_throws_before_anything_is_mapped) {
    const topology& topo = topology::get();
    const std::size_t nodes = topo.size();
    std::size_t most = 0; // a block per node larger than any node's free pages
    for (int k = 0; k < static_cast<int>(nodes); ++k) most = std::max(most, free_huge_pages(k, two_mib));
    const std::size_t n = nodes * (most + 2) * two_mib / sizeof(double);
    const partitioned p = partitioned(partition<double>(n, topo.all(), std::vector<std::size_t>(nodes, 1)))
                              .with_pages(page_size::explicit_2m);
    std::vector<std::size_t> before;
    for (int k = 0; k < static_cast<int>(nodes); ++k) before.push_back(free_huge_pages(k, two_mib));
    expect_refused([&] { memory::allocate(n * sizeof(double), p); }, ENOMEM, {"partitioned", "2 MiB", "needed"}, "partitioned");
    for (int k = 0; k < static_cast<int>(nodes); ++k) EXPECT_EQ(free_huge_pages(k, two_mib), before[static_cast<std::size_t>(k)]);
    // a split whose blocks are smaller than one page (issue 47: pages follow the compute edges): the one
    // page belongs to the block holding its first byte, so only the first node's pool is asked, for 1
    if (nodes > 1) {
        const partitioned tiny = partitioned(partition<double>(16, topo.all(), std::vector<std::size_t>(nodes, 1)))
                                     .with_pages(page_size::explicit_2m);
        const int first = topo.all()[0];
        if (free_huge_pages(first, two_mib) == 0) {
            expect_refused([&] { memory::allocate(two_mib, tiny); }, ENOMEM, {"1 needed"}, "tiny partition");
        } else {
            void* t = memory::allocate(two_mib, tiny);
            memory::touch(t, two_mib);
            EXPECT_EQ(where_page_sizes(t, two_mib).bytes_on(two_mib), two_mib);
            EXPECT_EQ(where(t, two_mib).on(first), two_mib / detail::page_size());
            memory::unmap(t, two_mib);
        }
    }
}

TEST(huge_pages, where_page_sizes_reports_small_pages_of_a_small_page_mapping) {
    const std::size_t bytes = 16 * detail::page_size();
    void* p = memory::allocate(bytes, on_node(0));
    memory::forbid_huge_pages(p, bytes);
    memory::touch(p, bytes);
    const page_size_histogram h = where_page_sizes(p, bytes);
    EXPECT_EQ(h.bytes_on(detail::page_size()), bytes);
    EXPECT_EQ(h.transparent_huge, 0u);
    memory::unmap(p, bytes);
}
