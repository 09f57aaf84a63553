#ifndef NUMAPLACE_PARTITION_HPP_INCLUDED
#define NUMAPLACE_PARTITION_HPP_INCLUDED

/// \file
/// `partition<T>`: a blocked split of an array of `T` over NUMA nodes, one typed value that
/// `partitioned_allocator<T>` places pages by, `parallel_for` runs iterations by and `where` checks.
/// Pure (the split depends only on its arguments, the page geometry included), carried (a trivially
/// copyable handle to an interned layout), block edges on page (or huge page) boundaries of the array.
/// The rules (index space of units and rows, growth of containers, edges) are in docs/partition.md.

#include "basic_partition.hpp"
#include "error.hpp"
#include "topology.hpp"

#include <cstddef>
#include <type_traits>
#include <vector>

namespace numaplace {

/// A partition of an array of `T` (see the file comment): element partitions `partition<T>(n, ...)` and
/// row partitions `partition<T>::rows(m, row_length, ...)`. The element type is part of the type:
/// `partitioned_allocator<T>` takes only a `partition<T>`, `where(const T*, partition<T>)` and
/// `first_touch(T*, partition<T>)` likewise, so an element-size mismatch does not compile.
/// Trivially copyable; copies never throw; a moved-from partition equals its source; a
/// default-constructed one is empty (no node, size 0) and every observer works on it.
template <class T>
class partition {
public:
    /// `T`, the element type.
    using value_type = T;

    /// An empty partition (size 0, no node).
    partition() noexcept = default;

    /// \effects splits [0,n) over the nodes of `topo` that have CPUs, weighted by their core counts.
    /// \throws invalid_placement when no node has CPUs (or n × sizeof(T) overflows).
    explicit partition(std::size_t n, const topology& topo = topology::get(),
                       edge_alignment edges = edge_alignment::automatic)
        : p_(n, sizeof(T), 1, topo.with_cpus(), {}, edges, topo, page_geometry::of(topo)) {}
    /// \effects splits [0,n) over `nodes` with one integer weight per node (empty: cores per node;
    /// memory-only nodes then get nothing). Any weights that fit in size_t are legal.
    /// \throws unknown_node, invalid_placement (see basic_partition).
    partition(std::size_t n, const node_set& nodes, std::vector<std::size_t> weights = {},
              edge_alignment edges = edge_alignment::automatic, const topology& topo = topology::get())
        : p_(n, sizeof(T), 1, nodes, std::move(weights), edges, topo, page_geometry::of(topo)) {}
    /// As above, for an explicit page geometry (synthetic topologies, or planning for another machine).
    partition(std::size_t n, const node_set& nodes, std::vector<std::size_t> weights, edge_alignment edges,
              const topology& topo, const page_geometry& geometry)
        : p_(n, sizeof(T), 1, nodes, std::move(weights), edges, topo, geometry) {}

    /// \returns the partition of `m` rows of `row_length` T's (an m × row_length row-major matrix) in
    /// whole rows, over the nodes with CPUs weighted by cores: indexes are rows.
    static partition rows(std::size_t m, std::size_t row_length, const topology& topo = topology::get(),
                          edge_alignment edges = edge_alignment::automatic) {
        return partition(basic_partition(m, sizeof(T), row_length, topo.with_cpus(), {}, edges, topo,
                                         page_geometry::of(topo)));
    }
    /// \returns the partition of `m` rows over `nodes` with `weights`.
    static partition rows(std::size_t m, std::size_t row_length, const node_set& nodes,
                          std::vector<std::size_t> weights = {}, edge_alignment edges = edge_alignment::automatic,
                          const topology& topo = topology::get()) {
        return partition(basic_partition(m, sizeof(T), row_length, nodes, std::move(weights), edges, topo,
                                         page_geometry::of(topo)));
    }
    /// \returns the partition of `m` rows for an explicit page geometry.
    static partition rows(std::size_t m, std::size_t row_length, const node_set& nodes, std::vector<std::size_t> weights,
                          edge_alignment edges, const topology& topo, const page_geometry& geometry) {
        return partition(basic_partition(m, sizeof(T), row_length, nodes, std::move(weights), edges, topo, geometry));
    }

