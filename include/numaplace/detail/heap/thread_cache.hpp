#ifndef NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_HPP_INCLUDED

/// \file
/// Each thread's cache of heap blocks (bounded per slot, 1..4 MiB in all by the number of threads, 1 MiB
/// of page runs, given back at a large request), and the out-of-line allocate and deallocate that go
/// through it to the heaps; other threads flush it only as cache_ownership allows. Design: docs/heap.md.

#include "../config.hpp"
#include "../decay.hpp"
#include "cache_ownership.hpp"
#include "cache_slots.hpp"
#include "registry.hpp"
#include "run_marks.hpp"
#include "sharded.hpp"
#include "size_classes.hpp"
#include "span.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

/// One thread's cached blocks, per heap and slot, in arrays (cache_slots.hpp; a heap's are made on its
/// first use).
class thread_cache {
public:
    ~thread_cache() {
        caches().fetch_sub(1, std::memory_order_relaxed);
        shard_users()[shard_].fetch_sub(1, std::memory_order_relaxed);
        owner_.retire(); // no release looks at it from here on
        flush_lists();
        for (std::size_t h = 0; h < count_; ++h) free_cache_slots(static_cast<cache_slot*>(lists_[h]));
        delete[] lists_;
        delete[] run_marks_;
        current() = nullptr;
        state() = dead;
    }

