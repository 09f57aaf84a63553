#ifndef NUMAPLACE_DETAIL_BACKGROUND_RELEASE_HPP_INCLUDED
#define NUMAPLACE_DETAIL_BACKGROUND_RELEASE_HPP_INCLUDED

/// \file
/// The optional background thread that runs the heaps' and the placed cache's decay every period, so
/// that freed memory goes back to the kernel after its decay time even when no thread allocates or
/// frees any more. State in constant-initialised atomics (no lock): a thread runs while its generation
/// is the current one; a new call or a fork makes a new generation. Design: docs/heap.md.

#include "config.hpp"
#include "decay.hpp"
#include "fork.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace numaplace {
namespace detail {

inline std::atomic<std::int64_t> background_period_ms{0}; ///< 0: no background release
inline std::atomic<std::uint64_t> background_generation{0};
inline std::atomic<unsigned> background_threads{0}; ///< threads running (for tests)

/// \effects runs the decay every period while `generation` is the current one.
inline void background_release_loop(std::uint64_t generation) noexcept {
    for (;;) {
        const std::int64_t period = background_period_ms.load(std::memory_order_acquire);
        if (period <= 0 || background_generation.load(std::memory_order_acquire) != generation) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(period));
        if (background_generation.load(std::memory_order_acquire) != generation) break;
        decay_everything_now();
    }
    background_threads.fetch_sub(1, std::memory_order_acq_rel);
}

/// \effects makes `period_ms` the background period: a new thread for a positive one (the previous
/// thread ends at its next wake-up), none for 0. \throws std::system_error (no thread could be made;
/// nothing runs then).
inline void set_background_release(std::int64_t period_ms) {
    const std::uint64_t generation = background_generation.fetch_add(1, std::memory_order_acq_rel) + 1;
    background_period_ms.store(period_ms > 0 ? period_ms : 0, std::memory_order_release);
    if (period_ms <= 0) return;
    background_threads.fetch_add(1, std::memory_order_acq_rel);
    try {
        std::thread(background_release_loop, generation).detach();
    } catch (...) {
        background_threads.fetch_sub(1, std::memory_order_acq_rel);
        background_period_ms.store(0, std::memory_order_release);
        throw;
    }
}

/// A forked child has no background thread: it starts without one (call background_release again).
inline void background_release_forked_child() noexcept {
    background_generation.fetch_add(1, std::memory_order_relaxed);
    background_period_ms.store(0, std::memory_order_relaxed);
    background_threads.store(0, std::memory_order_relaxed);
}
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration background_release_fork_hook NUMAPLACE_EARLY_INIT{
    fork_stage::background_release, fork_hook{nullptr, nullptr, &background_release_forked_child}};
#endif

} // namespace detail
} // namespace numaplace

#endif
