#ifndef NUMAPLACE_PARTITION_HPP_INCLUDED
#define NUMAPLACE_PARTITION_HPP_INCLUDED

/// \file
/// `partition<T>`: a blocked split of an array of `T` over NUMA nodes, one typed value that
/// `partitioned_allocator<T>` places pages by, `parallel_for` runs iterations by and `where` checks.
/// Pure (the split depends only on its arguments, the page geometry included), carried (a trivially
/// copyable handle to an interned layout), compute edges exact (each block its weighted share to within
/// one index), pages following them (a page belongs to the block holding its first byte). Rows of a
/// matrix are a type of their own, `row_partition<T>`. The rules (index spaces, work partitions, growth,
/// edges and pages) are in docs/partition.md.

#include "basic_partition.hpp"
#include "binding.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace numaplace {

template <class T>
class row_partition;

namespace detail {

/// \returns the default split of `n` units of `row_length` elements of `element_size` bytes: over the
/// nodes of the process's binding (`cpu_binding::of(topo)`), weighted by the cores holding its CPUs on each.
inline basic_partition bound_split(std::size_t n, std::size_t element_size, std::size_t row_length,
                                   edge_alignment edges, const topology& topo) {
    return detail::with_binding(topo, [&](const cpu_binding& b) {
        return basic_partition(n, element_size, row_length, b.nodes(), b.weights(), edges, topo, page_geometry::of(topo));
    });
}
/// \returns the cut points of a split of `n` indexes by work: cut k is the lowest index (from cut k - 1)
/// whose prefix (work_prefix[i] - work_prefix[0]) is nearest the cumulative share of `shape`'s weights of
/// the total work, non-decreasing, the first 0 and the last n (no work at all: `shape`'s own edges, the
/// indexes split by the weights). \throws invalid_placement when the prefix decreases.
template <class W>
std::vector<std::size_t> work_cuts(const basic_partition& shape, std::size_t n, const W* work_prefix) {
    const std::size_t count = shape.block_count();
    std::vector<std::size_t> cuts(count + 1, 0);
    cuts[count] = n;
    if (n == 0) return cuts;
    const auto work = [&](std::size_t i) -> std::size_t {
        return static_cast<std::size_t>(work_prefix[i] - work_prefix[0]);
    };
    for (std::size_t i = 0; i < n; ++i)
        if (work_prefix[i + 1] < work_prefix[i])
            throw_invalid("partition::by_work: the work prefix decreases at index " + std::to_string(i));
    const std::size_t total = work(n);
    if (total == 0) { // no work anywhere: any cut is within one index's work; split the indexes as weighted
        for (std::size_t k = 1; k < count; ++k) cuts[k] = shape.block(k).begin;
        return cuts;
    }
    const auto& w = shape.weights();
    wide_uint prefix = 0, sum = 0;
    for (std::size_t x : w) sum += x;
    std::size_t at = 0;
    for (std::size_t k = 1; k < count; ++k) {
        prefix += w[k - 1];
        // the target t = total x prefix / sum = q + rem / sum
        wide_uint rem = 0;
        const std::size_t q = mul_div(total, prefix, sum, rem);
        // i1: the last index from `at` whose work is <= q (so <= t); i1 + 1's work is > t
        std::size_t lo = at, hi = n + 1;
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo) / 2;
            if (work(mid) <= q) lo = mid + 1;
            else hi = mid;
        }
        std::size_t cut = at;
        if (lo > at) {
            const std::size_t i1 = lo - 1;
            cut = i1;
            if (i1 < n) { // the nearer of i1 and i1 + 1, ties to i1: t <= (w1 + w2) / 2
                const wide_uint m = static_cast<wide_uint>(work(i1)) + work(i1 + 1), h = m / 2;
                const bool low = q < h || (q == h && (rem == 0 || ((m & 1) != 0 && 2 * rem <= sum)));
                if (!low) cut = i1 + 1;
            }
        }
        // indexes of no work before the cut: the first of them (the lowest index of the nearest prefix)
        for (std::size_t lo2 = at, hi2 = cut, v = work(cut); lo2 < hi2;) {
            const std::size_t mid = lo2 + (hi2 - lo2) / 2;
            if (work(mid) < v) lo2 = mid + 1;
            else hi2 = cut = mid;
        }
        at = cut;
        cuts[k] = at;
    }
    return cuts;
}
} // namespace detail

