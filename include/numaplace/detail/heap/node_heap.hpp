#ifndef NUMAPLACE_DETAIL_HEAP_NODE_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_NODE_HEAP_HPP_INCLUDED

/// \file
/// The central heap of one node and source: its spans and its page runs behind one fork gate, and the
/// one way they get new memory (mapped, then placed by `detail::place`: admitted, bound, strict or
/// degrading as the source says). Design: docs/heap.md.

#include "../../error.hpp"
#include "../../memory.hpp"
#include "../../place.hpp"
#include "../../topology.hpp"
#include "../config.hpp"
#include "../moved_ranges.hpp"
#include "heap_index.hpp"
#include "large_cache.hpp"
#include "run_shards.hpp"
#include "sharded.hpp"
#include "shared_spans.hpp"
#include "size_classes.hpp"
#include "span.hpp"
#include "span_heap.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <pthread.h>

namespace numaplace {
namespace detail {

/// The central heap of one node and source. Its span classes are `shards` span heaps: a thread takes
/// its blocks from one (thread_cache: threads in turn), a block goes back to its span's, so threads of
/// different shards share no lock, list or span (faster with many threads freeing each other's blocks,
/// at more memory: docs/heap.md). Page runs and large blocks are the node heap's alone.
class node_heap {
public:
    /// `shards`: the span heaps it may be split into, 1 to heap_shards_max; shard 0's is made now, the
    /// others at their first take.
    /// `run_shards`: the run heaps (run_shards.hpp), 1 to heap_run_shards_max.
    node_heap(int node, heap_source source, std::size_t shards = 1, std::size_t run_shards = 1)
        : node_(node), source_(source), huge_align_(topology::get().capabilities().thp == "always"),
          shards_(shards), runs_(huge_align_, run_shards) {
        init_gate();
        shared_.raise_limit(shared_spans::per_shard);
        auto* first = new span_heap;
        first->set_shard(0, &shared_);
        spans_[0].store(first, std::memory_order_relaxed);
    }
    node_heap(const node_heap&) = delete;
    node_heap& operator=(const node_heap&) = delete;
    ~node_heap() {
        for (auto& s : spans_) delete s.load(std::memory_order_relaxed);
    }

    /// \effects hands out up to `want` (>= 1) blocks of slot `slot` (see heap_slot) as a list in `head`,
    /// span blocks from shard `shard` (< shards()).
    /// \returns how many (at least one). \throws placement_error when new memory is needed and cannot
    /// be had (no memory on the node; a strict heap whose binding the kernel refuses).
    std::size_t take(std::size_t slot, std::size_t want, heap_block*& head, std::size_t shard = 0) {
        gate_pass pass(fork_gate_);
        if (slot >= heap_class_count) { // runs are handed out one at a time
            const std::size_t pages = slot - heap_class_count;
            auto* b = static_cast<heap_block*>(take_run(pages * page_size(), pages, 1));
            b->next = nullptr;
            head = b;
            return 1;
        }
        const auto map = [this](std::size_t bytes, std::size_t size, bool& bound) { return map_bound(bytes, size, bound); };
        return spans_made(shard).take(slot, want, head, map);
    }

    /// \effects takes back a null-terminated list of `count` blocks of slot `slot`; memory left empty
    /// goes back to the kernel or to the bounded caches. Never allocates.
    void give(std::size_t slot, heap_block* list, std::size_t count) noexcept {
        gate_pass pass(fork_gate_);
        if (slot >= heap_class_count) {
            while (list) {
                heap_block* b = list;
                list = list->next;
                give_run(b, slot - heap_class_count);
            }
            return;
        }
        if (shards_ == 1 || !heap_sharded().load(std::memory_order_relaxed)) return spans(0).give(slot, list, count);
        give_to_shards(slot, list, count);
    }

