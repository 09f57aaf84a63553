#ifndef NUMAPLACE_PARALLEL_FOR_HPP_INCLUDED
#define NUMAPLACE_PARALLEL_FOR_HPP_INCLUDED

/// \file
/// NUMA-aware loops on oneTBB: one `tbb::task_arena` per node with CPUs, constrained to that node's
/// cores; `parallel_for(partition<T>, body)` runs block k in arena k, where `partitioned_allocator<T>` put
/// block k's pages (indexes are the partition's units: rows of a rows partition); `parallel_for(container,
/// body)`, `partition_of(container)` and `first_touch(container)` cover the container's elements. The only
/// header that includes oneTBB.

#include "allocator.hpp"
#include "detail/hwloc.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "topology.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>
#include <oneapi/tbb/task_scheduler_observer.h>
#include <oneapi/tbb/version.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <link.h>

// ThreadSanitizer: oneTBB hands a task to another thread inside libtbb.so, which is not instrumented, so
// TSan cannot see that everything the spawning thread wrote happens before the task runs (and that the
// task's writes happen before wait() returns). These annotations state exactly that guarantee of oneTBB
// at our spawn and join points, so TSan still checks every access of numaplace and of loop bodies.
#if defined(__SANITIZE_THREAD__)
#define NUMAPLACE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NUMAPLACE_TSAN 1
#endif
#endif
#ifdef NUMAPLACE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace numaplace { namespace detail {
// One address for every handover: a task must acquire before it reads anything, its own closure included.
inline char handover_token;
}}
#define NUMAPLACE_HANDOVER_RELEASE() __tsan_release(static_cast<void*>(&::numaplace::detail::handover_token))
#define NUMAPLACE_HANDOVER_ACQUIRE() __tsan_acquire(static_cast<void*>(&::numaplace::detail::handover_token))
#else
#define NUMAPLACE_HANDOVER_RELEASE() ((void)0)
#define NUMAPLACE_HANDOVER_ACQUIRE() ((void)0)
#endif

namespace numaplace {

/// The contiguous index range [begin, end) handed to a loop body, and the node it runs on.
class subrange {
public:
    subrange(std::size_t b, std::size_t e, int node) noexcept : begin_(b), end_(e), node_(node) {}
    std::size_t begin() const noexcept { return begin_; }
    std::size_t end() const noexcept { return end_; }
    std::size_t size() const noexcept { return end_ - begin_; }
    bool empty() const noexcept { return begin_ == end_; }
    /// \returns the node whose block this is (and on whose cores it runs).
    int node() const noexcept { return node_; }

private:
    std::size_t begin_, end_;
    int node_;
};

/// How threads entering a node's arena are kept on that node.
enum class pinning {
    single_node, ///< one node with CPUs: plain oneTBB, nothing to pin, no extra cost
    tbbbind,     ///< oneTBB's own `constraints{numa_id}` (libtbbbind loaded and agrees with our ids)
    hwloc,       ///< tbbbind unavailable: a task_scheduler_observer pins entering threads through hwloc
    none         ///< neither works (CPU binding refused): blocks run unpinned, recorded as a degradation
};

inline const char* name(pinning p) noexcept {
    switch (p) {
    case pinning::single_node: return "single node (plain oneTBB)";
    case pinning::tbbbind: return "oneTBB constraints (tbbbind)";
    case pinning::hwloc: return "hwloc observer (tbbbind unavailable)";
    case pinning::none: return "NONE (cpu binding refused; blocks run unpinned)";
    }
    return "?";
}

/// What oneTBB sees, and how numaplace pins arenas.
struct arena_report {
    bool tbbbind_loaded = false;        ///< libtbbbind is in the process
    std::vector<int> tbb_numa_nodes;    ///< `tbb::info::numa_nodes()` ({-1}: TBB sees no NUMA)
    numaplace::pinning pinning = pinning::single_node;
    std::string reason;                 ///< why this pinning was chosen
    int tbb_interface_version = TBB_INTERFACE_VERSION;
};

namespace detail {

inline bool library_loaded(const char* fragment) {
    struct search {
        const char* fragment;
        bool found;
    } s{fragment, false};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
            auto* st = static_cast<search*>(data);
            if (info->dlpi_name && std::strstr(info->dlpi_name, st->fragment)) st->found = true;
            return st->found ? 1 : 0;
        },
        &s);
    return s.found;
}

// Which of our arenas (node id) the current thread is running a block of; -1 outside.
inline int& current_block_node() noexcept {
    static thread_local int node = -1;
    return node;
}

