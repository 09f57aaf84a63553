#ifndef NUMAPLACE_DETAIL_HEAP_SPAN_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SPAN_HEAP_HPP_INCLUDED

/// \file
/// The span allocator of one node heap: blocks of the classes that are not page runs, carved from
/// spans, which are carved from chunks of their size; emptied spans kept as spares of their class, then
/// in a cache of empty spans for any class (hot up to a bound, then cold: nothing resident), unmapped by
/// the decay (empty_spans.hpp; while the heaps are sharded, the node heap's shared store first). Where
/// new memory comes from is the caller's (node_heap: mapped and bound).
/// Design and measurements: docs/heap.md.

#include "../../memory.hpp"
#include "../linux.hpp"
#include "empty_spans.hpp"
#include "size_classes.hpp"
#include "span.hpp"
#include "span_chunks.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace numaplace {
namespace detail {

/// The spans of one node heap. Lock order: a class's mutex, then the cache's; a thread never waits for
/// a second class's mutex (it only tries it).
class span_heap {
public:
    /// Shard 0's, with no shared store (set_shard changes both).
    span_heap() noexcept { empty_.configure(cache_floor, nullptr); }

    /// \effects records `shard` in every span made from now on (see node_heap). Before the first operation.
    /// Shards other than 0 exist only while the heaps are oversubscribed (or forced): their floors (empty
    /// spans kept hot, spares, transfer room) are a quarter of shard 0's, so that a shard per thread does not
    /// multiply what every shard keeps (docs/heap.md, "Shards chosen").
    /// `shared`: the node heap's store of empty spans (outliving this), where this heap puts the spans it
    /// empties while the heaps are sharded (heap_sharded_now) and looks before its cold ones.
    void set_shard(std::uint8_t shard, shared_spans* shared) noexcept {
        shard_ = shard;
        floor_shift_ = shard == 0 ? 0 : 2;
        empty_.configure(cache_floor >> floor_shift_, shared);
    }

    /// \effects hands out up to `want` (>= 1) blocks of class `c` as a list in `head`. When no span of
    /// the class has a block left, takes an empty span from the cache, else `map(bytes, size, bound)`:
    /// a new mapping of `bytes` aligned to `bytes` for blocks of `size`, `bound` telling whether the
    /// heap's policy is in force on it.
    /// \returns how many (at least one; a transfer list of up to 2 `want` when `want` > 1).
    /// \throws what `map` throws (nothing is taken then).
    template <class Map>
    std::size_t take(std::size_t c, std::size_t want, heap_block*& head, Map&& map) {
        const heap_class_info& info = heap_table.info[c];
        touched_[c].store(true, std::memory_order_relaxed);
        heap_block* remote = nullptr;
        if (want > 1) { // blocks freed by threads without a cache list: handed out whole when they fit
            const std::uintptr_t w = remote_[c].word.exchange(0, std::memory_order_acquire);
            remote = remote_head(w); // the taker owns the stack now, without the class's lock
            if (remote && remote_count(w) <= 2 * want) {
                head = remote;
                return remote_count(w);
            }
        }
        std::lock_guard<std::mutex> lock(class_mutex_[c]);
        if (remote) give_blocks(c, remote); // too long for one list: back to the spans
        transfer_list& t = transfer_[c];
        if (t.n != 0 && want > 1 && t.count[t.n - 1] <= 2 * want) { // a whole list another thread gave back
            --t.n;
            head = t.head[t.n];
            transfer_bytes_.fetch_sub(t.count[t.n] * info.size, std::memory_order_relaxed);
            return t.count[t.n];
        }
        std::size_t n = 0;
        heap_block* list = nullptr;
        while (n < want) {
            heap_span* s = partial_[c];
            if (!s) {
                if (n > 0) break;
                s = new_span(c, map);
                link(c, s);
            }
            if (s->spare) { // an empty spare span in use again
                s->spare = false;
                --spares_[c];
                spare_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
            }
            while (n < want && s->free) {
                heap_block* b = s->free;
                s->free = b->next;
                b->next = list;
                list = b;
                ++n;
                ++s->live;
            }
            while (n < want && s->bump < s->end) {
                auto* b = reinterpret_cast<heap_block*>(s->bump);
                s->bump += info.size;
                b->next = list;
                list = b;
                ++n;
                ++s->live;
            }
            if (!s->free && s->bump >= s->end) unlink(c, s); // full
        }
        head = list;
        return n;
    }

