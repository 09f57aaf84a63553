#ifndef NUMAPLACE_NUMAPLACE_HPP_INCLUDED
#define NUMAPLACE_NUMAPLACE_HPP_INCLUDED

/// \file
/// Umbrella header: every public numaplace header.

#include "admission.hpp"
#include "allocator.hpp"
#include "arena_map.hpp"
#include "arenas.hpp"
#include "balancing.hpp"
#include "basic_partition.hpp"
#include "binding.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "huge_pages.hpp"
#include "memory.hpp"
#include "observation.hpp"
#include "observe.hpp"
#include "parallel_for.hpp"
#include "partition.hpp"
#include "place.hpp"
#include "placement.hpp"
#include "pmr.hpp"
#include "replace.hpp"
#include "replicated.hpp"
#include "report.hpp"
#include "shared_segment.hpp"
#include "topology.hpp"
#include "where.hpp"

#endif
