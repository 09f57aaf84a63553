// shared_segment.hpp on explicit huge pages (segment_layout::with_pages, detail/segment_huge.hpp). On the
// host (no pool reserved: the machine is shared) the refusals: strict ENOMEM naming the node with the
// pools unchanged, degrading to a small-page segment (recorded), the rounding of parts to whole pages, a
// named segment refused. In the guests (NUMAPLACE_GUEST_LAYOUT set; root) each test reserves 2 MiB pages
// per node through sysfs and restores them: every part on its node's own pool, the free counts down by
// exactly the part's pages (and the trailer page on the last part's node), another process opening it by
// fd and writing every part without SIGBUS, a pool short on one node.
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/shared_segment.hpp>
#include <numaplace/where.hpp>

#include "child.hpp"
#include "huge_pools.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace numaplace;

namespace {
using numaplace_test::frees;
using numaplace_test::pool_file;
using numaplace_test::read_count;
using numaplace_test::reserved_pools;
using numaplace_test::two_mib;
const std::size_t small = detail::page_size();
const std::size_t per_huge = two_mib / small; // small pages in one 2 MiB page

int nodes() { return static_cast<int>(topology::get().size()); }
bool in_guest() {
    const char* guest = std::getenv("NUMAPLACE_GUEST_LAYOUT");
    return guest && *guest;
}

#define RESERVE_OR_SKIP(name, ...)                                                                                  \
    if (!in_guest()) GTEST_SKIP() << "reserves huge page pools: guests only";                                       \
    if (!explicit_page_supported(two_mib)) GTEST_FAIL() << "the guest kernel has no 2 MiB pool";                   \
    reserved_pools name(__VA_ARGS__);                                                                               \
    ASSERT_TRUE(name.ok()) << "could not reserve 2 MiB pages through " << pool_file(0, "nr_hugepages")

// One part per node, part k of k + 1 pages of 2 MiB, on explicit 2 MiB pages.
segment_layout per_node_layout() {
    std::vector<segment_part> parts;
    for (int k = 0; k < nodes(); ++k) parts.push_back({k, static_cast<std::size_t>(k + 1) * per_huge});
    return segment_layout(parts).with_pages(page_size::explicit_2m);
}

bool has_error(const placement_error& e, int err, const std::string& what) {
    return e.error_number() == err && std::string(e.what()).find(what) != std::string::npos;
}
} // namespace

TEST(shared_segment_huge, layout_rounds_each_part_up_to_whole_pages) {
    const segment_layout small_pages({{0, 1}, {0, per_huge + 1}, {0, 0}, {0, per_huge}});
    const segment_layout l = small_pages.with_pages(page_size::explicit_2m);
    EXPECT_EQ(l.pages(), page_size::explicit_2m);
    EXPECT_EQ(l.page_bytes(), two_mib);
    ASSERT_EQ(l.size(), 4u);
    EXPECT_EQ(l.parts()[0].pages, per_huge) << "1 small page: one 2 MiB page";
    EXPECT_EQ(l.parts()[1].pages, 2 * per_huge) << "one page and a small one: two";
    EXPECT_EQ(l.parts()[2].pages, 0u) << "an empty part stays empty";
    EXPECT_EQ(l.parts()[3].pages, per_huge) << "whole pages unchanged";
    for (std::size_t k = 0; k <= l.size(); ++k) EXPECT_EQ(l.offset(k) % two_mib, 0u) << "edge " << k;
    EXPECT_EQ(l.bytes(), 4 * two_mib);
    EXPECT_TRUE(l.huge_page_edges());
    EXPECT_NE(l, small_pages) << "the page size is part of the layout";
    EXPECT_EQ(l, small_pages.with_pages(page_size::largest_explicit)) << "largest_explicit is 2 MiB for a segment";
    EXPECT_EQ(small_pages.with_pages(page_size::transparent), small_pages);
    EXPECT_EQ(l.with_pages(page_size::transparent).bytes(), l.bytes()) << "back to small pages: the rounded sizes stay";
    const segment_layout g = small_pages.with_pages(page_size::explicit_1g);
    EXPECT_EQ(g.bytes(), 3 * (std::size_t(1) << 30));
    EXPECT_THROW(segment_layout({{0, SIZE_MAX / small - 1}}).with_pages(page_size::explicit_2m), std::bad_array_new_length);
}

