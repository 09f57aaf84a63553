#ifndef NUMAPLACE_PARALLEL_FOR_HPP_INCLUDED
#define NUMAPLACE_PARALLEL_FOR_HPP_INCLUDED

/// \file
/// NUMA-aware loops on oneTBB: `parallel_for` / `parallel_reduce` over a partition (block k runs in node
/// k's arena, where the partition put block k's pages) or over a partitioned container, and
/// `first_touch`. The arenas are arenas.hpp's; design notes: docs/parallel_for.md.

#include "arena_map.hpp"
#include "arenas.hpp"
#include "loop.hpp"
#include "detail/config.hpp"
#include "memory.hpp"
#include "partition.hpp"
#include "placement.hpp"
#include "topology.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace numaplace {

namespace detail {

/// The body of a task handed to another thread: acquires at entry, releases at exit (also when it
/// throws). \notes ThreadSanitizer only (NUMAPLACE_HANDOVER_*, detail/config.hpp).
struct handover_scope {
    handover_scope() noexcept { NUMAPLACE_HANDOVER_ACQUIRE(); }
    ~handover_scope() { NUMAPLACE_HANDOVER_RELEASE(); }
    handover_scope(const handover_scope&) = delete;
    handover_scope& operator=(const handover_scope&) = delete;
};

/// \effects `fn(b)` for every non-empty block, all in the current arena, concurrently.
/// \throws the first exception `fn` throws (oneTBB cancels the other blocks).
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

/// The task groups of one spread run: block k is the one task of group k, in its node's arena, and is
/// waited for in that arena. The first block that throws cancels every group; its exception is kept,
/// later ones are dropped. \notes why one group per block: docs/parallel_for.md.
class spread_groups {
public:
    /// `home`: the arena with a slot kept for the caller (null: none), whose blocks the caller spawns.
    explicit spread_groups(std::size_t count, tbb::task_arena* home = nullptr)
        : entries_(new entry[count]), count_(count), home_(home) {}
    spread_groups(const spread_groups&) = delete;
    spread_groups& operator=(const spread_groups&) = delete;

