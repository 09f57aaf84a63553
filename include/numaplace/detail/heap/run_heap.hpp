#ifndef NUMAPLACE_DETAIL_HEAP_RUN_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_RUN_HEAP_HPP_INCLUDED

/// \file
/// The page-run allocator of one node heap: blocks of 16 KiB up to large_run_max as runs of whole
/// pages, carved from 64 MiB size-aligned regions, coalesced with their free neighbours when freed
/// (boundary tags). Each free run counts its resident pages (`dirty`: pages of freed blocks, counted
/// with mincore when a partly resident run over 1 MiB is split): runs with resident pages are reused
/// first and stay up to the larger of the pages in use and what the recent peak in use leaves, plus a
/// floor; beyond that the oldest go back (MADV_DONTNEED), and any unused for `run_decay_ms`. Where new
/// regions come from, and admitting the clean pages handed out, are the caller's (node_heap). Design
/// and measurements: docs/heap.md.

#include "../../memory.hpp"
#include "../linux.hpp"
#include "run_marks.hpp"
#include "run_region.hpp"
#include "span.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace numaplace {
namespace detail {


/// The page runs of one node heap, under one mutex.
class run_heap {
public:
    /// `huge_fill`: the kernel may fault in huge pages over these runs (THP `always`): a huge page over
    /// a block makes free pages beside it resident, so a large run's carve counts the free part after
    /// it too (docs/heap.md: vector growth at the bound's edge).
    explicit run_heap(bool huge_fill) noexcept : huge_fill_(huge_fill) {}

