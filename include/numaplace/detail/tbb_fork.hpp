#ifndef NUMAPLACE_DETAIL_TBB_FORK_HPP_INCLUDED
#define NUMAPLACE_DETAIL_TBB_FORK_HPP_INCLUDED

/// \file
/// oneTBB in a forked child: whether this process ran work through oneTBB, and whether it was forked
/// from one that had, where numaplace's loops must not call oneTBB (the fork hook of stage `arenas`).
/// Design notes: docs/parallel_for.md ("A forked child").

#include "../diagnostics.hpp"
#include "fork.hpp"

#include <atomic>

namespace numaplace {
namespace detail {
/// Whether this process made spread per-node arenas; whether they were made before a fork that made
/// this process (their oneTBB workers are not here).
inline std::atomic<bool> node_arenas_made{false}, node_arenas_inherited{false};
/// Whether this process ran work through oneTBB (its workers may have started: note_tbb_used); whether it
/// was forked from a process that had (oneTBB's workers are not in the child, and a lock one of them held
/// at the fork is never released there: oneTBB does not support a fork after its workers started, and a
/// loop in the child waited for ever, 1 run in 24 on a loaded host); whether that was recorded here.
inline std::atomic<bool> tbb_used{false}, tbb_lost{false}, tbb_lost_reported{false};
inline void note_tbb_used() noexcept {
    if (!tbb_used.load(std::memory_order_relaxed)) tbb_used.store(true, std::memory_order_relaxed);
}
inline void node_arenas_forked_child() noexcept {
    const bool arenas = node_arenas_made.load(std::memory_order_relaxed);
    if (arenas) node_arenas_inherited.store(true, std::memory_order_relaxed);
    if (arenas || tbb_used.load(std::memory_order_relaxed)) tbb_lost.store(true, std::memory_order_relaxed);
    tbb_lost_reported.store(false, std::memory_order_relaxed);
}
#if NUMAPLACE_DEFINITIONS
inline const fork_hook_registration node_arenas_fork_hook NUMAPLACE_EARLY_INIT{fork_stage::arenas,
                                                                              fork_hook{nullptr, nullptr, &node_arenas_forked_child}};
#endif

/// \returns true in a process forked from one that ran work through oneTBB: numaplace's loops then run
/// every block in the calling thread, one after the other, without calling oneTBB; `degradations()`
/// says so once per process. False otherwise.
NUMAPLACE_DECL bool tbb_lost_in_fork() noexcept;
#if NUMAPLACE_DEFINITIONS
NUMAPLACE_DECL bool tbb_lost_in_fork() noexcept {
    if (!tbb_lost.load(std::memory_order_relaxed)) return false;
    if (!tbb_lost_reported.exchange(true, std::memory_order_relaxed)) {
        try {
            degradation_log::instance().record(
                "parallel_for: in a process forked after oneTBB's workers started (they are not in the child, "
                "and oneTBB does not support it): every block runs in the calling thread, one after the other, unpinned");
        } catch (...) { // no memory for the message: the blocks still run
        }
    }
    return true;
}
#endif
} // namespace detail
} // namespace numaplace

#endif
