#ifndef NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED

// The per-node heap behind node_allocator (blocks up to 1 MiB), the small blocks of every other
// placement, and node_pool.
//
// - 60 size classes, 16 B to 1 MiB: 16-byte steps to 128 B, then four classes per power of two.
// - Mid sizes (classes of whole pages from 4 pages = 16 KiB up to 1 MiB, at alignments up to a page)
//   are page runs of the request's own whole pages (not its class's size, which is 9% more for sizes
//   spread log-uniformly): carved best-fit from 8 MiB regions of the heap's node (a run longer than
//   1 MiB: the one at the lowest address, so that the high end of the address space stays free and
//   its regions empty), and coalesced with their free neighbours when freed (boundary tags), so a freed
//   1 MiB block can serve four 256 KiB ones and the footprint follows the bytes in use, not the sum of
//   each size's high-water mark. Free runs whose pages may be resident
//   ("dirty", counted as the pages freed into them since their last purge) are bounded per heap by the
//   run bytes in use (at least 1 MiB); beyond, the runs freed into longest ago are given back with
//   MADV_DONTNEED until half the bound is left (they stay mapped and bound, so a later fault lands on
//   the node again). A heap whose blocks are all freed therefore keeps at most 1 MiB of dirty runs; a
//   busy one reuses its recent runs without page faults. One empty region is kept, others are
//   unmapped. Run metadata lives in the region's header pages, never in a free run (whose pages would
//   otherwise be faulted in again just to link it).
// - The other classes' blocks live in spans: mappings of a power-of-two size aligned to that size (64 KiB for
//   blocks up to 4 KiB, else the power of two >= 8 blocks), so `block & ~(span_bytes - 1)` is the
//   span's header. Freed blocks go on an intrusive list in their span; a span whose last block comes
//   back first stays listed as a spare of its class (blocks where they were, pages resident) while the
//   heap's spares are at most half the bytes of its other spans (1 MiB floor); beyond that it is kept
//   for reuse by any class (2 MiB resident, more with its pages released by MADV_DONTNEED while they
//   are at most a quarter of the spans in use) and unmapped beyond. Spares above the limit go back on
//   their class's next free, or on a free into another class when its lock is free (try_lock).
// - Heaps per node and source: bind-strict, bind-degrading, prefer-strict, prefer-degrading. A span
//   of a strict heap is used only when its policy (MPOL_BIND / MPOL_PREFERRED to the node) was set;
//   a degrading heap falls back to default-policy spans and records it. Spans are admitted against
//   the node's free memory first (memory::admit), so a full node throws instead of OOM-killing.
// - Per-thread caches per heap and class, bounded (at most 256 KiB or two blocks per class, 4 MiB per
//   thread in all); refills and flushes move batches under the mutex of the heap's class. Runs: two
//   blocks per length, at most 1 MiB of runs per thread (beyond, the other lengths' blocks go back,
//   longest first), refilled one block at a time.
// - Freeing never allocates (intrusive lists only), so it cannot fail when the address space is
//   exhausted. A pthread_atfork handler closes every heap's gate around fork() (no thread is then
//   inside a heap, so none holds a heap lock) after completing the heaps, so a child can allocate;
//   the accounting and the log have their own handlers (detail/fork_guard.hpp).

#include "../error.hpp"
#include "../memory.hpp"
#include "../placement.hpp"
#include "../topology.hpp"
#include "linux.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include <pthread.h>
#include <sys/mman.h>

