#ifndef NUMAPLACE_ARENAS_HPP_INCLUDED
#define NUMAPLACE_ARENAS_HPP_INCLUDED

/// \file
/// The per-node oneTBB arenas: one `tbb::task_arena` per node with CPUs in the process's binding, sized
/// to and constrained to those CPUs, the observer that checks (and if needed pins) every thread entering one, the report of how
/// pinning was verified, and the shims over oneTBB versions. Design notes: docs/parallel_for.md.

#include "binding.hpp"
#include "detail/config.hpp"
#include "detail/tbb_fork.hpp"
#include "topology.hpp"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <oneapi/tbb/task_scheduler_observer.h>
#include <oneapi/tbb/version.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

/// How threads entering a node's arena are kept on that node.
enum class pinning {
    single_node, ///< one node with CPUs: plain oneTBB, nothing to pin, no extra cost
    tbbbind,     ///< oneTBB's own `constraints{numa_id}` (libtbbbind loaded and agrees with our ids)
    hwloc,       ///< tbbbind unavailable or ineffective: an observer pins entering threads through hwloc
    none         ///< blocks run unpinned (a degradation): pinning did not take effect, or the topology is
                 ///< not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC: blocks run in the caller's arena)
};

/// \returns a one-line description of `p`.
inline const char* name(pinning p) noexcept {
    switch (p) {
    case pinning::single_node: return "single node (plain oneTBB)";
    case pinning::tbbbind: return "oneTBB constraints (tbbbind)";
    case pinning::hwloc: return "hwloc observer";
    case pinning::none: return "NONE (blocks run unpinned)";
    }
    return "?";
}

/// What oneTBB sees, and how the arenas are pinned as verified (a thread entered each arena and ran
/// within its node's CPUs), not only as asked for. Later failures: `node_arenas::unpinned_entries()`.
struct arena_report {
    bool tbbbind_loaded = false;        ///< libtbbbind is in the process
    /// `tbb::info::numa_nodes()` ({-1}: TBB sees no NUMA); empty on a machine with one node with CPUs,
    /// where oneTBB is not asked (asking loads libtbbbind, which sanitizer runtimes refuse to load).
    std::vector<int> tbb_numa_nodes;
    /// how the arenas are pinned (oneTBB constraints, hwloc observer, none).
    numaplace::pinning pinning = pinning::single_node;
    std::string reason;                 ///< why this pinning; for `none`, what failed (node, errno)
    bool verified = false;              ///< a thread entering every arena ran within its node's CPUs
    /// the `TBB_INTERFACE_VERSION` numaplace was compiled against.
    int tbb_interface_version = TBB_INTERFACE_VERSION;
    /// the binding the arenas were made for (`cpu_binding::to_string()`): each arena holds that node's CPUs
    /// of it, and a default partition follows it from then on.
    std::string binding;
    /// whether the process's binding read now differs from `binding` (re-bound after the arenas were made:
    /// the loops keep the first; the reason says both).
    bool rebound = false;
};

namespace detail {

class node_observer; // detail/node_observer.hpp

/// \returns whether a shared object whose path contains `fragment` is loaded.
NUMAPLACE_DECL bool library_loaded(const char* fragment);

// --- oneTBB version shims ----------------------------------------------------------------------------

/// \effects runs `f` as a task of `group` in `arena`, the caller not joining the arena.
/// \notes `task_arena::enqueue(f, group)` (oneTBB 2022.3, interface 12170); before, and under TSan (the
/// hand-over is released once the task holds its copy of `f`), the same as `enqueue(group.defer(f))`
/// (2021.6, interface 12060); before that, the caller enters the arena to spawn it.
template <class F>
void enqueue_in(tbb::task_arena& arena, tbb::task_group& group, F&& f) {
#if TBB_INTERFACE_VERSION >= 12170 && !defined(NUMAPLACE_TSAN)
    arena.enqueue(std::forward<F>(f), group);
#elif TBB_INTERFACE_VERSION >= 12060
    tbb::task_handle task = group.defer(std::forward<F>(f));
    NUMAPLACE_HANDOVER_RELEASE();
    arena.enqueue(std::move(task));
#else
    NUMAPLACE_HANDOVER_RELEASE();
    arena.execute([&] { group.run(std::forward<F>(f)); });
#endif
}

/// \effects waits inside `arena` (running its tasks meanwhile; delegated when no slot is free) until
/// every task of `group` is done or cancelled. \throws the exception a task of `group` threw first.
/// \notes `task_arena::wait_for(group)` (oneTBB 2022.3, interface 12170); before, `execute(group.wait())`.
inline void wait_in(tbb::task_arena& arena, tbb::task_group& group) {
#if TBB_INTERFACE_VERSION >= 12170
    arena.wait_for(group);
#else
    arena.execute([&group] { group.wait(); });
#endif
}

} // namespace detail


