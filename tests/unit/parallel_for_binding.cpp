// The process's binding is the machine (issue 49): a process bound to part of the machine, as taskset,
// `mpirun --bind-to` or Slurm bind it, gets default partitions over its nodes only, weighted by its CPUs
// there, arenas of exactly those CPUs, and loop bodies on those CPUs only. Each case runs in a fresh copy
// of this binary bound before exec (as a launcher binds it) or re-bound before its first loop, in the
// multi-node guests with and without tbbbind (part of test_parallel_for: no guest boot of its own).

#include <numaplace/allocator.hpp>
#include <numaplace/arena_map.hpp>
#include <numaplace/arenas.hpp>
#include <numaplace/binding.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/replicated.hpp>
#include <numaplace/where.hpp>

#include <gtest/gtest.h>
#include <child.hpp>
#include <owned_pages.hpp>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <sched.h>
#include <unistd.h>

using namespace numaplace;

namespace {

const char* const fresh_marker = "NUMAPLACE_BINDING_CHILD";
bool in_child() { return std::getenv(fresh_marker) != nullptr; }

// The CPUs as text for the child ("0,2"), and back.
std::string cpu_list(const std::vector<unsigned>& cpus) {
    std::string s;
    for (unsigned c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
}
std::vector<unsigned> affinity() {
    cpu_set_t set;
    CPU_ZERO(&set);
    EXPECT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
    std::vector<unsigned> cpus;
    for (unsigned c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}
bool bind_this_thread(const std::vector<unsigned>& cpus) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (unsigned c : cpus) CPU_SET(c, &set);
    return ::sched_setaffinity(0, sizeof set, &set) == 0;
}
// Every thread of the process, as `taskset -a -p` re-binds it.
bool bind_this_process(const std::vector<unsigned>& cpus) {
    detail::hwloc_bitmap_ptr set = detail::make_bitmap();
    for (unsigned c : cpus) hwloc_bitmap_set(set.get(), c);
    return hwloc_set_cpubind(topology::get().native(), set.get(), HWLOC_CPUBIND_PROCESS) == 0;
}

// Runs the current test again in a fresh process bound to `cpus` before exec (inherited, as from a
// launcher); `when` = "before-exec", or "before-loop" (the copy starts unbound and binds itself after
// loading the topology, before its first loop), or "after-loop" (after its first loop).
int run_bound(const std::vector<unsigned>& cpus, const char* when) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string filter = std::string("--gtest_filter=") + test->test_suite_name() + "." + test->name();
    return numaplace_test::run_child(
        [&] {
            if (std::string(when) == "before-exec" && !bind_this_thread(cpus)) return 96;
            ::setenv(fresh_marker, "1", 1);
            ::setenv("NUMAPLACE_BINDING_CPUS", cpu_list(cpus).c_str(), 1);
            ::setenv("NUMAPLACE_BINDING_WHEN", when, 1);
            ::execl("/proc/self/exe", "test", filter.c_str(), static_cast<char*>(nullptr));
            return 97;
        },
        180);
}

std::vector<unsigned> cpus_from_env() {
    std::vector<unsigned> cpus;
    const std::string text = std::getenv("NUMAPLACE_BINDING_CPUS");
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t comma = text.find(',', start);
        cpus.push_back(static_cast<unsigned>(std::stoul(text.substr(start, comma - start))));
        start = comma == std::string::npos ? text.size() : comma + 1;
    }
    return cpus;
}

