#ifndef NUMAPLACE_DETAIL_HEAP_SIZE_CLASSES_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SIZE_CLASSES_HPP_INCLUDED

/// \file
/// The heap's size classes and slots: which class or page run serves a request, and each class's span
/// size, block layout and thread-cache bounds. Pure computation; the page size is its only input from
/// the system. Design and measurements: docs/heap.md.

#include "../config.hpp"
#include "../linux.hpp"

#include <cstddef>

namespace numaplace {
namespace detail {

/// 68 classes, 8 B to 1 MiB: 8-byte steps to 128 B, then four classes per power of two. The classes of
/// an odd multiple of 8 B serve requests aligned to at most 8 (a 40-byte tree node: docs/heap.md, "Size
/// classes"); a request aligned to 16 is served from the 16-byte multiples.
constexpr std::size_t heap_class_count = 68;
constexpr std::size_t heap_max_block = std::size_t(1) << 20;
constexpr std::size_t heap_no_class = heap_class_count;
/// Bytes kept at the start of every span for its header (`heap_span`, span.hpp).
constexpr std::size_t heap_span_header = 64;

/// \returns the block size of class `c` (< heap_class_count).
constexpr std::size_t heap_class_size(std::size_t c) noexcept {
    if (c < 16) return (c + 1) * 8;
    const std::size_t k = 7 + (c - 16) / 4, idx = (c - 16) % 4;
    return (idx + 5) << (k - 2);
}
static_assert(heap_class_size(heap_class_count - 1) == heap_max_block, "classes end at 1 MiB");

/// \returns the smallest class holding `size` bytes. \requires 1 <= size <= heap_max_block.
inline std::size_t heap_class_of(std::size_t size) noexcept {
    if (size <= 128) return (size + 7) / 8 - 1;
    const std::size_t s = size - 1;
    const std::size_t k = 63 - static_cast<std::size_t>(__builtin_clzll(s));
    return 16 + (k - 7) * 4 + ((s >> (k - 2)) - 4);
}

/// \returns the class serving `bytes` at `alignment`, or heap_no_class (over 1 MiB, or an alignment
/// that is not a power of two or is over 1 MiB).
/// \notes every block of a class is aligned to the largest power of two dividing the class's size.
inline std::size_t heap_class(std::size_t bytes, std::size_t alignment) noexcept {
    if (bytes > heap_max_block) return heap_no_class;
    if (bytes == 0) bytes = 1;
    if (alignment <= 8) return heap_class_of(bytes);
    if (!is_power_of_two(alignment) || alignment > heap_max_block) return heap_no_class;
    const std::size_t size = (bytes + alignment - 1) & ~(alignment - 1); // no overflow: both <= 1 MiB
    if (size > heap_max_block) return heap_no_class;
    std::size_t c = heap_class_of(size);
    while (c < heap_class_count && (heap_class_size(c) & (alignment - 1)) != 0) ++c;
    return c;
}

/// Slots, what thread caches and heaps are indexed by: slot c < heap_class_count is class c, served
/// from spans; slot heap_class_count + n is a page run of n pages (4 <= n <= heap_run_pages_max,
/// aligned to a page).
constexpr std::size_t heap_run_pages_max = heap_max_block / 4096; // pages are at least 4 KiB
constexpr std::size_t heap_slots = heap_class_count + heap_run_pages_max + 1;
constexpr std::size_t heap_no_slot = heap_slots;
/// The first class that can be a page run: 16 KiB, four pages of the smallest page size.
constexpr std::size_t heap_run_first = 43;
static_assert(heap_class_size(heap_run_first) == 16384, "the first run class is 16 KiB");

/// \returns true if class `c`'s size is whole pages, at least four: at alignments up to a page its
/// requests are page runs.
inline bool heap_run_class(std::size_t c) noexcept {
    if (c < heap_run_first) return false;
    const std::size_t page = page_size(), size = heap_class_size(c);
    return size >= 4 * page && size % page == 0;
}

/// \returns the slot serving `bytes` at `alignment`, or heap_no_slot (the caller maps it on its own).
/// \notes at alignments up to 16 B a request below 16 KiB is a span block of its class (the inlined
/// fast path), even in the 16 KiB class. Otherwise, at alignments up to a page, a request whose class
/// (of its size rounded up to the alignment) is a run class is a run of the request's own whole pages,
/// not of its class's size. With 4 KiB pages: 16 KiB and more at the default alignment, over 14 KiB at
/// 32 B to 2 KiB, over 12 KiB at 4 KiB; a run is never shorter than 4 pages nor longer than its class.
/// Above a page of alignment: a span block of a class aligned as asked.
inline std::size_t heap_slot(std::size_t bytes, std::size_t alignment) noexcept {
    if (alignment <= 8 && bytes < 16384) return heap_class_of(bytes == 0 ? 1 : bytes);
    if (alignment == 16 && bytes < 16384) return heap_class_of(((bytes == 0 ? 1 : bytes) + 15) & ~std::size_t(15));
    const std::size_t c = heap_class(bytes, alignment);
    if (c == heap_no_class) return heap_no_slot;
    const std::size_t page = page_size();
    if (alignment > page || !heap_run_class(c)) return c;
    return heap_class_count + ((bytes + page - 1) >> __builtin_ctzll(page)); // a power of two: no division
}

/// A class's layout in its spans and its thread-cache bounds.
struct heap_class_info {
    std::size_t size;       ///< block size
    std::size_t span_bytes; ///< 64 KiB up to 4 KiB blocks, else the power of two >= 8 blocks
    std::size_t first;      ///< offset of the first block (after the header, aligned as the class)
    std::size_t capacity;   ///< blocks per span
    std::size_t cache_max;  ///< blocks a thread caches: 64 KiB worth, at least 2, at most 256
    std::size_t batch;      ///< blocks moved per refill or flush: half of cache_max
};
constexpr heap_class_info heap_info_of(std::size_t c) noexcept {
    heap_class_info i{};
    i.size = heap_class_size(c);
    std::size_t span = std::size_t(64) << 10;
    while (span < 8 * i.size) span *= 2;
    if (i.size <= 4096) span = std::size_t(64) << 10;
    i.span_bytes = span;
    const std::size_t low = i.size & (~i.size + 1); // largest power of two dividing the size
    i.first = (heap_span_header + low - 1) / low * low;
    i.capacity = (span - i.first) / i.size;
    std::size_t cap = (std::size_t(64) << 10) / i.size;
    i.cache_max = cap < 2 ? 2 : cap > 256 ? 256 : cap;
    i.batch = i.cache_max / 2 < 1 ? 1 : i.cache_max / 2;
    return i;
}
struct heap_tables {
    heap_class_info info[heap_class_count];
    constexpr heap_tables() : info() {
        for (std::size_t c = 0; c < heap_class_count; ++c) info[c] = heap_info_of(c);
    }
};
inline constexpr heap_tables heap_table{};

/// A run slot's thread-cache bounds: two blocks cached (at most 1 MiB of runs in all, see thread_cache),
/// refilled one at a time.
constexpr std::size_t heap_run_cache_max = 2;
constexpr std::size_t heap_run_batch = 1;

/// A slot's block size and thread-cache bounds: its class's; for a run of n pages, n pages and the run
/// bounds above.
struct heap_slot_info {
    std::size_t size, cache_max, batch;
};
inline heap_slot_info heap_slot_info_of(std::size_t slot) noexcept {
    if (NUMAPLACE_LIKELY(slot < heap_class_count)) {
        const heap_class_info& i = heap_table.info[slot];
        return {i.size, i.cache_max, i.batch};
    }
    return {(slot - heap_class_count) * page_size(), heap_run_cache_max, heap_run_batch};
}

} // namespace detail
} // namespace numaplace

#endif
