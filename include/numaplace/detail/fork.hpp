#ifndef NUMAPLACE_DETAIL_FORK_HPP_INCLUDED
#define NUMAPLACE_DETAIL_FORK_HPP_INCLUDED

/// \file
/// Fork safety, in one place: one registration of fork handlers with the C library, one ordered table of hooks, and
/// `lazy_global<T>`, the way every process-wide object is made on first use.
///
/// fork() copies only the calling thread: a lock another thread held at that moment stays locked in the
/// child forever, and so would a C++ initialisation guard of a function-local static that another thread
/// was making. So no process-wide object of numaplace is a guarded static: each lives in a
/// constant-initialised `lazy_global`, made under its own mutex, and the prepare handler takes that mutex
/// (waiting for a thread that is making the object; nothing is made on behalf of a fork), then the
/// object's own locks. The child, whose only thread is the forking one, re-makes every lock unlocked.
///
/// Lock order: the hooks' `prepare` run in `fork_stage` order, `parent` and `child` in reverse. A thread
/// may take a stage's lock while holding an earlier stage's, never the reverse (making the heaps makes
/// the topology; a heap inside its gate admits memory and records degradations). Each owner registers
/// its hook for its own stage at static initialisation (`fork_hook_registration`), beside its code, so a
/// header-only program that includes only some headers gets exactly their hooks, in this order whatever
/// the order of inclusion; separately compiled, libnumaplace registers every hook once (its one object
/// is linked as soon as the program calls anything it defines: any allocation, the topology).

#include "config.hpp"

#include <atomic>
#include <iterator> // before <mutex>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <mutex>
#include <new>
#include <type_traits>

#include <pthread.h>

namespace numaplace {
namespace detail {

/// The stages of the lock order (see the file comment). Prepare takes them top to bottom.
enum class fork_stage : unsigned {
    arenas,          ///< arenas.hpp: no lock (the child's arenas made before the fork are not its own)
    background_release, ///< detail/background_release.hpp: no lock (the child has no background thread)
    observation,     ///< observe.hpp: making the capability probe (child: scopes started before the fork are the parent's)
    thread_caches,   ///< detail/heap/thread_cache_impl.hpp: the list of live caches (its mutex: no release flushes them; the child has one)
    node_pools,      ///< pmr.hpp: making the node pools (makes the topology, the heaps)
    heap_registry,   ///< detail/heap/registry.hpp: making the heaps
    heaps,           ///< every heap's fork gate (no thread inside a heap during fork)
    placed_cache,    ///< detail/placed_cache.hpp: the cache of freed own mappings (made, then its lock)
    placed_record,   ///< detail/buffer_record.hpp: the record of partitioned buffers (made, then its lock)
    moved_ranges,    ///< detail/moved_ranges.hpp: the ranges replace moved outside the heap's runs (made, then its lock)
    empty_layout,    ///< partition.hpp: the shared empty layout (made under the interning lock)
    intern,          ///< detail/intern.hpp: the interning lock
    capacity,        ///< admission.hpp: the capacity accounting (made, then its lock)
    topology,        ///< detail/topology_impl.hpp: loading the process's topology
    degradation_log, ///< diagnostics.hpp: the degradation log (made, then its lock)
    count
};

/// What one stage does around fork(). Each pointer may be null.
struct fork_hook {
    void (*prepare)() noexcept;
    void (*parent)() noexcept;
    void (*child)() noexcept;
};

/// The table of hooks, one per stage (constant-initialised: usable before any static constructor).
inline fork_hook fork_hooks[static_cast<unsigned>(fork_stage::count)] = {};

struct fork_handlers {
    static void prepare() noexcept {
        for (unsigned s = 0; s < static_cast<unsigned>(fork_stage::count); ++s)
            if (fork_hooks[s].prepare) fork_hooks[s].prepare();
    }
    static void parent() noexcept {
        for (unsigned s = static_cast<unsigned>(fork_stage::count); s-- > 0;)
            if (fork_hooks[s].parent) fork_hooks[s].parent();
    }
    static void child() noexcept {
        for (unsigned s = static_cast<unsigned>(fork_stage::count); s-- > 0;)
            if (fork_hooks[s].child) fork_hooks[s].child();
    }
    fork_handlers() noexcept { ::pthread_atfork(&prepare, &parent, &child); }
};
/// The one registration of numaplace's fork handlers with the C library (static initialisation of any TU
/// including this; separately compiled, of libnumaplace, before the program's own).
#if NUMAPLACE_DEFINITIONS
inline const fork_handlers fork_handlers_registered NUMAPLACE_EARLY_INIT{};
#endif

/// Registers `hook` for `stage` at static initialisation: `inline const fork_hook_registration x
/// NUMAPLACE_EARLY_INIT{...};` inside `#if NUMAPLACE_DEFINITIONS` (compiled once, in libnumaplace, when
/// separately compiled).
struct fork_hook_registration {
    fork_hook_registration(fork_stage stage, fork_hook hook) noexcept {
        fork_hooks[static_cast<unsigned>(stage)] = hook;
    }
};

/// \effects after fork, in the child: releases `m` (held by the forking thread through prepare) and makes
/// it anew. Unlocking first (glibc does not check the owner) releases it in every observer's view,
/// ThreadSanitizer's included, which would otherwise see the child hold it forever.
template <class Mutex>
void remake_unlocked(Mutex& m) noexcept {
    m.unlock();
    m.~Mutex();
    ::new (static_cast<void*>(&m)) Mutex();
}

/// A process-wide object made on first use and never destroyed (usable during static destruction),
/// without a C++ initialisation guard: constant-initialised, made under its own mutex, which the fork
/// handlers take (see the file comment). Declare it `static` inside a function or `inline` at namespace
/// scope.
template <class T>
class lazy_global {
public:
    constexpr lazy_global() noexcept = default;
    lazy_global(const lazy_global&) = delete;
    lazy_global& operator=(const lazy_global&) = delete;

