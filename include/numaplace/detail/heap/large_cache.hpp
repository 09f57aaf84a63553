#ifndef NUMAPLACE_DETAIL_HEAP_LARGE_CACHE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_LARGE_CACHE_HPP_INCLUDED

/// \file
/// Blocks above large_run_max (16 MiB) of one node heap, and the large blocks when no region of large
/// runs can be mapped: each its own mapping of a size class (eight classes per power
/// of two, so the mapping's length follows from the request), kept mapped and bound when freed and
/// handed out again for the same class, and given back to the kernel by age (`large_decay_ms`) or
/// beyond a bound (the larger of `large_cache_floor` and the bytes in use). Design: docs/heap.md.

#include "../../memory.hpp"
#include "../linux.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace numaplace {
namespace detail {

/// Requests of more than this many bytes are large blocks.
constexpr std::size_t large_threshold = std::size_t(1) << 20;
/// Large blocks up to this many bytes are runs of the node heap's large run heap (run_heap.hpp); the
/// larger ones are this cache's.
constexpr std::size_t large_run_max = std::size_t(16) << 20;
/// Cached blocks kept at least up to this many bytes per heap whatever is in use.
constexpr std::size_t large_cache_floor = std::size_t(16) << 20;
/// A cached block unused for this long goes back to the kernel at the heap's next large operation.
constexpr std::int64_t large_decay_ms = 1000;
/// Size classes per power of two (the mapping of a request is at most 1/8 larger than its pages).
constexpr std::size_t large_steps = 8;
/// Classes up to 2^large_max_log2 pages (beyond: an own mapping, never cached).
constexpr std::size_t large_max_log2 = 40;
constexpr std::size_t large_classes = (large_max_log2 + 1) * large_steps;

/// The size class of a large request of `pages` pages (> 0, < 2^large_max_log2): its class index and
/// the class's pages.
struct large_class {
    std::size_t index = 0;
    std::size_t pages = 0;
};
inline large_class large_class_of(std::size_t pages) noexcept {
    std::size_t log2 = 0;
    while ((pages >> (log2 + 1)) != 0) ++log2;
    const std::size_t step = log2 >= 3 ? std::size_t(1) << (log2 - 3) : 1;
    const std::size_t rounded = (pages + step - 1) / step * step; // at most 2^(log2 + 1)
    std::size_t l = 0;
    while ((rounded >> (l + 1)) != 0) ++l;
    const std::size_t sub = l >= 3 ? (rounded >> (l - 3)) - large_steps : rounded - 1; // 0..7
    return {l * large_steps + sub, rounded};
}

/// The cached large blocks of one heap, under one mutex. A cached block holds its own links in its first
/// bytes (its first page is resident anyway: it was handed out and freed).
class large_cache {
public:
    /// \returns whether `bytes` at `alignment` is a large block this cache serves (else: own mapping).
    static bool serves(std::size_t bytes, std::size_t alignment) noexcept {
        if (bytes <= large_threshold || !memory::page_round_fits(bytes)) return false;
        const std::size_t pages = memory::page_round(bytes) / page_size();
        if ((pages >> large_max_log2) != 0) return false;
        return alignment <= block_alignment(large_class_of(pages).pages * page_size());
    }
    /// \returns the start alignment of a block of `length` bytes: huge pages for blocks of one or more,
    /// so that transparent huge pages can serve them where the placement allows.
    static std::size_t block_alignment(std::size_t length) noexcept {
        return length >= huge_page_size() ? huge_page_size() : page_size();
    }
    /// \returns the mapping length of a large block of `bytes` (serves(bytes) true).
    static std::size_t length_of(std::size_t bytes) noexcept {
        return large_class_of(memory::page_round(bytes) / page_size()).pages * page_size();
    }

