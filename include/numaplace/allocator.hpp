#ifndef NUMAPLACE_ALLOCATOR_HPP_INCLUDED
#define NUMAPLACE_ALLOCATOR_HPP_INCLUDED

/// \file
/// STL allocators that place pages: `node_allocator`, `interleaved_allocator`, `partitioned_allocator`
/// (and `allocator<T, Placement>` for any placement), plus `default_init_allocator` so vectors of
/// trivial types are not zero-filled by one thread.
///
/// Pooled vs own mapping (detail/routing.hpp): `node_allocator` serves blocks up to 1 MiB from the
/// node's heap (size classes, per-thread caches, spans bound to the node and given back when empty;
/// `node_pool` in pmr.hpp is the same heap as a std::pmr resource); other placements pool blocks below a
/// page at their home node. `node_allocator` blocks above 1 MiB are the node heap's large blocks (runs
/// of 64 MiB regions up to 16 MiB, coalesced; beyond, cached by size class; kept mapped and bound when
/// freed, given back by age or beyond the recent peak in use: docs/heap.md); other larger blocks are
/// their own mapping, placed page by page and aligned to `alignof(T)`, kept when freed for reuse by the
/// same placement, size and alignment (detail/placed_cache.hpp). `benchmarks/allocation.cpp` and
/// `benchmarks/workloads.cpp` measure the paths. Nothing here needs pmr.hpp, so this
/// header does not include it, nor `<memory_resource>` (tests/header_deps checks both).

#include "detail/config.hpp"
#include "detail/routing.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "placement.hpp"
#include "topology.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {

/// \effects gives back to the kernel now, on every node, every byte that freed `node_allocator`,
/// `node_pool` and pooled small blocks keep for reuse, and unmaps the freed own mappings of the other
/// placements. In order: the calling thread's cached blocks and then every other live thread's go back to
/// their heaps (another thread's cache while that thread is outside every operation on it: see
/// docs/heap.md); then every heap returns its parked blocks (transfer lists, remote stacks) to their
/// spans, unmaps its empty spans (spares and the empty-span cache), gives back the pages of every free
/// page run (MADV_DONTNEED; clean runs too, where a huge page or a split may have made them resident) and
/// unmaps its empty regions and cached large blocks. Afterwards the heaps keep resident only pages that
/// hold live blocks or the heaps' own metadata: span headers, and region headers where runs begin and end
/// (a 64 MiB region's header is 1/128 of it). Blocks other threads free or cache after the call are theirs
/// again. A thread that stays inside an operation on its cache for 100 ms (preempted, or waiting for a
/// heap's lock), or every other thread where the kernel refuses `membarrier` (a seccomp filter), gives its
/// cached blocks back itself at its next allocation or free (at most 4 MiB each until then). Costs
/// a `membarrier` system call and a flush per live thread cache: for phase changes, after freeing a
/// working set that will not come back, not for a loop. Freed memory also goes back by itself once unused
/// for a second, or beyond the recent peak in use.
NUMAPLACE_DECL void release_cached_memory() noexcept;

/// The shard count of the per-node heaps: how many span heaps a node's new small blocks come from now,
/// and why (heap_sharding()).
struct heap_sharding_report {
    std::size_t shards = 1;        ///< span heaps new small blocks come from now (a new thread, or a refill)
    std::size_t limit = 1;         ///< the most there may be: NUMAPLACE_HEAP_SHARDS, or 16 when chosen
    bool chosen = true;            ///< true: chosen by the heaps (NUMAPLACE_HEAP_SHARDS unset or refused)
    std::size_t thread_caches = 0; ///< threads with a heap cache now
    std::size_t cpus = 1;          ///< CPUs the process could run on when the heaps were made
    std::string reason;            ///< the rule that gave `shards`, in words
};

/// \returns the shard count in force and why. Unless NUMAPLACE_HEAP_SHARDS (1 to 16, read when the
/// heaps are made) fixes it, the heaps choose: one shard while the threads with a heap cache are no more
/// than the CPUs the process may use, else one more shard for each cache beyond the CPUs, up to 16 (threads that share a shard
/// wait on each other when oversubscribed: 8 producer/consumer pairs on 2 CPUs ran 1.7x faster with a
/// shard each, at up to 1.6x the peak memory: docs/heap.md, "Shards chosen"). A thread moves to the
/// shard in force at its next refill; blocks never move (each goes back to its own span's shard).
/// \throws what making the heaps throws (the topology, bad_alloc).
NUMAPLACE_DECL heap_sharding_report heap_sharding();