    /// \returns a block of slot `slot` of heap `heap`, refilling its list from the heap if empty.
    /// \throws placement_error, std::bad_alloc (the lists).
    void* allocate(std::size_t heap, std::size_t slot) {
        if (NUMAPLACE_UNLIKELY(ticks_ == 0)) tick();
        void** lists = owner_.begin_slow();
        if (NUMAPLACE_UNLIKELY(lists[heap] == nullptr)) { // made outside the operation: new may come back here
            owner_.end();
            cache_slot* made = make_cache_slots();
            lists = owner_.begin_slow();
            if (lists[heap] == nullptr) lists[heap] = made; // else an allocation inside new made it
            else free_cache_slots(made);
        }
        cache_slot& l = static_cast<cache_slot*>(lists[heap])[slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        if (NUMAPLACE_UNLIKELY(l.count == 0)) {
            l.shrink = 0; // allocating again: the whole bound
            budget_ = budget_now();
            const std::size_t in_force = slot < heap_class_count ? reconsider_shard() : 1;
            owner_.end(); // the heap may throw, or allocate (a degradation's message)
            heap_block* got = nullptr;
            const std::size_t n = heap_registry::instance().at(heap).take(slot, refill_count(info.batch, in_force), got, shard_);
            owner_.begin_slow(); // a release may have flushed the other lists meanwhile; this one stayed empty
            fill_cache_slot(l, got); // n <= cache_max (span_heap::take: at most 2 batches)
            counted(heap, slot, n * info.size, true);
        }
        void* b = l.blocks[--l.count];
        counted(heap, slot, info.size, false);
        owner_.end();
        return b;
    }
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
    /// try_push of a run, out of line so that the inlined span path stays small.
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
    bool deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
        if (slot >= heap_class_count && run_marks.may_hold(p)) return false; // see try_push_run
        auto* ls = static_cast<cache_slot*>(owner_.begin_slow()[heap]);
        if (!ls) return end(false);
        cache_slot& l = ls[slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        l.blocks[l.count++] = p; // at most the bound + 1: trimmed below
        counted(heap, slot, info.size, true);
        if (slot < heap_class_count) {
            const std::size_t limit = info.cache_max >> l.shrink;
            if (NUMAPLACE_UNLIKELY(l.count > limit)) { // half the bound back; freeing on, the bound halves
                trim(heap, slot, limit / 2);
                if (l.shrink < drain_shrink_max && (info.cache_max >> (l.shrink + 1)) >= 2) ++l.shrink;
            }
        } else if (NUMAPLACE_UNLIKELY(l.count > info.cache_max)) {
            trim(heap, slot, l.count - info.batch); // a batch back
        }
        if (NUMAPLACE_UNLIKELY(run_bytes_ > run_budget)) evict_runs(heap, slot);
        if (NUMAPLACE_UNLIKELY(bytes_ > budget_)) shrink(heap);
        return end(true);
    }

    /// \effects gives back every run this thread caches of heap `heap`. A large request calls it first:
    /// runs of sizes not asked for again would otherwise stay resident beside the fresh pages of the
    /// large block; back in the heap they coalesce and may serve it (docs/heap.md). Never allocates.
    void give_runs(std::size_t heap) noexcept {
        if (owner_.begin_slow()[heap] != nullptr && run_bytes_ != 0) evict_heap(heap, heap_no_slot, 0);
        owner_.end();
    }

    /// \returns the shard this thread takes span blocks from (see node_heap).
    std::size_t shard() const noexcept { return shard_; }

    /// \returns the bytes this thread caches now (after a release took them: 0), and the most it may cache
    /// (its budget at its last refill). From the owner thread.
    std::size_t cached_bytes() noexcept {
        owner_.begin_slow();
        return end(bytes_);
    }
    std::size_t budget() const noexcept { return budget_; }

    /// \effects in a forked child, counts this thread's cache as the only live one (of its shard).
    static void forked_child() noexcept {
        cache_ownership::fork_child(current() ? &current()->owner_ : nullptr);
        caches().store(current() ? 1 : 0, std::memory_order_relaxed);
        for (std::size_t k = 0; k < heap_shards_max; ++k) shard_users()[k].store(0, std::memory_order_relaxed);
        if (current()) shard_users()[current()->shard_].store(1, std::memory_order_relaxed);
    }

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
    static thread_cache* get() {
        if (thread_cache* c = current()) return c;
        if (state() == dead) return nullptr;
        static thread_local thread_cache cache;
        state() = alive;
        current() = &cache;
        return &cache;
    }
    /// \effects gives every block this thread caches back to its heap. From the owner thread.
    void flush_all() noexcept {
        owner_.begin_slow();
        flush_lists();
        owner_.end();
    }
    /// \effects this thread's cache, then every other live thread's, give every cached block back to its
    /// heap (cache_ownership::release_others). \returns how many caches were left the request to flush
    /// at their owner's next operation (owners inside an operation past the wait, or no barrier).
    static std::size_t flush_every_thread() noexcept {
        thread_cache* self = current();
        if (self) self->flush_all();
        return cache_ownership::release_others(self ? &self->owner_ : nullptr);
    }
    /// \returns the number of live thread caches (made, their thread not ended).
    static std::size_t live() noexcept { return cache_ownership::live_count(); }
    /// \returns the thread caches counted by the shard choice (made, not yet destroyed; no lock).
    static std::size_t counted_caches() noexcept { return caches().load(std::memory_order_relaxed); }

private:
    // Bytes a thread caches: all_budget shared by the threads that have a cache, at least min_budget and
    // at most max_budget each (many more threads than cores, each with 4 MiB, raised the peak 1.7x
    // glibc's: docs/heap.md). Read again at every refill from the heap.
    static constexpr std::size_t max_budget = std::size_t(4) << 20, min_budget = std::size_t(1) << 20;
    static constexpr std::size_t all_budget = std::size_t(16) << 20;
    static std::atomic<std::size_t>& caches() noexcept {
        static std::atomic<std::size_t> n{0}; // constant-initialised
        return n;
    }
    static std::size_t budget_now() noexcept {
        const std::size_t n = caches().load(std::memory_order_relaxed), share = all_budget / (n ? n : 1);
        return share < min_budget ? min_budget : share > max_budget ? max_budget : share;
    }
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

    thread_cache()
        : count_(heap_registry::instance().size()), shard_(least_used_shard()), lists_(make_lists(count_, shard_)),
          run_marks_(new_or_undo<std::uint64_t>(count_ * run_words, lists_, shard_)),
          owner_(lists_, lists_ + count_, &flush_of, this) {
        caches().fetch_add(1, std::memory_order_relaxed);
        budget_ = budget_now();
    }
    // Per heap: this thread's lists (null: none yet), then `count` null pointers (cache_ownership's
    // lists while a release holds the cache). On bad_alloc nothing is kept (the shard given back).
    static void** make_lists(std::size_t count, std::size_t shard) { return new_or_undo<void*>(2 * count, nullptr, shard); }
    template <class T>
    static T* new_or_undo(std::size_t n, void** lists, std::size_t shard) {
        try {
            return new T[n]();
        } catch (...) {
            delete[] lists;
            shard_users()[shard].fetch_sub(1, std::memory_order_relaxed);
            throw;
        }
    }
    static void flush_of(void* cache) noexcept { static_cast<thread_cache*>(cache)->flush_lists(); }
    // Every cached block back to its heap, without marking an operation: from an operation of the owner,
    // from its destructor after retire(), or from a release while the owner is outside every operation.
    void flush_lists() noexcept {
        for (std::size_t h = 0; h < count_; ++h)
            if (lists_[h])
                for (std::size_t slot = 0; slot < heap_slots; ++slot) trim(h, slot, 0);
    }
    // Ends the owner's operation. \returns `r`.
    template <class R>
    NUMAPLACE_ALWAYS_INLINE R end(R r) noexcept {
        owner_.end();
        return r;
    }

    // Counts `bytes` of blocks into (`in`) or out of the cache; a run slot that gets blocks is marked in
    // its heap's bitmap (unmarked when evict_heap gives its blocks back).
    void counted(std::size_t heap, std::size_t slot, std::size_t bytes, bool in) noexcept {
        bytes_ = in ? bytes_ + bytes : bytes_ - bytes;
        if (slot < heap_class_count) return;
        run_bytes_ = in ? run_bytes_ + bytes : run_bytes_ - bytes;
        const std::size_t i = slot - heap_class_count;
        if (in) run_marks_[heap * run_words + i / 64] |= std::uint64_t(1) << (i % 64);
    }
    // Gives back heap `heap`'s cached runs but slot `keep`'s, longest first, while this thread caches
    // more than `bound` bytes of runs.
    void evict_heap(std::size_t heap, std::size_t keep, std::size_t bound) noexcept {
        std::uint64_t* marks = &run_marks_[heap * run_words];
        for (std::size_t w = run_words; w-- > 0 && run_bytes_ > bound;)
            for (std::uint64_t bits = marks[w]; bits != 0 && run_bytes_ > bound;) {
                const std::size_t b = 63 - static_cast<std::size_t>(__builtin_clzll(bits));
                bits &= ~(std::uint64_t(1) << b);
                const std::size_t slot = heap_class_count + w * 64 + b;
                if (slot == keep) continue;
                marks[w] &= ~(std::uint64_t(1) << b);
                trim(heap, slot, 0);
            }
    }
    // Over the run budget after a run of slot `keep` came back to heap `heap`: gives back the other
    // cached runs, longest first (this heap's, then other heaps'), then all but one of `keep`'s (the
    // newest stays: the next request of its size finds it).
    void evict_runs(std::size_t heap, std::size_t keep) noexcept {
        evict_heap(heap, keep, run_budget);
        for (std::size_t h = 0; h < count_ && run_bytes_ > run_budget; ++h)
            if (h != heap && lists_[h]) evict_heap(h, heap_no_slot, run_budget);
        if (run_bytes_ > run_budget) trim(heap, keep, 1);
    }
    // Over budget: gives back this heap's runs, longest first, then its classes, largest first, until
    // half the budget is left.
    void shrink(std::size_t heap) noexcept {
        for (std::size_t slot = heap_slots; slot-- > 0 && bytes_ > budget_ / 2;) trim(heap, slot, 0);
        if (bytes_ > budget_ / 2) flush_lists();
    }
    // Keeps the newest `keep` blocks of the slot, gives the others back (linked in one pass over the
    // array, prefetched ahead: cache_slots.hpp).
    void trim(std::size_t heap, std::size_t slot, std::size_t keep) noexcept {
        cache_slot& l = static_cast<cache_slot*>(lists_[heap])[slot];
        if (l.count <= keep) return;
        const std::size_t given = l.count - keep;
        heap_block* rest = split_cache_slot(l, slot, keep);
        counted(heap, slot, given * heap_slot_info_of(slot).size, false);
        heap_registry::instance().at(heap).give(slot, rest, given);
    }

    // Live caches per shard.
    static std::atomic<std::size_t>* shard_users() noexcept {
        static std::atomic<std::size_t> n[heap_shards_max] = {}; // constant-initialised
        return n;
    }
    // The shard of every node heap this thread takes its span blocks from: the one the fewest live
    // caches use among the shards in force (heap_registry::shards_for), the lowest on a tie, so that
    // threads that come and go (a pool replaced, a thread per task) take from the same few shards' spans
    // instead of leaving blocks in every shard. Two threads made at once may pick the same shard: shards
    // are a way to spread contention, not a guarantee.
    static std::size_t least_used_shard() noexcept {
        const heap_registry& r = heap_registry::instance();
        const std::size_t best = least_used_of(r.shards_for(caches().load(std::memory_order_relaxed) + 1));
        shard_users()[best].fetch_add(1, std::memory_order_relaxed);
        if (best != 0) heap_sharded().store(true, std::memory_order_relaxed);
        return best;
    }
    static std::size_t least_used_of(std::size_t shards) noexcept {
        std::atomic<std::size_t>* users = shard_users();
        std::size_t best = 0;
        for (std::size_t k = 1; k < shards; ++k)
            if (users[k].load(std::memory_order_relaxed) < users[best].load(std::memory_order_relaxed)) best = k;
        return best;
    }
    // At a refill of a span class, where the heaps choose the shard count: a thread whose shard is
    // out of the count in force (caches no longer outnumber the CPUs: back to shard 0), or shared while
    // another shard in force has fewer users (caches came to outnumber the CPUs), moves there. Its
    // blocks stay where they are: each goes back to its own span's shard when freed (node_heap::give).
    // \returns the count in force (forced or chosen), which heap_sharded_now() then says.
    std::size_t reconsider_shard() noexcept {
        const heap_registry* r = heap_registry::cell().peek(); // made: this cache was made with it
        if (r == nullptr) return 1;
        const std::size_t n = r->shards_for(caches().load(std::memory_order_relaxed));
        std::atomic<bool>& now = heap_sharded_now();
        if (now.load(std::memory_order_relaxed) != (n > 1)) now.store(n > 1, std::memory_order_relaxed); // rarely written
        if (r->forced()) return n;
        std::atomic<std::size_t>* users = shard_users();
        if (shard_ < n && (n == 1 || users[shard_].load(std::memory_order_relaxed) <= 1)) return n;
        const std::size_t best = least_used_of(n);
        if (best == shard_ || (shard_ < n && users[best].load(std::memory_order_relaxed) + 1 >= users[shard_].load(std::memory_order_relaxed)))
            return n; // no shard in force is less used than this one
        users[best].fetch_add(1, std::memory_order_relaxed);
        users[shard_].fetch_sub(1, std::memory_order_relaxed);
        if (best != 0) heap_sharded().store(true, std::memory_order_relaxed);
        shard_ = best;
        return n;
    }

    // The decay without a background thread (docs/heap.md): every decay_ticks allocations a thread looks
    // at the clock, and the first thread to find a quarter of the decay time passed since the last
    // look of any thread runs the decay of every heap and of the cached own mappings (what
    // background_release() runs), so freed memory goes
    // back even while every allocation is served from a thread cache. Never allocates; holds no lock.
    static constexpr std::uint32_t decay_ticks = 1024;
    NUMAPLACE_NOINLINE void tick() noexcept {
        ticks_ = decay_ticks;
        static std::atomic<std::int64_t> last{0}; // constant-initialised
        const std::int64_t now = os_now_ms();
        std::int64_t seen = last.load(std::memory_order_relaxed);
        if (now - seen < run_decay_ms / 4 || !last.compare_exchange_strong(seen, now, std::memory_order_relaxed)) return;
        decay_everything_now();
    }

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

/// In a forked child only the forking thread lives: its cache, if it has one, is the only one (the
/// others' would keep every later budget at a share of the parent's threads).
inline const fork_hook_registration thread_caches_fork_hook{fork_stage::thread_caches, fork_hook{&cache_ownership::fork_prepare, &cache_ownership::fork_parent, &thread_cache::forked_child}};

/// \returns a block of slot `slot` from heap `heap` (see heap_index, heap_slot), through this thread's
/// cache, or centrally once the cache is gone (thread or process exit).
/// \throws placement_error, std::bad_alloc. \notes out of line: the allocators inline only the fast
/// path, thread_cache::try_pop.
NUMAPLACE_NOINLINE inline void* heap_allocate(std::size_t heap, std::size_t slot) {
    if (thread_cache* tc = thread_cache::get()) return tc->allocate(heap, slot);
    heap_block* b = nullptr;
    heap_registry::instance().at(heap).take(slot, 1, b);
    return b;
}
/// \effects gives a block of slot `slot` back to heap `heap`. Never allocates.
NUMAPLACE_NOINLINE inline void heap_deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
    thread_cache* tc = thread_cache::current();
    if (tc && tc->deallocate(heap, slot, p)) return;
    heap_registry::instance().at(heap).give_one(slot, static_cast<heap_block*>(p));
}

} // namespace detail
} // namespace numaplace

#endif
