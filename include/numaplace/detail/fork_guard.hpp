#ifndef NUMAPLACE_DETAIL_FORK_GUARD_HPP_INCLUDED
#define NUMAPLACE_DETAIL_FORK_GUARD_HPP_INCLUDED

// Fork safety of the process-wide state (interned states, the placed-buffer record, the capacity
// accounting, the degradation log; the heap closes its own gates in detail/heap.hpp). fork() copies only
// the calling thread: a mutex another thread held at that moment stays locked in the child forever, and a
// C++ initialisation guard another thread held (a function-local static half made) is never released
// there either. `fork_guard<Owner>` registers pthread_atfork handlers: prepare calls `Owner::fork_mutex()`,
// which first completes whatever the owner needs made (the topology, the owner itself: waiting for a
// thread that is making it, before any lock is held) and returns the mutex, then locks it (so no thread is
// half-way through a change when the address space is copied); the parent unlocks it; the child, whose only
// thread is the forking one, gives the owner a fresh unlocked mutex (a write-locked pthread rwlock cannot
// be unlocked by the child's thread, whose id differs).
// Handlers are registered at static initialisation (an inline variable per owner, in the owner's
// header), never from inside a lazily made object: glibc runs the prepare handlers under its atfork lock,
// which a pthread_atfork call from another thread's initialiser would wait for. Prepare handlers run in the
// reverse order of registration, that is, of header inclusion: the heap's gates (detail/heap.hpp), then the
// placed-buffer record and the interning lock, then the capacity accounting (memory.hpp), then the
// degradation log (topology.hpp), which any of the others may write to while holding its own lock.
// Objects made on first use that no lock guards are completed by prepare handlers of their own: the node
// pools (pmr.hpp), the empty partition layout (partition.hpp); the page sizes (linux.hpp) and the interning
// registries (intern.hpp) are made without a C++ guard. test_attack_fork forks while another thread makes
// all of them (ForkWhileAnotherThreadMakesTheGlobalsForTheFirstTime).

#include <new>
#include <type_traits>
#include <pthread.h>

namespace numaplace {
namespace detail {

template <class Owner>
struct fork_guard {
    /// \effects registers the handlers (call once, at static initialisation).
    static void install() noexcept { ::pthread_atfork(&prepare, &parent, &child); }

private:
    static void prepare() noexcept { Owner::fork_mutex().lock(); }
    static void parent() noexcept { Owner::fork_mutex().unlock(); }
    static void child() noexcept {
        auto& m = Owner::fork_mutex();
        using mutex_type = std::remove_reference_t<decltype(m)>;
        // Unlock first (glibc's unlock does not check the owner's thread id): the lock is then released in
        // every observer's view (ThreadSanitizer's too, which would otherwise see the child holding it
        // forever and report a false lock-order inversion), and the mutex is made anew besides, as the
        // heap does with its fork gates.
        m.unlock();
        m.~mutex_type();
        ::new (static_cast<void*>(&m)) mutex_type();
    }
};

} // namespace detail
} // namespace numaplace

#endif