struct scoped_block_node {
    int saved;
    explicit scoped_block_node(int node) noexcept : saved(current_block_node()) { current_block_node() = node; }
    ~scoped_block_node() { current_block_node() = saved; }
    scoped_block_node(const scoped_block_node&) = delete;
    scoped_block_node& operator=(const scoped_block_node&) = delete;
};

// Pins every thread that enters the observed arena to one node's CPUs, restoring its previous
// binding when it leaves. Used when oneTBB cannot pin (no tbbbind).
class hwloc_pinning_observer : public tbb::task_scheduler_observer {
public:
    hwloc_pinning_observer(tbb::task_arena& arena, hwloc_topology_t topo, hwloc_const_cpuset_t cpus)
        : tbb::task_scheduler_observer(arena), topo_(topo), cpus_(hwloc_bitmap_dup(cpus)) {
        observe(true);
    }
    ~hwloc_pinning_observer() override { observe(false); }
    void on_scheduler_entry(bool) override {
        auto& saved = saved_binding();
        if (!saved) saved.reset(hwloc_bitmap_alloc());
        if (hwloc_get_cpubind(topo_, saved.get(), HWLOC_CPUBIND_THREAD) != 0) hwloc_bitmap_fill(saved.get());
        if (hwloc_set_cpubind(topo_, cpus_.get(), HWLOC_CPUBIND_THREAD) != 0) failures_.fetch_add(1, std::memory_order_relaxed);
    }
    void on_scheduler_exit(bool) override {
        auto& saved = saved_binding();
        if (saved) hwloc_set_cpubind(topo_, saved.get(), HWLOC_CPUBIND_THREAD);
    }
    std::size_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

private:
    static hwloc_bitmap_ptr& saved_binding() {
        static thread_local hwloc_bitmap_ptr saved;
        return saved;
    }
    hwloc_topology_t topo_;
    hwloc_bitmap_ptr cpus_;
    std::atomic<std::size_t> failures_{0};
};

} // namespace detail

/// The per-node arenas, created once on first use and reused by every loop.
class node_arenas {
public:
    /// \returns the process's arenas (thread-safe creation).
    static node_arenas& get() {
        static node_arenas instance;
        return instance;
    }
    node_arenas(const node_arenas&) = delete;
    node_arenas& operator=(const node_arenas&) = delete;