    /// \effects hands out one run of `pages` pages starting at a multiple of `align` pages (a power of
    /// two; 1: any page): a dirty free run if one fits, else a clean one, else from a new region,
    /// `map(run_region_bytes, size, bound)` (`size`: the run's bytes, for messages; `bound`: set to
    /// whether the heap's policy is in force on it).
    /// \returns the run, and in `clean` how many of its pages are not resident (new memory the caller
    /// admits). \throws what `map` throws (nothing is taken then).
    template <class Map>
    char* take(std::size_t pages, std::size_t align, std::size_t& clean, Map&& map) {
        std::lock_guard<std::mutex> lock(mutex_);
        const std::uint32_t now = clock();
        char* p = carve(pages, align, map, clean);
        maintain(now);
        return p;
    }
    /// \effects takes back the run of `pages` pages at `p`, resident if `dirty` (else: its pages were
    /// never touched), then gives back free pages over the bound or unused too long; an empty region
    /// beyond one is unmapped. Never allocates.
    /// \returns false, doing nothing, when `p` is in none of this heap's regions (a block the caller
    /// mapped on its own when no region could be mapped).
    bool give(void* p, std::size_t pages, bool dirty = true) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!std::binary_search(regions_.begin(), regions_.end(), run_region_of(p))) return false;
        const std::uint32_t now = clock();
        release(static_cast<char*>(p), pages, dirty, now);
        maintain(now);
        return true;
    }
    /// \effects marks every run handed out that [begin, end) overlaps as moved by replace (`policy`: its
    /// policy was set too), for take_moved. \returns true when [begin, end) lies in one of this heap's
    /// regions. Never allocates.
    bool mark_moved(std::uintptr_t begin, std::uintptr_t end, bool policy) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        bool inside = false;
        const std::size_t page = page_size();
        for (run_region* r : regions_) {
            const auto base = reinterpret_cast<std::uintptr_t>(r);
            if (end <= base || begin >= base + run_region_bytes) continue;
            inside = inside || (begin >= base && end <= base + run_region_bytes);
            run_meta* m = r->meta();
            for (std::size_t i = r->first; i < r->pages; i += m[i].len) { // run by run
                const std::uintptr_t a = base + i * page, e = a + m[i].len * page;
                if ((m[i].state & run_state_used) && a < end && e > begin) {
                    if ((m[i].state & run_mark_moved) == 0) run_marks.add(a);
                    m[i].state |= run_mark_moved | (policy ? run_mark_policy : 0);
                }
            }
        }
        return inside;
    }
    /// \returns the marks of the run handed out at `p` (run_mark_moved, run_mark_policy), cleared; 0
    /// when it has none or `p` is in none of this heap's regions. Never allocates.
    std::uint32_t take_moved(const void* p) noexcept {
        if (run_marks.pending() == 0) return 0;
        std::lock_guard<std::mutex> lock(mutex_);
        run_region* r = run_region_of(p);
        if (!std::binary_search(regions_.begin(), regions_.end(), r)) return 0;
        run_meta& m = r->meta()[(reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(r)) / page_size()];
        const std::uint32_t marks = m.state & (run_mark_moved | run_mark_policy);
        if (marks == 0) return 0;
        m.state &= ~(run_mark_moved | run_mark_policy);
        run_marks.remove(reinterpret_cast<std::uintptr_t>(p));
        return marks;
    }

    /// \effects what an operation does after it: free pages unused for run_decay_ms (or beyond the bound)
    /// go back to the kernel (see maintain). Never allocates.
    void decay_now() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        maintain(clock());
    }
    /// \effects gives every free page back to the kernel and unmaps every empty region: the dirty runs,
    /// the clean ones below their region's reach (a huge page faulted in over a neighbouring block, or a
    /// split's estimate, may have left resident pages in a run counted clean), and the header pages that
    /// describe only the inside of free runs. Never allocates.
    void release_all() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        purge_where([](const run_meta*) { return true; });
        const std::size_t page = page_size();
        for_each_free(0, [page](run_meta* m) {
            run_region* r = run_region_of(m);
            const auto i = static_cast<std::size_t>(m - r->meta());
            if (const std::size_t n = touched_pages(r, i, m->len)) os_advise(r->page_at(i), n * page, page_advice::dont_need);
        });
        for (std::size_t k = regions_.size(); k-- > 0;)
            if (regions_[k]->used == 0) unmap_region(regions_[k]);
        for (run_region* r : regions_) release_run_header(r);
    }

    /// \returns the bytes of runs handed out (thread caches included).
    std::size_t bytes_in_use() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return used_pages_ * page_size();
    }
    /// \returns the bytes of free runs whose pages are resident.
    std::size_t bytes_dirty() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return dirty_pages_ * page_size();
    }
    /// \returns the bytes of this heap's regions (mapped, resident or not).
    std::size_t bytes_mapped() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return regions_.size() * run_region_bytes;
    }

