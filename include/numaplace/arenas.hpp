#ifndef NUMAPLACE_ARENAS_HPP_INCLUDED
#define NUMAPLACE_ARENAS_HPP_INCLUDED

/// \file
/// The per-node oneTBB arenas: one `tbb::task_arena` per node with CPUs in the process's binding, sized
/// to and constrained to those CPUs, the observer that checks (and if needed pins) every thread entering one, the report of how
/// pinning was verified, and the shims over oneTBB versions. Design notes: docs/parallel_for.md.

#include "binding.hpp"
#include "detail/config.hpp"
#include "detail/hwloc.hpp"
#include "detail/node_observer.hpp"
#include "detail/linux.hpp"
#include "detail/process_checks.hpp"
#include "detail/tbb_fork.hpp"
#include "loop.hpp"
#include "diagnostics.hpp"
#include "topology.hpp"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <oneapi/tbb/task_scheduler_observer.h>
#include <oneapi/tbb/version.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <link.h>

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

/// \returns whether a shared object whose path contains `fragment` is loaded.
inline bool library_loaded(const char* fragment) {
    struct search {
        const char* fragment;
        bool found;
    } s{fragment, false};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
            auto* st = static_cast<search*>(data);
            if (info->dlpi_name && std::strstr(info->dlpi_name, st->fragment)) st->found = true;
            return st->found ? 1 : 0;
        },
        &s);
    return s.found;
}

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
    static node_arenas& get() {
        static node_arenas instance;
        return instance;
    }
    node_arenas(const node_arenas&) = delete;
    node_arenas& operator=(const node_arenas&) = delete;

    /// \returns the report of the arenas' creation; pinning `none` from the moment a thread entering an
    /// arena could not be pinned (e.g. a sandbox refusing sched_setaffinity after start-up).
    arena_report report() const {
        arena_report r = report_;
        r.binding = binding_.to_string();
        // (inside a block the calling thread is pinned to its node: no reading then)
        const cpu_binding now = detail::current_block_node() < 0 ? cpu_binding::current() : binding_;
        if (now != binding_) {
            r.rebound = true;
            r.reason += "; the process was re-bound after its arenas were made (now " + now.to_string() +
                        "): the loops and default partitions keep the binding they were made for";
        }
        if (!observers_.empty() && detail::node_arenas_inherited.load(std::memory_order_relaxed)) {
            r.pinning = pinning::none;
            r.reason += "; this process was forked after the arenas were made: blocks run in the calling thread, unpinned";
        }
        if (const std::size_t lost = unpinned_entries()) {
            int error = 0;
            for (const auto& o : observers_) error = o->last_errno() ? o->last_errno() : error;
            r.pinning = pinning::none;
            r.reason += "; since then " + std::to_string(lost) +
                        " thread entries ran outside their node's CPUs and could not be pinned (errno " +
                        std::to_string(error) + ")";
        }
        return r;
    }
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
    std::size_t unpinned_entries() const noexcept {
        std::size_t n = 0;
        for (const auto& o : observers_) n += o->unpinned_entries();
        return n;
    }

