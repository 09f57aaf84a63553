#ifndef NUMAPLACE_DETAIL_HEAP_RUN_SHARDS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_RUN_SHARDS_HPP_INCLUDED

/// \file
/// The run heaps of one node heap: one, or two from two CPUs on. A thread takes its page runs from one
/// (threads in the order of their first run, in turn), so that two threads freeing and taking runs reuse
/// their own (lines their own core wrote) instead of each other's; a run goes back to the run heap whose
/// region holds it, whoever frees it. Design and measurements: docs/heap.md.

#include "run_heap.hpp"

#include <atomic>
#include <cstddef>
#include <new>

namespace numaplace {
namespace detail {

/// The most run heaps a node heap has.
constexpr std::size_t heap_run_shards_max = 2;

class run_shards {
public:
    /// `count`: the run heaps (clamped to 1..heap_run_shards_max); `huge_fill` as run_heap's.
    run_shards(bool huge_fill, std::size_t count) noexcept
        : count_(count < 1 ? 1 : count > heap_run_shards_max ? heap_run_shards_max : count),
          heaps_{run_heap(huge_fill), run_heap(huge_fill)} {}
    static_assert(heap_run_shards_max == 2, "heaps_ is initialised with two run heaps");

    /// \returns the run heaps in use.
    std::size_t count() const noexcept { return count_; }
    /// \returns run heap `k` (< count()).
    run_heap& at(std::size_t k) noexcept { return heaps_[k]; }
    /// \returns the index of the run heap the calling thread takes its runs from.
    std::size_t own() const noexcept {
        static std::atomic<std::size_t> next{0};
        static thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed);
        return mine % count_;
    }
    /// \returns the sum of `(heap.*f)()` over the run heaps in use.
    template <class F>
    std::size_t sum(F f) noexcept {
        std::size_t n = 0;
        for (std::size_t k = 0; k < count_; ++k) n += (heaps_[k].*f)();
        return n;
    }
    /// \effects a run of `pages` at a multiple of `align` from the run heaps other than `except`, mapping
    /// nothing (their free runs and kept regions only: for a thread whose own run heap could map no
    /// region). \returns it (`clean` as run_heap::take sets it), or nullptr when none fits.
    char* take_mapping_nothing(std::size_t except, std::size_t pages, std::size_t align, std::size_t& clean) noexcept {
        for (std::size_t k = 0; k < count_; ++k) {
            if (k == except) continue;
            try {
                return heaps_[k].take(pages, align, clean, [](std::size_t, std::size_t, bool&) -> void* { throw std::bad_alloc(); });
            } catch (...) { // nothing taken (a region was needed, or its record could not grow)
            }
        }
        return nullptr;
    }

private:
    std::size_t count_;
    run_heap heaps_[heap_run_shards_max];
};

} // namespace detail
} // namespace numaplace

#endif
