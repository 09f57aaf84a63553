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
#include <cerrno>
#include <cstring>
#include <string>
#include <cstddef>
#include <numeric>
#include <vector>

namespace numaplace {

/// What a placement does when the kernel refuses it. Either way, a request larger than the memory the
/// placement may use is refused with ENOMEM (see memory.hpp).
enum class fallback {
    strict, ///< throw `placement_error` (a `std::bad_alloc`), having released everything
    degrade ///< leave the pages to the default policy (first touch) and record it: `degradations()`
};

namespace detail {
/// \effects the policy over memory.hpp's mechanism: admits `bytes` on `nodes` (ENOMEM throws for
/// every fallback), then sets `mode` on [p, p+bytes). A refusal throws when `fb` is strict, else is
/// recorded. \returns true if placed, false if degraded.
inline bool place(void* p, std::size_t bytes, memory::policy_mode mode, const node_set& nodes, fallback fb) {
    const topology& topo = topology::get();
    topo.check(nodes);
    if (bytes == 0) return true;
    const std::string what = memory::detail::describe(mode, nodes);
    if (memory::admit(bytes, mode, nodes, p) != 0)
        throw_placement(memory::detail::error_node(nodes), bytes, ENOMEM, what + ": more than the free memory of the nodes");
    const int err = memory::bind(p, bytes, mode, nodes, topo);
    if (err == 0) return true;
    if (fb == fallback::strict)
        throw_placement(memory::detail::error_node(nodes), bytes, err, "mbind " + what + " refused: " + std::strerror(err));
    if (mode == memory::policy_mode::preferred_many && err == EINVAL) { // old kernel: prefer the first node
        degradation_log::instance().record("preferred_many unsupported by the kernel (EINVAL): preferring node " +
                                           std::to_string(nodes[0]));
        return place(p, bytes, memory::policy_mode::preferred, node_set{nodes[0]}, fb);
    }
    degradation_log::instance().record("mbind " + what + " refused (" + std::strerror(err) + "): left to first touch");
    return false;
}
} // namespace detail

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
        return detail::place(p, bytes, policy_ == node_policy::bind ? memory::policy_mode::bind : memory::policy_mode::preferred,
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
        return detail::place(p, bytes, memory::policy_mode::preferred_many, nodes_, fallback_);
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
            return detail::place(p, bytes, memory::policy_mode::interleave, nodes_, fallback_);
        }
        topology::get().check(nodes_);
        if (bytes == 0) return true;
        if (memory::admit(bytes, memory::policy_mode::bind, nodes_) != 0) // eager fill, bound runs: must fit
            detail::throw_placement(-1, bytes, ENOMEM, "weighted interleave: more than the free memory of the nodes");
        int node = -1;
        const int err = memory::weighted_fill(p, bytes, nodes_, weights_, node);
        if (err == 0) return true;
        if (fallback_ == fallback::strict)
            detail::throw_placement(node, bytes, err, std::string("set_mempolicy bind refused: ") + std::strerror(err));
        detail::degradation_log::instance().record(std::string("weighted interleave: set_mempolicy refused (") +
                                                   std::strerror(err) + "): left to first touch");
        return false;
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
        if (part.needs_no_huge_pages()) memory::forbid_huge_pages(p, bytes);
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
            all = detail::place(base + from, to - from, memory::policy_mode::bind, node_set{blocks[k].node}, fallback_) && all;
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
/// \effects maps `bytes` (0 maps one page) and applies `placement` to them; nothing is touched.
/// \returns the start, aligned as the placement needs and to at least `alignment` (a power of two).
/// \throws placement_error: ENOMEM when the size overflows (nothing mapped) or the mapping fails,
/// EINVAL for an alignment that is not a power of two; what `apply` throws, having unmapped everything.
template <class Placement>
void* allocate(std::size_t bytes, const Placement& placement, std::size_t alignment = 1) {
    if (!page_round_fits(bytes)) numaplace::detail::throw_placement(-1, bytes, ENOMEM, "size overflow");
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