    const arena_report& report() const noexcept { return report_; }
    /// \returns the arena that runs blocks of `node` (memory-only nodes: the nearest node with CPUs);
    /// nullptr on a single-node machine (blocks run in the caller's arena).
    tbb::task_arena* arena_for(int node) const {
        if (report_.pinning == pinning::single_node) return nullptr;
        topology::get().check(node);
        return arenas_[static_cast<std::size_t>(runner_[static_cast<std::size_t>(node)])].get();
    }

private:
    node_arenas() {
        const topology& topo = topology::get();
        const node_set cpu_nodes = topo.with_cpus();
        // Memory-only nodes have no arena: their blocks run on the nearest node with CPUs.
        for (const auto& n : topo.nodes()) {
            int best = cpu_nodes.empty() ? 0 : cpu_nodes[0];
            for (int c : cpu_nodes)
                if (topo.distance(n.id, c) < topo.distance(n.id, best)) best = c;
            runner_.push_back(n.has_cpus() ? n.id : best);
        }
        report_.tbb_numa_nodes.clear();
        for (auto id : tbb::info::numa_nodes()) report_.tbb_numa_nodes.push_back(id);
        report_.tbbbind_loaded = detail::library_loaded("libtbbbind");
        if (cpu_nodes.size() <= 1) {
            report_.pinning = pinning::single_node;
            report_.reason = "one node with CPUs";
            return;
        }
        // Use oneTBB's constraints only if its numa ids are ours: every CPU node k listed, with as many
        // threads as node k has CPUs (tbbbind loads the topology the same way, but a process bound with
        // taskset restricts tbbbind further than the cgroup restricts us).
        bool agrees = report_.tbbbind_loaded;
        for (int k : cpu_nodes) {
            bool listed = false;
            for (int id : report_.tbb_numa_nodes) listed = listed || id == k;
            agrees = agrees && listed &&
                     tbb::info::default_concurrency(k) ==
                         static_cast<int>(topo.at(k).cpus.size());
        }
        const auto& caps = topo.capabilities();
        if (agrees) {
            report_.pinning = pinning::tbbbind;
            report_.reason = "tbbbind loaded; its numa ids match numaplace's";
        } else if (caps.cpu_binding) {
            report_.pinning = pinning::hwloc;
            report_.reason = report_.tbbbind_loaded ? "tbbbind's numa ids disagree with the topology"
                                                    : "libtbbbind not loaded: oneTBB sees no NUMA nodes";
        } else {
            report_.pinning = pinning::none;
            report_.reason = "tbbbind unavailable and cpu binding refused (errno " +
                             std::to_string(caps.cpu_binding_errno) + ")";
            detail::degradation_log::instance().record("parallel_for: " + report_.reason + "; blocks run unpinned");
        }
        std::size_t total = 0;
        arenas_.resize(topo.size());
#if TBB_INTERFACE_VERSION >= 12180
        // oneTBB's own helper where it exists: one arena per tbb::info::numa_nodes() entry, in that
        // order, all slots for workers. (Debian 12 ships 2021.8, interface 12080: the branch below is the
        // one tested here.)
        std::vector<tbb::task_arena> from_tbb;
        if (report_.pinning == pinning::tbbbind) {
            from_tbb = tbb::create_numa_task_arenas();
            report_.reason += "; arenas from tbb::create_numa_task_arenas";
        }
#endif
        for (int k : cpu_nodes) {
            const int threads = static_cast<int>(topo.at(k).cpus.size());
            total += static_cast<std::size_t>(threads);
            // reserved_for_masters = 0: all of the node's cores are worker slots (with the default 1, a
            // slot is kept for a caller that never comes, leaving a core idle: oneTBB issue #773).
            if (report_.pinning == pinning::tbbbind) {
#if TBB_INTERFACE_VERSION >= 12180
                for (std::size_t i = 0; i < from_tbb.size() && i < report_.tbb_numa_nodes.size(); ++i)
                    if (report_.tbb_numa_nodes[i] == k)
                        arenas_[static_cast<std::size_t>(k)] = std::make_unique<tbb::task_arena>(from_tbb[i]);
                if (!arenas_[static_cast<std::size_t>(k)])
#endif
                {
                    tbb::task_arena::constraints c; // no (id, concurrency) constructor in C++20 mode
                    c.set_numa_id(k).set_max_concurrency(threads);
                    arenas_[static_cast<std::size_t>(k)] = std::make_unique<tbb::task_arena>(c, 0u);
                }
            } else {
                arenas_[static_cast<std::size_t>(k)] = std::make_unique<tbb::task_arena>(threads, 0u);
            }
            arenas_[static_cast<std::size_t>(k)]->initialize();
            if (report_.pinning == pinning::hwloc)
                observers_.push_back(std::make_unique<detail::hwloc_pinning_observer>(
                    *arenas_[static_cast<std::size_t>(k)], topo.native(), topo.native_node(k)->cpuset));
        }
        // oneTBB's worker pool defaults to (CPUs - 1) workers; every arena slot is a worker slot here,
        // so allow one worker per CPU (plus the caller). A lower user limit still wins.
        limit_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, total + 1);
    }
    ~node_arenas() {
        observers_.clear(); // stop observing before the arenas go
        arenas_.clear();
    }

    arena_report report_;
    std::vector<int> runner_;
    std::vector<std::unique_ptr<tbb::task_arena>> arenas_;
    std::vector<std::unique_ptr<detail::hwloc_pinning_observer>> observers_;
    std::unique_ptr<tbb::global_control> limit_;
};

/// \returns what oneTBB sees and how arenas are pinned (creates the arenas on first call).
inline const arena_report& arena_capabilities() { return node_arenas::get().report(); }

