#ifndef NUMAPLACE_PLACEMENT_HPP_INCLUDED
#define NUMAPLACE_PLACEMENT_HPP_INCLUDED

/// \file
/// Placement values: where the pages of an allocation go. Each is a trivially copyable handle (a node id,
/// or a pointer to interned immutable state: see detail/intern.hpp) that allocators carry and that
/// `apply`s itself to a freshly mapped, untouched range. Copies never throw, a moved-from placement equals
/// its source, and destruction is trivial. Each is strict (throws when the kernel refuses) or degrading
/// (falls back to first touch and records it in `degradations()`). Construction validates node ids
/// against `topology::get()`.
///
/// The Placement concept (what `allocator<T, Placement>` and `page_resource<Placement>` need; write your
/// own, see examples/custom_placement.cpp). For a placement `p` (const):
/// - `p.apply(void* ptr, std::size_t bytes) -> bool`: sets where the pages of the fresh, untouched,
///   private anonymous mapping [ptr, ptr + bytes) go (ptr aligned to `p.alignment(bytes)`; the mapping
///   spans whole pages). It must not touch the pages (no first touch from the calling thread) unless that
///   is how it places them. \returns true when placed as asked; false when degraded (it must then have
///   recorded why, e.g. through `memory::bind` with `fallback::degrade`). \throws to refuse (strict): the
///   allocator unmaps the range and rethrows, so a throwing apply loses nothing.
/// - `p.alignment(std::size_t bytes) -> std::size_t`: the start alignment (a power of two, at least the
///   page size) an allocation of `bytes` needs for `apply`'s edges to be page (or huge page) boundaries.
/// - `p.home_node() -> int`: a valid node id whose small-object heap serves allocations below a page
///   (they are never placed by `apply`). noexcept.
/// - `p.on_refusal() -> fallback`: strict or degrade; a strict placement must not get unplaced memory on
///   any path (the small-object path checks this too). noexcept.
/// - `a == b` / `a != b`: true iff memory allocated under `a` may be released under `b` and is placed
///   alike (allocators compare equal iff their placements do). noexcept.
/// - Copy construction and assignment must not throw (Allocator requirements); a moved-from placement must
///   stay usable and equal to what it was (containers free with moved-from allocators). A trivially
///   copyable type is the simple way to meet all of this.

#include "detail/intern.hpp"
#include "detail/buffer_record.hpp"
#include "detail/explicit_pages.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "place.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <cstddef>
#include <numeric>
#include <type_traits>
#include <vector>


