#ifndef NUMAPLACE_PMR_HPP_INCLUDED
#define NUMAPLACE_PMR_HPP_INCLUDED

/// \file
/// `std::pmr` memory resources: whole pages with a placement, and a pooled small-object resource per
/// node.

#include "detail/small_pool.hpp"
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
        return memory::allocate(bytes, placement_, alignment);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t) override { memory::unmap(p, bytes); }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        auto* o = dynamic_cast<const page_resource*>(&other);
        return o && o->placement_ == placement_;
    }
    Placement placement_;
};

/// The small-object resource of one node: blocks below 4 KiB come from the node's heap (size classes,
/// per-thread caches: detail/small_pool.hpp), larger ones are their own node-bound mapping. Binding is
/// degrading: if the kernel refuses it, memory comes from anywhere and `degradations()` says so.
class node_pool_resource : public std::pmr::memory_resource {
public:
    explicit node_pool_resource(int node) : pages_(node, node_policy::bind, fallback::degrade) {}
    int node() const noexcept { return pages_.node(); }

private:
    static bool small(std::size_t bytes, std::size_t alignment) noexcept {
        return detail::small_request_size(bytes, alignment) <= detail::small_limit;
    }
    void* do_allocate(std::size_t bytes, std::size_t alignment) override {
        if (small(bytes, alignment)) return detail::small_allocate(node(), bytes, alignment);
        return memory::allocate(bytes, pages_, alignment);
    }
    void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) override {
        if (small(bytes, alignment)) detail::small_deallocate(node(), p, bytes, alignment);
        else memory::unmap(p, bytes);
    }
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override {
        auto* o = dynamic_cast<const node_pool_resource*>(&other);
        return o && o->node() == node();
    }
    on_node pages_; // blocks of 4 KiB or more: their own mapping, bound (degrading) to the node
};

/// \returns the pooled small-object resource of `node` (thread-safe, never destroyed). Use it for
/// `std::pmr` containers: `std::pmr::map<int, int> m(&numaplace::node_pool(1));`
/// \throws unknown_node.
inline node_pool_resource& node_pool(int node) { return detail::per_node<node_pool_resource>(node); }

} // namespace numaplace

#endif
