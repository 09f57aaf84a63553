#ifndef NUMAPLACE_PLACEMENT_HPP_INCLUDED
#define NUMAPLACE_PLACEMENT_HPP_INCLUDED

/// \file
/// Placement values: where the pages of an allocation go. Each is a small value type (copyable,
/// comparable) that allocators carry and that `apply`s itself to a freshly mapped, untouched range.
/// Each is strict (throws when the kernel refuses) or degrading (falls back to first touch and records
/// it in `degradations()`). Construction validates node ids against `topology::get()`.

#include "error.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "topology.hpp"

#include <algorithm>
#include <cstddef>
#include <numeric>
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
    int node() const noexcept { return node_; }
    node_policy policy() const noexcept { return policy_; }
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the node whose small-object pool serves allocations below a page.
    int home_node() const noexcept { return node_; }
    std::size_t alignment(std::size_t) const noexcept { return detail::page_size(); }
    /// \effects sets the policy of the untouched range. \returns false if degraded.
    bool apply(void* p, std::size_t bytes) const {
        return memory::bind(p, bytes, policy_ == node_policy::bind ? memory::policy_mode::bind : memory::policy_mode::preferred,
                            node_set{node_}, fallback_);
    }
    friend bool operator==(const on_node& a, const on_node& b) noexcept {
        return a.node_ == b.node_ && a.policy_ == b.policy_ && a.fallback_ == b.fallback_;
    }
    friend bool operator!=(const on_node& a, const on_node& b) noexcept { return !(a == b); }

private:
    int node_;
    node_policy policy_;
    fallback fallback_;
};

/// Pages preferably on any of several nodes, nearest first (MPOL_PREFERRED_MANY, Linux >= 5.15).
/// Where the kernel lacks it: strict throws `placement_error` (EINVAL); degrading prefers the first node.
class preferred_many {
public:
    explicit preferred_many(node_set nodes, fallback fb = fallback::strict) : nodes_(std::move(nodes)), fallback_(fb) {
        topology::get().check(nodes_);
    }
    const node_set& nodes() const noexcept { return nodes_; }
    fallback on_refusal() const noexcept { return fallback_; }
    int home_node() const noexcept { return nodes_[0]; }
    std::size_t alignment(std::size_t) const noexcept { return detail::page_size(); }
    bool apply(void* p, std::size_t bytes) const {
        return memory::bind(p, bytes, memory::policy_mode::preferred_many, nodes_, fallback_);
    }
    friend bool operator==(const preferred_many& a, const preferred_many& b) noexcept {
        return a.nodes_ == b.nodes_ && a.fallback_ == b.fallback_;
    }
    friend bool operator!=(const preferred_many& a, const preferred_many& b) noexcept { return !(a == b); }

private:
    node_set nodes_;
    fallback fallback_;
};

/// Pages round robin over a node set, page by page. With weights, `weights[k]` consecutive pages go to
/// `nodes[k]` in each round. Equal weights use the kernel's MPOL_INTERLEAVE (pages are placed lazily,
/// at first touch, in address order); unequal weights are placed eagerly at allocation by
/// `memory::weighted_fill` (see there why not MPOL_WEIGHTED_INTERLEAVE).
class interleaved {
public:
    /// \effects interleave over every node of the topology.
    explicit interleaved(fallback fb = fallback::strict) : interleaved(topology::get().all(), {}, fb) {}
    /// \throws unknown_node; invalid_placement for an empty set, a weight count that does not match
    /// the nodes, or all-zero weights.
    explicit interleaved(node_set nodes, std::vector<std::size_t> weights = {}, fallback fb = fallback::strict)
        : nodes_(std::move(nodes)), weights_(std::move(weights)), fallback_(fb) {
        topology::get().check(nodes_);
        if (!weights_.empty()) {
            if (weights_.size() != nodes_.size())
                detail::throw_invalid("interleaved: " + std::to_string(weights_.size()) + " weights for " +
                                      std::to_string(nodes_.size()) + " nodes");
            if (std::accumulate(weights_.begin(), weights_.end(), std::size_t(0)) == 0)
                detail::throw_invalid("interleaved: all weights are zero");
            // reduce by the gcd: {2,2} is plain interleave, {4,2} is {2,1}
            std::size_t g = 0;
            for (auto w : weights_) g = std::gcd(g, w);
            for (auto& w : weights_) w /= g;
            bool uniform = true;
            for (auto w : weights_) uniform = uniform && w == weights_[0];
            if (uniform) weights_.clear();
        }
    }
    const node_set& nodes() const noexcept { return nodes_; }
    /// \returns the reduced weights, empty when uniform.
    const std::vector<std::size_t>& weights() const noexcept { return weights_; }
    fallback on_refusal() const noexcept { return fallback_; }
    int home_node() const noexcept { return nodes_[0]; }
    std::size_t alignment(std::size_t) const noexcept { return detail::page_size(); }
    bool apply(void* p, std::size_t bytes) const {
        if (weights_.empty()) {
            // Huge pages would interleave 2 MiB at a time; keep page granularity.
            memory::forbid_huge_pages(p, bytes);
            return memory::bind(p, bytes, memory::policy_mode::interleave, nodes_, fallback_);
        }
        return memory::weighted_fill(p, bytes, nodes_, weights_, fallback_);
    }
    friend bool operator==(const interleaved& a, const interleaved& b) noexcept {
        return a.nodes_ == b.nodes_ && a.weights_ == b.weights_ && a.fallback_ == b.fallback_;
    }
    friend bool operator!=(const interleaved& a, const interleaved& b) noexcept { return !(a == b); }

private:
    node_set nodes_;
    std::vector<std::size_t> weights_;
    fallback fallback_;
};

