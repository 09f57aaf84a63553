#ifndef NUMAPLACE_DETAIL_MEMORY_ATTRIBUTE_HWLOC_HPP_INCLUDED
#define NUMAPLACE_DETAIL_MEMORY_ATTRIBUTE_HWLOC_HPP_INCLUDED

/// \file
/// A memory attribute (memory_attribute.hpp) as hwloc reads it from the firmware: topology's only use of
/// hwloc's memattr interface, kept out of the public header so that it does not need <hwloc.h>.

#include "../memory_attribute.hpp"
#include "hwloc.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace numaplace {
namespace detail {

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
