#ifndef NUMAPLACE_DETAIL_NODE_OBSERVER_HPP_INCLUDED
#define NUMAPLACE_DETAIL_NODE_OBSERVER_HPP_INCLUDED

/// \file
/// The observer of one node's arena: checks, and where needed pins, every thread entering it
/// (docs/parallel_for.md, "Pinning").

#include "../diagnostics.hpp"
#include "hwloc.hpp"

#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace numaplace {
namespace detail {

/// Watches every thread entering one node's arena: checks its CPU affinity lies within the node's CPUs
/// and pins it through hwloc when it does not (always, when `pin`); restores a re-bound thread's
/// binding when it leaves. A thread still off the node is counted and, the first time, recorded in
/// `degradations()`. \notes the hooks never throw.
class node_observer : public tbb::task_scheduler_observer {
public:
    node_observer(tbb::task_arena& arena, int node, hwloc_topology_t topo, hwloc_const_cpuset_t cpus, bool pin)
        : tbb::task_scheduler_observer(arena), node_(node), topo_(topo), cpus_(hwloc_bitmap_dup(cpus)), pin_{pin} {
        if (!cpus_) throw std::bad_alloc();
        observe(true);
    }
    ~node_observer() override { observe(false); }
    node_observer(const node_observer&) = delete;
    node_observer& operator=(const node_observer&) = delete;

    void on_scheduler_entry(bool) override {
        entries_.fetch_add(1, std::memory_order_relaxed);
        frame f;
        int error = 0;
        const bool pin = pin_.load(std::memory_order_relaxed);
        if (pin || !within(error)) {
            if (!pin) fallbacks_.fetch_add(1, std::memory_order_relaxed);
            f.saved.reset(hwloc_bitmap_alloc());
            if (f.saved && hwloc_get_cpubind(topo_, f.saved.get(), HWLOC_CPUBIND_THREAD) != 0) f.saved.reset();
            if (hwloc_set_cpubind(topo_, cpus_.get(), HWLOC_CPUBIND_THREAD) != 0) error = errno;
            else f.rebound = true;
        }
        if (!within(error)) unpinned(error);
        try {
            frames().push_back(std::move(f));
        } catch (...) { // no memory for the frame: the previous binding is not restored at exit
        }
    }
    void on_scheduler_exit(bool) override {
        auto& stack = frames();
        if (stack.empty()) return;
        frame& f = stack.back();
        if (f.rebound && f.saved) hwloc_set_cpubind(topo_, f.saved.get(), HWLOC_CPUBIND_THREAD);
        stack.pop_back();
    }
    /// \returns how many thread entries were seen, and how many of them ran off the node's CPUs.
    std::size_t entries() const noexcept { return entries_.load(std::memory_order_relaxed); }
    std::size_t unpinned_entries() const noexcept { return unpinned_.load(std::memory_order_relaxed); }
    /// \returns how many entering threads were not within the node's CPUs until this observer pinned them.
    std::size_t fallbacks() const noexcept { return fallbacks_.load(std::memory_order_relaxed); }
    /// \effects from now on, pins every entering thread (not only those found off the node).
    void pin_always() noexcept { pin_.store(true, std::memory_order_relaxed); }
    /// \returns the errno of the last failed binding (0: none failed or unknown).
    int last_errno() const noexcept { return errno_.load(std::memory_order_relaxed); }

private:
    struct frame {
        hwloc_bitmap_ptr saved;
        bool rebound = false;
    };
    // Entries and exits nest (a thread may enter another arena from inside one): a stack per thread.
    static std::vector<frame>& frames() {
        static thread_local std::vector<frame> stack;
        return stack;
    }
    bool within(int& error) const noexcept {
        hwloc_bitmap_ptr now(hwloc_bitmap_alloc());
        if (!now) return false;
        if (hwloc_get_cpubind(topo_, now.get(), HWLOC_CPUBIND_THREAD) != 0) {
            error = errno;
            return false; // not verifiable: counts as not pinned
        }
        return hwloc_bitmap_isincluded(now.get(), cpus_.get()) != 0;
    }
    void unpinned(int error) noexcept {
        unpinned_.fetch_add(1, std::memory_order_relaxed);
        if (error != 0) errno_.store(error, std::memory_order_relaxed);
        if (reported_.exchange(true)) return;
        try {
            degradation_log::instance().record("parallel_for: a thread entered node " + std::to_string(node_) +
                                               "'s arena outside that node's CPUs and could not be pinned (errno " +
                                               std::to_string(error) + "); its blocks may run on other nodes");
        } catch (...) { // no memory for the message: the count above still says it
        }
    }

    int node_;
    hwloc_topology_t topo_;
    hwloc_bitmap_ptr cpus_;
    std::atomic<bool> pin_;
    std::atomic<std::size_t> entries_{0}, unpinned_{0}, fallbacks_{0};
    std::atomic<int> errno_{0};
    std::atomic<bool> reported_{false};
};

} // namespace detail
} // namespace numaplace

#endif
