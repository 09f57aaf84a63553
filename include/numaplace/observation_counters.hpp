#ifndef NUMAPLACE_OBSERVATION_COUNTERS_HPP_INCLUDED
#define NUMAPLACE_OBSERVATION_COUNTERS_HPP_INCLUDED

/// \file
/// An observation (observe.hpp) and a where() result as one flat list of named values: the list
/// `benchmark.hpp` adds as Google Benchmark counters and the DGEMV demo prints as columns. A counter that
/// was not measured is not in the list (never a 0): its group is listed as absent, with the reason.
/// Core component: no Google Benchmark here. Names and units: docs/benchmark.md.

#include "observation.hpp"
#include "where.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {

/// One named value.
struct named_value {
    /// the counter's name (`numastat.local_node`, `locality`, ...).
    std::string name;
    /// its value.
    double value = 0;
    /// true: a delta over the whole observed region (a benchmark averages it per iteration); false: a
    /// ratio or a state (locality, pages per node, RMA/LMA) that is reported as it is.
    bool per_iteration = false;
};

/// The values of an observation or of a where() result, and the groups that could not be measured.
struct counter_set {
    /// the measured values, in a fixed order.
    std::vector<named_value> values;
    /// Unmeasured groups and why, in counter_group order.
    std::vector<std::pair<counter_group, std::string>> absent;
    /// Measured groups whose counts are of the whole system, not this process (numastat).
    std::vector<counter_group> system_wide;

    /// \returns the value named `name`, or nothing when it is not in the list (not measured).
    std::optional<double> get(const std::string& name) const {
        for (const auto& v : values)
            if (v.name == name) return v.value;
        return std::nullopt;
    }
    /// \returns why `g` was not measured, or nothing when it was (or was not asked for).
    std::optional<std::string> absent_reason(counter_group g) const {
        for (const auto& a : absent)
            if (a.first == g) return a.second;
        return std::nullopt;
    }
    /// \returns "<group> (<reason>); ..." for every absent group, empty when none is.
    std::string absent_text() const {
        std::string s;
        for (const auto& a : absent) s += (s.empty() ? "" : "; ") + std::string(name(a.first)) + " (" + a.second + ")";
        return s;
    }
};

namespace detail {
inline void add_count(counter_set& c, std::string name, const std::optional<std::uint64_t>& v) {
    if (v) c.values.push_back({std::move(name), static_cast<double>(*v), true});
}
inline bool add_group(counter_set& c, const observation& o, counter_group g) {
    const group_status& s = o.status(g);
    if (!s.measured && s.reason.empty() && s.error == 0) return false; // not asked for (observe_options)
    if (!s.measured) {
        c.absent.emplace_back(g, s.reason);
        return false;
    }
    if (s.system_wide) c.system_wide.push_back(g);
    return true;
}
} // namespace detail

/// \returns the deltas of `o` as named values, each a delta over the observed region (per_iteration):
/// - numastat (pages, system-wide): `numastat.local_node`, `numastat.other_node` (sums over nodes), and
///   per node id k `numastat.node<k>.<field>` (`numastat.os<k>.` by the kernel's number when the topology
///   is not this system's) for numa_hit, numa_miss, numa_foreign, interleave_hit,
///   local_node, other_node;
/// - vmstat: `vmstat.<field>` for each field the kernel has;
/// - software (this process): `cpu_migrations`, `page_faults`, `context_switches`;
/// - node_access (memory accesses): `node_access.local` (LMA), `node_access.remote` (RMA), the raw
///   `node_access.accesses` / `node_access.misses` (node-loads, node-load-misses), and `rma_lma`
///   (their ratio, not per iteration) when both were read and local is not 0.
/// Groups not measured are in `absent` with their reason; nothing of theirs is in `values`. Groups not
/// asked for (switched off in `observe_options`) are in neither.
inline counter_set observation_counters(const observation& o) {
    counter_set c;
    if (detail::add_group(c, o, counter_group::numastat)) {
        std::uint64_t local = 0, other = 0;
        for (const numastat_delta& d : o.numastat()) {
            local += d.local_node;
            other += d.other_node;
        }
        c.values.push_back({"numastat.local_node", static_cast<double>(local), true});
        c.values.push_back({"numastat.other_node", static_cast<double>(other), true});
        for (const numastat_delta& d : o.numastat()) {
            // the topology's node id; the kernel's number ("os<k>") when the topology is not this system's
            const std::string p = "numastat." + (d.node >= 0 ? "node" + std::to_string(d.node) : "os" + std::to_string(d.os_index)) + ".";
            const std::pair<const char*, std::uint64_t> fields[] = {
                {"numa_hit", d.numa_hit},         {"numa_miss", d.numa_miss},   {"numa_foreign", d.numa_foreign},
                {"interleave_hit", d.interleave_hit}, {"local_node", d.local_node}, {"other_node", d.other_node}};
            for (const auto& f : fields) c.values.push_back({p + f.first, static_cast<double>(f.second), true});
        }
    }
    if (detail::add_group(c, o, counter_group::vmstat)) {
        const vmstat_delta& v = o.vmstat();
        detail::add_count(c, "vmstat.numa_pages_migrated", v.numa_pages_migrated);
        detail::add_count(c, "vmstat.numa_hint_faults", v.numa_hint_faults);
        detail::add_count(c, "vmstat.numa_hint_faults_local", v.numa_hint_faults_local);
        detail::add_count(c, "vmstat.numa_pte_updates", v.numa_pte_updates);
        detail::add_count(c, "vmstat.pgmigrate_success", v.pgmigrate_success);
        detail::add_count(c, "vmstat.pgmigrate_fail", v.pgmigrate_fail);
    }
    if (detail::add_group(c, o, counter_group::software)) {
        const software_delta& s = o.software();
        detail::add_count(c, "cpu_migrations", s.cpu_migrations);
        detail::add_count(c, "page_faults", s.page_faults);
        detail::add_count(c, "context_switches", s.context_switches);
    }
    if (detail::add_group(c, o, counter_group::node_access)) {
        const node_access_delta& a = o.node_access();
        detail::add_count(c, "node_access.local", a.local);
        detail::add_count(c, "node_access.remote", a.remote);
        detail::add_count(c, "node_access.accesses", a.accesses);
        detail::add_count(c, "node_access.misses", a.misses);
        if (const auto r = o.remote_to_local()) c.values.push_back({"rma_lma", *r, false});
    }
    return c;
}

/// \returns `l` as named values (none per iteration): `locality` (touched pages on their block's node /
/// touched pages), `pages.node<k>` for every node id k, `pages.untouched`.
inline counter_set locality_counters(const partition_locality& l) {
    counter_set c;
    c.values.push_back({"locality", l.fraction(), false});
    for (std::size_t k = 0; k < l.histogram.per_node.size(); ++k)
        c.values.push_back({"pages.node" + std::to_string(k), static_cast<double>(l.histogram.per_node[k]), false});
    c.values.push_back({"pages.untouched", static_cast<double>(l.histogram.untouched), false});
    return c;
}

/// \returns the same names for a histogram held against one node: `locality` is `h.locality(node)`.
inline counter_set locality_counters(const page_histogram& h, int node) {
    partition_locality l;
    l.histogram = h;
    l.local = h.on(node);
    l.remote = h.touched() - l.local;
    return locality_counters(l);
}

} // namespace numaplace

#endif
