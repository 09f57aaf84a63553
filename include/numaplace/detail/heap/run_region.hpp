#ifndef NUMAPLACE_DETAIL_HEAP_RUN_REGION_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_RUN_REGION_HPP_INCLUDED

/// \file
/// The layout of a region of page runs (run_heap.hpp): its header, the metadata of each page's run (boundary
/// tags), the run heap's constants. Design: docs/heap.md.

#include "../linux.hpp"

#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

/// Per page of a region, in its header: a run's first and last page carry its length and state; a
/// free run's first page also carries its links (in its bin's list), how many of its pages are
/// resident (`dirty`) and when it was last freed into.
struct run_meta {
    std::uint32_t len;
    std::uint32_t state;
    std::uint32_t dirty;
    std::uint32_t stamp; ///< ms when freed (os_now_ms truncated; age = now - stamp, modulo 2^32)
    run_meta* next;
    run_meta* prev;
};
constexpr std::uint32_t run_state_free = 1, run_state_used = 2;
/// Marks on a used run's first page: replace() moved its pages; and set their policy.
constexpr std::uint32_t run_mark_moved = 4, run_mark_policy = 8;
constexpr std::size_t run_region_bytes = std::size_t(64) << 20;
constexpr std::size_t run_header = 64; ///< the region's fields; the run_meta array follows
/// A free run unused for this long goes back to the kernel (at the heap's next operation after it).
constexpr std::uint32_t run_decay_ms = 1000;
/// Free pages kept resident beyond the recent peak in use.
constexpr std::size_t run_dirty_floor = std::size_t(4) << 20;

/// A region's header, at its start (regions are size-aligned: a block's region is its address masked).
/// Run metadata lives here, never in a free run, whose pages would otherwise be faulted in to link it.
struct run_region {
    std::uint32_t pages; ///< pages of the region
    std::uint32_t first; ///< first page after the header (the metadata)
    std::uint32_t used;  ///< pages in runs handed out
    std::uint32_t reach; ///< the end of the furthest run ever handed out (no page beyond was touched)
    bool bound;          ///< the heap's policy is in force on it
    run_meta* meta() noexcept { return reinterpret_cast<run_meta*>(reinterpret_cast<char*>(this) + run_header); }
    char* page_at(std::size_t i) noexcept { return reinterpret_cast<char*>(this) + i * page_size(); }
};
static_assert(sizeof(run_region) <= run_header, "region fields fit before the metadata");

/// \returns the region holding `p` (a run of a run heap).
inline run_region* run_region_of(const void* p) noexcept {
    return reinterpret_cast<run_region*>(reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t(run_region_bytes) - 1));
}

/// \effects gives back the header pages of `r` that hold only metadata of pages inside free runs: only a
/// run's first and last page's are ever read, and a carve writes a page's before it becomes either (a
/// region churned all over keeps its whole header, 1/128 of it, resident otherwise). Under the run heap's
/// lock. Never allocates.
inline void release_run_header(run_region* r) noexcept {
    const std::uintptr_t page = page_size();
    run_meta* m = r->meta();
    for (std::size_t i = r->first; i < r->pages; i += m[i].len) {
        if (m[i].state != run_state_free || m[i].len <= 2) continue;
        const std::uintptr_t from = (reinterpret_cast<std::uintptr_t>(&m[i + 1]) + page - 1) & ~(page - 1);
        const std::uintptr_t to = reinterpret_cast<std::uintptr_t>(&m[i + m[i].len - 1]) & ~(page - 1);
        if (to > from) os_advise(reinterpret_cast<void*>(from), to - from, page_advice::dont_need);
    }
}

} // namespace detail
} // namespace numaplace

#endif
