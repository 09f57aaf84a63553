// libnumaplace: numaplace's separately compiled mode (docs/compile-cost.md). The headers declare the
// heavy non-template functions (NUMAPLACE_DECL, detail/config.hpp) and this file compiles their
// definitions once, so that a user's translation unit, compiled with NUMAPLACE_SEPARATE_COMPILATION
// (CMake: link numaplace::compiled), neither parses nor generates them. Header-only (no macro) stays the
// default and needs no library. The oneTBB part (the per-node arenas) is compiled here where the build has
// it (NUMAPLACE_LIBRARY_PARALLEL: oneTBB found, the parallel component on); libnumaplace then links oneTBB.

#ifndef NUMAPLACE_SEPARATE_COMPILATION
#define NUMAPLACE_SEPARATE_COMPILATION
#endif
#define NUMAPLACE_BUILDING_LIBRARY

#include <numaplace/admission.hpp>
#include <numaplace/allocator.hpp>
#include <numaplace/balancing.hpp>
#include <numaplace/basic_partition.hpp>
#include <numaplace/compared_placement.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/error.hpp>
#include <numaplace/huge_pages.hpp>
#include <numaplace/loop.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/memory_attribute.hpp>
#include <numaplace/observation.hpp>
#include <numaplace/observation_counters.hpp>
#include <numaplace/observe.hpp>
#include <numaplace/partition.hpp>
#include <numaplace/place.hpp>
#include <numaplace/placement.hpp>
#include <numaplace/pmr.hpp>
#include <numaplace/replace.hpp>
#include <numaplace/replace_report.hpp>
#include <numaplace/report.hpp>
#include <numaplace/shared_segment.hpp>
#include <numaplace/tiers.hpp>
#include <numaplace/topology.hpp>
#include <numaplace/where.hpp>
#ifdef NUMAPLACE_LIBRARY_PARALLEL // the oneTBB part, where this build has it (CMake: numaplace::parallel)
#include <numaplace/arenas.hpp>
#endif

namespace numaplace {
namespace detail {
// The slow paths of the library's placements (routing.hpp declares them `extern template` for users).
template void* routed_own_mapping<on_node>(const on_node&, std::size_t, std::size_t);
template void routed_unmap<on_node>(const on_node&, void*, std::size_t, std::size_t) noexcept;
template void* routed_own_mapping<preferred_many>(const preferred_many&, std::size_t, std::size_t);
template void routed_unmap<preferred_many>(const preferred_many&, void*, std::size_t, std::size_t) noexcept;
template void* routed_own_mapping<interleaved>(const interleaved&, std::size_t, std::size_t);
template void routed_unmap<interleaved>(const interleaved&, void*, std::size_t, std::size_t) noexcept;
template void* routed_own_mapping<partitioned>(const partitioned&, std::size_t, std::size_t);
template void routed_unmap<partitioned>(const partitioned&, void*, std::size_t, std::size_t) noexcept;
} // namespace detail
} // namespace numaplace