    /// \returns the object, made by `make()` (a `T*` from new) by the first caller; a `make` that throws
    /// leaves it unmade (the next call tries again). \throws what `make` throws.
    template <class Make>
    T& get(Make&& make) {
        if (T* p = ptr_.load(std::memory_order_acquire)) return *p;
        std::lock_guard<std::mutex> lock(mutex_);
        T* p = ptr_.load(std::memory_order_relaxed);
        if (!p) {
            p = make();
            ptr_.store(p, std::memory_order_release);
        }
        return *p;
    }
    /// \returns the object if it was made, else null. Never makes it.
    T* peek() const noexcept { return ptr_.load(std::memory_order_acquire); }

    /// Fork hooks: hold the making lock across fork (stable `peek()` in between).
    void fork_prepare() noexcept { mutex_.lock(); }
    void fork_parent() noexcept { mutex_.unlock(); }
    void fork_child() noexcept { remake_unlocked(mutex_); }

private:
    std::atomic<T*> ptr_{nullptr};
    std::mutex mutex_;
};

/// The fork hooks of a `lazy_global` (`Cell()` returns it): hold its making lock across fork.
template <class T, lazy_global<T>& (*Cell)() noexcept>
struct lazy_global_hooks {
    static void prepare() noexcept { Cell().fork_prepare(); }
    static void parent() noexcept { Cell().fork_parent(); }
    static void child() noexcept { Cell().fork_child(); }
    static constexpr fork_hook hook() noexcept { return fork_hook{&prepare, &parent, &child}; }
};

/// The fork hooks of a `lazy_global` whose object guards its state with a lock (`LockOf(object)`): hold
/// the making lock, then, if the object was made, its lock; the child re-makes both unlocked.
template <class T, lazy_global<T>& (*Cell)() noexcept, class Lock, Lock& (*LockOf)(T&) noexcept>
struct locked_global_hooks {
    static void prepare() noexcept {
        Cell().fork_prepare();
        if (T* p = Cell().peek()) LockOf(*p).lock();
    }
    static void parent() noexcept {
        if (T* p = Cell().peek()) LockOf(*p).unlock();
        Cell().fork_parent();
    }
    static void child() noexcept {
        if (T* p = Cell().peek()) remake_unlocked(LockOf(*p));
        Cell().fork_child();
    }
    static constexpr fork_hook hook() noexcept { return fork_hook{&prepare, &parent, &child}; }
};

} // namespace detail
} // namespace numaplace

#endif