    /// \effects hands out a block of `bytes` (serves(bytes) true): a cached one of its class, or
    /// `map(length, alignment)` (a new mapping, placed). \throws what `map` throws.
    template <class Map>
    void* take(std::size_t bytes, Map&& map) {
        const large_class c = large_class_of(memory::page_round(bytes) / page_size());
        const std::size_t length = c.pages * page_size();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            const std::int64_t now = os_now_ms();
            decay(now);
            if (entry* e = by_class_[c.index]) {
                unlink(e, c.index);
                in_use_ += length;
                return e;
            }
            in_use_ += length;
        }
        try {
            return map(length, block_alignment(length));
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            in_use_ -= length;
            throw;
        }
    }

    /// \effects takes back a block `take(bytes)` handed out: cached, or unmapped beyond the bound or
    /// when not `reusable` (replace() moved its pages). Never allocates.
    void give(void* p, std::size_t bytes, bool reusable = true) noexcept {
        const large_class c = large_class_of(memory::page_round(bytes) / page_size());
        const std::size_t length = c.pages * page_size();
        std::unique_lock<std::mutex> lock(mutex_);
        in_use_ -= length;
        if (!reusable) {
            lock.unlock();
            return memory::unmap(p, length);
        }
        const std::int64_t now = os_now_ms();
        auto* e = static_cast<entry*>(p);
        e->pages = c.pages;
        e->freed_at = now;
        link(e, c.index);
        decay(now);
        trim(limit());
    }

    /// \effects gives the blocks unused for large_decay_ms back to the kernel. Never allocates.
    void decay_now() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        decay(os_now_ms());
    }
    /// \effects gives every cached block back to the kernel. Never allocates.
    void release_all() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        trim(0);
    }
    /// \returns the bytes cached now.
    std::size_t cached_bytes() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return cached_;
    }

private:
    // A cached block's first bytes: in its class's list (newest first) and in the age list (oldest first).
    struct entry {
        entry* class_next;
        entry* class_prev;
        entry* age_next;
        entry* age_prev;
        std::size_t pages;
        std::int64_t freed_at;
    };

    std::size_t limit() const noexcept { return in_use_ > large_cache_floor ? in_use_ : large_cache_floor; }

    void link(entry* e, std::size_t cls) noexcept {
        e->class_prev = nullptr;
        e->class_next = by_class_[cls];
        if (e->class_next) e->class_next->class_prev = e;
        by_class_[cls] = e;
        e->age_next = nullptr;
        e->age_prev = newest_;
        if (newest_) newest_->age_next = e;
        else oldest_ = e;
        newest_ = e;
        cached_ += e->pages * page_size();
    }
    void unlink(entry* e, std::size_t cls) noexcept {
        if (e->class_prev) e->class_prev->class_next = e->class_next;
        else by_class_[cls] = e->class_next;
        if (e->class_next) e->class_next->class_prev = e->class_prev;
        if (e->age_prev) e->age_prev->age_next = e->age_next;
        else oldest_ = e->age_next;
        if (e->age_next) e->age_next->age_prev = e->age_prev;
        else newest_ = e->age_prev;
        cached_ -= e->pages * page_size();
    }
    void drop_oldest() noexcept {
        entry* e = oldest_;
        const std::size_t length = e->pages * page_size();
        unlink(e, large_class_of(e->pages).index);
        memory::unmap(e, length);
    }
    // Blocks unused for large_decay_ms go back to the kernel.
    void decay(std::int64_t now) noexcept {
        while (oldest_ && now - oldest_->freed_at >= large_decay_ms) drop_oldest();
    }
    // Oldest first, until at most `bytes` are cached.
    void trim(std::size_t bytes) noexcept {
        while (oldest_ && cached_ > bytes) drop_oldest();
    }

    std::mutex mutex_;
    entry* by_class_[large_classes] = {};
    entry* oldest_ = nullptr;
    entry* newest_ = nullptr;
    std::size_t cached_ = 0; // bytes of cached blocks
    std::size_t in_use_ = 0; // bytes of blocks handed out
};

} // namespace detail
} // namespace numaplace

#endif