namespace detail {

template <class Body>
void call_body(Body& body, std::size_t b, std::size_t e, int node) {
    if constexpr (std::is_invocable<Body&, subrange>::value) {
        body(subrange(b, e, node));
    } else {
        static_assert(std::is_invocable<Body&, std::size_t>::value,
                      "parallel_for body must be callable with numaplace::subrange or std::size_t");
        for (std::size_t i = b; i < e; ++i) body(i);
    }
}

// Runs fn(block) for every non-empty block of `part`, block k inside the arena of its node, all blocks
// concurrently; returns when all are done. The first exception cancels the other blocks and is rethrown.
template <class Fn>
void run_blocks(const basic_partition& part, Fn&& fn) {
    const auto& blocks = part.blocks();
    node_arenas& arenas = node_arenas::get();
    const bool nested = current_block_node() >= 0;
    if (nested || arenas.report().pinning == pinning::single_node) {
        // One node, or nested inside a block: stay in the current arena (on the current node) and let
        // oneTBB balance over all blocks at once. A single block (always, on one node) runs directly:
        // no task group, so a one-node machine pays nothing over plain oneTBB.
        const block* only = nullptr;
        std::size_t non_empty = 0;
        for (const auto& b : blocks)
            if (!b.empty()) {
                only = &b;
                ++non_empty;
            }
        if (non_empty == 0) return;
        if (non_empty == 1) {
            fn(*only);
            return;
        }
        tbb::task_group group;
        std::exception_ptr error;
        std::atomic<bool> failed{false};
        // Another thread of this arena may run a task: it must know it is inside the outer block.
        const int outer = current_block_node();
        NUMAPLACE_HANDOVER_RELEASE();
        for (const auto& b : blocks) {
            if (b.empty()) continue;
            group.run([&fn, &b, &group, &error, &failed, outer] {
                NUMAPLACE_HANDOVER_ACQUIRE();
                scoped_block_node mark(outer);
                try {
                    fn(b);
                } catch (...) {
                    if (!failed.exchange(true)) error = std::current_exception();
                    group.cancel();
                }
                NUMAPLACE_HANDOVER_RELEASE();
            });
        }
        group.wait();
        NUMAPLACE_HANDOVER_ACQUIRE();
        if (error) std::rethrow_exception(error);
        return;
    }
    const std::size_t count = blocks.size();
    std::vector<std::unique_ptr<tbb::task_group>> groups(count);
    std::vector<tbb::task_arena*> where(count, nullptr);
    std::exception_ptr error;
    std::atomic<bool> failed{false};
    auto cancel_all = [&groups] {
        for (auto& g : groups)
            if (g) g->cancel();
    };
    for (std::size_t k = 0; k < count; ++k) {
        if (blocks[k].empty()) continue;
        groups[k] = std::make_unique<tbb::task_group>();
        where[k] = arenas.arena_for(blocks[k].node);
    }
    NUMAPLACE_HANDOVER_RELEASE();
    for (std::size_t k = 0; k < count; ++k) {
        if (!groups[k]) continue;
        tbb::task_group* g = groups[k].get();
        const block* b = &blocks[k];
        where[k]->execute([&, g, b] {
            g->run([&, b] {
                NUMAPLACE_HANDOVER_ACQUIRE();
                try {
                    fn(*b);
                } catch (...) {
                    if (!failed.exchange(true)) error = std::current_exception();
                    cancel_all();
                }
                NUMAPLACE_HANDOVER_RELEASE();
            });
        });
    }
    for (std::size_t k = 0; k < count; ++k)
        if (groups[k]) where[k]->execute([&, k] { groups[k]->wait(); });
    NUMAPLACE_HANDOVER_ACQUIRE();
    if (error) std::rethrow_exception(error);
}

} // namespace detail

/// \effects calls `body` on contiguous subranges covering the indexes [0, part.size()) exactly once
/// (units: rows of a rows partition, elements otherwise; `part.elements()` for element indexes): block
/// k's indexes run in node k's arena, on node k's cores, all blocks at once; oneTBB balances load inside
/// a block (`grain` is the smallest subrange it makes). `body` takes a `subrange` (which also tells the
/// node) or a single `std::size_t` index. Returns when every block is done.
/// A nested call from inside a body stays in the current node's arena. Calling from a oneTBB task is
/// fine (the caller waits in each arena in turn or is delegated; it never holds a slot others need).
/// \throws the first exception a body throws (the other blocks are cancelled).
template <class T, class Body>
void parallel_for(const partition<T>& part, Body&& body, std::size_t grain = 1) {
    detail::run_blocks(part.untyped(), [&body, grain](const block& b) {
        const int node = detail::current_block_node() >= 0 ? detail::current_block_node() : b.node;
        NUMAPLACE_HANDOVER_RELEASE();
        tbb::parallel_for(tbb::blocked_range<std::size_t>(b.begin, b.end, grain),
                          [&body, node](const tbb::blocked_range<std::size_t>& r) {
                              NUMAPLACE_HANDOVER_ACQUIRE();
                              detail::scoped_block_node mark(node);
                              detail::call_body(body, r.begin(), r.end(), node);
                              NUMAPLACE_HANDOVER_RELEASE();
                          });
        NUMAPLACE_HANDOVER_ACQUIRE();
    });
}