    /// \effects takes back one block of slot `slot` freed by a thread that caches none of this heap: a
    /// span block goes on its class's remote stack without a lock or the fork gate (span_heap::give_one).
    /// Never allocates.
    void give_one(std::size_t slot, heap_block* b) noexcept {
        if (slot >= heap_class_count) {
            gate_pass pass(fork_gate_);
            return give_run(b, slot - heap_class_count);
        }
        span_heap& own = spans(shards_ == 1 || !heap_sharded().load(std::memory_order_relaxed) ? 0 : heap_span_of(b, slot)->shard);
        const span_heap::remote_push pushed = own.give_one(slot, b); // lock-free: no gate
        if (pushed == span_heap::remote_push::pushed) return;
        gate_pass pass(fork_gate_);
        own.drain_remote_now(slot, pushed == span_heap::remote_push::refused ? b : nullptr);
    }

    /// \effects hands out a large block of `bytes` aligned to `alignment` (large_cache::serves): up to
    /// large_run_max, a page run (with THP `always`, huge-page aligned from a huge page: THP serves it
    /// whole); beyond (or when no region can be mapped), a cached block of its class or a new mapping,
    /// admitted and reserved until unmapped. Placed by the source on the node.
    /// \throws placement_error (no memory on the node; a strict heap whose binding is refused).
    void* take_large(std::size_t bytes, std::size_t alignment) {
        gate_pass pass(fork_gate_);
        const std::size_t page = page_size(), pages = memory::page_round(bytes) / page;
        if (pages * page <= large_run_max) {
            std::size_t align = alignment > page ? alignment / page : 1;
            if (huge_align_ && pages * page >= huge_page_size() && align < huge_page_size() / page) align = huge_page_size() / page;
            if (void* p = take_run(bytes, pages, align)) return p;
        }
        return large_.take(bytes, [this, bytes](std::size_t length, std::size_t start_alignment) {
            void* p = nullptr;
            int refusal = 0;
            bool bound;
            try {
                p = map_placed(length, start_alignment, range_origin::fresh, bound, refusal);
            } catch (const placement_error& e) { // named by the request, not its size class
                throw large_refusal(bytes, length, e.error_number());
            }
            if (!p) throw_unmapped(bytes, refusal);
            return p;
        });
    }
    /// \effects takes back a block take_large(bytes) handed out. Never allocates.
    void give_large(void* p, std::size_t bytes) noexcept {
        gate_pass pass(fork_gate_);
        const std::size_t page = page_size(), pages = memory::page_round(bytes) / page;
        if (pages * page <= large_run_max && return_run(p, pages, true)) return;
        // beyond the runs, or mapped alone when no region could be: unmapped if replace() moved it
        large_.give(p, bytes, !moved_since_handed_out(p, large_cache::length_of(bytes)));
    }
    /// \effects marks the runs handed out that [begin, end) overlaps as moved by replace() (`policy`: it
    /// set their policy too): when freed, their pages go back to the kernel and their policy is set again
    /// before the run is reused. \returns true when the range lies in one of this heap's regions.
    bool mark_moved(std::uintptr_t begin, std::uintptr_t end, bool policy) noexcept {
        gate_pass pass(fork_gate_);
        bool any = false;
        for (std::size_t k = 0; k < runs_.count(); ++k) any = runs_.at(k).mark_moved(begin, end, policy) || any;
        return any;
    }
    /// \effects gives every free page of the heap back to the kernel: the free runs' pages, the empty
    /// regions and spans, the cached large blocks. Never allocates.
    void release_free() noexcept {
        gate_pass pass(fork_gate_);
        for (std::size_t k = 0; k < shards_; ++k)
            if (span_heap* h = spans_[k].load(std::memory_order_acquire)) h->release_all();
        shared_.unmap_all();
        for (std::size_t k = 0; k < runs_.count(); ++k) runs_.at(k).release_all();
        large_.release_all();
    }
    /// \effects what the decay gives back at the heap's next operation, now: free runs and cached large
    /// blocks unused for a second; and parked span blocks of classes idle since the previous call (the
    /// span heap's decay runs only here). Never allocates.
    void decay_now() noexcept {
        gate_pass pass(fork_gate_);
        for (std::size_t k = 0; k < shards_; ++k)
            if (span_heap* h = spans_[k].load(std::memory_order_acquire)) h->decay_now();
        shared_.decay_now();
        for (std::size_t k = 0; k < runs_.count(); ++k) runs_.at(k).decay_now();
        large_.decay_now();
    }
    /// \effects span_heap::relieve on every shard, if the heap is open now (no fork closing it: its gate is
    /// only tried, a fork waits for the readers). \returns whether any cold spans were unmapped.
    bool relieve() noexcept {
        if (::pthread_rwlock_tryrdlock(&fork_gate_) != 0) return false;
        bool any = false;
        for (std::size_t k = 0; k < shards_; ++k)
            if (span_heap* h = spans_[k].load(std::memory_order_acquire)) any = h->relieve() || any;
        any = shared_.unmap_all() || any; // empty spans: address space given back too
        ::pthread_rwlock_unlock(&fork_gate_);
        return any;
    }
    /// \returns the bytes of cached large blocks (free large runs not included).
    std::size_t large_cached_bytes() noexcept {
        gate_pass pass(fork_gate_);
        return large_.cached_bytes();
    }