    /// \effects runs `f` as group k's task in `arena`: enqueued, or in the caller's arena spawned by the
    /// caller (an enqueued task would bring in a worker beside the caller where that arena has no worker
    /// slot: a node with one CPU of the binding; docs/parallel_for.md).
    template <class F>
    void start(std::size_t k, tbb::task_arena& arena, F&& f) {
        entries_[k].arena = &arena;
        if (&arena != home_) {
            enqueue_in(arena, entries_[k].group, std::forward<F>(f));
            return;
        }
        NUMAPLACE_HANDOVER_RELEASE();
        arena.execute([&] { entries_[k].group.run(std::forward<F>(f)); });
    }
    /// \effects keeps the exception being handled if it is the first; cancels every group.
    void fail() noexcept {
        if (!failed_.exchange(true)) first_ = std::current_exception();
        cancel();
    }
    /// \effects cancels every group.
    void cancel() noexcept {
        for (std::size_t k = 0; k < count_; ++k) entries_[k].group.cancel();
    }
    /// \effects waits for every started group inside its arena, those in the caller's arena (`home`)
    /// before the others (a wait that throws counts as a failure).
    void wait() noexcept {
        for (int pass = home_ ? 0 : 1; pass < 2; ++pass)
            for (std::size_t k = 0; k < count_; ++k) {
                entry& e = entries_[k];
                if (!e.arena || (pass == 0) != (e.arena == home_)) continue;
                try {
                    wait_in(*e.arena, e.group);
                } catch (...) {
                    fail();
                }
            }
    }
    /// \throws the first exception kept by `fail()`, if any.
    void rethrow_first() const {
        if (first_) std::rethrow_exception(first_);
    }

private:
    struct entry {
        tbb::task_arena* arena = nullptr;
        tbb::task_group group;
    };
    std::unique_ptr<entry[]> entries_;
    std::size_t count_;
    tbb::task_arena* home_;
    std::atomic<bool> failed_{false};
    std::exception_ptr first_; // written by the first failure, read after every wait
};

/// \returns `arenas.caller_arena()` where `Arenas` has it (node_arenas), else null.
template <class Arenas>
auto caller_arena_of(const Arenas& arenas, int) -> decltype(arenas.caller_arena()) {
    return arenas.caller_arena();
}
template <class Arenas>
tbb::task_arena* caller_arena_of(const Arenas&, long) {
    return nullptr;
}

/// \effects `fn(blocks[k])` for every non-empty block, in the arena of its node, all at once; returns
/// when all are done, also when dispatch throws midway (what started is cancelled and waited for).
/// \throws the first exception a block threw (the others are cancelled), else what dispatch threw.
template <class Fn, class Arenas>
void run_blocks_spread(const std::vector<block>& blocks, Fn& fn, Arenas& arenas) {
    spread_groups groups(blocks.size(), caller_arena_of(arenas, 0));
    try {
        for (std::size_t k = 0; k < blocks.size(); ++k) {
            if (blocks[k].empty()) continue;
            groups.start(k, *arenas.arena_for(blocks[k].node), [&fn, &blocks, &groups, k] {
                handover_scope handover;
                try {
                    fn(blocks[k]);
                } catch (...) {
                    groups.fail();
                }
            });
        }
    } catch (...) {
        groups.cancel();
        groups.wait(); // a group's destructor would wait outside its arena
        NUMAPLACE_HANDOVER_ACQUIRE();
        throw;
    }
    groups.wait();
    NUMAPLACE_HANDOVER_ACQUIRE();
    groups.rethrow_first();
}

/// \effects `fn(b)` for every non-empty block, block k in its node's arena, all at once; nested inside a
/// block or on a one-node machine, all in the current arena; in a process forked after oneTBB's workers
/// started, one after the other in this thread (tbb_lost_in_fork). `Arenas` provides `spread()` and
/// `arena_for(node)` (node_arenas; tests substitute their own). \throws the first exception `fn` throws.
template <class Fn, class Arenas>
void run_blocks(const std::vector<block>& blocks, Fn&& fn, Arenas& arenas) {
    if (tbb_lost_in_fork()) {
        for (const block& b : blocks)
            if (!b.empty()) fn(b);
        return;
    }
    note_tbb_used();
    if (current_block_node() >= 0 || !arenas.spread()) run_blocks_here(blocks, fn);
    else run_blocks_spread(blocks, fn, arenas);
}

/// \effects `run(r)` over subranges of r = [begin, end) split by oneTBB (`grain` its grainsize), at
/// once; in a process forked after oneTBB's workers started, `run(r)` in this thread.
template <class Run>
void for_range(std::size_t begin, std::size_t end, std::size_t grain, const Run& run) {
    const tbb::blocked_range<std::size_t> r(begin, end, grain);
    if (tbb_lost.load(std::memory_order_relaxed)) return run(r);
    tbb::parallel_for(r, run);
}
/// \returns `reduce` over [begin, end) from `identity` as oneTBB's parallel_reduce (`join` combining);
/// in a process forked after oneTBB's workers started, `reduce(r, identity)` in this thread.
template <class R, class Reduce, class Join>
R reduce_range(std::size_t begin, std::size_t end, std::size_t grain, const R& identity, const Reduce& reduce, const Join& join) {
    const tbb::blocked_range<std::size_t> r(begin, end, grain);
    if (tbb_lost.load(std::memory_order_relaxed)) return reduce(r, identity);
    return tbb::parallel_reduce(r, identity, reduce, join);
}

/// The same in node_arenas, after checking every non-empty block's node is one of this process's
/// topology. \throws unknown_node (a partition made for another topology) before anything runs.
template <class Fn>
void run_blocks(const std::vector<block>& blocks, Fn&& fn) {
    const topology& topo = topology::get();
    for (const block& b : blocks)
        if (!b.empty()) topo.check(b.node);
    run_blocks(blocks, fn, node_arenas::get());
}

/// `run_blocks(p.blocks(), fn)` for anything with blocks (every partition type).
template <class Part, class Fn, class = decltype(std::declval<const Part&>().blocks())>
void run_blocks(const Part& part, Fn&& fn) {
    run_blocks(part.blocks(), fn);
}

/// `run_blocks(blocks, fn, arenas)` in the user's arenas, after checking every non-empty block's node has
/// one. \throws invalid_placement (a node without an arena) before anything runs.
template <class Fn>
void run_blocks_in(const std::vector<block>& blocks, Fn&& fn, const arena_map& arenas) {
    for (const block& b : blocks)
        if (!b.empty()) arenas.arena_for(b.node);
    run_blocks(blocks, fn, arenas);
}

/// `parallel_for`'s body on one subrange of a block, its node marked. Named types here and below, not
/// lambdas: oneTBB's task types are named after them, and TSan's in-process symbolizer drops the file of
/// frames whose inlined names grow too long (the suppressions of oneTBB's own frames match by file).
template <class Body>
struct subrange_call {
    Body& body;
    int node;
    void operator()(const tbb::blocked_range<std::size_t>& r) const {
        NUMAPLACE_HANDOVER_ACQUIRE();
        scoped_block_node mark(node);
        call_body(body, r.begin(), r.end(), node);
        NUMAPLACE_HANDOVER_RELEASE();
    }
};
/// `parallel_for`'s work on one block: its indexes split by oneTBB in the current arena.
template <class Body>
struct block_loop {
    Body& body;
    std::size_t grain;
    void operator()(const block& b) const {
        const subrange_call<Body> run{body, current_block_node() >= 0 ? current_block_node() : b.node};
        NUMAPLACE_HANDOVER_RELEASE(); // after the closure is written: workers read it (oneTBB keeps a reference)
        for_range(b.begin, b.end, grain, run);
        NUMAPLACE_HANDOVER_ACQUIRE();
    }
};

/// `parallel_for`'s body for any partition: block k's indexes in node k's arena.
template <class Body>
void parallel_for_blocks(const basic_partition& part, Body& body, std::size_t grain) {
    run_blocks(part.blocks(), block_loop<Body>{body, grain});
}
/// The same in the user's arenas.
template <class Body>
void parallel_for_blocks(const basic_partition& part, Body& body, std::size_t grain, const arena_map& arenas) {
    run_blocks_in(part.blocks(), block_loop<Body>{body, grain}, arenas);
}

} // namespace detail