namespace numaplace {


/// How `on_node` holds its node.
enum class node_policy {
    bind,  ///< pages only on that node (MPOL_BIND)
    prefer ///< pages on that node while it has free memory, elsewhere after (MPOL_PREFERRED)
};

/// Every page on one node.
class on_node {
public:
    /// \throws unknown_node if `node` is not a node id.
    explicit on_node(int node, node_policy policy = node_policy::bind, fallback fb = fallback::strict)
        : node_(node), policy_(policy), fallback_(fb) {
        topology::get().check(node);
    }
    /// \returns the node.
    int node() const noexcept { return node_; }
    /// \returns bind or prefer.
    node_policy policy() const noexcept { return policy_; }
    /// \returns strict or degrade.
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the pages it maps its memory with (`numaplace::page_size::transparent` unless `with_pages` said).
    numaplace::page_size pages() const noexcept { return pages_; }
    /// \returns a copy that maps its memory (allocations of at least one page) with `pages`: explicit
    /// huge pages come from the node's own pool (a preferring placement may take another node's).
    on_node with_pages(numaplace::page_size pages) const noexcept {
        on_node p = *this;
        p.pages_ = pages;
        return p;
    }
    /// \returns the node whose small-object pool serves allocations below a page.
    int home_node() const noexcept { return node_; }
    /// \returns the start alignment of an allocation of `bytes`: a page, or the explicit page size.
    std::size_t alignment(std::size_t bytes) const noexcept { return detail::explicit_alignment(pages_, bytes); }
    /// \effects sets the policy of the untouched range (on explicit pages: see `detail::place_on_pages`).
    /// \returns false if degraded. \throws placement_error when strict and refused.
    bool apply(void* p, std::size_t bytes) const {
        return detail::place_on_pages(p, bytes,
                                      policy_ == node_policy::bind ? memory::policy_mode::bind : memory::policy_mode::preferred,
                                      node_set{node_}, fallback_, pages_);
    }
    friend bool operator==(const on_node& a, const on_node& b) noexcept {
        return a.node_ == b.node_ && a.policy_ == b.policy_ && a.fallback_ == b.fallback_ && a.pages_ == b.pages_;
    }
    friend bool operator!=(const on_node& a, const on_node& b) noexcept { return !(a == b); }

private:
    int node_;
    node_policy policy_;
    fallback fallback_;
    numaplace::page_size pages_ = numaplace::page_size::transparent;
};

namespace detail {
/// Interned node list (and weights) of preferred_many / interleaved.
struct node_weights {
    node_set nodes;
    std::vector<std::size_t> weights;
    friend bool operator<(const node_weights& a, const node_weights& b) noexcept {
        return a.nodes.ids() < b.nodes.ids() || (a.nodes.ids() == b.nodes.ids() && a.weights < b.weights);
    }
};

// Sets THP on the range as `advice` says (partitioned placement and first_touch).
inline void advise_huge_pages(void* p, std::size_t bytes, huge_page_advice advice) noexcept {
    if (advice == huge_page_advice::forbid) os_advise(p, memory::page_round(bytes), page_advice::no_huge_pages);
    else if (advice == huge_page_advice::request) os_advise(p, memory::page_round(bytes), page_advice::huge_pages);
}

} // namespace detail

/// Pages preferably on any of several nodes, nearest first (MPOL_PREFERRED_MANY, Linux >= 5.15).
/// Where the kernel lacks it: strict throws `placement_error` (EINVAL); degrading prefers the first node.
class preferred_many {
public:
    /// \throws unknown_node; invalid_placement for an empty set.
    explicit preferred_many(const node_set& nodes, fallback fb = fallback::strict) : fallback_(fb) {
        topology::get().check(nodes);
        state_ = detail::intern(detail::node_weights{nodes, {}});
    }
    /// \returns the preferred nodes.
    const node_set& nodes() const noexcept { return state_->nodes; }
    /// \returns strict or degrade.
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the pages it maps its memory with.
    numaplace::page_size pages() const noexcept { return pages_; }
    /// \returns a copy that maps its memory with `pages` (explicit pages from the pools of its nodes).
    preferred_many with_pages(numaplace::page_size pages) const noexcept {
        preferred_many p = *this;
        p.pages_ = pages;
        return p;
    }
    /// \returns the first node (its heap serves allocations below a page).
    int home_node() const noexcept { return state_->nodes[0]; }
    /// \returns a page, or the explicit page size for requests of at least one.
    std::size_t alignment(std::size_t bytes) const noexcept { return detail::explicit_alignment(pages_, bytes); }
    /// \effects sets the policy of the untouched range. \returns false if degraded. \throws placement_error.
    bool apply(void* p, std::size_t bytes) const {
        return detail::place_on_pages(p, bytes, memory::policy_mode::preferred_many, nodes(), fallback_, pages_);
    }
    friend bool operator==(const preferred_many& a, const preferred_many& b) noexcept {
        return a.state_ == b.state_ && a.fallback_ == b.fallback_ && a.pages_ == b.pages_;
    }
    friend bool operator!=(const preferred_many& a, const preferred_many& b) noexcept { return !(a == b); }

private:
    const detail::node_weights* state_;
    fallback fallback_;
    numaplace::page_size pages_ = numaplace::page_size::transparent;
};

/// Pages round robin over a node set, page by page, in one of two orders, which differ where node ids
/// are not OS indexes (an HMAT machine):
/// - equal weights (none, or all equal once reduced by their gcd): the kernel's MPOL_INTERLEAVE, pages
///   placed lazily at first touch; the page at address a goes to the ((a / page) mod n)-th node of the
///   set in OS-index order (`node::os_index`), so an allocation may start on any of its nodes.
/// - unequal weights: numaplace's own runs, placed eagerly at allocation by `memory::weighted_fill` (see
///   there why not MPOL_WEIGHTED_INTERLEAVE): from the allocation's first page, `weights[k]` consecutive
///   pages on `nodes[k]`, in node-id order (the order of `nodes()`), round after round.
class interleaved {
public:
    /// \effects interleave over every node of the topology.
    explicit interleaved(fallback fb = fallback::strict) : interleaved(topology::get().all(), {}, fb) {}
    /// \throws unknown_node; invalid_placement for an empty set, a weight count that does not match
    /// the nodes, or all-zero weights.
    explicit interleaved(const node_set& nodes, std::vector<std::size_t> weights = {}, fallback fb = fallback::strict)
        : fallback_(fb) {
        topology::get().check(nodes);
        if (!weights.empty()) {
            if (weights.size() != nodes.size())
                detail::throw_invalid("interleaved: " + std::to_string(weights.size()) + " weights for " +
                                      std::to_string(nodes.size()) + " nodes");
            if (std::all_of(weights.begin(), weights.end(), [](std::size_t w) { return w == 0; }))
                detail::throw_invalid("interleaved: all weights are zero");
            // reduce by the gcd: {2,2} is plain interleave, {4,2} is {2,1}
            std::size_t g = 0;
            for (auto w : weights) g = std::gcd(g, w);
            for (auto& w : weights) w /= g;
            bool uniform = true;
            for (auto w : weights) uniform = uniform && w == weights[0];
            if (uniform) weights.clear();
        }
        state_ = detail::intern(detail::node_weights{nodes, std::move(weights)});
    }
    /// \returns the nodes, in interleave order.
    const node_set& nodes() const noexcept { return state_->nodes; }
    /// \returns the reduced weights, empty when uniform.
    const std::vector<std::size_t>& weights() const noexcept { return state_->weights; }
    /// \returns strict or degrade.
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the pages it maps its memory with.
    numaplace::page_size pages() const noexcept { return pages_; }
    /// \returns a copy that maps its memory with `pages`: with equal weights the kernel interleaves whole
    /// explicit pages over the pools of the nodes; with unequal weights runs of explicit pages, `weights[k]`
    /// pages on `nodes[k]`. \throws nothing.
    interleaved with_pages(numaplace::page_size pages) const noexcept {
        interleaved p = *this;
        p.pages_ = pages;
        return p;
    }
    /// \returns the first node with a non-zero weight (its heap serves allocations below a page).
    int home_node() const noexcept {
        const auto& w = state_->weights;
        for (std::size_t k = 0; k < w.size(); ++k)
            if (w[k] != 0) return state_->nodes[k];
        return state_->nodes[0];
    }
    /// \returns a page, or the explicit page size for requests of at least one.
    std::size_t alignment(std::size_t bytes) const noexcept { return detail::explicit_alignment(pages_, bytes); }
    /// \effects places the untouched range (equal weights: lazily; unequal: eagerly, see the class).
    /// \returns true if placed; false when a degrading placement fell back (recorded). \throws
    /// placement_error when a strict one is refused.
    bool apply(void* p, std::size_t bytes) const {
        if (weights().empty()) {
            // Huge pages would interleave 2 MiB at a time; keep page granularity (unless asked for them).
            if (pages_ == numaplace::page_size::transparent) memory::forbid_huge_pages(p, bytes);
            return detail::place_on_pages(p, bytes, memory::policy_mode::interleave, nodes(), fallback_, pages_);
        }
        if (pages_ != numaplace::page_size::transparent) return detail::weighted_on_pages(p, bytes, nodes(), weights(), fallback_, pages_);
        topology::get().check(nodes());
        if (bytes == 0) return true;
        // eager fill of bound runs: must fit where bound
        detail::admit_or_throw(p, bytes, memory::policy_mode::bind, nodes(), "weighted interleave: ");
        int node = -1;
        const int err = memory::weighted_fill(p, bytes, nodes(), weights(), node);
        return err == 0 || detail::refused(err, node, bytes, fallback_,
                                           node < 0 ? "weighted interleave: get_mempolicy (the thread's own policy, to "
                                                      "restore it after the fill)"
                                                    : "weighted interleave: set_mempolicy bind");
    }
    friend bool operator==(const interleaved& a, const interleaved& b) noexcept {
        return a.state_ == b.state_ && a.fallback_ == b.fallback_ && a.pages_ == b.pages_;
    }
    friend bool operator!=(const interleaved& a, const interleaved& b) noexcept { return !(a == b); }

private:
    const detail::node_weights* state_ = nullptr;
    fallback fallback_;
    numaplace::page_size pages_ = numaplace::page_size::transparent;
};

/// Contiguous blocks of an element array on successive nodes, as a `partition<T>` splits it: block k's
/// pages bound to node k. An allocation of `bytes` is split by the layout's split of
/// ceil(bytes / unit bytes) units (whole rows for a rows partition), the very formula the container's
/// loop uses (`partition_of`). The placement itself is untyped; `partitioned_allocator<T>` takes only a
/// `partition<T>` and rejects a placement of another element size (but for its rebinding copy, which
/// containers make for their nodes: see partitioned_allocator).
class partitioned {
public:
    /// \effects places by `part`'s layout (its nodes, weights, unit, geometry, edge policy; its size does
    /// not matter). \throws invalid_placement for an empty partition (no node).
    template <class T>
    explicit partitioned(const numaplace::partition<T>& part, fallback fb = fallback::strict)
        : partition_(part.untyped()), fallback_(fb) {
        if (partition_.nodes().empty()) detail::throw_invalid("partitioned: empty node set (empty partition)");
    }
    /// \effects places by the matrix of `rows` (its `elements()`).
    template <class T>
    explicit partitioned(const numaplace::row_partition<T>& rows, fallback fb = fallback::strict)
        : partitioned(rows.elements(), fb) {}
    /// \returns the partition it was made from, untyped.
    const basic_partition& partition() const noexcept { return partition_; }
    /// \returns the bytes of one element of the partition.
    std::size_t element_size() const noexcept { return partition_.element_size(); }
    /// \returns strict or degrade.
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the pages it maps its memory with.
    numaplace::page_size pages() const noexcept { return pages_; }
    /// \returns a copy that maps each block on explicit pages of its own node's pool (`transparent`: the
    /// partition as made). Its partition is the same split with every edge on the explicit page (2 MiB for
    /// `largest_explicit`: the split must not depend on the pools), so `partition_of` and the loops follow
    /// the blocks the pages hold. \throws invalid_placement (a layout that cannot be re-made).
    partitioned with_pages(numaplace::page_size pages) const {
        partitioned p = *this;
        p.pages_ = pages;
        const std::size_t huge = pages == numaplace::page_size::largest_explicit ? explicit_page_bytes(numaplace::page_size::explicit_2m)
                                                                      : explicit_page_bytes(pages);
        if (huge == 0) return p;
        page_geometry g = partition_.geometry();
        g.huge = std::max(huge, g.page);
        p.partition_ = partition_.remade(partition_.element_size(), partition_.unit_length(), edge_alignment::huge, g);
        return p;
    }
    /// \returns the split of an allocation of `bytes` (unit indexes).
    basic_partition partition_for(std::size_t bytes) const noexcept { return partition_.for_bytes(bytes); }
    /// \returns the first node with a non-zero weight: its heap serves allocations below a page. Its block
    /// always holds index 0 (edges round up), so it owns the only page of such an allocation, and
    /// `partition_of`, `where` and the loops agree with the heap.
    int home_node() const noexcept {
        const auto& w = partition_.weights();
        for (std::size_t k = 0; k < w.size(); ++k)
            if (w[k] != 0) return partition_.nodes()[k];
        return partition_.nodes().empty() ? 0 : partition_.nodes()[0];
    }
    /// \returns the alignment of an allocation of `bytes`: its split's placement grain.
    std::size_t alignment(std::size_t bytes) const noexcept { return partition_for(bytes).alignment(); }
    /// \throws invalid_placement when an allocation of `bytes` is smaller than the extent of a partition of
    /// rows it was made from (`rows(m, n).elements()` holds m x n elements: a vector of m elements is
    /// another array, placed by `rows.per_row<U>()`). Element partitions and partitions of size 0 accept
    /// any size (growth follows the capacity).
    void check_extent(std::size_t bytes) const {
        if (partition_.unit_length() == 1 || partition_.units() == 0) return;
        const std::size_t extent = partition_.units() * partition_.unit_bytes(); // fits: checked when made
        if (bytes < extent)
            detail::throw_invalid("partitioned: an allocation of " + std::to_string(bytes / partition_.element_size()) +
                                  " elements split by a partition of " + std::to_string(partition_.units()) + " rows of " +
                                  std::to_string(partition_.unit_length()) + " elements (" +
                                  std::to_string(extent / partition_.element_size()) +
                                  " elements): an array per row is placed by rows.per_row<U>()");
    }
    /// \effects binds the pages block k owns (`basic_partition::page_bytes`: each grain of `alignment(bytes)`
    /// to the block holding its first byte) to node k; `p` must be aligned to `alignment(bytes)`. THP per
    /// the partition's `huge_pages()`: kept off when the grain is a small page and THP is on (so a degraded,
    /// first-touch placement still splits correctly), requested when the grain is a huge page and THP is
    /// `madvise`.
    /// On explicit pages, the pools of every block's node are checked before anything is mapped: strict
    /// throws placement_error (ENOMEM naming the node, page size and free pages), degrading records it and
    /// puts those blocks on transparent pages.
    /// \returns true if placed; false when a degrading placement fell back (recorded). \throws
    /// placement_error (strict).
    bool apply(void* p, std::size_t bytes) const {
        const basic_partition part = partition_for(bytes);
        if (pages_ != numaplace::page_size::transparent) return apply_explicit(p, bytes, part);
        detail::placed_buffers::instance().placed(p, memory::page_round(bytes), partition_); // replace.hpp reads it
        detail::advise_huge_pages(p, bytes, part.huge_pages());
        bool all = true;
        auto* base = static_cast<char*>(p);
        for (std::size_t k = 0; k < part.block_count(); ++k) {
            const auto range = part.page_bytes(k, bytes);
            if (range.first == range.second) continue;
            all = detail::place(base + range.first, range.second - range.first, memory::policy_mode::bind,
                                node_set{part.nodes()[k]}, fallback_) && all;
        }
        return all;
    }
    /// \returns whether a freed block at `p` that this placement placed may be handed out again as it
    /// is: false once `replace` re-placed it (its pages follow another layout).
    bool reusable(const void* p) const {
        detail::placed_buffers::entry e;
        return !(detail::placed_buffers::instance().find(p, e) && e.replaced);
    }
    /// \effects records a block handed out again (kept mapped and placed since its free) as `apply` does.
    void reused(void* p, std::size_t bytes) const {
        detail::placed_buffers::instance().placed(p, memory::page_round(bytes), partition_);
    }
    friend bool operator==(const partitioned& a, const partitioned& b) noexcept {
        return a.partition_.same_layout(b.partition_) && a.fallback_ == b.fallback_ && a.pages_ == b.pages_;
    }
    friend bool operator!=(const partitioned& a, const partitioned& b) noexcept { return !(a == b); }

private:
    bool apply_explicit(void* p, std::size_t bytes, const basic_partition& part) const {
        return detail::partitioned_on_pages(p, bytes, part, partition_, fallback_, pages_);
    }

