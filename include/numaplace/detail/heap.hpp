#ifndef NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED

// The per-node heap behind node_allocator (blocks up to 1 MiB), the small blocks of every other
// placement, and node_pool.
//
// - 60 size classes, 16 B to 1 MiB: 16-byte steps to 128 B, then four classes per power of two.
// - A class's blocks live in spans: mappings of a power-of-two size aligned to that size (64 KiB for
//   blocks up to 4 KiB, else the power of two >= 8 blocks), so `block & ~(span_bytes - 1)` is the
//   span's header. Freed blocks go on an intrusive list in their span; a span whose last block comes
//   back first stays listed as a spare of its class (blocks where they were, pages resident) while the
//   heap's spares are at most half the bytes of its other spans (1 MiB floor); beyond that it is kept
//   for reuse by any class (2 MiB resident, more with its pages released by MADV_DONTNEED while they
//   are at most a quarter of the spans in use) and unmapped beyond. Spares above the limit go back on
//   their class's next free (a class never freed into again keeps its spares: not yet bounded).
// - Heaps per node and source: bind-strict, bind-degrading, prefer-strict, prefer-degrading. A span
//   of a strict heap is used only when its policy (MPOL_BIND / MPOL_PREFERRED to the node) was set;
//   a degrading heap falls back to default-policy spans and records it. Spans are admitted against
//   the node's free memory first (memory::admit), so a full node throws instead of OOM-killing.
// - Per-thread caches per heap and class, bounded (at most 256 KiB or two blocks per class, 4 MiB per
//   thread in all); refills and flushes move batches under the mutex of the heap's class.
// - Freeing never allocates (intrusive lists only), so it cannot fail when the address space is
//   exhausted. pthread_atfork handlers take every heap lock around fork(), so a child can allocate.

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

inline heap_span* heap_span_of(void* block, std::size_t c) noexcept {
    return reinterpret_cast<heap_span*>(reinterpret_cast<std::uintptr_t>(block) &
                                        ~(std::uintptr_t(heap_table.info[c].span_bytes) - 1));
}

/// The central heap of one node and source.
class node_heap {
public:
    node_heap(int node, std::size_t source) : node_(node), source_(source) { init_gate(); }

