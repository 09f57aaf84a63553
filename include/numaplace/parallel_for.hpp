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
    hwloc,       ///< tbbbind unavailable or ineffective: an observer pins entering threads through hwloc
    none         ///< pinning was tried and did not take effect: blocks run unpinned (a degradation)
};

inline const char* name(pinning p) noexcept {
    switch (p) {
    case pinning::single_node: return "single node (plain oneTBB)";
    case pinning::tbbbind: return "oneTBB constraints (tbbbind)";
    case pinning::hwloc: return "hwloc observer";
    case pinning::none: return "NONE (pinning did not take effect; blocks run unpinned)";
    }
    return "?";
}

/// What oneTBB sees, and how numaplace pins arenas. `pinning` is what was verified to hold when the
/// arenas were created, not only what was asked for: a thread entered each arena and its CPU affinity
/// was checked to lie within that node's CPUs. Every later entry is checked too
/// (`node_arenas::unpinned_entries()`); a failure is recorded in `degradations()`.
struct arena_report {
    bool tbbbind_loaded = false;        ///< libtbbbind is in the process
    std::vector<int> tbb_numa_nodes;    ///< `tbb::info::numa_nodes()` ({-1}: TBB sees no NUMA)
    numaplace::pinning pinning = pinning::single_node;
    std::string reason;                 ///< why this pinning; for `none`, what failed (node, errno)
    bool verified = false;              ///< a thread entering every arena ran within its node's CPUs
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

// The body of a task handed to another thread: acquires at entry and releases at exit (also when the
// task throws), for ThreadSanitizer (see NUMAPLACE_HANDOVER_RELEASE).
struct handover_scope {
    handover_scope() noexcept { NUMAPLACE_HANDOVER_ACQUIRE(); }
    ~handover_scope() { NUMAPLACE_HANDOVER_RELEASE(); }
    handover_scope(const handover_scope&) = delete;
    handover_scope& operator=(const handover_scope&) = delete;
};

// Watches every thread that enters one node's arena: checks that its CPU affinity lies within the
// node's CPUs (whatever pinned it: tbbbind's own observer runs first, having been registered when the
// arena was initialised), and pins it through hwloc when it does not (always first, when `pin`).
// A thread it re-bound gets its previous binding back when it leaves. A thread that still is not
// within the node's CPUs is counted and, the first time, recorded as a degradation. Never throws.
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