    /// \effects takes back a null-terminated list of `count` blocks of class `c`. A list of an eighth of
    /// a thread cache's batch or more (what a draining cache gives back, up to a whole bound) is kept whole for the next refill of a batch (a transfer list) while there
    /// is room; otherwise its blocks go back to their spans. A span left empty stays a spare of its
    /// class while the spares are under their limit, else goes to the cache. Then spares over the limit
    /// go back: class `c`'s, and those of other classes whose lock is free now. Never allocates.
    void give(std::size_t c, heap_block* list, std::size_t count) noexcept {
        {
            std::lock_guard<std::mutex> lock(class_mutex_[c]);
            touched_[c].store(true, std::memory_order_relaxed);
            if (park(c, list, count)) return;
            give_blocks(c, list);
        }
        for (std::size_t d = 0; d < heap_class_count && spare_bytes_.load(std::memory_order_relaxed) > spare_limit(); ++d) {
            if (d == c) continue;
            std::unique_lock<std::mutex> other(class_mutex_[d], std::try_to_lock);
            if (other.owns_lock()) trim_spares(d);
        }
    }

    /// What give_one did with a block.
    enum class remote_push {
        pushed,      ///< on the remote stack
        pushed_long, ///< on the remote stack, now past a batch: the caller calls drain_remote_now
        refused      ///< not pushed (the stack's count is full, or the address does not fit the stack's
                     ///< word): the caller gives it with drain_remote_now(c, b)
    };
    /// \effects frees one block of class `c` for a thread that caches none of this heap (a consumer
    /// that never allocates here, or a thread past its cache's end): pushed on the class's remote stack
    /// without a lock (no span touched, no fork gate needed: a fork amid a push loses at most this block in
    /// the child, whose pusher does not exist there). The stack is one word, its head's address and its
    /// count, so a taker knows how many blocks it took without walking them. The next refill of a batch
    /// takes the stack whole. Never allocates.
    remote_push give_one(std::size_t c, heap_block* b) noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(b);
        if (address >> remote_shift != 0) return remote_push::refused;
        std::atomic<std::uintptr_t>& word = remote_[c].word;
        std::uintptr_t w = word.load(std::memory_order_relaxed);
        std::uintptr_t n;
        do {
            n = remote_count(w);
            if (n == remote_count_max) return remote_push::refused;
            b->next = remote_head(w); // never reads another block: no ABA
        } while (!word.compare_exchange_weak(w, address | ((n + 1) << remote_shift), std::memory_order_release,
                                             std::memory_order_relaxed));
        return n + 1 > heap_table.info[c].batch ? remote_push::pushed_long : remote_push::pushed;
    }
    /// \effects takes class `c`'s remote stack (give_one said it is long): kept whole as a transfer list
    /// while there is room (the next refill of a batch takes it; no block is walked under the lock), else
    /// returned to its spans; and gives back the block `refused` (when not null) that give_one refused.
    /// Never allocates.
    void drain_remote_now(std::size_t c, heap_block* refused = nullptr) noexcept {
        std::lock_guard<std::mutex> lock(class_mutex_[c]);
        const std::uintptr_t w = remote_[c].word.exchange(0, std::memory_order_acquire);
        if (heap_block* list = remote_head(w))
            if (!park(c, list, remote_count(w))) give_blocks(c, list);
        if (refused) {
            refused->next = nullptr;
            give_blocks(c, refused);
        }
    }

    /// \returns the bytes of blocks in transfer lists and on remote stacks (freed, not in their spans).
    std::size_t parked_bytes() const noexcept {
        std::size_t n = transfer_bytes_.load(std::memory_order_relaxed);
        for (std::size_t c = 0; c < heap_class_count; ++c)
            n += remote_count(remote_[c].word.load(std::memory_order_relaxed)) * heap_table.info[c].size;
        return n;
    }

    /// \effects the decay of what is kept for reuse: a class neither taken from nor given to since the
    /// previous call returns its remote stack and transfer lists to their spans (a block parked there
    /// keeps its whole span resident) and gives its spares to the cache; a cache of empty spans neither
    /// used nor given to since the previous call unmaps its cold spans and gives every page of its hot
    /// ones back (they become cold: mapped, nothing resident). Never allocates; skips a class whose lock
    /// is held.
    void decay_now() noexcept {
        for (std::size_t c = 0; c < heap_class_count; ++c) {
            std::unique_lock<std::mutex> lock(class_mutex_[c], std::try_to_lock);
            if (!lock.owns_lock()) continue;
            if (touched_[c].exchange(false, std::memory_order_relaxed)) continue;
            return_parked(c);
            trim_spares(c, true);
        }
        std::unique_lock<std::mutex> lock(span_mutex_, std::try_to_lock);
        if (lock.owns_lock()) empty_.decay_now();
    }

