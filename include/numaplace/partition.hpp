#ifndef NUMAPLACE_PARTITION_HPP_INCLUDED
#define NUMAPLACE_PARTITION_HPP_INCLUDED

/// \file
/// A blocked split of the index range [0,n) of an element array over NUMA nodes. The same object tells
/// `partitioned_allocator` where to put pages and `parallel_for` where to run iterations.

#include "error.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <numeric>
#include <vector>

namespace numaplace {

/// Block `k` of a partition: the element indexes [begin, end) placed on and computed on `node`.
struct block {
    int node = -1;
    std::size_t begin = 0;
    std::size_t end = 0;
    std::size_t size() const noexcept { return end - begin; }
    bool empty() const noexcept { return begin == end; }
    friend bool operator==(const block& a, const block& b) noexcept {
        return a.node == b.node && a.begin == b.begin && a.end == b.end;
    }
    friend bool operator!=(const block& a, const block& b) noexcept { return !(a == b); }
};

/// Where block edges may fall.
enum class edge_alignment {
    /// Huge-page edges when transparent huge pages are `always` on and every block still spans at least
    /// eight edge steps (a step is lcm(element size, huge page) bytes); small-page edges otherwise (then the allocator and `first_touch` mark the range
    /// MADV_NOHUGEPAGE). Why: a 2 MiB huge page straddling two blocks is faulted in whole by whichever
    /// block touches it first, landing all its 512 small pages on one node. Aligning to huge pages keeps
    /// the TLB benefit of THP for large arrays (an edge moves by at most 2 MiB, < 1/8 of a block);
    /// forbidding THP keeps small arrays balanced.
    automatic,
    page, ///< edges on small-page boundaries
    huge  ///< edges on huge-page (THP PMD size) boundaries
};

/// Contiguous blocks in node order covering [0,n) exactly once. Deterministic: the same arguments give
/// the same blocks. Edges fall on page boundaries of the element array (measured from element 0, so the
/// array must start on such a boundary, as numaplace allocations do): an edge index `e` always has
/// `e * element_size` a multiple of `alignment()`, or is `n`. Copies share their state (cheap).
class partition {
public:
    /// An empty partition (n = 0) over no node.
    partition() : data_(std::make_shared<data>()) {}

    /// \effects splits [0,n) of `element_size`-byte elements over the nodes of `topo` that have CPUs,
    /// weighted by their core counts. \throws invalid_placement when no node has CPUs.
    partition(std::size_t n, std::size_t element_size, const topology& topo = topology::get(),
              edge_alignment align = edge_alignment::automatic)
        : partition(n, element_size, topo.with_cpus(), core_weights(topo, topo.with_cpus()), align, topo) {}

    /// \effects splits [0,n) over `nodes` (in id order) with integer `weights`, one per node (empty:
    /// cores per node; memory-only nodes then get nothing).
    /// \throws unknown_node for a node not in `topo`; invalid_placement for an empty set, a weight count
    /// that does not match, all-zero weights, or element_size 0.
    partition(std::size_t n, std::size_t element_size, const node_set& nodes, std::vector<std::size_t> weights,
              edge_alignment align = edge_alignment::automatic, const topology& topo = topology::get()) {
        topo.check(nodes);
        if (weights.empty()) weights = core_weights(topo, nodes);
        if (weights.size() != nodes.size())
            detail::throw_invalid("partition: " + std::to_string(weights.size()) + " weights for " +
                                  std::to_string(nodes.size()) + " nodes");
        if (std::accumulate(weights.begin(), weights.end(), std::size_t(0)) == 0)
            detail::throw_invalid("partition: all weights are zero (memory-only nodes have no cores)");
        if (element_size == 0) detail::throw_invalid("partition: element size 0");
        auto d = std::make_shared<data>();
        d->n = n;
        d->element_size = element_size;
        d->nodes = nodes;
        d->weights = std::move(weights);
        d->policy = align;
        split(*d);
        data_ = std::move(d);
    }

    /// \returns the same nodes, weights and alignment policy over [0,m).
    partition resized(std::size_t m) const {
        if (m == size()) return *this;
        auto d = std::make_shared<data>(*data_);
        d->n = m;
        split(*d);
        partition p;
        p.data_ = std::move(d);
        return p;
    }

    /// \returns the same blocks cut at `m` (<= size()): blocks keep their nodes and edges, indexes at or
    /// past `m` are dropped. A container whose capacity was allocated by `resized(capacity)` runs its
    /// `size()` elements by `resized(capacity).clipped(size)`, so compute stays where the pages are.
    partition clipped(std::size_t m) const {
        if (m >= size()) return *this;
        auto d = std::make_shared<data>(*data_);
        d->n = m;
        for (auto& b : d->blocks) {
            b.begin = std::min(b.begin, m);
            b.end = std::min(b.end, m);
        }
        partition p;
        p.data_ = std::move(d);
        return p;
    }

