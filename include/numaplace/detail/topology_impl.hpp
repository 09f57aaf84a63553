#ifndef NUMAPLACE_DETAIL_TOPOLOGY_IMPL_HPP_INCLUDED
#define NUMAPLACE_DETAIL_TOPOLOGY_IMPL_HPP_INCLUDED

/// \file
/// The definitions of topology.hpp's out-of-line functions: loading and reading the hwloc topology,
/// probing the kernel. Included by topology.hpp in header-only mode, compiled into libnumaplace in the
/// separately compiled mode (detail/config.hpp).

#include "../error.hpp"
#include "../topology.hpp"
#include "hwloc.hpp"
#include "linux.hpp"
#include "memory_attribute_hwloc.hpp"
#include "topology_load.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <sched.h>

namespace numaplace {

NUMAPLACE_DECL const topology& topology::get() {
    return system_cell().get([] { return new topology(detail::load_system_topology()); }); // never destroyed
}
NUMAPLACE_DECL std::unique_ptr<topology> topology::from_synthetic(const std::string& description) {
    return from_source([&](hwloc_topology_t t) { return hwloc_topology_set_synthetic(t, description.c_str()); },
                       "hwloc rejected synthetic topology '" + description + "'");
}
NUMAPLACE_DECL std::unique_ptr<topology> topology::from_xml(const std::string& path) {
    return from_source([&](hwloc_topology_t t) { return hwloc_topology_set_xml(t, path.c_str()); },
                       "hwloc cannot read XML topology '" + path + "'");
}
NUMAPLACE_DECL node_set topology::all() const {
    std::vector<int> ids;
    for (const auto& n : nodes_) ids.push_back(n.id);
    return node_set(std::move(ids));
}
NUMAPLACE_DECL node_set topology::with_cpus() const {
    std::vector<int> ids;
    for (const auto& n : nodes_)
        if (n.has_cpus()) ids.push_back(n.id);
    return node_set(std::move(ids));
}
NUMAPLACE_DECL std::optional<std::uint64_t> topology::memory_attribute_value(memory_attribute attr, int target,
                                                                             int initiator) const {
    detail::check_attribute(attr, "memory_attribute_value");
    check(target);
    check(initiator);
    if (!nodes_[static_cast<std::size_t>(initiator)].has_cpus())
        detail::throw_invalid("memory_attribute_value: node " + std::to_string(initiator) + " has no CPUs to initiate accesses");
    return attribute_value(attr, target, initiator);
}
NUMAPLACE_DECL int topology::node_of_cpus(const cpu_set_t& set) const noexcept {
    int found = -1;
    for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &set)) continue;
        const int n = node_of_cpu(cpu);
        if (n < 0) continue; // not this process's (cpuset): nothing runs there
        if (found >= 0 && n != found) return -1;
        found = n;
    }
    return found;
}
NUMAPLACE_DECL hwloc_obj_t topology::native_node(int id) const {
    check(id);
    return hwloc_get_obj_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, static_cast<unsigned>(id));
}
NUMAPLACE_DECL bool topology::is_this_system() const noexcept { return hwloc_topology_is_thissystem(topo_.get()) != 0; }
NUMAPLACE_DECL detail::lazy_global<const topology>& topology::system_cell() noexcept {
    static detail::lazy_global<const topology> cell; // constant-initialised: no guard
    return cell;
}

template <class SetSource>
std::unique_ptr<topology> topology::from_source(SetSource&& set_source, const std::string& error) {
    detail::hwloc_topology_ptr t = detail::make_empty_topology();
    if (set_source(t.get()) != 0) detail::throw_invalid(error);
    detail::load_topology(t.get());
    return std::unique_ptr<topology>(new topology(std::move(t)));
}

