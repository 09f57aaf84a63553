#ifndef NUMAPLACE_DETAIL_HWLOC_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HWLOC_HPP_INCLUDED

// RAII around hwloc objects. The only place that owns hwloc handles.

#include "config.hpp"
#include "hwloc_fwd.hpp"

#include <hwloc.h>

#include <memory>

namespace numaplace {
namespace detail {

#if NUMAPLACE_DEFINITIONS
NUMAPLACE_DECL void hwloc_topology_deleter::operator()(hwloc_topology* t) const noexcept { hwloc_topology_destroy(t); }
#endif

struct hwloc_bitmap_deleter {
    void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using hwloc_bitmap_ptr = std::unique_ptr<hwloc_bitmap_s, hwloc_bitmap_deleter>;

inline hwloc_bitmap_ptr make_bitmap() { return hwloc_bitmap_ptr(hwloc_bitmap_alloc()); }

} // namespace detail
} // namespace numaplace

#endif