private:
    // Free runs are listed in bins by length: bin k holds runs of k pages (1 <= k <= bin_max), bin 0
    // the longer ones; a bitmap says which bins are not empty. Two sets of bins, clean and dirty. Within
    // a bin, the newest first.
    static constexpr std::size_t bin_max = 256;
    static constexpr std::size_t bins = bin_max + 1;
    static constexpr std::size_t words = (bins + 63) / 64;

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
    static void set_run(run_region* r, std::size_t i, std::size_t len, std::uint32_t state) noexcept {
        run_meta* m = r->meta();
        m[i].len = m[i + len - 1].len = static_cast<std::uint32_t>(len);
        m[i].state = m[i + len - 1].state = state;
    }
    // Lists [i, i + len) of `r` as a free run with `dirty` resident pages, freed at `stamp`.
    void set_free(run_region* r, std::size_t i, std::size_t len, std::size_t dirty, std::uint32_t stamp) noexcept {
        set_run(r, i, len, run_state_free);
        run_meta& m = r->meta()[i];
        m.dirty = static_cast<std::uint32_t>(dirty);
        m.stamp = stamp;
        bin_insert(&m);
        dirty_pages_ += m.dirty;
    }
    // \returns the first page index where `pages` aligned to `align` pages fit in the free run `m`, or
    // 0 (never a run's start: the header is there) when they do not fit.
    static std::size_t fit(run_meta* m, std::size_t pages, std::size_t align) noexcept {
        run_region* r = run_region_of(m);
        const std::size_t i = static_cast<std::size_t>(m - r->meta());
        const std::size_t a = (i + align - 1) & ~(align - 1); // regions are aligned: page index = address
        return a + pages <= i + m->len ? a : 0;
    }
    // \returns the free run of one set best fitting `pages` at `align`: the first of the smallest
    // non-empty bin >= pages (unaligned requests), else the fitting one at the lowest address in bin 0
    // (so the high end of the address space stays free, coalesces, and its regions empty and go back).
    run_meta* find_in(std::size_t set, std::size_t pages, std::size_t align) noexcept {
        if (pages <= bin_max && align == 1)
            for (std::size_t w = pages / 64; w < words; ++w) {
                std::uint64_t bits = bins_used_[set][w];
                if (w == pages / 64) bits &= ~std::uint64_t(0) << (pages % 64);
                if (bits) return bin_[set][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))];
            }
        run_meta* lowest = nullptr;
        for (run_meta* m = bin_[set][0]; m; m = m->next)
            if (m->len >= pages && (!lowest || m < lowest) && fit(m, pages, align) != 0) lowest = m;
        return lowest;
    }
    template <class Map>
    run_meta* new_region(std::size_t size, Map& map) {
        regions_.reserve(regions_.size() + 1); // std::bad_alloc before anything is mapped
        bool bound = false;
        auto* r = static_cast<run_region*>(map(run_region_bytes, size, bound));
        regions_.insert(std::upper_bound(regions_.begin(), regions_.end(), r), r);
        const std::size_t page = page_size();
        r->pages = static_cast<std::uint32_t>(run_region_bytes / page);
        r->first = static_cast<std::uint32_t>((run_header + r->pages * sizeof(run_meta) + page - 1) / page);
        r->used = 0;
        r->reach = r->first;
        r->bound = bound;
        set_free(r, r->first, r->pages - r->first, 0, clock());
        ++empty_regions_;
        return &r->meta()[r->first];
    }
    // Unmaps the empty region `r`, its free runs unlisted first.
    void unmap_region(run_region* r) noexcept {
        run_meta* m = r->meta();
        for (std::size_t i = r->first; i < r->pages; i += m[i].len) {
            bin_remove(&m[i]);
            dirty_pages_ -= m[i].dirty;
        }
        --empty_regions_;
        const auto it = std::lower_bound(regions_.begin(), regions_.end(), r);
        if (it != regions_.end() && *it == r) regions_.erase(it); // never allocates
        memory::unmap(r, run_region_bytes);
    }
    // \returns a run of `pages` pages at a multiple of `align` pages: dirty first (resident pages: no
    // page fault, no new memory), then clean, then from a new region. `clean`: its pages not resident.
    template <class Map>
    char* carve(std::size_t pages, std::size_t align, Map& map, std::size_t& clean) {
        run_meta* m = find_in(1, pages, align);
        if (!m) m = find_in(0, pages, align);
        if (!m) m = new_region(pages * page_size(), map);
        run_region* r = run_region_of(m);
        const std::size_t i = static_cast<std::size_t>(m - r->meta()), len = m->len, a = fit(m, pages, align);
        const std::size_t dirty = m->dirty;
        const std::uint32_t stamp = m->stamp;
        bin_remove(m);
        dirty_pages_ -= dirty;
        if (r->used == 0) --empty_regions_;
        // How many resident pages the part before and the run itself take: all or none when the free
        // run is all dirty or all clean, else counted (mincore) or estimated (below).
        const std::size_t after_len = i + len - (a + pages);
        std::size_t before = 0, mine = 0, after = 0;
        bool counted = false;
        if (dirty == len) before = a - i, mine = pages, after = after_len, counted = true;
        else if (dirty != 0 && pages > bin_max) { // a large run: counted (syscalls, for a block of MiBs)
            counted = count_resident(r->page_at(i), touched_pages(r, i, a - i), before) &&
                      count_resident(r->page_at(a), touched_pages(r, a, pages), mine);
            if (counted && huge_fill_) // the part after too: a huge page over a neighbouring block made
                counted = count_resident(r->page_at(a + pages), touched_pages(r, a + pages, after_len), after); // its free pages resident
            else if (counted) { // pages freed untouched: counted as resident
                if (before > dirty) before = dirty;
                if (before + mine > dirty) mine = dirty - before;
                after = dirty - before - mine;
            }
        }
        if (dirty != 0 && !counted) { // else as if the resident pages were the run's first ones (carved
            before = dirty < a - i ? dirty : a - i; // and freed lowest address first), the sum kept
            mine = dirty - before < pages ? dirty - before : pages;
            after = dirty - before - mine;
        }
        if (a > i) set_free(r, i, a - i, before, stamp); // the parts before and after stay free
        set_run(r, a, pages, run_state_used);
        if (a + pages > r->reach) r->reach = static_cast<std::uint32_t>(a + pages);
        if (after_len != 0) set_free(r, a + pages, after_len, after, stamp);
        clean = pages - mine;
        r->used += static_cast<std::uint32_t>(pages);
        used_pages_ += pages;
        if (used_pages_ > peak_) peak_ = used_pages_;
        return r->page_at(a);
    }
    // Frees the run of `pages` at `p` (all resident if `dirty`, else none): coalesced with its free
    // neighbours, whose resident pages it counts; an empty region beyond the one kept is unmapped.
    void release(char* p, std::size_t pages, bool dirty, std::uint32_t now) noexcept {
        run_region* r = run_region_of(p);
        run_meta* m = r->meta();
        std::size_t i = static_cast<std::size_t>(p - reinterpret_cast<char*>(r)) / page_size(), len = pages;
        std::size_t resident_pages = dirty ? pages : 0;
        r->used -= static_cast<std::uint32_t>(pages);
        used_pages_ -= pages;
        if (i > r->first && m[i - 1].state == run_state_free) { // the run before, by its last page
            run_meta* left = &m[i - m[i - 1].len];
            bin_remove(left);
            dirty_pages_ -= left->dirty;
            resident_pages += left->dirty;
            i -= left->len;
            len += left->len;
        }
        if (i + len < r->pages && m[i + len].state == run_state_free) { // the run after, by its first page
            run_meta* right = &m[i + len];
            bin_remove(right);
            dirty_pages_ -= right->dirty;
            resident_pages += right->dirty;
            len += right->len;
        }
        set_free(r, i, len, resident_pages, now);
        if (r->used == 0) {
            ++empty_regions_;
            if (empty_regions_ > 1) unmap_region(r); // one empty region is enough
        }
    }

    static std::uint32_t clock() noexcept { return static_cast<std::uint32_t>(os_now_ms()); }

    // After every operation: free pages unused for run_decay_ms go back (checked every quarter of it);
    // and while the dirty pages are over the larger of the pages in use and the pages the peak in use
    // of this and the last decay period leaves, plus run_dirty_floor, the oldest dirty runs go back
    // until half of that bound is left. A heap cycling a working set keeps it resident; a steady heap
    // keeps as many freed pages as it has in use (sizes change and freed runs rarely fit exactly); one
    // that shrank gives the excess back at once, the rest within a decay period or two.
    void maintain(std::uint32_t now) noexcept {
        if (now - window_start_ >= run_decay_ms) {
            prev_peak_ = peak_;
            peak_ = used_pages_;
            window_start_ = now;
        }
        if (dirty_pages_ == 0) return;
        if (now - last_decay_ >= run_decay_ms / 4) {
            last_decay_ = now;
            purge_where([now](const run_meta* m) { return now - m->stamp >= run_decay_ms; });
        }
        const std::size_t peak = peak_ > prev_peak_ ? peak_ : prev_peak_; // >= used_pages_
        const std::size_t slack = (peak - used_pages_ > used_pages_ ? peak - used_pages_ : used_pages_) +
                                  run_dirty_floor / page_size();
        if (dirty_pages_ <= slack) return;
        const std::size_t target = slack / 2;
        // Oldest first, by ages bucketed in powers of two: one pass sums the dirty pages per bucket, a
        // second purges from the oldest bucket down to the one that brings the count under the target.
        std::size_t by_age[33] = {};
        for_each_dirty([&](run_meta* m) { by_age[age_bucket(m, now)] += m->dirty; });
        std::size_t cutoff = 33, left = dirty_pages_;
        while (cutoff > 0 && left > target) left -= by_age[--cutoff];
        purge_where([&](const run_meta* m) { return age_bucket(m, now) >= cutoff; });
    }
    static std::size_t age_bucket(const run_meta* m, std::uint32_t now) noexcept {
        const std::uint32_t age = now - m->stamp;
        return age == 0 ? 0 : 32 - static_cast<std::size_t>(__builtin_clz(age));
    }
    // Gives back the pages of the dirty runs `pred` selects (they become clean).
    template <class Pred>
    void purge_where(Pred pred) noexcept {
        const std::size_t page = page_size();
        for_each_dirty([&](run_meta* m) {
            if (!pred(m)) return;
            run_region* r = run_region_of(m);
            os_advise(r->page_at(static_cast<std::size_t>(m - r->meta())), m->len * page, page_advice::dont_need);
            bin_remove(m);
            dirty_pages_ -= m->dirty;
            m->dirty = 0;
            bin_insert(m);
        });
    }
    // \returns how many of the `len` pages from page `from` of `r` may be resident: those below its reach,
    // rounded up to a huge page (a huge page faulted in over the furthest run fills the rest of it).
    static std::size_t touched_pages(const run_region* r, std::size_t from, std::size_t len) noexcept {
        const std::size_t huge = huge_page_size() / page_size();
        const std::size_t end = (r->reach + huge - 1) / huge * huge;
        return end <= from ? 0 : end - from < len ? end - from : len;
    }
    // Counts in `n` how many of the `pages` pages at `p` are resident. \returns false when mincore
    // refuses (`n` unchanged).
    static bool count_resident(char* p, std::size_t pages, std::size_t& n) noexcept {
        unsigned char vec[1024];
        std::size_t count = 0;
        for (std::size_t done = 0; done < pages;) {
            const std::size_t k = pages - done < sizeof vec ? pages - done : sizeof vec;
            if (os_resident(p + done * page_size(), k * page_size(), vec) != 0) return false;
            for (std::size_t j = 0; j < k; ++j) count += vec[j] & 1;
            done += k;
        }
        n = count;
        return true;
    }
    // Calls f on every free run of `set` (0 clean, 1 dirty); f may make a dirty run clean (the next is
    // taken first; free runs are never neighbours, so f never touches the next).
    template <class F>
    void for_each_dirty(F f) noexcept { for_each_free(1, f); }
    template <class F>
    void for_each_free(std::size_t set, F f) noexcept {
        for (std::size_t w = 0; w < words; ++w)
            for (std::uint64_t bits = bins_used_[set][w]; bits; bits &= bits - 1)
                for (run_meta* m = bin_[set][w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits))]; m;) {
                    run_meta* next = m->next;
                    f(m);
                    m = next;
                }
    }

    std::mutex mutex_; // guards everything below
    run_meta* bin_[2][bins] = {}; // [clean, dirty][length bin]
    std::uint64_t bins_used_[2][words] = {};
    std::size_t used_pages_ = 0, dirty_pages_ = 0, empty_regions_ = 0;
    std::size_t peak_ = 0, prev_peak_ = 0;            // pages in use at most, this decay period and the last
    std::uint32_t window_start_ = 0, last_decay_ = 0; // ms (truncated)
    std::vector<run_region*> regions_;                // sorted
    const bool huge_fill_;                            // see the constructor
};

} // namespace detail
} // namespace numaplace

#endif