/// \effects calls `body` on contiguous subranges covering [0, part.size()) exactly once (units: rows of
/// a rows partition, elements otherwise), block k's in node k's arena on node k's cores, all blocks at
/// once; oneTBB balances inside a block. `grain` is oneTBB's `blocked_range` grainsize, not a minimum:
/// a subrange is split while it holds more than `grain` units, so subranges may be smaller than
/// `grain` (about grain / 2 when split in halves). `body` takes a `subrange` or one `std::size_t`
/// index. A nested call stays in the current node's arena.
/// \throws unknown_node before running anything when a non-empty block's node is not this process's
/// (a partition made for another topology); std::system_error when the per-node arenas cannot be made
/// yet (node_arenas::get: descriptors or worker threads refused; the next call tries again); the first
/// exception `body` throws (the other blocks are cancelled).
/// \notes may be called from a oneTBB task.
template <class T, class Body>
void parallel_for(const partition<T>& part, Body&& body, std::size_t grain = 1) {
    detail::parallel_for_blocks(part.untyped(), body, grain);
}

/// \effects `parallel_for(part, body, grain)` with block k in `arenas`' arena for its node (the user's
/// arenas, e.g. from `tbb::create_numa_task_arenas`: their constraints pin; numaplace's arenas are not
/// made), also on one node. \throws invalid_placement before running anything when a non-empty block's
/// node has no arena in the map; the first exception `body` throws.
template <class T, class Body>
void parallel_for(const partition<T>& part, Body&& body, const arena_map& arenas, std::size_t grain = 1) {
    detail::parallel_for_blocks(part.untyped(), body, grain, arenas);
}
/// \effects `parallel_for(rows, body, grain)` in the user's arenas, as above.
template <class T, class Body>
void parallel_for(const row_partition<T>& rows, Body&& body, const arena_map& arenas, std::size_t grain = 1) {
    detail::parallel_for_blocks(rows.untyped(), body, grain, arenas);
}

/// \effects `parallel_for` over the rows [0, rows.size()) of a row partition: block k's rows on node k.
template <class T, class Body>
void parallel_for(const row_partition<T>& rows, Body&& body, std::size_t grain = 1) {
    detail::parallel_for_blocks(rows.untyped(), body, grain);
}

/// \effects `parallel_for(partition_of(c), body, grain)`: c's elements [0, c.size()) exactly once, block
/// k on node k, where its pages are.
template <class Container, class Body,
          class = std::enable_if_t<detail::is_partitioned_container<Container>::value>>
void parallel_for(Container& c, Body&& body, std::size_t grain = 1) {
    parallel_for(partition_of(c), std::forward<Body>(body), grain);
}

namespace detail {
/// `parallel_reduce` for any partition.
template <class R, class Body, class Combine>
R reduce_blocks(const basic_partition& part, const R& identity, Body& body, Combine& combine, std::size_t grain) {
    std::vector<R> partial(part.block_count(), identity);
    const node_set& nodes = part.nodes();
    detail::run_blocks(part, [&](const block& b) {
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
        partial[k] = detail::reduce_range(b.begin, b.end, grain, identity, reduce, join);
        NUMAPLACE_HANDOVER_ACQUIRE();
    });
    R result = identity;
    for (auto& p : partial) result = combine(std::move(result), std::move(p));
    return result;
}
} // namespace detail

