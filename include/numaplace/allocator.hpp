#ifndef NUMAPLACE_ALLOCATOR_HPP_INCLUDED
#define NUMAPLACE_ALLOCATOR_HPP_INCLUDED

/// \file
/// STL allocators that place pages: `node_allocator`, `interleaved_allocator`, `partitioned_allocator`
/// (and `allocator<T, Placement>` for any placement), plus `default_init_allocator` so vectors of
/// trivial types are not zero-filled by one thread.
///
/// Pooled vs own mapping (detail::placed_allocate): `node_allocator` serves blocks up to 1 MiB from the
/// node's heap (size classes, per-thread caches, spans bound to the node and given back when empty;
/// `node_pool` is the same heap as a std::pmr resource); other placements pool blocks below a page at
/// their home node. Larger blocks are their own mapping, placed page by page and aligned to
/// `alignof(T)`. `benchmarks/allocation.cpp` measures both paths.

#include "detail/heap.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "placement.hpp"
#include "pmr.hpp"
#include "topology.hpp"

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {

/// An allocator whose memory is placed by `Placement` (on_node, preferred_many, interleaved,
/// partitioned). Meets the C++17 Allocator requirements.
///
/// Propagation, chosen on purpose: a container's pages are where its allocator put them, so the
/// allocator travels with the pages. Move assignment and swap propagate it (O(1), and the pages keep
/// their placement with their owner). Copy assignment does not: `a = b` copies b's elements into a's
/// placement (a keeps saying where its data lives). Copy construction copies the placement.
template <class T, class Placement>
class allocator {
public:
    using value_type = T;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using placement_type = Placement;
    using propagate_on_container_copy_assignment = std::false_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;
    template <class U>
    struct rebind {
        using other = allocator<U, Placement>;
    };

    /// \throws what the placement's constructor throws (unknown_node, invalid_placement).
    template <class... Args, class = std::enable_if_t<std::is_constructible<Placement, Args&&...>::value>>
    explicit allocator(Args&&... args) : placement_(std::forward<Args>(args)...) {}
    allocator(const Placement& p) : placement_(p) {} // NOLINT: implicit on purpose, a placement is an allocator
    // Copy only, no move: a moved-from allocator must stay equal to what it was (Allocator
    // requirements, LWG 2593). Containers rely on it: libstdc++'s deque move constructor leaves the
    // source a fresh map that it later frees with the moved-from allocator. Moving the placement would
    // empty its node set / partition there.
    allocator(const allocator&) = default;
    allocator& operator=(const allocator&) = default;
    template <class U>
    allocator(const allocator<U, Placement>& other) noexcept : placement_(other.placement()) {}

    const Placement& placement() const noexcept { return placement_; }

    size_type max_size() const noexcept { return std::numeric_limits<size_type>::max() / sizeof(T); }

    /// \returns memory for `n` objects, placed. \throws std::bad_array_new_length if `n * sizeof(T)`
    /// overflows; placement_error (a std::bad_alloc) when a strict placement is refused or no memory.
    [[nodiscard]] T* allocate(size_type n) {
        if (n > max_size()) detail::throw_bad_length();
        return static_cast<T*>(detail::placed_allocate(placement_, n * sizeof(T), alignof(T)));
    }
    /// \effects releases what `allocate(n)` returned (of this or an equal allocator). Never allocates.
    void deallocate(T* p, size_type n) noexcept { detail::placed_deallocate(placement_, p, n * sizeof(T), alignof(T)); }

    allocator select_on_container_copy_construction() const { return *this; }

    template <class U>
    friend bool operator==(const allocator& a, const allocator<U, Placement>& b) noexcept {
        return a.placement() == b.placement();
    }
    template <class U>
    friend bool operator!=(const allocator& a, const allocator<U, Placement>& b) noexcept {
        return !(a == b);
    }

private:
    Placement placement_;
};

/// All pages on one node (bound or preferred): `node_allocator<double> a(1);`
template <class T>
using node_allocator = allocator<T, on_node>;
/// Pages round robin over a node set, optionally weighted: `interleaved_allocator<double> a(node_set{0, 1});`
template <class T>
using interleaved_allocator = allocator<T, interleaved>;
/// Contiguous blocks of the array on successive nodes, per a `partition` shared with `parallel_for`:
/// `partitioned_allocator<double> a(partition(n, sizeof(double)));`
template <class T>
using partitioned_allocator = allocator<T, partitioned>;

/// Wraps an allocator so that `construct(p)` without arguments default-initialises (`new (p) U`)
/// instead of value-initialising (`new (p) U()`): `std::vector<double, default_init_allocator<A>> v(n)`
/// then writes nothing, leaving the pages untouched for `first_touch` (or for the kernel's zero pages
/// of a fresh mapping). Everything else forwards to `A`.
template <class A>
class default_init_allocator : public A {
    using traits = std::allocator_traits<A>;

public:
    using A::A;
    default_init_allocator() = default;
    default_init_allocator(const A& a) noexcept(std::is_nothrow_copy_constructible<A>::value) : A(a) {}
    template <class B>
    default_init_allocator(const default_init_allocator<B>& other) : A(static_cast<const B&>(other)) {}

    template <class U>
    struct rebind {
        using other = default_init_allocator<typename traits::template rebind_alloc<U>>;
    };

    default_init_allocator select_on_container_copy_construction() const {
        return default_init_allocator(traits::select_on_container_copy_construction(static_cast<const A&>(*this)));
    }

    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
        ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
        traits::construct(static_cast<A&>(*this), p, std::forward<Args>(args)...);
    }
};

/// A vector whose pages are partitioned and not zero-filled on construction: fill it with
/// `first_touch` / `parallel_for` (parallel_for.hpp) so each block is touched on its node.
template <class T>
using partitioned_vector = std::vector<T, default_init_allocator<partitioned_allocator<T>>>;

} // namespace numaplace

#endif