    /// \effects hands out up to `want` (>= 1) blocks of class `c` as a list.
    /// \returns how many (at least one). \throws placement_error when a new span is needed and cannot
    /// be made (no memory on the node; a strict heap whose binding the kernel refuses).
    std::size_t take(std::size_t c, std::size_t want, heap_block*& head) {
        const heap_class_info& info = heap_table.info[c];
        gate_pass pass(fork_gate_);
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

    /// \effects takes back a null-terminated list of class `c`; spans left empty go back to the kernel
    /// (or to the bounded cache). Never allocates.
    void give(std::size_t c, heap_block* list) noexcept {
        gate_pass pass(fork_gate_);
        std::lock_guard<std::mutex> lock(class_mutex_[c]);
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
        if (spare_bytes_.load(std::memory_order_relaxed) > spare_limit()) // the live set shrank
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

private:
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

    heap_span* new_span(std::size_t c) {
        const heap_class_info& info = heap_table.info[c];
        std::lock_guard<std::mutex> lock(span_mutex_);
        heap_span* s = reuse(info.span_bytes);
        bool bound = s ? s->bound : false;
        if (!s) {
            void* p = nullptr;
            const memory::policy_mode mode = prefer() ? memory::policy_mode::preferred : memory::policy_mode::bind;
            const node_set nodes{node_};
            if (memory::admit(info.span_bytes, mode, nodes) != 0)
                throw_placement(node_, info.size, ENOMEM, "heap: no free memory left for a span on the node");
            int err = memory::try_map(info.span_bytes, info.span_bytes, p);
            if (err != 0) throw_placement(node_, info.size, err, "heap: mmap of a span failed");
            err = memory::bind(p, info.span_bytes, mode, nodes);
            if (err != 0 && strict()) {
                memory::unmap(p, info.span_bytes);
                throw_placement(node_, info.size, err,
                                std::string("heap: mbind ") + memory::name(mode) + " of a new span refused");
            }
            if (err != 0)
                degradation_log::instance().record(std::string("heap: mbind ") + memory::name(mode) + " to node " +
                                                   std::to_string(node_) + " refused (errno " + std::to_string(err) +
                                                   "): span left to first touch");
            bound = err == 0;
            s = static_cast<heap_span*>(p);
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
        in_use_ += s->bytes;
        return s;
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
        memory::detail::capacity::instance(); // made before the fork handlers lock it
        degradation_log::instance();
    }

public:
    // Fork handlers, registered at static initialisation (heap_fork_handlers below), so that they
    // exist before any thread can be inside the heap. `prepare` first completes (or makes) the
    // topology and the heaps: a fork while another thread is still initialising them would leave the
    // child waiting on that thread's static-initialisation guard forever. Lock order: heaps' fork gates
    // (in index order), then the capacity accounting, then the degradation log (a heap admits spans
    // and records a degradation while inside its gate).
    static bool& fork_locked() noexcept {
        static bool locked = false;
        return locked;
    }
    static void prepare() noexcept {
        try {
            auto& r = instance();
            for (std::size_t i = 0; i < r.count_; ++i) r.heaps_[i]->close();
            memory::detail::capacity::instance().mutex().lock();
            degradation_log::instance().mutex.lock();
            fork_locked() = true;
        } catch (...) { // no topology: no heap to protect
        }
    }
    static void resume(bool child) noexcept {
        if (!fork_locked()) return;
        fork_locked() = false;
        auto& r = instance();
        degradation_log::instance().mutex.unlock();
        memory::detail::capacity::instance().mutex().unlock();
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

/// One thread's cached blocks, per heap and class (lists made on first use of a heap).
class heap_cache {
public:
    ~heap_cache() {
        flush_all();
        for (std::size_t h = 0; h < count_; ++h) delete[] lists_[h];
        delete[] lists_;
        current() = nullptr;
        state() = dead;
    }

    void* allocate(std::size_t heap, std::size_t c) {
        list* ls = lists_[heap];
        if (__builtin_expect(ls == nullptr, 0)) ls = lists_[heap] = new list[heap_class_count]();
        list& l = ls[c];
        if (__builtin_expect(l.head == nullptr, 0)) {
            l.count = heap_registry::instance().at(heap).take(c, heap_table.info[c].batch, l.head);
            bytes_ += l.count * heap_table.info[c].size;
        }
        heap_block* b = l.head;
        l.head = b->next;
        --l.count;
        bytes_ -= heap_table.info[c].size;
        return b;
    }
    /// \returns false if this thread has no list for the heap (the caller frees centrally).
    bool deallocate(std::size_t heap, std::size_t c, void* p) noexcept {
        list* ls = lists_[heap];
        if (!ls) return false;
        list& l = ls[c];
        auto* b = static_cast<heap_block*>(p);
        b->next = l.head;
        l.head = b;
        ++l.count;
        bytes_ += heap_table.info[c].size;
        if (__builtin_expect(l.count > heap_table.info[c].cache_max, 0)) trim(heap, c, heap_table.info[c].batch);
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
                for (std::size_t c = 0; c < heap_class_count; ++c) trim(h, c, 0);
    }

private:
    static constexpr std::size_t budget = std::size_t(4) << 20;
    // Over budget: gives back this heap's largest classes first until half the budget is left.
    void shrink(std::size_t heap) noexcept {
        for (std::size_t c = heap_class_count; c-- > 0 && bytes_ > budget / 2;) trim(heap, c, 0);
        if (bytes_ > budget / 2) flush_all();
    }
    struct list {
        heap_block* head;
        std::size_t count;
    };
    heap_cache() : count_(heap_registry::instance().size()) {
        lists_ = new list*[count_]();
    }
    // Keeps the first `keep` blocks, gives the rest back.
    void trim(std::size_t heap, std::size_t c, std::size_t keep) noexcept {
        list& l = lists_[heap][c];
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
        bytes_ -= (l.count - keep) * heap_table.info[c].size;
        l.count = keep;
        heap_registry::instance().at(heap).give(c, rest);
    }
    std::size_t count_;
    list** lists_;
    std::size_t bytes_ = 0;
};

inline std::size_t heap_index(int node, std::size_t source) noexcept {
    return static_cast<std::size_t>(node) * heap_sources + source;
}

/// \returns a block of class `c` from heap `heap` (see heap_index). \throws placement_error.
inline void* heap_allocate(std::size_t heap, std::size_t c) {
    if (heap_cache* tc = heap_cache::get()) return tc->allocate(heap, c);
    heap_block* b = nullptr; // this thread's cache is gone (thread or process exit): one block centrally
    heap_registry::instance().at(heap).take(c, 1, b);
    return b;
}
/// \effects gives a block of class `c` back to heap `heap`. Never allocates.
inline void heap_deallocate(std::size_t heap, std::size_t c, void* p) noexcept {
    heap_cache* tc = heap_cache::current();
    if (tc && tc->deallocate(heap, c, p)) return;
    auto* b = static_cast<heap_block*>(p);
    b->next = nullptr;
    heap_registry::instance().at(heap).give(c, b);
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

/// \returns the heap class serving `bytes` at `alignment` for `Placement`, or heap_no_class (own
/// mapping). Single-node placements pool every class up to 1 MiB; the others pool below a page
/// (their larger blocks must be spread page by page).
template <class Placement>
std::size_t placed_class(std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t c = heap_class(bytes, alignment);
    if (std::is_same<Placement, on_node>::value) return c;
    return bytes < page_size() && c != heap_no_class && heap_table.info[c].size <= page_size() ? c : heap_no_class;
}

/// \returns `bytes` (0 allowed) aligned to `alignment` (a power of two), placed by `placement`: from
/// the heap of its home node, or its own mapping. \throws placement_error (a std::bad_alloc): no
/// memory, size overflow, a strict placement refused, or an alignment that is not a power of two.
template <class Placement>
void* placed_allocate(const Placement& placement, std::size_t bytes, std::size_t alignment) {
    const std::size_t c = placed_class<Placement>(bytes, alignment);
    if (c != heap_no_class) return heap_allocate(heap_index(placement.home_node(), heap_source_of(placement)), c);
    return memory::allocate(bytes, placement, alignment);
}
/// \effects releases what `placed_allocate(placement, bytes, alignment)` returned. Never allocates.
template <class Placement>
void placed_deallocate(const Placement& placement, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    const std::size_t c = placed_class<Placement>(bytes, alignment);
    if (c != heap_no_class) heap_deallocate(heap_index(placement.home_node(), heap_source_of(placement)), c, p);
    else memory::unmap(p, bytes);
}

} // namespace detail
} // namespace numaplace

#endif
