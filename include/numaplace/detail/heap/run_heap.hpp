#ifndef NUMAPLACE_DETAIL_HEAP_RUN_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_RUN_HEAP_HPP_INCLUDED

/// \file
/// The page-run allocator of one node heap: mid-size blocks as runs of whole pages, carved best-fit
/// from 8 MiB regions, coalesced with their free neighbours when freed (boundary tags), and purged
/// (MADV_DONTNEED) oldest first beyond a bound of possibly resident free pages. Where new regions come
/// from is the caller's (node_heap: mapped and bound). Design and measurements: docs/heap.md.

#include "../../memory.hpp"
#include "../linux.hpp"
#include "span.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace numaplace {
namespace detail {

/// Per page of a region, in its header: a run's first and last page carry its length and state; a
/// free run's first page also carries its links (in its bin's list), how many of its pages may be
/// resident (an upper bound: pages of blocks freed into it since it was last purged) and when it was
/// last freed into.
struct run_meta {
    std::uint32_t len;
    std::uint32_t state;
    std::uint32_t dirty;
    std::uint32_t stamp; ///< a count of frees into runs (age = now - stamp)
    run_meta* next;
    run_meta* prev;
};
constexpr std::uint32_t run_state_free = 1, run_state_used = 2;
constexpr std::size_t run_region_bytes = std::size_t(8) << 20;
constexpr std::size_t run_header = 64; ///< the region's fields; the run_meta array follows

/// A region's header, at its start (regions are size-aligned: a block's region is its address masked).
/// Run metadata lives here, never in a free run, whose pages would otherwise be faulted in to link it.
struct run_region {
    std::uint32_t pages; ///< pages of the region
    std::uint32_t first; ///< first page after the header (the metadata)
    std::uint32_t used;  ///< pages in runs handed out
    bool bound;          ///< the heap's policy is in force on it
    run_meta* meta() noexcept { return reinterpret_cast<run_meta*>(reinterpret_cast<char*>(this) + run_header); }
    char* page_at(std::size_t i) noexcept { return reinterpret_cast<char*>(this) + i * page_size(); }
};
static_assert(sizeof(run_region) <= run_header, "region fields fit before the metadata");

/// \returns the region holding `p`.
inline run_region* run_region_of(const void* p) noexcept {
    return reinterpret_cast<run_region*>(reinterpret_cast<std::uintptr_t>(p) & ~(std::uintptr_t(run_region_bytes) - 1));
}

/// The page runs of one node heap, under one mutex.
class run_heap {
public:
    /// \effects hands out up to `want` (>= 1) runs of `pages` pages as a list in `head`; a new region,
    /// from `map(run_region_bytes, size, bound)`, only for the first when no free run fits (`size`: the
    /// run's bytes, for messages; `bound`: whether the heap's policy is in force on it).
    /// \returns how many (at least one). \throws what `map` throws (nothing is taken then).
    template <class Map>
    std::size_t take(std::size_t pages, std::size_t want, heap_block*& head, Map&& map) {
        const std::size_t size = pages * page_size();
        std::lock_guard<std::mutex> lock(mutex_);
        heap_block* list = nullptr;
        std::size_t n = 0;
        for (; n < want; ++n) {
            char* p = carve(pages, size, n == 0, map);
            if (!p) break;
            auto* b = reinterpret_cast<heap_block*>(p);
            b->next = list;
            list = b;
        }
        head = list;
        return n;
    }
    /// \effects takes back a null-terminated list of runs of `pages` pages (coalesced; an empty region
    /// beyond one is unmapped), then purges if over the bound. Never allocates.
    void give(std::size_t pages, heap_block* list) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        while (list) {
            heap_block* b = list;
            list = list->next;
            release(reinterpret_cast<char*>(b), pages);
        }
        purge();
    }

    /// \returns the bytes of runs handed out (thread caches included).
    std::size_t bytes_in_use() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return used_pages_ * page_size();
    }
    /// \returns the bytes of free runs whose pages may be resident.
    std::size_t bytes_dirty() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return dirty_pages_ * page_size();
    }

