#ifndef NUMAPLACE_BINDING_HPP_INCLUDED
#define NUMAPLACE_BINDING_HPP_INCLUDED

/// \file
/// The process's binding: the CPUs it may run on, as a launcher or the user set them (`taskset`,
/// `mpirun --bind-to`, Slurm's `--cpu-bind`, `numactl --cpunodebind`, `sched_setaffinity`), by node. It
/// decides the nodes and weights of a default partition and the size and pinning of the per-node
/// arenas, so that what a process computes and where its pages go stay within what it was given.
/// When it is read, and what a re-binding does: docs/parallel_for.md, "The process's binding".

#include "detail/hwloc.hpp"
#include "diagnostics.hpp"
#include "topology.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include <sched.h>
#include <unistd.h>

namespace numaplace {

/// The CPUs of each node this process may run on. A value: read with `current()` or `of()`.
class cpu_binding {
public:
    /// An empty binding (no CPU).
    cpu_binding() = default;

    /// \returns the binding read now: the CPU affinity of the process's main thread (the one a launcher
    /// binds before exec, `taskset -p` re-binds, and every thread starts from), within the CPUs of `topo`'s
    /// nodes. Not the union over threads: the loops' own pinning (and tbbbind's, which restores a worker's
    /// mask when it leaves an arena) would show there. Every CPU of `topo` for a topology that is not this
    /// system's (synthetic, XML: there is no affinity to read against it), and when the affinity cannot be
    /// read (recorded in `degradations()`). \throws std::bad_alloc.
    static cpu_binding current(const topology& topo = topology::get()) {
        if (!topo.is_this_system()) return whole(topo);
        detail::hwloc_bitmap_ptr set = detail::make_bitmap();
        if (!set) throw std::bad_alloc();
        if (hwloc_get_proc_cpubind(topo.native(), ::getpid(), set.get(), HWLOC_CPUBIND_THREAD) != 0) {
            detail::degradation_log::instance().record(
                "binding: the process's CPU affinity cannot be read: every CPU of every node assumed");
            return whole(topo);
        }
        cpu_binding b;
        b.cpus_.resize(topo.size());
        for (const node& n : topo.nodes())
            for (unsigned c : n.cpus)
                if (hwloc_bitmap_isset(set.get(), c)) b.cpus_[static_cast<std::size_t>(n.id)].push_back(c);
        if (b.cpu_count() == 0) { // an affinity outside every node hwloc sees: nothing to follow
            detail::degradation_log::instance().record(
                "binding: the process's CPU affinity holds no CPU of any node: every CPU of every node assumed");
            return whole(topo);
        }
        for (const node& n : topo.nodes())
            b.cores_.push_back(b.cpus_[static_cast<std::size_t>(n.id)] == n.cpus ? n.cores
                                                                                 : cores_holding(topo, set.get(), n));
        return b;
    }
    /// \returns the binding numaplace's defaults follow for `topo`: for the process's topology, the
    /// binding the per-node arenas were made for once they exist (their workers keep it), else the one
    /// read now; for any other topology, every CPU of it. \throws std::bad_alloc.
    static cpu_binding of(const topology& topo = topology::get());
    /// \returns every CPU of every node of `topo` (no binding).
    static cpu_binding whole(const topology& topo) {
        cpu_binding b;
        for (const node& n : topo.nodes()) {
            b.cpus_.push_back(n.cpus);
            b.cores_.push_back(n.cores);
        }
        return b;
    }

