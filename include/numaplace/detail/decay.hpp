#ifndef NUMAPLACE_DETAIL_DECAY_HPP_INCLUDED
#define NUMAPLACE_DETAIL_DECAY_HPP_INCLUDED

/// \file
/// The one decay pass over everything numaplace keeps for reuse: every node heap (parked blocks, spares,
/// empty spans, free page runs, large blocks) and the cached own mappings of the other placements. Run by
/// the thread caches' tick (heap/thread_cache.hpp) and by background_release's thread. Design: docs/heap.md.

#include "heap/registry.hpp"
#include "placed_cache.hpp"

namespace numaplace {
namespace detail {

/// \effects the decay of every heap and of the cached own mappings, now. Never allocates.
inline void decay_everything_now() noexcept {
    heap_registry::decay_now();
    if (placed_cache* cache = placed_cache::cell().peek()) cache->decay_now();
}

} // namespace detail
} // namespace numaplace

#endif
