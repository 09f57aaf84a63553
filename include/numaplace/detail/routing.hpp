#ifndef NUMAPLACE_DETAIL_ROUTING_HPP_INCLUDED
#define NUMAPLACE_DETAIL_ROUTING_HPP_INCLUDED

/// \file
/// Where a placement's allocation goes: a slot of the heap of its home node (through this thread's
/// cache, the inlined fast path), or a mapping of its own placed page by page. Used by allocator.hpp
/// and pmr.hpp; the heap below knows no placement.

#include "../memory.hpp"
#include "../placement.hpp"
#include "config.hpp"
#include "heap/large_cache.hpp"
#include "heap/node_heap.hpp"
#include "heap/registry.hpp"
#include "heap/size_classes.hpp"
#include "heap/thread_cache.hpp"
#include "linux.hpp"
#include "placed_cache.hpp"

#include <cstddef>
#include <cstdint>
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

/// \returns the explicit pages a block of `bytes` placed by `p` may hold (placed_cache.hpp): none on
/// transparent pages or below one explicit page; pages of its size (any explicit size for
/// `largest_explicit`) from the pool of a bound `on_node`'s node or a one-node partition's, from any
/// node's otherwise (a preferring `on_node` may take another node's; the others span several nodes).
inline pool_pages explicit_pool_pages(numaplace::page_size pages, std::size_t bytes, int node) noexcept {
    if (pages == numaplace::page_size::transparent) return {};
    if (pages == numaplace::page_size::largest_explicit)
        return bytes < explicit_page_bytes(numaplace::page_size::explicit_2m) ? pool_pages{} : pool_pages{SIZE_MAX, node};
    return bytes < explicit_page_bytes(pages) ? pool_pages{} : pool_pages{explicit_page_bytes(pages), node};
}
inline pool_pages pool_pages_of(const on_node& p, std::size_t bytes) noexcept {
    return explicit_pool_pages(p.pages(), bytes, p.policy() == node_policy::bind ? p.node() : -1);
}
inline pool_pages pool_pages_of(const partitioned& p, std::size_t bytes) noexcept {
    const node_set& nodes = p.partition().nodes();
    return explicit_pool_pages(p.pages(), bytes, nodes.size() == 1 ? nodes[0] : -1);
}
template <class Placement>
pool_pages pool_pages_of(const Placement& p, std::size_t bytes) noexcept {
    if constexpr (has_pages<Placement>::value)
        if constexpr (std::is_same<std::decay_t<decltype(p.pages())>, numaplace::page_size>::value)
            return explicit_pool_pages(p.pages(), bytes, -1);
    (void)p;
    (void)bytes;
    return {};
}

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
// this thread's list) inlines into every allocator. `on_node` blocks above 1 MiB are the node heap's
// large blocks (kept mapped and bound for reuse); other blocks get a mapping of their own, kept for
// reuse by the same placement, size and alignment (placed_cache.hpp).
template <class Placement>
NUMAPLACE_NOINLINE void* routed_own_mapping(const Placement& placement, std::size_t bytes, std::size_t alignment) {
    if constexpr (std::is_same<Placement, on_node>::value) {
        if (!on_explicit_pages(placement) && large_cache::serves(bytes, alignment)) {
            const std::size_t heap = heap_index(placement.home_node(), heap_source_of(placement));
            if (thread_cache* tc = thread_cache::current()) tc->give_runs(heap); // they may serve it
            return heap_registry::instance().at(heap).take_large(bytes, alignment);
        }
    }
    placed_cache& cache = placed_cache::instance();
    if (void* p = cache.take(placement, bytes, alignment)) return p;
    void* p = memory::allocate(bytes, placement, alignment);
    cache.mapped(bytes);
    return p;
}
template <class Placement>
NUMAPLACE_NOINLINE void routed_unmap(const Placement& placement, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    if (!p) return;
    if constexpr (std::is_same<Placement, on_node>::value) {
        if (!on_explicit_pages(placement) && large_cache::serves(bytes, alignment)) {
            heap_registry::instance().at(heap_index(placement.home_node(), heap_source_of(placement))).give_large(p, bytes);
            return;
        }
    }
    if (placed_cache* cache = placed_cache::cell().peek()) return cache->give(placement, p, bytes, alignment, pool_pages_of(placement, bytes));
    memory::unmap(p, bytes);
}

/// \returns a block of heap slot `slot` for a request of `bytes`, from the heap's lists or new memory.
/// \throws placement_error naming `bytes` (the heap maps a span or a region at a time).
NUMAPLACE_NOINLINE inline void* routed_heap_allocate(std::size_t heap, std::size_t slot, std::size_t bytes) {
    try {
        return heap_allocate(heap, slot);
    } catch (const placement_error& e) {
        if (e.bytes() == bytes) throw;
        throw e.for_request(bytes);
    }
}

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

#endif
