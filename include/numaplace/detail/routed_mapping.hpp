#ifndef NUMAPLACE_DETAIL_ROUTED_MAPPING_HPP_INCLUDED
#define NUMAPLACE_DETAIL_ROUTED_MAPPING_HPP_INCLUDED

/// \file
/// The slow paths of routing.hpp: an allocation no thread cache serves (a refill from the heap, an
/// `on_node` large block, a mapping of its own kept for reuse by placed_cache.hpp) and its release.
/// Included by routing.hpp in header-only mode; in the separately compiled mode libnumaplace compiles
/// them for the library's placements, and a translation unit with a placement of its own includes this.

#include "../memory.hpp"
#include "../placement.hpp"
#include "config.hpp"
#include "heap/large_cache.hpp"
#include "heap/node_heap.hpp"
#include "heap/registry.hpp"
#include "heap/thread_cache.hpp"
#include "placed_cache.hpp"
#include "routing.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace numaplace {
namespace detail {

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

// `on_node` blocks above 1 MiB are the node heap's large blocks (kept mapped and bound for reuse); other
// blocks get a mapping of their own, kept for reuse by the same placement, size and alignment
// (placed_cache.hpp).
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

#if NUMAPLACE_DEFINITIONS
NUMAPLACE_NOINLINE NUMAPLACE_DECL void* routed_heap_allocate(std::size_t heap, std::size_t slot, std::size_t bytes) {
    try {
        return heap_allocate(heap, slot);
    } catch (const placement_error& e) {
        if (e.bytes() == bytes) throw;
        throw e.for_request(bytes);
    }
}
#endif

} // namespace detail
} // namespace numaplace

#endif
