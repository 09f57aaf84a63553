#ifndef NUMAPLACE_ARENAS_HPP_INCLUDED
#define NUMAPLACE_ARENAS_HPP_INCLUDED

/// \file
/// The per-node oneTBB arenas: one `tbb::task_arena` per node with CPUs, constrained to that node's
/// cores, the observer that checks (and if needed pins) every thread entering one, the report of how
/// pinning was verified, and the shims over oneTBB versions. Design notes: docs/parallel_for.md.

#include "detail/config.hpp"
#include "detail/hwloc.hpp"
#include "detail/linux.hpp"
#include "detail/process_checks.hpp"
#include "detail/tbb_fork.hpp"
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

/// Watches every thread entering one node's arena: checks its CPU affinity lies within the node's CPUs
/// and pins it through hwloc when it does not (always, when `pin`); restores a re-bound thread's
/// binding when it leaves. A thread still off the node is counted and, the first time, recorded in
/// `degradations()`. \notes the hooks never throw.
class node_observer : public tbb::task_scheduler_observer {
public:
    node_observer(tbb::task_arena& arena, int node, hwloc_topology_t topo, hwloc_const_cpuset_t cpus, bool pin)
        : tbb::task_scheduler_observer(arena), node_(node), topo_(topo), cpus_(hwloc_bitmap_dup(cpus)), pin_{pin} {
        if (!cpus_) throw std::bad_alloc();
        observe(true);
    }
    ~node_observer() override { observe(false); }
    node_observer(const node_observer&) = delete;
    node_observer& operator=(const node_observer&) = delete;

    void on_scheduler_entry(bool) override {
        entries_.fetch_add(1, std::memory_order_relaxed);
        frame f;
        int error = 0;
        const bool pin = pin_.load(std::memory_order_relaxed);
        if (pin || !within(error)) {
            if (!pin) fallbacks_.fetch_add(1, std::memory_order_relaxed);
            f.saved.reset(hwloc_bitmap_alloc());
            if (f.saved && hwloc_get_cpubind(topo_, f.saved.get(), HWLOC_CPUBIND_THREAD) != 0) f.saved.reset();
            if (hwloc_set_cpubind(topo_, cpus_.get(), HWLOC_CPUBIND_THREAD) != 0) error = errno;
            else f.rebound = true;
        }
        if (!within(error)) unpinned(error);
        try {
            frames().push_back(std::move(f));
        } catch (...) { // no memory for the frame: the previous binding is not restored at exit
        }
    }
    void on_scheduler_exit(bool) override {
        auto& stack = frames();
        if (stack.empty()) return;
        frame& f = stack.back();
        if (f.rebound && f.saved) hwloc_set_cpubind(topo_, f.saved.get(), HWLOC_CPUBIND_THREAD);
        stack.pop_back();
    }
    /// \returns how many thread entries were seen, and how many of them ran off the node's CPUs.
    std::size_t entries() const noexcept { return entries_.load(std::memory_order_relaxed); }
    std::size_t unpinned_entries() const noexcept { return unpinned_.load(std::memory_order_relaxed); }
    /// \returns how many entering threads were not within the node's CPUs until this observer pinned them.
    std::size_t fallbacks() const noexcept { return fallbacks_.load(std::memory_order_relaxed); }
    /// \effects from now on, pins every entering thread (not only those found off the node).
    void pin_always() noexcept { pin_.store(true, std::memory_order_relaxed); }
    /// \returns the errno of the last failed binding (0: none failed or unknown).
    int last_errno() const noexcept { return errno_.load(std::memory_order_relaxed); }

private:
    struct frame {
        hwloc_bitmap_ptr saved;
        bool rebound = false;
    };
    // Entries and exits nest (a thread may enter another arena from inside one): a stack per thread.
    static std::vector<frame>& frames() {
        static thread_local std::vector<frame> stack;
        return stack;
    }
    bool within(int& error) const noexcept {
        hwloc_bitmap_ptr now(hwloc_bitmap_alloc());
        if (!now) return false;
        if (hwloc_get_cpubind(topo_, now.get(), HWLOC_CPUBIND_THREAD) != 0) {
            error = errno;
            return false; // not verifiable: counts as not pinned
        }
        return hwloc_bitmap_isincluded(now.get(), cpus_.get()) != 0;
    }
    void unpinned(int error) noexcept {
        unpinned_.fetch_add(1, std::memory_order_relaxed);
        if (error != 0) errno_.store(error, std::memory_order_relaxed);
        if (reported_.exchange(true)) return;
        try {
            degradation_log::instance().record("parallel_for: a thread entered node " + std::to_string(node_) +
                                               "'s arena outside that node's CPUs and could not be pinned (errno " +
                                               std::to_string(error) + "); its blocks may run on other nodes");
        } catch (...) { // no memory for the message: the count above still says it
        }
    }