namespace detail {
/// The observers `partition<T>` and `row_partition<T>` share, over the untyped partition they hold:
/// indexes are elements of a `partition<T>` and rows of a `row_partition<T>`.
class typed_partition_base {
public:
    /// \returns the untyped partition underneath.
    const basic_partition& untyped() const noexcept { return p_; }
    /// \returns the number of indexes.
    std::size_t size() const noexcept { return p_.size(); }
    /// \returns whether `size() == 0`.
    bool empty() const noexcept { return p_.empty(); }
    /// \returns T's per index (1 for elements, the row's length for rows).
    std::size_t row_length() const noexcept { return p_.row_length(); }
    /// \returns T's per unit of the layout (a row's length for rows and their element view, else 1).
    std::size_t unit_length() const noexcept { return p_.unit_length(); }
    /// \returns the number of T's covered: size() x row_length().
    std::size_t element_count() const noexcept { return p_.element_count(); }
    /// \returns the units the split was made for (a container's capacity in units).
    std::size_t units() const noexcept { return p_.units(); }
    /// \returns the placement grain in bytes (a page or a huge page): an allocation split by this partition
    /// is aligned to it, and each grain belongs to the block holding its first byte.
    std::size_t alignment() const noexcept { return p_.alignment(); }
    /// \returns whether the placement asks for huge pages (MADV_HUGEPAGE) or keeps them off.
    huge_page_advice huge_pages() const noexcept { return p_.huge_pages(); }
    /// \returns the page geometry the split was made for.
    const page_geometry& geometry() const noexcept { return p_.geometry(); }
    /// \returns the page grain asked for.
    edge_alignment edge_policy() const noexcept { return p_.edge_policy(); }
    /// \returns the nodes, in block order.
    const node_set& nodes() const noexcept { return p_.nodes(); }
    /// \returns the weights, one per node.
    const std::vector<std::size_t>& weights() const noexcept { return p_.weights(); }
    /// \returns the number of blocks (one per node).
    std::size_t block_count() const noexcept { return p_.block_count(); }
    /// \returns block `k`, in this partition's indexes.
    numaplace::block block(std::size_t k) const noexcept { return p_.block(k); }
    /// \returns every block, in node order.
    std::vector<numaplace::block> blocks() const { return p_.blocks(); }
    /// \returns the block that holds index `index`.
    numaplace::block block_of(std::size_t index) const noexcept { return p_.block_of(index); }
    /// \returns the block of node `node_id` (empty when the node is not in the partition).
    numaplace::block block_on(int node_id) const noexcept { return p_.block_on(node_id); }

protected:
    typed_partition_base() noexcept = default;
    explicit typed_partition_base(const basic_partition& p) noexcept : p_(p) {}
    basic_partition p_;
};
} // namespace detail

/// A partition of an array of `T` (see the file comment): element partitions `partition<T>(n, ...)` and
/// row partitions `partition<T>::rows(m, row_length, ...)`. The element type is part of the type:
/// `partitioned_allocator<T>` takes only a `partition<T>`, `where(const T*, partition<T>)` and
/// `first_touch(T*, partition<T>)` likewise, so an element-size mismatch does not compile.
/// Trivially copyable; copies never throw; a moved-from partition equals its source; a
/// default-constructed one is empty (no node, size 0) and every observer works on it.
template <class T>
class partition : public detail::typed_partition_base {
public:
    /// `T`, the element type.
    using value_type = T;

