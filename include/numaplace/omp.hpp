#ifndef NUMAPLACE_OMP_HPP_INCLUDED
#define NUMAPLACE_OMP_HPP_INCLUDED

/// \file
/// OpenMP, on top of the placement path (compile with the compiler's OpenMP flag; in this build the
/// target numaplace::omp; installed, link numaplace::core and OpenMP::OpenMP_CXX):
/// - `omp::team`: the node of every thread of the team `#pragma omp parallel` makes, read from each
///   thread's CPU affinity inside the team, never assumed; an unbound team is an error (`unbound_team`).
/// - `omp::static_partition`: the partition `schedule(static)` gives that team, so that an unchanged
///   OpenMP loop computes where its pages are (an allocator placed by it, `where` checked against it).
/// - `omp::parallel_for`: any partition, block k on the team's threads of node k, dynamic only within a
///   node; every index once, exceptions to the caller.
/// Design and measurements: docs/omp.md.

#include "detail/config.hpp"
#include "detail/linux.hpp"
#include "diagnostics.hpp"
#include "error.hpp"
#include "loop.hpp"
#include "partition.hpp"
#include "placement.hpp"
#include "topology.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace numaplace {
namespace omp {

/// A team whose threads are not each bound within one node, or whose nodes are not in thread order
/// (threads of a node numbered consecutively, nodes ascending): no partition can follow it. Bind the
/// team: OMP_PROC_BIND=close or spread with OMP_PLACES=cores, sockets or numa_domains.
class unbound_team : public std::runtime_error {
public:
    /// \effects names the thread that made the team unbound.
    unbound_team(int thread, const std::string& what) : std::runtime_error(what), thread_(thread) {}
    /// \returns the thread (its number in the team) whose binding breaks the rule.
    int thread() const noexcept { return thread_; }

private:
    int thread_;
};

namespace detail {
// The most threads the kernel lets the whole system have (kernel.threads-max); INT_MAX if unreadable.
inline int kernel_threads_max() noexcept {
    long v = 0;
    if (std::FILE* f = std::fopen("/proc/sys/kernel/threads-max", "r")) {
        if (std::fscanf(f, "%ld", &v) != 1) v = 0;
        std::fclose(f);
    }
    return v > 0 && v < INT_MAX ? static_cast<int>(v) : INT_MAX;
}
} // namespace detail

/// The node of each thread of an OpenMP team (thread numbers as omp_get_thread_num gives them). A
/// default-constructed or moved-from team is empty: no threads, no nodes; partitions and loops refuse it.
class team {
public:
    team() = default;
    /// \effects copies the team's nodes.
    team(const team&) = default;
    /// \effects copies the team's nodes. \returns `*this`.
    team& operator=(const team&) = default;
    /// \effects takes `other`'s threads; `other` is left empty (as a default-constructed team).
    team(team&& other) noexcept { swap(other); }
    /// \effects takes `other`'s threads; `other` is left empty (as a default-constructed team). \returns `*this`.
    team& operator=(team&& other) noexcept {
        if (this != &other) {
            team().swap(*this);
            swap(other);
        }
        return *this;
    }