    basic_partition partition_;
    fallback fallback_;
    numaplace::page_size pages_ = numaplace::page_size::transparent;
};

static_assert(std::is_trivially_copyable<on_node>::value && std::is_trivially_copyable<preferred_many>::value &&
                  std::is_trivially_copyable<interleaved>::value && std::is_trivially_copyable<partitioned>::value,
              "placements are trivially copyable handles");
static_assert(std::is_nothrow_copy_constructible<interleaved>::value &&
                  std::is_nothrow_copy_constructible<preferred_many>::value &&
                  std::is_nothrow_copy_constructible<partitioned>::value,
              "placement copies never throw");

namespace detail {
/// \returns the node a placement's errors name (call with 0): its one node, or -1 when it spans several
/// or does not say (a user's placement without `nodes()`).
inline int error_node_of(const on_node& p, int) noexcept { return p.node(); }
inline int error_node_of(const partitioned& p, int) noexcept { return error_node(p.partition().nodes()); }
template <class Placement>
auto error_node_of(const Placement& p, int) noexcept -> decltype(error_node(p.nodes())) { return error_node(p.nodes()); }
template <class Placement>
int error_node_of(const Placement&, long) noexcept { return -1; }
} // namespace detail

namespace memory {
/// \effects maps `bytes` (0 maps one page) and applies `placement` to them; nothing is touched.
/// \returns the start, aligned as the placement needs and to at least `alignment` (a power of two).
/// \throws placement_error naming the placement's node (-1 for several): ENOMEM when the size
/// overflows (nothing mapped) or the mapping fails, EINVAL for an alignment that is not a power of two;
/// what `apply` throws, having unmapped everything.
template <class Placement>
void* allocate(std::size_t bytes, const Placement& placement, std::size_t alignment = 1) {
    const int node = numaplace::detail::error_node_of(placement, 0);
    if (!page_round_fits(bytes)) numaplace::detail::throw_placement(node, bytes, ENOMEM, "size overflow");
    // a bad alignment goes to map as it is (EINVAL), not hidden under the placement's page alignment
    void* p = map(bytes, numaplace::detail::is_power_of_two(alignment) ? std::max(alignment, placement.alignment(bytes)) : alignment, node);
    try {
        placement.apply(p, bytes);
    } catch (...) {
        unmap(p, bytes);
        throw;
    }
    return p;
}
} // namespace memory

} // namespace numaplace

