#ifndef NUMAPLACE_PMR_HPP_INCLUDED
#define NUMAPLACE_PMR_HPP_INCLUDED

/// \file
/// `std::pmr` memory resources: whole pages with a placement, and a pooled small-object resource per
/// node (a `std::pmr::synchronized_pool_resource` over that node's page resource).

#include "memory.hpp"
#include "placement.hpp"
#include "topology.hpp"

#include <cstddef>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <vector>

namespace numaplace {

/// Hands out whole pages placed by `Placement`. Every allocation is its own mapping: use it for large
/// blocks, or as the upstream of a pool (as `node_pool` does).
template <class Placement>
class page_resource : public std::pmr::memory_resource {
public:
    explicit page_resource(Placement placement) : placement_(std::move(placement)) {}
    const Placement& placement() const noexcept { return placement_; }

private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        const std::size_t align = std::max(alignment, placement_.alignment(bytes));
        void* p = memory::map(bytes, align);
        try {
            placement_.apply(p, bytes);
        } catch (...) {
            memory::unmap(p, bytes);
            throw;
        }
        return p;
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t) override { memory::unmap(p, bytes); }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        auto* o = dynamic_cast<const page_resource*>(&other);
        return o && o->placement_ == placement_;
    }
    Placement placement_;
};

namespace detail {
// One pool per node, created on first use and never destroyed (containers with static storage may
// release memory into them during static destruction).
struct node_pools {
    std::mutex mutex;
    std::vector<std::pmr::memory_resource*> pools; // indexed by node id

    static node_pools& instance() {
        static node_pools* p = new node_pools;
        return *p;
    }
    std::pmr::memory_resource& get(int node) {
        const auto& topo = topology::get();
        topo.check(node);
        std::lock_guard<std::mutex> lock(mutex);
        if (pools.empty()) pools.assign(topo.size(), nullptr);
        auto& slot = pools[static_cast<std::size_t>(node)];
        if (!slot) {
            // Upstream binds each chunk to the node; degrading because strictness is decided by the
            // allocator before it reaches the pool (see allocator.hpp).
            auto* upstream = new page_resource<on_node>(on_node(node, node_policy::bind, fallback::degrade));
            std::pmr::pool_options options;
            options.largest_required_pool_block = page_size();
            options.max_blocks_per_chunk = 4096;
            slot = new std::pmr::synchronized_pool_resource(options, upstream);
        }
        return *slot;
    }
};
} // namespace detail

/// \returns the pooled small-object resource of `node` (thread-safe, never destroyed): pages come from
/// `node` in chunks, blocks up to a page are pooled. Use it for `std::pmr` containers:
/// `std::pmr::map<int, int> m(&numaplace::node_pool(1));`
/// \throws unknown_node.
inline std::pmr::memory_resource& node_pool(int node) { return detail::node_pools::instance().get(node); }

} // namespace numaplace

#endif