    /// \returns the team `#pragma omp parallel num_threads(threads)` makes here: with `threads` above
    /// `omp_get_thread_limit()` (OMP_THREAD_LIMIT), the smaller team OpenMP makes, and fewer still as the
    /// runtime decides (OMP_DYNAMIC, a nested region); each thread's node read from its CPU affinity inside
    /// that team. On a host with one node every team is on it.
    /// \throws invalid_placement (an std::invalid_argument) when `threads` < 1, or when the team it would
    /// make (at most `omp_get_thread_limit()` threads) is above the kernel's kernel.threads-max (a team no
    /// runtime can start: libgomp would end the process); unbound_team (a thread may run on CPUs of two
    /// nodes, as every thread of a team without OMP_PROC_BIND can; or the nodes are not in thread order);
    /// std::system_error (a thread's affinity cannot be read).
    static team current(int threads = omp_get_max_threads()) {
        if (threads < 1)
            numaplace::detail::throw_invalid("omp::team: a team of " + std::to_string(threads) + " threads (at least 1)");
        threads = std::min(threads, omp_get_thread_limit()); // what num_threads(threads) makes at most
        const int system_most = detail::kernel_threads_max();
        if (threads > system_most)
            numaplace::detail::throw_invalid("omp::team: a team of " + std::to_string(threads) +
                                             " threads, more than the system may have (kernel.threads-max " +
                                             std::to_string(system_most) + ")");
        const topology& topo = topology::get();
        std::vector<int> node(static_cast<std::size_t>(threads), -1), error(static_cast<std::size_t>(threads), 0);
        int made = 0;
        NUMAPLACE_HANDOVER_RELEASE(); // the team's joins and forks are inside the OpenMP runtime: TSan, see detail/config.hpp
#pragma omp parallel num_threads(threads)
        {
            NUMAPLACE_HANDOVER_ACQUIRE();
            const auto t = static_cast<std::size_t>(omp_get_thread_num());
            if (t == 0) made = omp_get_num_threads();
            cpu_set_t set;
            error[t] = numaplace::detail::os_thread_affinity(set);
            if (error[t] == 0) node[t] = topo.node_of_cpus(set);
            NUMAPLACE_HANDOVER_RELEASE();
        }
        NUMAPLACE_HANDOVER_ACQUIRE();
        node.resize(static_cast<std::size_t>(made));
        team result;
        for (std::size_t t = 0; t < node.size(); ++t) {
            if (error[t] != 0)
                throw std::system_error(error[t], std::generic_category(), "omp::team: the affinity of thread " + std::to_string(t));
            if (node[t] < 0)
                throw unbound_team(static_cast<int>(t), "omp::team: thread " + std::to_string(t) + " of " + std::to_string(made) +
                                                            " may run on CPUs of more than one node: bind the team (OMP_PROC_BIND=close or spread, "
                                                            "OMP_PLACES=cores, sockets or numa_domains)");
            if (t > 0 && node[t] < node[t - 1])
                throw unbound_team(static_cast<int>(t), "omp::team: thread " + std::to_string(t) + " runs on node " + std::to_string(node[t]) +
                                                            " after thread " + std::to_string(t - 1) + " on node " + std::to_string(node[t - 1]) +
                                                            ": a partition needs the threads of a node numbered consecutively, nodes ascending");
        }
        result.node_ = std::move(node);
        result.nodes_ = node_set(result.node_);
        return result;
    }

    /// \returns the number of threads (0: an empty team).
    int size() const noexcept { return static_cast<int>(node_.size()); }
    /// \returns the node of thread `t`. \throws invalid_placement unless 0 <= t < size().
    int node_of(int t) const {
        if (t < 0 || t >= size())
            numaplace::detail::throw_invalid("omp::team::node_of: thread " + std::to_string(t) + " of a team of " +
                                             std::to_string(size()) + " threads");
        return node_[static_cast<std::size_t>(t)];
    }
    /// \returns the nodes that have threads, ascending.
    const node_set& nodes() const noexcept { return nodes_; }
    /// \returns how many threads run on `node` (0 for any id that is no node of the team).
    std::size_t threads_on(int node) const noexcept {
        return static_cast<std::size_t>(std::count(node_.begin(), node_.end(), node));
    }

private:
    void swap(team& other) noexcept {
        node_.swap(other.node_);
        std::swap(nodes_, other.nodes_);
    }

