#ifndef NUMAPLACE_DETAIL_PLACED_CACHE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_PLACED_CACHE_HPP_INCLUDED

/// \file
/// Freed own mappings of allocators (the blocks no node heap serves: interleaved, weighted and
/// partitioned blocks of a page or more, over-aligned blocks), kept mapped and placed for reuse by an
/// allocation of the same placement, size and alignment: their pages are where that placement put
/// them, so a block is reused only for the very same layout. Given back when unused for
/// `large_decay_ms`, oldest first beyond the larger of `placed_cache_floor` and the bytes of own
/// mappings in use, and by release_cached_memory(); blocks on explicit huge pages also when a request
/// finds their pools short (`relieve_pools`). Design: docs/heap.md, docs/huge-pages.md.

#include "config.hpp"
#include "fork.hpp"
#include "heap/large_cache.hpp"
#include "hugetlb.hpp"
#include "linux.hpp"
#include "moved_ranges.hpp"
#include "../memory.hpp"
#include "../topology.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

namespace numaplace {
namespace detail {

/// Cached own mappings kept at least up to this many bytes whatever is in use.
constexpr std::size_t placed_cache_floor = std::size_t(64) << 20;

// Optional members of a placement: `reusable(p)` (may a freed block be reused as it is), `reused(p,
// bytes)` (record a block handed out again). partitioned has both (its record for replace).
template <class P, class = void>
struct has_reuse_hooks : std::false_type {};
template <class P>
struct has_reuse_hooks<P, decltype(std::declval<const P&>().reusable(nullptr),
                                   std::declval<const P&>().reused(nullptr, std::size_t(0)), void())> : std::true_type {};
template <class P, class = void>
struct has_pages : std::false_type {};
template <class P>
struct has_pages<P, decltype(std::declval<const P&>().pages(), void())> : std::true_type {};

// Optional member of a placement: `pages()`, its page size; blocks on explicit huge pages (any value but
// the first, `page_size::transparent`) are not inherited by a forked child (MADV_DONTFORK, place.hpp), so a
// child never hands out or unmaps its parent's cached ones.
template <class P>
int explicit_owner(const P& p) noexcept {
    if constexpr (has_pages<P>::value) return p.pages() != decltype(p.pages()){} ? os_process_id() : 0;
    (void)p;
    return 0;
}

/// Which explicit huge pages a cached block may hold: none (`page` 0: small pages), pages of `page` bytes
/// (SIZE_MAX: of any explicit size, `largest_explicit`) from the pool of `node` (-1: any node's).
struct pool_pages {
    std::size_t page = 0;
    int node = -1;
};

/// The process's cache of freed own mappings, under one mutex: a fixed table (nothing is allocated).
class placed_cache {
public:
    static constexpr std::size_t slots = 64;
    static constexpr std::size_t key_bytes = 64;

    /// \returns the process's cache, made on first use. Never destroyed.
    static placed_cache& instance() {
        return cell().get([] { return new placed_cache(); });
    }
    static lazy_global<placed_cache>& cell() noexcept {
        static lazy_global<placed_cache> c; // constant-initialised: no guard
        return c;
    }
    std::mutex& mutex() noexcept { return mutex_; }