namespace numaplace {
namespace detail {

constexpr std::size_t heap_class_count = 60;
constexpr std::size_t heap_max_block = std::size_t(1) << 20;
constexpr std::size_t heap_no_class = heap_class_count;
constexpr std::size_t heap_sources = 4; // bind-strict, bind-degrade, prefer-strict, prefer-degrade

constexpr std::size_t heap_class_size(std::size_t c) noexcept {
    if (c < 8) return (c + 1) * 16;
    const std::size_t k = 7 + (c - 8) / 4, idx = (c - 8) % 4;
    return (idx + 5) << (k - 2);
}
/// \requires 1 <= size <= heap_max_block.
inline std::size_t heap_class_of(std::size_t size) noexcept {
    if (size <= 128) return (size + 15) / 16 - 1;
    const std::size_t s = size - 1;
    const std::size_t k = 63 - static_cast<std::size_t>(__builtin_clzll(s));
    return 8 + (k - 7) * 4 + ((s >> (k - 2)) - 4);
}
/// \returns the class serving `bytes` at `alignment` (every block of a class is aligned to the
/// largest power of two dividing its size), or heap_no_class: too large, or not a power of two.
inline std::size_t heap_class(std::size_t bytes, std::size_t alignment) noexcept {
    if (bytes > heap_max_block) return heap_no_class;
    if (bytes == 0) bytes = 1;
    if (alignment <= 16) return heap_class_of(bytes);
    if ((alignment & (alignment - 1)) != 0 || alignment > heap_max_block) return heap_no_class;
    const std::size_t size = (bytes + alignment - 1) & ~(alignment - 1); // no overflow: both <= 1 MiB
    if (size > heap_max_block) return heap_no_class;
    std::size_t c = heap_class_of(size);
    while (c < heap_class_count && (heap_class_size(c) & (alignment - 1)) != 0) ++c;
    return c;
}

/// Slots: what the thread caches and heaps are indexed by. Slot c < heap_class_count is class c in
/// spans; slot heap_class_count + n is a page run of n pages (4 <= n <= heap_run_pages_max, blocks
/// aligned to a page only): a run is the request's whole pages, not its class's size.
constexpr std::size_t heap_run_pages_max = heap_max_block / 4096; // pages are at least 4 KiB
constexpr std::size_t heap_slots = heap_class_count + heap_run_pages_max + 1;
constexpr std::size_t heap_no_slot = heap_slots;
/// The first class that can be a page run (16 KiB: four pages of 4 KiB, the smallest page size).
constexpr std::size_t heap_run_first = 35;
static_assert(heap_class_size(heap_run_first) == 16384, "the first run class is 16 KiB");
/// \returns true if class `c` is served as page runs at alignments up to a page: whole pages, at least four.
inline bool heap_run_class(std::size_t c) noexcept {
    if (c < heap_run_first) return false;
    const std::size_t page = page_size(), size = heap_class_size(c);
    return size >= 4 * page && size % page == 0;
}
/// \returns the slot serving `bytes` at `alignment`, or heap_no_slot (own mapping). A run class's
/// request is a run of its own pages (more than 3.5 pages: its class is over 14 KiB at 4 KiB pages).
inline std::size_t heap_slot(std::size_t bytes, std::size_t alignment) noexcept {
    // the common case inline: default alignment, a size below the run classes
    if (alignment <= 16 && bytes < 16384) return heap_class_of(bytes == 0 ? 1 : bytes);
    const std::size_t c = heap_class(bytes, alignment);
    if (c == heap_no_class) return heap_no_slot;
    const std::size_t page = page_size();
    if (alignment > page || !heap_run_class(c)) return c;
    return heap_class_count + ((bytes + page - 1) >> __builtin_ctzll(page)); // a power of two: no division
}

struct heap_block {
    heap_block* next;
};

/// A span's header, at its start.
struct heap_span {
    heap_span* next;
    heap_span* prev;
    heap_block* free; // blocks given back
    char* bump;       // the next block never handed out
    char* end;        // the end of the last block
    std::size_t bytes;
    std::uint32_t live; // blocks out (users and thread caches)
    std::uint16_t cls;
    bool listed; // in its class's list of spans with blocks to give
    bool bound;  // the heap's policy is in force on it
    bool spare;  // empty, kept listed (counted in the heap's spare bytes)
};

struct heap_class_info {
    std::size_t size, span_bytes, first, capacity, cache_max, batch;
};
constexpr heap_class_info heap_info_of(std::size_t c) noexcept {
    heap_class_info i{};
    i.size = heap_class_size(c);
    std::size_t span = std::size_t(64) << 10;
    while (span < 8 * i.size) span *= 2;
    if (i.size <= 4096) span = std::size_t(64) << 10;
    i.span_bytes = span;
    const std::size_t low = i.size & (~i.size + 1); // largest power of two dividing the size
    const std::size_t header = (sizeof(heap_span) + 63) / 64 * 64;
    i.first = (header + low - 1) / low * low;
    i.capacity = (span - i.first) / i.size;
    std::size_t cap = (std::size_t(256) << 10) / i.size;
    i.cache_max = cap < 2 ? 2 : cap > 256 ? 256 : cap;
    i.batch = i.cache_max / 2 < 1 ? 1 : i.cache_max / 2;
    return i;
}
struct heap_tables {
    heap_class_info info[heap_class_count];
    constexpr heap_tables() : info() {
        for (std::size_t c = 0; c < heap_class_count; ++c) info[c] = heap_info_of(c);
    }
};
inline constexpr heap_tables heap_table{};
static_assert(sizeof(heap_span) <= 64, "span header fits in its first 64 bytes");
static_assert(heap_class_size(heap_class_count - 1) == heap_max_block, "classes end at 1 MiB");

/// A slot's block size and thread-cache bounds: its class's; for a run of n pages, n pages, two blocks
/// cached (and at most 1 MiB of runs in all, see heap_cache), refilled one block at a time (runs'
/// sizes spread over many slots: a batch would mostly wait in the cache).
struct heap_slot_info {
    std::size_t size, cache_max, batch;
};
inline heap_slot_info heap_slot_info_of(std::size_t slot) noexcept {
    if (__builtin_expect(slot < heap_class_count, 1)) {
        const heap_class_info& i = heap_table.info[slot];
        return {i.size, i.cache_max, i.batch};
    }
    return {(slot - heap_class_count) * page_size(), 2, 1};
}

inline heap_span* heap_span_of(void* block, std::size_t c) noexcept {
    return reinterpret_cast<heap_span*>(reinterpret_cast<std::uintptr_t>(block) &
                                        ~(std::uintptr_t(heap_table.info[c].span_bytes) - 1));
}

/// Page runs. Per page of a region, in its header: a run's first and last page carry its length and
/// state; a free run's first page also carries its links (in its bin's list) and how many of its pages
/// may be resident (an upper bound: pages of blocks freed into it since it was last purged).
struct run_meta {
    std::uint32_t len;
    std::uint32_t state;
    std::uint32_t dirty;
    std::uint32_t stamp; // when it was last freed into (a count of frees; age = now - stamp)
    run_meta* next;
    run_meta* prev;
};
constexpr std::uint32_t run_state_free = 1, run_state_used = 2;
constexpr std::size_t run_region_bytes = std::size_t(8) << 20;
constexpr std::size_t run_header = 64; // the region's fields; the run_meta array follows
/// A region's header, at its start (size-aligned: a block's region is its address masked).
struct run_region {
    std::uint32_t pages; // pages of the region
    std::uint32_t first; // first page after the header (the metadata)
    std::uint32_t used;  // pages in runs handed out
    bool bound;          // the heap's policy is in force on it
    run_meta* meta() noexcept { return reinterpret_cast<run_meta*>(reinterpret_cast<char*>(this) + run_header); }
    char* page_at(std::size_t i) noexcept { return reinterpret_cast<char*>(this) + i * page_size(); }
};
static_assert(sizeof(run_region) <= run_header, "region fields fit before the metadata");
inline run_region* run_region_of(const void* p) noexcept {
    return reinterpret_cast<run_region*>(reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t(run_region_bytes) - 1));
}

/// The central heap of one node and source.
class node_heap {
public:
    node_heap(int node, std::size_t source) : node_(node), source_(source) { init_gate(); }

