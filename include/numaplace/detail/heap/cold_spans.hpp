#ifndef NUMAPLACE_DETAIL_HEAP_COLD_SPANS_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_COLD_SPANS_HPP_INCLUDED

/// \file
/// The cold empty spans of a span heap: spans whose every page, header included, went back to the
/// kernel (MADV_DONTNEED), kept mapped and bound for reuse. Nothing of them is resident, so their
/// headers cannot link them: they are kept by address, per size, in arrays that grow on the allocating
/// path only (a push never allocates; without room it unmaps the span). Unmapping them sorts them and
/// unmaps each run of neighbours with one munmap. Not thread-safe: the span heap's span_mutex_ guards it.
/// Design and measurements: docs/heap.md ("Cold spans by address").

#include "../../memory.hpp"
#include "../linux.hpp"
#include "span.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

namespace numaplace {
namespace detail {

class cold_spans {
public:
    cold_spans() = default;
    cold_spans(const cold_spans&) = delete;
    cold_spans& operator=(const cold_spans&) = delete;
    ~cold_spans() {
        for (std::uintptr_t* e : entries_) delete[] e;
    }

    /// \effects counts a span of `bucket` (heap_span_bucket) just mapped, and makes room to keep every
    /// span of that size mapped now (growing by doubling, at least 64). Never throws: without memory the
    /// room stays as it was, and a push past it unmaps its span.
    void note_mapped(std::size_t bucket) noexcept {
        ++mapped_[bucket];
        reserve(bucket, mapped_[bucket]);
    }
    /// \effects counts a span of `bucket` unmapped elsewhere (not through this object).
    void note_unmapped(std::size_t bucket) noexcept { --mapped_[bucket]; }

    /// \effects makes room for `spans` spans of `bucket`, more when it grows (doubling, at least 64).
    /// Never throws: without memory the room stays as it was.
    void reserve(std::size_t bucket, std::size_t spans) noexcept {
        if (spans <= cap_[bucket]) return;
        std::size_t cap = cap_[bucket] < 32 ? 64 : 2 * cap_[bucket];
        if (cap < spans) cap = spans;
        auto* grown = new (std::nothrow) std::uintptr_t[cap];
        if (!grown) return;
        std::copy(entries_[bucket], entries_[bucket] + n_[bucket], grown);
        delete[] entries_[bucket];
        entries_[bucket] = grown;
        cap_[bucket] = cap;
    }

    /// \effects gives every page of the empty span `s` of `bucket` back (header included: read nothing of
    /// it after) and keeps it, `bound` recording whether the heap's policy is on it; unmaps it when there
    /// is no room. Never allocates.
    void push(std::size_t bucket, void* s, bool bound) noexcept {
        const std::size_t bytes = heap_span_bytes_of_bucket(bucket);
        if (n_[bucket] == cap_[bucket]) {
            memory::unmap(s, bytes);
            --mapped_[bucket];
            return;
        }
        os_advise(s, bytes, page_advice::dont_need);
        entries_[bucket][n_[bucket]++] = reinterpret_cast<std::uintptr_t>(s) | (bound ? 1u : 0u);
    }

    /// \returns the span of `bucket` kept last (its pages not resident, its header zero), `bound` as it
    /// was pushed; nullptr when none is kept.
    void* pop(std::size_t bucket, bool& bound) noexcept {
        if (n_[bucket] == 0) return nullptr;
        const std::uintptr_t e = entries_[bucket][--n_[bucket]];
        bound = (e & 1u) != 0;
        return reinterpret_cast<void*>(e & ~std::uintptr_t(1));
    }

    /// \returns how many spans of `bucket` are kept.
    std::size_t count(std::size_t bucket) const noexcept { return n_[bucket]; }
    /// \returns whether no span is kept.
    bool empty() const noexcept {
        for (std::size_t n : n_)
            if (n != 0) return false;
        return true;
    }

    /// \effects unmaps every kept span, each run of neighbouring spans with one munmap. Never allocates.
    void unmap_all() noexcept {
        for (std::size_t b = 0; b < heap_span_buckets; ++b) {
            std::uintptr_t* e = entries_[b];
            const std::size_t n = n_[b], bytes = heap_span_bytes_of_bucket(b);
            std::sort(e, e + n); // the bound bit never reorders: spans are at least 64 KiB apart
            for (std::size_t i = 0; i < n;) {
                const std::uintptr_t first = e[i] & ~std::uintptr_t(1);
                std::size_t j = i + 1;
                while (j < n && (e[j] & ~std::uintptr_t(1)) == first + (j - i) * bytes) ++j;
                memory::unmap(reinterpret_cast<void*>(first), (j - i) * bytes);
                i = j;
            }
            mapped_[b] -= n;
            n_[b] = 0;
        }
    }

private:
    std::uintptr_t* entries_[heap_span_buckets] = {}; // a span's address | whether bound
    std::size_t n_[heap_span_buckets] = {};
    std::size_t cap_[heap_span_buckets] = {};
    std::size_t mapped_[heap_span_buckets] = {}; // spans of each size mapped: what reserve makes room for
};

} // namespace detail
} // namespace numaplace

#endif
