#ifndef NUMAPLACE_DETAIL_HEAP_HEAP_INDEX_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_HEAP_INDEX_HPP_INCLUDED

/// \file
/// Which heap serves a node and a source (policy and fallback): the index the thread caches and the
/// registry are indexed by. Apart from node_heap.hpp so that the allocators' inlined fast path
/// (routing.hpp) names a heap without the heap's definition.

#include "../../error.hpp"
#include "../../memory.hpp"

#include <cstddef>

namespace numaplace {
namespace detail {

/// Which policy a heap's memory gets on its node, and what a refused binding does.
struct heap_source {
    bool prefer; ///< MPOL_PREFERRED to the node, else MPOL_BIND
    fallback fb; ///< strict: every span and region bound, or placement_error; degrade: else first touch, recorded

    memory::policy_mode mode() const noexcept { return prefer ? memory::policy_mode::preferred : memory::policy_mode::bind; }
    /// \returns this source's index among a node's heaps, in [0, heap_sources).
    constexpr std::size_t index() const noexcept { return (prefer ? 2u : 0u) + (fb == fallback::degrade ? 1u : 0u); }
    /// \returns the source of index `i` (< heap_sources).
    static constexpr heap_source at(std::size_t i) noexcept { return {i >= 2, i % 2 != 0 ? fallback::degrade : fallback::strict}; }
};
/// Heaps per node: bind-strict, bind-degrading, prefer-strict, prefer-degrading.
constexpr std::size_t heap_sources = 4;

/// \returns the index of the heap of `node` and `source` (see heap_registry::at).
inline std::size_t heap_index(int node, heap_source source) noexcept {
    return static_cast<std::size_t>(node) * heap_sources + source.index();
}

} // namespace detail
} // namespace numaplace

#endif
