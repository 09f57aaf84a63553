#ifndef NUMAPLACE_DETAIL_HEAP_SHARED_SPANS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_SHARED_SPANS_HPP_INCLUDED

/// \file
/// The empty spans a node heap's shards share while the heap is sharded: resident (no page given back),
/// mapped and bound as they were, kept by size up to a bound for whichever shard needs a span next. A
/// shard's own cache of empty spans holds only what that shard empties; with a shard per thread, one
/// thread's emptied span was given back and another's next span faulted in again (docs/heap.md, "Empty
/// spans shared by the shards"). Thread-safe: its own mutex, taken last (inside a span heap's
/// span_mutex_), and nothing is called while it is held.

#include "../../memory.hpp"
#include "span.hpp"

#include <cstddef>
#include <mutex>

namespace numaplace {
namespace detail {

class shared_spans {
public:
    /// The bytes kept per shard made (node_heap: raise_limit).
    static constexpr std::size_t per_shard = std::size_t(256) << 10;

    shared_spans() = default;
    shared_spans(const shared_spans&) = delete;
    shared_spans& operator=(const shared_spans&) = delete;

    /// \effects raises the bytes kept at most to `bytes` (a lower value changes nothing).
    void raise_limit(std::size_t bytes) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bytes > limit_) limit_ = bytes;
    }

    /// \effects keeps the empty span `s` (its header resident: `bytes` and `bound` as they are) when it
    /// fits under the limit. \returns whether it did (else the caller keeps or gives back `s`). Never
    /// allocates.
    bool put(heap_span* s) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        touched_ = true;
        if (spans_.bytes + s->bytes > limit_) return false;
        spans_.push(s);
        return true;
    }

    /// \returns a kept empty span of `bytes` (the last kept; its header as put left it), or nullptr.
    heap_span* take(std::size_t bytes) noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        touched_ = true;
        return spans_.pop(heap_span_bucket(bytes));
    }

    /// \effects the decay: unmaps every kept span when none was put or taken since the previous call.
    /// Never allocates.
    void decay_now() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        if (touched_) {
            touched_ = false;
            return;
        }
        unmap_locked();
    }

    /// \effects unmaps every kept span. \returns whether any was kept. Never allocates.
    bool unmap_all() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return unmap_locked();
    }

    /// \returns the bytes of the spans kept now.
    std::size_t bytes() noexcept {
        std::lock_guard<std::mutex> lock(mutex_);
        return spans_.bytes;
    }

private:
    bool unmap_locked() noexcept {
        const bool any = spans_.bytes != 0;
        for (std::size_t b = 0; b < heap_span_buckets; ++b)
            while (heap_span* s = spans_.pop(b)) memory::unmap(s, s->bytes);
        return any;
    }

    std::mutex mutex_;
    span_lists spans_;
    std::size_t limit_ = 0;
    bool touched_ = false; // a span put or taken since the last decay_now
};

} // namespace detail
} // namespace numaplace

#endif
