#ifndef NUMAPLACE_DETAIL_HEAP_REGISTRY_HPP_INCLUDED
#define NUMAPLACE_DETAIL_HEAP_REGISTRY_HPP_INCLUDED

/// \file
/// Every node's heaps (one per node and source), made on first use and never destroyed, and their fork
/// hooks: stage `heap_registry` holds the making lock, stage `heaps` closes every heap's gate.

#include "../config.hpp"
#include "../../diagnostics.hpp"
#include "../../topology.hpp"
#include "../fork.hpp"
#include "../linux.hpp"
#include "../moved_ranges.hpp"
#include "node_heap.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <sched.h>

namespace numaplace {
namespace detail {

/// The process's heaps, `heap_sources` per node, indexed by heap_index. Never destroyed: containers
/// with static storage may free into them during static destruction.
class heap_registry {
public:
    /// \returns the heaps, made with the topology on first use. \throws what topology::get throws, std::bad_alloc.
    static heap_registry& instance() {
        return cell().get([] { return new heap_registry(topology::get().size()); });
    }
    /// \returns the heap of index `index` (< size()).
    node_heap& at(std::size_t index) noexcept { return *heaps_[index]; }
    /// \returns the number of heaps.
    std::size_t size() const noexcept { return count_; }
    /// \returns the span heaps each heap may be split into (node_heap): NUMAPLACE_HEAP_SHARDS when it is
    /// set and valid, else heap_shards_max (the count in force is then chosen: shards_for).
    std::size_t shards() const noexcept { return shards_; }
    /// \returns whether NUMAPLACE_HEAP_SHARDS fixed the shard count (else the heaps choose it).
    bool forced() const noexcept { return forced_; }
    /// \returns the CPUs this process could run on when the heaps were made (its affinity; at least 1).
    std::size_t cpus() const noexcept { return cpus_; }
    /// \returns the shards new span blocks come from while `live_caches` thread caches live: the forced
    /// count; else, while caches outnumber the CPUs, one more shard for each cache beyond the CPUs, up to
    /// shards() (threads that share a shard then wait on each other's locks and lines: docs/heap.md,
    /// "Shards chosen"); 1 otherwise.
    std::size_t shards_for(std::size_t live_caches) const noexcept { return shards_for(live_caches, cpus_, shards_, forced_); }
    /// \returns the same for `cpus` CPUs (0 counts as 1) and a limit of `limit` shards, forced or not.
    static std::size_t shards_for(std::size_t live_caches, std::size_t cpus, std::size_t limit, bool forced) noexcept {
        if (forced) return limit;
        if (cpus == 0) cpus = 1;
        if (live_caches <= cpus) return 1;
        const std::size_t n = live_caches - cpus + 1; // no overflow: live_caches > cpus >= 1
        return n < limit ? n : limit;
    }

    /// \returns the shards that `value` (NUMAPLACE_HEAP_SHARDS; null: unset) asks for: a whole number
    /// from 1 to heap_shards_max, digits only; else 1, and `refusal` says why (empty when unset or valid;
    /// a refused value leaves the count to the heaps).
    static std::size_t shards_from(const char* value, std::string& refusal) {
        refusal.clear();
        if (value == nullptr) return 1;
        std::size_t n = 0;
        const char* c = value;
        for (; *c >= '0' && *c <= '9' && n <= heap_shards_max; ++c) n = n * 10 + static_cast<std::size_t>(*c - '0');
        if (c != value && *c == '\0' && n >= 1 && n <= heap_shards_max) return n;
        refusal = "NUMAPLACE_HEAP_SHARDS=" + quoted(value) + " is not a whole number from 1 to " +
                  std::to_string(heap_shards_max) + ": the heaps choose the shard count";
        return 1;
    }

    /// \effects gives the free pages of every heap back to the kernel (nothing when no heap was made):
    /// see node_heap::release_free. Never allocates.
    static void release_free() noexcept {
        if (heap_registry* r = cell().peek())
            for (std::size_t i = 0; i < r->count_; ++i) r->heaps_[i]->release_free();
    }

