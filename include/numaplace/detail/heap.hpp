#ifndef NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_HPP_INCLUDED

/// \file
/// The per-node heap, all of it (detail/heap/, one concern per file; design: docs/heap.md). The
/// allocators reach it through detail/routing.hpp.

#include "heap/size_classes.hpp"
#include "heap/span.hpp"
#include "heap/span_heap.hpp"
#include "heap/run_heap.hpp"
#include "heap/node_heap.hpp"
#include "heap/registry.hpp"
#include "heap/thread_cache.hpp"

#endif
