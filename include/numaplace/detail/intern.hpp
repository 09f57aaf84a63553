#ifndef NUMAPLACE_DETAIL_INTERN_HPP_INCLUDED
#define NUMAPLACE_DETAIL_INTERN_HPP_INCLUDED

// Interned immutable state: the value types (placements, partitions, allocators) are trivially copyable
// handles to one of these. A registry per state type, keyed by content under a mutex, hands out one
// address per distinct content and never frees it: what it holds is the number of distinct layouts /
// node lists the program ever built (each a few dozen bytes), not the number of objects or allocations.
// Never freed means a handle stays valid during static destruction and in a moved-from object, and
// equal content gives equal addresses (== on handles is == on content).

#include "config.hpp"
#include "fork.hpp"

#include <cstddef>
#include <iterator> // before <mutex>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <mutex>
#include <set>
#include <utility>

namespace numaplace {
namespace detail {

// One lock for every state type's registry: constant-initialised, each registry made under it on first
// use (no C++ initialisation guard on the way; fork hook below, stage intern).
struct intern_lock {
    std::mutex mutex;
    static intern_lock& instance() noexcept {
        static intern_lock lock; // constant initialisation (std::mutex's constructor is constexpr): no guard
        return lock;
    }
};
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration intern_fork NUMAPLACE_EARLY_INIT{
    fork_stage::intern,
    fork_hook{[]() noexcept { intern_lock::instance().mutex.lock(); },
              []() noexcept { intern_lock::instance().mutex.unlock(); },
              []() noexcept { remake_unlocked(intern_lock::instance().mutex); }}};
#endif

template <class State>
struct intern_registry {
    std::set<State> states; // node-based: addresses stay put

    /// \requires intern_lock held. \returns the registry (made on first use, never destroyed: usable
    /// during static destruction).
    static intern_registry& locked_instance() {
        static intern_registry* r = nullptr; // constant initialisation; set under intern_lock
        if (!r) r = new intern_registry;
        return *r;
    }
};

/// \returns the one interned copy of `state` (equal content, same address). \throws std::bad_alloc.
template <class State>
const State* intern(State state) {
    std::lock_guard<std::mutex> lock(intern_lock::instance().mutex);
    return &*intern_registry<State>::locked_instance().states.insert(std::move(state)).first;
}

/// \returns how many distinct states of this type were interned (what the registry holds).
template <class State>
std::size_t interned_count() {
    std::lock_guard<std::mutex> lock(intern_lock::instance().mutex);
    return intern_registry<State>::locked_instance().states.size();
}

} // namespace detail
} // namespace numaplace

#endif
