#ifndef NUMAPLACE_ARENA_MAP_HPP_INCLUDED
#define NUMAPLACE_ARENA_MAP_HPP_INCLUDED

/// \file
/// Arenas a user gives a loop: one `tbb::task_arena` per node, as oneTBB's `create_numa_task_arenas` or
/// the user's own constraints make them (an execution-space instance in Kokkos' words). A loop given an
/// `arena_map` runs block k in the arena of block k's node, and numaplace's own arenas are not made.

#include "error.hpp"
#include "topology.hpp"

#include <oneapi/tbb/task_arena.h>

#include <cstddef>
#include <string>
#include <vector>

namespace numaplace {

/// Which arena runs the blocks of each node. Holds pointers: each arena must outlive every loop given
/// the map. Pinning is the arenas' own (their constraints); numaplace adds no observer.
class arena_map {
public:
    /// An empty map: a loop given it throws invalid_placement.
    arena_map() = default;

    /// \effects the blocks of `node` run in `arena` from now on (replacing any arena given before).
    /// \returns *this. \throws unknown_node when `node` is not a node of `topo`.
    arena_map& set(int node, tbb::task_arena& arena, const topology& topo = topology::get()) {
        topo.check(node);
        if (arenas_.size() <= static_cast<std::size_t>(node)) arenas_.resize(static_cast<std::size_t>(node) + 1, nullptr);
        arenas_[static_cast<std::size_t>(node)] = &arena;
        return *this;
    }
    /// \returns whether an arena was given for `node`.
    bool contains(int node) const noexcept {
        return node >= 0 && static_cast<std::size_t>(node) < arenas_.size() && arenas_[static_cast<std::size_t>(node)];
    }
    /// \returns the arena given for `node`. \throws invalid_placement when none was given.
    tbb::task_arena* arena_for(int node) const {
        if (!contains(node))
            detail::throw_invalid("arena_map: no arena was given for node " + std::to_string(node) +
                                  ", which holds a block of the partition");
        return arenas_[static_cast<std::size_t>(node)];
    }
    /// \returns true: a loop given a map always runs each block in its node's arena, even on one node.
    bool spread() const noexcept { return true; }

private:
    std::vector<tbb::task_arena*> arenas_; // by node id; null: none given
};

} // namespace numaplace

#endif