    /// \effects closes the heap before a fork: then no thread is inside take or give, so none holds a
    /// lock of its spans or runs.
    void close() noexcept { ::pthread_rwlock_wrlock(&fork_gate_); }
    /// \effects reopens it after a fork; in the child also makes the gate anew.
    /// \notes glibc's rwlock knows its writer by thread id, which differs in the child: the unlock
    /// there only tells ThreadSanitizer, and the fresh gate is what glibc uses from then on.
    void reopen(bool child) noexcept {
        ::pthread_rwlock_unlock(&fork_gate_);
        if (child) init_gate();
    }

    /// \returns the bytes of span blocks freed but not in their spans: transfer lists (given back whole
    /// by thread caches) and remote stacks (freed by threads without a cache list).
    std::size_t parked_bytes() noexcept {
        std::size_t n = 0;
        for (std::size_t k = 0; k < shards_; ++k)
            if (span_heap* h = spans_[k].load(std::memory_order_acquire)) n += h->parked_bytes();
        return n;
    }
    /// \returns the bytes of empty spans the shards share now (shared_spans).
    std::size_t shared_span_bytes() noexcept {
        gate_pass pass(fork_gate_); // its mutex: no fork while it is held
        return shared_.bytes();
    }
    /// \returns the span heaps this heap may be split into (made or not).
    std::size_t shards() const noexcept { return shards_; }
    /// \returns the span heaps made (shard 0's, and each other one a thread cache took from).
    std::size_t shards_made() const noexcept {
        std::size_t n = 0;
        for (const auto& h : spans_) n += h.load(std::memory_order_acquire) != nullptr;
        return n;
    }
    /// \returns the bytes of page runs handed out (thread caches included).
    std::size_t run_bytes_in_use() noexcept { return runs_.sum(&run_heap::bytes_in_use); }
    /// \returns the bytes of free page runs whose pages may be resident.
    std::size_t run_bytes_dirty() noexcept { return runs_.sum(&run_heap::bytes_dirty); }
    /// \returns the bytes of the page runs' regions (mapped, resident or not).
    std::size_t run_bytes_mapped() noexcept { return runs_.sum(&run_heap::bytes_mapped); }
    /// \returns the run heaps (node_heap's constructor).
    std::size_t run_shards() const noexcept { return runs_.count(); }

private:
    // give() with shards: each block back to its span's shard, in the list's order; a list of one
    // shard's blocks (a thread's own, the common case) whole.
    void give_to_shards(std::size_t slot, heap_block* list, std::size_t count) noexcept {
        if (!list) return;
        const std::uint8_t first = heap_span_of(list, slot)->shard;
        heap_block* other[heap_shards_max] = {};
        heap_block** end[heap_shards_max] = {};
        std::size_t others[heap_shards_max] = {};
        for (heap_block** at = &list; *at;) {
            heap_block* b = *at;
            const std::uint8_t k = heap_span_of(b, slot)->shard;
            if (k == first) {
                at = &b->next;
                continue;
            }
            *at = b->next; // onto the end of its shard's list: the order kept, the latest freed first
            b->next = nullptr;
            *(others[k] == 0 ? &other[k] : end[k]) = b;
            end[k] = &b->next;
            ++others[k];
            --count;
        }
        spans(first).give(slot, list, count);
        for (std::size_t k = 0; k < shards_; ++k)
            if (other[k]) spans(k).give(slot, other[k], others[k]);
    }
    // The span heap of shard `k`, which exists (a block of it is at hand, or k is 0).
    span_heap& spans(std::size_t k) noexcept { return *spans_[k].load(std::memory_order_acquire); }
    // The span heap of shard `k` (< shards_), made at its first take. \throws std::bad_alloc.
    span_heap& spans_made(std::size_t k) {
        span_heap* h = spans_[k].load(std::memory_order_acquire);
        if (NUMAPLACE_LIKELY(h != nullptr)) return *h;
        std::unique_ptr<span_heap> made(new span_heap);
        made->set_shard(static_cast<std::uint8_t>(k), &shared_);
        if (spans_[k].compare_exchange_strong(h, made.get(), std::memory_order_acq_rel, std::memory_order_acquire)) {
            span_heap* mine = made.release();
            shared_.raise_limit(shards_made() * shared_spans::per_shard); // 256 KiB a shard in use
            return *mine;
        }
        return *h; // another thread made it first
    }