    /// \effects hands out up to `want` (>= 1) blocks of slot `slot` (see heap_slot) as a list.
    /// \returns how many (at least one). \throws placement_error when a new span or region is needed
    /// and cannot be made (no memory on the node; a strict heap whose binding the kernel refuses).
    std::size_t take(std::size_t slot, std::size_t want, heap_block*& head) {
        gate_pass pass(fork_gate_);
        if (slot >= heap_class_count) return run_take(slot - heap_class_count, want, head);
        const std::size_t c = slot;
        const heap_class_info& info = heap_table.info[c];
        std::lock_guard<std::mutex> lock(class_mutex_[c]);
        std::size_t n = 0;
        heap_block* list = nullptr;
        while (n < want) {
            heap_span* s = partial_[c];
            if (!s) {
                if (n > 0) break;
                s = new_span(c);
                link(c, s);
            }
            if (s->spare) { // an empty spare span in use again
                s->spare = false;
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

    /// \effects takes back a null-terminated list of slot `slot`; spans and regions left empty go back
    /// to the kernel (or to the bounded caches). Never allocates.
    void give(std::size_t slot, heap_block* list) noexcept {
        gate_pass pass(fork_gate_);
        if (slot >= heap_class_count) return run_give(slot - heap_class_count, list);
        const std::size_t c = slot;
        {
            std::lock_guard<std::mutex> lock(class_mutex_[c]);
            give_spans(c, list);
        }
        // Spares above the limit in classes not freed into (an idle class): given back when their
        // lock is free now, never waited for (this thread may not hold two class locks).
        for (std::size_t d = 0; d < heap_class_count && spare_bytes_.load(std::memory_order_relaxed) > spare_limit(); ++d) {
            if (d == c) continue;
            std::unique_lock<std::mutex> other(class_mutex_[d], std::try_to_lock);
            if (other.owns_lock()) trim_spares(d);
        }
    }

    /// \effects closes the heap before a fork: then no thread is inside take or give, so none holds a
    /// class or span lock.
    void close() noexcept { ::pthread_rwlock_wrlock(&fork_gate_); }
    /// \effects reopens it after a fork: unlocks; in the child also makes the gate anew (glibc's rwlock
    /// knows its writer by thread id, which differs in the child, so the unlock there only tells
    /// ThreadSanitizer; the fresh gate is what glibc uses from then on).
    void reopen(bool child) noexcept {
        ::pthread_rwlock_unlock(&fork_gate_);
        if (child) init_gate();
    }

    /// Bytes of page runs handed out, and of free runs whose pages may be resident (tests, reports).
    std::size_t run_bytes_in_use() noexcept {
        std::lock_guard<std::mutex> lock(run_mutex_);
        return run_used_pages_ * page_size();
    }
    std::size_t run_bytes_dirty() noexcept {
        std::lock_guard<std::mutex> lock(run_mutex_);
        return run_dirty_pages_ * page_size();
    }

private:
    // Class c's spans, under its lock.
    void give_spans(std::size_t c, heap_block* list) noexcept {
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
                    continue;
                }
                unlink(c, s);
                release(s);
            }
        }
        trim_spares(c); // the live set shrank
    }
    // Gives class c's spares back while the heap's spares are above the limit (under c's lock).
    void trim_spares(std::size_t c) noexcept {
        for (heap_span* s = partial_[c]; s && spare_bytes_.load(std::memory_order_relaxed) > spare_limit();) {
            heap_span* next = s->next;
            if (s->spare) {
                s->spare = false;
                spare_bytes_.fetch_sub(s->bytes, std::memory_order_relaxed);
                unlink(c, s);
                release(s);
            }
            s = next;
        }
    }

    void init_gate() noexcept {
        pthread_rwlockattr_t attr;
        ::pthread_rwlockattr_init(&attr);
        ::pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        ::pthread_rwlock_init(&fork_gate_, &attr);
        ::pthread_rwlockattr_destroy(&attr);
    }
    // Every take and give holds the gate shared; fork's prepare handler holds it exclusively. One
    // lock per heap for fork (ThreadSanitizer tracks at most 64 held locks), writer-preferring so
    // that a fork is not starved by busy threads.
    struct gate_pass {
        explicit gate_pass(pthread_rwlock_t& g) noexcept : gate(g) { ::pthread_rwlock_rdlock(&gate); }
        ~gate_pass() { ::pthread_rwlock_unlock(&gate); }
        pthread_rwlock_t& gate;
    };
    static constexpr std::size_t cache_floor = std::size_t(2) << 20;
    static constexpr std::size_t spare_floor = std::size_t(1) << 20;