    /// \effects unmaps the cold spans for a refused mapping: waits for the cache's lock unless this thread
    /// maps a span (then only tries it: two threads mapping spans would wait on each other; its own heap is
    /// skipped, carve relieves it first). \returns whether cold spans were unmapped. Never allocates.
    bool relieve() noexcept {
        if (making() == this) return false;
        std::unique_lock<std::mutex> lock(span_mutex_, std::try_to_lock);
        if (!lock.owns_lock()) {
            if (making()) return false;
            lock.lock();
        }
        return empty_.unmap_cold();
    }

    /// \effects returns the remote stacks' and transfer lists' blocks to their spans, then unmaps every
    /// empty span: the spares of every class, the cache, and the chunks' spans never handed out. Never
    /// allocates.
    void release_all() noexcept {
        for (std::size_t c = 0; c < heap_class_count; ++c) {
            std::lock_guard<std::mutex> lock(class_mutex_[c]);
            return_parked(c); // first: they may empty spans
            trim_spares(c, true);
        }
        std::lock_guard<std::mutex> lock(span_mutex_);
        empty_.unmap_all();
        chunks_.unmap_rest();
    }

private:
    // Transfer lists: per class up to transfer_slots lists, at most transfer_limit bytes per heap.
    static constexpr std::size_t transfer_slots = 4;
    static constexpr std::size_t transfer_limit = std::size_t(256) << 10;
    // A remote stack: one word, the head block's address in the low remote_shift bits (user addresses
    // on x86-64 and AArch64 fit 48 bits unless a mapping asks for more, which the heap's never do) and
    // the count of blocks on the stack above. A stack is only ever taken whole.
    static constexpr unsigned remote_shift = 48;
    static constexpr std::uintptr_t remote_count_max = (std::uintptr_t(1) << (64 - remote_shift)) - 1;
    struct alignas(64) remote_stack { // one cache line per class: pushers of two classes do not collide
        std::atomic<std::uintptr_t> word{0};
    };
    static heap_block* remote_head(std::uintptr_t w) noexcept {
        return reinterpret_cast<heap_block*>(w & ((std::uintptr_t(1) << remote_shift) - 1));
    }
    static std::size_t remote_count(std::uintptr_t w) noexcept { return w >> remote_shift; }
    struct transfer_list {
        heap_block* head[transfer_slots];
        std::uint32_t count[transfer_slots];
        std::size_t n;
    };
    static constexpr std::size_t cache_floor = std::size_t(512) << 10;
    static constexpr std::size_t spare_floor = std::size_t(256) << 10;

    // Under class c's lock: keeps the list of `count` blocks whole as a transfer list when it is an eighth
    // of a batch or more, fits one thread's list, and there is room. \returns whether it did.
    bool park(std::size_t c, heap_block* list, std::size_t count) noexcept {
        const heap_class_info& info = heap_table.info[c];
        transfer_list& t = transfer_[c];
        if (count * 8 < info.batch || count > info.cache_max || t.n == transfer_slots ||
            transfer_bytes_.load(std::memory_order_relaxed) + count * info.size > (transfer_limit >> floor_shift_))
            return false;
        t.head[t.n] = list;
        t.count[t.n] = static_cast<std::uint32_t>(count);
        ++t.n;
        transfer_bytes_.fetch_add(count * info.size, std::memory_order_relaxed);
        return true;
    }
    // Under class c's lock: the remote stack's and the transfer lists' blocks back to their spans.
    void return_parked(std::size_t c) noexcept {
        drain_remote(c);
        transfer_list& t = transfer_[c];
        while (t.n != 0) {
            --t.n;
            transfer_bytes_.fetch_sub(t.count[t.n] * heap_table.info[c].size, std::memory_order_relaxed);
            give_blocks(c, t.head[t.n]);
        }
    }
    // Under class c's lock: the remote stack's blocks back to their spans.
    void drain_remote(std::size_t c) noexcept {
        if (heap_block* list = remote_head(remote_[c].word.exchange(0, std::memory_order_acquire))) give_blocks(c, list);
    }
    // Under class c's lock.
    void give_blocks(std::size_t c, heap_block* list) noexcept {
        while (list) {
            heap_block* b = list;
            list = list->next;
            heap_span* s = heap_span_of(b, c);
            b->next = s->free;
            s->free = b;
            if (!s->listed) link(c, s);
            if (--s->live == 0) {
                if (keep_spare(s->bytes)) { // stays listed, its blocks and pages as they are
                    s->spare = true;
                    ++spares_[c];
                    continue;
                }
                unlink(c, s);
                release(s);
            }
        }
        trim_spares(c); // the live set shrank
    }
    // \effects gives class c's spares to the cache while the spares are over the limit, or `all` of
    // them (under c's lock).
    void trim_spares(std::size_t c, bool all = false) noexcept {
        // spares_[c] ends the walk: over the limit because of other classes' spares, a long list of
        // partly used spans is not walked at every give (1.5 % of the fragmentation workload, 2026-11-28)
        for (heap_span* s = partial_[c]; s && spares_[c] != 0 && (all || spare_bytes_.load(std::memory_order_relaxed) > spare_limit());) {
            heap_span* next = s->next;
            if (s->spare) {
                s->spare = false;
                --spares_[c];
                spare_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
                unlink(c, s);
                release(s);
            }
            s = next;
        }
    }