    // \returns a run of `pages` pages at a multiple of `align` pages for a request of `bytes`, its
    // pages that are not resident admitted. When no region can be mapped (the address space limit), a
    // mid-size run is mapped alone and a large block is nullptr (the caller maps it through the class
    // cache).
    // \throws placement_error (no memory on the node; a strict heap whose binding is refused).
    void* take_run(std::size_t bytes, std::size_t pages, std::size_t align) {
        std::size_t clean = 0;
        int refusal = 0; // mmap's errno when no region could be mapped
        char* p = nullptr;
        const std::size_t own = runs_.own();
        try {
            p = runs_.at(own).take(pages, align, clean, [&](std::size_t region, std::size_t, bool& bound) {
                // bound whole; admitted run by run below
                void* r = map_placed(region, region, range_origin::unadmitted, bound, refusal);
                if (!r) throw_unmapped(bytes, refusal);
                return r;
            });
        } catch (const placement_error& e) {
            if (refusal == 0) {
                if (bytes <= large_threshold) throw;
                throw large_refusal(bytes, run_region_bytes, e.error_number());
            } // no region (the address space limit): the other run heaps' free runs, else mapped alone
            if (!(p = runs_.take_mapping_nothing(own, pages, align, clean))) {
                if (bytes > large_threshold) return nullptr; // the caller maps it alone
                return map_alone(bytes, pages * page_size()); // a mid-size run: here
            }
        }
        if (clean != 0) {
            try {
                admit_or_throw(p, clean * page_size(), source_.mode(), node_set{node_}, "heap: ", range_origin::pooled);
            } catch (const placement_error& e) {
                give_run(p, pages, clean != pages); // resident if any page was (counted whole: purged sooner)
                if (bytes <= large_threshold) throw;
                throw large_refusal(bytes, pages * page_size(), e.error_number());
            }
        }
        return p;
    }
    // A run of `length` bytes mapped on its own (no region could be mapped: the address space limit),
    // placed as a fresh mapping (admitted, reserved until unmapped). give_run unmaps it.
    void* map_alone(std::size_t bytes, std::size_t length) {
        int refusal = 0;
        bool bound;
        void* p = map_placed(length, page_size(), range_origin::fresh, bound, refusal);
        if (!p) throw_unmapped(bytes, refusal);
        return p;
    }
    // Takes back a run of `pages`: to its region (`dirty`: its pages may be resident), or unmapped when
    // it was mapped alone.
    void give_run(void* p, std::size_t pages, bool dirty = true) noexcept {
        if (return_run(p, pages, dirty)) return;
        (void)moved_since_handed_out(p, pages * page_size()); // forgotten with its mapping
        memory::unmap(p, pages * page_size());
    }
    // Takes back a run of `pages` to its region, first back on this heap's node when replace() moved it.
    // \returns false, doing nothing, when `p` is in none of this heap's regions.
    bool return_run(void* p, std::size_t pages, bool dirty) noexcept {
        for (std::size_t k = 0; k < runs_.count(); ++k) {
            if (const std::uint32_t marks = runs_.at(k).take_moved(p)) {
                if (!restore_moved(p, pages * page_size(), marks)) return true; // kept out of use
                dirty = false;
            }
            if (runs_.at(k).give(p, pages, dirty)) return true;
        }
        return false;
    }
    // A run whose pages replace() moved goes back to this heap's node before anyone gets it again: its
    // pages given back to the kernel (the next user faults them in where the heap binds) and, when
    // replace() set another policy, the heap's set again. \returns false when a strict heap's binding
    // is refused: the run then stays out of use, never handed out unbound.
    bool restore_moved(void* p, std::size_t length, std::uint32_t marks) noexcept {
        os_advise(p, length, page_advice::dont_need);
        if ((marks & run_mark_policy) == 0) return true;
        try {
            place(p, length, source_.mode(), node_set{node_}, source_.fb, "heap: ", range_origin::unadmitted);
            return true;
        } catch (...) {
            return false;
        }
    }

