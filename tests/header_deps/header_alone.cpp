// Built by CTest (tests/CMakeLists.txt), one case per NUMAPLACE_HEADER_*: a header alone in a translation
// unit must not bring in what it has no use for, whatever includes it later adds. Each check reads the
// include guard of what must stay out, so a renamed guard would make it pass forever: the probe cases
// include that header first, on purpose, and must stop here with the check's own message.
#if defined(NUMAPLACE_PROBE_partition)
#include <numaplace/partition.hpp>
#elif defined(NUMAPLACE_PROBE_pmr)
#include <numaplace/pmr.hpp>
#elif defined(NUMAPLACE_PROBE_memory_resource)
#include <memory_resource>
#endif

#if defined(NUMAPLACE_HEADER_memory)
// The mechanism under partitions and placements: unmap drops the record of partitioned buffers through
// an observer that record installs, not by knowing partitions.
#include <numaplace/memory.hpp>
#ifdef NUMAPLACE_PARTITION_HPP_INCLUDED
#error "numaplace/memory.hpp includes numaplace/partition.hpp"
#endif
#elif defined(NUMAPLACE_HEADER_allocator)
// STL allocators: std::pmr resources are pmr.hpp's (numaplace.hpp includes both).
#include <numaplace/allocator.hpp>
#ifdef NUMAPLACE_PMR_HPP_INCLUDED
#error "numaplace/allocator.hpp includes numaplace/pmr.hpp"
#endif
#if defined(_GLIBCXX_MEMORY_RESOURCE) || defined(_LIBCPP_MEMORY_RESOURCE)
#error "numaplace/allocator.hpp includes <memory_resource>"
#endif
#else
#error "define NUMAPLACE_HEADER_memory or NUMAPLACE_HEADER_allocator"
#endif

int main() { return 0; }
