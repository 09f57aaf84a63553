#ifndef NUMAPLACE_DETAIL_HEAP_CACHE_OWNERSHIP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_CACHE_OWNERSHIP_HPP_INCLUDED

/// \file
/// Who may touch a thread's cache, and when: its own thread always, another thread (release_cached_memory)
/// only while the owner is outside every operation on it. The list of live caches, under one mutex
/// (fork stage `thread_caches`). Design and measurements: docs/heap.md ("Releasing other threads' caches").

#include "../config.hpp"
#include "../fork.hpp"
#include "../linux.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include <sched.h>

namespace numaplace {
namespace detail {

/// The ownership of one thread's cache lists (thread_cache holds one).
///
/// The owner marks every operation on its lists (`active_`: a plain store at its start and a release
/// store at its end, no fence, no read-modify-write) and reads the lists through `lists_`. A releasing
/// thread points every other cache's `lists_` at an array of null lists, then makes every thread of the
/// process execute a memory barrier (os_barrier_all_threads): from then on an owner that starts an
/// operation sees the null lists, and one that was inside an operation shows it in `active_`
/// (the owner's store-then-load needs the barrier the releaser asks the kernel for: an asymmetric
/// Dekker handshake, as in userspace RCU's membarrier flavour). A cache whose owner is outside every operation
/// is flushed by the releaser and given its lists back (a release store the owner's next read acquires).
/// An owner that finds the null lists takes the mutex (the releaser holds it throughout), so it waits for
/// the releaser, or flushes itself when the releaser left it a request (its owner stayed inside an
/// operation past `owner_wait_ms`, or the kernel refused the barrier): then every cached block goes back
/// at the owner's next operation, fast path included.
class cache_ownership {
public:
    /// `lists`: the owner's array of `count` per-heap list pointers (null: none yet), owned by the caller;
    /// `none`: `count` null pointers, owned by the caller; `flush(cache)`: gives every block of the
    /// cache `cache` back, never allocates.
    cache_ownership(void** lists, void** none, void (*flush)(void*) noexcept, void* cache) noexcept
        : own_(lists), none_(none), flush_(flush), cache_(cache) {
        lists_.store(lists, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mutex());
        next_ = head();
        if (next_) next_->prev_ = this;
        head() = this;
        ++live();
    }
    cache_ownership(const cache_ownership&) = delete;
    cache_ownership& operator=(const cache_ownership&) = delete;

    /// \effects leaves the list of live caches: no other thread looks at this cache from then on, and a
    /// flush a release asked for is the owner's (it flushes anyway before its lists go). Call once, from
    /// the owner.
    void retire() noexcept {
        std::lock_guard<std::mutex> lock(mutex());
        (prev_ ? prev_->next_ : head()) = next_;
        if (next_) next_->prev_ = prev_;
        prev_ = next_ = nullptr;
        --live();
        lists_.store(own_, std::memory_order_relaxed);
    }

    /// \returns the lists for an operation of the owner, marked as begun; the null lists while a release
    /// holds them (then end() the operation and take the slow path, which calls begin_slow). Fast path.
    NUMAPLACE_ALWAYS_INLINE void** begin() noexcept {
        active_.store(1, std::memory_order_relaxed);
        std::atomic_signal_fence(std::memory_order_seq_cst); // the store before the load (the barrier: releaser's)
        return lists_.load(std::memory_order_acquire);
    }
    /// \effects ends the owner's operation: the releaser may touch the lists from here on.
    NUMAPLACE_ALWAYS_INLINE void end() noexcept { active_.store(0, std::memory_order_release); }
    /// \returns the owner's own lists for an operation, marked as begun, after waiting for a release that
    /// holds them (or flushing them itself when the release asked it to). Never allocates.
    void** begin_slow() noexcept {
        for (;;) {
            void** lists = begin();
            if (lists == own_) return lists;
            end();
            comply();
        }
    }