TEST(shared_segment_huge, strict_without_free_pages_throws_enomem_naming_the_node) {
    if (!explicit_page_supported(two_mib)) GTEST_SKIP() << "no 2 MiB hugetlb pool on this kernel";
    const int node = nodes() - 1;
    if (read_count(pool_file(node, "free_hugepages")) > 2) GTEST_SKIP() << "node " << node << " has free 2 MiB pages";
    const segment_layout l = segment_layout({{node, 2 * per_huge}}).with_pages(page_size::explicit_2m);
    const std::vector<long> before = frees();
    const std::size_t degraded = degradation_count();
    try {
        shared_segment::create(l);
        FAIL() << "no placement_error";
    } catch (const placement_error& e) {
        EXPECT_TRUE(has_error(e, ENOMEM, "explicit 2 MiB pages on node " + std::to_string(node) + ": 3 needed")) << e.what();
        EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
        EXPECT_EQ(e.node(), node);
    }
    EXPECT_EQ(frees(), before) << "no pool page taken";
    EXPECT_EQ(degradation_count(), degraded) << "strict records nothing";
    // 1 GiB: no node here has a free one (ENOMEM), or the kernel has no such pool (EINVAL); named either way
    try {
        shared_segment::create(segment_layout({{0, 1}}).with_pages(page_size::explicit_1g));
        FAIL() << "no placement_error for 1 GiB";
    } catch (const placement_error& e) {
        EXPECT_TRUE(has_error(e, explicit_page_supported(std::size_t(1) << 30) ? ENOMEM : EINVAL, "explicit 1 GiB pages")) << e.what();
    }
}

TEST(shared_segment_huge, degrading_without_free_pages_makes_a_small_page_segment) {
    const segment_layout l = segment_layout({{0, 1}}).with_pages(page_size::explicit_2m);
    if (read_count(pool_file(0, "free_hugepages")) > 2) GTEST_SKIP() << "node 0 has free 2 MiB pages";
    const std::size_t degraded = degradation_count();
    shared_segment s = shared_segment::create(l, fallback::degrade);
    ASSERT_NE(s.data(), nullptr);
    EXPECT_EQ(s.page_bytes(), small) << "small pages";
    EXPECT_EQ(s.bytes(), two_mib) << "the layout's rounded size";
    EXPECT_EQ(degradation_count(), degraded + 1);
    const std::vector<std::string> d = degradations();
    ASSERT_FALSE(d.empty());
    EXPECT_NE(d.back().find("shared_segment: explicit 2 MiB pages"), std::string::npos) << d.back();
    EXPECT_NE(d.back().find("small pages instead"), std::string::npos) << d.back();
    std::memset(s.data(), 7, s.bytes());
    // an opener with the explicit layout maps the small-page segment its creator degraded to
    shared_segment o = shared_segment::open_fd(s.fd(), l);
    EXPECT_EQ(o.page_bytes(), small);
    EXPECT_EQ(o.data()[two_mib - 1], 7);
    if (topology::get().capabilities().memory_binding) EXPECT_TRUE(s.bound()) << "still bound, on small pages";
}

TEST(shared_segment_huge, a_named_segment_on_explicit_pages_is_refused_or_degraded) {
    const segment_layout l = segment_layout({{0, 1}}).with_pages(page_size::explicit_2m);
    const std::string name = "/numaplace-test-huge-" + std::to_string(::getpid());
    try {
        shared_segment::create(name, l);
        FAIL() << "no placement_error";
    } catch (const placement_error& e) {
        EXPECT_TRUE(has_error(e, ENOTSUP, "POSIX shared memory is tmpfs")) << e.what();
        EXPECT_NE(std::string(e.what()).find("hugetlbfs"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(shared_segment::remove(name)) << "nothing left behind";
    const std::size_t degraded = degradation_count();
    {
        shared_segment s = shared_segment::create(name, l, fallback::degrade);
        EXPECT_EQ(s.page_bytes(), small);
        EXPECT_EQ(degradation_count(), degraded + 1);
        shared_segment o = shared_segment::open(name, l);
        EXPECT_EQ(o.bytes(), two_mib);
    }
    EXPECT_FALSE(shared_segment::remove(name));
}

TEST(shared_segment_huge, every_part_on_its_nodes_pool_and_opened_by_another_process) {
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), nodes() + 2));
    const segment_layout l = per_node_layout();
    const std::vector<long> before = frees();
    {
        shared_segment s = shared_segment::create(l);
        EXPECT_EQ(s.page_bytes(), two_mib);
        EXPECT_TRUE(s.bound());
        for (int k = 0; k < nodes(); ++k)
            EXPECT_EQ(frees()[static_cast<std::size_t>(k)], before[static_cast<std::size_t>(k)] - (k + 1) - (k == nodes() - 1 ? 1 : 0))
                << "node " << k << " gives its part's pages (the last node the trailer page too)";
        EXPECT_EQ(where_page_sizes(s.data(), s.bytes()).bytes_on(two_mib), s.bytes()) << "KernelPageSize 2048 kB";
        for (std::size_t k = 0; k < l.size(); ++k) {
            const page_histogram h = s.where(k);
            EXPECT_EQ(h.on(static_cast<int>(k)), l.parts()[k].pages) << "part " << k;
            EXPECT_EQ(h.untouched, 0u) << "part " << k << ": faulted in at creation";
        }
        // another process maps it by fd, checks and writes every part; no pool page taken by it
        const int code = numaplace_test::run_child([&] {
            shared_segment o = shared_segment::open_fd(s.fd(), l);
            if (o.page_bytes() != two_mib || where_page_sizes(o.data(), o.bytes()).bytes_on(two_mib) != o.bytes()) return 1;
            for (std::size_t k = 0; k < l.size(); ++k) {
                const segment_block b = o.block(k);
                for (std::size_t i = 0; i < b.bytes; i += small) b.data[i] = static_cast<char>(k + 1);
                if (o.where(k).on(static_cast<int>(k)) != l.parts()[k].pages) return 2;
            }
            return 0;
        });
        EXPECT_EQ(code, 0) << "1: not on 2 MiB pages, 2: a part off its node, 128+7: SIGBUS";
        for (std::size_t k = 0; k < l.size(); ++k) {
            EXPECT_EQ(s.block(k).data[0], static_cast<char>(k + 1)) << "the child's write, part " << k;
            EXPECT_EQ(s.block(k).data[s.block(k).bytes - small], static_cast<char>(k + 1)) << "part " << k;
        }
        // an opener whose layout is on small pages is refused
        EXPECT_THROW(shared_segment::open_fd(s.fd(), l.with_pages(page_size::transparent)), invalid_placement);
    }
    EXPECT_EQ(frees(), before) << "every page back in its pool";
}