NUMAPLACE_DECL topology::topology(detail::hwloc_topology_ptr t) : topo_(std::move(t)) {
    hwloc_topology_t tp = topo_.get();
    int count = hwloc_get_nbobjs_by_type(tp, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < count; ++i) {
        hwloc_obj_t obj = hwloc_get_obj_by_type(tp, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
        node n;
        n.id = static_cast<int>(obj->logical_index);
        n.os_index = obj->os_index;
        n.memory = obj->attr ? obj->attr->numanode.local_memory : 0;
        if (obj->cpuset && !hwloc_bitmap_iszero(obj->cpuset)) {
            for (int pu = hwloc_bitmap_first(obj->cpuset); pu >= 0; pu = hwloc_bitmap_next(obj->cpuset, pu)) {
                // only PUs that exist in this (possibly restricted) topology
                if (hwloc_get_pu_obj_by_os_index(tp, static_cast<unsigned>(pu)))
                    n.cpus.push_back(static_cast<unsigned>(pu));
            }
            n.cores = static_cast<std::size_t>(
                hwloc_get_nbobjs_inside_cpuset_by_type(tp, obj->cpuset, HWLOC_OBJ_CORE));
            if (n.cores == 0) n.cores = n.cpus.size();
        }
        kernel_cpus_only(n);
        nodes_.push_back(std::move(n));
    }
    if (!is_this_system()) cpus_owned_once();
    for (const node& n : nodes_) {
        if (os_to_id_.size() <= n.os_index) os_to_id_.resize(n.os_index + 1, -1);
        os_to_id_[n.os_index] = n.id;
        for (unsigned cpu : n.cpus) {
            if (cpu_to_node_.size() <= cpu) cpu_to_node_.resize(cpu + 1, -1);
            cpu_to_node_[cpu] = n.id;
        }
    }
    read_distances();
    read_memory_attributes();
    caps_.nodes = nodes_.size();
    caps_.system_nodes = nodes_.size();
    if (is_this_system()) probe();
}

NUMAPLACE_DECL void topology::kernel_cpus_only(node& n) const {
    std::vector<unsigned> kernel;
    if (n.cpus.empty() || !is_this_system() || !detail::os_node_cpus(n.os_index, kernel)) return;
    const auto before = n.cpus.size();
    n.cpus.erase(std::remove_if(n.cpus.begin(), n.cpus.end(),
                                [&](unsigned c) { return std::find(kernel.begin(), kernel.end(), c) == kernel.end(); }),
                 n.cpus.end());
    if (n.cpus.size() != before) n.cores = n.cpus.empty() ? 0 : n.cpus.size(); // a CPU-less node, or (never seen) a split core
}

// The same for a topology that is not this system's (XML, synthetic), which has no kernel to ask: a
// CPU belongs to one node, as in the kernel. Nodes claim their CPUs from the smallest cpuset up (the
// lowest OS index first among equal ones); a node whose CPUs are all claimed is memory-only. So an
// HMAT or CXL node attached to a socket or to the machine (hwloc gives it that cpuset), or a second
// node of a socket (KNL's MCDRAM, HBM in flat mode), has no CPUs, as on the machine it came from.
NUMAPLACE_DECL void topology::cpus_owned_once() {
    std::vector<std::size_t> order(nodes_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const node &x = nodes_[a], &y = nodes_[b];
        return x.cpus.size() != y.cpus.size() ? x.cpus.size() < y.cpus.size() : x.os_index < y.os_index;
    });
    std::vector<bool> claimed;
    for (std::size_t i : order) {
        node& n = nodes_[i];
        const auto before = n.cpus.size();
        n.cpus.erase(std::remove_if(n.cpus.begin(), n.cpus.end(), [&](unsigned c) { return c < claimed.size() && claimed[c]; }),
                     n.cpus.end());
        for (unsigned c : n.cpus) {
            if (claimed.size() <= c) claimed.resize(c + 1, false);
            claimed[c] = true;
        }
        if (n.cpus.size() != before) n.cores = n.cpus.empty() ? 0 : n.cpus.size();
    }
}