    /// \returns a cached block mapped for `bytes` at `alignment` and placed by `placement` (equal
    /// placements: the same layout), or nullptr (then the caller maps one and calls `mapped`). Counts it
    /// in use. \throws what `placement.reused` throws (std::bad_alloc), the block unmapped.
    template <class P>
    void* take(const P& placement, std::size_t bytes, std::size_t alignment) {
        static_assert(std::is_trivially_copyable<P>::value && sizeof(P) <= key_bytes && alignof(P) <= alignof(std::max_align_t),
                      "placements are small trivially copyable handles");
        void* victims[slots];
        std::size_t n = 0, victim_bytes[slots];
        void* found = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            decay(os_now_ms(), victims, victim_bytes, n);
            for (entry& e : table_)
                if (e.p && inherited(e)) forget(e);
                else if (e.p && e.tag == &tag<P>::id && e.bytes == bytes && e.alignment == alignment &&
                    *std::launder(reinterpret_cast<const P*>(e.key)) == placement) {
                    found = e.p;
                    cached_ -= memory::page_round(e.bytes);
                    in_use_ += bytes;
                    e.p = nullptr;
                    break;
                }
        }
        for (std::size_t k = 0; k < n; ++k) memory::unmap(victims[k], victim_bytes[k]);
        if constexpr (has_reuse_hooks<P>::value) {
            if (found) try {
                    placement.reused(found, bytes);
                } catch (...) {
                    gone(bytes);
                    memory::unmap(found, bytes);
                    throw;
                }
        }
        return found;
    }
    /// \effects counts in use a block mapped for `bytes` that `take` did not serve (a new mapping).
    void mapped(std::size_t bytes) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_ += bytes;
    }
    /// \effects counts out of use a block of `bytes` unmapped without `give`.
    void gone(std::size_t bytes) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        in_use_ = in_use_ > bytes ? in_use_ - bytes : 0;
    }
    /// \effects takes back a block of `bytes` at `alignment` placed by `placement`, holding `pool` (its
    /// explicit pages, given back by `relieve_pools` when a request finds their pools short): kept for
    /// reuse (no longer a placed buffer for replace: see buffer_record.hpp), or unmapped beyond the bound
    /// (the oldest first) or when the placement says it cannot be reused. Never allocates.
    template <class P>
    void give(const P& placement, void* p, std::size_t bytes, std::size_t alignment, pool_pages pool = {}) noexcept {
        if constexpr (has_reuse_hooks<P>::value) {
            if (!placement.reusable(p)) {
                gone(bytes);
                return memory::unmap(p, bytes);
            }
        }
        if (moved_since_handed_out(p, memory::page_round(bytes == 0 ? 1 : bytes))) { // replace() moved it
            gone(bytes);
            return memory::unmap(p, bytes);
        }
        if (const auto observer = unmap_observer.load(std::memory_order_acquire)) // freed, as for unmap
            observer(p, memory::page_round(bytes == 0 ? 1 : bytes));
        void* victims[slots + 1];
        std::size_t n = 0, victim_bytes[slots + 1];
        {
            std::lock_guard<std::mutex> lock(mutex_);
            in_use_ = in_use_ > bytes ? in_use_ - bytes : 0;
            const std::int64_t now = os_now_ms();
            decay(now, victims, victim_bytes, n);
            const std::size_t length = memory::page_round(bytes);
            const std::size_t limit = in_use_ > placed_cache_floor ? in_use_ : placed_cache_floor;
            entry* slot = nullptr;
            if (length <= limit) {
                for (entry& e : table_)
                    if (!e.p) {
                        slot = &e;
                        break;
                    }
                if (!slot) slot = oldest_evicted(victims, victim_bytes, n);
                while (cached_ + length > limit) {
                    entry* old = oldest();
                    if (!old) break;
                    evict(*old, victims, victim_bytes, n);
                }
            }
            if (slot) {
                slot->p = p;
                slot->bytes = bytes;
                slot->alignment = alignment;
                slot->freed_at = now;
                slot->tag = &tag<P>::id;
                slot->owner = explicit_owner(placement);
                slot->pool = pool;
                ::new (static_cast<void*>(slot->key)) P(placement);
                cached_ += length;
                p = nullptr;
            }
        }
        for (std::size_t k = 0; k < n; ++k) memory::unmap(victims[k], victim_bytes[k]);
        if (p) memory::unmap(p, bytes);
    }
    /// \effects unmaps the blocks unused for large_decay_ms. Never allocates.
    void decay_now() noexcept {
        void* victims[slots];
        std::size_t n = 0, victim_bytes[slots];
        {
            std::lock_guard<std::mutex> lock(mutex_);
            decay(os_now_ms(), victims, victim_bytes, n);
        }
        for (std::size_t k = 0; k < n; ++k) memory::unmap(victims[k], victim_bytes[k]);
    }
    /// \effects unmaps every cached block; with `wait` false only if the cache's lock is free now.
    /// \returns whether any block was unmapped. Never allocates.
    bool release_all(bool wait = true) noexcept {
        void* victims[slots];
        std::size_t n = 0, victim_bytes[slots];
        {
            std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
            if (wait) lock.lock();
            else if (!lock.try_lock()) return false;
            for (entry& e : table_)
                if (e.p) evict(e, victims, victim_bytes, n);
        }
        for (std::size_t k = 0; k < n; ++k) memory::unmap(victims[k], victim_bytes[k]);
        return n != 0;
    }
    /// \effects release_all without waiting: the address-space relief of memory::try_map (nothing is
    /// ever mapped under the cache's lock). \returns whether a block was unmapped.
    static bool relieve_address_space() noexcept {
        placed_cache* c = cell().peek();
        return c && c->release_all(false);
    }
    /// \effects unmaps the cached blocks that may hold explicit pages of `page` bytes from the pools of
    /// `nodes` (of any node with `any_node`), so that a request counts them free (place.hpp's
    /// pool_shortage). \returns whether a block was unmapped. Never allocates; waits for the cache's lock,
    /// which nobody holds while mapping (nor while admitting: the caller holds no lock). The blocks are
    /// unmapped after the lock, as every eviction here: a request racing another thread's give-back (or a
    /// decay) may read the pools before those pages are back, and is refused as if they were in use.
    bool release_pool_pages(std::size_t page, const node_set& nodes, bool any_node) noexcept {
        void* victims[slots];
        std::size_t n = 0, victim_bytes[slots];
        {
            std::lock_guard<std::mutex> lock(mutex_);
            for (entry& e : table_)
                if (e.p && e.pool.page != 0 && (e.pool.page == page || e.pool.page == SIZE_MAX) &&
                    (any_node || e.pool.node < 0 || nodes.contains(e.pool.node)))
                    evict(e, victims, victim_bytes, n); // a forked child's inherited entry is only forgotten
        }
        for (std::size_t k = 0; k < n; ++k) memory::unmap(victims[k], victim_bytes[k]);
        return n != 0;
    }
    /// \effects release_pool_pages on the process's cache, if made: the pool relief of memory.hpp.
    /// \returns whether a block was unmapped.
    static bool relieve_pools(std::size_t page, const node_set& nodes, bool any_node) noexcept {
        placed_cache* c = cell().peek();
        return c && c->release_pool_pages(page, nodes, any_node);
    }
    /// \returns the bytes cached now.
    std::size_t cached_bytes() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return cached_;
    }

