#ifndef NUMAPLACE_DETAIL_HEAP_SHARDED_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SHARDED_HPP_INCLUDED

/// \file
/// Whether the node heaps are split into shards now: the bound on the span heaps a node heap may be
/// split into, and the flag every layer of the heap reads to know whether any thread took a shard other
/// than 0 (node_heap, span_heap, thread_cache). Design: docs/heap.md ("Shards chosen").

#include <atomic>
#include <cstddef>

namespace numaplace {
namespace detail {

/// Span heaps a node heap may be split into (NUMAPLACE_HEAP_SHARDS, or chosen: see heap_registry).
constexpr std::size_t heap_shards_max = 16;

/// \returns the flag set once any thread cache takes span blocks from a shard other than 0
/// (thread_cache), never cleared: until then every span block is shard 0's, and no free reads its span's
/// shard. A block passed to another thread carries the flag's store with it (the handover's ordering).
inline std::atomic<bool>& heap_sharded() noexcept {
    static std::atomic<bool> flag{false}; // constant-initialised
    return flag;
}

/// \returns the flag saying whether more than one shard is in force now: set and cleared by the thread
/// caches at each refill of a span class (the count heap_registry::shards_for gives then, or the forced
/// one), written only when it changes. While set, span heaps put the spans they empty in the node heap's
/// shared store (shared_spans) and refills ask for half a batch (docs/heap.md, "Empty spans shared by the
/// shards"); unlike heap_sharded() it goes back when the threads no longer outnumber the CPUs.
inline std::atomic<bool>& heap_sharded_now() noexcept {
    static std::atomic<bool> flag{false}; // constant-initialised
    return flag;
}

} // namespace detail
} // namespace numaplace

#endif
