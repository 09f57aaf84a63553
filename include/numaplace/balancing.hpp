#ifndef NUMAPLACE_BALANCING_HPP_INCLUDED
#define NUMAPLACE_BALANCING_HPP_INCLUDED

/// \file
/// Automatic NUMA balancing (`kernel.numa_balancing`): the kernel's own counters of what it did, and
/// a binding that lets it keep migrating pages within the bound nodes.
///
/// With balancing on, the kernel samples pages (makes them fault on the next access: "hint faults")
/// and migrates a page towards the node whose CPUs keep touching it. Ranges bound with `MPOL_BIND` are
/// not sampled (their pages never move); `MPOL_BIND | MPOL_F_NUMA_BALANCING` (Linux >= 5.12) lets the
/// kernel migrate them among the bound nodes, towards their users.

#include "detail/linux.hpp"
#include "error.hpp"
#include "place.hpp"
#include "topology.hpp"

#include <cstdint>
#include <fstream>
#include <istream>
#include <sstream>
#include <limits>
#include <string>

namespace numaplace {

/// System-wide counters of automatic NUMA balancing, from `/proc/vmstat`. All zero where the kernel
/// has no balancing (CONFIG_NUMA_BALANCING off) or `/proc` cannot be read (`available` false).
struct balancing_counters {
    /// false: no counters (no balancing in the kernel, or `/proc` unreadable).
    bool available = false;
    std::uint64_t pages_migrated = 0;   ///< numa_pages_migrated: pages moved to another node
    std::uint64_t hint_faults = 0;      ///< numa_hint_faults: sampled accesses
    std::uint64_t hint_faults_local = 0;///< numa_hint_faults_local: those from the page's own node
    std::uint64_t pte_updates = 0;      ///< numa_pte_updates: pages made to fault for sampling

    /// \returns the counters now.
    static balancing_counters read() {
        std::ifstream in("/proc/vmstat");
        return parse(in);
    }
    /// \returns the counters in `in`, lines of "key value" as in /proc/vmstat. A line that does not
    /// parse is skipped: it hides nothing after it.
    static balancing_counters parse(std::istream& in) {
        balancing_counters c;
        std::string line, key;
        std::uint64_t value = 0;
        while (std::getline(in, line)) {
            std::istringstream fields(line);
            if (!(fields >> key >> value)) continue;
            if (key == "numa_pages_migrated") c.pages_migrated = value, c.available = true;
            else if (key == "numa_hint_faults") c.hint_faults = value;
            else if (key == "numa_hint_faults_local") c.hint_faults_local = value;
            else if (key == "numa_pte_updates") c.pte_updates = value;
        }
        return c;
    }
    /// \returns what happened between `before` and `*this` (counters only grow; a smaller value
    /// counts as 0).
    balancing_counters since(const balancing_counters& before) const noexcept {
        auto d = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
        balancing_counters r;
        r.available = available && before.available;
        r.pages_migrated = d(pages_migrated, before.pages_migrated);
        r.hint_faults = d(hint_faults, before.hint_faults);
        r.hint_faults_local = d(hint_faults_local, before.hint_faults_local);
        r.pte_updates = d(pte_updates, before.pte_updates);
        return r;
    }
};

/// \effects binds the pages of [p, p+bytes) (page aligned) to `nodes` with `MPOL_BIND |
/// MPOL_F_NUMA_BALANCING`: allocations come from `nodes` only, and automatic NUMA balancing may migrate
/// the pages among `nodes`, towards the CPUs that use them. Affects pages faulted in afterwards.
/// The same contract as `place_pages(p, bytes, memory::policy_mode::bind_balancing, nodes, fb)`
/// (place.hpp): admitted once against the nodes' free memory (ENOMEM throws for every fallback).
/// \returns true if bound so; false if the kernel refuses and `fb` is degrading: where it lacks the flag
/// (EINVAL, `capabilities().numa_balancing_bind` false) the range is bound with plain `MPOL_BIND` (pages
/// stay where they are placed), otherwise left to first touch; either way it is recorded.
/// \throws unknown_node, invalid_placement (empty set, unaligned or wrapping range); placement_error with the
/// kernel's errno when strict.
inline bool bind_with_balancing(void* p, std::size_t bytes, const node_set& nodes, fallback fb = fallback::strict) {
    const auto& topo = topology::get();
    topo.check(nodes);
    if (reinterpret_cast<std::uintptr_t>(p) % detail::page_size() != 0)
        detail::throw_invalid("bind_with_balancing: range not page aligned");
    if (bytes == 0) return true;
    if (!detail::range_end_fits(p, bytes))
        detail::throw_invalid("bind_with_balancing: a range of " + std::to_string(bytes) +
                              " bytes runs past the end of the address space");
    return detail::place(p, bytes, memory::policy_mode::bind_balancing, nodes, fb, "bind_with_balancing: ",
                         detail::range_origin::foreign);
}

} // namespace numaplace

#endif