/// \returns heap_sharding().shards: the span heaps a node's new small blocks come from now.
/// \throws what making the heaps throws (the topology, bad_alloc).
inline std::size_t heap_shards() { return heap_sharding().shards; }

/// \effects with a positive `period`, starts a background thread that runs the decay every `period`:
/// free runs, empty spans, cached large blocks and cached own mappings unused for a second go back to the kernel
/// even when no thread allocates or frees any more (without it they go back when a thread's 1024th
/// allocation since it last looked finds the decay due, at the heaps' next operation, or at
/// release_cached_memory()). A zero period stops it (at its next wake-up); a new call
/// replaces the previous period. Off by default: a thread of its own wakes up beside pinned compute
/// threads. A forked child starts without it. Blocks in use and threads' caches are never touched.
/// \throws std::system_error when the thread cannot be made (then none runs).
NUMAPLACE_DECL void background_release(std::chrono::milliseconds period);

namespace detail {
// The default placement of allocator<T, P>: P() where it exists, the default partition of T for
// partitioned.
template <class P, class T, class = void>
struct default_placement {};
template <class P, class T>
struct default_placement<P, T, std::enable_if_t<std::is_default_constructible<P>::value>> {
    static P make() { return P(); }
};
template <class T>
struct default_placement<partitioned, T, void> {
    static partitioned make() { return partitioned(partition<T>(0)); }
};

template <class T, class A>
struct wrong_partition : std::false_type {};
template <class T, class U>
struct wrong_partition<T, partition<U>> : std::integral_constant<bool, !std::is_same<T, U>::value> {};
template <class T, class U>
struct wrong_partition<T, row_partition<U>> : std::integral_constant<bool, !std::is_same<T, U>::value> {};

// A placement that knows its element size (partitioned) must match T.
template <class T, class P>
auto check_element_size(const P& p, int) -> decltype(p.element_size(), void()) {
    if (p.element_size() != sizeof(T))
        throw_invalid("partitioned placement of " + std::to_string(p.element_size()) + "-byte elements in an allocator of " +
                      std::to_string(sizeof(T)) + "-byte elements");
}
template <class T, class P>
void check_element_size(const P&, long) noexcept {}
template <class T, class P>
void check_element_size(const P& p) {
    check_element_size<T>(p, 0);
}
} // namespace detail

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
    ///@{
    /// The Allocator requirements' member types; propagation chosen on purpose (see the class).
    using value_type = T;
    using size_type = std::size_t;
    using difference_type = std::ptrdiff_t;
    using placement_type = Placement;
    using propagate_on_container_copy_assignment = std::false_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;
    ///@}
    /// The same allocator for another element type (the same placement).
    template <class U>
    struct rebind {
        /// `allocator<U, Placement>`.
        using other = allocator<U, Placement>;
    };

    /// \effects the default placement: `Placement()` (e.g. `interleaved` over all nodes); for
    /// `partitioned_allocator<T>`, the default partition of T (the nodes of the process's binding), so
    /// `std::vector<double, partitioned_allocator<double>> v(n)` places v by blocks.
    /// \throws what that placement's constructor throws.
    template <class P = Placement, class = decltype(detail::default_placement<P, T>::make())>
    allocator() : placement_(detail::default_placement<P, T>::make()) {}
    /// \effects constructs the placement from `args` (e.g. `partitioned_allocator<T>(partition<T>)`,
    /// `node_allocator<T>(1)`). \throws what the placement's constructor throws (unknown_node,
    /// invalid_placement); invalid_placement for a partitioned placement of another element size.
    template <class A0, class... Args,
              class = std::enable_if_t<std::is_constructible<Placement, A0&&, Args&&...>::value &&
                                       !detail::wrong_partition<T, std::decay_t<A0>>::value &&
                                       !std::is_same<std::decay_t<A0>, allocator>::value>>
    explicit allocator(A0&& a0, Args&&... args) : placement_(std::forward<A0>(a0), std::forward<Args>(args)...) {
        detail::check_element_size<T>(placement_);
    }
    /// A partition of another element type: does not compile (the loop would cover another index space).
    template <class U, class... Args, class = std::enable_if_t<!std::is_same<U, T>::value>>
    explicit allocator(const partition<U>&, Args&&...) = delete;
    /// The rows of another element type: does not compile either.
    template <class U, class... Args, class = std::enable_if_t<!std::is_same<U, T>::value>>
    explicit allocator(const row_partition<U>&, Args&&...) = delete;
    /// \throws invalid_placement for a partitioned placement of another element size.
    allocator(const Placement& p) : placement_(p) { // NOLINT: implicit on purpose, a placement is an allocator
        detail::check_element_size<T>(placement_);
    }
    // Trivially copyable (the placement is a handle to interned state): copies never throw, a moved-from
    // allocator equals its source (Allocator requirements, LWG 2593; libstdc++'s deque frees with it),
    // and destruction is trivial, so a copy a node handle drops (libstdc++ 12 re-insertion) leaks nothing.
    /// \effects copies the placement handle; never throws.
    allocator(const allocator&) noexcept = default;
    /// \effects copies the placement handle; never throws. \returns `*this`.
    allocator& operator=(const allocator&) noexcept = default;
    /// The rebinding copy: the same placement (a partitioned one keeps its element size: see
    /// partitioned_allocator).
    template <class U>
    allocator(const allocator<U, Placement>& other) noexcept : placement_(other.placement()) {}

    /// \returns the placement this allocator places by.
    const Placement& placement() const noexcept { return placement_; }

    /// \returns the largest `n` for which `n * sizeof(T)` does not overflow.
    size_type max_size() const noexcept { return std::numeric_limits<size_type>::max() / sizeof(T); }

    /// \returns memory for `n` objects, placed. \throws std::bad_array_new_length if `n * sizeof(T)`
    /// overflows; placement_error (a std::bad_alloc) when a strict placement is refused or no memory.
    [[nodiscard]] T* allocate(size_type n) {
        if (n > max_size()) detail::throw_bad_length();
        if constexpr (std::is_same<Placement, partitioned>::value) placement_.check_extent(n * sizeof(T));
        return static_cast<T*>(detail::routed_allocate(placement_, n * sizeof(T), alignof(T)));
    }
    /// \effects releases what `allocate(n)` returned (of this or an equal allocator). Never allocates.
    void deallocate(T* p, size_type n) noexcept { detail::routed_deallocate(placement_, p, n * sizeof(T), alignof(T)); }

    /// \returns a copy: a copied container keeps the source's placement.
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

