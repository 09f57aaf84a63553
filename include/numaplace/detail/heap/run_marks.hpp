#ifndef NUMAPLACE_DETAIL_HEAP_RUN_MARKS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_RUN_MARKS_HPP_INCLUDED

/// \file
/// Which page runs replace() marked (their pages moved, maybe their policy set): a marked run, when
/// freed, must reach its heap, which gives its pages back and sets its policy again before reuse
/// (run_heap::take_moved), never a thread cache. The thread caches ask here without a lock, so that one
/// replaced block kept for the whole run does not send every other run's free to the heap. Design:
/// docs/heap.md.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

/// The addresses of the marked runs, in a table of `room` slots, and per bucket of addresses (a hash of
/// the page number) how many of them it holds, so that a free asks one byte, not the table; marks
/// beyond the table are only counted (then every run free goes to the heap until they are taken).
/// Written under the marking heap's lock, read by any thread without one.
class run_mark_set {
public:
    static constexpr std::size_t room = 64;

    /// \effects counts the run at `p` as marked (it was not).
    void add(std::uintptr_t p) noexcept {
        for (auto& slot : at_) {
            std::uintptr_t empty = 0;
            if (slot.compare_exchange_strong(empty, p, std::memory_order_relaxed)) {
                count_[bucket(p)].fetch_add(1, std::memory_order_relaxed);
                pending_.fetch_add(1, std::memory_order_relaxed);
                return;
            }
        }
        overflow_.fetch_add(1, std::memory_order_relaxed);
        pending_.fetch_add(1, std::memory_order_relaxed);
    }
    /// \effects counts the marked run at `p` as unmarked.
    void remove(std::uintptr_t p) noexcept {
        pending_.fetch_sub(1, std::memory_order_relaxed);
        for (auto& slot : at_) {
            std::uintptr_t held = p;
            if (slot.compare_exchange_strong(held, 0, std::memory_order_relaxed)) {
                count_[bucket(p)].fetch_sub(1, std::memory_order_relaxed);
                return;
            }
        }
        overflow_.fetch_sub(1, std::memory_order_relaxed); // it was one of those beyond the table
    }
    /// \returns the runs marked now.
    std::size_t pending() const noexcept { return pending_.load(std::memory_order_relaxed); }
    /// \returns false when the run at `p` is surely not marked: no run is, or the table holds every
    /// mark and not this one.
    bool may_hold(const void* p) const noexcept {
        if (pending_.load(std::memory_order_relaxed) == 0) return false;
        if (overflow_.load(std::memory_order_relaxed) != 0) return true;
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        if (count_[bucket(a)].load(std::memory_order_relaxed) == 0) return false;
        for (const auto& slot : at_)
            if (slot.load(std::memory_order_relaxed) == a) return true;
        return false;
    }

private:
    // The page number's bits mixed (runs often lie a multiple of 256 KiB apart), the top 6 taken.
    static std::size_t bucket(std::uintptr_t p) noexcept {
        static_assert(room == 64, "6 bits");
        const std::uint64_t page = p >> 12;
        return static_cast<std::size_t>((page * 0x9e3779b97f4a7c15ull) >> 58);
    }

    std::atomic<std::uintptr_t> at_[room] = {};
    std::atomic<std::uint8_t> count_[room] = {}; // at most `room` each
    std::atomic<std::size_t> pending_{0}, overflow_{0};
};

/// The process's marked runs (every heap's: a run's address says which).
inline run_mark_set run_marks;

} // namespace detail
} // namespace numaplace

#endif
