// omp.hpp: the team's nodes read from its binding, an unbound team refused, static_partition against
// the OpenMP runtime's own schedule(static) (the oracle), the pages an unchanged OpenMP loop touches,
// parallel_for's coverage, nodes, exceptions and smaller teams. OpenMP reads its environment once, at
// start-up: each test runs again in a fresh process of this binary with the environment it needs.
#include <numaplace/allocator.hpp>
#include <numaplace/diagnostics.hpp>
#include <numaplace/memory.hpp>
#include <numaplace/omp.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>

#include <child.hpp>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace np = numaplace;
using namespace numaplace;

namespace {
const std::size_t page = detail::page_size();
const bool fresh = std::getenv("NUMAPLACE_OMP_TEST_CHILD") != nullptr;

// Runs the current test again in a fresh process of this binary with `env` set. \returns its exit code.
int rerun_with(const std::vector<std::pair<std::string, std::string>>& env) {
    return numaplace_test::rerun_current_test("NUMAPLACE_OMP_TEST_CHILD", env);
}
// The CPUs of this process, node by node.
std::vector<unsigned> all_cpus() {
    std::vector<unsigned> cpus;
    for (const auto& n : topology::get().nodes()) cpus.insert(cpus.end(), n.cpus.begin(), n.cpus.end());
    return cpus;
}
// A team bound one thread per CPU of this process, in CPU order.
const std::vector<std::pair<std::string, std::string>> bound = {
    {"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "threads"}, {"OMP_NUM_THREADS", std::to_string(all_cpus().size())}};
#define NUMAPLACE_IN_FRESH_PROCESS(env)          \
    if (!fresh) {                                \
        EXPECT_EQ(rerun_with(env), 0);           \
        return;                                  \
    }

// The node each thread of a team of `threads` runs on now, by sched_getcpu (not by its affinity).
std::vector<int> running_nodes(int threads) {
    std::vector<int> node(static_cast<std::size_t>(threads), -2);
#pragma omp parallel num_threads(threads)
    node[static_cast<std::size_t>(omp_get_thread_num())] = topology::get().current_node();
    return node;
}
// Checks `part` against the runtime's owner thread of each index (the oracle): every index covered once,
// an index off its owner's node only within `step` indexes of its block's edges, at most (nodes - 1) ×
// `slack` of them. `what` names the case in failures.
// Every index's owner thread is on its block's node: compute edges are exact (issue 47).
void expect_owners_on_block_nodes(const basic_partition& part, const std::vector<int>& owner, const omp::team& tm,
                                  std::size_t step, std::size_t slack, const std::string& what) {
    std::size_t covered = 0, off = 0;
    for (const block& b : part.blocks()) {
        covered += b.size();
        for (std::size_t i = b.begin; i < b.end; ++i) {
            const int node = tm.node_of(owner[i]);
            if (node == b.node) continue;
            EXPECT_TRUE(i - b.begin < step || b.end - i <= step)
                << what << " index " << i << " owner on node " << node << ", block of node " << b.node;
            ++off;
        }
    }
    EXPECT_EQ(covered, owner.size()) << what;
    EXPECT_LE(off, (tm.nodes().size() - 1) * slack) << what;
}
} // namespace

TEST(omp, a_bound_team_has_each_threads_node) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const topology& topo = topology::get();
    ASSERT_EQ(static_cast<std::size_t>(tm.size()), all_cpus().size());
    const std::vector<int> running = running_nodes(tm.size());
    for (int t = 0; t < tm.size(); ++t) EXPECT_EQ(tm.node_of(t), running[static_cast<std::size_t>(t)]) << "thread " << t;
    EXPECT_EQ(tm.nodes(), topo.with_cpus());
    for (const auto& n : topo.nodes())
        EXPECT_EQ(tm.threads_on(n.id), n.cpus.size()) << "node " << n.id; // one thread per CPU
    EXPECT_THROW(omp::team::current(0), std::invalid_argument);
}

TEST(omp, an_unbound_team_is_refused_naming_a_thread) {
    NUMAPLACE_IN_FRESH_PROCESS((std::vector<std::pair<std::string, std::string>>{{"OMP_PROC_BIND", "false"}, {"OMP_NUM_THREADS", "4"}}));
    if (topology::get().with_cpus().size() > 1) {
        try {
            (void)omp::team::current();
            ADD_FAILURE() << "an unbound team on " << topology::get().with_cpus().size() << " nodes was accepted";
        } catch (const omp::unbound_team& e) {
            EXPECT_EQ(e.thread(), 0);
            EXPECT_NE(std::string(e.what()).find("OMP_PROC_BIND"), std::string::npos) << e.what();
        }
    } else { // one node: every thread of any team is on it
        const omp::team tm = omp::team::current();
        EXPECT_EQ(tm.size(), 4);
        EXPECT_EQ(tm.threads_on(topology::get().all()[0]), 4u);
    }
}

TEST(omp, threads_whose_nodes_are_not_in_thread_order_are_refused) {
    // places listed from the last CPU down: thread 0 on the last node
    std::string places;
    const std::vector<unsigned> cpus = all_cpus();
    for (std::size_t k = cpus.size(); k-- > 0;) places += "{" + std::to_string(cpus[k]) + "}" + (k ? "," : "");
    NUMAPLACE_IN_FRESH_PROCESS((std::vector<std::pair<std::string, std::string>>{
        {"OMP_PROC_BIND", "close"}, {"OMP_PLACES", places}, {"OMP_NUM_THREADS", std::to_string(cpus.size())}}));
    if (topology::get().with_cpus().size() > 1) {
        EXPECT_THROW((void)omp::team::current(), omp::unbound_team);
    } else {
        EXPECT_NO_THROW((void)omp::team::current());
    }
}

// The oracle: the OpenMP runtime's own schedule(static). Every index's owner thread is on the node of
// the partition's block holding it, edges included (compute edges are exact; pages follow them).
TEST(omp, static_partition_matches_schedule_static) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const std::size_t per_page = page / sizeof(double), t = static_cast<std::size_t>(tm.size());
    for (std::size_t n : {std::size_t(0), std::size_t(1), t - 1, t, t + 1, per_page - 1, per_page, 10 * per_page + 7,
                          std::size_t(1000003)}) {
        std::vector<int> owner(n, -1);
#pragma omp parallel for schedule(static) num_threads(tm.size())
        for (std::size_t i = 0; i < n; ++i) owner[i] = omp_get_thread_num();
        const partition<double> part = omp::static_partition<double>(n, tm);
        ASSERT_EQ(part.size(), n);
        expect_owners_on_block_nodes(part.untyped(), owner, tm, 0, 0, "n=" + std::to_string(n));
        // the oracle's count per node against the closed form
        for (std::size_t k = 0; k < t; ++k) {
            const std::size_t got = static_cast<std::size_t>(std::count(owner.begin(), owner.end(), static_cast<int>(k)));
            EXPECT_EQ(got, omp::static_share(n, t, k)) << "n=" << n << " thread " << k;
        }
    }
}

