#ifndef NUMAPLACE_MEMORY_ATTRIBUTE_HPP_INCLUDED
#define NUMAPLACE_MEMORY_ATTRIBUTE_HPP_INCLUDED

/// \file
/// The memory attributes a firmware may give (ACPI HMAT, read by hwloc); reading hwloc's value of one
/// for a target node from an initiator node's CPUs is detail/memory_attribute_hwloc.hpp's. topology.hpp answers with them
/// (`topology::memory_attribute_value`); tiers.hpp groups nodes by them.

#include "error.hpp"

#include <cstddef>
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

} // namespace detail

} // namespace numaplace

#endif