    /// \returns the report of the arenas' creation, with pinning `none` from the moment a thread that
    /// entered an arena later could not be pinned (e.g. a sandbox refusing sched_setaffinity after
    /// start-up).
    arena_report report() const {
        arena_report r = report_;
        if (const std::size_t lost = unpinned_entries()) {
            int error = 0;
            for (const auto& o : observers_) error = o->last_errno() ? o->last_errno() : error;
            r.pinning = pinning::none;
            r.reason += "; since then " + std::to_string(lost) +
                        " thread entries ran outside their node's CPUs and could not be pinned (errno " +
                        std::to_string(error) + ")";
        }
        return r;
    }
    /// \returns whether blocks are spread over per-node arenas (false on a one-node machine: blocks
    /// run in the caller's arena).
    bool spread() const noexcept { return !observers_.empty(); }
    /// \returns the arena that runs blocks of `node` (memory-only nodes: the nearest node with CPUs);
    /// nullptr on a single-node machine (blocks run in the caller's arena).
    tbb::task_arena* arena_for(int node) const {
        if (!spread()) return nullptr;
        topology::get().check(node);
        return arenas_[static_cast<std::size_t>(runner_[static_cast<std::size_t>(node)])].get();
    }
    /// \returns how many times, since the arenas were created, a thread entered a node's arena
    /// outside that node's CPUs and could not be pinned (0 on a one-node machine).
    std::size_t unpinned_entries() const noexcept {
        std::size_t n = 0;
        for (const auto& o : observers_) n += o->unpinned_entries();
        return n;
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
                     tbb::info::default_concurrency(tbb::numa_node_id{k}) ==
                         static_cast<int>(topo.at(k).cpus.size());
        }
        report_.pinning = agrees ? pinning::tbbbind : pinning::hwloc;
        report_.reason = agrees ? "tbbbind loaded; its numa ids match numaplace's"
                         : report_.tbbbind_loaded ? "tbbbind's numa ids disagree with the topology"
                                                  : "libtbbbind not loaded: oneTBB sees no NUMA nodes";
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
            const auto slot = static_cast<std::size_t>(k);
            const int threads = static_cast<int>(topo.at(k).cpus.size());
            total += static_cast<std::size_t>(threads);
            // reserved_for_masters = 0: all of the node's cores are worker slots (with the default 1, a
            // slot is kept for a caller that never comes, leaving a core idle: oneTBB issue #773).
            if (report_.pinning == pinning::tbbbind) {
#if TBB_INTERFACE_VERSION >= 12180
                for (std::size_t i = 0; i < from_tbb.size() && i < report_.tbb_numa_nodes.size(); ++i)
                    if (report_.tbb_numa_nodes[i] == k) arenas_[slot] = std::make_unique<tbb::task_arena>(from_tbb[i]);
                if (!arenas_[slot])
#endif
                {
                    tbb::task_arena::constraints c;
                    c.numa_id = k;
                    c.max_concurrency = threads;
                    arenas_[slot] = std::make_unique<tbb::task_arena>(c, 0u);
                }
            } else {
                arenas_[slot] = std::make_unique<tbb::task_arena>(threads, 0u);
            }
            arenas_[slot]->initialize();
            observers_.push_back(std::make_unique<detail::node_observer>(
                *arenas_[slot], k, topo.native(), topo.native_node(k)->cpuset, report_.pinning == pinning::hwloc));
        }
        verify(cpu_nodes);
        // oneTBB's worker pool defaults to (CPUs - 1) workers; every arena slot is a worker slot here,
        // so allow one worker per CPU (plus the caller). A lower user limit still wins.
        limit_ = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, total + 1);
    }
    ~node_arenas() {
        observers_.clear(); // stop observing before the arenas go
        arenas_.clear();
    }

    // Enters every arena once from this thread: its observer checks (and if needed re-pins) the thread.
    // With tbbbind, a pin that did not hold moves the report to the hwloc observer's pinning (every
    // observer then pins); if that does not hold either, to none, recorded as a degradation.
    void verify(const node_set& cpu_nodes) {
        auto probe = [&] {
            for (std::size_t i = 0; i < observers_.size(); ++i) {
                const auto before = observers_[i]->unpinned_entries();
                arenas_[static_cast<std::size_t>(cpu_nodes[i])]->execute([] {});
                if (observers_[i]->unpinned_entries() != before) return i;
            }
            return observers_.size();
        };
        const std::size_t failed = probe();
        if (failed == observers_.size()) {
            report_.verified = true;
            for (std::size_t i = 0; i < observers_.size() && report_.pinning == pinning::tbbbind; ++i) {
                if (observers_[i]->fallbacks() == 0) continue;
                report_.pinning = pinning::hwloc;
                report_.reason = "tbbbind loaded but a thread in node " + std::to_string(cpu_nodes[i]) +
                                 "'s arena was not pinned by it; the hwloc observer pins every entering thread";
                for (auto& o : observers_) o->pin_always();
                detail::degradation_log::instance().record("parallel_for: " + report_.reason);
            }
            return;
        }
        const std::string what = std::string(name(report_.pinning)) + " did not take effect: a thread in node " +
                                 std::to_string(cpu_nodes[failed]) + "'s arena ran outside its CPUs (errno " +
                                 std::to_string(observers_[failed]->last_errno()) + ")";
        report_.pinning = pinning::none;
        report_.reason = what + "; the hwloc fallback failed too; blocks run unpinned";
        detail::degradation_log::instance().record("parallel_for: " + report_.reason);
    }

    arena_report report_;
    std::vector<int> runner_;
    std::vector<std::unique_ptr<tbb::task_arena>> arenas_;
    std::vector<std::unique_ptr<detail::node_observer>> observers_;
    std::unique_ptr<tbb::global_control> limit_;
};