    /// An empty partition (size 0, no node).
    partition() noexcept = default;

    /// \effects splits [0,n) over the nodes this process may run on (`cpu_binding::of(topo)`: those with a
    /// CPU of its binding; every node with CPUs when it is not bound), weighted by the cores holding its
    /// CPUs on each (`cpu_binding::weights()`: cores per node when not bound).
    /// \throws invalid_placement when no node has CPUs (or n × sizeof(T) overflows).
    explicit partition(std::size_t n, const topology& topo = topology::get(),
                       edge_alignment edges = edge_alignment::automatic)
        : typed_partition_base(detail::bound_split(n, sizeof(T), 1, edges, topo)) {}
    /// \effects splits [0,n) over `nodes` with one integer weight per node (empty: cores per node;
    /// memory-only nodes then get nothing). Any weights that fit in size_t are legal.
    /// \throws unknown_node, invalid_placement (see basic_partition).
    partition(std::size_t n, const node_set& nodes, std::vector<std::size_t> weights = {},
              edge_alignment edges = edge_alignment::automatic, const topology& topo = topology::get())
        : typed_partition_base(basic_partition(n, sizeof(T), 1, nodes, std::move(weights), edges, topo, page_geometry::of(topo))) {}
    /// As above, for an explicit page geometry (synthetic topologies, or planning for another machine).
    partition(std::size_t n, const node_set& nodes, std::vector<std::size_t> weights, edge_alignment edges,
              const topology& topo, const page_geometry& geometry)
        : typed_partition_base(basic_partition(n, sizeof(T), 1, nodes, std::move(weights), edges, topo, geometry)) {}

    /// \returns the partition of `m` rows of `row_length` T's (an m x row_length row-major matrix) in whole
    /// rows, over the nodes of the process's binding weighted by the cores holding its CPUs: a
    /// `row_partition<T>` (indexes are rows).
    static row_partition<T> rows(std::size_t m, std::size_t row_length, const topology& topo = topology::get(),
                                 edge_alignment edges = edge_alignment::automatic);
    /// \returns the partition of `m` rows over `nodes` with `weights`.
    static row_partition<T> rows(std::size_t m, std::size_t row_length, const node_set& nodes,
                                 std::vector<std::size_t> weights = {}, edge_alignment edges = edge_alignment::automatic,
                                 const topology& topo = topology::get());
    /// \returns the partition of `m` rows for an explicit page geometry.
    static row_partition<T> rows(std::size_t m, std::size_t row_length, const node_set& nodes,
                                 std::vector<std::size_t> weights, edge_alignment edges, const topology& topo,
                                 const page_geometry& geometry);