    int node_;
    hwloc_topology_t topo_;
    hwloc_bitmap_ptr cpus_;
    std::atomic<bool> pin_;
    std::atomic<std::size_t> entries_{0}, unpinned_{0}, fallbacks_{0};
    std::atomic<int> errno_{0};
    std::atomic<bool> reported_{false};
};

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
    /// \returns the arena that runs blocks of `node` (memory-only nodes: the nearest node with CPUs);
    /// nullptr on a single-node machine. \throws unknown_node.
    tbb::task_arena* arena_for(int node) const {
        if (!spread()) return nullptr;
        topology::get().check(node);
        return arenas_[static_cast<std::size_t>(runner_[static_cast<std::size_t>(node)])].get();
    }
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
        const node_set cpu_nodes = topo.with_cpus();
        // Memory-only nodes have no arena: their blocks run on the nearest node with CPUs.
        for (const auto& n : topo.nodes()) {
            int best = cpu_nodes.empty() ? 0 : cpu_nodes[0];
            for (int c : cpu_nodes)
                if (topo.distance(n.id, c) < topo.distance(n.id, best)) best = c;
            runner_.push_back(n.has_cpus() ? n.id : best);
        }
        report_.tbb_numa_nodes.clear();
        if (cpu_nodes.size() <= 1) { // plain oneTBB: its NUMA view is not needed, and not loaded
            report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
            report_.pinning = pinning::single_node;
            report_.reason = "one node with CPUs";
            return;
        }
        if (!topo.is_this_system()) { // tbbbind would load the same foreign topology (and may crash on it)
            report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
            report_.pinning = pinning::none;
            report_.reason = "the topology is not this system's (HWLOC_XMLFILE, HWLOC_SYNTHETIC or HWLOC_FSROOT): "
                             "oneTBB is not asked and every block runs in the caller's arena, unpinned";
            detail::degradation_log::instance().record("parallel_for: " + report_.reason);
            return;
        }
        // oneTBB now loads tbbbind (files, address space) and soon starts a worker per CPU. A transient
        // refusal would be kept for the process (tbbbind not loaded; a worker oneTBB never starts again,
        // for which a loop waits for ever): refused here, nothing kept, the next call tries again.
        std::size_t workers = 0;
        for (int k : cpu_nodes) workers += topo.at(k).cpus.size();
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
        // tbbbind only if its numa ids are ours: every CPU node listed, with as many threads as CPUs.
        bool agrees = report_.tbbbind_loaded;
        for (int k : cpu_nodes) {
            bool listed = false;
            for (int id : report_.tbb_numa_nodes) listed = listed || id == k;
            agrees = agrees && listed &&
                     tbb::info::default_concurrency(tbb::numa_node_id{k}) ==
                         static_cast<int>(topo.at(k).cpus.size());
        }
        report_.pinning = agrees ? pinning::tbbbind : pinning::hwloc;
        report_.reason = agrees ? "tbbbind loaded; its numa ids match numaplace's"
                         : report_.tbbbind_loaded ? "tbbbind's numa ids disagree with the topology"
                                                  : "libtbbbind not loaded: oneTBB sees no NUMA nodes";
        std::size_t total = 0;
        arenas_.resize(topo.size());
#if TBB_INTERFACE_VERSION >= 12180
        std::vector<tbb::task_arena> from_tbb; // oneTBB 2023.0: one arena per tbb::info::numa_nodes() entry
        if (report_.pinning == pinning::tbbbind) {
            from_tbb = tbb::create_numa_task_arenas();
            report_.reason += "; arenas from tbb::create_numa_task_arenas";
        }
#endif
        for (int k : cpu_nodes) {
            const auto slot = static_cast<std::size_t>(k);
            const int threads = static_cast<int>(topo.at(k).cpus.size());
            total += static_cast<std::size_t>(threads);
            // reserved_for_masters = 0: every slot is a worker's (docs/parallel_for.md).
            if (report_.pinning == pinning::tbbbind) {
#if TBB_INTERFACE_VERSION >= 12180
                for (std::size_t i = 0; i < from_tbb.size() && i < report_.tbb_numa_nodes.size(); ++i)
                    if (report_.tbb_numa_nodes[i] == k) arenas_[slot] = std::make_unique<tbb::task_arena>(from_tbb[i]);
                if (!arenas_[slot])
#endif
                {
                    tbb::task_arena::constraints c;
                    c.numa_id = k;
                    c.max_concurrency = threads;
                    arenas_[slot] = std::make_unique<tbb::task_arena>(c, 0u);
                }
            } else {
                arenas_[slot] = std::make_unique<tbb::task_arena>(threads, 0u);
            }
            arenas_[slot]->initialize();
            observers_.push_back(std::make_unique<detail::node_observer>(
                *arenas_[slot], k, topo.native(), topo.native_node(k)->cpuset, report_.pinning == pinning::hwloc));
        }
        verify(cpu_nodes);
        // One worker per CPU (every arena slot is a worker's), plus the caller; a lower user limit wins.
        limit_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, total + 1);
        detail::node_arenas_made.store(true, std::memory_order_relaxed);
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
    std::unique_ptr<tbb::global_control> limit_;
};

/// \returns what oneTBB sees and how arenas are pinned, as verified so far (creates the arenas on
/// first call).
inline arena_report arena_capabilities() { return node_arenas::get().report(); }

} // namespace numaplace

#endif
