// The thread caches' arrays (detail/heap/cache_slots.hpp, issue 33): their layout against a closed-form
// oracle, and blocks handed between threads through neighbouring slots at their bounds. The arrays lie
// back to back in one allocation, so an array written past its end would corrupt the next slot's entries
// without ASan seeing it: the second test would then get a block twice or a block of another size.
// Part of the test_heap binary (no guest boot of its own).
#include <numaplace/allocator.hpp>
#include <numaplace/detail/heap/cache_slots.hpp>
#include <numaplace/detail/routed_mapping.hpp> // the heap's internals (out of the public headers when separately compiled)

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

using namespace numaplace;

TEST(heap_cache_slots, each_slot_has_its_bound_and_one_more_back_to_back) {
    using namespace detail;
    std::size_t expect_offset = 0;
    for (std::size_t s = 0; s < heap_slots; ++s) {
        // oracle: a class caches 64 KiB worth of blocks, at least 2, at most 256; a run slot 2
        std::size_t bound = 2;
        if (s < heap_class_count) {
            const std::size_t worth = (std::size_t(64) << 10) / heap_class_size(s);
            bound = worth < 2 ? 2 : worth > 256 ? 256 : worth;
            EXPECT_LE(2 * heap_table.info[s].batch, bound) << "class " << s << ": a refill of two batches fits";
            EXPECT_GE(heap_table.info[s].batch, 1u) << "class " << s;
        }
        EXPECT_EQ(cache_slot_capacity(s), bound + 1) << "slot " << s;
        EXPECT_EQ(heap_slot_info_of(s).cache_max + 1, cache_slot_capacity(s)) << "slot " << s;
        EXPECT_EQ(cache_slot_table.offset[s], expect_offset) << "slot " << s;
        expect_offset += bound + 1;
    }
    EXPECT_EQ(cache_slot_table.total, expect_offset);
    // The first and last slots: 8-byte blocks (256 cached) and the longest run (2 cached).
    EXPECT_EQ(cache_slot_capacity(0), 257u);
    EXPECT_EQ(cache_slot_capacity(heap_slots - 1), heap_run_cache_max + 1);
    cache_slot* slots = make_cache_slots();
    for (std::size_t s = 0; s < heap_slots; ++s) {
        EXPECT_EQ(slots[s].count, 0u);
        EXPECT_EQ(slots[s].shrink, 0u);
        if (s + 1 < heap_slots) EXPECT_EQ(slots[s + 1].blocks - slots[s].blocks, static_cast<std::ptrdiff_t>(cache_slot_capacity(s)));
    }
    free_cache_slots(slots);
}

// For neighbouring classes (and page runs) at once: one thread allocates bound * 3 + 1 blocks of each
// (refills of two batches), writes every byte of each with its own pattern, another thread frees them all
// (its arrays fill to one over the bound and trim, again and again), then the first allocates as many
// again (refills from the transfer lists the frees made). Every block handed out is distinct, of the size
// asked (its whole length written and read back), and nothing is lost.
TEST(heap_cache_slots, blocks_through_neighbouring_slots_at_their_bounds_stay_distinct_and_whole) {
    using namespace detail;
    const std::size_t page = detail::page_size();
    const std::vector<std::size_t> sizes = {8, 16, 24, 40, 48, 128, 160, 4096, 5120, 12288, 4 * page, 5 * page};
    struct block {
        char* p;
        std::size_t size;
    };
    node_allocator<char> a(0);
    const auto allocate_all = [&](std::vector<block>& out) {
        for (int round = 0; round < 3; ++round)
            for (std::size_t size : sizes) {
                const std::size_t slot = heap_slot(size, alignof(std::max_align_t));
                const std::size_t n = heap_slot_info_of(slot).cache_max + 1; // three rounds: bound * 3 + 3
                for (std::size_t i = 0; i < n; ++i) {
                    char* p = a.allocate(size);
                    std::memset(p, static_cast<int>((out.size() * 7 + 1) & 0xff), size);
                    out.push_back({p, size});
                }
            }
    };
    const auto check = [](const std::vector<block>& bs) {
        std::set<char*> seen;
        std::size_t bad = 0;
        for (std::size_t i = 0; i < bs.size(); ++i) {
            if (!seen.insert(bs[i].p).second) ++bad;
            const char want = static_cast<char>((i * 7 + 1) & 0xff);
            for (std::size_t k = 0; k < bs[i].size; ++k)
                if (bs[i].p[k] != want) {
                    ++bad;
                    break;
                }
        }
        return bad;
    };
    for (int pass = 0; pass < 3; ++pass) {
        std::vector<block> blocks;
        std::thread([&] { allocate_all(blocks); }).join();
        ASSERT_EQ(check(blocks), 0u) << "pass " << pass << ": a block given twice or overwritten";
        std::thread([&] {
            for (const block& b : blocks) a.deallocate(b.p, b.size);
        }).join();
        std::vector<block> again;
        std::thread([&] {
            allocate_all(again);
            // freed by their own thread this time: arrays filled in order, trimmed at one over the bound
            ASSERT_EQ(check(again), 0u) << "pass " << pass << ": after the cross-thread frees";
            for (const block& b : again) a.deallocate(b.p, b.size);
        }).join();
    }
}