    /// \returns the partition of `n` indexes split by work: `work_prefix` has n + 1 non-decreasing entries,
    /// index i's work being work_prefix[i + 1] - work_prefix[i] (a CSR matrix's row_ptr: non-zeros per row).
    /// Edge k is the index whose prefix is nearest the cumulative weighted share of the total work, so
    /// each block's work is its share of `weights` (empty: cores per node) to within one index's work.
    /// Indexes are T's (the arrays with one entry per index: y, x of a square matrix; `as<U>()` for another
    /// type, `mapped<U>(work_prefix)` for the arrays the prefix indexes into: col, val).
    /// \throws invalid_placement for a prefix that decreases; unknown_node, invalid_placement as the
    /// constructor.
    template <class W>
    static partition by_work(std::size_t n, const W* work_prefix, const node_set& nodes, std::vector<std::size_t> weights = {},
                             edge_alignment edges = edge_alignment::automatic, const topology& topo = topology::get()) {
        const partition shape(n, nodes, std::move(weights), edges, topo);
        return partition(shape.p_.with_cuts(detail::work_cuts(shape.p_, n, work_prefix)));
    }
    /// \returns `by_work` over the nodes of the process's binding, weighted by the cores holding its CPUs.
    template <class W>
    static partition by_work(std::size_t n, const W* work_prefix, const topology& topo = topology::get()) {
        return detail::with_binding(topo, [&](const cpu_binding& b) {
            return by_work(n, work_prefix, b.nodes(), b.weights(), edge_alignment::automatic, topo);
        });
    }
    /// \returns the partition of cut points: block k is [cuts[k], cuts[k + 1]) exactly (block_count() + 1
    /// entries, the first 0, non-decreasing), over `nodes`. \throws invalid_placement for other cuts;
    /// unknown_node.
    static partition from_cuts(const std::vector<std::size_t>& cuts, const node_set& nodes,
                               edge_alignment edges = edge_alignment::automatic, const topology& topo = topology::get()) {
        const partition shape(0, nodes, std::vector<std::size_t>(nodes.size(), 1), edges, topo);
        return partition(shape.p_.with_cuts(cuts));
    }
    /// \returns a partition of the array that this partition's indexes point into through `index_map`
    /// (size() + 1 non-decreasing entries: a CSR row_ptr): block k holds entries [index_map[b_k] -
    /// index_map[0], index_map[e_k] - index_map[0]) of block k's indexes [b_k, e_k) exactly, so col and val
    /// are split where their rows are. \throws invalid_placement for a map that decreases.
    template <class U, class I>
    partition<U> mapped(const I* index_map) const {
        for (std::size_t i = 0; i < p_.size(); ++i)
            if (index_map[i + 1] < index_map[i])
                detail::throw_invalid("partition::mapped: the index map decreases at index " + std::to_string(i));
        std::vector<std::size_t> cuts(p_.block_count() + 1, 0);
        for (std::size_t k = 0; k < p_.block_count(); ++k)
            cuts[k + 1] = static_cast<std::size_t>(index_map[p_.block(k).end] - index_map[0]);
        return partition<U>::from_untyped(p_.remade(sizeof(U), 1, p_.edge_policy(), p_.geometry()).with_cuts(cuts));
    }
    /// \returns the same blocks over an array of `U` with one entry per index (y of type float beside x of
    /// type double, a row_ptr of int): same nodes, weights and index count.
    template <class U>
    partition<U> as() const {
        return partition<U>::from_untyped(p_.remade(sizeof(U), p_.unit_length(), p_.edge_policy(), p_.geometry())).clipped(p_.size());
    }

    /// \returns `p` as a partition of `T`, the named step from an untyped one (a partition of rows gives
    /// its element view: indexes of a `partition<T>` are always elements).
    /// \throws invalid_placement when `p.element_size() != sizeof(T)` (and p has nodes).
    static partition from_untyped(const basic_partition& p) {
        if (!p.nodes().empty() && p.element_size() != sizeof(T))
            detail::throw_invalid("partition of " + std::to_string(p.element_size()) + "-byte elements used for " +
                                  std::to_string(sizeof(T)) + "-byte elements");
        return partition(p);
    }
    /// \returns `sizeof(T)`.
    std::size_t element_size() const noexcept { return sizeof(T); }

    /// \returns the same layout split for `m` indexes. \throws invalid_placement on byte overflow, or for
    /// m > 0 on an empty partition.
    partition resized(std::size_t m) const { return partition(p_.resized(m)); }
    /// \returns the same blocks cut at `m` indexes.
    partition clipped(std::size_t m) const noexcept { return partition(p_.clipped(m)); }
    /// \returns itself (indexes are elements already).
    partition elements() const noexcept { return *this; }

    friend bool operator==(const partition& a, const partition& b) noexcept { return a.p_ == b.p_; }
    friend bool operator!=(const partition& a, const partition& b) noexcept { return !(a == b); }

private:
    template <class U>
    friend class row_partition;
    template <class U>
    friend class partition;
    explicit partition(const basic_partition& p) noexcept : typed_partition_base(p.elements()) {}
};