    std::size_t size() const noexcept { return data_->n; }
    std::size_t element_size() const noexcept { return data_->element_size; }
    /// \returns the byte alignment of every inner block edge (a page or a huge page).
    std::size_t alignment() const noexcept { return data_->alignment; }
    /// \returns whether huge pages must be kept off the range for the edges to hold (see edge_alignment).
    bool needs_no_huge_pages() const noexcept { return data_->alignment < detail::huge_page_size(); }
    const node_set& nodes() const noexcept { return data_->nodes; }
    const std::vector<std::size_t>& weights() const noexcept { return data_->weights; }
    /// \returns one block per node of `nodes()`, in node order (some may be empty).
    const std::vector<block>& blocks() const noexcept { return data_->blocks; }
    /// \returns the block that contains `index` (< size()).
    const block& block_of(std::size_t index) const noexcept {
        const auto& b = data_->blocks;
        std::size_t lo = 0, hi = b.size();
        while (hi - lo > 1) {
            std::size_t mid = (lo + hi) / 2;
            if (b[mid].begin <= index) lo = mid; else hi = mid;
        }
        while (lo + 1 < b.size() && b[lo].end <= index) ++lo; // skip empty blocks at the same edge
        return b[lo];
    }
    /// \returns the block of `node_id`, empty if the node is not part of the partition.
    block block_on(int node_id) const noexcept {
        for (const auto& b : data_->blocks)
            if (b.node == node_id) return b;
        return block{node_id, 0, 0};
    }

    friend bool operator==(const partition& a, const partition& b) noexcept {
        return a.data_ == b.data_ ||
               (a.size() == b.size() && a.element_size() == b.element_size() && a.alignment() == b.alignment() &&
                a.data_->weights == b.data_->weights && a.blocks() == b.blocks());
    }
    friend bool operator!=(const partition& a, const partition& b) noexcept { return !(a == b); }

    /// \returns cores per node of `nodes` (0 for memory-only nodes).
    static std::vector<std::size_t> core_weights(const topology& topo, const node_set& nodes) {
        std::vector<std::size_t> w;
        for (int id : nodes) w.push_back(topo.at(id).cores);
        return w;
    }

private:
    struct data {
        std::size_t n = 0;
        std::size_t element_size = 1;
        std::size_t alignment = 0;
        edge_alignment policy = edge_alignment::automatic;
        node_set nodes;
        std::vector<std::size_t> weights;
        std::vector<block> blocks;
    };

    static std::size_t choose_alignment(const data& d) {
        const std::size_t page = detail::page_size(), huge = detail::huge_page_size();
        switch (d.policy) {
        case edge_alignment::page: return page;
        case edge_alignment::huge: return huge;
        case edge_alignment::automatic: break;
        }
        std::size_t total = 0, smallest = 0; // smallest non-zero weight
        for (std::size_t w : d.weights) {
            total += w;
            if (w != 0 && (smallest == 0 || w < smallest)) smallest = w;
        }
        const bool thp_always = topology::get().capabilities().thp == "always";
        // Edges move in steps of lcm(element_size, huge) bytes: with large elements (a matrix row of
        // 160000 bytes: one step is 8192 rows, 1.3 GB) huge-page edges would unbalance the blocks. So the
        // smallest used block (bytes * smallest / total) must hold at least 8 such steps, with unequal
        // weights too (in long double: n * element_size and the lcm may overflow 64 bits).
        const long double step = static_cast<long double>(d.element_size) /
                                 static_cast<long double>(std::gcd(d.element_size, huge)) * static_cast<long double>(huge);
        const bool large = total != 0 &&
                           static_cast<long double>(d.n) * static_cast<long double>(d.element_size) *
                                   static_cast<long double>(smallest) >=
                               8.0L * step * static_cast<long double>(total);
        return thp_always && large ? huge : page;
    }

    __extension__ typedef unsigned __int128 wide; // units * weight and units * step may exceed 64 bits

    // Edges in units of `step` elements, the smallest element count that spans whole alignment units:
    // step * element_size = lcm(element_size, alignment). Unit edges are placed by cumulative weight,
    // so rounding never accumulates and the split is deterministic.
    static void split(data& d) {
        d.alignment = choose_alignment(d);
        const std::size_t g = std::gcd(d.element_size, d.alignment);
        const std::size_t step = d.alignment / g;
        const std::size_t units = d.n / step + (d.n % step != 0);
        const std::size_t total = std::accumulate(d.weights.begin(), d.weights.end(), std::size_t(0));
        d.blocks.clear();
        std::size_t cumulative = 0, begin = 0;
        for (std::size_t k = 0; k < d.nodes.size(); ++k) {
            cumulative += d.weights[k];
            auto edge_units = static_cast<std::size_t>(static_cast<wide>(units) * cumulative / total);
            auto edge = static_cast<wide>(edge_units) * step;
            std::size_t end = edge >= d.n ? d.n : static_cast<std::size_t>(edge);
            if (k + 1 == d.nodes.size()) end = d.n;
            d.blocks.push_back(block{d.nodes[k], begin, end});
            begin = end;
        }
    }

    std::shared_ptr<const data> data_;
};

} // namespace numaplace

#endif