/// \returns what oneTBB sees and how arenas are pinned, as verified so far (creates the arenas on
/// first call).
inline arena_report arena_capabilities() { return node_arenas::get().report(); }

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

// Blocks in the current arena: one oneTBB task group, which cancels the others on the first exception
// and rethrows it from wait(). If run() throws midway, the group's destructor cancels and waits for
// what was started (in this arena, where the tasks are).
template <class Fn>
void run_blocks_here(const std::vector<block>& blocks, Fn& fn) {
    const block* only = nullptr;
    std::size_t non_empty = 0;
    for (const auto& b : blocks)
        if (!b.empty()) {
            only = &b;
            ++non_empty;
        }
    if (non_empty == 0) return;
    if (non_empty == 1) { // no task group: a one-node machine pays nothing over plain oneTBB
        fn(*only);
        return;
    }
    // Another thread of this arena may run a task: it must know it is inside the outer block.
    const int outer = current_block_node();
    tbb::task_group group;
    NUMAPLACE_HANDOVER_RELEASE();
    for (const auto& b : blocks)
        if (!b.empty())
            group.run([&fn, &b, outer] {
                handover_scope handover;
                scoped_block_node mark(outer);
                fn(b);
            });
    try {
        group.wait();
    } catch (...) {
        NUMAPLACE_HANDOVER_ACQUIRE(); // the exception object was written by the task that threw
        throw;
    }
    NUMAPLACE_HANDOVER_ACQUIRE();
}

// Puts f into `arena` as a task of `group`, without the caller joining the arena: oneTBB's
// enqueue(task_group::defer(f)) (task_handle: oneTBB 2021.6, interface 12060); before that, the caller
// enters the arena to spawn it.
template <class F>
void enqueue(tbb::task_arena& arena, tbb::task_group& group, F&& f) {
#if TBB_INTERFACE_VERSION >= 12060
    tbb::task_handle task = group.defer(std::forward<F>(f)); // copies the closure into the task
    NUMAPLACE_HANDOVER_RELEASE(); // after the copy: the worker that runs it reads that closure
    arena.enqueue(std::move(task));
#else
    NUMAPLACE_HANDOVER_RELEASE();
    arena.execute([&] { group.run(std::forward<F>(f)); });
#endif
}

// Blocks spread over node arenas: block k is a task of its own task group, enqueued into its node's
// arena (oneTBB's `task_arena::enqueue(task_group::defer(f))`), and waited for inside that arena
// (`execute(group.wait())`, so the caller itself runs the block where no worker is free). A block that
// throws cancels every group; the exception of the first block that threw is rethrown once all
// groups are done. If dispatch throws midway (no memory for a task, an arena refusing), everything
// already started is cancelled and waited for before the exception leaves.
template <class Fn, class Arenas>
void run_blocks_spread(const std::vector<block>& blocks, Fn& fn, Arenas& arenas) {
    struct node_group {
        tbb::task_arena* arena = nullptr;
        tbb::task_group group;
    };
    const std::size_t count = blocks.size();
    const std::unique_ptr<node_group[]> groups(new node_group[count]);
    std::size_t started = 0; // groups[0, started) have a task in their arena
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    std::atomic<std::size_t> first_failed{none};
    // The exception of the first block that threw, kept here: a group cancelled (by another block that
    // threw) before its own task's exception reaches its context drops that exception, so when every
    // block throws, every group may end cancelled with no exception at all.
    std::exception_ptr first_error;
    // Cancels every group but `keep`.
    auto cancel_all = [&groups, count](std::size_t keep = static_cast<std::size_t>(-1)) {
        for (std::size_t k = 0; k < count; ++k)
            if (k != keep) groups[k].group.cancel();
    };
    // Waits for groups[0, started); \returns the exception of the first block that threw, if any.
    auto wait_all = [&]() noexcept {
        std::exception_ptr first;
        for (std::size_t k = 0; k < started; ++k) {
            node_group& g = groups[k];
            if (!g.arena) continue;
            try {
                g.arena->execute([&g] { g.group.wait(); });
            } catch (...) {
                if (!first || first_failed.load() == k) first = std::current_exception();
                cancel_all();
            }
        }
        return first;
    };
    NUMAPLACE_HANDOVER_RELEASE();
    try {
        for (; started < count; ++started) {
            const std::size_t k = started;
            if (blocks[k].empty()) continue;
            groups[k].arena = arenas.arena_for(blocks[k].node);
            enqueue(*groups[k].arena, groups[k].group, [&fn, &blocks, &cancel_all, &first_failed, &first_error, k] {
                handover_scope handover;
                try {
                    fn(blocks[k]);
                } catch (...) {
                    std::size_t expected = none;
                    if (first_failed.compare_exchange_strong(expected, k))
                        first_error = std::current_exception(); // read after every group's wait()
                    cancel_all(k);
                }
            });
        }
    } catch (...) {
        cancel_all();
        (void)wait_all(); // a group's destructor would wait outside its arena, where no one may run it
        NUMAPLACE_HANDOVER_ACQUIRE();
        throw;
    }
    std::exception_ptr error = wait_all();
    NUMAPLACE_HANDOVER_ACQUIRE();
    if (first_error) std::rethrow_exception(first_error);
    if (error) std::rethrow_exception(error);
}

