#ifndef NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_HPP_INCLUDED

/// \file
/// Each thread's cache of heap blocks (bounded per slot, 1..4 MiB in all by the number of threads, 1 MiB
/// of page runs, given back at a large request), and the out-of-line allocate and deallocate that go
/// through it to the heaps; other threads flush it only as cache_ownership allows. Design: docs/heap.md.
/// The fast paths (try_pop, try_push, and the page runs' try_push_run and counted) are defined here,
/// inlined into the allocators; the rest in
/// thread_cache_impl.hpp (compiled into libnumaplace in the separately compiled mode).

#include "../config.hpp"
#include "cache_ownership.hpp"
#include "cache_slots.hpp"
#include "run_marks.hpp"
#include "size_classes.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

/// One thread's cached blocks, per heap and slot, in arrays (cache_slots.hpp; a heap's are made on its
/// first use).
class thread_cache {
public:
    NUMAPLACE_DECL ~thread_cache();

    /// \returns a block of slot `slot` of heap `heap`, refilling its list from the heap if empty.
    /// \throws placement_error, std::bad_alloc (the lists).
    NUMAPLACE_DECL void* allocate(std::size_t heap, std::size_t slot);
    /// \returns a block from this thread's list of `slot` of heap `heap`, or nullptr (fast path, inlined
    /// into the allocators).
    NUMAPLACE_ALWAYS_INLINE void* try_pop(std::size_t heap, std::size_t slot) noexcept {
        if (NUMAPLACE_UNLIKELY(--ticks_ == 0)) return nullptr; // allocate() runs the decay's tick
        auto* ls = static_cast<cache_slot*>(owner_.begin()[heap]); // null too while a release holds the lists
        if (NUMAPLACE_UNLIKELY(ls == nullptr)) return end(nullptr);
        cache_slot& l = ls[slot];
        if (NUMAPLACE_UNLIKELY(l.count == 0)) return end(nullptr);
        void* b = l.blocks[--l.count];
        if (NUMAPLACE_LIKELY(slot < heap_class_count)) bytes_ -= heap_table.info[slot].size;
        else counted(heap, slot, heap_slot_info_of(slot).size, false);
        return end(b);
    }
    /// \returns true if `p` went on this thread's list without going over a bound (fast path, inlined).
    NUMAPLACE_ALWAYS_INLINE bool try_push(std::size_t heap, std::size_t slot, void* p) noexcept {
        auto* ls = static_cast<cache_slot*>(owner_.begin()[heap]); // null too while a release holds the lists
        if (NUMAPLACE_UNLIKELY(ls == nullptr)) return end(false);
        if (NUMAPLACE_UNLIKELY(slot >= heap_class_count)) return end(try_push_run(ls, heap, slot, p));
        cache_slot& l = ls[slot];
        const heap_class_info& info = heap_table.info[slot];
        if (NUMAPLACE_UNLIKELY(l.count >= (info.cache_max >> l.shrink) || bytes_ + info.size > budget_)) return end(false);
        l.blocks[l.count++] = p; // the block itself is not touched
        bytes_ += info.size;
        return end(true);
    }
    /// try_push of a run, out of line so that the inlined span path stays small (defined here in both modes:
    /// separately compiled, a call into libnumaplace cost the run cycle 5-15%).
    /// \returns false over a bound (the run budget included): deallocate then evicts other runs.
    NUMAPLACE_NOINLINE bool try_push_run(cache_slot* ls, std::size_t heap, std::size_t slot, void* p) noexcept {
        cache_slot& l = ls[slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        if (l.count >= info.cache_max || bytes_ + info.size > budget_ || run_bytes_ + info.size > run_budget) return false;
        if (run_marks.may_hold(p)) return false; // replace() moved it: the heap re-places it
        l.blocks[l.count++] = p;
        counted(heap, slot, info.size, true);
        return true;
    }
    /// \effects caches `p`, then gives blocks back while over a bound. Never allocates.
    /// \returns false if this thread has no list for the heap, or for a run replace() marked (the caller
    /// frees centrally: see run_marks.hpp).
    NUMAPLACE_DECL bool deallocate(std::size_t heap, std::size_t slot, void* p) noexcept;

    /// \effects gives back every run this thread caches of heap `heap`. A large request calls it first:
    /// runs of sizes not asked for again would otherwise stay resident beside the fresh pages of the
    /// large block; back in the heap they coalesce and may serve it (docs/heap.md). Never allocates.
    NUMAPLACE_DECL void give_runs(std::size_t heap) noexcept;

    /// \returns the shard this thread takes span blocks from (see node_heap).
    std::size_t shard() const noexcept { return shard_; }

    /// \returns the bytes this thread caches now (after a release took them: 0), and the most it may cache
    /// (its budget at its last refill). From the owner thread.
    NUMAPLACE_DECL std::size_t cached_bytes() noexcept;
    std::size_t budget() const noexcept { return budget_; }

    /// \effects in a forked child, counts this thread's cache as the only live one (of its shard).
    NUMAPLACE_DECL static void forked_child() noexcept;

    enum { none = 0, alive = 1, dead = 2 };
    // Trivially destructible thread-locals (no init guard, readable after the cache is gone).
    static int& state() noexcept {
        static thread_local int s = none;
        return s;
    }
    /// \returns this thread's cache if it exists, else nullptr. Never makes it.
    static thread_cache*& current() noexcept {
        static thread_local thread_cache* c = nullptr;
        return c;
    }
    /// \returns this thread's cache (made on first use), or nullptr once it was destroyed.
    /// \throws what making the registry throws, std::bad_alloc.
    NUMAPLACE_DECL static thread_cache* get();
    /// \effects gives every block this thread caches back to its heap. From the owner thread.
    NUMAPLACE_DECL void flush_all() noexcept;
    /// \effects this thread's cache, then every other live thread's, give every cached block back to its
    /// heap (cache_ownership::release_others). \returns how many caches were left the request to flush
    /// at their owner's next operation (owners inside an operation past the wait, or no barrier).
    NUMAPLACE_DECL static std::size_t flush_every_thread() noexcept;
    /// \returns the number of live thread caches (made, their thread not ended).
    NUMAPLACE_DECL static std::size_t live() noexcept;
    /// \returns the thread caches counted by the shard choice (made, not yet destroyed; no lock).
    NUMAPLACE_DECL static std::size_t counted_caches() noexcept;

private:
    // Bytes a thread caches: all_budget shared by the threads that have a cache, at least min_budget and
    // at most max_budget each (many more threads than cores, each with 4 MiB, raised the peak 1.7x
    // glibc's: docs/heap.md). Read again at every refill from the heap.
    static constexpr std::size_t max_budget = std::size_t(4) << 20, min_budget = std::size_t(1) << 20;
    static constexpr std::size_t all_budget = std::size_t(16) << 20;
    NUMAPLACE_DECL static std::atomic<std::size_t>& caches() noexcept;
    NUMAPLACE_DECL static std::size_t budget_now() noexcept;
    // Blocks a refill asks for: a batch, half of it while `in_force` shards are in force and more than one
    // (a thread per shard refills every class it uses on its own; with 8 producer threads on 2 CPUs the
    // full batches kept 1.5-2 MiB more at the peak: docs/heap.md, "Empty spans shared by the shards").
    static std::size_t refill_count(std::size_t batch, std::size_t in_force) noexcept {
        return in_force > 1 && batch >= 2 ? batch / 2 : batch;
    }
    // Of which page runs at most 1 MiB, the largest run, so that a block of any size cycles through the
    // cache (see docs/heap.md).
    static constexpr std::size_t run_budget = heap_max_block;
    static constexpr std::size_t run_words = (heap_slots - heap_class_count + 63) / 64;

    // A class list overflowing again and again without a refill (a thread freeing what it no longer
    // allocates: a destructor loop) halves its bound each time, down to an eighth, so that the blocks it
    // keeps at the end do not hold hundreds of otherwise empty spans resident; its next refill restores
    // the bound (docs/heap.md).
    static constexpr std::size_t drain_shrink_max = 3;

    NUMAPLACE_DECL thread_cache();
    // Per heap: this thread's lists (null: none yet), then `count` null pointers (cache_ownership's
    // lists while a release holds the cache). On bad_alloc nothing is kept (the shard given back).
    NUMAPLACE_DECL static void** make_lists(std::size_t count, std::size_t shard);
    template <class T>
    static T* new_or_undo(std::size_t n, void** lists, std::size_t shard);
    NUMAPLACE_DECL static void flush_of(void* cache) noexcept;
    // Every cached block back to its heap, without marking an operation: from an operation of the owner,
    // from its destructor after retire(), or from a release while the owner is outside every operation.
    NUMAPLACE_DECL void flush_lists() noexcept;
    // Ends the owner's operation. \returns `r`.
    template <class R>
    NUMAPLACE_ALWAYS_INLINE R end(R r) noexcept {
        owner_.end();
        return r;
    }

    // Counts `bytes` of blocks into (`in`) or out of the cache; a run slot that gets blocks is marked in
    // its heap's bitmap (unmarked when evict_heap gives its blocks back). Inline in both modes: try_pop
    // counts a run with it on its fast path.
    void counted(std::size_t heap, std::size_t slot, std::size_t bytes, bool in) noexcept {
        bytes_ = in ? bytes_ + bytes : bytes_ - bytes;
        if (slot < heap_class_count) return;
        run_bytes_ = in ? run_bytes_ + bytes : run_bytes_ - bytes;
        const std::size_t i = slot - heap_class_count;
        if (in) run_marks_[heap * run_words + i / 64] |= std::uint64_t(1) << (i % 64);
    }
    // Gives back heap `heap`'s cached runs but slot `keep`'s, longest first, while this thread caches
    // more than `bound` bytes of runs.
    NUMAPLACE_DECL void evict_heap(std::size_t heap, std::size_t keep, std::size_t bound) noexcept;
    // Over the run budget after a run of slot `keep` came back to heap `heap`: gives back the other
    // cached runs, longest first (this heap's, then other heaps'), then all but one of `keep`'s (the
    // newest stays: the next request of its size finds it).
    NUMAPLACE_DECL void evict_runs(std::size_t heap, std::size_t keep) noexcept;
    // Over budget: gives back this heap's runs, longest first, then its classes, largest first, until
    // half the budget is left.
    NUMAPLACE_DECL void shrink(std::size_t heap) noexcept;
    // Keeps the newest `keep` blocks of the slot, gives the others back (linked in one pass over the
    // array, prefetched ahead: cache_slots.hpp).
    NUMAPLACE_DECL void trim(std::size_t heap, std::size_t slot, std::size_t keep) noexcept;

    // Live caches per shard.
    NUMAPLACE_DECL static std::atomic<std::size_t>* shard_users() noexcept;
    // The shard of every node heap this thread takes its span blocks from: the one the fewest live
    // caches use among the shards in force (heap_registry::shards_for), the lowest on a tie, so that
    // threads that come and go (a pool replaced, a thread per task) take from the same few shards' spans
    // instead of leaving blocks in every shard. Two threads made at once may pick the same shard: shards
    // are a way to spread contention, not a guarantee.
    NUMAPLACE_DECL static std::size_t least_used_shard() noexcept;
    NUMAPLACE_DECL static std::size_t least_used_of(std::size_t shards) noexcept;
    // At a refill of a span class, where the heaps choose the shard count: a thread whose shard is
    // out of the count in force (caches no longer outnumber the CPUs: back to shard 0), or shared while
    // another shard in force has fewer users (caches came to outnumber the CPUs), moves there. Its
    // blocks stay where they are: each goes back to its own span's shard when freed (node_heap::give).
    // \returns the count in force (forced or chosen), which heap_sharded_now() then says.
    NUMAPLACE_DECL std::size_t reconsider_shard() noexcept;

    // The decay without a background thread (docs/heap.md): every decay_ticks allocations a thread looks
    // at the clock, and the first thread to find a quarter of the decay time passed since the last
    // look of any thread runs the decay of every heap and of the cached own mappings (what
    // background_release() runs), so freed memory goes
    // back even while every allocation is served from a thread cache. Never allocates; holds no lock.
    static constexpr std::uint32_t decay_ticks = 1024;
    void tick() noexcept;

    std::uint32_t ticks_ = decay_ticks; // allocations to the next tick
    std::size_t count_;
    std::size_t shard_;
    void** lists_; // per heap its cache_slot* (null: none yet), then count_ nulls (see make_lists); fixed
    std::size_t budget_ = max_budget; // bytes this thread may cache (budget_now at the last refill)
    std::size_t bytes_ = 0;     // cached, all slots
    std::size_t run_bytes_ = 0; // cached, page runs
    std::uint64_t* run_marks_;  // per heap, the run slots that may have blocks (bit n: runs of n pages)
    cache_ownership owner_;     // when another thread may flush the lists (release_cached_memory)
};

/// \returns a block of slot `slot` from heap `heap` (see heap_index, heap_slot), through this thread's
/// cache, or centrally once the cache is gone (thread or process exit).
/// \throws placement_error, std::bad_alloc. \notes out of line: the allocators inline only the fast
/// path, thread_cache::try_pop.
void* heap_allocate(std::size_t heap, std::size_t slot);
/// \effects gives a block of slot `slot` back to heap `heap`. Never allocates.
void heap_deallocate(std::size_t heap, std::size_t slot, void* p) noexcept;

} // namespace detail
} // namespace numaplace

#if NUMAPLACE_DEFINITIONS
#include "thread_cache_impl.hpp"
#endif

#endif