namespace detail {
// A container whose allocator is partitioned (partitioned_allocator or default_init_allocator of one).
template <class Container>
using partitioned_container_t =
    decltype(std::declval<const Container&>().get_allocator().placement().partition_for(0),
             std::declval<const Container&>().capacity(), std::declval<const Container&>().data(), void());
} // namespace detail

/// \returns the partition a container's pages were placed by, over its ELEMENTS: the split of its
/// capacity (in whole units of the allocator's partition: rows for a rows partition), as element
/// indexes, clipped to its size. `partitioned_allocator<T>` or `default_init_allocator` of one.
template <class Container, class = detail::partitioned_container_t<Container>>
partition<typename Container::value_type> partition_of(const Container& c) {
    using T = typename Container::value_type;
    const auto allocator = c.get_allocator(); // by value: placement() refers into it
    const std::size_t bytes = c.capacity() * sizeof(T); // the layout replace() gave the buffer, if any:
    const basic_partition split = detail::placed_split(c.data(), bytes, allocator.placement().partition_for(bytes));
    return partition<T>::from_untyped(split.elements().clipped(c.size()));
}

/// \effects `parallel_for(partition_of(c), body)`: visits the container's elements [0, c.size()) exactly
/// once, block k (its rows × row length for a rows partition, clipped) on node k, where its pages are.
template <class Container, class Body, class = detail::partitioned_container_t<Container>>
void parallel_for(Container& c, Body&& body, std::size_t grain = 1) {
    parallel_for(partition_of(c), std::forward<Body>(body), grain);
}

/// \returns `combine` over all blocks (in block order) of `body(subrange, R init) -> R` reduced by
/// oneTBB inside each block, starting from `identity`. Block k runs on node k as in `parallel_for`,
/// over the same indexes. Exact for integers; for floating point the order inside a block is oneTBB's.
template <class T, class R, class Body, class Combine>
R parallel_reduce(const partition<T>& part, const R& identity, Body&& body, Combine&& combine, std::size_t grain = 1) {
    std::vector<R> partial(part.block_count(), identity);
    const node_set& nodes = part.nodes();
    detail::run_blocks(part.untyped(), [&](const block& b) {
        const int node = detail::current_block_node() >= 0 ? detail::current_block_node() : b.node;
        const auto k = static_cast<std::size_t>(std::lower_bound(nodes.begin(), nodes.end(), b.node) - nodes.begin());
        NUMAPLACE_HANDOVER_RELEASE();
        partial[k] = tbb::parallel_reduce(
            tbb::blocked_range<std::size_t>(b.begin, b.end, grain), identity,
            [&body, node](const tbb::blocked_range<std::size_t>& r, R acc) {
                NUMAPLACE_HANDOVER_ACQUIRE();
                detail::scoped_block_node mark(node);
                R result = body(subrange(r.begin(), r.end(), node), std::move(acc));
                NUMAPLACE_HANDOVER_RELEASE();
                return result;
            },
            [&combine](R x, R y) {
                NUMAPLACE_HANDOVER_ACQUIRE();
                R result = combine(std::move(x), std::move(y));
                NUMAPLACE_HANDOVER_RELEASE();
                return result;
            });
        NUMAPLACE_HANDOVER_ACQUIRE();
    });
    R result = identity;
    for (auto& p : partial) result = combine(std::move(result), std::move(p));
    return result;
}

/// \effects faults in every page of block k of the `part.element_count()` elements at `data` (all rows
/// × row length of a rows partition) from node k's arena, without changing their contents. THP is set
/// first as `part.huge_pages()` says (off when the edges are small-page aligned and THP is on; requested
/// when they are huge-page aligned and THP is `madvise`). `data` must start on an `alignment()` boundary
/// (numaplace allocations do). Not needed after a parallel initialisation by `parallel_for` over the
/// same partition or container: whatever first writes a page places it, and that write ran on node k.
template <class T>
void first_touch(T* data, const partition<T>& part) {
    const partition<T> e = part.elements();
    const std::size_t s = sizeof(T);
    if (e.size() == 0) return;
    detail::advise_huge_pages(data, e.size() * s, e.huge_pages());
    parallel_for(e, [data](subrange r) { memory::touch(reinterpret_cast<char*>(data + r.begin()), r.size() * sizeof(T)); },
                 std::max<std::size_t>(1, detail::page_size() / s));
}

/// \effects `first_touch(c.data(), partition_of(c))`.
template <class Container, class = detail::partitioned_container_t<Container>>
void first_touch(Container& c) {
    first_touch(c.data(), partition_of(c));
}

} // namespace numaplace

#endif