// The child's checks: the binding read, the default partition's nodes and weights (an odd size), every
// body's CPU within the binding and within its block's node's CPUs of it, every page on its owner's node,
// the arenas' report.
void check_bound_process() {
    const topology& topo = topology::get();
    const std::string when = std::getenv("NUMAPLACE_BINDING_WHEN");
    const std::vector<unsigned> cpus = cpus_from_env();
    if (when == "before-loop") ASSERT_TRUE(bind_this_process(cpus)); // after topology::get(), before any loop
    if (when == "after-loop") {
        parallel_for(partition<int>(1000), [](subrange) {}); // arenas made for the whole machine
        ASSERT_TRUE(bind_this_process(cpus));
        const arena_report r = arena_capabilities();
        EXPECT_TRUE(r.rebound) << r.reason;
        EXPECT_NE(r.reason.find("re-bound after its arenas were made"), std::string::npos) << r.reason;
        // the loops and defaults keep the arenas' binding: the whole machine's
        EXPECT_EQ(cpu_binding::of(), cpu_binding::whole(topo));
        EXPECT_EQ(partition<double>(1001).nodes(), topo.with_cpus());
        return;
    }
    ASSERT_EQ(affinity(), cpus);

    // The binding, exactly: each node's CPUs that are in the affinity.
    const cpu_binding b = cpu_binding::of();
    std::vector<int> nodes;
    std::vector<std::size_t> weights;
    for (const node& n : topo.nodes()) {
        std::vector<unsigned> mine;
        for (unsigned c : n.cpus)
            for (unsigned a : cpus)
                if (a == c) mine.push_back(c);
        EXPECT_EQ(b.cpus(n.id), mine) << "node " << n.id;
        if (!mine.empty()) { // weight: the cores holding them, each once
            std::set<unsigned> cores;
            for (unsigned c : mine) {
                const hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo.native(), c);
                const hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(topo.native(), HWLOC_OBJ_CORE, pu);
                cores.insert(core ? core->logical_index : 100000 + c);
            }
            nodes.push_back(n.id);
            weights.push_back(cores.size());
        }
    }
    EXPECT_EQ(b.nodes(), node_set(nodes));
    EXPECT_EQ(b.weights(), weights);

    // The default partition, its rows and work forms: the binding's nodes, weighted by its CPUs.
    const std::size_t n = 100003; // odd, prime
    const partition<double> part(n);
    EXPECT_EQ(part.nodes(), node_set(nodes));
    EXPECT_EQ(part, partition<double>(n, node_set(nodes), weights));
    EXPECT_EQ(partition<double>::rows(101, 1001).nodes(), node_set(nodes));
    std::vector<std::size_t> prefix(n + 1);
    for (std::size_t i = 0; i <= n; ++i) prefix[i] = i * 3;
    EXPECT_EQ(partition<double>::by_work(n, prefix.data()).nodes(), node_set(nodes));
    EXPECT_EQ(replicated<int>(std::vector<int>(10, 1)).nodes(), node_set(nodes));

    // Every body on a CPU of the binding, each block's on its node's CPUs of it when the arenas spread.
    const arena_report r = arena_capabilities();
    EXPECT_EQ(r.binding, b.to_string());
    EXPECT_FALSE(r.rebound) << r.reason;
    EXPECT_NE(r.pinning, pinning::none) << r.reason;
    if (nodes.size() == 1) EXPECT_EQ(r.pinning, pinning::single_node) << r.reason;
    if (const char* expect = std::getenv("NUMAPLACE_EXPECT_PINNING"))
        if (nodes.size() > 1) {
            // tbbbind where it loads and lists every bound node by our id (oneTBB 2021.8's tbbbind lists
            // nodes 1 2 3 of a process bound to them as 0 2 3: then the hwloc observer pins)
            bool listed = true;
            for (int k : nodes)
                listed = listed && std::find(r.tbb_numa_nodes.begin(), r.tbb_numa_nodes.end(), k) != r.tbb_numa_nodes.end();
            const std::string want = std::string(expect) == "tbbbind" && !listed ? "hwloc" : expect;
            EXPECT_EQ(r.pinning == pinning::tbbbind ? "tbbbind" : r.pinning == pinning::hwloc ? "hwloc" : "other", want)
                << r.reason;
        }
    std::mutex m;
    std::vector<std::set<unsigned>> seen(topo.size());
    std::set<unsigned> all_seen;
    std::vector<std::atomic<int>> covered(n);
    auto record = [&](int node) {
        const int cpu = ::sched_getcpu();
        std::lock_guard<std::mutex> lock(m);
        all_seen.insert(static_cast<unsigned>(cpu));
        if (node >= 0) seen[static_cast<std::size_t>(node)].insert(static_cast<unsigned>(cpu));
    };
    for (int round = 0; round < 20; ++round) // enough rounds that every worker takes part
        parallel_for(part, [&](subrange s) {
            for (std::size_t i = s.begin(); i < s.end(); ++i) covered[i].fetch_add(1, std::memory_order_relaxed);
            record(detail::current_block_node());
        });
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(covered[i].load(), 20) << "index " << i;
    for (unsigned c : all_seen)
        EXPECT_NE(std::find(cpus.begin(), cpus.end(), c), cpus.end()) << "a body ran on CPU " << c << ", outside the binding";
    if (r.pinning == pinning::tbbbind || r.pinning == pinning::hwloc)
        for (int k : nodes)
            for (unsigned c : seen[static_cast<std::size_t>(k)])
                EXPECT_EQ(topo.node_of_cpu(c), k) << "node " << k << "'s block ran on CPU " << c;

    // An explicit partition naming every node (bound or not, memory-only too) still runs within the binding.
    all_seen.clear();
    parallel_for(partition<double>(n, topo.all(), std::vector<std::size_t>(topo.size(), 1)),
                 [&](subrange) { record(-1); });
    for (unsigned c : all_seen)
        EXPECT_NE(std::find(cpus.begin(), cpus.end(), c), cpus.end()) << "a body ran on CPU " << c << ", outside the binding";

    // The pages of a default-partitioned vector on their owners' nodes, exactly.
    std::vector<double, partitioned_allocator<double>> v(n, partitioned_allocator<double>(part));
    numaplace_test::expect_pages_on_their_owners(v.data(), part, "default partition, bound process");
}