private:
    // Free runs are listed in bins by length: bin k holds runs of k pages (1 <= k <= bin_max), bin 0
    // the longer ones; a bitmap says which bins are not empty. Two sets of bins, clean (purged or never
    // used) and dirty (some pages may be resident): a run is in the set its `dirty` count says, and
    // whoever changes that count moves it. Within a bin, the newest first.
    static constexpr std::size_t bin_max = 256;
    static constexpr std::size_t bins = bin_max + 1;
    static constexpr std::size_t words = (bins + 63) / 64;
    static constexpr std::size_t dirty_floor = std::size_t(1) << 20;

    static std::size_t bin_of(std::size_t len) noexcept { return len <= bin_max ? len : 0; }
    void bin_insert(run_meta* m) noexcept {
        const std::size_t set = m->dirty != 0, b = bin_of(m->len);
        bins_used_[set][b / 64] |= std::uint64_t(1) << (b % 64);
        m->prev = nullptr;
        m->next = bin_[set][b];
        if (m->next) m->next->prev = m;
        bin_[set][b] = m;
    }
    void bin_remove(run_meta* m) noexcept {
        const std::size_t set = m->dirty != 0, b = bin_of(m->len);
        if (m->prev) m->prev->next = m->next;
        else bin_[set][b] = m->next;
        if (m->next) m->next->prev = m->prev;
        if (!bin_[set][b]) bins_used_[set][b / 64] &= ~(std::uint64_t(1) << (b % 64));
        m->next = m->prev = nullptr;
    }
    static void set_run(run_region* r, std::size_t i, std::size_t len, std::uint32_t state, std::size_t dirty) noexcept {
        run_meta* m = r->meta();
        m[i].len = m[i + len - 1].len = static_cast<std::uint32_t>(len);
        m[i].state = m[i + len - 1].state = state;
        m[i].dirty = static_cast<std::uint32_t>(dirty);
    }
    // \returns the free run of one set best fitting `pages`: the first of the smallest non-empty bin
    // >= pages, else the long enough one at the lowest address in bin 0 (so the high end of the address
    // space stays free, coalesces, and its regions empty and go back).
    run_meta* find_in(std::size_t set, std::size_t pages) noexcept {
        if (pages <= bin_max)
            for (std::size_t w = pages / 64; w < words; ++w) {
                std::uint64_t bits = bins_used_[set][w];
                if (w == pages / 64) bits &= ~std::uint64_t(0) << (pages % 64);
                if (bits) return bin_[set][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))];
            }
        run_meta* lowest = nullptr;
        for (run_meta* m = bin_[set][0]; m; m = m->next)
            if (m->len >= pages && (!lowest || m < lowest)) lowest = m;
        return lowest;
    }
    // Dirty runs first (resident pages: no page fault, no new resident memory), a clean one when no
    // dirty one fits.
    run_meta* find(std::size_t pages) noexcept {
        if (run_meta* m = find_in(1, pages)) return m;
        return find_in(0, pages);
    }
    template <class Map>
    run_meta* new_region(std::size_t size, Map& map) {
        bool bound = false;
        auto* r = static_cast<run_region*>(map(run_region_bytes, size, bound));
        const std::size_t page = page_size();
        r->pages = static_cast<std::uint32_t>(run_region_bytes / page);
        r->first = static_cast<std::uint32_t>((run_header + r->pages * sizeof(run_meta) + page - 1) / page);
        r->used = 0;
        r->bound = bound;
        set_run(r, r->first, r->pages - r->first, run_state_free, 0);
        run_meta* m = &r->meta()[r->first];
        m->stamp = clock_;
        bin_insert(m);
        ++empty_regions_;
        return m;
    }
    // \returns a run of `pages` pages, from a new region if `may_map` (else nullptr when none is free).
    template <class Map>
    char* carve(std::size_t pages, std::size_t size, bool may_map, Map& map) {
        run_meta* m = find(pages);
        if (!m) {
            if (!may_map) return nullptr;
            m = new_region(size, map);
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
            dirty_pages_ -= dirty - rest_dirty;
        } else {
            dirty_pages_ -= dirty;
        }
        r->used += static_cast<std::uint32_t>(pages);
        used_pages_ += pages;
        return r->page_at(i);
    }
    // Frees the run of `pages` at `p`: coalesced with its free neighbours; an empty region beyond the
    // one kept is unmapped.
    void release(char* p, std::size_t pages) noexcept {
        run_region* r = run_region_of(p);
        run_meta* m = r->meta();
        std::size_t i = static_cast<std::size_t>(p - reinterpret_cast<char*>(r)) / page_size(), len = pages, dirty = pages;
        r->used -= static_cast<std::uint32_t>(pages);
        used_pages_ -= pages;
        if (i > r->first && m[i - 1].state == run_state_free) { // the run before, by its last page
            run_meta* left = &m[i - m[i - 1].len];
            bin_remove(left);
            i -= left->len;
            len += left->len;
            dirty += left->dirty;
            dirty_pages_ -= left->dirty;
        }
        if (i + len < r->pages && m[i + len].state == run_state_free) { // the run after, by its first page
            run_meta* right = &m[i + len];
            bin_remove(right);
            len += right->len;
            dirty += right->dirty;
            dirty_pages_ -= right->dirty;
        }
        if (r->used == 0) {
            if (empty_regions_ >= 1) { // one empty region is enough
                memory::unmap(r, run_region_bytes);
                return;
            }
            ++empty_regions_;
        }
        set_run(r, i, len, run_state_free, dirty);
        m[i].stamp = ++clock_;
        bin_insert(&m[i]);
        dirty_pages_ += dirty;
    }
    // Beyond the dirty bound (the run pages in use, at least dirty_floor = 1 MiB), gives back the pages
    // of the dirty free runs freed into longest ago until half the bound is left. Ages are bucketed by
    // powers of two: one pass sums the dirty pages per bucket, a second purges from the oldest bucket
    // down to the one that brings the count under the target.
    void purge() noexcept {
        const std::size_t page = page_size(), floor = dirty_floor / page;
        const std::size_t limit = used_pages_ > floor ? used_pages_ : floor;
        if (dirty_pages_ <= limit) return;
        const std::size_t target = limit / 2;
        std::size_t by_age[33] = {};
        for_each_dirty([&](run_meta* m) { by_age[age_bucket(m)] += m->dirty; });
        std::size_t cutoff = 33, left = dirty_pages_;
        while (cutoff > 0 && left > target) left -= by_age[--cutoff];
        for_each_dirty([&](run_meta* m) {
            if (age_bucket(m) < cutoff) return;
            run_region* r = run_region_of(m);
            os_advise(r->page_at(static_cast<std::size_t>(m - r->meta())), m->len * page, page_advice::dont_need);
            bin_remove(m);
            dirty_pages_ -= m->dirty;
            m->dirty = 0;
            bin_insert(m); // now clean
        });
    }
    std::size_t age_bucket(const run_meta* m) const noexcept {
        const std::uint32_t age = clock_ - m->stamp;
        return age == 0 ? 0 : 32 - static_cast<std::size_t>(__builtin_clz(age));
    }
    // Calls f on every dirty free run; f may move the run to the clean set (the next is taken first).
    template <class F>
    void for_each_dirty(F f) noexcept {
        for (std::size_t w = 0; w < words; ++w)
            for (std::uint64_t bits = bins_used_[1][w]; bits; bits &= bits - 1)
                for (run_meta* m = bin_[1][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))]; m;) {
                    run_meta* next = m->next;
                    f(m);
                    m = next;
                }
    }

    std::mutex mutex_;               // guards everything below
    run_meta* bin_[2][bins] = {};    // [clean, dirty][length bin]
    std::uint64_t bins_used_[2][words] = {};
    std::size_t used_pages_ = 0, dirty_pages_ = 0, empty_regions_ = 0;
    std::uint32_t clock_ = 0; // frees into runs so far (wraps; only differences are used)
};

} // namespace detail
} // namespace numaplace

#endif