    // An emptied span stays listed as a spare of its class (not re-carved: a block is reused where it
    // was, its pages still resident, no madvise, no fault) while the heap's spares are at most half of
    // the bytes of its spans with blocks out, or 4 MiB. A class whose live count swings around a span
    // boundary (a mixed workload) then neither gives pages back nor faults them in again. When the
    // live set shrinks, a class's next free gives its spares beyond that limit back.
    std::size_t spare_limit() const noexcept {
        const std::size_t used = in_use_.load(std::memory_order_relaxed), spare = spare_bytes_.load(std::memory_order_relaxed);
        const std::size_t live = used > spare ? used - spare : 0;
        return live / 2 > spare_floor ? live / 2 : spare_floor;
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
    bool strict() const noexcept { return source_ % 2 == 0; }
    bool prefer() const noexcept { return source_ >= 2; }

    // Empty spans are kept for reuse, bound as they were (no mmap, no mbind): up to 2 MiB of them
    // "hot" (pages still resident: no page faults either), the rest "cold" (pages given back with
    // MADV_DONTNEED, header page kept) while the cold ones are at most a quarter of the spans in use;
    // beyond that they are unmapped. All freed, a heap keeps at most 2 MiB resident.
    static std::size_t bucket(std::size_t bytes) noexcept {
        return static_cast<std::size_t>(__builtin_ctzll(bytes)) - 16; // 64 KiB .. 8 MiB: 0 .. 7
    }
    std::size_t cold_limit() const noexcept {
        const std::size_t used = in_use_.load(std::memory_order_relaxed);
        return used / 4 > cache_floor ? used / 4 : cache_floor;
    }
    void release(heap_span* s) noexcept {
        std::lock_guard<std::mutex> lock(span_mutex_);
        in_use_ -= s->bytes;
        const std::size_t b = bucket(s->bytes);
        if (hot_bytes_ + s->bytes <= cache_floor) {
            s->next = hot_[b];
            hot_[b] = s;
            hot_bytes_ += s->bytes;
            return;
        }
        const std::size_t page = page_size();
        ::madvise(reinterpret_cast<char*>(s) + page, s->bytes - page, MADV_DONTNEED);
        s->next = cold_[b];
        cold_[b] = s;
        cold_bytes_ += s->bytes;
        for (std::size_t k = span_buckets; k-- > 0 && cold_bytes_ > cold_limit();)
            while (cold_[k] && cold_bytes_ > cold_limit()) {
                heap_span* victim = cold_[k];
                cold_[k] = victim->next;
                cold_bytes_ -= victim->bytes;
                memory::unmap(victim, victim->bytes);
            }
    }
    heap_span* reuse(std::size_t bytes) noexcept {
        const std::size_t b = bucket(bytes);
        if (heap_span* s = hot_[b]) {
            hot_[b] = s->next;
            hot_bytes_ -= s->bytes;
            return s;
        }
        if (heap_span* s = cold_[b]) {
            cold_[b] = s->next;
            cold_bytes_ -= s->bytes;
            return s;
        }
        return nullptr;
    }

    // A new mapping of `bytes` aligned to `bytes`, admitted against the node's free memory and bound
    // by the heap's policy. \returns it, with `bound` false when a degrading heap's binding was
    // refused (recorded). \throws placement_error (`size`: the block size, for the message).
    void* map_bound(std::size_t bytes, std::size_t size, bool& bound) {
        void* p = nullptr;
        const memory::policy_mode mode = prefer() ? memory::policy_mode::preferred : memory::policy_mode::bind;
        const node_set nodes{node_};
        if (memory::admit(bytes, mode, nodes) != 0)
            throw_placement(node_, size, ENOMEM, "heap: no free memory left on the node");
        int err = memory::try_map(bytes, bytes, p);
        if (err != 0) throw_placement(node_, size, err, "heap: mmap failed");
        err = memory::bind(p, bytes, mode, nodes);
        if (err != 0 && strict()) {
            memory::unmap(p, bytes);
            throw_placement(node_, size, err, std::string("heap: mbind ") + memory::name(mode) + " of new heap memory refused");
        }
        if (err != 0)
            degradation_log::instance().record(std::string("heap: mbind ") + memory::name(mode) + " to node " +
                                               std::to_string(node_) + " refused (errno " + std::to_string(err) +
                                               "): heap memory left to first touch");
        bound = err == 0;
        return p;
    }

    heap_span* new_span(std::size_t c) {
        const heap_class_info& info = heap_table.info[c];
        std::lock_guard<std::mutex> lock(span_mutex_);
        heap_span* s = reuse(info.span_bytes);
        bool bound = s ? s->bound : false;
        if (!s) s = static_cast<heap_span*>(map_bound(info.span_bytes, info.size, bound));
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
        in_use_ += s->bytes;
        return s;
    }

    // ---- Page runs (under run_mutex_) ----
    // Free runs are listed in bins by length: bin k holds runs of k pages (1 <= k <= run_bin_max),
    // bin 0 the longer ones; a bitmap says which bins are not empty. Dirty and clean runs have bins of
    // their own, and a dirty run that fits is carved first (its pages are likely resident: no faults,
    // no new resident memory). Within a bin, the newest first.
    static constexpr std::size_t run_bin_max = 256;
    static constexpr std::size_t run_bins = run_bin_max + 1;
    static constexpr std::size_t run_words = (run_bins + 63) / 64;
    static constexpr std::size_t run_dirty_floor = std::size_t(1) << 20;

    static std::size_t run_bin(std::size_t len) noexcept { return len <= run_bin_max ? len : 0; }
    // Two sets of bins: dirty runs (some pages may be resident) and clean ones (purged or never used).
    // A run is in the set its `dirty` count says; whoever changes that count moves it.
    void bin_insert(run_meta* m) noexcept {
        const std::size_t set = m->dirty != 0, b = run_bin(m->len);
        run_bins_used_[set][b / 64] |= std::uint64_t(1) << (b % 64);
        m->prev = nullptr;
        m->next = bin_[set][b];
        if (m->next) m->next->prev = m;
        bin_[set][b] = m;
    }
    void bin_remove(run_meta* m) noexcept {
        const std::size_t set = m->dirty != 0, b = run_bin(m->len);
        if (m->prev) m->prev->next = m->next;
        else bin_[set][b] = m->next;
        if (m->next) m->next->prev = m->prev;
        if (!bin_[set][b]) run_bins_used_[set][b / 64] &= ~(std::uint64_t(1) << (b % 64));
        m->next = m->prev = nullptr;
    }
    static void set_run(run_region* r, std::size_t i, std::size_t len, std::uint32_t state, std::size_t dirty) noexcept {
        run_meta* m = r->meta();
        m[i].len = m[i + len - 1].len = static_cast<std::uint32_t>(len);
        m[i].state = m[i + len - 1].state = state;
        m[i].dirty = static_cast<std::uint32_t>(dirty);
    }
    // The free run best fitting `pages` in one set: the first of the smallest non-empty bin >= pages,
    // else the one long enough at the lowest address in bin 0. Carving the long runs from the low
    // end of the address space leaves the high end free: its runs coalesce and its regions empty (one
    // kept, the others unmapped) instead of every region keeping some free pages resident. (The
    // newest long run first instead: BM_Mixed's peak RSS 130 MiB, not 117, with 2 threads.)
    run_meta* find_in(std::size_t set, std::size_t pages) noexcept {
        if (pages <= run_bin_max)
            for (std::size_t w = pages / 64; w < run_words; ++w) {
                std::uint64_t bits = run_bins_used_[set][w];
                if (w == pages / 64) bits &= ~std::uint64_t(0) << (pages % 64);
                if (bits) return bin_[set][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))];
            }
        run_meta* lowest = nullptr;
        for (run_meta* m = bin_[set][0]; m; m = m->next)
            if (m->len >= pages && (!lowest || m < lowest)) lowest = m;
        return lowest;
    }
    // Dirty runs first: reusing pages that are already resident costs neither page faults nor
    // resident memory; a clean run only when no dirty one fits.
    run_meta* find_run(std::size_t pages) noexcept {
        if (run_meta* m = find_in(1, pages)) return m;
        return find_in(0, pages);
    }
    run_meta* new_region(std::size_t size) {
        bool bound = false;
        auto* r = static_cast<run_region*>(map_bound(run_region_bytes, size, bound));
        const std::size_t page = page_size();
        r->pages = static_cast<std::uint32_t>(run_region_bytes / page);
        r->first = static_cast<std::uint32_t>((run_header + r->pages * sizeof(run_meta) + page - 1) / page);
        r->used = 0;
        r->bound = bound;
        set_run(r, r->first, r->pages - r->first, run_state_free, 0);
        run_meta* m = &r->meta()[r->first];
        m->stamp = run_clock_;
        bin_insert(m);
        ++empty_regions_;
        return m;
    }
    // \returns a run of `pages` pages, from a new region if `may_map` (else nullptr when none is free).
    char* run_carve(std::size_t pages, std::size_t size, bool may_map) {
        run_meta* m = find_run(pages);
        if (!m) {
            if (!may_map) return nullptr;
            m = new_region(size);
        }
        run_region* r = run_region_of(m);
        const std::size_t i = static_cast<std::size_t>(m - r->meta()), len = m->len, dirty = m->dirty;
        bin_remove(m);
        if (r->used == 0) --empty_regions_;
        set_run(r, i, pages, run_state_used, 0);
        if (len > pages) { // the rest stays free; it keeps the dirty count that can still be in it
            const std::size_t rest = len - pages, rest_dirty = dirty < rest ? dirty : rest;
            set_run(r, i + pages, rest, run_state_free, rest_dirty);
            r->meta()[i + pages].stamp = m->stamp;
            bin_insert(&r->meta()[i + pages]);
            run_dirty_pages_ -= dirty - rest_dirty;
        } else {
            run_dirty_pages_ -= dirty;
        }
        r->used += static_cast<std::uint32_t>(pages);
        run_used_pages_ += pages;
        return r->page_at(i);
    }
    // Frees the run of `pages` at `p`: coalesced with free neighbours; an empty region beyond the one
    // kept is unmapped.
    void run_release(char* p, std::size_t pages) noexcept {
        run_region* r = run_region_of(p);
        run_meta* m = r->meta();
        std::size_t i = static_cast<std::size_t>(p - reinterpret_cast<char*>(r)) / page_size(), len = pages, dirty = pages;
        r->used -= static_cast<std::uint32_t>(pages);
        run_used_pages_ -= pages;
        if (i > r->first && m[i - 1].state == run_state_free) { // the run before, by its last page
            run_meta* left = &m[i - m[i - 1].len];
            bin_remove(left);
            i -= left->len;
            len += left->len;
            dirty += left->dirty;
            run_dirty_pages_ -= left->dirty;
        }
        if (i + len < r->pages && m[i + len].state == run_state_free) { // the run after, by its first page
            run_meta* right = &m[i + len];
            bin_remove(right);
            len += right->len;
            dirty += right->dirty;
            run_dirty_pages_ -= right->dirty;
        }
        if (r->used == 0) {
            if (empty_regions_ >= 1) { // one empty region is enough
                memory::unmap(r, run_region_bytes);
                return;
            }
            ++empty_regions_;
        }
        set_run(r, i, len, run_state_free, dirty);
        m[i].stamp = ++run_clock_;
        bin_insert(&m[i]);
        run_dirty_pages_ += dirty;
    }
    // Beyond the dirty limit (the run bytes in use, at least 1 MiB), gives back the pages of the dirty
    // free runs freed into longest ago, until half the limit is left: a run not reused for a while is
    // the least likely to be reused soon, and a steady workload reuses its recent runs without a page
    // fault. Ages are bucketed by powers of two (one pass sums the dirty pages per bucket, a second
    // purges from the oldest bucket down to the one that brings the count under the target).
    void run_purge() noexcept {
        const std::size_t page = page_size(), floor = run_dirty_floor / page;
        const std::size_t limit = run_used_pages_ > floor ? run_used_pages_ : floor;
        if (run_dirty_pages_ <= limit) return;
        const std::size_t target = limit / 2;
        std::size_t by_age[33] = {};
        for_each_dirty_run([&](run_meta* m) { by_age[age_bucket(m)] += m->dirty; });
        std::size_t cutoff = 33, left = run_dirty_pages_;
        while (cutoff > 0 && left > target) left -= by_age[--cutoff];
        for_each_dirty_run([&](run_meta* m) {
            if (age_bucket(m) < cutoff) return;
            run_region* r = run_region_of(m);
            ::madvise(r->page_at(static_cast<std::size_t>(m - r->meta())), m->len * page, MADV_DONTNEED);
            bin_remove(m);
            run_dirty_pages_ -= m->dirty;
            m->dirty = 0;
            bin_insert(m); // now clean
        });
    }
    std::size_t age_bucket(const run_meta* m) const noexcept {
        const std::uint32_t age = run_clock_ - m->stamp;
        return age == 0 ? 0 : 32 - static_cast<std::size_t>(__builtin_clz(age));
    }
    // Calls f on every dirty free run; f may move the run to the clean set (the next is taken first).
    template <class F>
    void for_each_dirty_run(F f) noexcept {
        for (std::size_t w = 0; w < run_words; ++w)
            for (std::uint64_t bits = run_bins_used_[1][w]; bits; bits &= bits - 1)
                for (run_meta* m = bin_[1][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))]; m;) {
                    run_meta* next = m->next;
                    f(m);
                    m = next;
                }
    }
    std::size_t run_take(std::size_t pages, std::size_t want, heap_block*& head) {
        const std::size_t size = pages * page_size();
        std::lock_guard<std::mutex> lock(run_mutex_);
        heap_block* list = nullptr;
        std::size_t n = 0;
        for (; n < want; ++n) { // a new region only for the first block
            char* p = run_carve(pages, size, n == 0);
            if (!p) break;
            auto* b = reinterpret_cast<heap_block*>(p);
            b->next = list;
            list = b;
        }
        head = list;
        return n;
    }
    void run_give(std::size_t pages, heap_block* list) noexcept {
        std::lock_guard<std::mutex> lock(run_mutex_);
        while (list) {
            heap_block* b = list;
            list = list->next;
            run_release(reinterpret_cast<char*>(b), pages);
        }
        run_purge();
    }

    int node_;
    std::size_t source_;
    pthread_rwlock_t fork_gate_;
    std::mutex class_mutex_[heap_class_count]; // guards partial_[c] and the spans of class c
    std::mutex span_mutex_;                    // guards the cache and in_use_ (taken inside a class's)
    heap_span* partial_[heap_class_count] = {};
    std::atomic<std::size_t> spare_bytes_{0};
    static constexpr std::size_t span_buckets = 8;
    heap_span* hot_[span_buckets] = {};
    heap_span* cold_[span_buckets] = {};
    std::size_t hot_bytes_ = 0, cold_bytes_ = 0;
    std::atomic<std::size_t> in_use_{0}; // bytes of spans with blocks out or spare (changed under span_mutex_)
    std::mutex run_mutex_; // guards the page runs: bins, regions, counts
    run_meta* bin_[2][run_bins] = {};          // [clean, dirty][length bin]
    std::uint64_t run_bins_used_[2][run_words] = {};
    std::size_t run_used_pages_ = 0, run_dirty_pages_ = 0, empty_regions_ = 0;
    std::uint32_t run_clock_ = 0; // frees into runs so far (wraps; only differences are used)
};