// The binding cases need two nodes with CPUs.
std::vector<std::vector<unsigned>> cpus_by_node() {
    std::vector<std::vector<unsigned>> out;
    for (const node& n : topology::get().nodes())
        if (n.has_cpus()) out.push_back(n.cpus);
    return out;
}

} // namespace

TEST(binding, one_cpu_per_node_as_bind_to_core) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    std::vector<unsigned> cpus;
    for (const auto& c : by_node) cpus.push_back(c.back());
    EXPECT_EQ(run_bound(cpus, "before-exec"), 0);
}

TEST(binding, one_cpu_of_the_last_node) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    EXPECT_EQ(run_bound({by_node.back().front()}, "before-exec"), 0);
}

TEST(binding, one_whole_node_as_cpunodebind) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    EXPECT_EQ(run_bound(by_node.back(), "before-exec"), 0);
}

TEST(binding, every_node_but_the_first) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    std::vector<unsigned> cpus;
    for (std::size_t k = 1; k < by_node.size(); ++k) cpus.insert(cpus.end(), by_node[k].begin(), by_node[k].end());
    EXPECT_EQ(run_bound(cpus, "before-exec"), 0);
}

TEST(binding, rebound_before_the_first_loop_is_followed) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    std::vector<unsigned> cpus;
    for (const auto& c : by_node) cpus.push_back(c.front());
    EXPECT_EQ(run_bound(cpus, "before-loop"), 0);
}

TEST(binding, rebound_after_the_first_loop_is_reported_and_not_followed) {
    if (in_child()) return check_bound_process();
    const auto by_node = cpus_by_node();
    if (by_node.size() < 2) GTEST_SKIP() << "needs two nodes with CPUs";
    EXPECT_EQ(run_bound({by_node.front().front()}, "after-loop"), 0);
}

// On any machine: the binding of an unbound process is every CPU of every node; a synthetic topology's
// binding is all of it whatever the process's affinity.
TEST(binding, unbound_is_whole_and_a_foreign_topology_is_whole) {
    const topology& topo = topology::get();
    std::vector<unsigned> every;
    for (const node& n : topo.nodes()) every.insert(every.end(), n.cpus.begin(), n.cpus.end());
    std::sort(every.begin(), every.end());
    if (affinity() == every) {
        EXPECT_TRUE(cpu_binding::current().whole_of(topo));
        EXPECT_EQ(cpu_binding::current().nodes(), topo.with_cpus());
    }
    const auto synthetic = topology::from_synthetic("pack:2 numa:1 core:3 pu:1");
    const cpu_binding s = cpu_binding::of(*synthetic);
    EXPECT_TRUE(s.whole_of(*synthetic));
    EXPECT_EQ(s.nodes(), node_set({0, 1}));
    EXPECT_EQ(s.weights(), (std::vector<std::size_t>{3, 3}));
    EXPECT_EQ(s.to_string(), "node 0: cpus 0 1 2; node 1: cpus 3 4 5");
    EXPECT_EQ(cpu_binding().to_string(), "no CPU");
    EXPECT_EQ(cpu_binding().cpu_count(), 0u);
    EXPECT_TRUE(cpu_binding().cpus(-1).empty());
    EXPECT_TRUE(s.cpus(2).empty());
    EXPECT_EQ(partition<double>(1001, *synthetic).nodes(), node_set({0, 1}));
    // two hardware threads a core: the weights are cores, the CPUs all of them
    const auto smt = topology::from_synthetic("pack:2 numa:1 core:2 pu:2");
    const cpu_binding t = cpu_binding::of(*smt);
    EXPECT_EQ(t.weights(), (std::vector<std::size_t>{2, 2}));
    EXPECT_EQ(t.cpus(1), (std::vector<unsigned>{4, 5, 6, 7}));
    EXPECT_EQ(t.cpu_count(), 8u);
    EXPECT_EQ(partition<double>(1001, *smt), partition<double>(1001, smt->with_cpus(), {}, edge_alignment::automatic, *smt));
}

