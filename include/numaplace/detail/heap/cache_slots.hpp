#ifndef NUMAPLACE_DETAIL_HEAP_CACHE_SLOTS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_CACHE_SLOTS_HPP_INCLUDED

/// \file
/// What one thread caches of one heap: per slot an array of block pointers (a free is `blocks[count++] =
/// p`, touching nothing in the block), all of a heap's arrays in one allocation with the slots' counts.
/// The heaps take and give lists (span.hpp's heap_block): a flush links the array's blocks, a refill
/// reads a taken list into the array. Design and measurements: docs/heap.md ("Thread caches as arrays").

#include "size_classes.hpp"
#include "span.hpp"

#include <cstddef>
#include <cstring>
#include <new>

namespace numaplace {
namespace detail {

/// One slot's cached blocks: blocks[0..count), the newest last.
struct cache_slot {
    void** blocks; // cache_slot_capacity(slot) entries
    std::size_t count;
    std::size_t shrink; // the bound is cache_max >> shrink (thread_cache: drain_shrink_max)
};

/// \returns the entries of slot `slot`'s array: its bound and one more (a free goes in, then a trim).
constexpr std::size_t cache_slot_capacity(std::size_t slot) noexcept {
    return (slot < heap_class_count ? heap_table.info[slot].cache_max : heap_run_cache_max) + 1;
}

/// Where each slot's array starts among a heap's arrays (in pointers), and their total.
struct cache_slot_layout {
    std::size_t offset[heap_slots];
    std::size_t total;
    constexpr cache_slot_layout() : offset(), total(0) {
        for (std::size_t s = 0; s < heap_slots; ++s) {
            offset[s] = total;
            total += cache_slot_capacity(s);
        }
    }
};
inline constexpr cache_slot_layout cache_slot_table{};

/// \returns true if every refill stays within its slot's bound: a refill asks for a batch and the heaps
/// hand out at most two (span_heap::take: a transfer list or remote stack of up to 2 want; node_heap::take:
/// one run), the allocation takes one, and frees push until one over the bound, then trim. The arrays lie
/// back to back, so an overflow would write into the next slot's array, unseen by ASan.
constexpr bool cache_slot_refills_fit() noexcept {
    for (std::size_t c = 0; c < heap_class_count; ++c)
        if (2 * heap_table.info[c].batch > heap_table.info[c].cache_max) return false;
    return heap_run_batch <= heap_run_cache_max;
}
static_assert(cache_slot_refills_fit(), "a refill of two batches must fit a slot's array");

/// \returns a heap's slots for one thread, empty: heap_slots cache_slot, then their arrays (left
/// uninitialised: a page of them is touched only once a slot it holds caches a block).
/// \throws std::bad_alloc. \notes call outside an operation on the cache: `new` may come back to it.
inline cache_slot* make_cache_slots() {
    constexpr std::size_t bytes = heap_slots * sizeof(cache_slot) + cache_slot_table.total * sizeof(void*);
    void* raw = ::operator new(bytes);
    auto* slots = static_cast<cache_slot*>(raw);
    auto* arrays = reinterpret_cast<void**>(slots + heap_slots);
    for (std::size_t s = 0; s < heap_slots; ++s) new (slots + s) cache_slot{arrays + cache_slot_table.offset[s], 0, 0};
    return slots;
}
inline void free_cache_slots(cache_slot* slots) noexcept { ::operator delete(static_cast<void*>(slots)); }

/// \returns blocks[0..n) (n >= 1) of slot `slot` linked in order into a null-terminated list. The
/// blocks and, for a class, their span headers are prefetched a few entries ahead: the misses on lines
/// freed long ago overlap instead of one after the other (the heap then walks the list in cache).
inline heap_block* link_cache_blocks(void* const* blocks, std::size_t n, std::size_t slot) noexcept {
    constexpr std::size_t ahead = 8;
    const bool span = slot < heap_class_count;
    for (std::size_t i = 0; i < n && i < ahead; ++i) {
        __builtin_prefetch(blocks[i], 1);
        if (span) __builtin_prefetch(heap_span_of(blocks[i], slot), 1);
    }
    for (std::size_t i = 0; i + 1 < n; ++i) {
        if (i + ahead < n) {
            __builtin_prefetch(blocks[i + ahead], 1);
            if (span) __builtin_prefetch(heap_span_of(blocks[i + ahead], slot), 1);
        }
        static_cast<heap_block*>(blocks[i])->next = static_cast<heap_block*>(blocks[i + 1]);
    }
    static_cast<heap_block*>(blocks[n - 1])->next = nullptr;
    return static_cast<heap_block*>(blocks[0]);
}

/// \effects appends the blocks of the null-terminated list `list` to `s` (it has room for them).
inline void fill_cache_slot(cache_slot& s, heap_block* list) noexcept {
    for (; list; list = list->next) s.blocks[s.count++] = list;
}

/// \effects keeps the newest `keep` blocks of `s` (< s.count) at its start. \returns the list of the
/// others, oldest first (their count: the old s.count - keep).
inline heap_block* split_cache_slot(cache_slot& s, std::size_t slot, std::size_t keep) noexcept {
    const std::size_t given = s.count - keep;
    heap_block* list = link_cache_blocks(s.blocks, given, slot);
    if (keep != 0) std::memmove(s.blocks, s.blocks + given, keep * sizeof(void*));
    s.count = keep;
    return list;
}

} // namespace detail
} // namespace numaplace

#endif