// static_rows: the rows a schedule(static) loop over m rows gives each node (the oracle: the runtime's
// own owner of each row), in whole rows; a row off its thread's node only within an alignment step of a
// block edge (a page, or a huge page with THP), none when a row is a whole number of those.
TEST(omp, static_rows_matches_a_static_loop_over_rows) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const std::size_t t = static_cast<std::size_t>(tm.size());
    for (std::size_t row_length : {std::size_t(1), std::size_t(7), page / sizeof(double), 3 * page / sizeof(double) + 5,
                                   (std::size_t(2) << 20) / sizeof(double)})
        for (std::size_t m : {std::size_t(0), std::size_t(1), t - 1, t, t + 1, std::size_t(97), std::size_t(4099)}) {
            std::vector<int> owner(m, -1);
#pragma omp parallel for schedule(static) num_threads(tm.size())
            for (std::size_t i = 0; i < m; ++i) owner[i] = omp_get_thread_num();
            const row_partition<double> part = omp::static_rows<double>(m, row_length, tm);
            ASSERT_EQ(part.size(), m);
            ASSERT_EQ(part.row_length(), row_length);
            expect_owners_on_block_nodes(part.untyped(), owner, tm, 0, 0,
                                         "m=" + std::to_string(m) + " row_length=" + std::to_string(row_length));
        }
}

