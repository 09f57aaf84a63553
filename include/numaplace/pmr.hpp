#ifndef NUMAPLACE_PMR_HPP_INCLUDED
#define NUMAPLACE_PMR_HPP_INCLUDED

/// \file
/// `std::pmr` memory resources: whole pages with a placement, and a pooled small-object resource per
/// node.

#include "detail/config.hpp"
#include "detail/fork.hpp"
#include "detail/routing.hpp"
#include "memory.hpp"
#include "placement.hpp"
#include "topology.hpp"

#include <cerrno>
#include <cstddef>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <string>
#include <vector>


namespace numaplace {

/// Hands out whole pages placed by `Placement`. Every allocation is its own mapping (0 bytes: one
/// page, as a memory resource must serve it), aligned to any power of two: use it for large blocks,
/// or as the upstream of a pool. \throws placement_error (a std::bad_alloc) from `allocate`.
template <class Placement>
class page_resource : public std::pmr::memory_resource {
public:
    /// \effects a resource that places every allocation by `placement`.
    explicit page_resource(Placement placement) : placement_(std::move(placement)) {}
    /// \returns the placement.
    const Placement& placement() const noexcept { return placement_; }

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        return memory::allocate(bytes, placement_, alignment);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t) override { memory::unmap(p, bytes); }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        auto* o = dynamic_cast<const page_resource*>(&other);
        return o && o->placement_ == placement_;
    }
    Placement placement_;
};

/// The pooled resource of one node: blocks up to 1 MiB (at alignments up to their size) come from the
/// node's heap (size classes, per-thread caches: detail/heap/), larger ones are their own
/// node-bound mapping. Binding is degrading: if the kernel refuses it, memory comes from anywhere and
/// `degradations()` says so. Requests beyond the node's free memory throw `placement_error` (ENOMEM);
/// an alignment that is not a power of two, `placement_error` (EINVAL).
class node_pool_resource : public std::pmr::memory_resource {
public:
    /// \effects a pool of small objects on `node` (bound; degrading: falls back to first touch, recorded).
    explicit node_pool_resource(int node) : pages_(node, node_policy::bind, fallback::degrade) {}
    /// \returns the node.
    int node() const noexcept { return pages_.node(); }

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        if (!detail::is_power_of_two(alignment)) // as page_resource: a block aligned to 16 is not to 3
            detail::throw_placement(node(), bytes, EINVAL, "node_pool: alignment " + std::to_string(alignment) +
                                                               " is not a power of two");
        return detail::routed_allocate(pages_, bytes, alignment);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
        detail::routed_deallocate(pages_, p, bytes, alignment);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        auto* o = dynamic_cast<const node_pool_resource*>(&other);
        return o && o->node() == node();
    }
    on_node pages_; // bound (degrading) to the node
};

namespace detail {
/// The node pools, one per node, made together on first use and never destroyed (containers with
/// static storage may release memory into them during static destruction); fork hook: stage node_pools.
inline lazy_global<node_pool_resource*>& node_pools_cell() noexcept {
    static lazy_global<node_pool_resource*> cell; // constant-initialised: no guard
    return cell;
}
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration node_pools_fork NUMAPLACE_EARLY_INIT{
    fork_stage::node_pools, lazy_global_hooks<node_pool_resource*, &node_pools_cell>::hook()};
#endif
} // namespace detail

/// \returns the pooled small-object resource of `node` (thread-safe, never destroyed). Use it for
/// `std::pmr` containers: `std::pmr::map<int, int> m(&numaplace::node_pool(1));`
/// \throws unknown_node.
inline node_pool_resource& node_pool(int node) {
    node_pool_resource** all = &detail::node_pools_cell().get([] {
        const std::size_t n = topology::get().size();
        auto** v = new node_pool_resource*[n];
        for (std::size_t i = 0; i < n; ++i) v[i] = new node_pool_resource(static_cast<int>(i));
        return v;
    });
    topology::get().check(node);
    return *all[static_cast<std::size_t>(node)];
}

} // namespace numaplace

#endif
