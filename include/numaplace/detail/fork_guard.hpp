#ifndef NUMAPLACE_DETAIL_FORK_GUARD_HPP_INCLUDED
#define NUMAPLACE_DETAIL_FORK_GUARD_HPP_INCLUDED

// Fork safety of the process-wide registries (interned states, the placed-buffer record; the degradation
// log and the heap are guarded by detail/heap.hpp). fork() copies only the calling thread: a mutex
// another thread held at that moment stays locked in the child forever, and the child's next placement or partition would deadlock. `fork_guard<Owner>`
// registers pthread_atfork handlers once per owner: prepare locks the owner's mutex (so no thread is
// half-way through a change when the address space is copied), the parent unlocks it, and the child,
// whose only thread is the forking one, gives the owner a fresh unlocked mutex (a write-locked
// pthread rwlock cannot be unlocked by the child's thread, whose id differs). The owner provides
// `static Owner& instance()` and a member `mutex` of a default-constructible mutex type.

#include <new>
#include <pthread.h>

namespace numaplace {
namespace detail {

template <class Owner>
struct fork_guard {
    /// \effects registers the handlers (call once). Interning registries never enter the heap while they
    /// hold their lock, and heap code never interns, so their order relative to the heap's does not matter.
    static void install() noexcept { ::pthread_atfork(&prepare, &parent, &child); }

private:
    static void prepare() noexcept { Owner::instance().mutex.lock(); }
    static void parent() noexcept { Owner::instance().mutex.unlock(); }
    static void child() noexcept {
        using mutex_type = decltype(Owner::instance().mutex);
        auto& m = Owner::instance().mutex;
        m.~mutex_type();
        ::new (static_cast<void*>(&m)) mutex_type();
    }
};

} // namespace detail
} // namespace numaplace

#endif