// An unchanged OpenMP loop (schedule(static)) first-touches an unplaced buffer of small pages where
// static_partition says, but the page at each block edge; through partitioned_allocator every page is
// where it says.
TEST(omp, an_unchanged_static_loop_puts_pages_where_static_partition_says) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const std::size_t n = 4 * 1024 * 1024 / sizeof(double);
    const partition<double> part = omp::static_partition<double>(n, tm);
    auto* raw = static_cast<double*>(memory::map(n * sizeof(double)));
    memory::forbid_huge_pages(raw, n * sizeof(double)); // with THP a 2 MiB page goes whole to its first toucher
#pragma omp parallel for schedule(static) num_threads(tm.size())
    for (std::size_t i = 0; i < n; ++i) raw[i] = 1.0;
    const partition_locality first_touch = where(raw, part);
    EXPECT_EQ(first_touch.histogram.untouched, 0u);
    EXPECT_LE(first_touch.remote, tm.nodes().size() - 1) << "at most the page at each block edge";
    memory::unmap(raw, n * sizeof(double));

    partitioned_vector<double> v(n, partitioned_allocator<double>(part));
#pragma omp parallel for schedule(static) num_threads(tm.size())
    for (std::size_t i = 0; i < n; ++i) v[i] = 2.0;
    const partition_locality placed = where(v.data(), part);
    EXPECT_EQ(placed.remote, 0u);
    EXPECT_EQ(placed.histogram.untouched, 0u);
}

TEST(omp, parallel_for_visits_every_index_once_on_its_blocks_node) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(777), std::size_t(300007)}) {
        const partition<double> part = omp::static_partition<double>(n, tm);
        std::vector<std::atomic<int>> seen(n);
        std::atomic<std::size_t> off_node{0};
        omp::parallel_for(part, [&](subrange r) {
            if (topology::get().current_node() != r.node()) off_node.fetch_add(1);
            for (std::size_t i = r.begin(); i < r.end(); ++i) seen[i].fetch_add(1);
        }, tm);
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "n=" << n << " i=" << i;
        EXPECT_EQ(off_node.load(), 0u) << "chunks ran on another node than their block's";
        // index bodies and grains: 1, 5, a block, beyond any block, SIZE_MAX (no cursor may wrap)
        for (std::size_t grain : {std::size_t(1), std::size_t(5), n, n + 1, SIZE_MAX}) {
            std::vector<std::atomic<int>> again(n);
            omp::parallel_for(part, [&](std::size_t i) { again[i].fetch_add(1); }, tm, grain);
            for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(again[i].load(), 1) << "grain " << grain << ", n=" << n << " i=" << i;
        }
    }
    // a partitioned container follows its own partition
    partitioned_vector<int> c(100000, 0, partitioned_allocator<int>(omp::static_partition<int>(100000, tm)));
    omp::parallel_for(c, [&](std::size_t i) { c[i] += 1; }, tm);
    EXPECT_EQ(std::count(c.begin(), c.end(), 1), 100000);
}

TEST(omp, parallel_for_exceptions_reach_the_caller) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const partition<int> part = omp::static_partition<int>(100000, tm);
    std::atomic<std::size_t> ran{0};
    EXPECT_THROW(omp::parallel_for(part, [&](std::size_t i) {
        ran.fetch_add(1);
        if (i == 4242) throw std::out_of_range("4242");
    }, tm, 16), std::out_of_range);
    EXPECT_LT(ran.load(), 100000u) << "the other threads kept claiming chunks after the throw";
}

TEST(omp, a_smaller_team_still_covers_every_index_and_says_so) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const partition<int> part = omp::static_partition<int>(50000, tm);
    std::vector<std::atomic<int>> seen(50000);
    const std::size_t before = degradations().size();
    omp_set_max_active_levels(1);
#pragma omp parallel num_threads(2)
    {
#pragma omp master
        omp::parallel_for(part, [&](std::size_t i) { seen[i].fetch_add(1); }, tm); // nested: a team of one
    }
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
    if (tm.size() > 1) {
        ASSERT_GT(degradations().size(), before);
        EXPECT_NE(degradations().back().find("omp::parallel_for"), std::string::npos);
    }
}