    // Spares: at most a quarter of the bytes of the spans with blocks out, at least spare_floor (256 KiB).
    std::size_t spare_limit() const noexcept {
        const std::size_t used = in_use_.load(std::memory_order_relaxed), spare = spare_bytes_.load(std::memory_order_relaxed);
        const std::size_t live = used > spare ? used - spare : 0;
        const std::size_t floor = spare_floor >> floor_shift_;
        return live / 4 > floor ? live / 4 : floor;
    }
    bool keep_spare(std::size_t bytes) noexcept {
        const std::size_t limit = spare_limit();
        std::size_t cur = spare_bytes_.load(std::memory_order_relaxed);
        do {
            if (cur + bytes > limit) return false;
        } while (!spare_bytes_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
        return true;
    }

    void link(std::size_t c, heap_span* s) noexcept {
        s->prev = nullptr;
        s->next = partial_[c];
        if (s->next) s->next->prev = s;
        partial_[c] = s;
        s->listed = true;
    }
    void unlink(std::size_t c, heap_span* s) noexcept {
        if (s->prev) s->prev->next = s->next;
        else partial_[c] = s->next;
        if (s->next) s->next->prev = s->prev;
        s->next = s->prev = nullptr;
        s->listed = false;
    }

    // An emptied span to the cache of empty spans (empty_spans).
    void release(heap_span* s) noexcept {
        std::lock_guard<std::mutex> lock(span_mutex_);
        in_use_ -= s->bytes;
        empty_.put(s);
    }

    // \returns an empty span of class c, from the cache (bound as it was), else carved from its size's
    // chunk. \throws what map throws.
    template <class Map>
    heap_span* new_span(std::size_t c, Map& map) {
        const heap_class_info& info = heap_table.info[c];
        std::lock_guard<std::mutex> lock(span_mutex_);
        bool bound = false;
        heap_span* s = empty_.take(info.span_bytes, bound);
        if (!s) {
            making() = this; // under span_mutex_: relieve skips this heap, tries the others
            struct done_making {
                ~done_making() { making() = nullptr; }
            } done;
            s = chunks_.carve(info.span_bytes, info.size, bound, map, [this] { // a mapping failed:
                return empty_.unmap_cold(); // their address space may be what was missing
            });
            empty_.note_carved(info.span_bytes);
        }
        s->next = s->prev = nullptr;
        s->free = nullptr;
        s->bump = reinterpret_cast<char*>(s) + info.first;
        s->end = s->bump + info.capacity * info.size;
        s->bytes = info.span_bytes;
        s->live = 0;
        s->cls = static_cast<std::uint16_t>(c);
        s->listed = false;
        s->bound = bound;
        s->spare = false;
        s->shard = shard_;
        in_use_ += s->bytes;
        return s;
    }

    static span_heap*& making() noexcept { // the span heap this thread maps a span for, or null
        static thread_local span_heap* heap = nullptr;
        return heap;
    }

    std::mutex class_mutex_[heap_class_count]; // guards partial_[c], transfer_[c] and the spans of class c
    transfer_list transfer_[heap_class_count] = {};
    std::atomic<bool> touched_[heap_class_count] = {}; // taken from or given to since the last decay_now
    remote_stack remote_[heap_class_count];
    std::atomic<std::size_t> transfer_bytes_{0};
    std::mutex span_mutex_;                    // guards the cache and in_use_ (taken inside a class's)
    heap_span* partial_[heap_class_count] = {};
    std::uint32_t spares_[heap_class_count] = {}; // spare spans in partial_[c] (under class c's lock)
    std::atomic<std::size_t> spare_bytes_{0};
    empty_spans empty_; // the cache of empty spans (under span_mutex_)
    span_chunks chunks_;
    unsigned floor_shift_ = 0; // the floors above are shifted right by it (set_shard)
    std::atomic<std::size_t> in_use_{0}; // bytes of spans with blocks out or spare (changed under span_mutex_)
    std::uint8_t shard_ = 0;
};

} // namespace detail
} // namespace numaplace

#endif
