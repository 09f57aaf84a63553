#ifndef NUMAPLACE_REPORT_HPP_INCLUDED
#define NUMAPLACE_REPORT_HPP_INCLUDED

/// \file
/// The capability report (`numaplace-info`'s text form): nodes, CPUs, memory, distances, every
/// capability and every degradation so far.

#include "diagnostics.hpp"
#include "observe.hpp"
#include "tiers.hpp"
#include "topology.hpp"

#include <ostream>

namespace numaplace {

/// Prints nodes, CPUs, memory, distances and every capability, `numactl --hardware` style, with the
/// degradations spelled out, and which groups of observation (observe.hpp) work here and why not.
inline void print_report(std::ostream& os, const topology& topo = topology::get()) {
    const auto& caps = topo.capabilities();
    os << "nodes: " << topo.size() << " usable";
    if (caps.system_nodes > topo.size())
        os << " of " << caps.system_nodes << " online (the cpuset or hwloc's settings hide the rest)";
    else if (caps.system_nodes < topo.size())
        os << ", but the kernel has " << caps.system_nodes << " online (the topology read is not the kernel's)";
    os << '\n';
    for (const auto& n : topo.nodes()) {
        os << "node " << n.id << " (os " << n.os_index << "): ";
        if (n.has_cpus()) {
            os << n.cores << " cores, cpus";
            for (unsigned c : n.cpus) os << ' ' << c;
        } else {
            os << "memory-only (no cpus)";
        }
        os << ", memory " << (n.memory >> 20) << " MiB\n";
    }
    os << "distances" << (caps.distances_known ? "" : " (not given by firmware; assumed)") << ":\n     ";
    for (const auto& b : topo.nodes()) os << ' ' << (b.id < 10 ? "  " : " ") << b.id;
    os << '\n';
    for (const auto& a : topo.nodes()) {
        os << "  " << (a.id < 10 ? " " : "") << a.id << ':';
        for (const auto& b : topo.nodes()) {
            unsigned d = topo.distance(a.id, b.id);
            os << ' ' << (d < 10 ? "  " : d < 100 ? " " : "") << d;
        }
        os << '\n';
    }
    auto yes_no = [](bool b) { return b ? "yes" : "NO"; };
    if (!caps.probed) { // a topology that is not this system's: the kernel was not asked
        for (const char* line : {"memory binding (mbind):      ", "\npage query (move_pages):     ", "\ncpu binding (hwloc):         ",
                                 "\nMPOL_PREFERRED_MANY:         ", "\nMPOL_WEIGHTED_INTERLEAVE:    ", "\nMPOL_F_NUMA_BALANCING:       "})
            os << line << "not probed (the topology is not this system's)";
    } else {
        os << "memory binding (mbind):      " << yes_no(caps.memory_binding);
        if (!caps.memory_binding)
            os << " (errno " << caps.memory_binding_errno << ": strict placements throw, degrading ones fall back to first touch)";
        os << "\npage query (move_pages):     " << yes_no(caps.page_query);
        if (!caps.page_query) os << " (errno " << caps.page_query_errno << ": where() cannot report)";
        os << "\ncpu binding (hwloc):         " << yes_no(caps.cpu_binding);
        if (!caps.cpu_binding) os << " (errno " << caps.cpu_binding_errno << ": threads cannot be pinned)";
        os << "\nMPOL_PREFERRED_MANY:         " << yes_no(caps.preferred_many);
        if (!caps.preferred_many) os << " (preferred_many strict throws; degrading prefers the first node)";
        os << "\nMPOL_WEIGHTED_INTERLEAVE:    " << yes_no(caps.weighted_interleave)
           << " (numaplace weights interleave per page run itself; the kernel's weights are system-wide)";
        os << "\nMPOL_F_NUMA_BALANCING:       " << yes_no(caps.numa_balancing_bind)
           << (caps.numa_balancing_bind ? " (bind_with_balancing: bound pages may migrate among their nodes)"
                                        : " (bind_with_balancing strict throws; degrading binds without it)");
    }
    os << "\ntransparent huge pages:      " << caps.thp;
    os << "\nmemory attributes (HMAT):    " << yes_no(caps.memory_attributes)
       << (caps.memory_attributes ? " (memory tiers: tiers.hpp)" : " (no bandwidth or latency from the firmware: memory tiers unknown)");
    if (caps.memory_attributes)
        for (const auto& from : topo.nodes()) {
            if (!from.has_cpus()) continue;
            os << "\nmemory tiers from node " << from.id << ":";
            const memory_tiers bw = memory_tiers::of(from.id, memory_attribute::bandwidth, topo);
            const memory_tiers lat = memory_tiers::of(from.id, memory_attribute::latency, topo);
            const char* sep = " ";
            for (const auto& t : bw.tiers()) {
                os << sep << "nodes";
                for (int id : t.nodes) os << ' ' << id;
                os << " (" << t.value << " MiB/s";
                for (const auto& l : lat.tiers())
                    if (l.nodes.contains(t.nodes[0])) os << ", " << l.value << " ns";
                os << ')';
                sep = " > ";
            }
            if (!bw.unknown().empty()) {
                os << "; unknown:";
                for (int id : bw.unknown()) os << ' ' << id;
            }
        }
    os << "\nkernel.numa_balancing:       " << caps.numa_balancing
       << (caps.numa_balancing > 0 ? " (the kernel may migrate pages after placement)" : "");
    for (counter_group g : {counter_group::numastat, counter_group::vmstat, counter_group::software, counter_group::node_access}) {
        const group_status& st = observation_capabilities().status(g); // this machine's, whatever the topology
        std::string label = std::string("\nobservation ") + name(g) + ":";
        label.resize(30, ' ');
        os << label;
        if (st.measured) os << "yes (" << (st.system_wide ? "system-wide" : "this process") << (st.reason.empty() ? "" : ": " + st.reason) << ')';
        else os << "NO (" << st.reason << ')';
    }
    os << "\ndegradations so far:         " << degradation_count() << '\n';
    for (const auto& m : degradations()) os << "  - " << m << '\n';
}

} // namespace numaplace

#endif