TEST(shared_segment_huge, a_pool_short_on_one_node) {
    if (nodes() < 2) GTEST_SKIP() << "needs two nodes"; // restricted: one node visible
    std::vector<long> counts(static_cast<std::size_t>(nodes()), nodes() + 2);
    counts[1] = 1; // part 1 needs 2 pages
    RESERVE_OR_SKIP(pools, counts);
    const segment_layout l = per_node_layout();
    const std::vector<long> before = frees();
    // part 1's 2 pages, and the trailer page where node 1 is the last part's
    const std::string short_of = "on node 1: " + std::to_string(nodes() == 2 ? 3 : 2) + " needed, 1 free";
    try {
        shared_segment::create(l);
        FAIL() << "no placement_error";
    } catch (const placement_error& e) {
        EXPECT_TRUE(has_error(e, ENOMEM, "explicit 2 MiB pages " + short_of)) << e.what();
        EXPECT_EQ(e.node(), 1);
    }
    EXPECT_EQ(frees(), before) << "strict: no pool page taken";
    const std::size_t degraded = degradation_count();
    {
        shared_segment s = shared_segment::create(l, fallback::degrade);
        EXPECT_EQ(s.page_bytes(), small);
        EXPECT_EQ(degradation_count(), degraded + 1);
        EXPECT_NE(degradations().back().find(short_of), std::string::npos) << degradations().back();
        EXPECT_EQ(frees(), before) << "the small-page segment takes no pool page";
        for (std::size_t k = 0; k < l.size(); ++k) std::memset(s.block(k).data, 1, s.block(k).bytes);
        for (std::size_t k = 0; k < l.size(); ++k) EXPECT_EQ(s.where(k).on(static_cast<int>(k)), l.parts()[k].pages) << "part " << k;
    }
}

// Pages this process keeps for reuse count as free for a segment too (issue 48): node 0's whole pool held
// by a block freed into the cache of own mappings, then a segment of one page on node 0 and its trailer
// page. Refused without the relief ("on node 0: 2 needed, 0 free").
TEST(shared_segment_huge, pages_held_by_the_cache_of_own_mappings_are_given_back_to_a_segment) {
    release_cached_memory(); // no block of an earlier test holds pool pages (the reservation checks them free)
    RESERVE_OR_SKIP(pools, std::vector<long>(static_cast<std::size_t>(nodes()), 2));
    allocator<char, on_node> huge(on_node(0).with_pages(page_size::explicit_2m));
    huge.deallocate(huge.allocate(2 * two_mib), 2 * two_mib);
    ASSERT_EQ(read_count(pool_file(0, "free_hugepages")), 0) << "the freed block is cached, its pages held";
    const shared_segment seg = shared_segment::create(segment_layout({{0, per_huge}}).with_pages(page_size::explicit_2m));
    EXPECT_EQ(seg.page_bytes(), two_mib);
    EXPECT_EQ(where_page_sizes(seg.block(0).data, two_mib).bytes_on(two_mib), two_mib);
    EXPECT_EQ(read_count(pool_file(0, "free_hugepages")), 0) << "the part's page and the trailer's, given back by the cache";
}
