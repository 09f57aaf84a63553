#ifndef NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_THREAD_CACHE_IMPL_HPP_INCLUDED

/// \file
/// The definitions of thread_cache's slow paths (refills, frees over a bound, trims, the shard choice, the
/// decay's tick) and of heap_allocate / heap_deallocate. Included by thread_cache.hpp in header-only mode,
/// compiled into libnumaplace in the separately compiled mode (detail/config.hpp).

#include "../config.hpp"
#include "../decay.hpp"
#include "cache_ownership.hpp"
#include "cache_slots.hpp"
#include "registry.hpp"
#include "run_marks.hpp"
#include "sharded.hpp"
#include "size_classes.hpp"
#include "span.hpp"
#include "thread_cache.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

template <class T>
T* thread_cache::new_or_undo(std::size_t n, void** lists, std::size_t shard) {
    try {
        return new T[n]();
    } catch (...) {
        delete[] lists;
        shard_users()[shard].fetch_sub(1, std::memory_order_relaxed);
        throw;
    }
}
NUMAPLACE_DECL thread_cache::~thread_cache() {
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
NUMAPLACE_DECL void* thread_cache::allocate(std::size_t heap, std::size_t slot) {
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
NUMAPLACE_DECL bool thread_cache::deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
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
NUMAPLACE_DECL void thread_cache::give_runs(std::size_t heap) noexcept {
    if (owner_.begin_slow()[heap] != nullptr && run_bytes_ != 0) evict_heap(heap, heap_no_slot, 0);
    owner_.end();
}
NUMAPLACE_DECL std::size_t thread_cache::cached_bytes() noexcept {
    owner_.begin_slow();
    return end(bytes_);
}
NUMAPLACE_DECL void thread_cache::forked_child() noexcept {
    cache_ownership::fork_child(current() ? &current()->owner_ : nullptr);
    caches().store(current() ? 1 : 0, std::memory_order_relaxed);
    for (std::size_t k = 0; k < heap_shards_max; ++k) shard_users()[k].store(0, std::memory_order_relaxed);
    if (current()) shard_users()[current()->shard_].store(1, std::memory_order_relaxed);
}
NUMAPLACE_DECL thread_cache* thread_cache::get() {
    if (thread_cache* c = current()) return c;
    if (state() == dead) return nullptr;
    static thread_local thread_cache cache;
    state() = alive;
    current() = &cache;
    return &cache;
}
NUMAPLACE_DECL void thread_cache::flush_all() noexcept {
    owner_.begin_slow();
    flush_lists();
    owner_.end();
}
NUMAPLACE_DECL std::size_t thread_cache::flush_every_thread() noexcept {
    thread_cache* self = current();
    if (self) self->flush_all();
    return cache_ownership::release_others(self ? &self->owner_ : nullptr);
}
NUMAPLACE_DECL std::size_t thread_cache::live() noexcept { return cache_ownership::live_count(); }
NUMAPLACE_DECL std::size_t thread_cache::counted_caches() noexcept { return caches().load(std::memory_order_relaxed); }
NUMAPLACE_DECL std::atomic<std::size_t>& thread_cache::caches() noexcept {
    static std::atomic<std::size_t> n{0}; // constant-initialised
    return n;
}
NUMAPLACE_DECL std::size_t thread_cache::budget_now() noexcept {
    const std::size_t n = caches().load(std::memory_order_relaxed), share = all_budget / (n ? n : 1);
    return share < min_budget ? min_budget : share > max_budget ? max_budget : share;
}
NUMAPLACE_DECL thread_cache::thread_cache()
    : count_(heap_registry::instance().size()), shard_(least_used_shard()), lists_(make_lists(count_, shard_)),
      run_marks_(new_or_undo<std::uint64_t>(count_ * run_words, lists_, shard_)),
      owner_(lists_, lists_ + count_, &flush_of, this) {
    caches().fetch_add(1, std::memory_order_relaxed);
    budget_ = budget_now();
}
NUMAPLACE_DECL void** thread_cache::make_lists(std::size_t count, std::size_t shard) { return new_or_undo<void*>(2 * count, nullptr, shard); }
NUMAPLACE_DECL void thread_cache::flush_of(void* cache) noexcept { static_cast<thread_cache*>(cache)->flush_lists(); }
NUMAPLACE_DECL void thread_cache::flush_lists() noexcept {
    for (std::size_t h = 0; h < count_; ++h)
        if (lists_[h])
            for (std::size_t slot = 0; slot < heap_slots; ++slot) trim(h, slot, 0);
}
NUMAPLACE_DECL void thread_cache::evict_heap(std::size_t heap, std::size_t keep, std::size_t bound) noexcept {
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
NUMAPLACE_DECL void thread_cache::evict_runs(std::size_t heap, std::size_t keep) noexcept {
    evict_heap(heap, keep, run_budget);
    for (std::size_t h = 0; h < count_ && run_bytes_ > run_budget; ++h)
        if (h != heap && lists_[h]) evict_heap(h, heap_no_slot, run_budget);
    if (run_bytes_ > run_budget) trim(heap, keep, 1);
}
NUMAPLACE_DECL void thread_cache::shrink(std::size_t heap) noexcept {
    for (std::size_t slot = heap_slots; slot-- > 0 && bytes_ > budget_ / 2;) trim(heap, slot, 0);
    if (bytes_ > budget_ / 2) flush_lists();
}
NUMAPLACE_DECL void thread_cache::trim(std::size_t heap, std::size_t slot, std::size_t keep) noexcept {
    cache_slot& l = static_cast<cache_slot*>(lists_[heap])[slot];
    if (l.count <= keep) return;
    const std::size_t given = l.count - keep;
    heap_block* rest = split_cache_slot(l, slot, keep);
    counted(heap, slot, given * heap_slot_info_of(slot).size, false);
    heap_registry::instance().at(heap).give(slot, rest, given);
}
NUMAPLACE_DECL std::atomic<std::size_t>* thread_cache::shard_users() noexcept {
    static std::atomic<std::size_t> n[heap_shards_max] = {}; // constant-initialised
    return n;
}
NUMAPLACE_DECL std::size_t thread_cache::least_used_shard() noexcept {
    const heap_registry& r = heap_registry::instance();
    const std::size_t best = least_used_of(r.shards_for(caches().load(std::memory_order_relaxed) + 1));
    shard_users()[best].fetch_add(1, std::memory_order_relaxed);
    if (best != 0) heap_sharded().store(true, std::memory_order_relaxed);
    return best;
}
NUMAPLACE_DECL std::size_t thread_cache::least_used_of(std::size_t shards) noexcept {
    std::atomic<std::size_t>* users = shard_users();
    std::size_t best = 0;
    for (std::size_t k = 1; k < shards; ++k)
        if (users[k].load(std::memory_order_relaxed) < users[best].load(std::memory_order_relaxed)) best = k;
    return best;
}
NUMAPLACE_DECL std::size_t thread_cache::reconsider_shard() noexcept {
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
NUMAPLACE_NOINLINE NUMAPLACE_DECL void thread_cache::tick() noexcept {
    ticks_ = decay_ticks;
    static std::atomic<std::int64_t> last{0}; // constant-initialised
    const std::int64_t now = os_now_ms();
    std::int64_t seen = last.load(std::memory_order_relaxed);
    if (now - seen < run_decay_ms / 4 || !last.compare_exchange_strong(seen, now, std::memory_order_relaxed)) return;
    decay_everything_now();
}

/// In a forked child only the forking thread lives: its cache, if it has one, is the only one (the
/// others' would keep every later budget at a share of the parent's threads).
inline const fork_hook_registration thread_caches_fork_hook NUMAPLACE_EARLY_INIT{fork_stage::thread_caches, fork_hook{&cache_ownership::fork_prepare, &cache_ownership::fork_parent, &thread_cache::forked_child}};

// heap_allocate and heap_deallocate: documented where thread_cache.hpp declares them.
NUMAPLACE_NOINLINE NUMAPLACE_DECL void* heap_allocate(std::size_t heap, std::size_t slot) {
    if (thread_cache* tc = thread_cache::get()) return tc->allocate(heap, slot);
    heap_block* b = nullptr;
    heap_registry::instance().at(heap).take(slot, 1, b);
    return b;
}
NUMAPLACE_NOINLINE NUMAPLACE_DECL void heap_deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
    thread_cache* tc = thread_cache::current();
    if (tc && tc->deallocate(heap, slot, p)) return;
    heap_registry::instance().at(heap).give_one(slot, static_cast<heap_block*>(p));
}

} // namespace detail
} // namespace numaplace

#endif