private:
    template <class P>
    struct tag {
        static constexpr char id = 0; // its address names the placement type
    };
    struct entry {
        void* p = nullptr; // null: a free slot
        std::size_t bytes = 0, alignment = 0;
        std::int64_t freed_at = 0;
        const char* tag = nullptr;
        int owner = 0; // explicit huge pages: the process that mapped them (0: any)
        pool_pages pool; // the explicit pages it holds
        alignas(std::max_align_t) unsigned char key[key_bytes] = {};
    };

    placed_cache() noexcept {
        address_space_reliefs[relief_placed_cache].store(&placed_cache::relieve_address_space, std::memory_order_release);
        pool_relief.store(&placed_cache::relieve_pools, std::memory_order_release);
    }

    entry* oldest() noexcept {
        entry* o = nullptr;
        for (entry& e : table_)
            if (e.p && (!o || e.freed_at < o->freed_at)) o = &e;
        return o;
    }
    // A block on explicit pages cached by the parent of this forked child: not mapped here.
    static bool inherited(const entry& e) noexcept { return e.owner != 0 && e.owner != os_process_id(); }
    void forget(entry& e) noexcept {
        cached_ -= memory::page_round(e.bytes);
        e.p = nullptr;
    }
    void evict(entry& e, void** victims, std::size_t* victim_bytes, std::size_t& n) noexcept {
        if (inherited(e)) return forget(e); // its address may be another mapping's in this child
        victims[n] = e.p;
        victim_bytes[n++] = e.bytes;
        cached_ -= memory::page_round(e.bytes);
        e.p = nullptr;
    }
    entry* oldest_evicted(void** victims, std::size_t* victim_bytes, std::size_t& n) noexcept {
        entry* o = oldest();
        if (o) evict(*o, victims, victim_bytes, n);
        return o;
    }
    // Blocks unused for large_decay_ms are handed to the caller to unmap (outside the lock).
    void decay(std::int64_t now, void** victims, std::size_t* victim_bytes, std::size_t& n) noexcept {
        if (cached_ == 0) return;
        for (entry& e : table_)
            if (e.p && now - e.freed_at >= large_decay_ms) evict(e, victims, victim_bytes, n);
    }

    std::mutex mutex_; // guards everything below
    entry table_[slots];
    std::size_t cached_ = 0; // page-rounded bytes of cached blocks
    std::size_t in_use_ = 0; // bytes of own mappings handed out
};

inline std::mutex& placed_cache_lock(placed_cache& c) noexcept { return c.mutex(); }
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration placed_cache_fork_hook NUMAPLACE_EARLY_INIT{
    fork_stage::placed_cache,
    locked_global_hooks<placed_cache, &placed_cache::cell, std::mutex, &placed_cache_lock>::hook()};
#endif

} // namespace detail
} // namespace numaplace

#endif