    std::vector<int> node_; // per thread
    node_set nodes_;
};

/// \returns how many of `n` iterations `schedule(static)` (no chunk size) gives thread `t` of `threads`:
/// n / threads, one more for the first n % threads threads (libgomp and LLVM's libomp both do so).
/// \throws invalid_placement when `threads` is 0 or `t` >= `threads` (no such thread).
inline std::size_t static_share(std::size_t n, std::size_t threads, std::size_t t) {
    if (t >= threads) // threads == 0 too
        numaplace::detail::throw_invalid("omp::static_share: thread " + std::to_string(t) + " of a team of " +
                                         std::to_string(threads) + " threads");
    return n / threads + (t < n % threads ? 1 : 0);
}

namespace detail {
// The weights of tm's nodes for n iterations under schedule(static): each node's threads' iterations,
// divided by their gcd (the same layout for every n with the same proportions: layouts are interned).
// \throws invalid_placement for an empty team, naming `who`.
inline std::vector<std::size_t> static_weights(std::size_t n, const team& tm, const char* who) {
    if (tm.size() == 0)
        numaplace::detail::throw_invalid(std::string(who) + ": an empty team (default-constructed or moved-from)");
    const node_set& nodes = tm.nodes();
    std::vector<std::size_t> weights(nodes.size(), 0);
    const auto threads = static_cast<std::size_t>(tm.size());
    for (std::size_t t = 0; t < threads; ++t) {
        const auto k = static_cast<std::size_t>(std::lower_bound(nodes.begin(), nodes.end(), tm.node_of(static_cast<int>(t))) - nodes.begin());
        weights[k] += static_share(n, threads, t);
    }
    if (n == 0) std::fill(weights.begin(), weights.end(), 1); // nothing to split: any weights
    std::size_t g = 0;
    for (std::size_t w : weights) g = std::gcd(g, w);
    for (auto& w : weights) w /= g;
    return weights; // a node with fewer iterations than threads: 0
}
} // namespace detail

/// \returns the partition of `n` elements of T that `schedule(static)` gives `tm`: the block of each of
/// its nodes holds exactly the iterations of that node's threads (compute edges are exact; the pages
/// follow them, a page to the block holding its first byte).
/// \throws invalid_placement for an empty team (default-constructed or moved-from), or when `n` elements
/// of T overflow the bytes (partition<T>'s constructor).
template <class T>
partition<T> static_partition(std::size_t n, const team& tm = team::current()) {
    return partition<T>(n, tm.nodes(), detail::static_weights(n, tm, "omp::static_partition"));
}

/// \returns the row partition of an `m` x `row_length` row-major matrix of T that a `schedule(static)`
/// loop over its `m` rows gives `tm` (a DGEMV's `for (i = 0; i < m; ++i)`): node k's block holds exactly
/// the rows of its threads.
/// \throws invalid_placement for an empty team (default-constructed or moved-from), a `row_length` of 0,
/// or rows whose bytes overflow (partition<T>::rows).
template <class T>
row_partition<T> static_rows(std::size_t m, std::size_t row_length, const team& tm = team::current()) {
    return partition<T>::rows(m, row_length, tm.nodes(), detail::static_weights(m, tm, "omp::static_rows"));
}

namespace detail {
// One block's next unclaimed index, on a cache line of its own.
struct alignas(64) block_cursor {
    std::atomic<std::size_t> next{0};
};
} // namespace detail

namespace detail {
/// `omp::parallel_for` for any partition (its blocks in its own indexes).
template <class Body>
void parallel_for_blocks(const basic_partition& part, Body& body, const team& tm, std::size_t grain) {
    if (tm.size() == 0)
        numaplace::detail::throw_invalid("omp::parallel_for: an empty team (default-constructed or moved-from)");
    const std::vector<block> blocks = part.blocks();
    for (const block& b : blocks)
        if (!b.empty() && tm.threads_on(b.node) == 0)
            numaplace::detail::throw_invalid("omp::parallel_for: a block of node " + std::to_string(b.node) +
                                             ", but no thread of the team runs on it");
    std::unique_ptr<detail::block_cursor[]> cursor(new detail::block_cursor[blocks.size()]);
    std::vector<std::size_t> chunk(blocks.size(), 1);
    for (std::size_t k = 0; k < blocks.size(); ++k) {
        cursor[k].next.store(blocks[k].begin, std::memory_order_relaxed);
        const std::size_t share = blocks[k].size() / (8 * std::max<std::size_t>(1, tm.threads_on(blocks[k].node)));
        chunk[k] = std::max<std::size_t>(1, grain != 0 ? std::min(grain, blocks[k].size()) : share);
    }
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex error_mutex;
    const auto drain = [&](std::size_t k) noexcept {
        const block& b = blocks[k];
        std::size_t first = cursor[k].next.load(std::memory_order_relaxed), last;
        while (!failed.load(std::memory_order_relaxed)) {
            do { // claimed by compare-and-swap: the cursor never passes the block's end (no wrap at SIZE_MAX)
                if (first >= b.end) return;
                last = first + std::min(chunk[k], b.end - first);
            } while (!cursor[k].next.compare_exchange_weak(first, last, std::memory_order_relaxed));
            try {
                numaplace::detail::scoped_block_node mark(b.node);
                numaplace::detail::call_body(body, first, last, b.node);
            } catch (...) {
                std::lock_guard<std::mutex> lock(error_mutex);
                if (!error) error = std::current_exception();
                failed.store(true, std::memory_order_relaxed);
            }
            first = last; // the cursor's value after this claim, unless another thread claimed since
        }
    };
    // Where each thread of the region is bound (its node, -1: CPUs of two nodes), read once per call:
    // the team may have been read in another region (a nested one puts its threads elsewhere).
    const topology& topo = topology::get();
    std::vector<int> on(static_cast<std::size_t>(tm.size()), -1), errors(on.size(), 0);
    int made = 0;
    NUMAPLACE_HANDOVER_RELEASE();
#pragma omp parallel num_threads(tm.size())
    {
        NUMAPLACE_HANDOVER_ACQUIRE();
        const int t = omp_get_thread_num();
        if (t == 0) made = omp_get_num_threads();
        if (t < tm.size()) {
            const auto s = static_cast<std::size_t>(t);
            cpu_set_t set;
            errors[s] = numaplace::detail::os_thread_affinity(set);
            if (errors[s] == 0) on[s] = topo.node_of_cpus(set);
            // the blocks of the node it is bound to, tm's or not: never a block off its node
            for (std::size_t k = 0; k < blocks.size(); ++k)
                if (on[s] >= 0 && blocks[k].node == on[s]) drain(k);
        }
        NUMAPLACE_HANDOVER_RELEASE();
    }
    NUMAPLACE_HANDOVER_ACQUIRE();
    std::string why;
    if (made < tm.size())
        why = "the team had " + std::to_string(made) + " of " + std::to_string(tm.size()) +
              " threads (a nested region, OMP_THREAD_LIMIT or OMP_DYNAMIC)";
    int first = -1, off = 0;
    for (int t = 0; t < std::min(made, tm.size()); ++t)
        if (on[static_cast<std::size_t>(t)] != tm.node_of(t) && ++off == 1) first = t;
    if (first >= 0) {
        const auto s = static_cast<std::size_t>(first);
        why += (why.empty() ? "" : "; ") + std::string("thread ") + std::to_string(first) + " of " + std::to_string(tm.size()) +
               (errors[s] != 0 ? " could not read its CPU affinity (errno " + std::to_string(errors[s]) + ")"
                : on[s] < 0  ? " may run on CPUs of more than one node"
                             : " runs on node " + std::to_string(on[s])) +
               ", the team said node " + std::to_string(tm.node_of(first)) +
               (off > 1 ? " (" + std::to_string(off - 1) + " more threads off their team node)" : "") +
               ": a team read in another region (a nested one?) or rebound since; each thread ran only the block of the node it is on";
    }
    if (!why.empty()) {
        for (std::size_t k = 0; k < blocks.size(); ++k) drain(k); // what no thread on its block's node claimed
        numaplace::detail::degradation_log::instance().record("omp::parallel_for: " + why +
                                                              ": the calling thread ran whatever chunks were left");
    }
    if (error) std::rethrow_exception(error);
}
} // namespace detail

/// \effects calls `body` on subranges covering [0, part.size()) exactly once (rows of a rows partition,
/// elements otherwise): the threads of `tm` on node k claim chunks of block k (`grain` indexes, 0: an
/// eighth of a thread's share), so the load balances within a node, never across. `body` takes a
/// `subrange` or one `std::size_t`. Each thread of the region reads its CPU affinity once per call (as
/// `team::current` does) and claims chunks only of the block of the node it is bound within, so no chunk
/// runs in the region off its block's node. A thread not on `tm.node_of(t)` (`tm` read elsewhere, e.g.
/// at top level and reused in a nested region, whose threads sit on the outer thread's places) thus
/// helps another node's threads or, bound across nodes, claims nothing. If the region has fewer threads
/// than `tm` (a nested region, OMP_THREAD_LIMIT) or some thread is off its node, the calling thread
/// finishes after the region what no thread on a block's node claimed (off node), and one degradation
/// per call is recorded (`degradations()`) naming the first such thread, the node it is on and the
/// team's. Every index still runs exactly once.
/// \throws invalid_placement before running anything when `tm` is empty (default-constructed or
/// moved-from: even for an empty partition) or a non-empty block's node has no thread in `tm`; the first
/// exception `body` throws (the other threads stop claiming chunks). A thread off its
/// node is recorded, never thrown.
template <class T, class Body>
void parallel_for(const partition<T>& part, Body&& body, const team& tm = team::current(), std::size_t grain = 0) {
    detail::parallel_for_blocks(part.untyped(), body, tm, grain);
}

/// \effects `omp::parallel_for` over the rows [0, rows.size()) of a row partition (block k's rows on
/// node k's threads), as above.
template <class T, class Body>
void parallel_for(const row_partition<T>& rows, Body&& body, const team& tm = team::current(), std::size_t grain = 0) {
    detail::parallel_for_blocks(rows.untyped(), body, tm, grain);
}

/// \effects `parallel_for(partition_of(c), body, tm, grain)` for a partitioned container.
template <class Container, class Body,
          class = std::enable_if_t<numaplace::detail::is_partitioned_container<Container>::value>>
void parallel_for(Container& c, Body&& body, const team& tm = team::current(), std::size_t grain = 0) {
    parallel_for(partition_of(c), std::forward<Body>(body), tm, grain);
}

} // namespace omp
} // namespace numaplace

#endif