/// Every node's heaps, made once per process (never destroyed: containers with static storage may
/// free into them during static destruction), with the fork handlers.
class heap_registry {
public:
    static heap_registry& instance() {
        static heap_registry* r = new heap_registry(topology::get().size());
        return *r;
    }
    node_heap& at(std::size_t index) noexcept { return *heaps_[index]; }
    std::size_t size() const noexcept { return count_; }

private:
    explicit heap_registry(std::size_t nodes) : count_(nodes * heap_sources) {
        heaps_ = new node_heap*[count_];
        for (std::size_t i = 0; i < count_; ++i) heaps_[i] = new node_heap(static_cast<int>(i / heap_sources), i % heap_sources);
        memory::detail::capacity::instance(); // made with the heaps (the fork handlers complete both)
        degradation_log::instance();
    }

public:
    // Fork handlers, registered at static initialisation (heap_fork_handlers below), so that they
    // exist before any thread can be inside the heap. `prepare` first completes (or makes) the
    // topology and the heaps: a fork while another thread is still initialising them would leave the
    // child waiting on that thread's static-initialisation guard forever. Lock order: heaps' fork gates
    // (in index order); the capacity accounting's and the degradation log's handlers run after this
    // one (registered earlier: memory.hpp, topology.hpp) and lock theirs (a heap admits spans and
    // records a degradation while inside its gate). See detail/fork_guard.hpp.
    static bool& fork_locked() noexcept {
        static bool locked = false;
        return locked;
    }
    static void prepare() noexcept {
        try {
            auto& r = instance();
            for (std::size_t i = 0; i < r.count_; ++i) r.heaps_[i]->close();
            fork_locked() = true;
        } catch (...) { // no topology: no heap to protect
        }
    }
    static void resume(bool child) noexcept {
        if (!fork_locked()) return;
        fork_locked() = false;
        auto& r = instance();
        for (std::size_t i = r.count_; i-- > 0;) r.heaps_[i]->reopen(child);
    }
    static void resume_parent() noexcept { resume(false); }
    static void resume_child() noexcept { resume(true); }

private:
    std::size_t count_;
    node_heap** heaps_;
};