// Runs fn(block) for every non-empty block, block k inside the arena of its node, all blocks
// concurrently; returns when all are done. The first exception cancels the other blocks and is
// rethrown. Nested inside a block, or on a one-node machine: all blocks in the current arena.
// `Arenas` provides `spread()` and `arena_for(node)` (node_arenas; tests substitute their own).
template <class Fn, class Arenas>
void run_blocks(const std::vector<block>& blocks, Fn&& fn, Arenas& arenas) {
    if (current_block_node() >= 0 || !arenas.spread()) run_blocks_here(blocks, fn);
    else run_blocks_spread(blocks, fn, arenas);
}

template <class Fn>
void run_blocks(const std::vector<block>& blocks, Fn&& fn) {
    run_blocks(blocks, fn, node_arenas::get());
}

/// `run_blocks(p.blocks(), fn)` for anything with blocks (every partition type).
template <class Part, class Fn, class = decltype(std::declval<const Part&>().blocks())>
void run_blocks(const Part& part, Fn&& fn) {
    run_blocks(part.blocks(), fn, node_arenas::get());
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
        const auto run = [&body, node](const tbb::blocked_range<std::size_t>& r) {
            NUMAPLACE_HANDOVER_ACQUIRE();
            detail::scoped_block_node mark(node);
            detail::call_body(body, r.begin(), r.end(), node);
            NUMAPLACE_HANDOVER_RELEASE();
        };
        NUMAPLACE_HANDOVER_RELEASE(); // after the closure is written: workers read it (oneTBB keeps a reference)
        tbb::parallel_for(tbb::blocked_range<std::size_t>(b.begin, b.end, grain), run);
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
        const auto reduce = [&body, node](const tbb::blocked_range<std::size_t>& r, R acc) {
            NUMAPLACE_HANDOVER_ACQUIRE();
            detail::scoped_block_node mark(node);
            R result = body(subrange(r.begin(), r.end(), node), std::move(acc));
            NUMAPLACE_HANDOVER_RELEASE();
            return result;
        };
        const auto join = [&combine](R x, R y) {
            NUMAPLACE_HANDOVER_ACQUIRE();
            R result = combine(std::move(x), std::move(y));
            NUMAPLACE_HANDOVER_RELEASE();
            return result;
        };
        NUMAPLACE_HANDOVER_RELEASE(); // after the closures are written: oneTBB's workers read them by reference
        partial[k] = tbb::parallel_reduce(tbb::blocked_range<std::size_t>(b.begin, b.end, grain), identity, reduce, join);
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
