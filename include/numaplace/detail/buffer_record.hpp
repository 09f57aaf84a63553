#ifndef NUMAPLACE_DETAIL_BUFFER_RECORD_HPP_INCLUDED
#define NUMAPLACE_DETAIL_BUFFER_RECORD_HPP_INCLUDED

// The record of partitioned buffers: every mapping `partitioned::apply` placed, keyed by its start, with
// the partition layout its pages follow. `replace(container, partition)` changes a buffer's layout here,
// and `partition_of(container)` reads it, so the loop follows the pages after a re-placement (the
// container's allocator still names the layout it allocated with). `memory::unmap` forgets a buffer
// through `detail::unmap_observer`, which the record sets when it is created: every path that
// unmaps a placed buffer goes through `memory::unmap`, and memory.hpp (the mechanism, below partitions)
// need not know what is recorded. `partitioned::apply` forgets whatever overlapped a fresh mapping (an
// address reused). Raw-range `replace` refuses ranges that overlap a recorded buffer (only the container
// overload keeps the loop and the pages in step). Thread-safe; an empty record costs one relaxed atomic
// load per call.

#include "config.hpp"
#include "../memory.hpp"
#include "../partition.hpp"
#include "fork.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace numaplace {
namespace detail {

class placed_buffers {
public:
    struct entry {
        std::size_t bytes = 0;   // page-rounded length of the mapping
        basic_partition layout;  // the layout its pages follow (the allocator's, or a re-placement's)
        bool replaced = false;   // set by replace(): differs from the allocator's layout
    };

    static placed_buffers& instance() {
        // never destroyed: usable during static destruction; fork-safe (handlers below). Subscribed to
        // unmap before anything is recorded, so no recorded buffer is unmapped unseen.
        return cell().get([] {
            auto* r = new placed_buffers;
            unmap_observer.store(&unmapped, std::memory_order_release);
            return r;
        });
    }

    /// \effects records the fresh mapping [p, p + bytes) placed by `layout`, forgetting any overlapped one.
    void placed(const void* p, std::size_t bytes, const basic_partition& layout) {
        std::unique_lock<std::shared_mutex> lock(mutex);
        erase_overlapping(key(p), bytes);
        map_[key(p)] = entry{bytes, layout, false};
        size_.store(map_.size(), std::memory_order_relaxed);
    }
    /// \effects forgets the buffers overlapping [p, p + bytes) (unmapped).
    void released(const void* p, std::size_t bytes) noexcept {
        if (size_.load(std::memory_order_relaxed) == 0) return;
        std::unique_lock<std::shared_mutex> lock(mutex);
        erase_overlapping(key(p), bytes);
        size_.store(map_.size(), std::memory_order_relaxed);
    }
    /// \returns whether the buffer starting at `p` is recorded; `out` is its entry.
    bool find(const void* p, entry& out) const {
        if (size_.load(std::memory_order_relaxed) == 0) return false;
        std::shared_lock<std::shared_mutex> lock(mutex);
        auto it = map_.find(key(p));
        if (it == map_.end()) return false;
        out = it->second;
        return true;
    }
    /// \effects sets the layout of the recorded buffer starting at `p`. \returns false if none is.
    bool relayout(const void* p, const basic_partition& layout, bool replaced) {
        std::unique_lock<std::shared_mutex> lock(mutex);
        auto it = map_.find(key(p));
        if (it == map_.end()) return false;
        it->second.layout = layout;
        it->second.replaced = replaced;
        return true;
    }
    /// \returns whether [p, p + bytes) overlaps a recorded buffer.
    bool overlaps(const void* p, std::size_t bytes) const {
        if (size_.load(std::memory_order_relaxed) == 0 || bytes == 0) return false;
        std::shared_lock<std::shared_mutex> lock(mutex);
        const std::uintptr_t b = key(p), e = b + bytes;
        auto it = map_.lower_bound(e);
        if (it == map_.begin()) return false;
        --it; // the last buffer starting before e
        return it->first + it->second.bytes > b;
    }

private:
    // memory::unmap's observer: set only once the record exists, so instance() returns at once.
    static void unmapped(const void* p, std::size_t bytes) noexcept { instance().released(p, bytes); }
    static std::uintptr_t key(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }
    void erase_overlapping(std::uintptr_t b, std::size_t bytes) noexcept {
        const std::uintptr_t e = b + (bytes == 0 ? 1 : bytes);
        auto it = map_.lower_bound(b);
        if (it != map_.begin()) {
            auto prev = std::prev(it);
            if (prev->first + prev->second.bytes > b) it = prev;
        }
        while (it != map_.end() && it->first < e) it = map_.erase(it);
    }

public:
    static lazy_global<placed_buffers>& cell() noexcept {
        static lazy_global<placed_buffers> c; // constant-initialised: no guard
        return c;
    }
    static std::shared_mutex& lock_of(placed_buffers& r) noexcept { return r.mutex; }

private:
    mutable std::shared_mutex mutex;
    std::map<std::uintptr_t, entry> map_;
    std::atomic<std::size_t> size_{0};
};

// Fork hooks (stage placed_record, after the heaps' gates: a thread inside a gate may unmap, which takes
// this lock): nobody makes the record or holds its lock during fork.
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration placed_buffers_fork NUMAPLACE_EARLY_INIT{
    fork_stage::placed_record,
    locked_global_hooks<placed_buffers, &placed_buffers::cell, std::shared_mutex, &placed_buffers::lock_of>::hook()};
#endif

/// \returns the split `for_bytes(bytes)` of the layout the buffer at `data` follows: a re-placement's if
/// `replace` changed it (and the buffer still has `bytes`), otherwise `allocated` (the allocator's split).
inline basic_partition placed_split(const void* data, std::size_t bytes, const basic_partition& allocated) {
    placed_buffers::entry e;
    if (data && placed_buffers::instance().find(data, e) && e.replaced && e.bytes >= bytes &&
        e.bytes - bytes < page_size())
        return e.layout.for_bytes(bytes);
    return allocated;
}

} // namespace detail
} // namespace numaplace

#endif
