#ifndef NUMAPLACE_DETAIL_HEAP_SPAN_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SPAN_HPP_INCLUDED

/// \file
/// The layout of a span: a range of a power-of-two size, aligned to that size (carved from a chunk below
/// heap_span_chunk_bytes, else a mapping of its own), holding blocks of one class after a header at its
/// start, so a block's span is its address masked. Also the free-block
/// link that spans, page runs and thread caches share, and the per-size lists of empty spans.

#include "size_classes.hpp"

#include <cstddef>
#include <cstdint>

namespace numaplace {
namespace detail {

/// A block not in use (in a span's free list, a thread cache, or a list being moved): its first word.
struct heap_block {
    heap_block* next;
};

/// A span's header, at its start.
struct heap_span {
    heap_span* next;
    heap_span* prev;
    heap_block* free; ///< blocks given back
    char* bump;       ///< the next block never handed out
    char* end;        ///< the end of the last block
    std::size_t bytes;
    std::uint32_t live; ///< blocks out (users and thread caches)
    std::uint16_t cls;
    bool listed; ///< in its class's list of spans with blocks to give
    bool bound;  ///< the heap's policy is in force on it
    bool spare;  ///< empty, kept listed (counted in the heap's spare bytes)
    std::uint8_t shard; ///< the span heap of its node heap that made it (node_heap: shards)
};
static_assert(sizeof(heap_span) <= heap_span_header, "a span's header fits in its first 64 bytes");

/// Spans smaller than this are carved one after the other from chunks of this size, each mapped (aligned
/// to its size) and bound once (span_heap; docs/heap.md, "Spans carved from chunks").
inline constexpr std::size_t heap_span_chunk_bytes = std::size_t(1) << 20;

/// Span sizes are powers of two from 64 KiB to 8 MiB: bucket 0 to heap_span_buckets - 1.
inline constexpr std::size_t heap_span_buckets = 8;
/// \returns the bucket of spans of `bytes` (a power of two, 64 KiB to 8 MiB).
inline std::size_t heap_span_bucket(std::size_t bytes) noexcept {
    return static_cast<std::size_t>(__builtin_ctzll(bytes)) - 16;
}
/// \returns the bytes of a span of bucket `b`.
constexpr std::size_t heap_span_bytes_of_bucket(std::size_t b) noexcept { return std::size_t(64) << 10 << b; }

/// Empty spans with their headers resident, linked through them by size (a bucket per span size), and
/// their bytes: a span heap's hot spans (empty_spans) and the shards' shared store (shared_spans). Not
/// thread-safe: its owner's lock guards it.
struct span_lists {
    heap_span* head[heap_span_buckets] = {};
    std::size_t bytes = 0;

    /// \effects links the empty span `s` first in its size's list.
    void push(heap_span* s) noexcept {
        heap_span*& h = head[heap_span_bucket(s->bytes)];
        s->next = h;
        h = s;
        bytes += s->bytes;
    }
    /// \returns the span of `bucket` linked last, unlinked; nullptr when none.
    heap_span* pop(std::size_t bucket) noexcept {
        heap_span* s = head[bucket];
        if (s) {
            head[bucket] = s->next;
            bytes -= s->bytes;
        }
        return s;
    }
};

/// \returns the span holding `block`, a block of class `c`.
inline heap_span* heap_span_of(void* block, std::size_t c) noexcept {
    return reinterpret_cast<heap_span*>(reinterpret_cast<std::uintptr_t>(block) &
                                        ~(std::uintptr_t(heap_table.info[c].span_bytes) - 1));
}

} // namespace detail
} // namespace numaplace

#endif