    // \returns a new mapping of `length` bytes at a multiple of `alignment`, placed by the source on the
    // node as `origin` says (`bound` false when a degrading heap's binding was refused: recorded), or
    // nullptr when mmap refused it (`refusal` its errno; memory::try_map has tried again after every
    // heap's cold spans were unmapped).
    // \throws placement_error when placing it failed (admission, binding), having unmapped it.
    void* map_placed(std::size_t length, std::size_t alignment, range_origin origin, bool& bound, int& refusal) {
        void* p = nullptr;
        refusal = memory::try_map(length, alignment, p);
        if (refusal != 0) return nullptr;
        try {
            bound = place(p, length, source_.mode(), node_set{node_}, source_.fb, "heap: ", origin);
        } catch (...) {
            memory::unmap(p, length);
            throw;
        }
        return p;
    }
    // \throws placement_error for a request of `request` bytes whose mapping mmap refused.
    [[noreturn]] void throw_unmapped(std::size_t request, int refusal) const {
        throw_placement(node_, request, refusal, "heap: mmap failed: " + refusal_reason(refusal, true, request));
    }

    // The refusal of a large block of `bytes` (`length` bytes mapped), named by the request.
    placement_error large_refusal(std::size_t bytes, std::size_t length, int refusal) const {
        return placement_error(node_, bytes, refusal,
                               std::string("heap: a large block (") + std::to_string(length) + " bytes mapped) " +
                                   (refusal == ENOMEM ? "is more than the free memory of the node"
                                                      : std::string("was refused: ") + refusal_reason(refusal)));
    }

    // \returns a new span mapping of `bytes` aligned to `bytes` for blocks of `size`, placed by the source
    // on the node (pooled: not reserved, a heap's mappings stay mapped for reuse, their pages touched and
    // untouched), `bound` false when a degrading heap's binding was refused (recorded).
    // \throws placement_error (`size` names a failed mapping; admission and binding name `bytes`).
    void* map_bound(std::size_t bytes, std::size_t size, bool& bound) {
        int refusal = 0;
        void* p = map_placed(bytes, bytes, range_origin::pooled, bound, refusal);
        if (!p) throw_unmapped(size, refusal);
        return p;
    }

    // Every take and give holds the gate shared; the fork hook holds it exclusively. One lock per heap
    // for fork (ThreadSanitizer tracks at most 64 held locks), writer-preferring so that a fork is not
    // starved by busy threads.
    void init_gate() noexcept {
        pthread_rwlockattr_t attr;
        ::pthread_rwlockattr_init(&attr);
        ::pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        ::pthread_rwlock_init(&fork_gate_, &attr);
        ::pthread_rwlockattr_destroy(&attr);
    }
    struct gate_pass {
        explicit gate_pass(pthread_rwlock_t& g) noexcept : gate(g) { ::pthread_rwlock_rdlock(&gate); }
        ~gate_pass() { ::pthread_rwlock_unlock(&gate); }
        pthread_rwlock_t& gate;
    };

    int node_;
    heap_source source_;
    bool huge_align_; // THP `always`: large runs of a huge page or more start on one (docs/heap.md)
    pthread_rwlock_t fork_gate_;
    std::size_t shards_;
    shared_spans shared_; // empty spans any shard reuses while the heap is sharded (before spans_: outlives them)
    std::atomic<span_heap*> spans_[heap_shards_max] = {}; // made on first use (spans_made), never unmade

    detail::run_shards runs_; // (qualified: run_shards() names the count here)
    large_cache large_;
};

} // namespace detail
} // namespace numaplace

#endif
