#ifndef NUMAPLACE_DETAIL_ROUTING_HPP_INCLUDED
#define NUMAPLACE_DETAIL_ROUTING_HPP_INCLUDED

/// \file
/// Where a placement's allocation goes: a slot of the heap of its home node (through this thread's
/// cache, the inlined fast path), or a mapping of its own placed page by page (the slow paths:
/// routed_mapping.hpp, compiled into libnumaplace for the library's placements in the separately
/// compiled mode). Used by allocator.hpp and pmr.hpp; the heap below knows no placement.

#include "../placement.hpp"
#include "config.hpp"
#include "heap/heap_index.hpp"
#include "heap/size_classes.hpp"
#include "heap/thread_cache.hpp"
#include "linux.hpp"

#include <cstddef>
#include <type_traits>

namespace numaplace {
namespace detail {

/// \returns the source of the heap serving `p`'s pooled blocks.
inline heap_source heap_source_of(const on_node& p) noexcept {
    return {p.policy() == node_policy::prefer, p.on_refusal()};
}
inline heap_source heap_source_of(const preferred_many& p) noexcept { return {true, p.on_refusal()}; }
template <class Placement>
heap_source heap_source_of(const Placement& p) noexcept {
    return {false, p.on_refusal()};
}

/// \returns whether `p` maps its own memory on explicit huge pages (never the heap's small-page
/// blocks of a page or more, never its large-block cache: placed_cache keeps them by placement and size).
inline bool on_explicit_pages(const on_node& p) noexcept { return p.pages() != numaplace::page_size::transparent; }

/// \returns the heap slot serving `bytes` at `alignment` for `placement`, or heap_no_slot (own mapping).
/// \notes `on_node` pools every class up to 1 MiB (below a page only on explicit pages); the other
/// placements pool blocks below a page only (their larger blocks must be spread page by page), a
/// partitioned one within one page.
template <class Placement>
NUMAPLACE_ALWAYS_INLINE std::size_t route_slot(const Placement& placement, std::size_t bytes, std::size_t alignment) noexcept {
    if constexpr (std::is_same<Placement, on_node>::value)
        if (NUMAPLACE_LIKELY(!on_explicit_pages(placement)) || bytes < page_size()) return heap_slot(bytes, alignment);
    (void)placement;
    if constexpr (std::is_same<Placement, partitioned>::value)
        // A partitioned block below a page is aligned to its size rounded up to a power of two, so it lies
        // in one page: that page's owner is the block holding index 0 (basic_partition::page_bytes), the
        // home node's, whose heap serves it. At most twice the bytes, for arrays below a page only.
        if (bytes > 1 && bytes < page_size())
            alignment = std::max(alignment, std::size_t(1) << (64 - __builtin_clzll(bytes - 1)));
    const std::size_t c = heap_class(bytes, alignment);
    return bytes < page_size() && c != heap_no_class && heap_table.info[c].size <= page_size() ? c : heap_no_slot;
}

// The slow paths of routed_allocate / routed_deallocate, out of line so that the fast path (a slot,
// this thread's list) inlines into every allocator; defined in routed_mapping.hpp.
/// \returns a mapping of `bytes` of its own placed by `placement` (or an `on_node` large block of its heap).
template <class Placement>
void* routed_own_mapping(const Placement& placement, std::size_t bytes, std::size_t alignment);
/// \effects releases what routed_own_mapping returned. Never allocates.
template <class Placement>
void routed_unmap(const Placement& placement, void* p, std::size_t bytes, std::size_t alignment) noexcept;
/// \returns a block of heap slot `slot` for a request of `bytes`, from the heap's lists or new memory.
/// \throws placement_error naming `bytes` (the heap maps a span or a region at a time).
void* routed_heap_allocate(std::size_t heap, std::size_t slot, std::size_t bytes);

#if !NUMAPLACE_DEFINITIONS
// Separately compiled: libnumaplace instantiates the slow paths of the library's placements. A
// placement of the user's own needs their definitions: include <numaplace/detail/routed_mapping.hpp>.
extern template void* routed_own_mapping<on_node>(const on_node&, std::size_t, std::size_t);
extern template void routed_unmap<on_node>(const on_node&, void*, std::size_t, std::size_t) noexcept;
extern template void* routed_own_mapping<preferred_many>(const preferred_many&, std::size_t, std::size_t);
extern template void routed_unmap<preferred_many>(const preferred_many&, void*, std::size_t, std::size_t) noexcept;
extern template void* routed_own_mapping<interleaved>(const interleaved&, std::size_t, std::size_t);
extern template void routed_unmap<interleaved>(const interleaved&, void*, std::size_t, std::size_t) noexcept;
extern template void* routed_own_mapping<partitioned>(const partitioned&, std::size_t, std::size_t);
extern template void routed_unmap<partitioned>(const partitioned&, void*, std::size_t, std::size_t) noexcept;
#endif

/// \returns `bytes` (0 allowed) aligned to `alignment` (a power of two), placed by `placement`: from the
/// heap of its home node, or its own mapping.
/// \throws placement_error (a std::bad_alloc): no memory, size overflow, a strict placement refused.
/// \requires `alignment` a power of two (callers check a user's: node_pool_resource).
template <class Placement>
NUMAPLACE_ALWAYS_INLINE void* routed_allocate(const Placement& placement, std::size_t bytes, std::size_t alignment) {
    const std::size_t slot = route_slot(placement, bytes, alignment);
    if (NUMAPLACE_UNLIKELY(slot == heap_no_slot)) return routed_own_mapping(placement, bytes, alignment);
    const std::size_t heap = heap_index(placement.home_node(), heap_source_of(placement));
    if (thread_cache* tc = thread_cache::current())
        if (void* p = tc->try_pop(heap, slot)) return p;
    return routed_heap_allocate(heap, slot, bytes);
}
/// \effects releases what `routed_allocate(placement, bytes, alignment)` returned. Never allocates.
template <class Placement>
NUMAPLACE_ALWAYS_INLINE void routed_deallocate(const Placement& placement, void* p, std::size_t bytes,
                                               std::size_t alignment) noexcept {
    const std::size_t slot = route_slot(placement, bytes, alignment);
    if (NUMAPLACE_UNLIKELY(slot == heap_no_slot)) return routed_unmap(placement, p, bytes, alignment);
    const std::size_t heap = heap_index(placement.home_node(), heap_source_of(placement));
    if (thread_cache* tc = thread_cache::current())
        if (tc->try_push(heap, slot, p)) return;
    heap_deallocate(heap, slot, p);
}

} // namespace detail
} // namespace numaplace

#if NUMAPLACE_DEFINITIONS
#include "routed_mapping.hpp"
#endif

#endif