/// \returns `combine` over all blocks (in block order) of `body(subrange, R init) -> R`, reduced by
/// oneTBB inside each block from `identity`; block k on node k as in `parallel_for`.
/// \throws unknown_node as `parallel_for`; the first exception `body` or `combine` throws.
/// \notes exact for integers; for floating point the order inside a block is oneTBB's.
template <class T, class R, class Body, class Combine>
R parallel_reduce(const partition<T>& part, const R& identity, Body&& body, Combine&& combine, std::size_t grain = 1) {
    return detail::reduce_blocks(part.untyped(), identity, body, combine, grain);
}
/// \returns the same over the rows of a row partition.
template <class T, class R, class Body, class Combine>
R parallel_reduce(const row_partition<T>& rows, const R& identity, Body&& body, Combine&& combine, std::size_t grain = 1) {
    return detail::reduce_blocks(rows.untyped(), identity, body, combine, grain);
}

/// \effects faults in the pages each block owns (a grain of `part.alignment()` bytes from `data` belongs to
/// the block holding its first byte: `basic_partition::page_bytes`) from that block's node's arena,
/// contents unchanged, after setting THP as `part.huge_pages()` says: each page is written once, by its
/// owner (any `data`: numaplace's allocations start on a grain, another range's first grain goes to the
/// first block). A memory-only node
/// has no arena: the pages its block owns are first set to prefer that node (`MPOL_PREFERRED`,
/// degrading: a refusal is recorded in `degradations()` and the pages land where the touching thread
/// runs), then touched from the nearest node with CPUs.
/// \throws unknown_node (as `parallel_for`); placement_error (ENOMEM) when a memory-only node's block
/// is more than all nodes have free.
/// \notes a parallel initialisation by `parallel_for` over the same partition places every page whole in
/// one block the same way; a page shared by two blocks (one per edge) goes to whichever writes it first.
template <class T>
void first_touch(T* data, const partition<T>& part) {
    const basic_partition& e = part.untyped();
    const std::size_t s = sizeof(T);
    if (e.size() == 0) return;
    const std::size_t bytes = e.size() * s, allocated = e.units() * e.unit_bytes();
    detail::advise_huge_pages(data, bytes, e.huge_pages());
    const topology& topo = topology::get();
    for (const block& b : e.blocks()) // every node checked before any block's pages are bound
        if (!b.empty()) topo.check(b.node);
    // offsets from the grain holding data[0] (`lead` bytes before it; 0 for numaplace's allocations)
    const std::size_t grain = e.alignment(), page = detail::page_size();
    const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(data), lead = base % grain, origin = base - lead;
    for (std::size_t k = 0; k < e.block_count(); ++k) {
        const block b = e.block(k);
        if (b.empty() || topo.at(b.node).has_cpus()) continue;
        // its whole pages inside the data (a page the data shares with other memory keeps its policy)
        const auto range = e.page_bytes(k, allocated, lead);
        const std::uintptr_t from = detail::round_up(std::max<std::uintptr_t>(origin + range.first, base), page);
        const std::uintptr_t to = std::min<std::uintptr_t>(origin + range.second, detail::round_up(base + bytes, page));
        if (from < to)
            detail::place(reinterpret_cast<void*>(from), to - from, memory::policy_mode::preferred, node_set{b.node},
                          fallback::degrade, "first_touch: a memory-only node's block: ", detail::range_origin::foreign);
    }
    // a subrange [i, j) of a block touches the grains whose first byte it holds (data[0]'s for i = 0)
    const auto owned_from = [&](std::size_t i) -> std::uintptr_t {
        return i == 0 ? base : std::min(base + bytes, origin + detail::round_up(lead + i * s, grain));
    };
    parallel_for(part, [&](subrange r) {
        const std::uintptr_t from = owned_from(r.begin()), to = owned_from(r.end());
        if (from < to) memory::touch(reinterpret_cast<void*>(from), to - from);
    }, std::max<std::size_t>(1, grain / s));
}

/// \effects `first_touch(data, rows.elements())`.
template <class T>
void first_touch(T* data, const row_partition<T>& rows) {
    first_touch(data, rows.elements());
}

/// \effects `first_touch(c.data(), partition_of(c))`.
template <class Container, class = std::enable_if_t<detail::is_partitioned_container<Container>::value>>
void first_touch(Container& c) {
    first_touch(c.data(), partition_of(c));
}

} // namespace numaplace

#endif