/// The per-node arenas, created once on first use and reused by every loop.
class node_arenas {
public:
    /// \returns the process's arenas (thread-safe creation).
    /// \throws std::system_error on a machine with several nodes when they cannot be made now (no 8 free
    /// file descriptors for oneTBB's tbbbind, or a worker thread per CPU cannot start: EMFILE, EAGAIN);
    /// nothing is kept, the next call tries again.
    /// \notes a guarded function-local static, unlike numaplace's other process-wide objects
    /// (detail/fork.hpp): oneTBB itself is not supported in a forked child, whose arenas made before the
    /// fork are not spread (`spread()`; the fork hook of stage `arenas`).
    NUMAPLACE_DECL static node_arenas& get();
    node_arenas(const node_arenas&) = delete;
    node_arenas& operator=(const node_arenas&) = delete;

    /// \returns the report of the arenas' creation; pinning `none` from the moment a thread entering an
    /// arena could not be pinned (e.g. a sandbox refusing sched_setaffinity after start-up).
    NUMAPLACE_DECL arena_report report() const;
    /// \returns whether blocks are spread over per-node arenas (false on a one-node machine: blocks
    /// run in the caller's arena). False in a process forked after the arenas were made: their workers
    /// are not in the child, where waiting for them would never end (the loops then run without oneTBB:
    /// detail::tbb_lost_in_fork).
    bool spread() const noexcept {
        return !observers_.empty() && !detail::node_arenas_inherited.load(std::memory_order_relaxed);
    }
    /// \returns the arena that runs blocks of `node` (a node without a CPU of the binding, memory-only
    /// or outside it: the nearest node with one); nullptr when not `spread()`. \throws unknown_node.
    tbb::task_arena* arena_for(int node) const {
        if (!spread()) return nullptr;
        topology::get().check(node);
        return arenas_[static_cast<std::size_t>(runner_[static_cast<std::size_t>(node)])].get();
    }
    /// \returns the arena with a slot kept for the caller (its first node's), where a loop's caller waits
    /// first: the workers fill every other slot, as many as oneTBB's default pool has (the binding's CPUs
    /// less one), so no process-wide limit is raised. nullptr when not `spread()`.
    tbb::task_arena* caller_arena() const noexcept { return spread() ? arenas_[home_].get() : nullptr; }
    /// \returns how many times a thread entered a node's arena outside that node's CPUs and could not
    /// be pinned (0 on a one-node machine).
    NUMAPLACE_DECL std::size_t unpinned_entries() const noexcept;

private:
    NUMAPLACE_DECL node_arenas();
    NUMAPLACE_DECL ~node_arenas();
    // Enters every arena once from this thread, so its observer checks (and if needed pins) it. A
    // tbbbind pin that did not hold moves to the hwloc observer's pinning; if that fails too, to none.
    NUMAPLACE_DECL void verify(const node_set& cpu_nodes);

    arena_report report_;
    std::vector<int> runner_;
    std::vector<std::unique_ptr<tbb::task_arena>> arenas_;
    std::vector<std::unique_ptr<detail::node_observer>> observers_;
    cpu_binding binding_;
    std::size_t home_ = 0;
};

/// \returns what oneTBB sees and how arenas are pinned, as verified so far (creates the arenas on
/// first call).
inline arena_report arena_capabilities() { return node_arenas::get().report(); }

} // namespace numaplace

#if NUMAPLACE_DEFINITIONS
#include "detail/arenas_impl.hpp"
#endif

#endif