/// A partition of the rows of an m x row_length row-major matrix of `T` (`partition<T>::rows`): indexes
/// are rows. `parallel_for` visits rows; `elements()` is the same blocks over the m x row_length elements
/// (what the matrix's allocator and `where(data, ...)` take); `per_row<U>()` is the partition of an array
/// with one U per row (the result vector of a DGEMV), the same row blocks. A container of another size
/// than its partition's extent is refused by the allocator (invalid_placement), never placed silently.
/// Trivially copyable; a default-constructed one is empty.
template <class T>
class row_partition : public detail::typed_partition_base {
public:
    /// `T`, the element type.
    using value_type = T;

    /// An empty partition (no row, no node).
    row_partition() noexcept = default;

    /// \returns `p` (rows: not an element view) as a row partition of `T`. \throws invalid_placement when
    /// `p.element_size() != sizeof(T)` or p is an element view.
    static row_partition from_untyped(const basic_partition& p) {
        if (!p.nodes().empty() && (p.element_size() != sizeof(T) || p.indexes_elements()))
            detail::throw_invalid("row_partition: a partition of " + std::to_string(p.element_size()) + "-byte " +
                                  (p.indexes_elements() ? "elements" : "rows") + " used as rows of " +
                                  std::to_string(sizeof(T)) + "-byte elements");
        return row_partition(p);
    }
    /// \returns `sizeof(T)`.
    std::size_t element_size() const noexcept { return sizeof(T); }

    /// \returns the same layout split for `m` rows. \throws invalid_placement on byte overflow, or for m > 0
    /// on an empty partition.
    row_partition resized(std::size_t m) const { return row_partition(p_.resized(m)); }
    /// \returns the same blocks cut at `m` rows.
    row_partition clipped(std::size_t m) const noexcept { return row_partition(p_.clipped(m)); }
    /// \returns the same blocks over the matrix's element indexes (block k's rows x row_length()).
    partition<T> elements() const noexcept { return partition<T>(p_); }
    /// \returns the partition of an array of size() U's, one per row, whose block k holds block k's rows.
    template <class U = T>
    partition<U> per_row() const {
        return partition<U>::from_untyped(p_.remade(sizeof(U), 1, p_.edge_policy(), p_.geometry())).clipped(p_.size());
    }

    friend bool operator==(const row_partition& a, const row_partition& b) noexcept { return a.p_ == b.p_; }
    friend bool operator!=(const row_partition& a, const row_partition& b) noexcept { return !(a == b); }

private:
    template <class U>
    friend class partition;
    explicit row_partition(const basic_partition& p) noexcept : typed_partition_base(p) {}
};

template <class T>
row_partition<T> partition<T>::rows(std::size_t m, std::size_t row_length, const topology& topo, edge_alignment edges) {
    return row_partition<T>(detail::bound_split(m, sizeof(T), row_length, edges, topo));
}
template <class T>
row_partition<T> partition<T>::rows(std::size_t m, std::size_t row_length, const node_set& nodes,
                                    std::vector<std::size_t> weights, edge_alignment edges, const topology& topo) {
    return row_partition<T>(
        basic_partition(m, sizeof(T), row_length, nodes, std::move(weights), edges, topo, page_geometry::of(topo)));
}
template <class T>
row_partition<T> partition<T>::rows(std::size_t m, std::size_t row_length, const node_set& nodes,
                                    std::vector<std::size_t> weights, edge_alignment edges, const topology& topo,
                                    const page_geometry& geometry) {
    return row_partition<T>(basic_partition(m, sizeof(T), row_length, nodes, std::move(weights), edges, topo, geometry));
}

static_assert(std::is_trivially_copyable<row_partition<double>>::value, "partition handles are trivially copyable");

static_assert(std::is_trivially_copyable<partition<double>>::value, "partition handles are trivially copyable");
static_assert(std::is_nothrow_copy_constructible<partition<double>>::value, "");
static_assert(std::is_nothrow_move_assignable<partition<double>>::value, "");

} // namespace numaplace

#endif