// --- A partitioned container's partition ----------------------------------------------------------------

namespace numaplace {

namespace detail {
/// Whether `Container` is contiguous (`data()`, `capacity()`) and its allocator partitioned
/// (`partitioned_allocator<T>`, or `default_init_allocator` of one).
template <class Container, class = void>
struct is_partitioned_container : std::false_type {};
template <class Container>
struct is_partitioned_container<
    Container, decltype(std::declval<const Container&>().get_allocator().placement().partition_for(0),
                        std::declval<const Container&>().capacity(), std::declval<const Container&>().data(), void())>
    : std::true_type {};
} // namespace detail

/// \returns the partition `c`'s pages were placed by, over its ELEMENTS: the split of its capacity (in
/// whole units of the allocator's partition: rows for a rows partition; the layout `replace()` gave the
/// buffer, if any), as element indexes, clipped to its size.
template <class Container, class = std::enable_if_t<detail::is_partitioned_container<Container>::value>>
partition<typename Container::value_type> partition_of(const Container& c) {
    using T = typename Container::value_type;
    const auto allocator = c.get_allocator(); // by value: placement() refers into it
    const std::size_t bytes = c.capacity() * sizeof(T);
    const basic_partition split = detail::placed_split(c.data(), bytes, allocator.placement().partition_for(bytes));
    return partition<T>::from_untyped(split.elements().clipped(c.size()));
}

} // namespace numaplace

#endif
