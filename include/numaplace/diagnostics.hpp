#ifndef NUMAPLACE_DIAGNOSTICS_HPP_INCLUDED
#define NUMAPLACE_DIAGNOSTICS_HPP_INCLUDED

/// \file
/// The degradation log: every time a degrading placement (or a loop, or a topology that could not be
/// read) falls back, it is recorded here and reported beside the capabilities (`numaplace-info`).

#include "detail/config.hpp"
#include "detail/fork.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator> // before <mutex>/<string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <mutex>
#include <string>
#include <vector>

namespace numaplace {
namespace detail {

/// The process's record of fallbacks (made on first use, never destroyed).
struct degradation_log {
    std::mutex mutex;
    std::vector<std::string> messages; // distinct, at most 64
    std::atomic<std::size_t> count{0};

    /// \effects counts a fallback and keeps its message if new (at most 64 distinct).
    void record(const std::string& message) {
        count.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mutex);
        if (messages.size() < 64 && std::find(messages.begin(), messages.end(), message) == messages.end())
            messages.push_back(message);
    }

    static lazy_global<degradation_log>& cell() noexcept {
        static lazy_global<degradation_log> c; // constant-initialised: no guard
        return c;
    }
    /// \returns the log. \throws std::bad_alloc the first time only.
    static degradation_log& instance() { return cell().get([] { return new degradation_log; }); }

    static std::mutex& lock_of(degradation_log& log) noexcept { return log.mutex; }
};
// Fork hooks (stage degradation_log): no thread is making the log or writing to it during fork.
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration degradation_log_fork NUMAPLACE_EARLY_INIT{
    fork_stage::degradation_log,
    locked_global_hooks<degradation_log, &degradation_log::cell, std::mutex, &degradation_log::lock_of>::hook()};
#endif

} // namespace detail

/// \returns how many times a degrading placement fell back in this process.
inline std::size_t degradation_count() noexcept {
    auto* log = detail::degradation_log::cell().peek();
    return log ? log->count.load(std::memory_order_relaxed) : 0;
}

/// \returns the distinct fallbacks seen so far, as messages naming the placement, node and errno.
inline std::vector<std::string> degradations() {
    auto* log = detail::degradation_log::cell().peek();
    if (!log) return {};
    std::lock_guard<std::mutex> lock(log->mutex);
    return log->messages;
}

} // namespace numaplace

#endif