// Loops in the user's arenas (issue 49): block k in the arena given for its node, which the body sees as
// its arena (a concurrency unique to each node's arena), on any machine.
TEST(user_arenas, each_block_runs_in_the_arena_given_for_its_node) {
    const topology& topo = topology::get();
    std::vector<std::unique_ptr<tbb::task_arena>> mine;
    arena_map map;
    for (const node& n : topo.nodes()) {
        mine.push_back(std::make_unique<tbb::task_arena>(n.id + 3));
        map.set(n.id, *mine.back());
    }
    const std::size_t n = 10007;
    const partition<double> part(n, topo.all(), std::vector<std::size_t>(topo.size(), 1));
    std::vector<std::atomic<int>> covered(n);
    std::atomic<int> wrong_arena{0};
    parallel_for(part, [&](subrange s) {
        const int node = detail::current_block_node();
        if (tbb::this_task_arena::max_concurrency() != node + 3) wrong_arena.fetch_add(1);
        for (std::size_t i = s.begin(); i < s.end(); ++i) covered[i].fetch_add(1);
    }, map);
    EXPECT_EQ(wrong_arena.load(), 0);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(covered[i].load(), 1) << "index " << i;
    // rows too, with a grain
    const auto rows = partition<double>::rows(101, 7, topo.all(), std::vector<std::size_t>(topo.size(), 1));
    std::atomic<std::size_t> seen{0};
    parallel_for(rows, [&](subrange s) { seen.fetch_add(s.size()); }, map, 4);
    EXPECT_EQ(seen.load(), 101u);
}

TEST(user_arenas, a_node_without_an_arena_is_refused_before_anything_runs) {
    const topology& topo = topology::get();
    tbb::task_arena only(2);
    arena_map map;
    EXPECT_THROW(map.set(static_cast<int>(topo.size()), only), unknown_node);
    EXPECT_THROW(map.set(-1, only), unknown_node);
    EXPECT_FALSE(map.contains(0));
    std::atomic<int> calls{0};
    EXPECT_THROW(parallel_for(partition<int>(100, topo.all(), std::vector<std::size_t>(topo.size(), 1)),
                              [&](subrange) { calls.fetch_add(1); }, arena_map()),
                 invalid_placement);
    const int last = static_cast<int>(topo.size()) - 1;
    map.set(last, only);
    if (topo.size() > 1) {
        EXPECT_THROW(parallel_for(partition<int>(100, topo.all(), std::vector<std::size_t>(topo.size(), 1)),
                                  [&](subrange) { calls.fetch_add(1); }, map),
                     invalid_placement);
    }
    EXPECT_EQ(calls.load(), 0);
    // a partition with blocks only where the map has arenas runs
    parallel_for(partition<int>(100, node_set{last}, {1}), [&](subrange s) { calls.fetch_add(static_cast<int>(s.size())); }, map);
    EXPECT_EQ(calls.load(), 100);
}

// No process-wide oneTBB state: the loops leave oneTBB's limits as they found them.
TEST(user_arenas, the_loops_leave_no_global_control) {
    const std::size_t before = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
    parallel_for(partition<int>(1000), [](subrange) {});
    (void)arena_capabilities();
    EXPECT_EQ(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism), before);
}
