#ifndef NUMAPLACE_OBSERVATION_HPP_INCLUDED
#define NUMAPLACE_OBSERVATION_HPP_INCLUDED

/// \file
/// What a scope of observation returns (observe.hpp): per group whether it was measured and why not, the
/// deltas of the counters read, and their text (`to_string`). A value: nothing here reads the machine.

#include <array>
#include <cstdint>
#include <cstdio>
#include <iterator> // before <string>: libstdc++ 12 under _GLIBCXX_DEBUG needs it declared first
#include <optional>
#include <string>
#include <vector>

namespace numaplace {

/// The groups of counters a scope reads.
enum class counter_group {
    numastat,   ///< per-node allocation counters (`/sys/devices/system/node/node<k>/numastat`)
    vmstat,     ///< NUMA balancing and migration counters (/proc/vmstat)
    software,   ///< perf software events of this process (cpu-migrations, page faults, context switches)
    node_access ///< perf node events: local and remote DRAM accesses (needs a PMU)
};

/// \returns "numastat", "vmstat", "software" or "node_access".
inline const char* name(counter_group g) noexcept {
    switch (g) {
    case counter_group::numastat: return "numastat";
    case counter_group::vmstat: return "vmstat";
    case counter_group::software: return "software";
    case counter_group::node_access: return "node_access";
    }
    return "unknown";
}

/// Whether a group was measured and, if not, exactly why.
struct group_status {
    /// whether the group was read.
    bool measured = false;
    bool system_wide = false; ///< counts every process of the machine (numastat, vmstat; node_access per CPU)
    int error = 0;            ///< errno of the failure, or 0
    std::string reason;       ///< why not measured; or, when measured, what the figures are of ("" if plain)
};

/// One node's numastat deltas, in pages (system-wide).
struct numastat_delta {
    int node = -1;          ///< the topology's node id; -1 when the topology is not this system's
    unsigned os_index = 0;  ///< the kernel's node number
    ///@{
    /// numastat's counters of this node over the scope, in pages (`/sys/devices/system/node/node<k>/numastat`).
    std::uint64_t numa_hit = 0, numa_miss = 0, numa_foreign = 0, interleave_hit = 0, local_node = 0, other_node = 0;
    ///@}
};

/// /proc/vmstat deltas (system-wide); each absent where the kernel has no such counter.
struct vmstat_delta {
    ///@{
    /// the `/proc/vmstat` counter of the same name, over the scope.
    std::optional<std::uint64_t> numa_pages_migrated, numa_hint_faults, numa_hint_faults_local, numa_pte_updates,
        pgmigrate_success, pgmigrate_fail;
    ///@}
};

/// This process's software events over the scope (every thread, kernel included).
struct software_delta {
    ///@{
    /// the software event of the same name (perf), over the scope.
    std::optional<std::uint64_t> cpu_migrations, page_faults, context_switches;
    ///@}
};

/// One CPU's node events (node_access read per CPU).
struct cpu_node_access {
    /// the CPU's number (the kernel's).
    unsigned cpu = 0;
    ///@{
    std::uint64_t accesses = 0, misses = 0; ///< the raw node-loads and node-load-misses of this CPU
    ///@}
};

/// Demand data reads served from DRAM of the local node and of other nodes (PERF_COUNT_HW_CACHE_NODE).
struct node_access_delta {
    ///@{
    std::optional<std::uint64_t> local, remote;      ///< where the processor's meaning is known (docs/observe.md)
    ///@}
    ///@{
    std::optional<std::uint64_t> accesses, misses;   ///< raw: node read ACCESS ("node-loads"), MISS ("node-load-misses")
    ///@}
    bool per_cpu = false;                            ///< read per CPU (every process there), else per thread of this process
    std::vector<cpu_node_access> cpus;               ///< per CPU, when per_cpu
};

class observation_scope;

/// The deltas of one scope: a value.
class observation {
public:
    /// \returns whether `g` was measured and why not.
    const group_status& status(counter_group g) const noexcept { return status_[static_cast<std::size_t>(g)]; }
    /// \returns one entry per node (empty unless measured).
    const std::vector<numastat_delta>& numastat() const noexcept { return numastat_; }
    /// \returns the `/proc/vmstat` deltas (each absent where not measured).
    const vmstat_delta& vmstat() const noexcept { return vmstat_; }
    /// \returns the software events' deltas (each absent where not measured).
    const software_delta& software() const noexcept { return software_; }
    /// \returns the node access deltas (each absent where not measured).
    const node_access_delta& node_access() const noexcept { return node_access_; }
    /// \returns the wall time of the scope in seconds.
    double seconds() const noexcept { return seconds_; }
    /// \returns remote / local accesses (RMA/LMA) where both were measured and local > 0.
    std::optional<double> remote_to_local() const noexcept {
        if (!node_access_.local || !node_access_.remote || *node_access_.local == 0) return std::nullopt;
        return static_cast<double>(*node_access_.remote) / static_cast<double>(*node_access_.local);
    }

private:
    friend class observation_scope;
    std::array<group_status, 4> status_{};
    std::vector<numastat_delta> numastat_;
    vmstat_delta vmstat_;
    software_delta software_;
    node_access_delta node_access_;
    double seconds_ = 0;
};

namespace detail {
inline std::string counter_text(const std::optional<std::uint64_t>& v) { return v ? "+" + std::to_string(*v) : "n/a"; }
inline std::string group_line(const char* label, const group_status& s) {
    std::string line = label;
    line.resize(29, ' ');
    if (!s.measured) return line + "NOT measured: " + s.reason + "\n";
    return line + (s.system_wide ? "system-wide" : "this process") + (s.reason.empty() ? "" : " (" + s.reason + ")") + "\n";
}
} // namespace detail

/// \returns the observation as text, one line per group in the capability report's form (label, then
/// measured or why not), then the figures; an absent counter reads "n/a", never 0.
inline std::string to_string(const observation& o) {
    using detail::counter_text;
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.6f", o.seconds());
    std::string out = std::string("observation over ") + seconds + " s\n";
    out += detail::group_line("numastat:", o.status(counter_group::numastat));
    for (const auto& n : o.numastat())
        out += "  node " + std::to_string(n.node) + " (os " + std::to_string(n.os_index) + ") pages: numa_hit +" +
               std::to_string(n.numa_hit) + ", numa_miss +" + std::to_string(n.numa_miss) + ", numa_foreign +" +
               std::to_string(n.numa_foreign) + ", interleave_hit +" + std::to_string(n.interleave_hit) +
               ", local_node +" + std::to_string(n.local_node) + ", other_node +" + std::to_string(n.other_node) + "\n";
    out += detail::group_line("vmstat:", o.status(counter_group::vmstat));
    if (o.status(counter_group::vmstat).measured) {
        const vmstat_delta& v = o.vmstat();
        out += "  numa_pages_migrated " + counter_text(v.numa_pages_migrated) + ", numa_hint_faults " +
               counter_text(v.numa_hint_faults) + " (local " + counter_text(v.numa_hint_faults_local) +
               "), numa_pte_updates " + counter_text(v.numa_pte_updates) + ", pgmigrate_success " +
               counter_text(v.pgmigrate_success) + ", pgmigrate_fail " + counter_text(v.pgmigrate_fail) + "\n";
    }
    out += detail::group_line("software:", o.status(counter_group::software));
    if (o.status(counter_group::software).measured) {
        const software_delta& w = o.software();
        out += "  cpu-migrations " + counter_text(w.cpu_migrations) + ", page-faults " + counter_text(w.page_faults) +
               ", context-switches " + counter_text(w.context_switches) + "\n";
    }
    out += detail::group_line("node_access:", o.status(counter_group::node_access));
    if (o.status(counter_group::node_access).measured) {
        const node_access_delta& a = o.node_access();
        out += "  local " + counter_text(a.local) + ", remote " + counter_text(a.remote) + " (node-loads " +
               counter_text(a.accesses) + ", node-load-misses " + counter_text(a.misses) + ")";
        if (const auto ratio = o.remote_to_local()) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.3f", *ratio);
            out += std::string(", RMA/LMA ") + buf;
        }
        out += "\n";
        for (const auto& c : a.cpus)
            out += "  cpu " + std::to_string(c.cpu) + ": node-loads +" + std::to_string(c.accesses) + ", node-load-misses +" +
                   std::to_string(c.misses) + "\n";
    }
    return out;
}

} // namespace numaplace

#endif
