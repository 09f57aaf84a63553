// The small size classes and the shard count against independent oracles (issue 33): every request of
// 0..16 KiB at every alignment from 1 to a page gets the smallest block the classes allow, aligned as
// asked (8-byte steps to 128 B only for alignments up to 8); the shard count for every number of thread
// caches around the CPUs, the limit, and SIZE_MAX. Part of the test_heap binary (no guest boot of its own).
#include <numaplace/allocator.hpp>
#include <numaplace/detail/routed_mapping.hpp> // the heap's internals (out of the public headers when separately compiled)

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

using namespace numaplace;

namespace {

// The classes as docs/heap.md states them, written out: 8..128 in steps of 8, then four per power of two.
std::vector<std::size_t> documented_classes() {
    std::vector<std::size_t> c;
    for (std::size_t s = 8; s <= 128; s += 8) c.push_back(s);
    for (std::size_t p = 128; p < (std::size_t(1) << 20); p *= 2)
        for (std::size_t k = 5; k <= 8; ++k) c.push_back(p / 4 * k);
    return c;
}
// The smallest documented class that holds `bytes` and whose blocks are aligned to `align`: a class's
// blocks are aligned to the largest power of two dividing its size; an odd multiple of 8 only serves
// alignments up to 8, a request aligned to 16 is rounded to 16 first.
std::size_t oracle_block(std::size_t bytes, std::size_t align) {
    const std::size_t want = bytes == 0 ? 1 : bytes;
    for (std::size_t s : documented_classes()) {
        const std::size_t low = s & (~s + 1);
        if (s >= want && low >= align && (align < 16 || s % 16 == 0)) return s;
    }
    return 0;
}

} // namespace

TEST(heap_class_oracle, the_classes_are_the_documented_ones) {
    const std::vector<std::size_t> doc = documented_classes();
    ASSERT_EQ(doc.size(), detail::heap_class_count);
    for (std::size_t c = 0; c < detail::heap_class_count; ++c) EXPECT_EQ(detail::heap_class_size(c), doc[c]) << c;
    EXPECT_EQ(detail::heap_class_size(detail::heap_class_count - 1), detail::heap_max_block);
}

TEST(heap_class_oracle, every_small_request_gets_the_smallest_block_aligned_as_asked) {
    const std::size_t page = detail::page_size();
    std::size_t checked = 0;
    for (std::size_t align = 1; align <= page; align *= 2) {
        for (std::size_t bytes = 0; bytes < 16384; ++bytes) {
            const std::size_t slot = detail::heap_slot(bytes, align);
            ASSERT_NE(slot, detail::heap_no_slot) << bytes << " at " << align;
            if (slot >= detail::heap_class_count) continue; // a page run (mid sizes at page alignments)
            const std::size_t size = detail::heap_class_size(slot);
            ASSERT_EQ(size, oracle_block(bytes, align)) << bytes << " bytes at alignment " << align;
            ++checked;
        }
    }
    EXPECT_GT(checked, std::size_t(16384) * 8); // most requests are span blocks at small alignments
    // the class boundaries one by one, at alignment 8 and 16
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(0, 8)), 8u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(1, 8)), 8u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(40, 8)), 40u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(40, 16)), 48u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(41, 8)), 48u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(128, 8)), 128u);
    EXPECT_EQ(detail::heap_class_size(detail::heap_slot(129, 8)), 160u);
    // sizes and alignments the classes cannot serve
    EXPECT_EQ(detail::heap_class(detail::heap_max_block + 1, 8), detail::heap_no_class);
    EXPECT_EQ(detail::heap_class(std::numeric_limits<std::size_t>::max() - 7, 8), detail::heap_no_class);
    EXPECT_EQ(detail::heap_class(64, 24), detail::heap_no_class); // not a power of two
}

TEST(heap_class_oracle, an_allocator_of_a_40_byte_node_gets_40_byte_blocks_and_a_16_aligned_request_never_does) {
    struct node40 {
        void* p[5];
    };
    static_assert(sizeof(node40) == 40 && alignof(node40) == 8, "a tree node's size");
    node_allocator<node40> a(0);
    std::vector<node40*> got;
    for (int i = 0; i < 64; ++i) got.push_back(a.allocate(1));
    std::size_t forty_apart = 0;
    for (std::size_t i = 1; i < got.size(); ++i) {
        const auto d = reinterpret_cast<std::uintptr_t>(got[i - 1]) - reinterpret_cast<std::uintptr_t>(got[i]);
        forty_apart += d == 40 || d == std::uintptr_t(0) - 40;
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(got[i]) % 8, 0u);
    }
    EXPECT_GT(forty_apart, got.size() / 2) << "blocks of one span are 40 bytes apart";
    for (node40* p : got) a.deallocate(p, 1);
    struct alignas(16) wide {
        char c[40];
    };
    node_allocator<wide> w(0);
    for (int i = 0; i < 64; ++i) {
        wide* p = w.allocate(1);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
        w.deallocate(p, 1);
    }
}

TEST(heap_class_oracle, the_shard_count_for_every_number_of_caches_matches_its_rule) {
    using detail::heap_registry;
    const std::size_t max = std::numeric_limits<std::size_t>::max();
    for (std::size_t cpus : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(64), max - 1, max})
        for (std::size_t limit : {std::size_t(1), std::size_t(2), std::size_t(16)})
            for (std::size_t live : {std::size_t(0), std::size_t(1), std::size_t(2), std::size_t(3), std::size_t(17),
                                     std::size_t(18), std::size_t(65), std::size_t(1000), max - 1, max}) {
                const std::size_t c = cpus == 0 ? 1 : cpus;
                // oracle: one shard and one more per cache beyond the CPUs, saturating at the limit (no wrap)
                const std::size_t over = live > c ? live - c : 0;
                const std::size_t expect = over >= limit - 1 ? limit : over + 1;
                EXPECT_EQ(heap_registry::shards_for(live, cpus, limit, false), live <= c ? 1 : expect)
                    << live << " caches, " << cpus << " CPUs, limit " << limit;
                EXPECT_EQ(heap_registry::shards_for(live, cpus, limit, true), limit);
            }
}