/// Contiguous blocks of an element array on successive nodes, as a `partition` splits it. An
/// allocation of m elements is split by `partition.resized(m)`, so it always agrees with the loop.
class partitioned {
public:
    /// \effects the default partition of `element_size`-byte elements over nodes with CPUs.
    explicit partitioned(std::size_t element_size, fallback fb = fallback::strict)
        : partition_(0, element_size), fallback_(fb) {}
    explicit partitioned(numaplace::partition p, fallback fb = fallback::strict) : partition_(std::move(p)), fallback_(fb) {
        if (partition_.nodes().empty()) detail::throw_invalid("partitioned: empty node set");
    }
    const numaplace::partition& partition() const noexcept { return partition_; }
    fallback on_refusal() const noexcept { return fallback_; }
    /// \returns the partition an allocation of `bytes` is split by.
    numaplace::partition partition_for(std::size_t bytes) const {
        return partition_.resized(bytes / partition_.element_size());
    }
    int home_node() const noexcept {
        for (const auto& b : partition_.blocks())
            if (!b.empty()) return b.node;
        return partition_.nodes()[0];
    }
    std::size_t alignment(std::size_t bytes) const { return partition_for(bytes).alignment(); }
    /// \effects binds block k's pages to node k (block edges are page- or huge-page-aligned from `p`,
    /// which must be aligned to `alignment(bytes)`); when edges are small-page-aligned and THP is on,
    /// the range is kept off huge pages so a degraded (first-touch) placement still splits correctly.
    bool apply(void* p, std::size_t bytes) const {
        const numaplace::partition part = partition_for(bytes);
        memory::keep_huge_pages_off_edges(p, bytes, part);
        const std::size_t s = part.element_size();
        const auto& blocks = part.blocks();
        std::size_t last = blocks.size(); // the last non-empty block also takes the mapping's tail page
        for (std::size_t k = 0; k < blocks.size(); ++k)
            if (!blocks[k].empty()) last = k;
        bool all = true;
        auto* base = static_cast<char*>(p);
        for (std::size_t k = 0; k < blocks.size(); ++k) {
            if (blocks[k].empty()) continue;
            const std::size_t from = blocks[k].begin * s, to = k == last ? memory::page_round(bytes) : blocks[k].end * s;
            all = memory::bind(base + from, to - from, memory::policy_mode::bind, node_set{blocks[k].node}, fallback_) && all;
        }
        return all;
    }
    friend bool operator==(const partitioned& a, const partitioned& b) noexcept {
        return a.partition_ == b.partition_ && a.fallback_ == b.fallback_;
    }
    friend bool operator!=(const partitioned& a, const partitioned& b) noexcept { return !(a == b); }

private:
    numaplace::partition partition_;
    fallback fallback_;
};

namespace memory {
/// \effects maps `bytes` and applies `placement` to them; nothing is touched.
/// \returns the start, aligned as the placement needs and to at least `alignment`. \throws what `map`
/// and `apply` throw, having unmapped everything (loses nothing).
template <class Placement>
void* allocate(std::size_t bytes, const Placement& placement, std::size_t alignment = 0) {
    void* p = map(bytes, std::max(alignment, placement.alignment(bytes)));
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

#endif