    /// \effects node_heap::relieve on every heap: the address-space relief of memory::try_map.
    /// \returns whether any cold spans were unmapped. Never allocates.
    static bool relieve_address_space() noexcept {
        bool any = false;
        if (heap_registry* r = cell().peek())
            for (std::size_t i = 0; i < r->count_; ++i) any = r->heaps_[i]->relieve() || any;
        return any;
    }
    /// \effects node_heap::decay_now on every heap (nothing when no heap was made). Never allocates.
    static void decay_now() noexcept {
        if (heap_registry* r = cell().peek())
            for (std::size_t i = 0; i < r->count_; ++i) r->heaps_[i]->decay_now();
    }
    /// \effects marks every heap's runs handed out that [begin, end) overlaps as moved by replace()
    /// (node_heap::mark_moved); makes nothing. \returns true when the range lies in one heap region.
    static bool mark_moved(std::uintptr_t begin, std::uintptr_t end, bool policy) noexcept {
        bool inside = false;
        if (heap_registry* r = cell().peek())
            for (std::size_t i = 0; i < r->count_; ++i) inside = r->heaps_[i]->mark_moved(begin, end, policy) || inside;
        return inside;
    }

    // Fork hooks. Stage heap_registry: no thread is making the heaps. Stage heaps: no thread is inside a
    // heap, so none holds a heap's lock. Nothing is made for a fork: without heaps there is nothing to close.
    static void close_gates() noexcept {
        if (heap_registry* r = cell().peek())
            for (std::size_t i = 0; i < r->count_; ++i) r->heaps_[i]->close();
    }
    static void reopen_gates_parent() noexcept { reopen_gates(false); }
    static void reopen_gates_child() noexcept { reopen_gates(true); }

    static lazy_global<heap_registry>& cell() noexcept {
        static lazy_global<heap_registry> c; // constant-initialised: no guard
        return c;
    }

private:
    explicit heap_registry(std::size_t nodes) : count_(nodes * heap_sources) {
        std::string refusal;
        const char* value = std::getenv("NUMAPLACE_HEAP_SHARDS");
        shards_ = shards_from(value, refusal);
        forced_ = value != nullptr && refusal.empty();
        if (!forced_) shards_ = heap_shards_max;
        if (!refusal.empty()) degradation_log::instance().record(refusal);
        cpu_set_t set;
        const int n = os_thread_affinity(set) == 0 ? CPU_COUNT(&set) : 0;
        cpus_ = n > 0 ? static_cast<std::size_t>(n) : 1;
        heaps_ = new node_heap*[count_];
        for (std::size_t i = 0; i < count_; ++i)
            heaps_[i] = new node_heap(static_cast<int>(i / heap_sources), heap_source::at(i % heap_sources), shards_,
                                      cpus_ >= 2 ? heap_run_shards_max : 1);
        address_space_reliefs[relief_heaps].store(&heap_registry::relieve_address_space, std::memory_order_release);
    }
    // The registry's making lock is held from prepare to parent/child: peek() is the same as in prepare.
    static void reopen_gates(bool child) noexcept {
        if (heap_registry* r = cell().peek())
            for (std::size_t i = r->count_; i-- > 0;) r->heaps_[i]->reopen(child);
    }

    std::size_t count_;
    std::size_t shards_ = 1;
    bool forced_ = false;
    std::size_t cpus_ = 1;
    node_heap** heaps_;
};

inline const bool heap_run_marker_registered = [] {
    heap_run_marker_hook.store(&heap_registry::mark_moved, std::memory_order_release);
    return true;
}();
#if NUMAPLACE_DEFINITIONS // separately compiled: registered by libnumaplace
inline const fork_hook_registration heap_registry_fork_hook NUMAPLACE_EARLY_INIT{
    fork_stage::heap_registry,
    lazy_global_hooks<heap_registry, &heap_registry::cell>::hook()};
inline const fork_hook_registration heap_gates_fork_hook NUMAPLACE_EARLY_INIT{
    fork_stage::heaps,
    fork_hook{&heap_registry::close_gates, &heap_registry::reopen_gates_parent, &heap_registry::reopen_gates_child}};
#endif

} // namespace detail
} // namespace numaplace

#endif