    /// \returns `p` as a partition of `T`, the named step from an untyped one.
    /// \throws invalid_placement when `p.element_size() != sizeof(T)` (and p has nodes).
    static partition from_untyped(const basic_partition& p) {
        if (!p.nodes().empty() && p.element_size() != sizeof(T))
            detail::throw_invalid("partition of " + std::to_string(p.element_size()) + "-byte elements used for " +
                                  std::to_string(sizeof(T)) + "-byte elements");
        return partition(p);
    }
    /// \returns the untyped partition underneath (units are elements).
    const basic_partition& untyped() const noexcept { return p_; }

    /// \returns the number of indexes: rows of a rows partition, elements otherwise.
    std::size_t size() const noexcept { return p_.size(); }
    /// \returns whether `size() == 0`.
    bool empty() const noexcept { return p_.empty(); }
    /// \returns T's per index (1 for element partitions and element views).
    std::size_t row_length() const noexcept { return p_.row_length(); }
    /// \returns the number of T's covered: size() × row_length().
    std::size_t element_count() const noexcept { return p_.element_count(); }
    /// \returns the units the split was made for (a container's capacity in units).
    std::size_t units() const noexcept { return p_.units(); }
    /// \returns `sizeof(T)`.
    std::size_t element_size() const noexcept { return sizeof(T); }
    /// \returns the byte alignment an allocation split by this partition needs.
    std::size_t alignment() const noexcept { return p_.alignment(); }
    /// \returns the edge step in elements.
    std::size_t step() const noexcept { return p_.step(); }
    /// \returns whether the placement asks for huge pages (MADV_HUGEPAGE) or keeps them off.
    huge_page_advice huge_pages() const noexcept { return p_.huge_pages(); }
    /// \returns the page geometry the split was made for.
    const page_geometry& geometry() const noexcept { return p_.geometry(); }
    /// \returns the edge alignment asked for.
    edge_alignment edge_policy() const noexcept { return p_.edge_policy(); }
    /// \returns the nodes, in block order.
    const node_set& nodes() const noexcept { return p_.nodes(); }
    /// \returns the weights, one per node.
    const std::vector<std::size_t>& weights() const noexcept { return p_.weights(); }
    /// \returns the number of blocks (one per node).
    std::size_t block_count() const noexcept { return p_.block_count(); }
    /// \returns block `k` (element indexes).
    numaplace::block block(std::size_t k) const noexcept { return p_.block(k); }
    /// \returns every block, in node order.
    std::vector<numaplace::block> blocks() const { return p_.blocks(); }
    /// \returns the block that holds element `index`.
    numaplace::block block_of(std::size_t index) const noexcept { return p_.block_of(index); }
    /// \returns the block of node `node_id` (empty when the node is not in the partition).
    numaplace::block block_on(int node_id) const noexcept { return p_.block_on(node_id); }

    /// \returns the same layout split for `m` indexes. \throws invalid_placement on byte overflow, or for
    /// m > 0 on an empty partition.
    partition resized(std::size_t m) const { return partition(p_.resized(m)); }
    /// \returns the same blocks cut at `m` indexes.
    partition clipped(std::size_t m) const noexcept { return partition(p_.clipped(m)); }
    /// \returns the same blocks over element indexes (block k's rows × row_length()): the named step from
    /// rows to elements. Itself for an element partition.
    partition elements() const noexcept { return partition(p_.elements()); }

    friend bool operator==(const partition& a, const partition& b) noexcept { return a.p_ == b.p_; }
    friend bool operator!=(const partition& a, const partition& b) noexcept { return !(a == b); }

private:
    explicit partition(const basic_partition& p) noexcept : p_(p) {}
    basic_partition p_;
};

static_assert(std::is_trivially_copyable<partition<double>>::value, "partition handles are trivially copyable");
static_assert(std::is_nothrow_copy_constructible<partition<double>>::value, "");
static_assert(std::is_nothrow_move_assignable<partition<double>>::value, "");

} // namespace numaplace

#endif