    /// \returns the nodes with at least one CPU of the binding (the nodes of a default partition).
    node_set nodes() const {
        std::vector<int> ids;
        for (std::size_t k = 0; k < cpus_.size(); ++k)
            if (!cpus_[k].empty()) ids.push_back(static_cast<int>(k));
        return node_set(std::move(ids));
    }
    /// \returns the CPUs (OS indexes) of node `id` in the binding; empty for a node without any.
    const std::vector<unsigned>& cpus(int id) const noexcept {
        static const std::vector<unsigned> none;
        return id >= 0 && static_cast<std::size_t>(id) < cpus_.size() ? cpus_[static_cast<std::size_t>(id)] : none;
    }
    /// \returns for each node of `nodes()`, in that order, the cores holding its CPUs of the binding (a core
    /// counts once whatever its hardware threads: the cores per node of an unbound process): a default
    /// partition's weights.
    std::vector<std::size_t> weights() const {
        std::vector<std::size_t> w;
        for (std::size_t k = 0; k < cpus_.size(); ++k)
            if (!cpus_[k].empty()) w.push_back(cores_[k]);
        return w;
    }
    /// \returns the CPUs of the binding, all nodes together.
    std::size_t cpu_count() const noexcept {
        std::size_t n = 0;
        for (const auto& c : cpus_) n += c.size();
        return n;
    }
    /// \returns whether the binding holds every CPU of every node of `topo` (the process is not bound).
    bool whole_of(const topology& topo) const { return *this == whole(topo); }
    /// \returns the binding as text, e.g. "node 0: cpus 0; node 1: cpus 2" ("no CPU" when empty).
    std::string to_string() const {
        std::string s;
        for (std::size_t k = 0; k < cpus_.size(); ++k) {
            if (cpus_[k].empty()) continue;
            s += (s.empty() ? "node " : "; node ") + std::to_string(k) + ": cpus";
            for (unsigned c : cpus_[k]) s += ' ' + std::to_string(c);
        }
        return s.empty() ? "no CPU" : s;
    }

    friend bool operator==(const cpu_binding& a, const cpu_binding& b) noexcept { return a.cpus_ == b.cpus_; }
    friend bool operator!=(const cpu_binding& a, const cpu_binding& b) noexcept { return !(a == b); }

private:
    // \returns how many cores hold a CPU of node `n` in `set` (a CPU without a core in hwloc counts as one).
    static std::size_t cores_holding(const topology& topo, hwloc_const_bitmap_t set, const node& n) {
        std::vector<hwloc_obj_t> cores;
        for (unsigned c : n.cpus) {
            if (!hwloc_bitmap_isset(set, c)) continue;
            const hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo.native(), c);
            const hwloc_obj_t core = pu ? hwloc_get_ancestor_obj_by_type(topo.native(), HWLOC_OBJ_CORE, pu) : nullptr;
            const hwloc_obj_t key = core ? core : pu;
            if (std::find(cores.begin(), cores.end(), key) == cores.end()) cores.push_back(key);
        }
        return cores.size();
    }

    std::vector<std::vector<unsigned>> cpus_; // by node id
    std::vector<std::size_t> cores_;          // by node id
};

namespace detail {

/// \returns the binding the per-node arenas were made for (null before).
inline std::atomic<const cpu_binding*>& fixed_binding_cell() noexcept {
    static std::atomic<const cpu_binding*> cell{nullptr}; // constant-initialised: no guard
    return cell;
}
/// \effects from now on, `cpu_binding::of(topology::get())` is `b` (the per-node arenas call it once,
/// when made); a second call keeps the first. \throws std::bad_alloc.
inline void fix_binding(const cpu_binding& b) {
    const cpu_binding* fresh = new cpu_binding(b); // kept for the process, as the arenas are
    const cpu_binding* expected = nullptr;
    if (!fixed_binding_cell().compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) delete fresh;
}

} // namespace detail

namespace detail {
/// \returns `f(cpu_binding::of(topo))` without copying the arenas' fixed binding (a default partition
/// made after the first loop reads it in place: no allocation, no syscall).
template <class F>
decltype(auto) with_binding(const topology& topo, F&& f) {
    if (&topo == &topology::get())
        if (const cpu_binding* fixed = fixed_binding_cell().load(std::memory_order_acquire)) return f(*fixed);
    return f(cpu_binding::current(topo));
}
} // namespace detail

inline cpu_binding cpu_binding::of(const topology& topo) {
    return detail::with_binding(topo, [](const cpu_binding& b) { return b; });
}

} // namespace numaplace

#endif
