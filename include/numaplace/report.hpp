#ifndef NUMAPLACE_REPORT_HPP_INCLUDED
#define NUMAPLACE_REPORT_HPP_INCLUDED

/// \file
/// The capability report (`numaplace-info`'s text form): nodes, CPUs, memory, distances, every
/// capability and every degradation so far.

#include "diagnostics.hpp"
#include "observe.hpp"
#include "tiers.hpp"
#include "huge_pages.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

namespace numaplace {

/// Nodes that one initiator reaches with the same bandwidth and the same latency (either may be unknown).
struct memory_tier_row {
    /// the nodes this initiator reaches with these values.
    node_set nodes;
    std::optional<std::uint64_t> bandwidth; ///< MiB/s, as `memory_tiers::value_of` gives it
    std::optional<std::uint64_t> latency;   ///< ns, as `memory_tiers::value_of` gives it
    std::optional<std::size_t> rank;        ///< index of its tier by `ranked_by`; none: no value of it
};

/// What `numaplace-info` shows of one initiator's tiers: every node with its own bandwidth and latency.
struct memory_tier_table {
    /// the initiator node whose view this is.
    int initiator = -1;
    std::optional<memory_attribute> ranked_by; ///< bandwidth if any node has one, else latency if any, else none
    std::vector<memory_tier_row> rows;         ///< by rank (best first), then by the other attribute (best first, unknown last)
    node_set unknown;                          ///< nodes with neither value
};

namespace detail {
// Every node of `t`, with a value or unknown.
inline node_set nodes_of(const memory_tiers& t) {
    std::vector<int> ids(t.unknown().begin(), t.unknown().end());
    for (const auto& tier : t.tiers()) ids.insert(ids.end(), tier.nodes.begin(), tier.nodes.end());
    return node_set(std::move(ids));
}
} // namespace detail

/// \returns the table of `bandwidth` and `latency` (the tiers of one initiator by bandwidth and by
/// latency): the tiers of `ranked_by`, each split into rows of equal other value; then, without a rank,
/// the nodes that have only the other value; then the nodes with neither in `unknown`.
/// \throws invalid_placement unless `bandwidth` is by bandwidth and `latency` by latency, of one initiator.
inline memory_tier_table tier_table(const memory_tiers& bandwidth, const memory_tiers& latency) {
    if (bandwidth.attribute() != memory_attribute::bandwidth || latency.attribute() != memory_attribute::latency ||
        bandwidth.initiator() != latency.initiator() || detail::nodes_of(bandwidth) != detail::nodes_of(latency))
        detail::throw_invalid("tier_table: wants the tiers of one initiator over the same nodes, by bandwidth then by latency");
    memory_tier_table table;
    table.initiator = bandwidth.initiator();
    const bool by_bandwidth = bandwidth.known();
    if (by_bandwidth || latency.known()) table.ranked_by = by_bandwidth ? memory_attribute::bandwidth : memory_attribute::latency;
    const memory_tiers& first = by_bandwidth ? bandwidth : latency;
    const memory_tiers& second = by_bandwidth ? latency : bandwidth;
    // rows of `ids` (node order) by the second value: best first, unknown last, each value once
    const auto add_rows = [&](const std::vector<int>& ids, std::optional<std::size_t> rank) {
        std::vector<std::pair<std::optional<std::uint64_t>, int>> by;
        for (int id : ids) by.emplace_back(second.value_of(id), id);
        const bool higher = higher_is_better(second.attribute());
        std::stable_sort(by.begin(), by.end(), [higher](const auto& a, const auto& b) {
            if (a.first.has_value() != b.first.has_value()) return a.first.has_value();
            return a.first && (higher ? *a.first > *b.first : *a.first < *b.first);
        });
        for (std::size_t i = 0; i < by.size();) {
            std::vector<int> row;
            std::size_t j = i;
            for (; j < by.size() && by[j].first == by[i].first; ++j) row.push_back(by[j].second);
            const std::optional<std::uint64_t> own = rank ? std::optional<std::uint64_t>(first.tiers()[*rank].value) : std::nullopt;
            table.rows.push_back(memory_tier_row{node_set(row), by_bandwidth ? own : by[i].first, by_bandwidth ? by[i].first : own, rank});
            i = j;
        }
    };
    if (table.ranked_by)
        for (std::size_t r = 0; r < first.tiers().size(); ++r) add_rows(first.tiers()[r].nodes.ids(), r);
    std::vector<int> other_only, neither;
    for (int id : first.unknown()) (second.value_of(id) ? other_only : neither).push_back(id);
    add_rows(other_only, std::nullopt);
    table.unknown = node_set(neither);
    return table;
}

/// \effects prints `table` on one line: rows of one rank joined by ", ", ranks by " > ", then "; no
/// bandwidth: " (or latency) and the rows without a rank, "; unknown:" and the nodes with neither value;
/// a row as "nodes 1 3 (51200 MiB/s, 150 ns)", "bandwidth unknown" or "latency unknown" for a missing
/// value; "none" when no node has a value.
inline void print_tier_table(std::ostream& os, const memory_tier_table& table) {
    const auto print_row = [&os](const memory_tier_row& row) {
        os << "nodes";
        for (int id : row.nodes) os << ' ' << id;
        os << " (";
        if (row.bandwidth) os << *row.bandwidth << " MiB/s"; else os << "bandwidth unknown";
        os << ", ";
        if (row.latency) os << *row.latency << " ns"; else os << "latency unknown";
        os << ')';
    };
    const char* sep = "";
    std::size_t i = 0;
    for (; i < table.rows.size() && table.rows[i].rank; ++i) {
        os << (i == 0 ? "" : *table.rows[i].rank == *table.rows[i - 1].rank ? ", " : " > ");
        print_row(table.rows[i]);
        sep = "; ";
    }
    if (i < table.rows.size()) {
        os << sep << "no " << (table.ranked_by == memory_attribute::latency ? "latency" : "bandwidth") << ": ";
        for (std::size_t k = i; k < table.rows.size(); ++k) {
            os << (k == i ? "" : ", ");
            print_row(table.rows[k]);
        }
        sep = "; ";
    }
    if (table.rows.empty()) {
        os << "none";
        sep = "; ";
    }
    if (!table.unknown.empty()) {
        os << sep << "unknown:";
        for (int id : table.unknown) os << ' ' << id;
    }
}

/// \effects prints the explicit huge page pools of every node of `topo` (size, total, free, surplus) and
/// what limits this process's use of them (hugetlb cgroup, RLIMIT_MEMLOCK, hugetlbfs), one line each,
/// after a line `explicit huge pages:`. For a topology that is not this system's: "not read".
inline void print_huge_pages(std::ostream& os, const topology& topo) {
    os << "\nexplicit huge pages:         ";
    if (!topo.is_this_system()) {
        os << "not read (the topology is not this system's)";
        return;
    }
    const std::vector<std::size_t> sizes = explicit_page_sizes();
    if (sizes.empty()) {
        os << "none (no hugetlb in this kernel, or /sys/kernel/mm/hugepages hidden): explicit page sizes throw (strict) or fall back";
        return;
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << page_bytes_name(sizes[i]);
    os << " (MAP_HUGETLB: pages from each node's own pool, faulted in at allocation)";
    for (const auto& n : topo.nodes()) {
        os << "\n  node " << n.id << " pools:";
        const std::vector<huge_page_pool> pools = huge_page_pools(n.id, topo);
        for (std::size_t i = 0; i < pools.size(); ++i)
            os << (i ? ";" : "") << ' ' << page_bytes_name(pools[i].page_bytes) << ": " << pools[i].total << " total, "
               << pools[i].free << " free, " << pools[i].surplus << " surplus";
    }
    for (std::size_t s : sizes) {
        const huge_page_usability u = huge_page_usage_limits(s);
        os << "\n  usable " << page_bytes_name(s) << ": ";
        if (!u.cgroup_visible) os << "no hugetlb cgroup limit visible";
        else if (!u.cgroup_limited) os << "hugetlb cgroup: no limit (" << u.cgroup_file << ')';
        else os << "hugetlb cgroup limit " << u.cgroup_limit << " bytes, " << u.cgroup_usage << " used (" << u.cgroup_file << ')';
    }
    const std::size_t memlock = detail::os_memlock_limit();
    os << "\n  RLIMIT_MEMLOCK: " << (memlock == SIZE_MAX ? std::string("unlimited") : std::to_string(memlock) + " bytes")
       << " (limits SHM_HUGETLB shared memory only, not MAP_HUGETLB); hugetlbfs "
       << (detail::os_hugetlbfs_mounted() ? "mounted" : "not mounted (MAP_HUGETLB needs none)");
}

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
    print_huge_pages(os, topo);
    os << "\nmemory attributes (HMAT):    " << yes_no(caps.memory_attributes)
       << (caps.memory_attributes ? " (memory tiers: tiers.hpp)" : " (no bandwidth or latency from the firmware: memory tiers unknown)");
    if (caps.memory_attributes)
        for (const auto& from : topo.nodes()) {
            if (!from.has_cpus()) continue;
            os << "\nmemory tiers from node " << from.id << ": ";
            print_tier_table(os, tier_table(memory_tiers::of(from.id, memory_attribute::bandwidth, topo),
                                            memory_tiers::of(from.id, memory_attribute::latency, topo)));
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
