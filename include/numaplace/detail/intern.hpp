#ifndef NUMAPLACE_DETAIL_INTERN_HPP_INCLUDED
#define NUMAPLACE_DETAIL_INTERN_HPP_INCLUDED

// Interned immutable state: the value types (placements, partitions, allocators) are trivially copyable
// handles to one of these. A registry per state type, keyed by content under a mutex, hands out one
// address per distinct content and never frees it: what it holds is the number of distinct layouts /
// node lists the program ever built (each a few dozen bytes), not the number of objects or allocations.
// Never freed means a handle stays valid during static destruction and in a moved-from object, and
// equal content gives equal addresses (== on handles is == on content).

#include "fork_guard.hpp"

#include <cstddef>
#include <iterator> // before <mutex>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <mutex>
#include <set>
#include <utility>

namespace numaplace {
namespace detail {

template <class State>
struct intern_registry {
    std::mutex mutex;
    std::set<State> states; // node-based: addresses stay put

    static intern_registry& instance() {
        // never destroyed (usable during static destruction); fork-safe (see fork_guard.hpp)
        static intern_registry* r = (fork_guard<intern_registry>::install(), new intern_registry);
        return *r;
    }
};

/// \returns the one interned copy of `state` (equal content, same address). \throws std::bad_alloc.
template <class State>
const State* intern(State state) {
    auto& r = intern_registry<State>::instance();
    std::lock_guard<std::mutex> lock(r.mutex);
    return &*r.states.insert(std::move(state)).first;
}

/// \returns how many distinct states of this type were interned (what the registry holds).
template <class State>
std::size_t interned_count() {
    auto& r = intern_registry<State>::instance();
    std::lock_guard<std::mutex> lock(r.mutex);
    return r.states.size();
}

} // namespace detail
} // namespace numaplace

#endif
