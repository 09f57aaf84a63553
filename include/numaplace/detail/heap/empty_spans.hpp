#ifndef NUMAPLACE_DETAIL_HEAP_EMPTY_SPANS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_EMPTY_SPANS_HPP_INCLUDED

/// \file
/// The cache of empty spans of one span heap, for any class: up to a bound *hot* (pages resident), the
/// rest *cold* (every page given back, kept by address: cold_spans) until the decay unmaps them; while
/// the heaps are sharded (heap_sharded_now), spans go to the node heap's shared_spans instead of the hot
/// ones, and are cold only when that store is full. Not thread-safe: the span heap's span_mutex_ guards
/// it. Design and measurements: docs/heap.md ("Spans", "Empty spans shared by the shards").

#include "../../memory.hpp"
#include "cold_spans.hpp"
#include "sharded.hpp"
#include "shared_spans.hpp"
#include "span.hpp"

#include <cstddef>

namespace numaplace {
namespace detail {

class empty_spans {
public:
    /// \effects sets the bytes kept hot at most, and the node heap's store shared by the shards (null:
    /// none). Before the first operation.
    void configure(std::size_t hot_limit, shared_spans* shared) noexcept {
        hot_limit_ = hot_limit;
        shared_ = shared;
    }

    /// \effects keeps the empty span `s`: in the shared store while sharded (when it fits), else hot
    /// while under the bound, else cold. Never allocates.
    void put(heap_span* s) noexcept {
        touched_ = true;
        const std::size_t b = heap_span_bucket(s->bytes);
        if (shared_ && heap_sharded_now().load(std::memory_order_relaxed)) {
            if (shared_->put(s)) {
                cold_.note_unmapped(b); // no longer this heap's: its mapped count is the taker's
                return;
            }
        } else if (hot_.bytes + s->bytes <= hot_limit_) {
            hot_.push(s);
            return;
        }
        cold_.push(b, s, s->bound);
    }

    /// \returns an empty span of `bytes`: hot first, then from the shared store, then cold (`bound` as it
    /// was); nullptr when none is kept.
    heap_span* take(std::size_t bytes, bool& bound) noexcept {
        touched_ = true;
        const std::size_t b = heap_span_bucket(bytes);
        if (heap_span* s = hot_.pop(b)) {
            bound = s->bound;
            return s;
        }
        if (shared_)
            if (heap_span* s = shared_->take(bytes)) {
                cold_.note_mapped(b); // this heap's now: room to keep it cold later
                bound = s->bound;
                return s;
            }
        return static_cast<heap_span*>(cold_.pop(b, bound));
    }

    /// \effects counts a span of `bytes` just carved, so that it can be kept cold later.
    void note_carved(std::size_t bytes) noexcept { cold_.note_mapped(heap_span_bucket(bytes)); }

    /// \effects the decay: when no span was put or taken since the previous call, unmaps the cold spans
    /// and gives every page of the hot ones back (they become cold). Never allocates.
    void decay_now() noexcept {
        if (touched_) {
            touched_ = false;
            return;
        }
        cold_.unmap_all();
        for (std::size_t b = 0; b < heap_span_buckets; ++b)
            while (heap_span* s = hot_.pop(b)) cold_.push(b, s, s->bound);
    }

    /// \effects unmaps the cold spans (address space given back). \returns whether any were kept.
    bool unmap_cold() noexcept {
        const bool kept = !cold_.empty();
        cold_.unmap_all();
        return kept;
    }

    /// \effects unmaps every span kept here, hot and cold (the shared store is the node heap's).
    void unmap_all() noexcept {
        for (std::size_t b = 0; b < heap_span_buckets; ++b)
            while (heap_span* s = hot_.pop(b)) {
                cold_.note_unmapped(b);
                memory::unmap(s, s->bytes);
            }
        cold_.unmap_all();
    }

private:
    span_lists hot_; // pages resident, up to hot_limit_ bytes
    cold_spans cold_;
    std::size_t hot_limit_ = 0;
    shared_spans* shared_ = nullptr;
    bool touched_ = false; // a span put or taken since the last decay_now
};

} // namespace detail
} // namespace numaplace

#endif