private:
    node_arenas() {
        const topology& topo = topology::get();
        binding_ = cpu_binding::current(topo); // the binding now: the loops' from here on
        const node_set cpu_nodes = binding_.nodes();
        // Nodes without a CPU of the binding (memory-only, or outside it) have no arena: their blocks run
        // on the nearest node with one.
        for (const auto& n : topo.nodes()) {
            int best = cpu_nodes.empty() ? 0 : cpu_nodes[0];
            for (int c : cpu_nodes)
                if (topo.distance(n.id, c) < topo.distance(n.id, best)) best = c;
            runner_.push_back(cpu_nodes.contains(n.id) ? n.id : best);
        }
        report_.tbb_numa_nodes.clear();
        if (cpu_nodes.size() <= 1) { // plain oneTBB: its NUMA view is not needed, and not loaded
            report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
            report_.pinning = pinning::single_node;
            report_.reason = binding_.whole_of(topo) ? "one node with CPUs"
                                                     : "one node with CPUs in this process's binding (" + binding_.to_string() + ")";
            detail::fix_binding(binding_);
            return;
        }
        if (!topo.is_this_system()) { // tbbbind would load the same foreign topology (and may crash on it)
            report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
            report_.pinning = pinning::none;
            report_.reason = "the topology is not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC or HWLOC_FSROOT): "
                             "oneTBB is not asked and every block runs in the caller's arena, unpinned";
            detail::degradation_log::instance().record("parallel_for: " + report_.reason);
            detail::fix_binding(binding_);
            return;
        }
        // oneTBB now loads tbbbind (files, address space) and soon starts a worker per CPU. A transient
        // refusal would be kept for the process (tbbbind not loaded; a worker oneTBB never starts again,
        // for which a loop waits for ever): refused here, nothing kept, the next call tries again.
        const std::size_t workers = binding_.cpu_count();
        if (const int err = detail::os_descriptors_free(8))
            throw std::system_error(err, std::generic_category(),
                                    "numaplace: the per-node arenas need 8 free file descriptors (ulimit -n)");
        const std::size_t stack = tbb::global_control::active_value(tbb::global_control::thread_stack_size);
        if (const int err = detail::os_threads_can_start(workers, stack))
            throw std::system_error(err, std::generic_category(),
                                    "numaplace: the per-node arenas cannot start their " + std::to_string(workers) +
                                        " worker threads (the address-space limit, ulimit -v?)");
        for (auto id : tbb::info::numa_nodes()) report_.tbb_numa_nodes.push_back(id);
        report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
        // tbbbind only if its numa ids are ours: every bound node listed, with as many threads as it has
        // CPUs of the binding (tbbbind reads the process's affinity too).
        bool agrees = report_.tbbbind_loaded;
        for (int k : cpu_nodes) {
            bool listed = false;
            for (int id : report_.tbb_numa_nodes) listed = listed || id == k;
            agrees = agrees && listed &&
                     tbb::info::default_concurrency(tbb::numa_node_id{k}) ==
                         static_cast<int>(binding_.cpus(k).size());
        }
        report_.pinning = agrees ? pinning::tbbbind : pinning::hwloc;
        std::string tbb_ids;
        for (int id : report_.tbb_numa_nodes) tbb_ids += (tbb_ids.empty() ? "" : " ") + std::to_string(id);
        std::string ours;
        for (int k : cpu_nodes) ours += (ours.empty() ? "" : " ") + std::to_string(k) + " (" +
                                        std::to_string(binding_.cpus(k).size()) + " CPUs)";
        report_.reason = agrees ? "tbbbind loaded; its numa ids match numaplace's"
                         : report_.tbbbind_loaded ? "tbbbind's numa ids (" + tbb_ids + ") or their CPU counts disagree with "
                                                    "the binding's nodes " + ours
                                                  : "libtbbbind not loaded: oneTBB sees no NUMA nodes";
        arenas_.resize(topo.size());
        home_ = static_cast<std::size_t>(cpu_nodes[0]);
#if TBB_INTERFACE_VERSION >= 12180
        std::vector<tbb::task_arena> from_tbb; // oneTBB 2023.0: one arena per tbb::info::numa_nodes() entry
        if (report_.pinning == pinning::tbbbind) {
            from_tbb = tbb::create_numa_task_arenas();
            report_.reason += "; arenas from tbb::create_numa_task_arenas";
        }
#endif
        for (int k : cpu_nodes) {
            const auto slot = static_cast<std::size_t>(k);
            const int threads = static_cast<int>(binding_.cpus(k).size());
            // One slot kept for the caller in the first node's arena, none elsewhere: the workers oneTBB
            // starts by default (the binding's CPUs less one) fill every other slot (docs/parallel_for.md).
            const unsigned reserved = slot == home_ ? 1u : 0u;
            if (report_.pinning == pinning::tbbbind) {
#if TBB_INTERFACE_VERSION >= 12180
                if (reserved == 0) // oneTBB's arenas keep no slot: the caller's arena is made below
                    for (std::size_t i = 0; i < from_tbb.size() && i < report_.tbb_numa_nodes.size(); ++i)
                        if (report_.tbb_numa_nodes[i] == k) arenas_[slot] = std::make_unique<tbb::task_arena>(from_tbb[i]);
                if (!arenas_[slot])
#endif
                {
                    tbb::task_arena::constraints c;
                    c.numa_id = k;
                    c.max_concurrency = threads;
                    arenas_[slot] = std::make_unique<tbb::task_arena>(c, reserved);
                }
            } else {
                arenas_[slot] = std::make_unique<tbb::task_arena>(threads, reserved);
            }
            arenas_[slot]->initialize();
            const detail::hwloc_bitmap_ptr cpus = bound_cpus(k);
            observers_.push_back(std::make_unique<detail::node_observer>(
                *arenas_[slot], k, topo.native(), cpus.get(), report_.pinning == pinning::hwloc));
        }
        verify(cpu_nodes);
        detail::fix_binding(binding_);
        detail::node_arenas_made.store(true, std::memory_order_relaxed);
    }
    // \returns the CPUs of node k in the binding, as an hwloc bitmap.
    detail::hwloc_bitmap_ptr bound_cpus(int k) const {
        detail::hwloc_bitmap_ptr set = detail::make_bitmap();
        if (!set) throw std::bad_alloc();
        for (unsigned c : binding_.cpus(k)) hwloc_bitmap_set(set.get(), c);
        return set;
    }
    ~node_arenas() {
        observers_.clear(); // stop observing before the arenas go
        arenas_.clear();
    }

    // Enters every arena once from this thread, so its observer checks (and if needed pins) it. A
    // tbbbind pin that did not hold moves to the hwloc observer's pinning; if that fails too, to none.
    void verify(const node_set& cpu_nodes) {
        auto probe = [&] {
            for (std::size_t i = 0; i < observers_.size(); ++i) {
                const auto before = observers_[i]->unpinned_entries();
                arenas_[static_cast<std::size_t>(cpu_nodes[i])]->execute([] {});
                if (observers_[i]->unpinned_entries() != before) return i;
            }
            return observers_.size();
        };
        const std::size_t failed = probe();
        if (failed == observers_.size()) {
            report_.verified = true;
            for (std::size_t i = 0; i < observers_.size() && report_.pinning == pinning::tbbbind; ++i) {
                if (observers_[i]->fallbacks() == 0) continue;
                report_.pinning = pinning::hwloc;
                report_.reason = "tbbbind loaded but a thread in node " + std::to_string(cpu_nodes[i]) +
                                 "'s arena was not pinned by it; the hwloc observer pins every entering thread";
                for (auto& o : observers_) o->pin_always();
                detail::degradation_log::instance().record("parallel_for: " + report_.reason);
            }
            return;
        }
        const std::string what = std::string(name(report_.pinning)) + " did not take effect: a thread in node " +
                                 std::to_string(cpu_nodes[failed]) + "'s arena ran outside its CPUs (errno " +
                                 std::to_string(observers_[failed]->last_errno()) + ")";
        report_.pinning = pinning::none;
        report_.reason = what + "; the hwloc fallback failed too; blocks run unpinned";
        detail::degradation_log::instance().record("parallel_for: " + report_.reason);
    }

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

#endif
