#ifndef NUMAPLACE_MEMORY_ATTRIBUTE_HPP_INCLUDED
#define NUMAPLACE_MEMORY_ATTRIBUTE_HPP_INCLUDED

/// \file
/// The memory attributes a firmware may give (ACPI HMAT, read by hwloc), and hwloc's value of one for a
/// target node seen from an initiator node's CPUs. topology.hpp answers with them
/// (`topology::memory_attribute_value`); tiers.hpp groups nodes by them.

#include "detail/hwloc.hpp"
#include "error.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace numaplace {

/// What the firmware may say (ACPI HMAT, read by hwloc) about reaching a node's memory from an
/// initiator's CPUs: bandwidths in MiB/s, latencies in nanoseconds.
enum class memory_attribute {
    bandwidth,       ///< access bandwidth (MiB/s)
    read_bandwidth,  ///< read bandwidth (MiB/s)
    write_bandwidth, ///< write bandwidth (MiB/s)
    latency,         ///< access latency (ns)
    read_latency,    ///< read latency (ns)
    write_latency    ///< write latency (ns)
};

/// \returns whether `a` is one of the enumerators (a value cast from another integer may be none).
constexpr bool is_valid(memory_attribute a) noexcept {
    return static_cast<unsigned>(a) <= static_cast<unsigned>(memory_attribute::write_latency);
}

/// \returns whether a higher value of `a` is better (the bandwidths) rather than a lower (the latencies);
/// false for a value that is none of the enumerators (`is_valid`).
constexpr bool higher_is_better(memory_attribute a) noexcept {
    return a == memory_attribute::bandwidth || a == memory_attribute::read_bandwidth || a == memory_attribute::write_bandwidth;
}

/// \returns the attribute's name as hwloc and `lstopo --memattrs` spell it ("Bandwidth", "ReadLatency", ...);
/// "?" for a value that is none of the enumerators.
inline const char* name(memory_attribute a) noexcept {
    switch (a) {
    case memory_attribute::bandwidth: return "Bandwidth";
    case memory_attribute::read_bandwidth: return "ReadBandwidth";
    case memory_attribute::write_bandwidth: return "WriteBandwidth";
    case memory_attribute::latency: return "Latency";
    case memory_attribute::read_latency: return "ReadLatency";
    case memory_attribute::write_latency: return "WriteLatency";
    }
    return "?";
}

namespace detail {
/// \throws invalid_placement naming `who` and the value when `a` is none of the enumerators.
inline void check_attribute(memory_attribute a, const char* who) {
    if (!is_valid(a))
        throw_invalid(std::string(who) + ": memory attribute " + std::to_string(static_cast<int>(a)) +
                      " is none of memory_attribute's enumerators (0 to " +
                      std::to_string(static_cast<int>(memory_attribute::write_latency)) + ")");
}

/// \returns hwloc's value of `attr` for the NUMA node of logical index `target` seen from the CPUs of the
/// node of logical index `initiator`, if it has one (MiB/s, ns); nothing for an attribute that is none of
/// the enumerators or a node that is not there.
inline std::optional<std::uint64_t> hwloc_memory_attribute(hwloc_topology_t topo, memory_attribute attr, unsigned target,
                                                           unsigned initiator) noexcept {
    static constexpr hwloc_memattr_id_t ids[] = {HWLOC_MEMATTR_ID_BANDWIDTH, HWLOC_MEMATTR_ID_READ_BANDWIDTH,
                                                 HWLOC_MEMATTR_ID_WRITE_BANDWIDTH, HWLOC_MEMATTR_ID_LATENCY,
                                                 HWLOC_MEMATTR_ID_READ_LATENCY, HWLOC_MEMATTR_ID_WRITE_LATENCY};
    if (!is_valid(attr)) return std::nullopt; // would index past ids
    const hwloc_obj_t from = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, initiator);
    const hwloc_obj_t to = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, target);
    if (!from || !to || !from->cpuset) return std::nullopt;
    hwloc_location where{};
    where.type = HWLOC_LOCATION_TYPE_CPUSET;
    where.location.cpuset = from->cpuset;
    hwloc_uint64_t value = 0;
    if (hwloc_memattr_get_value(topo, ids[static_cast<std::size_t>(attr)], to, &where, 0, &value) != 0) return std::nullopt;
    return std::uint64_t{value};
}
} // namespace detail

} // namespace numaplace

#endif