    /// \effects gives back every block cached by the live caches but `self`'s (null: all), each while its
    /// owner is outside every operation on it; a cache whose owner stays inside one for `owner_wait_ms`,
    /// or all of them where the kernel refuses the barrier, gives its blocks back itself at its owner's
    /// next operation. \returns how many caches were left that request. Never allocates.
    static std::size_t release_others(const cache_ownership* self) noexcept {
        std::lock_guard<std::mutex> lock(mutex());
        std::size_t taken = 0, left = 0;
        for (cache_ownership* c = head(); c; c = c->next_) {
            c->taken_ = c != self && c->lists_.load(std::memory_order_relaxed) == c->own_; // else: asked already
            if (!c->taken_) continue;
            c->lists_.store(c->none_, std::memory_order_seq_cst);
            ++taken;
        }
        if (taken == 0) return 0;
        const bool fenced = os_barrier_all_threads();
        const std::int64_t deadline = os_now_ms() + owner_wait_ms;
        for (cache_ownership* c = head(); c; c = c->next_) {
            if (!c->taken_) continue;
            c->taken_ = false;
            if (!fenced || !c->wait_idle(deadline)) {
                ++left; // left pointing at the null lists: the owner's next operation flushes (comply)
                continue;
            }
            c->flush_(c->cache_);
            c->lists_.store(c->own_, std::memory_order_release);
        }
        return left;
    }

    /// \returns the number of live caches (registered, not yet retired).
    static std::size_t live_count() noexcept {
        std::lock_guard<std::mutex> lock(mutex());
        return live();
    }

    /// How long a release waits for an owner inside an operation (a few nanoseconds on the fast path,
    /// longer when preempted or inside a heap's lock) before leaving it the request.
    static constexpr std::int64_t owner_wait_ms = 100;

    // Fork hooks (stage thread_caches): no release runs during fork; the child's only cache is its thread's.
    static void fork_prepare() noexcept { mutex().lock(); }
    static void fork_parent() noexcept { mutex().unlock(); }
    /// `survivor`: the forking thread's cache (null: none); the others' threads do not exist in the child.
    static void fork_child(cache_ownership* survivor) noexcept {
        remake_unlocked(mutex());
        head() = survivor;
        live() = survivor ? 1 : 0;
        if (survivor) survivor->prev_ = survivor->next_ = nullptr;
    }

private:
    // Waits, yielding, until the owner is outside every operation (or `deadline`, os_now_ms).
    bool wait_idle(std::int64_t deadline) const noexcept {
        while (active_.load(std::memory_order_acquire) != 0) {
            if (os_now_ms() > deadline) return false;
            ::sched_yield();
        }
        return true;
    }
    // The owner found the null lists: waits for the release holding them; flushes itself when the
    // release left it the request.
    NUMAPLACE_NOINLINE void comply() noexcept {
        std::lock_guard<std::mutex> lock(mutex());
        if (lists_.load(std::memory_order_relaxed) == own_) return; // the release flushed it
        flush_(cache_);
        lists_.store(own_, std::memory_order_relaxed);
    }

    static std::mutex& mutex() noexcept {
        static std::mutex m; // constant-initialised: no guard
        return m;
    }
    static cache_ownership*& head() noexcept {
        static cache_ownership* h = nullptr;
        return h;
    }
    static std::size_t& live() noexcept {
        static std::size_t n = 0;
        return n;
    }

    std::atomic<unsigned> active_{0}; // the owner is inside an operation on its lists
    std::atomic<void**> lists_{nullptr};
    void** const own_;
    void** const none_;
    void (*const flush_)(void*) noexcept;
    void* const cache_;
    cache_ownership* prev_ = nullptr; // the list of live caches, under mutex()
    cache_ownership* next_ = nullptr;
    bool taken_ = false; // under mutex(): taken by the release running now
};

} // namespace detail
} // namespace numaplace

#endif
