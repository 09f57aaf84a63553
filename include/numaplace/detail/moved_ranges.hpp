#ifndef NUMAPLACE_DETAIL_MOVED_RANGES_HPP_INCLUDED
#define NUMAPLACE_DETAIL_MOVED_RANGES_HPP_INCLUDED

/// \file
/// The ranges whose pages `replace` moved outside the heap's page runs and outside partitioned buffers
/// (which keep their own records): an own mapping (interleaved, weighted, over-aligned, a node block
/// over 16 MiB) or anybody's memory. A cache of freed mappings asks here before it keeps a block: one
/// that a recorded range overlaps is not reused as it is (its pages may sit on other nodes, its policy
/// may differ), it is unmapped. A bounded table under one mutex; when full, it forgets nothing: it
/// says "moved" for every block from then on (the caches stop reusing, which is always correct).
/// Why: docs/replace.md.

#include "config.hpp"
#include "fork.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace numaplace {
namespace detail {

/// Non-zero while a range is recorded (or the table was full once): the caches' fast path reads only this.
inline std::atomic<unsigned> moved_ranges_used{0};

class moved_ranges {
public:
    static constexpr std::size_t slots = 256;

    /// \returns the process's table, made on first use. Never destroyed. \throws std::bad_alloc.
    static moved_ranges& instance() {
        return cell().get([] { return new moved_ranges(); });
    }
    static lazy_global<moved_ranges>& cell() noexcept {
        static lazy_global<moved_ranges> c; // constant-initialised: no guard
        return c;
    }
    std::mutex& mutex() noexcept { return mutex_; }

    /// \effects records [begin, end) as moved (joined with the recorded ranges it overlaps or touches).
    /// Never allocates.
    void add(std::uintptr_t begin, std::uintptr_t end) noexcept {
        if (begin >= end) return;
        std::lock_guard<std::mutex> lock(mutex_);
        moved_ranges_used.store(1, std::memory_order_relaxed);
        if (full_) return;
        std::size_t k = 0;
        for (std::size_t i = 0; i < n_; ++i) { // joins every range it overlaps or touches
            if (range_[i].end >= begin && range_[i].begin <= end) {
                begin = range_[i].begin < begin ? range_[i].begin : begin;
                end = range_[i].end > end ? range_[i].end : end;
            } else {
                range_[k++] = range_[i];
            }
        }
        n_ = k;
        if (n_ == slots) {
            full_ = true;
            return;
        }
        range_[n_++] = {begin, end};
    }

    /// \effects forgets the part of every recorded range inside [p, p + bytes) (the block goes back to
    /// the kernel). \returns true when a recorded range overlaps it (or the table was full once).
    /// Never allocates.
    bool take(const void* p, std::size_t bytes) noexcept {
        if (moved_ranges_used.load(std::memory_order_relaxed) == 0) return false;
        const auto begin = reinterpret_cast<std::uintptr_t>(p);
        const std::uintptr_t end = begin + bytes;
        std::lock_guard<std::mutex> lock(mutex_);
        if (full_) return true;
        bool hit = false;
        for (std::size_t i = 0; i < n_; ++i) {
            range& r = range_[i];
            if (r.end <= begin || r.begin >= end) continue;
            hit = true;
            if (r.begin < begin && r.end > end) { // the block is inside: two parts stay
                if (n_ == slots) {
                    full_ = true;
                    return true;
                }
                range_[n_++] = {end, r.end};
                r.end = begin;
            } else if (r.begin < begin) {
                r.end = begin;
            } else if (r.end > end) {
                r.begin = end;
            } else {
                r = range_[--n_]; // wholly inside: gone; look at the one moved here
                --i;
            }
        }
        moved_ranges_used.store(n_ != 0 ? 1 : 0, std::memory_order_relaxed);
        return hit;
    }

    /// \returns how many ranges are recorded (for tests).
    std::size_t size() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return n_;
    }

private:
    struct range {
        std::uintptr_t begin, end;
    };
    moved_ranges() = default;

    std::mutex mutex_; // guards everything below
    range range_[slots] = {};
    std::size_t n_ = 0;
    bool full_ = false;
};

/// \returns true when `replace` moved pages of [p, p + bytes) since it was handed out (see moved_ranges::take).
inline bool moved_since_handed_out(const void* p, std::size_t bytes) noexcept {
    if (moved_ranges_used.load(std::memory_order_relaxed) == 0) return false;
    moved_ranges* m = moved_ranges::cell().peek(); // made by the add that set the flag
    return m && m->take(p, bytes);
}

/// Set by the heap (detail/heap/registry.hpp, at static initialisation): marks the heap's runs handed
/// out that [begin, end) overlaps (`policy`: replace sets their policy too). \returns true when the range
/// lies in one of the heap's regions. Null in a program without the heap.
using heap_run_marker = bool (*)(std::uintptr_t begin, std::uintptr_t end, bool policy) noexcept;
inline std::atomic<heap_run_marker> heap_run_marker_hook{nullptr};

/// \effects records, before replace() moves them, the pages [begin, end) of memory that is not a
/// partitioned buffer (`policy`: replace sets their policy too): the heap's runs are marked, any other
/// range goes in the table. \throws std::bad_alloc (making the table).
inline void note_replaced(std::uintptr_t begin, std::uintptr_t end, bool policy) {
    const heap_run_marker mark = heap_run_marker_hook.load(std::memory_order_acquire);
    if (mark && mark(begin, end, policy)) return;
    moved_ranges::instance().add(begin, end);
}

inline std::mutex& moved_ranges_lock(moved_ranges& m) noexcept { return m.mutex(); }
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration moved_ranges_fork_hook NUMAPLACE_EARLY_INIT{
    fork_stage::moved_ranges, locked_global_hooks<moved_ranges, &moved_ranges::cell, std::mutex, &moved_ranges_lock>::hook()};
#endif

} // namespace detail
} // namespace numaplace

#endif
