#ifndef NUMAPLACE_BINDING_HPP_INCLUDED
#define NUMAPLACE_BINDING_HPP_INCLUDED

/// \file
/// The process's binding: the CPUs it may run on, as a launcher or the user set them (`taskset`,
/// `mpirun --bind-to`, Slurm's `--cpu-bind`, `numactl --cpunodebind`, `sched_setaffinity`), by node. It
/// decides the nodes and weights of a default partition and the size and pinning of the per-node
/// arenas, so that what a process computes and where its pages go stay within what it was given.
/// When it is read, and what a re-binding does: docs/parallel_for.md, "The process's binding".

#include "detail/config.hpp"
#include "topology.hpp"

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

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
    NUMAPLACE_DECL static cpu_binding current(const topology& topo = topology::get());
    /// \returns the binding numaplace's defaults follow for `topo`: for the process's topology, the
    /// binding the per-node arenas were made for once they exist (their workers keep it), else the one
    /// read now; for any other topology, every CPU of it. \throws std::bad_alloc.
    static cpu_binding of(const topology& topo = topology::get());
    /// \returns every CPU of every node of `topo` (no binding).
    NUMAPLACE_DECL static cpu_binding whole(const topology& topo);

    /// \returns the nodes with at least one CPU of the binding (the nodes of a default partition).
    NUMAPLACE_DECL node_set nodes() const;
    /// \returns the CPUs (OS indexes) of node `id` in the binding; empty for a node without any.
    const std::vector<unsigned>& cpus(int id) const noexcept {
        static const std::vector<unsigned> none;
        return id >= 0 && static_cast<std::size_t>(id) < cpus_.size() ? cpus_[static_cast<std::size_t>(id)] : none;
    }
    /// \returns for each node of `nodes()`, in that order, the cores holding its CPUs of the binding (a core
    /// counts once whatever its hardware threads: the cores per node of an unbound process): a default
    /// partition's weights.
    NUMAPLACE_DECL std::vector<std::size_t> weights() const;
    /// \returns the CPUs of the binding, all nodes together.
    std::size_t cpu_count() const noexcept {
        std::size_t n = 0;
        for (const auto& c : cpus_) n += c.size();
        return n;
    }
    /// \returns whether the binding holds every CPU of every node of `topo` (the process is not bound).
    NUMAPLACE_DECL bool whole_of(const topology& topo) const;
    /// \returns the binding as text, e.g. "node 0: cpus 0; node 1: cpus 2" ("no CPU" when empty).
    NUMAPLACE_DECL std::string to_string() const;

    friend bool operator==(const cpu_binding& a, const cpu_binding& b) noexcept { return a.cpus_ == b.cpus_; }
    friend bool operator!=(const cpu_binding& a, const cpu_binding& b) noexcept { return !(a == b); }

private:
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
NUMAPLACE_DECL void fix_binding(const cpu_binding& b);

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

#if NUMAPLACE_DEFINITIONS
#include "detail/binding_impl.hpp"
#endif

#endif
