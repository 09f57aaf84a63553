#ifndef NUMAPLACE_DETAIL_BINDING_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_BINDING_IMPL_HPP_INCLUDED

/// \file
/// The definitions of binding.hpp's out-of-line functions: reading the process's CPU affinity by node
/// through hwloc. Included by binding.hpp in header-only mode, compiled into libnumaplace in the
/// separately compiled mode (detail/config.hpp).

#include "../binding.hpp"
#include "../diagnostics.hpp"
#include "../topology.hpp"
#include "hwloc.hpp"

#include <algorithm>
#include <cstddef>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

namespace numaplace {
namespace detail {

/// \returns how many cores hold a CPU of node `n` in `set` (a CPU without a core in hwloc counts as one).
inline std::size_t cores_holding(const topology& topo, hwloc_const_bitmap_t set, const node& n) {
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

} // namespace detail

NUMAPLACE_DECL cpu_binding cpu_binding::current(const topology& topo) {
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
                                                                             : detail::cores_holding(topo, set.get(), n));
    return b;
}

NUMAPLACE_DECL cpu_binding cpu_binding::whole(const topology& topo) {
    cpu_binding b;
    for (const node& n : topo.nodes()) {
        b.cpus_.push_back(n.cpus);
        b.cores_.push_back(n.cores);
    }
    return b;
}

NUMAPLACE_DECL node_set cpu_binding::nodes() const {
    std::vector<int> ids;
    for (std::size_t k = 0; k < cpus_.size(); ++k)
        if (!cpus_[k].empty()) ids.push_back(static_cast<int>(k));
    return node_set(std::move(ids));
}

NUMAPLACE_DECL std::vector<std::size_t> cpu_binding::weights() const {
    std::vector<std::size_t> w;
    for (std::size_t k = 0; k < cpus_.size(); ++k)
        if (!cpus_[k].empty()) w.push_back(cores_[k]);
    return w;
}

NUMAPLACE_DECL bool cpu_binding::whole_of(const topology& topo) const { return *this == whole(topo); }

NUMAPLACE_DECL std::string cpu_binding::to_string() const {
    std::string s;
    for (std::size_t k = 0; k < cpus_.size(); ++k) {
        if (cpus_[k].empty()) continue;
        s += (s.empty() ? "node " : "; node ") + std::to_string(k) + ": cpus";
        for (unsigned c : cpus_[k]) s += ' ' + std::to_string(c);
    }
    return s.empty() ? "no CPU" : s;
}

namespace detail {

NUMAPLACE_DECL void fix_binding(const cpu_binding& b) {
    const cpu_binding* fresh = new cpu_binding(b); // kept for the process, as the arenas are
    const cpu_binding* expected = nullptr;
    if (!fixed_binding_cell().compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) delete fresh;
}

} // namespace detail
} // namespace numaplace

#endif
