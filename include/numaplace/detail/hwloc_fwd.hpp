#ifndef NUMAPLACE_DETAIL_HWLOC_FWD_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HWLOC_FWD_HPP_INCLUDED

/// \file
/// hwloc's handle types as the public headers name them, declared without <hwloc.h>: what a header
/// declares with them (topology::native()) does not make every user parse hwloc's headers. The typedefs
/// are hwloc's own (C++ allows the same typedef again when <hwloc.h> comes later). The owner of an hwloc
/// topology, whose deleter is defined with the code that calls hwloc (detail/hwloc.hpp).

#include "config.hpp"

#include <memory>

struct hwloc_topology;
struct hwloc_obj;
typedef struct hwloc_topology* hwloc_topology_t;
typedef struct hwloc_obj* hwloc_obj_t;

namespace numaplace {
namespace detail {

/// Destroys an hwloc topology (defined in detail/hwloc.hpp).
struct hwloc_topology_deleter {
    /// \effects hwloc_topology_destroy(t).
    NUMAPLACE_DECL void operator()(hwloc_topology* t) const noexcept;
};
using hwloc_topology_ptr = std::unique_ptr<hwloc_topology, hwloc_topology_deleter>;

} // namespace detail
} // namespace numaplace

#endif