struct heap_fork_handlers {
    heap_fork_handlers() noexcept { ::pthread_atfork(&heap_registry::prepare, &heap_registry::resume_parent, &heap_registry::resume_child); }
};
inline const heap_fork_handlers heap_fork_handlers_registered{};

/// One thread's cached blocks, per heap and slot (lists made on first use of a heap).
class heap_cache {
public:
    ~heap_cache() {
        flush_all();
        for (std::size_t h = 0; h < count_; ++h) delete[] lists_[h];
        delete[] lists_;
        delete[] run_marks_;
        current() = nullptr;
        state() = dead;
    }

    void* allocate(std::size_t heap, std::size_t slot) {
        list* ls = lists_[heap];
        if (__builtin_expect(ls == nullptr, 0)) ls = lists_[heap] = new list[heap_slots]();
        list& l = ls[slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        if (__builtin_expect(l.head == nullptr, 0)) {
            l.count = heap_registry::instance().at(heap).take(slot, info.batch, l.head);
            counted(heap, slot, l.count * info.size, true);
        }
        heap_block* b = l.head;
        l.head = b->next;
        --l.count;
        counted(heap, slot, info.size, false);
        return b;
    }
    /// The fast paths (inlined into the allocators): a block from this thread's list, or nullptr.
    void* try_pop(std::size_t heap, std::size_t slot) noexcept {
        list* ls = lists_[heap];
        if (__builtin_expect(ls == nullptr, 0)) return nullptr;
        list& l = ls[slot];
        heap_block* b = l.head;
        if (__builtin_expect(b == nullptr, 0)) return nullptr;
        l.head = b->next;
        --l.count;
        if (__builtin_expect(slot < heap_class_count, 1)) bytes_ -= heap_table.info[slot].size;
        else counted(heap, slot, heap_slot_info_of(slot).size, false);
        return b;
    }
    /// \returns true if `p` went on this thread's list without going over a bound.
    bool try_push(std::size_t heap, std::size_t slot, void* p) noexcept {
        list* ls = lists_[heap];
        if (__builtin_expect(ls == nullptr, 0)) return false;
        if (__builtin_expect(slot >= heap_class_count, 0)) return try_push_run(heap, slot, p);
        list& l = ls[slot];
        const heap_class_info& info = heap_table.info[slot];
        if (__builtin_expect(l.count >= info.cache_max || bytes_ + info.size > budget, 0)) return false;
        auto* b = static_cast<heap_block*>(p);
        b->next = l.head;
        l.head = b;
        ++l.count;
        bytes_ += info.size;
        return true;
    }
    /// try_push of a run (out of line: the inlined span path stays small). Over the run budget, false:
    /// deallocate then evicts other runs.
    [[gnu::noinline]] bool try_push_run(std::size_t heap, std::size_t slot, void* p) noexcept {
        list& l = lists_[heap][slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        if (l.count >= info.cache_max || bytes_ + info.size > budget || run_bytes_ + info.size > run_budget) return false;
        auto* b = static_cast<heap_block*>(p);
        b->next = l.head;
        l.head = b;
        ++l.count;
        counted(heap, slot, info.size, true);
        return true;
    }
    /// \returns false if this thread has no list for the heap (the caller frees centrally).
    bool deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
        list* ls = lists_[heap];
        if (!ls) return false;
        list& l = ls[slot];
        const heap_slot_info info = heap_slot_info_of(slot);
        auto* b = static_cast<heap_block*>(p);
        b->next = l.head;
        l.head = b;
        ++l.count;
        counted(heap, slot, info.size, true);
        if (__builtin_expect(l.count > info.cache_max, 0)) trim(heap, slot, info.batch);
        if (__builtin_expect(run_bytes_ > run_budget, 0)) evict_runs(heap, slot);
        if (__builtin_expect(bytes_ > budget, 0)) shrink(heap);
        return true;
    }

    enum { none = 0, alive = 1, dead = 2 };
    // Trivially destructible thread-locals (no init guard, readable after the cache is gone).
    static int& state() noexcept {
        static thread_local int s = none;
        return s;
    }
    static heap_cache*& current() noexcept {
        static thread_local heap_cache* c = nullptr;
        return c;
    }
    /// \returns this thread's cache (made on first use), or nullptr once it was destroyed.
    static heap_cache* get() {
        if (heap_cache* c = current()) return c;
        if (state() == dead) return nullptr;
        static thread_local heap_cache cache;
        state() = alive;
        current() = &cache;
        return &cache;
    }
    /// \effects gives every cached block back to its heap.
    void flush_all() noexcept {
        for (std::size_t h = 0; h < count_; ++h)
            if (lists_[h])
                for (std::size_t slot = 0; slot < heap_slots; ++slot) trim(h, slot, 0);
    }

private:
    static constexpr std::size_t budget = std::size_t(4) << 20;
    // Of which page runs at most 1 MiB (the largest run, so that a block of any size cycles through the
    // cache): runs' sizes spread over 253 slots (4 KiB pages), so the cache rarely serves a random size
    // again, and runs cached for that are resident and count as in use, raising the heap's dirty bound
    // (runs cached up to the 4 MiB budget: BM_MixedEveryPage ended 9.2 MiB above its start).
    static constexpr std::size_t run_budget = heap_max_block;
    static constexpr std::size_t run_words = (heap_slots - heap_class_count + 63) / 64;
    // Counts `bytes` of blocks into (`in`) or out of the cache; a run slot that gets blocks is marked in
    // its heap's bitmap (unmarked when evict_heap gives its blocks back).
    void counted(std::size_t heap, std::size_t slot, std::size_t bytes, bool in) noexcept {
        bytes_ = in ? bytes_ + bytes : bytes_ - bytes;
        if (slot < heap_class_count) return;
        run_bytes_ = in ? run_bytes_ + bytes : run_bytes_ - bytes;
        const std::size_t i = slot - heap_class_count;
        if (in) run_marks_[heap * run_words + i / 64] |= std::uint64_t(1) << (i % 64);
    }
    // Gives back heap `heap`'s cached runs but slot `keep`'s, longest first, while over the run budget.
    void evict_heap(std::size_t heap, std::size_t keep) noexcept {
        std::uint64_t* marks = &run_marks_[heap * run_words];
        for (std::size_t w = run_words; w-- > 0 && run_bytes_ > run_budget;)
            for (std::uint64_t bits = marks[w]; bits != 0 && run_bytes_ > run_budget;) {
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
    // newest block stays: the next request of its size finds it).
    void evict_runs(std::size_t heap, std::size_t keep) noexcept {
        evict_heap(heap, keep);
        for (std::size_t h = 0; h < count_ && run_bytes_ > run_budget; ++h)
            if (h != heap && lists_[h]) evict_heap(h, heap_no_slot);
        if (run_bytes_ > run_budget) trim(heap, keep, 1);
    }
    // Over budget: gives back this heap's runs, longest first, then its classes, largest first, until
    // half the budget is left.
    void shrink(std::size_t heap) noexcept {
        for (std::size_t slot = heap_slots; slot-- > 0 && bytes_ > budget / 2;) trim(heap, slot, 0);
        if (bytes_ > budget / 2) flush_all();
    }
    struct list {
        heap_block* head;
        std::size_t count;
    };
    heap_cache() : count_(heap_registry::instance().size()) {
        lists_ = new list*[count_]();
        try {
            run_marks_ = new std::uint64_t[count_ * run_words]();
        } catch (...) { // the cache is not made (the allocation throws bad_alloc): nothing is kept
            delete[] lists_;
            throw;
        }
    }
    // Keeps the first `keep` blocks, gives the rest back.
    void trim(std::size_t heap, std::size_t slot, std::size_t keep) noexcept {
        list& l = lists_[heap][slot];
        if (l.count <= keep) return;
        heap_block* rest;
        if (keep == 0) {
            rest = l.head;
            l.head = nullptr;
        } else {
            heap_block* last = l.head;
            for (std::size_t i = 1; i < keep; ++i) last = last->next;
            rest = last->next;
            last->next = nullptr;
        }
        counted(heap, slot, (l.count - keep) * heap_slot_info_of(slot).size, false);
        l.count = keep;
        heap_registry::instance().at(heap).give(slot, rest);
    }
    std::size_t count_;
    list** lists_;
    std::size_t bytes_ = 0;     // cached, all slots
    std::size_t run_bytes_ = 0; // cached, page runs
    std::uint64_t* run_marks_;  // per heap, the run slots that may have blocks (bit n: runs of n pages)
};

inline std::size_t heap_index(int node, std::size_t source) noexcept {
    return static_cast<std::size_t>(node) * heap_sources + source;
}

/// \returns a block of slot `slot` from heap `heap` (see heap_index, heap_slot). \throws placement_error.
/// (Out of line: the allocators inline only the fast path, heap_cache::try_pop.)
__attribute__((noinline)) inline void* heap_allocate(std::size_t heap, std::size_t slot) {
    if (heap_cache* tc = heap_cache::get()) return tc->allocate(heap, slot);
    heap_block* b = nullptr; // this thread's cache is gone (thread or process exit): one block centrally
    heap_registry::instance().at(heap).take(slot, 1, b);
    return b;
}
/// \effects gives a block of slot `slot` back to heap `heap`. Never allocates.
__attribute__((noinline)) inline void heap_deallocate(std::size_t heap, std::size_t slot, void* p) noexcept {
    heap_cache* tc = heap_cache::current();
    if (tc && tc->deallocate(heap, slot, p)) return;
    auto* b = static_cast<heap_block*>(p);
    b->next = nullptr;
    heap_registry::instance().at(heap).give(slot, b);
}

// Which heap serves a placement's pooled blocks.
inline std::size_t heap_source_of(const on_node& p) noexcept {
    return (p.policy() == node_policy::prefer ? 2u : 0u) + (p.on_refusal() == fallback::degrade ? 1u : 0u);
}
inline std::size_t heap_source_of(const preferred_many& p) noexcept {
    return 2u + (p.on_refusal() == fallback::degrade ? 1u : 0u);
}
template <class Placement>
std::size_t heap_source_of(const Placement& p) noexcept {
    return p.on_refusal() == fallback::degrade ? 1u : 0u;
}

/// \returns the heap slot serving `bytes` at `alignment` for `Placement`, or heap_no_slot (own
/// mapping). Single-node placements pool every class up to 1 MiB; the others pool below a page
/// (their larger blocks must be spread page by page).
template <class Placement>
std::size_t placed_slot(std::size_t bytes, std::size_t alignment) noexcept {
    if (std::is_same<Placement, on_node>::value) return heap_slot(bytes, alignment);
    const std::size_t c = heap_class(bytes, alignment);
    return bytes < page_size() && c != heap_no_class && heap_table.info[c].size <= page_size() ? c : heap_no_slot;
}

// The slow paths of placed_allocate / placed_deallocate, out of line so that the fast path (a slot,
// this thread's list) inlines into every allocator.
template <class Placement>
[[gnu::noinline]] void* placed_own_mapping(const Placement& placement, std::size_t bytes, std::size_t alignment) {
    return memory::allocate(bytes, placement, alignment);
}
[[gnu::noinline]] inline void placed_unmap(void* p, std::size_t bytes) noexcept { memory::unmap(p, bytes); }

/// \returns `bytes` (0 allowed) aligned to `alignment` (a power of two), placed by `placement`: from
/// the heap of its home node, or its own mapping. \throws placement_error (a std::bad_alloc): no
/// memory, size overflow, a strict placement refused, or an alignment that is not a power of two.
template <class Placement>
[[gnu::always_inline]] inline void* placed_allocate(const Placement& placement, std::size_t bytes, std::size_t alignment) {
    const std::size_t slot = placed_slot<Placement>(bytes, alignment);
    if (__builtin_expect(slot == heap_no_slot, 0)) return placed_own_mapping(placement, bytes, alignment);
    const std::size_t heap = heap_index(placement.home_node(), heap_source_of(placement));
    if (heap_cache* tc = heap_cache::current())
        if (void* p = tc->try_pop(heap, slot)) return p;
    return heap_allocate(heap, slot);
}
/// \effects releases what `placed_allocate(placement, bytes, alignment)` returned. Never allocates.
template <class Placement>
[[gnu::always_inline]] inline void placed_deallocate(const Placement& placement, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t slot = placed_slot<Placement>(bytes, alignment);
    if (__builtin_expect(slot == heap_no_slot, 0)) return placed_unmap(p, bytes);
    const std::size_t heap = heap_index(placement.home_node(), heap_source_of(placement));
    if (heap_cache* tc = heap_cache::current())
        if (tc->try_push(heap, slot, p)) return;
    heap_deallocate(heap, slot, p);
}

} // namespace detail
} // namespace numaplace

#endif