static_assert(std::is_trivially_copyable<allocator<double, partitioned>>::value &&
                  std::is_trivially_copyable<allocator<double, interleaved>>::value &&
                  std::is_trivially_copyable<allocator<double, preferred_many>>::value &&
                  std::is_trivially_copyable<allocator<double, on_node>>::value,
              "numaplace allocators are trivially copyable handles");

/// All pages on one node (bound or preferred): `node_allocator<double> a(1);`
template <class T>
using node_allocator = allocator<T, on_node>;
/// Pages round robin over a node set, optionally weighted: `interleaved_allocator<double> a(node_set{0, 1});`
template <class T>
using interleaved_allocator = allocator<T, interleaved>;
/// Contiguous blocks of the array on successive nodes, per a `partition<T>` shared with `parallel_for`:
/// `partitioned_allocator<double> a(partition<double>(n));` or `partitioned_allocator<double> a;` (the
/// default partition of double). Takes only a `partition<T>` (another element type does not compile). A
/// rebound copy (`partitioned_allocator<U>(a)`, what node-based containers make for their nodes) keeps
/// the original's partition, whose units are T's: allocations are split by it, and `partition_of` /
/// `parallel_for` refuse it for another element size (invalid_placement).
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
    /// \effects wraps `a`.
    default_init_allocator(const A& a) noexcept(std::is_nothrow_copy_constructible<A>::value) : A(a) {}
    /// \effects the rebinding copy of the wrapped allocator.
    template <class B>
    default_init_allocator(const default_init_allocator<B>& other) : A(static_cast<const B&>(other)) {}

    /// The same wrapper over the wrapped allocator rebound to `U`.
    template <class U>
    struct rebind {
        /// `default_init_allocator` of the rebound allocator.
        using other = default_init_allocator<typename traits::template rebind_alloc<U>>;
    };

    /// \returns the wrapper of the wrapped allocator's choice.
    default_init_allocator select_on_container_copy_construction() const {
        return default_init_allocator(traits::select_on_container_copy_construction(static_cast<const A&>(*this)));
    }

    /// \effects default-initialises `*p` (no zero fill for trivial types).
    template <class U>
    void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
        ::new (static_cast<void*>(p)) U;
    }
    /// \effects constructs `*p` from `args` as the wrapped allocator does.
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

#if NUMAPLACE_DEFINITIONS
#include "detail/heap_control_impl.hpp"
#endif

#endif