NUMAPLACE_DECL std::optional<std::uint64_t> topology::attribute_value(memory_attribute attr, int target, int initiator) const noexcept {
    return detail::hwloc_memory_attribute(topo_.get(), attr, static_cast<unsigned>(target), static_cast<unsigned>(initiator));
}
NUMAPLACE_DECL void topology::read_memory_attributes() noexcept {
    for (const auto& from : nodes_)
        for (const auto& to : nodes_)
            caps_.memory_attributes = caps_.memory_attributes ||
                (from.has_cpus() && (attribute_value(memory_attribute::bandwidth, to.id, from.id) ||
                                     attribute_value(memory_attribute::latency, to.id, from.id)));
}

NUMAPLACE_DECL void topology::read_distances() {
    const std::size_t n = nodes_.size();
    distances_.assign(n * n, 20u);
    for (std::size_t i = 0; i < n; ++i) distances_[i * n + i] = 10u;
    unsigned nr = 1;
    hwloc_distances_s* dist = nullptr;
    if (hwloc_distances_get_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, &nr, &dist,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 || nr == 0) {
        nr = 1;
        if (hwloc_distances_get_by_type(topo_.get(), HWLOC_OBJ_NUMANODE, &nr, &dist, 0, 0) != 0 || nr == 0)
            return;
    }
    for (unsigned i = 0; i < dist->nbobjs; ++i)
        for (unsigned j = 0; j < dist->nbobjs; ++j) {
            auto a = dist->objs[i]->logical_index, b = dist->objs[j]->logical_index;
            if (a < n && b < n) distances_[a * n + b] = static_cast<unsigned>(dist->values[i * dist->nbobjs + j]);
        }
    caps_.distances_known = true;
    hwloc_distances_release(topo_.get(), dist);
}

NUMAPLACE_DECL void topology::probe() {
    using namespace detail;
    caps_.probed = true;
    {
        std::string online = read_line("/sys/devices/system/node/online");
        std::size_t total = 0;
        // "0-3,5" style list
        for (std::size_t pos = 0; pos < online.size();) {
            std::size_t comma = online.find(',', pos);
            std::string part = online.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
            std::size_t dash = part.find('-');
            if (!part.empty()) {
                if (dash == std::string::npos) total += 1;
                else total += std::stoul(part.substr(dash + 1)) - std::stoul(part.substr(0, dash)) + 1;
            }
            if (comma == std::string::npos) break;
            pos = comma + 1;
        }
        if (total) caps_.system_nodes = total;
    }
    caps_.thp = bracketed(read_line("/sys/kernel/mm/transparent_hugepage/enabled", "[unknown]"));
    {
        std::string b = read_line("/proc/sys/kernel/numa_balancing");
        if (!b.empty()) caps_.numa_balancing = std::atoi(b.c_str());
    }
    if (nodes_.empty()) return;
    const policy_probe probe = os_probe_policies(nodes_.front().os_index);
    if (probe.mapped) {
        caps_.memory_binding_errno = probe.bind_errno;
        caps_.memory_binding = probe.bind_errno == 0;
        caps_.preferred_many = probe.preferred_many;
        caps_.weighted_interleave = probe.weighted_interleave;
        caps_.numa_balancing_bind = probe.numa_balancing_bind;
        caps_.page_query_errno = probe.query_errno;
        caps_.page_query = probe.query_errno == 0;
    }
    // CPU binding: re-apply the calling thread's own binding (changes nothing).
    auto set = make_bitmap();
    if (hwloc_get_cpubind(topo_.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0 &&
        hwloc_set_cpubind(topo_.get(), set.get(), HWLOC_CPUBIND_THREAD) == 0) {
        caps_.cpu_binding = true;
    } else {
        caps_.cpu_binding_errno = errno;
    }
}

namespace detail {
// Fork hooks (stage topology): a thread loading the topology finishes before fork; none starts during it.
// Nothing is loaded on behalf of a fork.
inline const fork_hook_registration topology_fork NUMAPLACE_EARLY_INIT{
    fork_stage::topology, lazy_global_hooks<const topology, &topology::system_cell>::hook()};
} // namespace detail

} // namespace numaplace

#endif