// A team read at top level, reused inside a nested region (nesting on, OMP_PROC_BIND=spread or close,
// OMP_PLACES=cores): the nested team has as many threads as the team, but they sit where the outer
// thread's places put them, not on the team's nodes (the outside tester's case: in the 4-node guest 24
// of 32 chunks ran off their block's node with spread, 32 of 32 with close, and nothing was recorded).
// The oracle: a raw nested region reading each thread's CPU affinity, as omp::team does. No thread of
// parallel_for's region may run a chunk of a block off that block's node; every index still runs once;
// when some thread is off its team node, exactly one degradation per call names it and both nodes.
namespace {
int affinity_node() {
    cpu_set_t set;
    CPU_ZERO(&set);
    return ::sched_getaffinity(0, sizeof set, &set) == 0 ? topology::get().node_of_cpus(set) : -1;
}
void nested_team_off_its_nodes(const char* bind) {
    const omp::team tm = omp::team::current(); // top level
    const std::size_t n = 300007;
    const partition<int> part = omp::static_partition<int>(n, tm);
    std::vector<std::atomic<int>> seen(n);
    std::vector<int> where_now(static_cast<std::size_t>(tm.size()), -2);
    std::atomic<std::size_t> in_region_off{0}, chunks{0};
    std::size_t count_before = 0, count_after = 0;
    omp_set_max_active_levels(2);
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 1) {
        const int level = omp_get_level();
#pragma omp parallel num_threads(tm.size()) // the oracle: where the nested team's threads are
        where_now[static_cast<std::size_t>(omp_get_thread_num())] = affinity_node();
        count_before = degradation_count();
        omp::parallel_for(part, [&](subrange r) {
            chunks.fetch_add(1);
            if (omp_get_level() > level && affinity_node() != r.node()) in_region_off.fetch_add(1);
            for (std::size_t i = r.begin(); i < r.end(); ++i) seen[i].fetch_add(1);
        }, tm, 64);
        count_after = degradation_count();
    }
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << bind << " i=" << i;
    EXPECT_EQ(in_region_off.load(), 0u) << bind << ": " << in_region_off.load() << " of " << chunks.load()
                                        << " chunks ran in the region on a thread off their block's node";
    int first_off = -1, off = 0;
    for (int t = 0; t < tm.size(); ++t)
        if (where_now[static_cast<std::size_t>(t)] != tm.node_of(t)) {
            if (first_off < 0) first_off = t;
            ++off;
        }
    if (tm.nodes().size() > 1) // two nodes or more: the nested team is not the team read at top level
        ASSERT_GT(off, 0) << bind << ": the nested team is on the team's nodes; this test checks nothing here";
    if (off == 0) {
        EXPECT_EQ(count_after, count_before) << bind;
        return;
    }
    EXPECT_EQ(count_after, count_before + 1) << bind << ": one degradation per call";
    const std::string said = "thread " + std::to_string(first_off) + " of " + std::to_string(tm.size());
    const std::vector<std::string> log = degradations();
    const auto it = std::find_if(log.begin(), log.end(), [&](const std::string& m) {
        return m.find("omp::parallel_for") != std::string::npos && m.find(said) != std::string::npos &&
               m.find("node " + std::to_string(where_now[static_cast<std::size_t>(first_off)])) != std::string::npos &&
               m.find("node " + std::to_string(tm.node_of(first_off))) != std::string::npos;
    });
    EXPECT_NE(it, log.end()) << bind << ": no degradation names " << said << ", on node "
                             << where_now[static_cast<std::size_t>(first_off)] << ", the team's node " << tm.node_of(first_off);
}
} // namespace

TEST(omp_attack, a_team_reused_in_a_nested_spread_region_runs_no_chunk_off_its_blocks_node) {
    NUMAPLACE_IN_FRESH_PROCESS((std::vector<std::pair<std::string, std::string>>{
        {"OMP_PROC_BIND", "spread"}, {"OMP_PLACES", "cores"}, {"OMP_NUM_THREADS", std::to_string(all_cpus().size())}}));
    nested_team_off_its_nodes("spread");
}

