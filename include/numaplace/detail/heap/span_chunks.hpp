#ifndef NUMAPLACE_DETAIL_HEAP_SPAN_CHUNKS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SPAN_CHUNKS_HPP_INCLUDED

/// \file
/// Where a span heap's new spans come from: spans smaller than heap_span_chunk_bytes are carved one
/// after the other from a chunk of their size, mapped (aligned to the chunk's size) and bound once;
/// larger spans, and a span whose chunk the map refused, are mapped alone. Not thread-safe: the span
/// heap's span_mutex_ guards it. Design and measurements: docs/heap.md ("Spans carved from chunks").

#include "../../memory.hpp"
#include "span.hpp"

#include <cstddef>

namespace numaplace {
namespace detail {

class span_chunks {
public:
    /// \returns a new span of `bytes` (its pages never touched), `bound` whether the heap's policy is on
    /// it: the next of the chunk of its size, a chunk mapped when none is left (`map(heap_span_chunk_bytes,
    /// size, bound)`); a span of a chunk or more, or when the chunk's mapping fails (an address space or a
    /// node with a span's room but not a chunk's), mapped alone (`map(bytes, size, bound)`). When a mapping
    /// throws, `relieve()` may give address space back: when it says it did, that mapping is tried once more.
    /// \throws what map throws for the span alone.
    template <class Map, class Relieve>
    heap_span* carve(std::size_t bytes, std::size_t size, bool& bound, Map& map, Relieve&& relieve) {
        fresh_chunk& f = fresh_[heap_span_bucket(bytes)];
        if (f.next == f.end) {
            if (bytes >= heap_span_chunk_bytes) return static_cast<heap_span*>(map_relieved(bytes, size, bound, map, relieve));
            char* chunk = nullptr;
            try {
                chunk = static_cast<char*>(map_relieved(heap_span_chunk_bytes, size, f.bound, map, relieve));
            } catch (...) {
                return static_cast<heap_span*>(map(bytes, size, bound));
            }
            f.next = chunk;
            f.end = chunk + heap_span_chunk_bytes;
        }
        auto* s = reinterpret_cast<heap_span*>(f.next);
        f.next += bytes;
        bound = f.bound;
        return s;
    }

    /// \effects unmaps the spans of every chunk that were never handed out. Never allocates.
    void unmap_rest() noexcept {
        for (fresh_chunk& f : fresh_) {
            if (f.next != f.end) memory::unmap(f.next, static_cast<std::size_t>(f.end - f.next));
            f.next = f.end = nullptr;
        }
    }

private:
    template <class Map, class Relieve>
    static void* map_relieved(std::size_t bytes, std::size_t size, bool& bound, Map& map, Relieve& relieve) {
        try {
            return map(bytes, size, bound);
        } catch (...) {
            if (!relieve()) throw;
        }
        return map(bytes, size, bound);
    }
    // The spans of each size not handed out yet: the rest of the last chunk mapped for that size.
    struct fresh_chunk {
        char* next = nullptr;
        char* end = nullptr;
        bool bound = false;
    };
    fresh_chunk fresh_[heap_span_buckets];
};

} // namespace detail
} // namespace numaplace

#endif