TEST(omp_attack, a_team_reused_in_a_nested_close_region_runs_no_chunk_off_its_blocks_node) {
    NUMAPLACE_IN_FRESH_PROCESS((std::vector<std::pair<std::string, std::string>>{
        {"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "cores"}, {"OMP_NUM_THREADS", std::to_string(all_cpus().size())}}));
    nested_team_off_its_nodes("close");
}

TEST(omp_attack, a_block_on_a_node_without_threads_is_refused_before_running) {
    // a team on the first node's CPUs only
    const topology& topo = topology::get();
    const node& first = topo.at(topo.with_cpus()[0]);
    std::string places;
    for (std::size_t k = 0; k < first.cpus.size(); ++k) places += "{" + std::to_string(first.cpus[k]) + "}" + (k + 1 < first.cpus.size() ? "," : "");
    NUMAPLACE_IN_FRESH_PROCESS((std::vector<std::pair<std::string, std::string>>{
        {"OMP_PROC_BIND", "close"}, {"OMP_PLACES", places}, {"OMP_NUM_THREADS", std::to_string(first.cpus.size())}}));
    const omp::team tm = omp::team::current();
    EXPECT_EQ(tm.nodes(), node_set{first.id});
    // every node with CPUs, named: the default partition follows the main thread's binding, which libgomp
    // narrowed to the first place here (OMP_PROC_BIND; docs/parallel_for.md, "The process's binding")
    const partition<int> all(100000, topo.with_cpus());
    std::atomic<int> ran{0};
    if (topo.with_cpus().size() > 1) {
        EXPECT_THROW(omp::parallel_for(all, [&](std::size_t) { ran.fetch_add(1); }, tm), invalid_placement);
        EXPECT_EQ(ran.load(), 0);
    } else {
        omp::parallel_for(all, [&](std::size_t) { ran.fetch_add(1); }, tm);
        EXPECT_EQ(ran.load(), 100000);
    }
}

// Index spaces up to SIZE_MAX (a partition of indexes, no data): every index once, no cursor wraps.
// static_rows at the byte limit: m × row_length × sizeof(T) one past what size_t holds is refused (no
// wrapped split); one row of SIZE_MAX / sizeof(T) / 2 elements is still a partition of one row.
TEST(omp_attack, static_rows_whose_bytes_overflow_are_refused) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    const std::size_t row = 1024;
    EXPECT_THROW(omp::static_rows<double>(SIZE_MAX / (row * sizeof(double)) + 1, row, tm), invalid_placement);
    EXPECT_THROW(omp::static_rows<double>(2, SIZE_MAX / sizeof(double), tm), invalid_placement);
    const row_partition<double> one = omp::static_rows<double>(1, SIZE_MAX / sizeof(double) / 2, tm);
    EXPECT_EQ(one.size(), 1u);
    std::size_t rows = 0;
    for (const block& b : one.untyped().blocks()) rows += b.size();
    EXPECT_EQ(rows, 1u);
}

TEST(omp_attack, an_index_space_near_size_max_is_covered_once) {
    NUMAPLACE_IN_FRESH_PROCESS(bound);
    const omp::team tm = omp::team::current();
    for (const std::size_t n : {SIZE_MAX - 1, SIZE_MAX / 3 + 7}) {
        const partition<char> part = omp::static_partition<char>(n, tm);
        for (const std::size_t grain : {std::size_t(0), SIZE_MAX / 5, SIZE_MAX}) {
            std::mutex m;
            detail::wide_uint covered = 0;
            std::size_t calls = 0, wrong = 0;
            omp::parallel_for(part, [&](subrange r) {
                std::lock_guard<std::mutex> lock(m);
                covered += r.size();
                ++calls;
                if (r.end() > n || r.begin() >= r.end()) ++wrong;
            }, tm, grain);
            EXPECT_EQ(wrong, 0u) << "n=" << n << " grain=" << grain;
            EXPECT_TRUE(covered == n) << "n=" << n << " grain=" << grain << ": " << static_cast<double>(covered);
            EXPECT_LE(calls, 64u * static_cast<std::size_t>(tm.size()) + 8) << "n=" << n << " grain=" << grain;
        }
    }
}
